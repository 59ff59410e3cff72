//! Replay from a state snapshot prints exactly the full replay's digests, on the recorded
//! journals of replay-logs/: snapshots taken at seeded random points, a journal with a torn
//! tail, damaged snapshots (skipped for an older one, or a full replay).

use bourse::replay::{self, ReplayOptions, ReplayReport};
use bourse::snapshot::{self, Schedule};
use std::path::{Path, PathBuf};

fn logs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("replay-logs")
}

/// A copy of a recorded journal (snapshots are written next to it).
fn copy_journal(name: &str, into: &Path) -> PathBuf {
    let from = logs().join(name).join("journal");
    let to = into.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    to
}

fn expected(name: &str) -> Vec<String> {
    std::fs::read_to_string(logs().join(name).join("expected.txt"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn run(dir: &Path, options: ReplayOptions<'_>) -> ReplayReport {
    replay::replay_with(dir, options, |_| {}).unwrap()
}

fn write_every(dir: &Path, every_inputs: u64) -> ReplayReport {
    run(
        dir,
        ReplayOptions {
            write_snapshots: Some(Schedule::new(every_inputs, 0)),
            ..ReplayOptions::default()
        },
    )
}

fn from_snapshot(dir: &Path, no_digest: bool) -> ReplayReport {
    run(
        dir,
        ReplayOptions {
            from_snapshot: true,
            no_digest,
            ..ReplayOptions::default()
        },
    )
}

/// Seeded cadences in `lo..hi` (xorshift): a failure names its cadence.
fn cadences(seed: u64, count: usize, lo: u64, hi: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lo + x % (hi - lo)
        })
        .collect()
}

#[test]
fn a_replay_from_a_snapshot_at_random_points_prints_the_full_replays_digests() {
    let temp = tempfile::tempdir().unwrap();
    for (name, seed) in [
        ("busy-day", 11u64),
        ("venue-controls", 5),
        ("edge-cases", 3),
    ] {
        let want = expected(name);
        let dir = copy_journal(name, temp.path());
        let inputs = write_every(&dir, u64::MAX).inputs;
        // Each cadence writes at least one snapshot and at most ~40 (each is fsynced).
        for every in cadences(seed, 4, (inputs / 40).max(1), inputs - 1) {
            std::fs::remove_dir_all(snapshot::dir_of(&dir)).ok();
            let written = write_every(&dir, every);
            assert_eq!(written.digest_lines(), want, "{name}: writing snapshots");
            // After every input whose count is a multiple of `every` (the start is input 1).
            let points = (2..=inputs).filter(|n| n % every == 0).count() as u64;
            assert_eq!(written.snapshots_written, points);
            let newest = snapshot::list(&dir)[0].0;
            let resumed = from_snapshot(&dir, false);
            assert_eq!(resumed.from_snapshot, Some(newest), "{name} every {every}");
            assert_eq!(
                resumed.digest_lines(),
                want,
                "{name} from the snapshot every {every}"
            );
            assert!(resumed.applied < inputs, "{name}: only the tail is applied");
            // Recovery speed: no stream digests, the same state, numbers and message counts.
            let fast = from_snapshot(&dir, true);
            let strip = |lines: Vec<String>| -> Vec<String> {
                lines
                    .into_iter()
                    .map(|l| l.split(" sha256 ").next().unwrap().to_string())
                    .collect()
            };
            assert_eq!(
                strip(fast.digest_lines()),
                strip(want.clone()),
                "{name} no digest"
            );
        }
    }
}

#[test]
fn a_journal_with_a_snapshot_and_a_torn_tail_replays_the_valid_prefix() {
    let temp = tempfile::tempdir().unwrap();
    let want = expected("torn-tail");
    assert!(want.iter().any(|l| l.starts_with("torn_tail ")));
    let dir = copy_journal("torn-tail", temp.path());
    let full = write_every(&dir, 7);
    assert!(full.snapshots_written > 0);
    assert_eq!(full.digest_lines(), want);
    let resumed = from_snapshot(&dir, false);
    assert!(resumed.from_snapshot.is_some());
    assert_eq!(resumed.digest_lines(), want);
}

#[test]
fn a_damaged_snapshot_is_skipped_for_an_older_one_or_a_full_replay() {
    let temp = tempfile::tempdir().unwrap();
    let want = expected("busy-day");
    let dir = copy_journal("busy-day", temp.path());
    write_every(&dir, 5_000);
    let files = snapshot::list(&dir);
    assert_eq!(files.len(), snapshot::KEEP, "the newest are kept");
    // Flip one byte in the middle of the newest: the next one is used.
    let mut bytes = std::fs::read(&files[0].1).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&files[0].1, &bytes).unwrap();
    let resumed = from_snapshot(&dir, false);
    assert_eq!(resumed.from_snapshot, Some(files[1].0));
    assert_eq!(resumed.digest_lines(), want);
    // Cut the second short, and give the third a valid checksum over a state that does not
    // restore: with no valid snapshot left, a full replay.
    let second = std::fs::read(&files[1].1).unwrap();
    std::fs::write(&files[1].1, &second[..second.len() - 100]).unwrap();
    let third = std::fs::read(&files[2].1).unwrap();
    let decoded = snapshot::Snapshot::decode(&third).unwrap();
    let mut state = decoded.state.to_vec();
    let at = state.len() / 2;
    state[at] ^= 0xff;
    state.truncate(state.len() - 3);
    let s = decoded.with_state(state);
    std::fs::write(&files[2].1, s.encode()).unwrap();
    let full = from_snapshot(&dir, false);
    assert_eq!(full.from_snapshot, None);
    assert_eq!(full.digest_lines(), want);
}

