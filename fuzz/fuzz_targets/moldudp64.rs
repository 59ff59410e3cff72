//! MoldUDP64 on arbitrary datagrams: the packet decoder with every message block decoded as
//! ITCH, and the 20-byte re-request decoder. Never panics.
#![no_main]

use bourse::wire::itch;
use bourse::wire::moldudp64::{Packet, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = Packet::decode(data) {
        let _ = (packet.kind(), packet.next_sequence());
        let mut blocks = 0usize;
        for (sequence, message) in packet.messages() {
            blocks += 1;
            assert!(blocks <= usize::from(packet.message_count()));
            assert!(sequence < packet.next_sequence());
            let _ = itch::decode_any(message);
        }
    }
    if let Ok(request) = Request::decode(data) {
        assert_eq!(data.len(), Request::LEN);
        let _ = request.sequence.checked_add(u64::from(request.count));
    }
});
