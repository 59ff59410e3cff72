//! The two small files a cluster node keeps beside its journal (in `[cluster] dir`), for what
//! the journal's records do not say:
//!
//! - **`terms`**: the raft term of every journal record, as runs. Terms change rarely (once per
//!   leader), so the file is an append-only list of 24-byte records `(first_index u64 LE,
//!   term u64 LE, CRC32C u32 LE of the 16 bytes, 4 zero bytes)`: "records from `first_index`
//!   on have `term`", a later record superseding every run that starts at or after its own
//!   `first_index` (that is how a follower's truncation is written without rewriting the
//!   file). A run is written and fdatasynced *before* the first record of it reaches the
//!   journal, so the file never lacks the term of a journaled record. A torn last record (a
//!   crash while appending it) is cut off on load. The file is a cache, not a second truth:
//!   every run starts with a leader-change record (`KIND_NOOP`) whose payload is its term, so
//!   [`TermRuns::rebuild`] recovers it from the journal alone.
//! - **`hardstate`**: raft's `(term, vote, commit)` in two fixed 64-byte slots written
//!   alternately, each `magic "BOURSEHS", generation, node id, term, vote, commit, CRC32C`. A
//!   write goes to the older slot, so a torn write leaves the newer one intact; the slot with the
//!   highest generation whose checksum matches wins. Term and vote are fdatasynced before any
//!   message that depends on them leaves (raft's `must_sync`); commit alone is written without
//!   a sync (it is only a hint on restart: a lower commit is re-learned from the leader).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Error type for the node's own files: what happened and to which file.
#[derive(Debug)]
pub struct StateError(pub String);

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StateError {}

fn io_error(path: &Path, op: &str, error: std::io::Error) -> StateError {
    StateError(format!("cannot {op} {}: {error}", path.display()))
}

const RUN_BYTES: usize = 24;
/// One run per leader that wrote records this node holds; far more than a day produces.
pub const TERM_RUNS_MAX: usize = 1 << 20;

/// The term of every journal record, as runs `(first_index, term)` with increasing indexes and
/// increasing terms.
pub struct TermRuns {
    path: PathBuf,
    file: File,
    runs: Vec<(u64, u64)>,
    /// Bytes of whole records in the file.
    file_bytes: u64,
    /// The file may hold a run past the journal's end (cut at load or by a truncation): the
    /// next appended record writes its run even if its term equals the last run's, so that
    /// stale run is superseded on disk too.
    force_next_run: bool,
}

