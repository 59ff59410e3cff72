//! State snapshot files on arbitrary bytes: a well-formed file is built from the input (its
//! record, streams and state), then damaged where the input says. `Snapshot::decode` (the
//! whole file, what a restore reads) and `snapshot::peek_newest` (the front only, chunk by
//! chunk: what `days::state` reads) must answer without panicking, and must agree: every file
//! decode accepts, peek accepts with the same head and the same first bytes of the state.
//! (Peek checks only the chunks it reads, so it may accept a file damaged further on.)
//!
//! Byte 0: bit 0 damage the file, bit 1 a stream digest state of 1.5 MiB (the head spans two
//! checksummed chunks), bits 2-3 streams - 1. Bytes 1-2: last_seq. Bytes 3-4: where to damage
//! (scaled to the file), byte 5: the damage (xor). Byte 6: bytes of the state to peek. Rest:
//! the state.
#![no_main]

use bourse::snapshot::{self, Snapshot, StreamPosition};
use bourse::types::Timestamp;
use bourse_fuzz::scratch_dir;
use libfuzzer_sys::fuzz_target;

const HEADER_DIGEST: [u8; 32] = [7; 32];

fuzz_target!(|data: &[u8]| {
    let [
        flags,
        seq_lo,
        seq_hi,
        at_lo,
        at_hi,
        damage,
        want,
        state @ ..,
    ] = data
    else {
        return;
    };
    let last_seq = u64::from(u16::from_le_bytes([*seq_lo, *seq_hi]));
    let big = flags & 2 != 0;
    let streams = (0..=((flags >> 2) & 3))
        .map(|i| StreamPosition {
            messages: u64::from(i),
            bytes: u64::from(i) * 10,
            digest_state: (i == 0 && big).then(|| vec![i; 3 << 19]),
        })
        .collect();
    let snapshot = Snapshot {
        last_seq,
        inputs: last_seq.min(u64::from(*seq_lo)),
        timestamp: Timestamp(9),
        record_fingerprint: u32::from(*want),
        header_digest: HEADER_DIGEST,
        streams,
        state: state.to_vec(),
    };
    let mut bytes = snapshot.encode();
    if flags & 1 != 0 {
        let at = usize::from(u16::from_le_bytes([*at_lo, *at_hi])) * bytes.len() / 65_536;
        bytes[at] ^= damage | 1;
    }
    let decoded = Snapshot::decode(&bytes);
    let dir = scratch_dir("snapshot-file");
    let files = snapshot::dir_of(&dir);
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join(format!("snapshot-{last_seq:020}.bin")), &bytes).unwrap();
    let want = usize::from(*want);
    let peeked = snapshot::peek_newest(&dir, &HEADER_DIGEST, want, |_, front| Some(front.to_vec()));
    if let Ok(decoded) = decoded {
        let (head, front) = peeked.expect("peek accepts what decode accepts");
        assert_eq!(head, decoded.without_state());
        assert_eq!(front, decoded.state[..want.min(decoded.state.len())]);
    }
});
