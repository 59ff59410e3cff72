//! raft-rs's [`Storage`] on our journal: raft index = journal sequence number, and the
//! journal's records stay byte-identical to a single node's (`bourse replay` reads a cluster
//! member's journal as it reads any other).
//!
//! **Entry ↔ record.** A raft entry's data is `kind u8, timestamp u64 LE, payload`; it becomes
//! the journal record `(seq = index, timestamp, kind, payload)`. The empty entry raft appends
//! when a leader takes office becomes a leader-change record ([`KIND_NOOP`]) whose payload is
//! the term (u64 big-endian) and whose timestamp is the previous record's, so every member
//! writes the same bytes; read back, it is an empty entry again. Terms live in
//! [`TermRuns`] (`[cluster] dir/terms`); raft's hard state in [`HardStateFile`].
//!
//! **Writes.** A leader journals its own proposal at once ([`JournalStorage::append_proposal`],
//! before raft's `Ready` even lists it); entries from a leader are journaled when `Ready`
//! lists them ([`JournalStorage::append_entries`]). An entry that conflicts with a journaled
//! one (same index, other term: a deposed leader's uncommitted record) cuts the journal back
//! first with [`JournalWriter::truncate_after`] — never below the commit index (asserted) —
//! and says how many records it cut.
//!
//! **Reads.** Recent entries come from a bounded in-memory cache (the leader's steady state);
//! older ones from a tailing [`JournalReader`] kept open between calls, so a follower catching
//! up is read sequentially.
//!
//! **The journal's day.** Timestamps count from the journal's day epoch, which must be the same
//! on every member. A member with no journal yet creates it when the first record arrives,
//! with the epoch of the leader that sent it (the transport carries each sender's epoch), or,
//! as the first leader of a new cluster, with the epoch it was given.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use super::state::{Hard, HardStateFile, StateError, TermRuns, lock_dir, sync_dir};
use crate::journal::segment::{HEADER_BYTES, HeaderState, SegmentHeader, segment_path};
use crate::journal::{JournalConfig, JournalError, JournalReader, JournalWriter, Record};
use crate::sequencer::record::KIND_NOOP;
use crate::types::Timestamp;

/// Bytes in front of the payload in an entry's data.
pub const ENTRY_HEADER_BYTES: usize = 9;
/// Entries kept in memory for appends to followers (and their bytes, whichever bound is hit
/// first): the leader's steady state never reads the journal files.
pub const CACHE_ENTRIES_MAX: usize = 65_536;
pub const CACHE_BYTES_MAX: usize = 64 << 20;
/// Records a rebuild of the term runs reads at most (a day's journal is far smaller).
const REBUILD_RECORDS_MAX: u64 = 1 << 40;

/// A raft entry's data for a journal record.
pub fn encode_entry_data(timestamp: Timestamp, kind: u8, payload: &[u8]) -> Vec<u8> {
    assert!(kind != KIND_NOOP, "leader changes are raft's own entries");
    let mut data = Vec::with_capacity(ENTRY_HEADER_BYTES + payload.len());
    data.push(kind);
    data.extend_from_slice(&timestamp.0.to_le_bytes());
    data.extend_from_slice(payload);
    data
}

/// `(timestamp, kind, payload)` of a non-empty entry's data; `None` if it is malformed.
pub fn decode_entry_data(data: &Bytes) -> Option<(Timestamp, u8, Bytes)> {
    if data.len() < ENTRY_HEADER_BYTES || data[0] == KIND_NOOP {
        return None;
    }
    let timestamp = u64::from_le_bytes(data[1..9].try_into().expect("8"));
    Some((
        Timestamp(timestamp),
        data[0],
        data.slice(ENTRY_HEADER_BYTES..),
    ))
}

/// Payload of a leader-change record: its term.
pub fn noop_payload(term: u64) -> [u8; 8] {
    term.to_be_bytes()
}

/// Anything that stops the storage: the journal or a state file failed. Fatal for the node.
#[derive(Debug)]
pub enum StorageFailure {
    Journal(JournalError),
    State(StateError),
    /// The journal and the state files disagree.
    Inconsistent(String),
}

impl std::fmt::Display for StorageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageFailure::Journal(e) => write!(f, "journal: {e}"),
            StorageFailure::State(e) => write!(f, "cluster state: {e}"),
            StorageFailure::Inconsistent(why) => write!(f, "cluster state: {why}"),
        }
    }
}

impl std::error::Error for StorageFailure {}