impl TermRuns {
    /// Open (or create) `dir/terms`, cutting a torn last record.
    pub fn open(dir: &Path) -> Result<TermRuns, StateError> {
        let path = dir.join("terms");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_error(&path, "read", e))?;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut whole_bytes = 0u64;
        for chunk in bytes.chunks_exact(RUN_BYTES) {
            let first_index = u64::from_le_bytes(chunk[0..8].try_into().expect("8"));
            let term = u64::from_le_bytes(chunk[8..16].try_into().expect("8"));
            let crc = u32::from_le_bytes(chunk[16..20].try_into().expect("4"));
            if crc != crc32c::crc32c(&chunk[0..16]) || first_index == 0 || term == 0 {
                break;
            }
            supersede(&mut runs, first_index, term);
            whole_bytes += RUN_BYTES as u64;
        }
        if whole_bytes != bytes.len() as u64 {
            tracing::warn!(
                path = %path.display(),
                cut_bytes = bytes.len() as u64 - whole_bytes,
                "cluster: torn record at the end of the term file cut"
            );
            file.set_len(whole_bytes)
                .map_err(|e| io_error(&path, "cut", e))?;
        }
        check_runs(&path, &runs)?;
        Ok(TermRuns {
            path,
            file,
            runs,
            file_bytes: whole_bytes,
            force_next_run: false,
        })
    }

    /// Replace the file's content by runs found in the journal (every run starts with a
    /// leader-change record carrying its term). Used when the file is missing or empty but the
    /// journal is not.
    pub fn rebuild(&mut self, runs: Vec<(u64, u64)>) -> Result<(), StateError> {
        check_runs(&self.path, &runs)?;
        self.file
            .set_len(0)
            .map_err(|e| io_error(&self.path, "empty", e))?;
        self.file_bytes = 0;
        self.runs.clear();
        for (first_index, term) in runs {
            self.write_run(first_index, term)?;
            self.runs.push((first_index, term));
        }
        self.sync()
    }

    /// Forget runs starting after `last_index` (records that are not in the journal). The file
    /// keeps them until the next run written supersedes them.
    pub fn clip(&mut self, last_index: u64) {
        let before = self.runs.len();
        self.runs
            .retain(|&(first_index, _)| first_index <= last_index);
        if self.runs.len() != before {
            self.force_next_run = true;
        }
    }

    /// Term of record `index` (0 for index 0 or an index before every run).
    pub fn term_of(&self, index: u64) -> u64 {
        let position = self.runs.partition_point(|&(first, _)| first <= index);
        if position == 0 {
            return 0;
        }
        self.runs[position - 1].1
    }

    pub fn last_term(&self) -> u64 {
        self.runs.last().map_or(0, |&(_, term)| term)
    }

    pub fn runs(&self) -> &[(u64, u64)] {
        &self.runs
    }

    /// Record `index` is about to be journaled with `term`: write (and fdatasync) a new run if
    /// it starts one. Call before the journal append.
    pub fn note(&mut self, index: u64, term: u64) -> Result<(), StateError> {
        assert!(index >= 1 && term >= 1);
        if !self.force_next_run && self.last_term() == term {
            return Ok(());
        }
        if let Some(&(last_first, last_term)) = self.runs.last()
            && (index <= last_first || term < last_term)
        {
            return Err(StateError(format!(
                "{}: run ({index}, term {term}) does not follow ({last_first}, term {last_term})",
                self.path.display()
            )));
        }
        if self.runs.len() >= TERM_RUNS_MAX {
            return Err(StateError(format!(
                "{}: more than {TERM_RUNS_MAX} terms",
                self.path.display()
            )));
        }
        self.write_run(index, term)?;
        self.sync()?;
        supersede(&mut self.runs, index, term);
        self.force_next_run = false;
        Ok(())
    }

    fn write_run(&mut self, first_index: u64, term: u64) -> Result<(), StateError> {
        let mut record = [0u8; RUN_BYTES];
        record[0..8].copy_from_slice(&first_index.to_le_bytes());
        record[8..16].copy_from_slice(&term.to_le_bytes());
        let crc = crc32c::crc32c(&record[0..16]);
        record[16..20].copy_from_slice(&crc.to_le_bytes());
        self.file
            .write_all(&record)
            .map_err(|e| io_error(&self.path, "append to", e))?;
        self.file_bytes += RUN_BYTES as u64;
        Ok(())
    }

    fn sync(&self) -> Result<(), StateError> {
        self.file
            .sync_data()
            .map_err(|e| io_error(&self.path, "fdatasync", e))
    }
}

/// Apply "records from `first_index` on have `term`" to a run list. A run with the last
/// remaining run's term continues it (written after a cut to supersede a stale run on disk).
fn supersede(runs: &mut Vec<(u64, u64)>, first_index: u64, term: u64) {
    let keep = runs.partition_point(|&(first, _)| first < first_index);
    runs.truncate(keep);
    if runs.last().is_none_or(|&(_, last_term)| last_term != term) {
        runs.push((first_index, term));
    }
}

fn check_runs(path: &Path, runs: &[(u64, u64)]) -> Result<(), StateError> {
    for pair in runs.windows(2) {
        if pair[1].0 <= pair[0].0 || pair[1].1 <= pair[0].1 {
            return Err(StateError(format!(
                "{}: runs {:?} and {:?} are out of order",
                path.display(),
                pair[0],
                pair[1]
            )));
        }
    }
    if runs.len() > TERM_RUNS_MAX {
        return Err(StateError(format!(
            "{}: more than {TERM_RUNS_MAX} terms",
            path.display()
        )));
    }
    Ok(())
}

const SLOT_BYTES: u64 = 64;
const HARD_STATE_MAGIC: u64 = u64::from_le_bytes(*b"BOURSEHS");

