//! OUCH 4.2 decoders on arbitrary bytes: byte 0 picks inbound (client) or outbound (server)
//! messages. Whatever decodes must re-encode to something that decodes to the same message.
#![no_main]

use bourse::wire::ouch::{Inbound, Outbound};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, message)) = data.split_first() else {
        return;
    };
    let mut buf = [0u8; 256];
    if which & 1 == 0 {
        if let Ok(decoded) = Inbound::decode(message) {
            assert_eq!(decoded.encoded_len(), message.len());
            let n = decoded.encode(&mut buf);
            assert_eq!(Inbound::decode(&buf[..n]), Ok(decoded));
        }
    } else if let Ok(decoded) = Outbound::decode(message) {
        assert_eq!(decoded.encoded_len(), message.len());
        let n = decoded.encode(&mut buf);
        assert_eq!(Outbound::decode(&buf[..n]), Ok(decoded));
    }
});
