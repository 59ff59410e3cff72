//! Journal recovery on a directory of arbitrary segment files (and an optional manifest):
//! `verify` must answer without panicking, and so must `verify_vouched` (a snapshot after a
//! record taken from the bytes), which reports what `verify` does whenever `verify` accepts
//! the journal; a reader from the start reads every record `verify` accepts, in order, and
//! (with no torn tail) nothing after them; if `truncate_corrupt_tail` accepts the journal, the
//! result must verify cleanly and a writer must open it and append.
//!
//! Byte 0: bits 0-1 fix-ups (see bourse_fuzz), bit 2 two segments, bit 3 a manifest, bit 4
//! the manifest's boot id is this boot's, bit 5 open a writer after the repair.
//! Bytes 1-3: manifest sealed-through, synced-through, mapped-through. Byte 4: with two
//! segments, the second one's bytes in units of 8 (the last ones of the input; the first
//! segment gets the rest, so it can be full: a rotation's seal, or its loss, near its end).
//! Rest: the segments.
#![no_main]

use bourse::journal::manifest::{self, ManifestState};
use bourse::journal::{
    Durability, JournalConfig, JournalReader, JournalWriter, RecoveryReport, truncate_corrupt_tail,
    verify, verify_vouched,
};
use bourse::types::Timestamp;
use bourse_fuzz::{IMAGE_MAX_PAYLOAD, scratch_dir, segment_image};
use libfuzzer_sys::fuzz_target;

const DAY_EPOCH: u64 = 0;

fuzz_target!(|data: &[u8]| {
    let [flags, sealed, synced, mapped, second_units, rest @ ..] = data else {
        return;
    };
    let dir = scratch_dir("journal-dir");
    let two = flags & 4 != 0;
    let (first, second) = if two {
        rest.split_at(rest.len().saturating_sub(usize::from(*second_units) * 8))
    } else {
        (rest, &[][..])
    };
    let (image, next_seq) = segment_image(first, *flags, 1, Some(1));
    std::fs::write(dir.join("00000001.seg"), &image).unwrap();
    if two {
        let (image, _) = segment_image(second, *flags, 2, Some(next_seq));
        std::fs::write(dir.join("00000002.seg"), &image).unwrap();
    }
    if flags & 8 != 0 {
        let boot_id = if flags & 16 != 0 {
            manifest::current_boot_id()
        } else {
            [7; 16]
        };
        let state = ManifestState {
            day_epoch_unix_ns: u64::from_le_bytes(image[32..40].try_into().unwrap()),
            sealed_through_segment: u64::from(sealed % 4),
            synced_through_seq: u64::from(*synced),
            mapped_through_seq: u64::from(*mapped),
            boot_id,
        };
        manifest::write_durable(&dir, &state).unwrap();
    }
    let full = verify(&dir);
    let vouched = verify_vouched(&dir, u64::from(*synced ^ *mapped));
    if let Ok(full) = &full {
        reads_what_verify_accepts(&dir, full);
        let vouched = vouched.expect("a vouched scan accepts what the full one does");
        let as_full = RecoveryReport {
            vouched_through: 0,
            ..vouched
        };
        assert_eq!(
            &as_full, full,
            "a vouched scan reports what the full one does"
        );
    }
    if let Ok(repaired) = truncate_corrupt_tail(&dir) {
        let verified = verify(&dir);
        assert!(
            verified.is_ok() || repaired.last_seq == 0,
            "repaired journal does not verify: {verified:?} after {repaired:?}"
        );
        if let Ok(verified) = verified {
            assert_eq!(verified.last_seq, repaired.last_seq);
            assert!(verified.torn_tail.is_none());
        }
        if flags & 32 != 0 && repaired.last_seq > 0 {
            let config = JournalConfig {
                segment_bytes: bourse_fuzz::IMAGE_BYTES as u64,
                max_payload_bytes: IMAGE_MAX_PAYLOAD,
                durability: Durability::Flush,
                create_dir: false,
                ..JournalConfig::new(&dir)
            };
            let (mut writer, report) = JournalWriter::open_or_create(config, DAY_EPOCH)
                .expect("a repaired, verified journal opens");
            let last = report.last_seq;
            for n in 1..=3u64 {
                assert_eq!(writer.append(Timestamp(n), 1, b"fuzz").unwrap(), last + n);
            }
            drop(writer);
            assert_eq!(verify(&dir).unwrap().last_seq, last + 3);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
});

/// A reader from record 1 yields `verified.last_seq` records numbered 1, 2, ...; after them
/// it says "nothing yet", or (a torn tail, which `verify` reports and recovery cuts) may
/// refuse the bad record.
fn reads_what_verify_accepts(dir: &std::path::Path, verified: &RecoveryReport) {
    let Ok(mut reader) = JournalReader::open(dir, 1) else {
        assert_eq!(verified.last_seq, 0, "a reader opens what verify accepts");
        return;
    };
    for expected in 1..=verified.last_seq {
        match reader.next() {
            Ok(Some(record)) => assert_eq!(record.seq, expected),
            other => panic!(
                "record {expected} of {}: {:?}",
                verified.last_seq,
                other.map(|r| r.map(|r| r.seq))
            ),
        }
    }
    match reader.next() {
        Ok(None) => {}
        Err(_) if verified.torn_tail.is_some() => {}
        other => panic!(
            "after record {}: {:?}",
            verified.last_seq,
            other.map(|r| r.map(|r| r.seq))
        ),
    }
}