impl From<JournalError> for StorageFailure {
    fn from(e: JournalError) -> Self {
        StorageFailure::Journal(e)
    }
}

impl From<StateError> for StorageFailure {
    fn from(e: StateError) -> Self {
        StorageFailure::State(e)
    }
}

/// What appending a batch of entries did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// Records cut from the journal first (a deposed leader's uncommitted ones).
    pub truncated_records: u64,
    /// The first sequence number cut, when any were.
    pub truncated_from: u64,
}

pub struct JournalStorage {
    journal_config: JournalConfig,
    state_dir: PathBuf,
    /// `None` until the journal exists (a new member that has not received a record yet).
    writer: Option<JournalWriter>,
    day_epoch_unix_ns: u64,
    last_index: u64,
    last_timestamp: Timestamp,
    terms: TermRuns,
    hard_file: HardStateFile,
    /// The hard state as last written.
    hard: Hard,
    /// The highest commit index known (written or not): nothing at or below it is ever cut.
    commit_floor: u64,
    conf_state: ConfState,
    /// Entries `cache_first ..` (contiguous, ending at `last_index`).
    cache: VecDeque<Entry>,
    cache_bytes: usize,
    reader: RefCell<Option<JournalReader>>,
    /// A record raft asked for could not be read (a damaged one: the journal's records
    /// before the snapshot a restart resumed from are not checked at open). Raft-rs panics
    /// on a storage error there, so `entries` reports the records as not yet available and
    /// the member stops cleanly at its next poll ([`Self::take_read_failure`]).
    read_failure: RefCell<Option<String>>,
    _lock: File,
}

impl JournalStorage {
    /// Open the member's journal (if it has one) and state files; `voters` are the member ids.
    pub fn open(
        journal_config: JournalConfig,
        state_dir: &Path,
        node_id: u64,
        voters: &[u64],
    ) -> Result<JournalStorage, StorageFailure> {
        let lock = lock_dir(state_dir)?;
        let (hard_file, mut hard) = HardStateFile::open(state_dir, node_id)?;
        let mut terms = TermRuns::open(state_dir)?;
        sync_dir(state_dir)?;
        let mut writer = None;
        let (mut day_epoch_unix_ns, mut last_index, mut last_timestamp) = (0, 0, Timestamp(0));
        if journal_exists(&journal_config.dir)? {
            // The snapshot a restart resumes from: at or below the recorded commit index, so
            // its record is committed and the records before it can never be cut.
            let vouched = crate::snapshot::newest_through(&journal_config.dir, hard.commit);
            let (opened, report) =
                JournalWriter::open_or_create_vouched(journal_config.clone(), 0, vouched)?;
            if report.vouched_through > 0 {
                tracing::info!(
                    vouched_through = report.vouched_through,
                    last_seq = report.last_seq,
                    "cluster: journal recovered from the snapshot's record on (the records before it are vouched for by the snapshot)"
                );
            }
            day_epoch_unix_ns = report.day_epoch_unix_ns;
            last_index = report.last_seq;
            last_timestamp = report.last_timestamp;
            writer = Some(opened);
        }
        terms.clip(last_index);
        if last_index > 0 && terms.runs().is_empty() {
            tracing::warn!(dir = %state_dir.display(), "cluster: term file missing: rebuilt from the journal's leader-change records");
            terms.rebuild(scan_runs(&journal_config.dir, last_index)?)?;
        }
        if last_index > 0 && terms.runs()[0].0 != 1 {
            let why = format!(
                "the journal's first record has no term (runs start at {}): a cluster starts from an empty journal",
                terms.runs()[0].0
            );
            return Err(StorageFailure::Inconsistent(why));
        }
        if hard.commit > last_index {
            tracing::warn!(
                commit = hard.commit,
                last_index,
                "cluster: the journal ends before the recorded commit (records lost in a machine crash?); re-learning it from the leader"
            );
            hard.commit = last_index;
        }
        let conf_state = ConfState {
            voters: voters.to_vec(),
            ..ConfState::default()
        };
        Ok(JournalStorage {
            journal_config,
            state_dir: state_dir.to_path_buf(),
            writer,
            day_epoch_unix_ns,
            last_index,
            last_timestamp,
            terms,
            hard_file,
            hard,
            commit_floor: hard.commit,
            conf_state,
            cache: VecDeque::with_capacity(1024),
            cache_bytes: 0,
            reader: RefCell::new(None),
            read_failure: RefCell::new(None),
            _lock: lock,
        })
    }

