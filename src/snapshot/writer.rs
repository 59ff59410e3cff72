//! The daemon's snapshot writer: the engine thread encodes the state's counters and books
//! into a buffer it gets back from this thread and *lends* the token tables' slot arrays,
//! the bulk of a busy day's state, instead of copying them ([`LentState`]: no file I/O, no
//! hashing, no copy of the day's tokens, and once the buffer has grown no allocation for the
//! bytes themselves). This thread does the rest off the hot path: it waits until the streams
//! have published the messages the snapshot counts (they are released after durability),
//! extends each stream's digest over the new messages (incrementally: each message is
//! hashed once per day), and writes the file atomically, reading the lent arrays where they
//! lie while the engine goes on.
//!
//! The points are the schedule's alone (journaled counts and times), never the writer's
//! pace: up to [`BUFFERS`] snapshots may be in flight, each in its own buffer reserved at
//! start-up; a snapshot due while every buffer is still being written is skipped with a log
//! line (an overload: snapshots closer together than the disk can write them).

use super::{Schedule, Snapshot, StreamPosition};
use crate::exchange::LentState;
use crate::replay::StreamHasher;
use crate::stream::StreamReader;
use crate::types::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the writer waits for a stream to publish what a snapshot counts (the release
/// after durability) before it drops that snapshot with a log line.
const PUBLISH_WAIT_MS_MAX: u64 = 60_000;
const PUBLISH_POLL_MS: u64 = 2;
/// Snapshots in flight at most (buffers reserved at start-up).
pub const BUFFERS: usize = 2;
/// Journaled time between two "snapshots skipped" lines (points closer together than the
/// writer can write are skipped at every one: at a million inputs a second, several a
/// second).
const SKIP_LOG_INTERVAL_NS: u64 = 10 * Timestamp::NANOS_PER_SECOND;

/// Snapshot points skipped because every buffer was still being written, logged at most once
/// per [`SKIP_LOG_INTERVAL_NS`] of journaled time with how many.
#[derive(Default)]
struct Skips {
    /// Skipped since the last line.
    unlogged: u64,
    /// The journaled time of the last line.
    logged_at: Option<Timestamp>,
}

impl Skips {
    /// One point skipped; logs it with those before it once the interval has passed.
    fn skipped(&mut self, inputs: u64, timestamp: Timestamp) -> bool {
        self.unlogged += 1;
        let due = self
            .logged_at
            .is_none_or(|at| timestamp.0.saturating_sub(at.0) >= SKIP_LOG_INTERVAL_NS);
        if due {
            tracing::warn!(
                inputs,
                skipped = self.unlogged,
                "snapshots skipped: the writer is still writing the previous {BUFFERS} (points closer together than it writes; one line per {} s)",
                SKIP_LOG_INTERVAL_NS / Timestamp::NANOS_PER_SECOND
            );
            (self.unlogged, self.logged_at) = (0, Some(timestamp));
        }
        due
    }
}

/// What the engine thread hands over.
struct Job {
    last_seq: u64,
    inputs: u64,
    timestamp: Timestamp,
    state: LentState,
    /// Messages per stream (ITCH first, then every account's OUCH) after `last_seq`.
    counts: Vec<u64>,
    /// How long the engine thread spent encoding, for the log line.
    pause: Duration,
}

pub struct SnapshotWriter {
    schedule: Schedule,
    jobs: Option<SyncSender<Job>>,
    buffers: Receiver<LentState>,
    /// Buffers to encode into (the others are being written).
    spare: Vec<LentState>,
    skips: Skips,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The last record that may be snapshotted, read on the writer's thread: a cluster member's
/// released (hence committed) record.
pub type Committed = Box<dyn Fn() -> u64 + Send>;

/// Where and what the writer thread writes.
pub struct WriterSetup {
    pub journal_dir: PathBuf,
    pub header_digest: [u8; 32],
    /// ITCH first, then every account's OUCH in config order.
    pub streams: Vec<StreamReader>,
    pub keep: usize,
    pub schedule: Schedule,
    /// Bytes reserved at start-up for the state's encoded part (all but the slot arrays).
    pub buffer_bytes: usize,
    /// A snapshot is written only once its record is at or below this (waited for like the
    /// streams); `None`: at once (a venue alone: its journal is the truth as written).
    pub committed: Option<Committed>,
    /// Where the streams' digests stand at the snapshot the state was restored from (its
    /// positions, in `streams` order): hashing continues from there instead of from each
    /// stream's first message (after a restart from a 20M-input day's snapshot, the first
    /// snapshot hashed the whole day again: ~4.5 s of this thread). `None` or unusable (no
    /// digest state, another stream count): from the first message.
    pub resume: Option<Vec<StreamPosition>>,
}

impl SnapshotWriter {
    pub fn start(setup: WriterSetup) -> std::io::Result<SnapshotWriter> {
        let (jobs, job_rx) = sync_channel::<Job>(BUFFERS);
        let (buffer_tx, buffers) = sync_channel::<LentState>(BUFFERS);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let schedule = setup.schedule;
        let spare = (0..BUFFERS)
            .map(|_| LentState::with_capacity(setup.buffer_bytes))
            .collect();
        let thread = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || write_loop(setup, job_rx, buffer_tx, &thread_stop))?;
        Ok(SnapshotWriter {
            schedule,
            jobs: Some(jobs),
            buffers,
            spare,
            skips: Skips::default(),
            stop,
            thread: Some(thread),
        })
    }

    /// Count from a point already covered (a restored snapshot).
    pub fn start_at(&mut self, inputs: u64, timestamp: Timestamp) {
        self.schedule.start_at(inputs, timestamp);
    }

    /// After each input: is a snapshot due? (Skipped with a log line when every buffer is
    /// still being written.)
    #[inline]
    pub fn due(&mut self, inputs: u64, timestamp: Timestamp) -> bool {
        if !self.schedule.due(inputs, timestamp) {
            return false;
        }
        // Bounded: at most BUFFERS buffers exist.
        for _ in 0..BUFFERS {
            match self.buffers.try_recv() {
                Ok(buffer) => self.spare.push(buffer),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        if self.spare.is_empty() {
            self.skips.skipped(inputs, timestamp);
            return false;
        }
        true
    }

    /// Encode the state with `encode` (on this thread: the pause; the slot arrays are lent,
    /// not copied) and hand it over. `encode` returns the messages per stream at that point
    /// (ITCH first, then every account's OUCH).
    pub fn take(
        &mut self,
        last_seq: u64,
        inputs: u64,
        timestamp: Timestamp,
        encode: impl FnOnce(&mut LentState) -> std::io::Result<Vec<u64>>,
    ) {
        let Some(mut state) = self.spare.pop() else {
            return;
        };
        let started = Instant::now();
        // Empty: the writer clears a buffer (giving its slot arrays back) before it returns it.
        let counts = match encode(&mut state) {
            Ok(counts) => counts,
            Err(e) => {
                tracing::error!("snapshot not taken: encoding the state: {e}");
                state.clear();
                self.spare.push(state);
                return;
            }
        };
        let job = Job {
            last_seq,
            inputs,
            timestamp,
            state,
            counts,
            pause: started.elapsed(),
        };
        if let Some(jobs) = &self.jobs
            && jobs.try_send(job).is_err()
        {
            tracing::error!("snapshot not taken: the writer thread is gone");
        }
    }

    /// Stop taking snapshots at once, without waiting for the writer's thread (a cluster
    /// member losing the lead: its state is about to be stale, and its loop must not wait for
    /// a day's hashing). Jobs not yet written whose records are not committed are dropped; a
    /// job already past that check (committed state) may still be written, within a poll.
    pub fn abandon(mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.jobs.take());
        // Detached: it sees the stop within a poll or between messages, and exits.
        drop(self.thread.take());
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_loop(
    setup: WriterSetup,
    jobs: Receiver<Job>,
    buffers: SyncSender<LentState>,
    stop: &AtomicBool,
) {
    let mut hashers = resumed_hashers(&setup);
    while let Ok(mut job) = jobs.recv() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let started = Instant::now();
        match write_one(&setup, &mut hashers, &mut job, stop) {
            Ok(bytes) => tracing::info!(
                last_seq = job.last_seq,
                bytes,
                encoded_bytes = job.state.encoded_bytes(),
                pause_us = job.pause.as_micros() as u64,
                write_ms = started.elapsed().as_millis() as u64,
                "snapshot written"
            ),
            Err(why) => tracing::warn!(last_seq = job.last_seq, "snapshot not written: {why}"),
        }
        // The lent slot arrays go back with the buffer's clearing.
        job.state.clear();
        if buffers.send(job.state).is_err() {
            return;
        }
    }
}

/// The stream hashers to start from: [`WriterSetup::resume`]'s if every stream has its
/// digest state, else fresh ones.
fn resumed_hashers(setup: &WriterSetup) -> Vec<StreamHasher> {
    let resumed: Option<Vec<StreamHasher>> = setup
        .resume
        .as_ref()
        .filter(|positions| positions.len() == setup.streams.len())
        .and_then(|positions| positions.iter().map(StreamHasher::resume).collect());
    match resumed {
        Some(hashers) => {
            tracing::info!(
                messages = hashers.iter().map(|h| h.messages).sum::<u64>(),
                "snapshot writer: the streams' digests continue from the restored snapshot"
            );
            hashers
        }
        None => vec![StreamHasher::default(); setup.streams.len()],
    }
}

/// Hash the streams up to the job's counts, then write the file. Returns its size.
fn write_one(
    setup: &WriterSetup,
    hashers: &mut [StreamHasher],
    job: &mut Job,
    stop: &AtomicBool,
) -> Result<usize, String> {
    assert_eq!(job.counts.len(), setup.streams.len());
    if let Some(committed) = &setup.committed {
        wait_until(|| committed() >= job.last_seq, "its record committed", stop)?;
    }
    let mut positions = Vec::with_capacity(hashers.len());
    for ((reader, hasher), &count) in setup
        .streams
        .iter()
        .zip(hashers.iter_mut())
        .zip(&job.counts)
    {
        wait_published(reader, count, stop)?;
        if hasher.messages > count {
            return Err("a stream is behind the last snapshot's count".into());
        }
        // Bounded: at most `count` messages, each published and immutable. The first job
        // hashes the day so far: a stop is looked at every 64k messages.
        for seq in hasher.messages + 1..=count {
            if seq % (1 << 16) == 0 && stop.load(Ordering::Acquire) {
                return Err("stopping".into());
            }
            let message = reader.get(seq).ok_or("a published message is missing")?;
            hasher.add(message);
        }
        positions.push(hasher.position());
    }
    // The record the state followed, read back (and checked: its timestamp is the job's).
    let record_fingerprint =
        super::record_fingerprint(&setup.journal_dir, job.last_seq, Some(job.timestamp))?;
    let snapshot = Snapshot {
        last_seq: job.last_seq,
        inputs: job.inputs,
        timestamp: job.timestamp,
        record_fingerprint,
        header_digest: setup.header_digest,
        streams: positions,
        // Written from the buffer and the lent slot arrays as they are (a busy day's state is
        // gigabytes): no copy. Taken out of the job for the write, and put back.
        state: std::mem::take(&mut job.state),
    };
    let written = super::write_atomic(&setup.journal_dir, &snapshot);
    job.state = snapshot.state;
    let (_, bytes) = written.map_err(|e| e.to_string())?;
    super::prune(&setup.journal_dir, setup.keep, job.last_seq);
    Ok(bytes as usize)
}

fn wait_published(reader: &StreamReader, count: u64, stop: &AtomicBool) -> Result<(), String> {
    wait_until(
        || reader.len() >= count,
        "the snapshot's messages published",
        stop,
    )
}

/// Poll `done` (without spinning) until it holds, the writer stops, or the bound passes.
fn wait_until(done: impl Fn() -> bool, what: &str, stop: &AtomicBool) -> Result<(), String> {
    let polls = PUBLISH_WAIT_MS_MAX / PUBLISH_POLL_MS;
    for _ in 0..polls {
        if done() {
            return Ok(());
        }
        if stop.load(Ordering::Acquire) {
            return Err("stopping".into());
        }
        std::thread::sleep(Duration::from_millis(PUBLISH_POLL_MS));
    }
    Err(format!("not {what} within {PUBLISH_WAIT_MS_MAX} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Caps, StreamWriter};
    use std::path::Path;
    use std::sync::atomic::AtomicU64;

    /// A writer for the journal of records 1..=5 in `dir` (record n stamped 1,000 + n) and
    /// one empty stream, writing once `committed` reaches a snapshot's record.
    fn writer(dir: &Path, committed: &Arc<AtomicU64>) -> (SnapshotWriter, StreamWriter) {
        writer_resuming(dir, committed, None)
    }

    /// [`writer`] whose stream digests continue from `resume`.
    fn writer_resuming(
        dir: &Path,
        committed: &Arc<AtomicU64>,
        resume: Option<Vec<StreamPosition>>,
    ) -> (SnapshotWriter, StreamWriter) {
        let (mut journal, _) = crate::journal::small_test_journal(dir);
        for n in 1..=5u64 {
            journal.append(Timestamp(1_000 + n), 9, &[]).unwrap();
        }
        journal.flush().unwrap();
        let stores = crate::stream::store_dir(dir);
        std::fs::create_dir_all(&stores).unwrap();
        let (stream, reader) =
            StreamWriter::create(&stores.join("itch.store"), Caps::for_bytes(1 << 20)).unwrap();
        let committed = Arc::clone(committed);
        let setup = WriterSetup {
            journal_dir: dir.to_path_buf(),
            header_digest: [1; 32],
            streams: vec![reader],
            keep: 2,
            schedule: Schedule::new(1, 0),
            buffer_bytes: 1 << 10,
            committed: Some(Box::new(move || committed.load(Ordering::Acquire))),
            resume,
        };
        (SnapshotWriter::start(setup).unwrap(), stream)
    }

    fn take(writer: &mut SnapshotWriter, seq: u64) {
        assert!(writer.due(seq, Timestamp(1_000 + seq)));
        writer.take(seq, seq, Timestamp(1_000 + seq), |_| Ok(vec![0]));
    }

    /// A cluster member's snapshot is written once its record is committed, never before; one
    /// whose record is not committed when the writer stops (a deposed leader's, whose record
    /// its successor may replace) is dropped.
    #[test]
    fn a_snapshot_waits_for_its_record_to_be_committed() {
        let temp = tempfile::tempdir().unwrap();
        let dir: &Path = temp.path();
        let committed = Arc::new(AtomicU64::new(3));
        let (mut writer, _stream) = writer(dir, &committed);
        take(&mut writer, 4);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            super::super::list(dir).is_empty(),
            "written before its commit"
        );
        committed.store(4, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(10);
        while super::super::list(dir).is_empty() {
            assert!(Instant::now() < deadline, "not written once committed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(super::super::list(dir)[0].0, 4);
        take(&mut writer, 5);
        std::thread::sleep(Duration::from_millis(100));
        drop(writer);
        let written: Vec<u64> = super::super::list(dir).iter().map(|s| s.0).collect();
        assert_eq!(
            written,
            [4],
            "record 5 never committed: its snapshot is dropped"
        );
    }

    /// Hashing continues from the restored snapshot's digest states: the snapshot written
    /// after a restart carries the digest of the stream *as the snapshot had it* extended by
    /// the new messages, not a digest of the store from its first message (the same bytes
    /// here would give the same digest either way: the restored state is of other messages).
    #[test]
    fn the_stream_digests_continue_from_the_restored_snapshot() {
        let temp = tempfile::tempdir().unwrap();
        let dir: &Path = temp.path();
        let mut restored = StreamHasher::default();
        for m in [&b"x1"[..], b"x2", b"x3"] {
            restored.add(m);
        }
        let committed = Arc::new(AtomicU64::new(u64::MAX));
        let (mut writer, mut stream) =
            writer_resuming(dir, &committed, Some(vec![restored.position()]));
        let messages = [&b"m1"[..], b"m2", b"m3", b"m4", b"m5"];
        for m in messages {
            stream.append(m).unwrap();
        }
        stream.publish_through(5);
        assert!(writer.due(4, Timestamp(1_004)));
        writer.take(4, 4, Timestamp(1_004), |_| Ok(vec![5]));
        let deadline = Instant::now() + Duration::from_secs(10);
        while super::super::list(dir).is_empty() {
            assert!(Instant::now() < deadline, "not written");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(writer);
        let files = super::super::list(dir);
        let bytes = std::fs::read(&files[0].1).unwrap();
        let written = Snapshot::decode(&bytes).unwrap();
        let mut expected = restored.clone();
        for m in &messages[3..] {
            expected.add(m);
        }
        assert_eq!(written.streams, vec![expected.position()]);
    }

    /// Skipped points are logged once per interval of journaled time, with their count.
    #[test]
    fn skipped_points_are_logged_once_per_interval_with_their_count() {
        let mut skips = Skips::default();
        let s = |secs: u64| Timestamp(secs * Timestamp::NANOS_PER_SECOND);
        assert!(skips.skipped(1, s(100)), "the first is logged");
        assert!(!skips.skipped(2, s(101)));
        assert!(!skips.skipped(3, s(109)));
        assert_eq!(skips.unlogged, 2);
        assert!(skips.skipped(4, s(110)), "10 s later, with the 2 before it");
        assert_eq!(skips.unlogged, 0);
        assert!(!skips.skipped(5, s(115)));
    }
}
