//! GLIMPSE 5.0 snapshot messages on arbitrary bytes (End of Snapshot re-encoded). Never
//! panics.
#![no_main]

use bourse::wire::glimpse::{EndOfSnapshot, SnapshotMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(SnapshotMessage::End(end)) = SnapshotMessage::decode(data) {
        let mut buf = [0u8; 32];
        let n = end.encode(&mut buf);
        assert_eq!(EndOfSnapshot::decode(&buf[..n]), Ok(end));
    }
});