    /// The journal's day epoch (unix ns of midnight UTC), 0 while there is no journal.
    pub fn day_epoch_unix_ns(&self) -> u64 {
        self.day_epoch_unix_ns
    }

    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    pub fn hard(&self) -> Hard {
        self.hard
    }

    pub fn terms(&self) -> &TermRuns {
        &self.terms
    }

    pub fn journal_dir(&self) -> &Path {
        &self.journal_config.dir
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Create the journal with `day_epoch_unix_ns` if there is none yet. An existing journal
    /// keeps its own epoch; the caller compares.
    pub fn ensure_journal(&mut self, day_epoch_unix_ns: u64) -> Result<(), StorageFailure> {
        if self.writer.is_some() {
            return Ok(());
        }
        assert!(self.last_index == 0);
        let (writer, report) =
            JournalWriter::open_or_create(self.journal_config.clone(), day_epoch_unix_ns)?;
        assert!(report.last_seq == 0);
        self.day_epoch_unix_ns = report.day_epoch_unix_ns;
        self.writer = Some(writer);
        tracing::info!(
            dir = %self.journal_config.dir.display(),
            day_epoch_unix_ns,
            "cluster: journal created"
        );
        Ok(())
    }

    /// Journal a leader's own proposal at once; raft has just appended it at `index`.
    pub fn append_proposal(
        &mut self,
        index: u64,
        term: u64,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
        entry_data: Bytes,
    ) -> Result<(), StorageFailure> {
        assert!(
            index == self.last_index + 1,
            "proposal {index} does not follow {}",
            self.last_index
        );
        self.terms.note(index, term)?;
        let writer = self.writer.as_mut().expect("a leader has a journal");
        let seq = writer.append(timestamp, kind, payload)?;
        assert!(seq == index);
        self.last_index = index;
        self.last_timestamp = writer.last_timestamp();
        let entry = Entry {
            entry_type: EntryType::EntryNormal,
            term,
            index,
            data: entry_data,
            ..Entry::default()
        };
        self.cache_push(entry);
        Ok(())
    }

    /// Journal the entries a `Ready` lists (a follower's, or a new leader's empty entry).
    /// Entries already journaled with the same term (a leader's own proposals) are skipped; an
    /// entry whose term differs from the journaled one cuts the journal back first.
    pub fn append_entries(&mut self, entries: &[Entry]) -> Result<Appended, StorageFailure> {
        let mut appended = Appended::default();
        let mut position = 0;
        while position < entries.len() && entries[position].index <= self.last_index {
            let entry = &entries[position];
            if self.terms.term_of(entry.index) != entry.term {
                appended = self.truncate_after(entry.index - 1)?;
                break;
            }
            debug_assert!(self.cached_data_matches(entry));
            position += 1;
        }
        for entry in &entries[position..] {
            self.append_entry(entry)?;
        }
        Ok(appended)
    }

    fn append_entry(&mut self, entry: &Entry) -> Result<(), StorageFailure> {
        if entry.index != self.last_index + 1 {
            let why = format!(
                "entry {} does not follow record {}",
                entry.index, self.last_index
            );
            return Err(StorageFailure::Inconsistent(why));
        }
        if entry.get_entry_type() != EntryType::EntryNormal {
            let why = format!(
                "entry {} is a membership change: not supported",
                entry.index
            );
            return Err(StorageFailure::Inconsistent(why));
        }
        self.terms.note(entry.index, entry.term)?;
        let Some(writer) = self.writer.as_mut() else {
            let why = format!(
                "entry {} arrived before the journal's day epoch",
                entry.index
            );
            return Err(StorageFailure::Inconsistent(why));
        };
        let seq = if entry.data.is_empty() {
            let timestamp = writer.last_timestamp();
            writer.append(timestamp, KIND_NOOP, &noop_payload(entry.term))?
        } else {
            let Some((timestamp, kind, payload)) = decode_entry_data(&entry.data) else {
                let why = format!("entry {} carries malformed data", entry.index);
                return Err(StorageFailure::Inconsistent(why));
            };
            writer.append(timestamp, kind, &payload)?
        };
        assert!(seq == entry.index);
        self.last_index = seq;
        self.last_timestamp = writer.last_timestamp();
        self.cache_push(entry.clone());
        Ok(())
    }

    /// Cut every record after `seq` (never a committed one).
    fn truncate_after(&mut self, seq: u64) -> Result<Appended, StorageFailure> {
        assert!(
            seq >= self.commit_floor,
            "raft never replaces committed record {} (cut after {seq})",
            self.commit_floor
        );
        assert!(seq < self.last_index);
        self.reader.replace(None);
        let writer = self.writer.take().expect("records exist");
        let (writer, cut) = writer.truncate_after(seq)?;
        tracing::warn!(
            from_seq = seq + 1,
            records = cut,
            "cluster: cut {cut} uncommitted records a deposed leader journaled and the new leader never had"
        );
        assert!(cut == self.last_index - seq);
        self.last_index = seq;
        self.last_timestamp = writer.last_timestamp();
        self.writer = Some(writer);
        self.terms.clip(seq);
        while self.cache.back().is_some_and(|e| e.index > seq) {
            let entry = self.cache.pop_back().expect("non-empty");
            self.cache_bytes -= entry.data.len();
        }
        Ok(Appended {
            truncated_records: cut,
            truncated_from: seq + 1,
        })
    }

    /// Persist raft's hard state; `sync` when term or vote changed (before messages leave).
    pub fn set_hard_state(&mut self, state: &HardState, sync: bool) -> Result<(), StorageFailure> {
        let hard = Hard {
            term: state.term,
            vote: state.vote,
            commit: state.commit,
        };
        assert!(hard.commit <= self.last_index, "commit past the journal");
        assert!(hard.term >= self.hard.term, "terms never go back");
        self.hard_file.write(hard, sync)?;
        self.hard = hard;
        self.commit_floor = self.commit_floor.max(hard.commit);
        Ok(())
    }

    /// Note a commit index without writing it (written with the next hard-state write).
    pub fn note_commit(&mut self, commit: u64) {
        assert!(commit <= self.last_index);
        self.commit_floor = self.commit_floor.max(commit);
    }

    /// Group commit of the journal (msync in `flush` mode; an atomic store in `async`).
    pub fn flush(&mut self) -> Result<u64, StorageFailure> {
        match self.writer.as_mut() {
            Some(writer) => Ok(writer.flush()?),
            None => Ok(0),
        }
    }

    /// Timestamp of journaled record `seq` (0 for seq 0).
    pub fn record_timestamp(&self, seq: u64) -> Result<Timestamp, StorageFailure> {
        if seq == 0 {
            return Ok(Timestamp(0));
        }
        if seq == self.last_index {
            return Ok(self.last_timestamp);
        }
        let mut timestamp = Timestamp(0);
        self.read_records(seq, seq + 1, |record| {
            timestamp = record.timestamp;
            false
        })?;
        Ok(timestamp)
    }

    /// A read failure raft's `entries` met since the last call (see `read_failure`).
    pub fn take_read_failure(&self) -> Option<String> {
        self.read_failure.borrow_mut().take()
    }

    /// Call `each` with records `low..high` in order until it returns false.
    pub fn read_records(
        &self,
        low: u64,
        high: u64,
        mut each: impl FnMut(&Record<'_>) -> bool,
    ) -> Result<(), StorageFailure> {
        assert!(low >= 1 && high <= self.last_index + 1);
        let mut cursor = self.reader.borrow_mut();
        if cursor.as_ref().is_none_or(|r| r.next_seq() != low) {
            *cursor = Some(JournalReader::open(&self.journal_config.dir, low)?);
        }
        let reader = cursor.as_mut().expect("opened above");
        for expected in low..high {
            let Some(record) = reader.next()? else {
                let why = format!("record {expected} is missing from the journal");
                return Err(StorageFailure::Inconsistent(why));
            };
            assert!(record.seq == expected);
            if !each(&record) {
                break;
            }
        }
        Ok(())
    }

    fn cache_push(&mut self, entry: Entry) {
        assert!(self.cache.back().is_none_or(|e| e.index + 1 == entry.index));
        self.cache_bytes += entry.data.len();
        self.cache.push_back(entry);
        while self.cache.len() > CACHE_ENTRIES_MAX || self.cache_bytes > CACHE_BYTES_MAX {
            let old = self.cache.pop_front().expect("non-empty");
            self.cache_bytes -= old.data.len();
        }
    }

    fn cached_data_matches(&self, entry: &Entry) -> bool {
        let Some(first) = self.cache.front() else {
            return true;
        };
        if entry.index < first.index {
            return true;
        }
        let cached = &self.cache[(entry.index - first.index) as usize];
        cached.term == entry.term && cached.data == entry.data
    }

    /// The entry for a journal record (term from the runs).
    fn entry_of(&self, record: &Record<'_>) -> Result<Entry, StorageFailure> {
        let term = self.terms.term_of(record.seq);
        let data = if record.kind == KIND_NOOP {
            if record.payload != noop_payload(term) {
                let why = format!(
                    "leader-change record {} does not carry its term {term}",
                    record.seq
                );
                return Err(StorageFailure::Inconsistent(why));
            }
            Bytes::new()
        } else {
            Bytes::from(encode_entry_data(
                record.timestamp,
                record.kind,
                record.payload,
            ))
        };
        Ok(Entry {
            entry_type: EntryType::EntryNormal,
            term,
            index: record.seq,
            data,
            ..Entry::default()
        })
    }
}

/// Whether `dir` holds a started journal (segment 1 with a header).
fn journal_exists(dir: &Path) -> Result<bool, StorageFailure> {
    use std::os::unix::fs::FileExt;
    let path = segment_path(dir, 1);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(JournalError::io(&path, "open segment", error).into()),
    };
    let mut bytes = [0u8; HEADER_BYTES as usize];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return Ok(false);
    }
    Ok(matches!(
        SegmentHeader::decode(&path, &bytes),
        Ok(HeaderState::Valid(_))
    ))
}