/// Raft's hard state as this node last wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hard {
    pub term: u64,
    pub vote: u64,
    pub commit: u64,
}

/// `dir/hardstate`: two alternating slots (see the module docs).
pub struct HardStateFile {
    path: PathBuf,
    file: File,
    node_id: u64,
    generation: u64,
}

impl HardStateFile {
    /// Open (or create) the file; returns the newest valid state (default when new).
    /// A slot written by another node id is refused: this directory is another member's.
    pub fn open(dir: &Path, node_id: u64) -> Result<(HardStateFile, Hard), StateError> {
        let path = dir.join("hardstate");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        let mut bytes = [0u8; 2 * SLOT_BYTES as usize];
        let len = file
            .read_at(&mut bytes, 0)
            .map_err(|e| io_error(&path, "read", e))?;
        let mut best: Option<(u64, Hard)> = None;
        for slot in 0..2 {
            let at = slot * SLOT_BYTES as usize;
            if len < at + SLOT_BYTES as usize {
                continue;
            }
            let Some((generation, id, hard)) = decode_slot(&bytes[at..at + SLOT_BYTES as usize])
            else {
                continue;
            };
            if id != node_id {
                return Err(StateError(format!(
                    "{} belongs to cluster member {id}, not {node_id}: check [cluster] id and dir",
                    path.display()
                )));
            }
            if best.is_none_or(|(g, _)| generation > g) {
                best = Some((generation, hard));
            }
        }
        if best.is_none() && bytes[..len].iter().any(|&b| b != 0) {
            return Err(StateError(format!(
                "{}: neither hard-state slot is valid",
                path.display()
            )));
        }
        let (generation, hard) = best.unwrap_or_default();
        let state = HardStateFile {
            path,
            file,
            node_id,
            generation,
        };
        Ok((state, hard))
    }

    /// Write `hard` into the older slot; fdatasync when `sync` (term or vote changed).
    pub fn write(&mut self, hard: Hard, sync: bool) -> Result<(), StateError> {
        self.generation += 1;
        let mut slot = [0u8; SLOT_BYTES as usize];
        slot[0..8].copy_from_slice(&HARD_STATE_MAGIC.to_le_bytes());
        slot[8..16].copy_from_slice(&self.generation.to_le_bytes());
        slot[16..24].copy_from_slice(&self.node_id.to_le_bytes());
        slot[24..32].copy_from_slice(&hard.term.to_le_bytes());
        slot[32..40].copy_from_slice(&hard.vote.to_le_bytes());
        slot[40..48].copy_from_slice(&hard.commit.to_le_bytes());
        let crc = crc32c::crc32c(&slot[0..48]);
        slot[48..52].copy_from_slice(&crc.to_le_bytes());
        let offset = (self.generation % 2) * SLOT_BYTES;
        self.file
            .write_all_at(&slot, offset)
            .map_err(|e| io_error(&self.path, "write", e))?;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| io_error(&self.path, "fdatasync", e))?;
        }
        Ok(())
    }
}

fn decode_slot(slot: &[u8]) -> Option<(u64, u64, Hard)> {
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8"));
    if word(0) != HARD_STATE_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(slot[48..52].try_into().expect("4"));
    if crc != crc32c::crc32c(&slot[0..48]) {
        return None;
    }
    let hard = Hard {
        term: word(24),
        vote: word(32),
        commit: word(40),
    };
    Some((word(8), word(16), hard))
}

