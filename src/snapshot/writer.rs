//! The daemon's snapshot writer: the engine thread encodes the state into a buffer it gets
//! back from this thread (no file I/O, no hashing, and once the buffer has grown to the
//! state's size no allocation for the bytes themselves), and this thread does the rest off
//! the hot path: it waits until the streams have published the messages the snapshot counts
//! (they are released after durability), extends each stream's digest over the new
//! messages (incrementally: each message is hashed once per day), and writes the file
//! atomically.
//!
//! The points are the schedule's alone (journaled counts and times), never the writer's
//! pace: up to [`BUFFERS`] snapshots may be in flight, each in its own buffer reserved at
//! start-up; a snapshot due while every buffer is still being written is skipped with a log
//! line (an overload: snapshots closer together than the disk can write them).

use super::{Schedule, Snapshot};
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

/// What the engine thread hands over.
struct Job {
    last_seq: u64,
    inputs: u64,
    timestamp: Timestamp,
    state: Vec<u8>,
    /// Messages per stream (ITCH first, then every account's OUCH) after `last_seq`.
    counts: Vec<u64>,
    /// How long the engine thread spent encoding, for the log line.
    pause: Duration,
}

pub struct SnapshotWriter {
    schedule: Schedule,
    jobs: Option<SyncSender<Job>>,
    buffers: Receiver<Vec<u8>>,
    /// Buffers to encode into (the others are being written).
    spare: Vec<Vec<u8>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Where and what the writer thread writes.
pub struct WriterSetup {
    pub journal_dir: PathBuf,
    pub header_digest: [u8; 32],
    /// ITCH first, then every account's OUCH in config order.
    pub streams: Vec<StreamReader>,
    pub keep: usize,
    pub schedule: Schedule,
    /// Bytes reserved for the encoded state at start-up.
    pub buffer_bytes: usize,
}

impl SnapshotWriter {
    pub fn start(setup: WriterSetup) -> std::io::Result<SnapshotWriter> {
        let (jobs, job_rx) = sync_channel::<Job>(BUFFERS);
        let (buffer_tx, buffers) = sync_channel::<Vec<u8>>(BUFFERS);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let schedule = setup.schedule;
        let spare = (0..BUFFERS)
            .map(|_| Vec::with_capacity(setup.buffer_bytes))
            .collect();
        let thread = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || write_loop(setup, job_rx, buffer_tx, &thread_stop))?;
        Ok(SnapshotWriter {
            schedule,
            jobs: Some(jobs),
            buffers,
            spare,
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
            tracing::warn!(
                inputs,
                "snapshot skipped: the writer is still writing the previous {BUFFERS}"
            );
            return false;
        }
        true
    }

    /// Encode the state with `encode` (on this thread: the pause) and hand it over.
    pub fn take(
        &mut self,
        last_seq: u64,
        inputs: u64,
        timestamp: Timestamp,
        counts: Vec<u64>,
        encode: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) {
        let Some(mut state) = self.spare.pop() else {
            return;
        };
        let started = Instant::now();
        state.clear();
        if let Err(e) = encode(&mut state) {
            tracing::error!("snapshot not taken: encoding the state: {e}");
            self.spare.push(state);
            return;
        }
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
    buffers: SyncSender<Vec<u8>>,
    stop: &AtomicBool,
) {
    let mut hashers: Vec<StreamHasher> = vec![StreamHasher::default(); setup.streams.len()];
    while let Ok(mut job) = jobs.recv() {
        let started = Instant::now();
        match write_one(&setup, &mut hashers, &mut job, stop) {
            Ok(bytes) => tracing::info!(
                last_seq = job.last_seq,
                bytes,
                pause_us = job.pause.as_micros() as u64,
                write_ms = started.elapsed().as_millis() as u64,
                "snapshot written"
            ),
            Err(why) => tracing::warn!(last_seq = job.last_seq, "snapshot not written: {why}"),
        }
        if buffers.send(job.state).is_err() {
            return;
        }
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
        // Bounded: at most `count` messages, each published and immutable.
        for seq in hasher.messages + 1..=count {
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
        // Written from the buffer as it is (a busy day's state is gigabytes): no copy.
        state: &job.state[..],
    };
    let (_, bytes) =
        super::write_atomic(&setup.journal_dir, &snapshot).map_err(|e| e.to_string())?;
    super::prune(&setup.journal_dir, setup.keep);
    Ok(bytes as usize)
}

fn wait_published(reader: &StreamReader, count: u64, stop: &AtomicBool) -> Result<(), String> {
    let polls = PUBLISH_WAIT_MS_MAX / PUBLISH_POLL_MS;
    for _ in 0..polls {
        if reader.len() >= count {
            return Ok(());
        }
        if stop.load(Ordering::Acquire) {
            return Err("stopping".into());
        }
        std::thread::sleep(Duration::from_millis(PUBLISH_POLL_MS));
    }
    Err(format!(
        "the streams did not publish the snapshot's messages within {PUBLISH_WAIT_MS_MAX} ms"
    ))
}