/// The term runs a journal's leader-change records describe.
fn scan_runs(dir: &Path, last_index: u64) -> Result<Vec<(u64, u64)>, StorageFailure> {
    let mut reader = JournalReader::open(dir, 1)?;
    let mut runs = Vec::new();
    for _ in 0..REBUILD_RECORDS_MAX {
        let Some(record) = reader.next()? else {
            break;
        };
        if record.seq > last_index {
            break;
        }
        if record.kind == KIND_NOOP {
            let Ok(term) = <[u8; 8]>::try_from(record.payload).map(u64::from_be_bytes) else {
                let why = format!("leader-change record {} is malformed", record.seq);
                return Err(StorageFailure::Inconsistent(why));
            };
            runs.push((record.seq, term));
        }
    }
    Ok(runs)
}

/// Entries gathered for `Storage::entries` under its size limit (counted as raft's own
/// `limit_size` counts; the first entry is always taken).
struct Taken {
    entries: Vec<Entry>,
    bytes: u64,
    max_bytes: u64,
}

impl Taken {
    fn offer(&mut self, entry: Entry) -> bool {
        self.bytes += u64::from(entry.compute_size());
        if !self.entries.is_empty() && self.bytes > self.max_bytes {
            return false;
        }
        self.entries.push(entry);
        true
    }
}

