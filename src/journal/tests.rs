//! Journal behaviour tests: recovery at every cut, corruption, gaps, foreign files, a killed
//! writer process, a tailing reader across rotations, truncation, durability handles.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::manifest::{self, ManifestState};
use super::record::{RECORD_HEADER_BYTES, record_span_bytes, rotation_room_bytes, write_record};
use super::segment::{HEADER_BYTES, segment_path};
use super::*;
use crate::types::Timestamp;

const DAY_EPOCH_UNIX_NS: u64 = 20_000 * NANOS_PER_DAY;
const SEGMENT_BYTES: u64 = 8192;
const MAX_PAYLOAD_BYTES: u32 = 512;

/// A scratch directory removed on drop (no extra dependency for one helper).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "bourse-journal-{}-{unique}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    fn journal(&self) -> PathBuf {
        self.0.join("journal")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(dir: &Path, durability: Durability) -> JournalConfig {
    JournalConfig {
        dir: dir.to_path_buf(),
        segment_bytes: SEGMENT_BYTES,
        max_payload_bytes: MAX_PAYLOAD_BYTES,
        durability,
        create_dir: true,
    }
}

/// Deterministic record contents for a sequence number. Payload bytes are odd, so zeroing
/// any payload byte changes the record.
fn payload(seq: u64) -> Vec<u8> {
    let len = (seq * 37 % 150) as usize + 1;
    (0..len)
        .map(|i| ((seq as usize).wrapping_mul(31).wrapping_add(i) as u8) | 1)
        .collect()
}

fn timestamp(seq: u64) -> Timestamp {
    Timestamp(seq * 1_000 + 5)
}

fn kind(seq: u64) -> u8 {
    (seq % 7) as u8
}

fn open(dir: &Path) -> (JournalWriter, RecoveryReport) {
    JournalWriter::open_or_create(config(dir, Durability::Flush), DAY_EPOCH_UNIX_NS)
        .expect("open journal")
}

/// Append records `from..=to` (sequence numbers must follow on).
fn append_range(writer: &mut JournalWriter, from: u64, to: u64) {
    for seq in from..=to {
        let got = writer
            .append(timestamp(seq), kind(seq), &payload(seq))
            .expect("append");
        assert_eq!(got, seq);
    }
}

/// Records `1..records` flushed, then record `records` appended and the writer killed before
/// the next flush: the state a crash mid-batch leaves (the last record never acknowledged).
fn write_journal_last_unflushed(dir: &Path, records: u64) {
    let (mut writer, report) = open(dir);
    assert_eq!(report.last_seq, 0);
    append_range(&mut writer, 1, records - 1);
    writer.flush().expect("flush");
    append_range(&mut writer, records, records);
    writer.crash();
}

fn write_journal(dir: &Path, records: u64) -> RecoveryReport {
    let (mut writer, report) = open(dir);
    assert_eq!(report.last_seq, 0);
    append_range(&mut writer, 1, records);
    writer.flush().expect("flush");
    drop(writer);
    verify(dir).expect("verify")
}

/// Read every record and check it against the deterministic contents; returns the count.
fn check_all(dir: &Path, from_seq: u64) -> u64 {
    let mut reader = JournalReader::open(dir, from_seq).expect("open reader");
    let mut expected = from_seq;
    for _ in 0..10_000_000u64 {
        let Some(record) = reader.next().expect("read") else {
            break;
        };
        assert_eq!(record.seq, expected);
        assert_eq!(record.timestamp, timestamp(expected));
        assert_eq!(record.kind, kind(expected));
        assert_eq!(record.payload, &payload(expected)[..]);
        expected += 1;
    }
    expected - from_seq
}

/// File and byte offset of record `seq`, found by an independent walk over the raw files
/// (first sequence number at header offset 24, records chained by their length words).
fn locate(dir: &Path, seq: u64) -> (PathBuf, u64) {
    // A blank spare (left by a crashed writer) has first sequence number 0: not a segment yet.
    let files: Vec<PathBuf> = segment_files(dir)
        .into_iter()
        .filter(|path| std::fs::read(path).expect("read")[..8] != [0; 8])
        .collect();
    for (position, path) in files.iter().enumerate() {
        let bytes = std::fs::read(path).expect("read");
        let first_seq = u64::from_le_bytes(bytes[24..32].try_into().expect("8"));
        let next_first = files.get(position + 1).map(|next| {
            let next_bytes = std::fs::read(next).expect("read");
            u64::from_le_bytes(next_bytes[24..32].try_into().expect("8"))
        });
        if seq < first_seq || next_first.is_some_and(|next| seq >= next) {
            continue;
        }
        let mut offset = HEADER_BYTES as usize;
        for _ in first_seq..seq {
            let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4"));
            assert!(
                length != 0 && length != u32::MAX,
                "record {seq} not in {}",
                path.display()
            );
            offset += (length as usize).next_multiple_of(8);
        }
        return (path.clone(), offset as u64);
    }
    panic!("record {seq} not found");
}

fn patch(path: &Path, offset_bytes: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for patch");
    file.write_all_at(bytes, offset_bytes).expect("patch");
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    segment::list_segments(dir)
        .expect("list")
        .into_iter()
        .map(|(_, path)| path)
        .collect()
}

#[test]
fn append_rotate_and_read_back() {
    let temp = TempDir::new("basic");
    let dir = temp.journal();
    let report = write_journal(&dir, 500);
    assert_eq!(report.records, 500);
    assert_eq!(report.last_seq, 500);
    assert_eq!(report.last_timestamp, timestamp(500));
    assert_eq!(report.day_epoch_unix_ns, DAY_EPOCH_UNIX_NS);
    assert!(report.segments >= 5, "rotated: {report:?}");
    assert_eq!(report.torn_tail, None);
    assert!(!report.spare_segment, "a clean close removes the spare");
    assert_eq!(check_all(&dir, 1), 500);
    for from_seq in [2, 77, 250, 499, 500] {
        assert_eq!(check_all(&dir, from_seq), 501 - from_seq);
    }
    let mut reader = JournalReader::open(&dir, 501).expect("reader at the end");
    assert!(reader.next().expect("read").is_none());
    assert_eq!(reader.day_epoch_unix_ns(), DAY_EPOCH_UNIX_NS);
}

#[test]
fn reopen_continues_where_it_stopped() {
    let temp = TempDir::new("reopen");
    let dir = temp.journal();
    write_journal(&dir, 120);
    let (mut writer, report) = open(&dir);
    assert_eq!(report.last_seq, 120);
    assert_eq!(writer.next_seq(), 121);
    assert_eq!(writer.day_epoch_unix_ns(), DAY_EPOCH_UNIX_NS);
    assert_eq!(writer.durable_seq_handle().load(Ordering::Acquire), 120);
    append_range(&mut writer, 121, 300);
    drop(writer);
    assert_eq!(verify(&dir).expect("verify").last_seq, 300);
    assert_eq!(check_all(&dir, 1), 300);
}

