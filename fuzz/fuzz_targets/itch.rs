//! ITCH 5.0 decoders on arbitrary bytes: one message (`decode_any`, `Message::decode`, with a
//! re-encode check) and the same bytes as a BinaryFILE stream. Never panics.
#![no_main]

use bourse::wire::itch::{self, Decoded, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Decoded::Message(message)) = itch::decode_any(data) {
        assert_eq!(message.encoded_len(), data.len());
        let mut buf = [0u8; 128];
        let n = message.encode(&mut buf);
        assert_eq!(Message::decode(&buf[..n]), Ok(message));
    }
    for (index, record) in itch::binary_file::Reader::new(data).enumerate() {
        assert!(index < data.len());
        let Ok(bytes) = record else { break };
        let _ = itch::decode_any(bytes);
    }
});