fn unavailable() -> raft::Error {
    raft::Error::Store(StorageError::Unavailable)
}

impl Storage for JournalStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let hard_state = HardState {
            term: self.hard.term,
            vote: self.hard.vote,
            commit: self.hard.commit,
            ..HardState::default()
        };
        Ok(RaftState::new(hard_state, self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_bytes = max_size.into().unwrap_or(u64::MAX);
        if low < 1 || high > self.last_index + 1 || low > high {
            return Err(unavailable());
        }
        let mut taken = Taken {
            entries: Vec::with_capacity((high - low).min(1024) as usize),
            bytes: 0,
            max_bytes,
        };
        let cache_first = self.cache.front().map_or(u64::MAX, |e| e.index);
        let journal_high = high.min(cache_first.max(low));
        if low < journal_high {
            let mut failure = None;
            let read = self.read_records(low, journal_high, |record| match self.entry_of(record) {
                Ok(entry) => taken.offer(entry),
                Err(e) => {
                    failure = Some(e);
                    false
                }
            });
            if let Some(failure) = read.err().or(failure) {
                tracing::error!(%failure, low, high = journal_high, "cluster: a record raft needs cannot be read");
                self.read_failure.replace(Some(failure.to_string()));
                return Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable));
            }
            if (taken.entries.len() as u64) < journal_high - low {
                return Ok(taken.entries);
            }
        }
        for index in journal_high.max(low)..high {
            let entry = self.cache[(index - cache_first) as usize].clone();
            if !taken.offer(entry) {
                break;
            }
        }
        Ok(taken.entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == 0 {
            return Ok(0);
        }
        if idx > self.last_index {
            return Err(unavailable());
        }
        Ok(self.terms.term_of(idx))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index)
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // The journal is never compacted (first_index is always 1), so raft never needs one.
        tracing::error!("cluster: raft asked for a snapshot; the journal keeps every record");
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Durability;

    const DAY_EPOCH_UNIX_NS: u64 = 1_764_547_200_000_000_000; // 2025-12-01 00:00 UTC
    const RECORDS: u64 = 400;

    fn journal_config(dir: &Path) -> JournalConfig {
        JournalConfig {
            segment_bytes: 8192,
            max_payload_bytes: 256,
            durability: Durability::Async,
            create_dir: true,
            ..JournalConfig::new(dir)
        }
    }

    fn payload(index: u64) -> Vec<u8> {
        format!("member record {index:04} with a payload").into_bytes()
    }

    /// Records committed: the rest of the journal may still be cut.
    const COMMIT: u64 = 350;

    /// A member's journal of `RECORDS` records in term 1 (a leader change first), the first
    /// `COMMIT` committed.
    fn member_journal(journal: &Path, state: &Path) {
        let mut storage = JournalStorage::open(journal_config(journal), state, 1, &[1, 2, 3])
            .expect("a new member");
        storage.ensure_journal(DAY_EPOCH_UNIX_NS).expect("journal");
        let entries: Vec<Entry> = (1..=RECORDS)
            .map(|index| Entry {
                term: 1,
                index,
                data: match index {
                    1 => Bytes::new(),
                    _ => Bytes::from(encode_entry_data(
                        Timestamp(index * 1000),
                        b'O',
                        &payload(index),
                    )),
                },
                ..Entry::default()
            })
            .collect();
        storage.append_entries(&entries).expect("appended");
        storage.flush().expect("flushed");
        let hard = HardState {
            term: 1,
            vote: 1,
            commit: COMMIT,
            ..HardState::default()
        };
        storage.set_hard_state(&hard, true).expect("hard state");
    }

    /// Flip one byte of record `index`'s payload in whichever segment holds it.
    fn damage(journal: &Path, index: u64) {
        let needle = payload(index);
        for (_, path) in crate::journal::segment::list_segments(journal).expect("segments") {
            let mut bytes = std::fs::read(&path).expect("read");
            if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
                bytes[at + 7] ^= 0x10;
                std::fs::write(&path, bytes).expect("write");
                return;
            }
        }
        panic!("record {index} not found");
    }

    fn snapshot_named(journal: &Path, seq: u64) {
        let dir = crate::snapshot::dir_of(journal);
        std::fs::create_dir_all(&dir).expect("snapshot dir");
        std::fs::write(
            dir.join(format!("snapshot-{seq:020}.bin")),
            b"only its name is read",
        )
        .expect("snapshot file");
    }

    /// A member restarting from a snapshot checks where the records before it end, not each
    /// one's checksum (a 100M-record day: ~2 s of CRC32C), as a venue alone does; without a
    /// snapshot at or below its recorded commit it reads every checksum and refuses damage.
    #[test]
    fn a_snapshot_at_or_below_the_commit_vouches_for_the_records_before_it() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (journal, state) = (temp.path().join("journal"), temp.path().join("raft"));
        member_journal(&journal, &state);
        damage(&journal, 10);
        let open = || JournalStorage::open(journal_config(&journal), &state, 1, &[1, 2, 3]);
        let refused = open()
            .err()
            .expect("the full check reads record 10's checksum");
        assert!(refused.to_string().contains("checksum"), "{refused}");
        // A snapshot past the commit index (its record still in the journal) is not the one
        // a restart resumes from.
        snapshot_named(&journal, 380);
        assert!(
            open().is_err(),
            "a snapshot past the commit vouches for nothing"
        );
        snapshot_named(&journal, 300);
        let storage = open().expect("records 1..300 vouched for by snapshot 300");
        assert_eq!(
            (storage.last_index(), storage.hard().commit),
            (RECORDS, COMMIT)
        );
        // A reader still checks what it reads: a lagging follower is never sent record 10.
        let read = storage.read_records(9, 12, |_| true);
        assert!(read.is_err(), "record 10 is read with its checksum");
        // Raft asking for it gets "not yet" (an error there would be raft-rs's panic), and
        // the member learns why at its next poll (it stops cleanly).
        let context = GetEntriesContext::empty(false);
        let asked = storage.entries(9, 12, None, context);
        assert!(
            matches!(
                asked,
                Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable))
            ),
            "{asked:?}"
        );
        let why = storage.take_read_failure().expect("noted");
        assert!(why.contains("checksum"), "{why}");
        assert_eq!(storage.take_read_failure(), None);
        drop(storage);
        // The snapshot's own record is checked.
        damage(&journal, 300);
        assert!(open().is_err(), "the vouching record is read");
    }
}