/// Zero (or garble) the bytes of the last record — appended but not yet flushed when the
/// writer died, as in a crash mid-append — from every offset inside it and recover: always
/// exactly the longest valid prefix; then appending continues from there.
fn cut_every_offset(records: u64, garble: bool) {
    let temp = TempDir::new("cut");
    let pristine = temp.0.join("pristine");
    write_journal_last_unflushed(&pristine, records);
    let (last_path, start_bytes) = locate(&pristine, records);
    let length_bytes = RECORD_HEADER_BYTES + payload(records).len() as u64;
    let span_bytes = record_span_bytes(payload(records).len() as u64);
    let file_name = last_path.file_name().expect("name").to_owned();
    for offset_bytes in start_bytes..start_bytes + span_bytes {
        let dir = temp.0.join(format!("cut-{offset_bytes}"));
        copy_dir(&pristine, &dir);
        let target = dir.join(&file_name);
        if garble && offset_bytes >= start_bytes + length_bytes {
            continue;
        }
        let tail_bytes = if garble {
            start_bytes + length_bytes - offset_bytes
        } else {
            SEGMENT_BYTES - offset_bytes
        };
        let fill = if garble { 0xA5 } else { 0 };
        patch(&target, offset_bytes, &vec![fill; tail_bytes as usize]);
        let intact = offset_bytes >= start_bytes + length_bytes;
        let expected_last = if intact { records } else { records - 1 };
        let (mut writer, report) = open(&dir);
        assert_eq!(report.last_seq, expected_last, "cut at {offset_bytes}");
        let torn_expected = !intact && (garble || offset_bytes > start_bytes);
        assert_eq!(
            report.torn_tail.is_some(),
            torn_expected,
            "cut at {offset_bytes}: {report:?}"
        );
        append_range(&mut writer, expected_last + 1, records + 3);
        drop(writer);
        let verified = verify(&dir).expect("verify after continuing");
        assert_eq!(verified.last_seq, records + 3);
        assert_eq!(verified.torn_tail, None);
        assert_eq!(check_all(&dir, 1), records + 3);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
    }
}

#[test]
fn cut_last_record_at_every_offset_mid_segment() {
    cut_every_offset(40, false);
}

#[test]
fn garble_last_record_at_every_offset() {
    cut_every_offset(40, true);
}

#[test]
fn cut_last_record_at_every_offset_first_in_segment() {
    // Find a record count whose last record opens a segment.
    let temp = TempDir::new("probe");
    let dir = temp.journal();
    write_journal(&dir, 300);
    let mut records = 0;
    for seq in 2..300 {
        let (_, offset_bytes) = locate(&dir, seq);
        if offset_bytes == HEADER_BYTES {
            records = seq;
            break;
        }
    }
    assert!(records > 0);
    cut_every_offset(records, false);
}

fn expect_corrupt(dir: &Path, file: &Path, offset_bytes: u64) -> String {
    let error = JournalWriter::open_or_create(config(dir, Durability::Flush), DAY_EPOCH_UNIX_NS)
        .err()
        .expect("open must refuse");
    let text = error.to_string();
    assert!(matches!(error, JournalError::Corrupt { .. }), "{text}");
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("byte offset {offset_bytes}")),
        "{text}"
    );
    assert!(!text.contains('\n'));
    let verify_text = verify(dir).expect_err("verify must refuse").to_string();
    assert_eq!(verify_text, text);
    text
}

#[test]
fn flipped_byte_mid_journal_is_refused() {
    let temp = TempDir::new("flip");
    let dir = temp.journal();
    write_journal(&dir, 300);
    // In a full (sealed) segment, and in the last segment with valid records after it.
    let last = verify(&dir).expect("verify").last_seq;
    for seq in [10, last - 3] {
        let (path, offset_bytes) = locate(&dir, seq);
        let original = std::fs::read(&path).expect("read");
        let byte = (offset_bytes + 40) as usize;
        patch(&path, byte as u64, &[original[byte] ^ 0x10]);
        let text = expect_corrupt(&dir, &path, offset_bytes);
        assert!(text.contains("checksum"), "{text}");
        patch(&path, byte as u64, &[original[byte]]);
        assert_eq!(verify(&dir).expect("restored").last_seq, last);
    }
}

#[test]
fn zeroed_commit_word_mid_journal_is_refused() {
    let temp = TempDir::new("zeroed");
    let dir = temp.journal();
    write_journal(&dir, 300);
    let last = verify(&dir).expect("verify").last_seq;
    for seq in [10, last - 3] {
        let (path, offset_bytes) = locate(&dir, seq);
        let original = std::fs::read(&path).expect("read");
        patch(&path, offset_bytes, &[0, 0, 0, 0]);
        expect_corrupt(&dir, &path, offset_bytes);
        patch(
            &path,
            offset_bytes,
            &original[offset_bytes as usize..offset_bytes as usize + 4],
        );
    }
}

#[test]
fn sequence_gap_is_refused() {
    let temp = TempDir::new("gap");
    let dir = temp.journal();
    let report = write_journal(&dir, 300);
    // A well-formed record with a skipped sequence number at the end of the last segment.
    let last_path = segment_files(&dir).pop().expect("segments");
    let end_bytes = data_end(&last_path);
    let buffer = shared::HeapBytes::zeroed(64);
    // SAFETY: a private buffer.
    unsafe {
        write_record(
            buffer.view(),
            0,
            report.last_seq + 2,
            Timestamp(1),
            1,
            b"skip",
        )
    };
    let mut bytes = [0u8; 40];
    buffer.view().copy_out(0, &mut bytes);
    patch(&last_path, end_bytes, &bytes);
    let error = verify(&dir).expect_err("gap");
    let text = error.to_string();
    assert!(matches!(error, JournalError::Gap { .. }), "{text}");
    assert!(text.contains(&last_path.display().to_string()), "{text}");
    assert!(text.contains(&format!("byte offset {end_bytes}")), "{text}");
    assert!(
        text.contains(&format!("expected {}", report.last_seq + 1)),
        "{text}"
    );
    let error =
        JournalWriter::open_or_create(config(&dir, Durability::Flush), DAY_EPOCH_UNIX_NS).err();
    assert!(matches!(error, Some(JournalError::Gap { .. })));
}

/// End of data (seal included) of one segment file.
fn data_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read");
    let mut offset = HEADER_BYTES as usize;
    for _ in 0..bytes.len() / 8 {
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4"));
        if length == 0 {
            return offset as u64;
        }
        if length == u32::MAX {
            return offset as u64 + 8;
        }
        offset += (length as usize).next_multiple_of(8);
    }
    panic!("no end");
}

