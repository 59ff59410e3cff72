//! The trading-day layout: dates, and which journal `bourse run` and the readers pick.

use super::*;
use crate::journal::{JournalConfig, JournalWriter};
use crate::sequencer::record::{KIND_START_OF_DAY, encode_admin};
use crate::types::Timestamp;

/// 2026-12-01 00:00 UTC.
const DEC_1: u64 = 20_788 * NANOS_PER_DAY;
const DAY: u64 = NANOS_PER_DAY;

#[test]
fn dates_name_utc_days_and_parse_back() {
    assert_eq!(date_of(0), "1970-01-01");
    assert_eq!(date_of(DEC_1), "2026-12-01");
    assert_eq!(date_of(DEC_1 + DAY - 1), "2026-12-01");
    assert_eq!(date_of(DEC_1 + DAY), "2026-12-02");
    assert_eq!(parse_date("2026-12-01"), Some(DEC_1));
    assert_eq!(parse_date("1970-01-01"), Some(0));
    // Leap days, month and year ends.
    for name in [
        "2024-02-29",
        "2000-02-29",
        "2026-12-31",
        "2027-01-01",
        "2100-03-01",
    ] {
        let epoch = parse_date(name).unwrap();
        assert_eq!(date_of(epoch), name);
        assert_eq!(epoch % DAY, 0);
    }
    for bad in [
        "2026-02-29",
        "2100-02-29",
        "2026-13-01",
        "2026-00-10",
        "2026-12-32",
        "2026-12-00",
        "2026-1-01",
        "2026-12-01.raft",
        "20261201",
        "abcd-ef-gh",
        "",
    ] {
        assert_eq!(parse_date(bad), None, "{bad}");
    }
}

/// A journal in `dir` started on `epoch` with a start-of-day record and, if `ended`, an
/// end-of-day admin record.
fn journal(dir: &Path, epoch: u64, ended: bool) {
    let config = JournalConfig {
        segment_bytes: 1 << 16,
        max_payload_bytes: 1024,
        ..JournalConfig::new(dir)
    };
    let (mut writer, _) = JournalWriter::open_or_create(config, epoch).unwrap();
    writer
        .append(Timestamp(1), KIND_START_OF_DAY, b"header")
        .unwrap();
    if ended {
        let mut payload = [0u8; 3];
        let n = encode_admin(Admin::EndOfDay, &mut payload);
        writer
            .append(Timestamp(2), KIND_ADMIN, &payload[..n])
            .unwrap();
    }
    writer.flush().unwrap();
}

#[test]
fn a_new_root_starts_today_and_a_single_journal_stays_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("journal");
    let chosen = for_run(&root, DEC_1).unwrap();
    assert_eq!(chosen.dir, root.join("2026-12-01"));
    assert!(chosen.note.contains("new"), "{}", chosen.note);
    // Segments directly in the directory: one journal, whatever the date or its state.
    journal(&root, DEC_1, true);
    let chosen = for_run(&root, DEC_1 + 5 * DAY).unwrap();
    assert_eq!(chosen.dir, root);
    assert!(chosen.note.contains("single-journal"), "{}", chosen.note);
    assert_eq!(for_epoch(&root, DEC_1 + DAY).unwrap(), root);
    assert_eq!(for_reading(&root).unwrap(), (root.clone(), None));
}