/// A state whose bytes were changed (a bug, or a file forged with a valid checksum) is
/// refused or restored, never a panic: every count and cross-reference is checked.
#[test]
fn a_changed_state_is_refused_or_restored_never_a_panic() {
    use bourse::exchange::{Discard, Exchange, Limits};
    use bourse::workload::{self, Spec, Workload};
    // A realistic day on small tables (each try builds them all).
    let stream = workload::generate(Spec {
        ops: 4_000,
        ..Spec::standard(Workload::Realistic, 7)
    });
    let stats = &stream.stats;
    let limits = Limits {
        orders_per_symbol: (stats.max_resting + 64).next_power_of_two(),
        levels_per_side: (stats.max_levels + 16).next_power_of_two(),
        tokens_per_account: (stats.max_tokens_per_account + 64).next_power_of_two(),
    };
    let venue = workload::demo_venue("AAPL", stats.accounts, limits);
    let mut ex = Exchange::new(venue.clone()).unwrap();
    for input in workload::to_inputs(&stream.ops, "AAPL", venue.symbols[0].tick) {
        ex.apply(&input, &mut Discard::default());
    }
    assert!(ex.resting_orders() > 10, "a book to restore");
    let mut state = Vec::new();
    ex.save_state(&mut state).unwrap();
    let back = Exchange::from_state(venue.clone(), &state).unwrap();
    assert_eq!(back.state_digest(), ex.state_digest());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut refused = 0;
    for _ in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut changed = state.clone();
        let at = (x % changed.len() as u64) as usize;
        changed[at] = changed[at].wrapping_add(1 + ((x >> 32) % 255) as u8);
        let venue = venue.clone();
        let outcome =
            std::panic::catch_unwind(move || Exchange::from_state(venue, &changed).is_err());
        assert!(outcome.is_ok(), "byte {at} changed: a panic");
        refused += u32::from(outcome.unwrap());
    }
    assert!(refused > 0, "some changes are refused");
}

/// A snapshot whose checksums are valid but whose token table image is not one (a slot
/// marked pending: a state is taken settled) is refused when restored: the older snapshot
/// is used, with the full replay's digests.
#[test]
fn a_snapshot_whose_token_image_does_not_restore_is_skipped_for_an_older_one() {
    let temp = tempfile::tempdir().unwrap();
    let want = expected("busy-day");
    let dir = copy_journal("busy-day", temp.path());
    let written = write_every(&dir, 5_000);
    let (symbols, accounts) = (
        written.header.venue.symbols.len(),
        written.header.venue.accounts.len(),
    );
    let files = snapshot::list(&dir);
    let newest = std::fs::read(&files[0].1).unwrap();
    let decoded = snapshot::Snapshot::decode(&newest).unwrap();
    let mut state = decoded.state.to_vec();
    // The state's layout (src/exchange/state.rs): magic, last input, phase, next order
    // reference and match numbers, day ended; halts; blocks and executed shares; then each
    // account's slot count, free count, free list and slot array (18 bytes a slot: token,
    // state code, symbol).
    let mut at = 24 + 8 + 1 + 8 + 8 + 1 + 4 + symbols + 4 + accounts * 9;
    let u32_at =
        |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut marked = false;
    for _ in 0..accounts {
        let (slots, free) = (u32_at(&state, at) as usize, u32_at(&state, at + 4) as usize);
        let first_slot = at + 8 + 4 * free;
        if slots > free {
            // The first slot that is not voided (code 3): mark it pending (code 2).
            let used = (0..slots)
                .map(|k| first_slot + k * 18)
                .find(|&e| state[e + 14] != 3)
                .unwrap();
            state[used + 14..used + 16].copy_from_slice(&2u16.to_le_bytes());
            marked = true;
            break;
        }
        at = first_slot + 18 * slots;
    }
    assert!(marked, "a token to mark");
    let s = decoded.with_state(state);
    std::fs::write(&files[0].1, s.encode()).unwrap();
    let resumed = from_snapshot(&dir, false);
    assert_eq!(resumed.from_snapshot, Some(files[1].0));
    assert_eq!(resumed.digest_lines(), want);
}