#[test]
fn missing_segment_is_a_gap() {
    let temp = TempDir::new("missing-segment");
    let dir = temp.journal();
    write_journal(&dir, 300);
    std::fs::remove_file(segment_path(&dir, 2)).expect("remove");
    let error = verify(&dir).expect_err("gap");
    assert!(
        matches!(
            error,
            JournalError::Gap {
                what: "segment index",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("00000003.seg"), "{error}");
}

#[test]
fn foreign_files_are_refused() {
    let temp = TempDir::new("foreign");
    let dir = temp.journal();
    write_journal(&dir, 150);
    assert!(segment_files(&dir).len() > 1);
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, b"hello").expect("write");
    let error = verify(&dir).expect_err("foreign");
    assert!(matches!(error, JournalError::ForeignFile { .. }), "{error}");
    assert!(error.to_string().contains("notes.txt"), "{error}");
    std::fs::remove_file(&notes).expect("remove");
    // A file named like a segment that is not one.
    let count = segment_files(&dir).len() as u64;
    let impostor = segment_path(&dir, count + 1);
    let mut text = b"this is certainly not a journal segment, just some text ".repeat(200);
    text.truncate(SEGMENT_BYTES as usize);
    std::fs::write(&impostor, &text).expect("write");
    let error = JournalWriter::open_or_create(config(&dir, Durability::Flush), DAY_EPOCH_UNIX_NS)
        .err()
        .expect("foreign");
    assert!(
        matches!(
            error,
            JournalError::ForeignFile {
                reason: "bad magic",
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains(&impostor.display().to_string()),
        "{error}"
    );
    // A segment of another journal: same records, another day.
    std::fs::remove_file(&impostor).expect("remove");
    let other = TempDir::new("other");
    let other_dir = other.journal();
    let (mut writer, _) = JournalWriter::open_or_create(
        config(&other_dir, Durability::Flush),
        DAY_EPOCH_UNIX_NS + NANOS_PER_DAY,
    )
    .expect("other journal");
    append_range(&mut writer, 1, 150);
    drop(writer);
    assert!(count > 1);
    let last_path = segment_path(&dir, count);
    std::fs::copy(segment_path(&other_dir, count), &last_path).expect("copy");
    let error = verify(&dir).expect_err("other journal");
    let text = error.to_string();
    assert!(text.contains(&last_path.display().to_string()), "{text}");
    assert!(text.contains("day epoch"), "{text}");
}

#[test]
fn bad_configuration_is_a_clear_error() {
    let temp = TempDir::new("config");
    let missing = temp.0.join("does-not-exist");
    let mut cfg = config(&missing, Durability::Async);
    cfg.create_dir = false;
    let error = JournalWriter::open_or_create(cfg, DAY_EPOCH_UNIX_NS)
        .err()
        .expect("missing");
    assert!(
        matches!(error, JournalError::MissingDirectory { .. }),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("does-not-exist") && !text.contains('\n'),
        "{text}"
    );
    assert!(matches!(
        verify(&missing),
        Err(JournalError::MissingDirectory { .. })
    ));
    assert!(matches!(
        JournalReader::open(&missing, 1),
        Err(JournalError::MissingDirectory { .. })
    ));

    let plain_file = temp.0.join("plain");
    std::fs::write(&plain_file, b"x").expect("write");
    let error =
        JournalWriter::open_or_create(config(&plain_file, Durability::Async), DAY_EPOCH_UNIX_NS)
            .err()
            .expect("not a dir");
    assert!(
        matches!(error, JournalError::NotADirectory { .. }),
        "{error}"
    );

    let dir = temp.journal();
    for (segment_bytes, max_payload_bytes) in
        [(5000, 100), (4096, 100), (8192, 8192), (8192, u32::MAX)]
    {
        let cfg = JournalConfig {
            segment_bytes,
            max_payload_bytes,
            ..config(&dir, Durability::Async)
        };
        let error = JournalWriter::open_or_create(cfg, DAY_EPOCH_UNIX_NS)
            .err()
            .expect("bad sizes");
        assert!(
            matches!(error, JournalError::InvalidConfig { .. }),
            "{error}"
        );
        assert!(!error.to_string().contains('\n'));
    }
    let error =
        JournalWriter::open_or_create(config(&dir, Durability::Async), DAY_EPOCH_UNIX_NS + 1)
            .err()
            .expect("bad epoch");
    assert!(
        matches!(error, JournalError::InvalidConfig { .. }),
        "{error}"
    );

    let (mut writer, _) = open(&dir);
    let error = writer
        .append(Timestamp(1), 1, &vec![7; MAX_PAYLOAD_BYTES as usize + 1])
        .expect_err("too large");
    assert!(
        matches!(error, JournalError::RecordTooLarge { .. }),
        "{error}"
    );
    assert_eq!(
        writer
            .append(Timestamp(1), 1, &vec![7; MAX_PAYLOAD_BYTES as usize])
            .expect("max fits"),
        1
    );
    let second = JournalWriter::open_or_create(config(&dir, Durability::Async), DAY_EPOCH_UNIX_NS);
    assert!(matches!(second.err(), Some(JournalError::Locked { .. })));
    drop(writer);

    assert!(matches!(
        JournalReader::open(&dir, 0),
        Err(JournalError::SeqOutOfRange { .. })
    ));
    let empty = temp.0.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    assert!(matches!(
        verify(&empty),
        Err(JournalError::EmptyJournal { .. })
    ));
    assert!(matches!(
        JournalReader::open(&empty, 1),
        Err(JournalError::EmptyJournal { .. })
    ));
}

#[test]
fn unreadable_segment_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: plain syscall without arguments.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("running as root: file permissions do not apply, skipped");
        return;
    }
    let temp = TempDir::new("perm");
    let dir = temp.journal();
    write_journal(&dir, 10);
    let path = segment_path(&dir, 1);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let error = verify(&dir).expect_err("unreadable");
    assert!(
        matches!(error, JournalError::PermissionDenied { .. }),
        "{error}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod back");
}

#[test]
fn blank_spare_is_ignored_and_removed() {
    let temp = TempDir::new("spare");
    let dir = temp.journal();
    let report = write_journal(&dir, 100);
    let spare = segment_path(&dir, report.segments as u64 + 1);
    std::fs::write(&spare, vec![0u8; SEGMENT_BYTES as usize]).expect("spare");
    let verified = verify(&dir).expect("verify");
    assert!(verified.spare_segment);
    assert_eq!(verified.last_seq, 100);
    let (mut writer, recovered) = open(&dir);
    assert_eq!(recovered.last_seq, 100);
    append_range(&mut writer, 101, 400);
    drop(writer);
    assert_eq!(check_all(&dir, 1), 400);
    // A blank file that is not last is not a spare.
    let files = segment_files(&dir);
    patch(&files[1], 0, &[0u8; 64]);
    assert!(matches!(verify(&dir), Err(JournalError::Corrupt { .. })));
}

/// A writer killed while its helper was creating the next segment: the file is there but
/// empty or shorter than a header. Found by the kill -9 test under load.
#[test]
fn interrupted_preallocation_is_a_spare_not_a_foreign_file() {
    for short_bytes in [0usize, 17, 63] {
        let temp = TempDir::new("interrupted");
        let dir = temp.journal();
        let report = write_journal(&dir, 100);
        let next = segment_path(&dir, report.segments as u64 + 1);
        std::fs::write(&next, vec![0u8; short_bytes]).expect("short file");
        assert!(
            verify(&dir).expect("verify").spare_segment,
            "{short_bytes} bytes"
        );
        let (mut writer, recovered) = open(&dir);
        assert_eq!(recovered.last_seq, 100);
        append_range(&mut writer, 101, 200);
        drop(writer);
        assert_eq!(check_all(&dir, 1), 200);
        // Non-zero bytes in a short last file are still foreign.
        let stray = segment_path(&dir, 99);
        std::fs::write(&stray, b"not a segment").expect("stray");
        assert!(matches!(
            verify(&dir),
            Err(JournalError::ForeignFile { .. }) | Err(JournalError::Gap { .. })
        ));
    }
}

#[test]
fn sealed_last_segment_continues_in_a_new_one() {
    let temp = TempDir::new("sealed");
    let dir = temp.journal();
    write_journal(&dir, 300);
    // A crash after the seal and before the next header leaves the next segment a blank
    // spare (the helper created and fsynced it before the seal was written). Make that state:
    // cut the journal back to the end of the next-to-last segment, then blank the last
    // file's header.
    let files = segment_files(&dir);
    let last = files.last().expect("segments");
    let first_of_last = u64::from_le_bytes(
        std::fs::read(last).expect("read")[24..32]
            .try_into()
            .expect("8"),
    );
    truncate_after(&dir, first_of_last - 1).expect("cut back");
    patch(last, 0, &[0; 64]);
    let truncated = verify(&dir).expect("verify");
    assert!(truncated.spare_segment);
    assert_eq!(truncated.last_seq, first_of_last - 1);
    let (mut writer, report) = open(&dir);
    assert_eq!(report.last_seq, truncated.last_seq);
    assert_eq!(report.segments, truncated.segments + 1);
    append_range(&mut writer, report.last_seq + 1, report.last_seq + 50);
    drop(writer);
    assert_eq!(check_all(&dir, 1), truncated.last_seq + 50);
}

/// A flipped bit in the last record after it was flushed is corruption of something
/// acknowledged, not a torn tail: refused (file and offset named) until the operator asks for
/// the cut. Before the manifest this was cut silently.
#[test]
fn bit_flip_in_the_last_flushed_record_is_refused() {
    let temp = TempDir::new("flushed-flip");
    let dir = temp.journal();
    let report = write_journal(&dir, 120);
    assert_eq!(report.durable_seq, 120);
    let (path, offset_bytes) = locate(&dir, 120);
    let original = std::fs::read(&path).expect("read");
    let byte = offset_bytes + 40;
    patch(&path, byte, &[original[byte as usize] ^ 0x04]);
    let text = expect_damaged_tail(&dir, &path, offset_bytes, 120);
    assert!(text.contains("checksum"), "{text}");
    // The operator's explicit cut: everything from the damaged record on.
    let cut = truncate_corrupt_tail(&dir).expect("cut on request");
    assert_eq!(cut.last_seq, 119);
    assert_eq!(cut.accepted_damage, vec![text]);
    let (mut writer, reopened) = open(&dir);
    assert_eq!(reopened.last_seq, 119);
    assert!(reopened.accepted_damage.is_empty());
    append_range(&mut writer, 120, 130);
    drop(writer);
    assert_eq!(check_all(&dir, 1), 130);
}

/// Open must refuse with `DamagedTail` naming the file, offset and first damaged record;
/// `verify` must say the same. Returns the message.
fn expect_damaged_tail(dir: &Path, file: &Path, offset_bytes: u64, seq: u64) -> String {
    let error = JournalWriter::open_or_create(config(dir, Durability::Flush), DAY_EPOCH_UNIX_NS)
        .err()
        .expect("open must refuse");
    let text = error.to_string();
    assert!(
        matches!(error, JournalError::DamagedTail { seq: found, .. } if found == seq),
        "{text}"
    );
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("byte offset {offset_bytes}")),
        "{text}"
    );
    assert!(text.contains("--truncate-corrupt-tail"), "{text}");
    assert!(!text.contains('\n'));
    assert_eq!(
        verify(dir).expect_err("verify must refuse").to_string(),
        text
    );
    text
}