#[test]
fn run_continues_today_or_an_open_day_and_opens_a_new_day_after_an_ended_one() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("journal");
    let dec1 = root.join("2026-12-01");
    let dec2 = root.join("2026-12-02");
    journal(&dec1, DEC_1, false);
    assert_eq!(state(&dec1).unwrap(), DayState::Open);
    // Same date: continued. A later date while it is open: still continued.
    assert_eq!(for_run(&root, DEC_1).unwrap().dir, dec1);
    let later = for_run(&root, DEC_1 + DAY).unwrap();
    assert_eq!(later.dir, dec1);
    assert!(later.note.contains("not ended"), "{}", later.note);
    // Ended: the same date stays on it; the next date opens a new day.
    let tmp2 = tempfile::tempdir().unwrap();
    let root2 = tmp2.path().join("journal");
    let ended = root2.join("2026-12-01");
    journal(&ended, DEC_1, true);
    assert_eq!(state(&ended).unwrap(), DayState::Ended);
    assert_eq!(for_run(&root2, DEC_1).unwrap().dir, ended);
    assert_eq!(
        for_run(&root2, DEC_1 + DAY).unwrap().dir,
        root2.join("2026-12-02")
    );
    // A later day exists and today's does too: today's wins only when it is the latest.
    journal(&dec2, DEC_1 + DAY, false);
    assert_eq!(for_run(&root, DEC_1 + DAY).unwrap().dir, dec2);
    assert_eq!(for_run(&root, DEC_1 + 3 * DAY).unwrap().dir, dec2);
}

#[test]
fn an_ended_day_later_than_today_is_refused_and_empty_days_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("journal");
    journal(&root.join("2026-12-05"), DEC_1 + 4 * DAY, true);
    let err = for_run(&root, DEC_1).unwrap_err();
    assert!(err.contains("clock"), "{err}");
    // An empty directory of an earlier interrupted start, and foreign names, are ignored.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("journal");
    journal(&root.join("2026-12-01"), DEC_1, true);
    std::fs::create_dir_all(root.join("2026-12-02")).unwrap();
    std::fs::create_dir_all(root.join("2026-12-02.raft")).unwrap();
    std::fs::write(root.join("notes.txt"), "operator notes").unwrap();
    assert_eq!(state(&root.join("2026-12-02")).unwrap(), DayState::Empty);
    assert_eq!(
        for_run(&root, DEC_1 + 2 * DAY).unwrap().dir,
        root.join("2026-12-03")
    );
    // ...but today's empty directory is used.
    assert_eq!(
        for_run(&root, DEC_1 + DAY).unwrap().dir,
        root.join("2026-12-02")
    );
    // A file named like a day is an error, not silently skipped.
    std::fs::write(root.join("2026-12-09"), "").unwrap();
    assert!(for_run(&root, DEC_1 + DAY).is_err());
}

#[test]
fn readers_take_a_day_or_the_latest_day_of_a_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("journal");
    journal(&root.join("2026-12-01"), DEC_1, true);
    journal(&root.join("2026-12-02"), DEC_1 + DAY, false);
    let (dir, note) = for_reading(&root).unwrap();
    assert_eq!(dir, root.join("2026-12-02"));
    let note = note.unwrap();
    assert!(
        note.contains("2 trading days (2026-12-01..2026-12-02)"),
        "{note}"
    );
    let day = root.join("2026-12-01");
    assert_eq!(for_reading(&day).unwrap(), (day.clone(), None));
    assert_eq!(for_epoch(&root, DEC_1).unwrap(), day);
}

/// A recorded day (replay-logs/) copied into `into`, with state snapshots written by a
/// replay every `every_inputs` inputs.
fn recorded_day(name: &str, into: &Path, every_inputs: u64) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("replay-logs")
        .join(name)
        .join("journal");
    let day = into.join(name);
    std::fs::create_dir_all(&day).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), day.join(entry.file_name())).unwrap();
    }
    let options = crate::replay::ReplayOptions {
        write_snapshots: Some(crate::snapshot::Schedule::new(every_inputs, 0)),
        ..crate::replay::ReplayOptions::default()
    };
    crate::replay::replay_with(&day, options, |_| {}).unwrap();
    day
}