/// Take the state directory's advisory lock: one node process per directory.
pub fn lock_dir(dir: &Path) -> Result<File, StateError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "create directory", e))?;
    let handle = File::open(dir).map_err(|e| io_error(dir, "open directory", e))?;
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => Err(StateError(format!(
            "cluster state {} is locked by another process",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => Err(io_error(dir, "lock", error)),
    }
}

/// fsync a directory so a created file's entry survives a machine crash.
pub fn sync_dir(dir: &Path) -> Result<(), StateError> {
    let handle = File::open(dir).map_err(|e| io_error(dir, "open directory", e))?;
    handle
        .sync_all()
        .map_err(|e| io_error(dir, "fsync directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_supersede_and_survive_reopen() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mut runs = TermRuns::open(temp.path()).expect("open");
        assert_eq!(runs.term_of(5), 0);
        runs.note(1, 2).expect("note");
        runs.note(2, 2).expect("same term: no new run");
        runs.note(10, 3).expect("note");
        runs.note(20, 5).expect("note");
        assert_eq!(runs.runs(), &[(1, 2), (10, 3), (20, 5)]);
        assert_eq!(
            (
                runs.term_of(0),
                runs.term_of(9),
                runs.term_of(10),
                runs.term_of(99)
            ),
            (0, 2, 3, 5)
        );
        assert!(runs.note(15, 4).is_err(), "a run must follow the last one");
        // A truncation after 12, then a new leader's records from 13 with term 6.
        runs.clip(12);
        assert_eq!(runs.runs(), &[(1, 2), (10, 3)]);
        runs.note(13, 6).expect("note");
        drop(runs);
        let runs = TermRuns::open(temp.path()).expect("reopen");
        assert_eq!(runs.runs(), &[(1, 2), (10, 3), (13, 6)]);
    }

    /// After a cut, the next run is written even when its term equals the last remaining
    /// run's: otherwise the stale run on disk would label the new records after a restart.
    #[test]
    fn a_run_after_a_cut_is_written_even_with_the_same_term() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mut runs = TermRuns::open(temp.path()).expect("open");
        runs.note(1, 2).expect("note");
        runs.note(10, 4).expect("note");
        runs.clip(9);
        runs.note(10, 2).expect("same term as the remaining run");
        assert_eq!(runs.runs(), &[(1, 2)], "a continuation, not a new run");
        drop(runs);
        let runs = TermRuns::open(temp.path()).expect("reopen");
        assert_eq!(runs.runs(), &[(1, 2)]);
        assert_eq!(runs.term_of(10), 2);
        assert_eq!(
            std::fs::metadata(temp.path().join("terms"))
                .expect("stat")
                .len(),
            3 * RUN_BYTES as u64,
            "the continuation was written, superseding the stale run on disk"
        );
    }

    #[test]
    fn torn_run_record_is_cut() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mut runs = TermRuns::open(temp.path()).expect("open");
        runs.note(1, 1).expect("note");
        runs.note(7, 2).expect("note");
        drop(runs);
        let path = temp.path().join("terms");
        let bytes = std::fs::read(&path).expect("read");
        for cut in 1..RUN_BYTES {
            std::fs::write(&path, &bytes[..bytes.len() - cut]).expect("write");
            let runs = TermRuns::open(temp.path()).expect("open torn");
            assert_eq!(runs.runs(), &[(1, 1)]);
            assert_eq!(
                std::fs::metadata(&path).expect("stat").len(),
                RUN_BYTES as u64
            );
        }
    }

    #[test]
    fn hard_state_keeps_the_newest_valid_slot() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (mut file, hard) = HardStateFile::open(temp.path(), 2).expect("open");
        assert_eq!(hard, Hard::default());
        let first = Hard {
            term: 3,
            vote: 2,
            commit: 10,
        };
        let second = Hard {
            term: 4,
            vote: 1,
            commit: 12,
        };
        file.write(first, true).expect("write");
        file.write(second, false).expect("write");
        drop(file);
        let (_, hard) = HardStateFile::open(temp.path(), 2).expect("reopen");
        assert_eq!(hard, second);
        // Tear the newest slot at every byte: the older one is read.
        let path = temp.path().join("hardstate");
        let pristine = std::fs::read(&path).expect("read");
        let newest = 0usize; // generation 2 lives in slot 0
        for byte in 0..52 {
            let mut torn = pristine.clone();
            torn[newest * 64 + byte] ^= 0x5a;
            std::fs::write(&path, &torn).expect("write");
            let (_, hard) = HardStateFile::open(temp.path(), 2).expect("reopen torn");
            assert_eq!(hard, first, "byte {byte}");
        }
        std::fs::write(&path, &pristine).expect("restore");
        assert!(
            HardStateFile::open(temp.path(), 3).is_err(),
            "another member's"
        );
    }
}