/// In async mode a flushed record is in the mapping, which the kernel keeps across a process
/// crash: damaged on the same boot, it is corruption. After a reboot (a machine crash may
/// lose unsynced pages, as the async mode documents) the same damage is a torn tail.
#[test]
fn async_damage_is_refused_on_the_same_boot_and_cut_after_a_reboot() {
    let temp = TempDir::new("async-flip");
    let dir = temp.journal();
    let (mut writer, _) =
        JournalWriter::open_or_create(config(&dir, Durability::Async), DAY_EPOCH_UNIX_NS)
            .expect("open");
    append_range(&mut writer, 1, 80);
    writer.flush().expect("flush");
    writer.crash();
    let (path, offset_bytes) = locate(&dir, 80);
    let original = std::fs::read(&path).expect("read");
    let byte = offset_bytes + 33;
    patch(&path, byte, &[original[byte as usize] ^ 0x80]);
    expect_damaged_tail(&dir, &path, offset_bytes, 80);
    // The manifest as a previous boot wrote it.
    let marks = manifest::read(&dir).expect("read").expect("manifest");
    assert_eq!(
        (marks.synced_through_seq, marks.mapped_through_seq),
        (0, 80)
    );
    let other_boot = ManifestState {
        boot_id: [0xEE; 16],
        ..marks
    };
    manifest::write_durable(&dir, &other_boot).expect("rewrite");
    let (writer, report) = open(&dir);
    drop(writer);
    assert_eq!(report.last_seq, 79);
    assert!(report.torn_tail.is_some());
    assert_eq!(check_all(&dir, 1), 79);
}

/// Records the manifest marks durable that are simply gone (zeroed, as if the tail pages
/// were lost) are refused too: a clean end below the mark.
#[test]
fn durable_records_missing_at_the_end_are_refused() {
    let temp = TempDir::new("zeroed-tail");
    let dir = temp.journal();
    write_journal(&dir, 100);
    let (path, offset_bytes) = locate(&dir, 97);
    let end_bytes = data_end(&path);
    patch(
        &path,
        offset_bytes,
        &vec![0; (end_bytes - offset_bytes) as usize],
    );
    let text = expect_damaged_tail(&dir, &path, offset_bytes, 97);
    assert!(text.contains("ends here"), "{text}");
    let cut = truncate_corrupt_tail(&dir).expect("accept on request");
    assert_eq!(cut.last_seq, 96);
    let (writer, reopened) = open(&dir);
    drop(writer);
    assert_eq!(reopened.last_seq, 96);
}

/// Deleting the last segment file used to start cleanly, records short, and `verify` said
/// OK. The manifest (sealed through N-1, so N must exist) and the seal rule (a sealed
/// segment's successor exists) both refuse it now.
#[test]
fn deleted_last_segment_is_refused() {
    let temp = TempDir::new("deleted");
    let dir = temp.journal();
    let report = write_journal(&dir, 300);
    assert!(report.segments >= 4);
    let last = segment_path(&dir, report.segments as u64);
    let kept_last_seq = first_seq_of(&last) - 1;
    std::fs::remove_file(&last).expect("delete the last segment");
    for without_manifest in [false, true] {
        if without_manifest {
            std::fs::remove_file(manifest::manifest_path(&dir)).expect("delete the manifest");
        }
        let error =
            JournalWriter::open_or_create(config(&dir, Durability::Flush), DAY_EPOCH_UNIX_NS)
                .err()
                .expect("refused");
        let text = error.to_string();
        assert!(
            matches!(error, JournalError::MissingSegment { .. }),
            "{text}"
        );
        assert!(text.contains(&last.display().to_string()), "{text}");
        assert_eq!(verify(&dir).expect_err("verify").to_string(), text);
    }
    let cut = truncate_corrupt_tail(&dir).expect("continue on request");
    assert_eq!(cut.last_seq, kept_last_seq);
    assert_eq!(cut.accepted_damage.len(), 1, "{:?}", cut.accepted_damage);
    let (mut writer, reopened) = open(&dir);
    assert_eq!(reopened.last_seq, kept_last_seq);
    append_range(&mut writer, kept_last_seq + 1, kept_last_seq + 40);
    drop(writer);
    assert_eq!(check_all(&dir, 1), kept_last_seq + 40);
    assert!(verify(&dir).expect("verify").manifest.is_some());
}

fn first_seq_of(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read");
    u64::from_le_bytes(bytes[24..32].try_into().expect("8"))
}