/// With a state snapshot, a day's end is looked for only after it (its state says whether
/// the day had ended by then): the same answer as reading the whole day, from a few records.
#[test]
fn a_day_with_a_snapshot_is_read_from_the_snapshot_on() {
    let tmp = tempfile::tempdir().unwrap();
    // busy-day: ~20,000 inputs in two segments, end of day its last record.
    let ended = recorded_day("busy-day", tmp.path(), 1_000);
    let newest = crate::snapshot::list(&ended)[0].0;
    let (state, read) = scan_state(&ended).unwrap();
    assert_eq!(state, DayState::Ended);
    assert!(newest > 19_000, "the newest snapshot is at {newest}");
    assert!(
        read <= 1 + 1_001,
        "{read} records read, the newest snapshot at {newest}"
    );
    std::fs::remove_dir_all(crate::snapshot::dir_of(&ended)).unwrap();
    let (state, read_all) = scan_state(&ended).unwrap();
    assert_eq!(state, DayState::Ended);
    assert!(
        read_all > newest,
        "without snapshots the whole day is read: {read_all}"
    );
    // edge-cases: an order after the end of day; a snapshot after every input, so the
    // newest one follows the end of day and answers alone.
    let closed = recorded_day("edge-cases", tmp.path(), 1);
    assert_eq!(scan_state(&closed).unwrap(), (DayState::Ended, 1));
    // torn-tail: its end of day was cut in half, so the day is open.
    let torn = recorded_day("torn-tail", tmp.path(), 100);
    let (state, read_after_newest) = scan_state(&torn).unwrap();
    assert_eq!(state, DayState::Open);
    assert!(
        read_after_newest <= 1 + 100,
        "{read_after_newest} records read"
    );
    // A damaged snapshot is passed over for an older one.
    let path = crate::snapshot::list(&torn)[0].1.clone();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let (state, read) = scan_state(&torn).unwrap();
    assert_eq!(state, DayState::Open);
    assert_eq!(
        read,
        read_after_newest + 100,
        "read from the snapshot before"
    );
}

/// A snapshot of a record the journal does not hold (a tail cut after it was taken) proves
/// nothing: an older one is used. Here the newest says the day had ended, at a record past
/// the journal's end; the day is open.
#[test]
fn a_snapshot_past_the_journals_end_is_passed_over() {
    let tmp = tempfile::tempdir().unwrap();
    let torn = recorded_day("torn-tail", tmp.path(), 100);
    let (newest, path) = crate::snapshot::list(&torn)[0].clone();
    let bytes = std::fs::read(&path).unwrap();
    let snapshot = crate::snapshot::Snapshot::decode(&bytes).unwrap();
    let mut state = snapshot.state.to_vec();
    // The phase after the state's version (24 bytes) and last sequence number: Closed.
    state[24 + 8] = 2;
    let mut beyond = snapshot.with_state(state);
    beyond.last_seq = newest + 1_000;
    crate::snapshot::write_atomic(&torn, &beyond).unwrap();
    let (state, read) = scan_state(&torn).unwrap();
    assert_eq!(state, DayState::Open);
    assert!(
        read <= 1 + 100,
        "read from the newest snapshot the journal holds: {read}"
    );
}

/// A snapshot that does not follow the journal's record of its number (records cut and
/// written again since) proves nothing either: here one says the day had ended, at a record
/// the journal holds, but with another record's fingerprint; the day is open. (Without the
/// check in `state_at_snapshot` this read "ended".)
#[test]
fn a_snapshot_of_another_record_is_passed_over() {
    let tmp = tempfile::tempdir().unwrap();
    let torn = recorded_day("torn-tail", tmp.path(), 100);
    let (newest, path) = crate::snapshot::list(&torn)[0].clone();
    let last = crate::journal::verify(&torn).unwrap().last_seq;
    assert!(last > newest, "records after the newest snapshot");
    let bytes = std::fs::read(&path).unwrap();
    let snapshot = crate::snapshot::Snapshot::decode(&bytes).unwrap();
    let mut state = snapshot.state.to_vec();
    // The phase after the state's version (24 bytes) and last sequence number: Closed.
    state[24 + 8] = 2;
    let mut other = snapshot.with_state(state);
    other.last_seq = last;
    crate::snapshot::write_atomic(&torn, &other).unwrap();
    let (state, _) = scan_state(&torn).unwrap();
    assert_eq!(state, DayState::Open);
}