/// Journals written before the manifest existed (replay-logs/) open as before; the writer
/// adds a manifest. A leftover temporary manifest is cleaned up.
#[test]
fn journal_without_a_manifest_opens_and_gets_one() {
    let temp = TempDir::new("no-manifest");
    let dir = temp.journal();
    write_journal(&dir, 50);
    std::fs::remove_file(manifest::manifest_path(&dir)).expect("remove");
    std::fs::write(dir.join(manifest::MANIFEST_TMP_NAME), b"half").expect("tmp");
    let verified = verify(&dir).expect("verify");
    assert_eq!((verified.manifest, verified.durable_seq), (None, 0));
    let (writer, report) = open(&dir);
    drop(writer);
    assert_eq!(report.last_seq, 50);
    assert!(!dir.join(manifest::MANIFEST_TMP_NAME).exists());
    let marks = verify(&dir)
        .expect("verify")
        .manifest
        .expect("manifest added");
    assert_eq!(marks.synced_through_seq, 50);
    // A manifest of another journal is refused.
    let other = ManifestState {
        day_epoch_unix_ns: DAY_EPOCH_UNIX_NS + NANOS_PER_DAY,
        ..marks
    };
    manifest::write_durable(&dir, &other).expect("write");
    let error = verify(&dir).expect_err("foreign manifest");
    assert!(error.to_string().contains("manifest"), "{error}");
}

#[test]
fn recovery_then_continuing_equals_an_uninterrupted_run() {
    let temp = TempDir::new("equal");
    let straight = temp.0.join("straight");
    write_journal(&straight, 700);
    let interrupted = temp.0.join("interrupted");
    for (from, to) in [(1, 100), (101, 333), (334, 334), (335, 700)] {
        let (mut writer, report) = open(&interrupted);
        assert_eq!(report.last_seq, from - 1);
        append_range(&mut writer, from, to);
        drop(writer);
        // Leave a torn, unpublished record behind as a crash mid-append would.
        let last_path = segment_files(&interrupted).pop().expect("segments");
        patch(&last_path, data_end(&last_path) + 8, &[0x5A; 32]);
    }
    let (writer, report) = open(&interrupted);
    assert!(report.torn_tail.is_some());
    drop(writer);
    let mut a = JournalReader::open(&straight, 1).expect("reader");
    let mut b = JournalReader::open(&interrupted, 1).expect("reader");
    for seq in 1..=700 {
        let x = a.next().expect("read").expect("record");
        let y = b.next().expect("read").expect("record");
        assert_eq!(
            (x.seq, x.timestamp, x.kind, x.payload),
            (y.seq, y.timestamp, y.kind, y.payload)
        );
        assert_eq!(x.seq, seq);
    }
    assert!(a.next().expect("read").is_none());
    assert!(b.next().expect("read").is_none());
}

#[test]
fn tailing_reader_follows_the_writer_across_rotations() {
    const RECORDS: u64 = 3_000;
    let temp = TempDir::new("tail");
    let dir = temp.journal();
    let (mut writer, _) =
        JournalWriter::open_or_create(config(&dir, Durability::Async), DAY_EPOCH_UNIX_NS)
            .expect("open");
    let reader_dir = dir.clone();
    let reader = std::thread::spawn(move || {
        let mut reader = JournalReader::open(&reader_dir, 1).expect("reader");
        let mut idle_waits = 0u64;
        for expected in 1..=RECORDS {
            let record = loop {
                if let Some(record) = reader.next_wait(Duration::from_millis(20)).expect("read") {
                    break record;
                }
                idle_waits += 1;
                assert!(idle_waits < 1_000, "reader starved at {expected}");
            };
            assert_eq!(record.seq, expected);
            assert_eq!(record.timestamp, timestamp(expected));
            assert_eq!(record.payload, &payload(expected)[..]);
        }
        reader.next_seq()
    });
    for seq in 1..=RECORDS {
        assert_eq!(
            writer
                .append(timestamp(seq), kind(seq), &payload(seq))
                .expect("append"),
            seq
        );
        if seq % 97 == 0 {
            writer.flush().expect("flush");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let reader_next = reader.join().expect("reader thread");
    assert_eq!(reader_next, RECORDS + 1);
    drop(writer);
    assert!(verify(&dir).expect("verify").segments > 30);
}

#[test]
fn truncate_after_drops_later_records() {
    let temp = TempDir::new("truncate");
    let pristine = temp.0.join("pristine");
    let report = write_journal(&pristine, 400);
    // The last record of segment 2 (the seal follows it), a record mid-segment, everything.
    let first_of_third = (2..400)
        .find(|&seq| locate(&pristine, seq).0 == segment_path(&pristine, 3))
        .expect("3 segments");
    for keep in [first_of_third - 1, first_of_third, 123, 0, 399, 400, 500] {
        let dir = temp.0.join(format!("t-{keep}"));
        copy_dir(&pristine, &dir);
        let truncated = truncate_after(&dir, keep).expect("truncate");
        let kept = keep.min(report.last_seq);
        assert_eq!(truncated.last_seq, kept, "keep {keep}");
        assert_eq!(truncated.torn_tail, None);
        let (mut writer, reopened) = open(&dir);
        assert_eq!(reopened.last_seq, kept);
        append_range(&mut writer, kept + 1, kept + 100);
        drop(writer);
        assert_eq!(check_all(&dir, 1), kept + 100);
    }
}

#[test]
fn flush_advances_the_durable_seq_and_gate() {
    let temp = TempDir::new("durable");
    for durability in [Durability::Async, Durability::Flush, Durability::Replicated] {
        let dir = temp.0.join(format!("{durability:?}"));
        let (mut writer, _) =
            JournalWriter::open_or_create(config(&dir, durability), DAY_EPOCH_UNIX_NS)
                .expect("open");
        let durable = writer.durable_seq_handle();
        let gate = writer.durability_gate();
        append_range(&mut writer, 1, 250);
        assert_eq!(durable.load(Ordering::Acquire), 0);
        assert_eq!(writer.flush().expect("flush"), 250);
        assert_eq!(durable.load(Ordering::Acquire), 250);
        let confirmed = writer.confirmed_seq_handle();
        match durability {
            Durability::Replicated => {
                assert_eq!(gate.releasable_seq(), 0);
                confirmed.store(200, Ordering::Release);
                assert_eq!(gate.releasable_seq(), 200);
            }
            _ => assert_eq!(gate.releasable_seq(), 250),
        }
        append_range(&mut writer, 251, 260);
        assert_eq!(writer.sync_all().expect("sync"), 260);
        drop(writer);
        assert_eq!(check_all(&dir, 1), 260);
    }
}

const CRASH_DIR_ENV: &str = "BOURSE_JOURNAL_CRASH_CHILD_DIR";
/// `flush`: the child runs in Flush mode and flushes every 16 appends (group commit), so the
/// kill also lands inside msyncs and manifest updates.
const CRASH_MODE_ENV: &str = "BOURSE_JOURNAL_CRASH_CHILD_MODE";
const CRASH_CHILD_TEST: &str = "journal::tests::crash_child_appender";

/// Child half of `killed_writer_process_*`: does nothing unless the parent set the
/// environment variable. Prints `SEQ n` after each append returns and `DURABLE n` after
/// each flush.
#[test]
fn crash_child_appender() {
    let Ok(dir) = std::env::var(CRASH_DIR_ENV) else {
        return;
    };
    let flush_mode = std::env::var(CRASH_MODE_ENV).is_ok_and(|mode| mode == "flush");
    let durability = if flush_mode {
        Durability::Flush
    } else {
        Durability::Async
    };
    let (mut writer, _) =
        JournalWriter::open_or_create(config(Path::new(&dir), durability), DAY_EPOCH_UNIX_NS)
            .expect("open");
    let mut out = std::io::stdout().lock();
    for seq in 1..=1_000_000u64 {
        let got = writer
            .append(timestamp(seq), kind(seq), &payload(seq))
            .expect("append");
        writeln!(out, "SEQ {got}").expect("stdout");
        if flush_mode && seq % 16 == 0 {
            let durable = writer.flush().expect("flush");
            writeln!(out, "DURABLE {durable}").expect("stdout");
        }
        out.flush().expect("stdout");
    }
    // Wait to be killed (bounded).
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kill a child writer with SIGKILL once it printed `kill_after` appends; recovery must
/// open (never refuse: a crash is not damage) and keep every append that returned.
fn kill_writer_and_recover(mode: &str, kill_after: u64) {
    let temp = TempDir::new("kill9");
    let dir = temp.journal();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            CRASH_CHILD_TEST,
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DIR_ENV, &dir)
        .env(CRASH_MODE_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = 0u64;
    let mut durable = 0u64;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if let Some(seq) = line.strip_prefix("SEQ ") {
            printed = seq.parse().expect("seq");
            if printed == kill_after {
                break;
            }
        }
    }
    assert_eq!(printed, kill_after, "child stopped early");
    child.kill().expect("kill -9"); // SIGKILL on Unix
    child.wait().expect("reap");
    for line in lines {
        let Ok(line) = line else { break };
        if let Some(seq) = line.strip_prefix("SEQ ") {
            printed = seq.parse().expect("seq");
        }
        if let Some(seq) = line.strip_prefix("DURABLE ") {
            durable = seq.parse().expect("seq");
        }
    }
    let (writer, report) = open(&dir);
    drop(writer);
    assert!(
        report.last_seq >= printed,
        "lost returned appends: {report:?}, printed {printed}"
    );
    // Every flush that returned had raised the mark first.
    assert!(
        report.durable_seq >= durable,
        "{report:?}, durable {durable}"
    );
    assert_eq!(check_all(&dir, 1), report.last_seq);
}

#[test]
fn killed_writer_process_loses_no_returned_append() {
    kill_writer_and_recover("async", 2_500);
}

/// The same with group commits: the kill lands anywhere, including inside an msync, a
/// manifest update or a rotation; what recovery finds is never refused as damage.
#[test]
fn killed_flushing_writer_process_is_recovered_not_refused() {
    for kill_after in [777, 2_500] {
        kill_writer_and_recover("flush", kill_after);
    }
}

#[test]
fn missing_seal_before_a_later_segment_is_written_back() {
    let temp = TempDir::new("seal");
    let dir = temp.journal();
    let report = write_journal(&dir, 300);
    // A machine crash can keep the next segment's header and lose the seal before it.
    let first = segment_path(&dir, 1);
    let seal_bytes = data_end(&first) - 8;
    patch(&first, seal_bytes, &[0; 8]);
    let verified = verify(&dir).expect("a missing seal alone is not corruption");
    assert_eq!(verified.missing_seals, 1);
    assert_eq!(verified.last_seq, report.last_seq);
    // A read-only reader (replay, the inspector) goes on into the next segment.
    assert_eq!(
        check_all(&dir, 1),
        report.last_seq,
        "read across the lost seal"
    );
    let (writer, recovered) = open(&dir);
    assert_eq!(recovered.missing_seals, 1);
    drop(writer);
    assert_eq!(verify(&dir).expect("verify").missing_seals, 0);
    assert_eq!(check_all(&dir, 1), report.last_seq);
    // Missing seal and missing records: the next header proves the hole.
    let (path, offset_bytes) = locate(&dir, 20);
    let end_bytes = data_end(&path);
    patch(
        &path,
        offset_bytes,
        &vec![0; (end_bytes - offset_bytes) as usize],
    );
    let error = verify(&dir).expect_err("hole");
    assert!(matches!(error, JournalError::Gap { .. }), "{error}");
}

/// The error a reader from the start stops with.
fn read_error(dir: &Path) -> String {
    let mut reader = JournalReader::open(dir, 1).expect("open reader");
    for _ in 0..10_000_000u64 {
        match reader.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end without an error"),
            Err(error) => return error.to_string(),
        }
    }
    panic!("no end")
}

/// A segment numbered on by the next one but ended early, with room left for a largest record
/// and a seal: no writer rotates there, so it is no lost seal. Refused (the reader, which
/// looks for a successor only where a rotation can be, would take it for the journal's end).
#[test]
fn a_segment_ended_early_with_the_numbering_continued_is_refused() {
    let temp = TempDir::new("early-end");
    let dir = temp.journal();
    let report = write_journal(&dir, 100);
    let (first, second) = (segment_path(&dir, 1), segment_path(&dir, 2));
    let mut second_bytes = std::fs::read(&second).expect("read");
    let next_first = u64::from_le_bytes(second_bytes[24..32].try_into().expect("8"));
    assert!(
        report.last_seq > next_first && report.segments == 2,
        "{report:?}"
    );
    // Move segment 1's last records, from one that leaves the room, to segment 2's front.
    let first_bytes = std::fs::read(&first).expect("read");
    let room_bytes = rotation_room_bytes(MAX_PAYLOAD_BYTES);
    let moved_from = (1..next_first)
        .rev()
        .find(|&seq| first_bytes.len() as u64 - locate(&dir, seq).1 >= room_bytes)
        .expect("a record early enough");
    let from_bytes = locate(&dir, moved_from).1 as usize;
    let seal_bytes = data_end(&first) as usize - 8;
    let moved = &first_bytes[from_bytes..seal_bytes];
    let tail = &second_bytes[HEADER_BYTES as usize..data_end(&second) as usize];
    let body = [moved, tail].concat();
    second_bytes[HEADER_BYTES as usize..][..body.len()].copy_from_slice(&body);
    second_bytes[24..32].copy_from_slice(&moved_from.to_le_bytes());
    let crc = crc32c::crc32c(&second_bytes[0..60]);
    second_bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    patch(
        &first,
        from_bytes as u64,
        &vec![0; seal_bytes + 8 - from_bytes],
    );
    std::fs::write(&second, &second_bytes).expect("write");
    let error = verify(&dir).expect_err("an early end");
    assert!(error.to_string().contains("ends early"), "{error}");
}

/// A lost seal with a record after it: the successor's header does not vouch for that.
#[test]
fn data_after_a_lost_seal_stops_the_reader_as_it_stops_verify() {
    let temp = TempDir::new("seal-data");
    let dir = temp.journal();
    write_journal(&dir, 300);
    let first = segment_path(&dir, 1);
    let seal_bytes = data_end(&first) - 8;
    patch(&first, seal_bytes, &[0; 8]);
    let file_bytes = std::fs::metadata(&first).expect("stat").len();
    patch(&first, file_bytes - 1, &[0xab]);
    let error = verify(&dir).expect_err("data after the end");
    assert_eq!(read_error(&dir), error.to_string());
}

#[test]
fn truncate_after_cuts_back_before_a_hole() {
    let temp = TempDir::new("hole");
    let dir = temp.journal();
    write_journal(&dir, 300);
    let (path, offset_bytes) = locate(&dir, 150);
    patch(&path, offset_bytes + 32, &[0xEE]);
    assert!(verify(&dir).is_err());
    let report = truncate_after(&dir, 149).expect("truncate before the hole");
    assert_eq!(report.last_seq, 149);
    assert_eq!(check_all(&dir, 1), 149);
    let (mut writer, _) = open(&dir);
    append_range(&mut writer, 150, 200);
    drop(writer);
    assert_eq!(check_all(&dir, 1), 200);
    let error = truncate_after(&temp.0.join("nothing"), 1).expect_err("missing");
    assert!(
        matches!(error, JournalError::MissingDirectory { .. }),
        "{error}"
    );
}

/// The last record of segment `path` (its sequence number): the one before the next
/// segment's first.
fn last_seq_in(dir: &Path, segment_index: u64) -> u64 {
    first_seq_of(&segment_path(dir, segment_index + 1)) - 1
}

#[test]
fn a_vouched_scan_reports_what_the_full_scan_does_at_every_point() {
    let temp = TempDir::new("vouched");
    let dir = temp.journal();
    let full = write_journal(&dir, 300);
    assert!(full.segments >= 4, "several sealed segments: {full:?}");
    for vouched in 2..=full.last_seq {
        let report = verify_vouched(&dir, vouched).expect("vouched");
        assert_eq!(report.vouched_through, vouched - 1, "vouched {vouched}");
        assert_eq!(
            RecoveryReport {
                vouched_through: 0,
                ..report
            },
            full,
            "vouched {vouched}"
        );
    }
    // A snapshot past the journal's end vouches for nothing: the full scan.
    assert_eq!(verify_vouched(&dir, full.last_seq + 1).expect("full"), full);
    assert_eq!(verify_vouched(&dir, 1).expect("full"), full);
}

#[test]
fn a_vouched_scan_does_not_read_checksums_before_the_snapshots_record_only() {
    let temp = TempDir::new("vouched-flip");
    let dir = temp.journal();
    let full = write_journal(&dir, 300);
    let last = full.last_seq;
    // Record 10 (mid segment 1) and the record before the vouched one (walked without its
    // checksum in the vouched record's segment).
    let vouched = last - 5;
    for damaged in [10, vouched - 1] {
        let (path, offset_bytes) = locate(&dir, damaged);
        let original = std::fs::read(&path).expect("read");
        let byte = (offset_bytes + 40) as usize;
        patch(&path, byte as u64, &[original[byte] ^ 0x10]);
        let refused = verify(&dir).expect_err("the full scan reads every checksum");
        assert!(refused.to_string().contains("checksum"), "{refused}");
        let report = verify_vouched(&dir, vouched).expect("vouched for by the snapshot");
        assert_eq!(
            (report.last_seq, report.vouched_through),
            (last, vouched - 1)
        );
        // The snapshot's own record is read: damage there is refused as by the full scan.
        let at_record = verify_vouched(&dir, damaged).expect_err("the vouched record is read");
        assert_eq!(at_record.to_string(), refused.to_string());
        patch(&path, byte as u64, &[original[byte]]);
    }
    // The last record of a segment checked from its end is read too.
    let end_of_first = last_seq_in(&dir, 1);
    let (path, offset_bytes) = locate(&dir, end_of_first);
    let original = std::fs::read(&path).expect("read");
    let byte = (offset_bytes + 40) as usize;
    patch(&path, byte as u64, &[original[byte] ^ 0x10]);
    let refused = verify(&dir).expect_err("damaged");
    let vouched_refusal = verify_vouched(&dir, last).expect_err("read from the end");
    assert_eq!(vouched_refusal.to_string(), refused.to_string());
}

#[test]
fn a_vouched_recovery_cuts_a_torn_tail_as_the_full_one_does() {
    let temp = TempDir::new("vouched-torn");
    let pristine = temp.0.join("pristine");
    write_journal_last_unflushed(&pristine, 300);
    let (last_path, start_bytes) = locate(&pristine, 300);
    // Garble the unflushed last record (a crash mid-append).
    patch(&last_path, start_bytes + 16, &[0xA5; 4]);
    let full = verify(&pristine).expect("a torn tail is not a refusal");
    let torn = full.torn_tail.clone().expect("torn");
    assert_eq!(full.last_seq, 299);
    for vouched in [2, 150, 298, 299] {
        let dir = temp.0.join(format!("vouched-{vouched}"));
        copy_dir(&pristine, &dir);
        let report = verify_vouched(&dir, vouched).expect("vouched");
        let copy_torn = verify(&dir).expect("full").torn_tail;
        assert_eq!(report.torn_tail, copy_torn, "vouched {vouched}");
        assert_eq!(
            copy_torn.map(|t| (t.offset_bytes, t.cut_bytes)),
            Some((torn.offset_bytes, torn.cut_bytes))
        );
        assert_eq!(report.vouched_through, vouched - 1);
        let (mut writer, recovered) = JournalWriter::open_or_create_vouched(
            config(&dir, Durability::Flush),
            DAY_EPOCH_UNIX_NS,
            vouched,
        )
        .expect("recovered");
        assert_eq!(
            (recovered.last_seq, recovered.torn_tail.is_some()),
            (299, true)
        );
        append_range(&mut writer, 300, 303);
        drop(writer);
        let after = verify(&dir).expect("cut and continued");
        assert_eq!((after.last_seq, after.torn_tail), (303, None));
        assert_eq!(check_all(&dir, 1), 303);
    }
    // A snapshot after the torn record vouches for nothing it needs: the full scan's cut.
    let report = verify_vouched(&pristine, 300).expect("full");
    assert_eq!((report.vouched_through, report.torn_tail), (0, Some(torn)));
}

#[test]
fn a_missing_seal_before_the_vouched_record_falls_back_to_the_full_scan() {
    let temp = TempDir::new("vouched-seal");
    let dir = temp.journal();
    let full = write_journal(&dir, 300);
    let first = segment_path(&dir, 1);
    let seal_bytes = data_end(&first) - 8;
    patch(&first, seal_bytes, &[0; 8]);
    let report = verify_vouched(&dir, full.last_seq).expect("a missing seal is not corruption");
    assert_eq!((report.missing_seals, report.vouched_through), (1, 0));
    let (writer, recovered) = JournalWriter::open_or_create_vouched(
        config(&dir, Durability::Flush),
        DAY_EPOCH_UNIX_NS,
        full.last_seq,
    )
    .expect("recovered");
    assert_eq!(recovered.missing_seals, 1, "written back");
    drop(writer);
    let again = verify_vouched(&dir, full.last_seq).expect("sealed now");
    assert_eq!(
        (again.missing_seals, again.vouched_through),
        (0, full.last_seq - 1)
    );
    assert_eq!(check_all(&dir, 1), full.last_seq);
}

/// Open (or reopen: `day_epoch` is only for a new journal) with `max_payload_bytes` `limit`.
fn open_limited(dir: &Path, limit: u32, day_epoch: u64) -> (JournalWriter, RecoveryReport) {
    let config = JournalConfig {
        max_payload_bytes: limit,
        ..config(dir, Durability::Flush)
    };
    JournalWriter::open_or_create(config, day_epoch).expect("open with the limit")
}

/// A restart with a larger `max_payload_bytes` than the segment it continues was made with:
/// the records it now allows go to a new segment (the old one's header limit still holds
/// there), and the journal stays one that `verify` accepts and a reader reads whole. A
/// restart with a smaller limit goes on in the same segment.
#[test]
fn a_raised_payload_limit_continues_in_a_new_segment() {
    let temp = TempDir::new("raised-limit");
    let dir = temp.journal();
    // Payloads here are at most 150 bytes.
    let (mut writer, _) = open_limited(&dir, 160, DAY_EPOCH_UNIX_NS);
    append_range(&mut writer, 1, 10);
    writer.flush().expect("flush");
    drop(writer);
    let (mut writer, raised) = open_limited(&dir, MAX_PAYLOAD_BYTES, 0);
    let large = vec![7u8; 400];
    let seq = writer.append(timestamp(11), kind(11), &large);
    assert_eq!(seq.expect("append"), 11);
    writer.flush().expect("flush");
    drop(writer);
    let (mut writer, lowered) = open_limited(&dir, 160, 0);
    append_range(&mut writer, 12, 20);
    writer.flush().expect("flush");
    drop(writer);
    let verified = verify(&dir).expect("verify");
    assert_eq!(verified.last_seq, 20, "{verified:?}");
    let mut reader = JournalReader::open(&dir, 1).expect("reader");
    for seq in 1..=20 {
        let record = reader.next().expect("read").expect("a record");
        assert_eq!(record.seq, seq);
        let expected = if seq == 11 {
            large.clone()
        } else {
            payload(seq)
        };
        assert_eq!(record.payload, &expected[..], "record {seq}");
    }
    assert!(reader.next().expect("read").is_none());
    assert_eq!(raised.segments, 2, "a new segment: {raised:?}");
    assert_eq!(lowered.segments, 2, "none for a smaller limit: {lowered:?}");
}

/// A raised limit on a segment without records (opened, never written): it is sealed empty.
/// Such a journal is whole for `verify`, for a reader from record 1 and for a restart from a
/// snapshot, which checks the empty segment from its end as any sealed one.
#[test]
fn a_raised_payload_limit_on_an_empty_segment_seals_it_empty() {
    let temp = TempDir::new("raised-empty");
    let dir = temp.journal();
    let (writer, _) = open_limited(&dir, 160, DAY_EPOCH_UNIX_NS);
    drop(writer);
    let (mut writer, raised) = open_limited(&dir, MAX_PAYLOAD_BYTES, 0);
    assert_eq!(raised.segments, 2, "{raised:?}");
    append_range(&mut writer, 1, 200);
    writer.flush().expect("flush");
    drop(writer);
    let full = verify(&dir).expect("verify");
    assert!(full.last_seq == 200 && full.segments >= 3, "{full:?}");
    assert_eq!(check_all(&dir, 1), 200);
    let vouched = recovery::verify_vouched(&dir, 150).expect("verify from record 150");
    assert_eq!(
        vouched.vouched_through, 149,
        "checked from the end: {vouched:?}"
    );
    assert_eq!(
        (vouched.last_seq, vouched.last_timestamp, vouched.data_bytes),
        (full.last_seq, full.last_timestamp, full.data_bytes)
    );
}

/// Segment files sized in full and, of them, those whose header is published (a blank spare
/// is all zero; the helper creates a spare empty, then sizes it).
fn files_and_published(dir: &Path) -> (usize, usize) {
    let sized: Vec<Vec<u8>> = segment_files(dir)
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .filter(|bytes| bytes.len() as u64 == SEGMENT_BYTES)
        .collect();
    let published = sized.iter().filter(|bytes| bytes[..8] != [0; 8]).count();
    (sized.len(), published)
}

/// Wait (bounded) until the writer's helper has prepared a blank spare, sized.
fn wait_for_spare(dir: &Path) {
    for _ in 0..2_000 {
        let (sized, published) = files_and_published(dir);
        if sized > published {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no spare segment prepared within 2 s");
}

/// Read every record there is now; returns the next sequence number expected.
fn drain(reader: &mut JournalReader, mut expected: u64) -> u64 {
    while let Some(record) = reader.next().expect("read") {
        assert_eq!(record.seq, expected);
        assert_eq!(record.payload, &payload(expected)[..]);
        expected += 1;
    }
    expected
}

/// A tail waiting where the next record might not fit looks for the successor segment at
/// every poll. It maps the writer's blank spare once there, not once a poll (it used to map
/// and unmap the whole file each time: at the default 1 MiB largest record, the last MiB of
/// every segment).
#[test]
fn a_tail_at_a_segments_end_maps_the_spare_once() {
    const RECORDS: u64 = 600;
    const POLLS_PER_RECORD: u64 = 20;
    let temp = TempDir::new("tail-spare");
    let dir = temp.journal();
    let (mut writer, _) = open(&dir);
    append_range(&mut writer, 1, 1);
    writer.flush().expect("flush");
    let mut reader = JournalReader::open(&dir, 1).expect("reader");
    let mut expected = drain(&mut reader, 1);
    for seq in 2..=RECORDS {
        append_range(&mut writer, seq, seq);
        writer.flush().expect("flush");
        // The helper prepares the spare in the background: every end is polled with it there.
        wait_for_spare(&dir);
        expected = drain(&mut reader, expected);
        for _ in 0..POLLS_PER_RECORD {
            assert!(reader.next().expect("poll").is_none());
        }
    }
    assert_eq!(expected, RECORDS + 1);
    drop(writer);
    let segments = verify(&dir).expect("verify").segments as u64;
    assert!(segments > 8, "several rotations: {segments}");
    // Each segment once, and the spare after the last (a file is mapped only once sized).
    let maps = reader.segments_mapped();
    assert!(maps <= segments + 1, "{maps} maps for {segments} segments");
}

/// A writer that crashed while a tail waited at a segment's end, and the restarted writer
/// that replaced the blank spare the tail had mapped: the tail notices the new file and
/// follows the new writer through its rotations.
#[test]
fn a_tail_follows_a_restarted_writer_past_a_replaced_spare() {
    let temp = TempDir::new("tail-restart");
    let dir = temp.journal();
    let (mut writer, _) = open(&dir);
    let mut reader: Option<JournalReader> = None;
    let mut expected = 1;
    let mut seq = 0;
    // Append until the tail has mapped the spare (it waits where a record might not fit): one
    // mapping more than the segments published, each of which it entered.
    let spare_mapped = |r: &JournalReader, dir: &Path| {
        r.segments_mapped() == files_and_published(dir).1 as u64 + 1
    };
    while reader.as_ref().is_none_or(|r| !spare_mapped(r, &dir)) {
        seq += 1;
        assert!(seq < 200, "the tail never mapped a spare");
        append_range(&mut writer, seq, seq);
        writer.flush().expect("flush");
        wait_for_spare(&dir);
        let tail = reader.get_or_insert_with(|| JournalReader::open(&dir, 1).expect("reader"));
        expected = drain(tail, expected);
    }
    let mut reader = reader.expect("reader");
    let spare = segment_path(&dir, files_and_published(&dir).1 as u64 + 1);
    let inode =
        |path: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).expect("stat"));
    let spare_inode = inode(&spare);
    writer.crash();
    let (mut writer, recovered) = open(&dir);
    assert_eq!(recovered.last_seq, seq);
    append_range(&mut writer, seq + 1, seq + 200);
    writer.flush().expect("flush");
    assert_ne!(
        inode(&spare),
        spare_inode,
        "the restarted writer made a new file (else this test shows nothing)"
    );
    expected = drain(&mut reader, expected);
    assert_eq!(
        expected,
        seq + 201,
        "the tail read everything the new writer wrote"
    );
}
