//! The single writer: appends records, rotates segments with a helper thread preparing the
//! next one, and group-commits (`flush`) according to the durability mode.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use super::manifest::LiveManifest;
use super::record::{SEAL_BYTES, record_span_bytes, write_record, write_seal};
use super::recovery::{self, RecoveryReport};
use super::segment::{self, HEADER_BYTES, MappedSegment, SegmentHeader};
use super::{Durability, DurabilityGate, JournalConfig, JournalError, NANOS_PER_DAY};
use crate::types::Timestamp;

/// Segments retired between two flushes that still wait for their msync. Past this many the
/// writer syncs them at the rotation itself (only if the caller flushes very rarely).
const RETIRED_UNFLUSHED_LIMIT: usize = 8;

/// The journal's one writer. Owns the directory lock; dropping it syncs (in `Flush` and
/// `Replicated` modes), stops the helper thread and removes the unused spare segment.
pub struct JournalWriter {
    config: JournalConfig,
    day_epoch_unix_ns: u64,
    current: MappedSegment,
    write_offset_bytes: u64,
    /// Bytes of `current` before this offset were msynced by the last flush.
    flushed_offset_bytes: u64,
    next_seq: u64,
    last_timestamp: Timestamp,
    /// Full segments whose tail `[from, to)` awaits the next flush's msync.
    retired_unflushed: Vec<(MappedSegment, u64, u64)>,
    durable_seq: Arc<AtomicU64>,
    confirmed_seq: Arc<AtomicU64>,
    /// The durable marks (flushed and sealed through), updated in place on every flush and
    /// seal; recovery refuses damage below them instead of cutting it as a torn tail.
    manifest: LiveManifest,
    /// Tests: drop like a killed process (no final sync, no mark updates, spare left).
    crash_on_drop: bool,
    helper: Helper,
    _lock: File,
}

impl JournalWriter {
    /// Open the journal in `config.dir`, recovering it, or start a new one whose day epoch is
    /// `day_epoch_unix_ns_for_new` (midnight UTC, unix ns; ignored for an existing journal —
    /// the report carries the journal's own).
    pub fn open_or_create(
        config: JournalConfig,
        day_epoch_unix_ns_for_new: u64,
    ) -> Result<(JournalWriter, RecoveryReport), JournalError> {
        Self::open_or_create_vouched(config, day_epoch_unix_ns_for_new, 0)
    }

    /// [`Self::open_or_create`] where a state snapshot after record `vouched_seq` (0: none)
    /// vouches for the records before it: recovery checks only where they end, then record
    /// `vouched_seq` and everything after it (see [`super::recovery`]; the report's
    /// `vouched_through` says whether it could).
    pub fn open_or_create_vouched(
        config: JournalConfig,
        day_epoch_unix_ns_for_new: u64,
        vouched_seq: u64,
    ) -> Result<(JournalWriter, RecoveryReport), JournalError> {
        config.validate()?;
        if !day_epoch_unix_ns_for_new.is_multiple_of(NANOS_PER_DAY) {
            let reason = format!("day epoch {day_epoch_unix_ns_for_new} ns is not a midnight UTC");
            return Err(JournalError::InvalidConfig { reason });
        }
        ensure_dir(&config.dir, config.create_dir)?;
        let lock = lock_dir(&config.dir)?;
        let recovered = recovery::recover(
            &config.dir,
            false,
            Some(day_epoch_unix_ns_for_new),
            vouched_seq,
        )?;
        let mut report = recovered.report;
        let marks = recovered
            .marks
            .expect("a writer's recovery always writes the marks");
        let (current, write_offset_bytes) = match recovered.tail {
            None => {
                report.day_epoch_unix_ns = day_epoch_unix_ns_for_new;
                report.segments = 1;
                report.data_bytes = HEADER_BYTES;
                (
                    start_segment(&config, 1, 1, day_epoch_unix_ns_for_new)?,
                    HEADER_BYTES,
                )
            }
            Some((_, tail)) if tail.sealed => {
                let index = tail.segment_index + 1;
                report.segments += 1;
                report.data_bytes += HEADER_BYTES;
                (
                    start_segment(
                        &config,
                        index,
                        report.last_seq + 1,
                        report.day_epoch_unix_ns,
                    )?,
                    HEADER_BYTES,
                )
            }
            Some((mapped, tail)) => (mapped, tail.end_offset_bytes),
        };
        // Records of the segment it continues must fit that segment's header's limit, which a
        // config raised since then would pass (and rotate by): a new segment first.
        let continued_limit = match SegmentHeader::load_published(&current.path, current.bytes())? {
            segment::HeaderState::Valid(header) => header.max_payload_bytes,
            segment::HeaderState::Blank => config.max_payload_bytes,
        };
        let rotate_at_open = continued_limit < config.max_payload_bytes;
        if !rotate_at_open {
            current.prefault(write_offset_bytes);
        }
        assert!(marks.day_epoch_unix_ns == report.day_epoch_unix_ns);
        assert!(marks.sealed_through_segment + 1 == current.segment_index);
        let manifest = LiveManifest::open(&config.dir, marks)?;
        let helper = Helper::spawn(&config, current.segment_index + 1)?;
        let mut writer = JournalWriter {
            manifest,
            crash_on_drop: false,
            day_epoch_unix_ns: report.day_epoch_unix_ns,
            flushed_offset_bytes: write_offset_bytes,
            write_offset_bytes,
            current,
            next_seq: report.last_seq + 1,
            last_timestamp: report.last_timestamp,
            retired_unflushed: Vec::with_capacity(RETIRED_UNFLUSHED_LIMIT),
            durable_seq: Arc::new(AtomicU64::new(report.last_seq)),
            confirmed_seq: Arc::new(AtomicU64::new(report.last_seq)),
            helper,
            _lock: lock,
            config,
        };
        if rotate_at_open {
            writer.rotate_for_a_larger_limit(continued_limit)?;
            writer.current.prefault(HEADER_BYTES);
            report.segments += 1;
            report.data_bytes += SEAL_BYTES + HEADER_BYTES;
        }
        Ok((writer, report))
    }

    /// At open: the segment continued was made with a lower `max_payload_bytes` than the
    /// config's. A record between the two would be refused by readers there, and a rotation
    /// for one would end the segment earlier than a writer with that header's limit ever
    /// does (`record::rotation_room_bytes`), which `verify` refuses should a machine crash
    /// lose the seal. So seal it now, the seal durable before the next header is published,
    /// and go on in a segment with the config's limit.
    #[cold]
    fn rotate_for_a_larger_limit(&mut self, segment_limit: u32) -> Result<(), JournalError> {
        tracing::info!(
            segment = self.current.segment_index,
            segment_limit,
            config_limit = self.config.max_payload_bytes,
            "journal: max_payload_bytes was raised; starting a new segment"
        );
        self.rotate(SealSync::BeforeNextHeader)
    }

    /// Append one record and return its sequence number. No allocation, no syscall (unless
    /// the helper has not finished preparing the next segment when this one is full).
    pub fn append(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, JournalError> {
        let payload_bytes = payload.len() as u64;
        if payload_bytes > self.config.max_payload_bytes as u64 {
            let max_payload_bytes = self.config.max_payload_bytes;
            return Err(JournalError::RecordTooLarge {
                payload_bytes,
                max_payload_bytes,
            });
        }
        let span_bytes = record_span_bytes(payload_bytes);
        if self.write_offset_bytes + span_bytes + SEAL_BYTES > self.current.segment_bytes() {
            self.rotate(SealSync::WithTheNextFlush)?;
            assert!(
                self.write_offset_bytes + span_bytes + SEAL_BYTES <= self.current.segment_bytes()
            );
        }
        self.prefetch_ahead();
        let seq = self.next_seq;
        // SAFETY: this writer is the segment's only writer (directory lock); the span and a
        // seal fit (checked above) and lie past the published end, where the bytes are zero.
        unsafe {
            write_record(
                self.current.bytes(),
                self.write_offset_bytes,
                seq,
                timestamp,
                kind,
                payload,
            )
        };
        self.write_offset_bytes += span_bytes;
        self.next_seq = seq + 1;
        self.last_timestamp = timestamp;
        Ok(seq)
    }

    /// Prefetch the line four pages ahead: the pages are prefaulted, but their TLB entries
    /// and page-table lines are cold, and a prefetch warms them out of order instead of on the
    /// append that needs them (bench: p99 160 ns -> ~110 ns). A hint only: it cannot fault.
    #[inline(always)]
    fn prefetch_ahead(&self) {
        const AHEAD_BYTES: u64 = 4 * segment::PAGE_BYTES;
        let target_bytes = self.write_offset_bytes + AHEAD_BYTES;
        if target_bytes < self.current.segment_bytes() {
            // In bounds (checked); only an address for the hint, never dereferenced.
            let target = self
                .current
                .bytes()
                .as_ptr()
                .wrapping_add(target_bytes as usize);
            crate::memory::prefetch_line(target);
        }
    }

    /// Seal the full segment and continue in the prepared one.
    #[cold]
    fn rotate(&mut self, seal_sync: SealSync) -> Result<(), JournalError> {
        let next = self
            .helper
            .take_prepared(&self.config, self.current.segment_index + 1)?;
        assert!(next.segment_index == self.current.segment_index + 1);
        assert!(next.segment_bytes() == self.config.segment_bytes);
        // SAFETY: only writer; the seal fits after the last record (append keeps room).
        unsafe { write_seal(self.current.bytes(), self.write_offset_bytes) };
        if seal_sync == SealSync::BeforeNextHeader {
            let seal_end_bytes = self.write_offset_bytes + SEAL_BYTES;
            self.current.sync_range(0, seal_end_bytes)?;
            self.flushed_offset_bytes = seal_end_bytes;
        }
        let header = SegmentHeader {
            segment_index: next.segment_index,
            first_seq: self.next_seq,
            day_epoch_unix_ns: self.day_epoch_unix_ns,
            created_unix_ns: next.created_unix_ns,
            segment_bytes: next.segment_bytes(),
            max_payload_bytes: self.config.max_payload_bytes,
        };
        // Seal first, then the header: a reader that finds the seal waits for the header.
        // SAFETY: only writer of the prepared segment (the helper hands it over whole).
        unsafe { header.publish(next.bytes()) };
        // The successor exists (the helper fsynced its file and directory entry) and is
        // published: the mark may say so.
        self.manifest.record_seal(self.current.segment_index);
        let retired = std::mem::replace(&mut self.current, next);
        let retired_end_bytes = self.write_offset_bytes + SEAL_BYTES;
        let retired_flushed_bytes = self.flushed_offset_bytes;
        self.write_offset_bytes = HEADER_BYTES;
        self.flushed_offset_bytes = 0;
        self.helper
            .request_prepare(self.current.segment_index + 1, self.config.segment_bytes);
        if self.config.durability == Durability::Async {
            self.helper.retire(retired);
            return Ok(());
        }
        if self.retired_unflushed.len() == RETIRED_UNFLUSHED_LIMIT {
            self.sync_retired()?;
        }
        self.retired_unflushed
            .push((retired, retired_flushed_bytes, retired_end_bytes));
        Ok(())
    }

    /// Group commit at a batch boundary. `Async`: marks everything written as durable in the
    /// process-crash sense (one store). `Flush`/`Replicated`: msyncs exactly the bytes written
    /// since the last flush, across segments, then advances the durable sequence number.
    /// Returns the durable sequence number.
    pub fn flush(&mut self) -> Result<u64, JournalError> {
        let written_seq = self.next_seq - 1;
        let synced = self.config.durability != Durability::Async;
        if synced {
            self.sync_retired()?;
            self.current
                .sync_range(self.flushed_offset_bytes, self.write_offset_bytes)?;
            self.flushed_offset_bytes = self.write_offset_bytes;
        }
        assert!(self.durable_seq.load(Ordering::Relaxed) <= written_seq);
        // Mark first, then release outputs: anything acknowledged is below the mark, so
        // recovery never cuts it silently. (A store into the manifest mapping; no syscall.)
        let marks = self.manifest.state();
        if written_seq > marks.mapped_through_seq
            || (synced && written_seq > marks.synced_through_seq)
        {
            self.manifest.record_flush(written_seq, synced);
        }
        self.durable_seq.store(written_seq, Ordering::Release);
        Ok(written_seq)
    }

    /// msync everything written regardless of the mode (shutdown, end of day).
    pub fn sync_all(&mut self) -> Result<u64, JournalError> {
        self.sync_retired()?;
        self.current
            .sync_range(self.flushed_offset_bytes, self.write_offset_bytes)?;
        self.flushed_offset_bytes = self.write_offset_bytes;
        let written_seq = self.next_seq - 1;
        self.manifest.record_flush(written_seq, true);
        self.manifest.sync()?;
        self.durable_seq.store(written_seq, Ordering::Release);
        Ok(written_seq)
    }

    /// Tests: make dropping this writer behave like the process being killed (nothing synced
    /// or marked after the last `flush`, the prepared spare left behind).
    #[cfg(test)]
    pub(crate) fn crash(mut self) {
        self.crash_on_drop = true;
    }

    fn sync_retired(&mut self) -> Result<(), JournalError> {
        for (segment, from_bytes, to_bytes) in &self.retired_unflushed {
            segment.sync_range(*from_bytes, *to_bytes)?;
        }
        let bound = self.retired_unflushed.len();
        for _ in 0..bound {
            let (segment, _, _) = self.retired_unflushed.pop().expect("bounded by len");
            self.helper.retire(segment);
        }
        assert!(self.retired_unflushed.is_empty());
        Ok(())
    }

    /// Cut every record after `seq` and reopen the journal: a cluster follower drops the
    /// uncommitted records of a deposed leader that the new leader never had. Returns the
    /// reopened writer and how many records were cut.
    ///
    /// Consumes the writer: it syncs and releases the directory as `Drop` does, runs
    /// [`super::truncate_after`] (crash-safe: it removes later segments last first and zeroes
    /// the cut range last page first, so a crash at any point leaves a valid journal whose
    /// records up to `seq` are intact and whose tail, if any, is a prefix of the cut records),
    /// then opens the directory again. A cold path: it costs two scans of the journal. Handles
    /// taken from the old writer (`durable_seq_handle`, ...) are stale afterwards. Readers of
    /// this directory must be dropped first.
    pub fn truncate_after(self, seq: u64) -> Result<(JournalWriter, u64), JournalError> {
        let last_seq = self.next_seq - 1;
        if seq >= last_seq {
            return Ok((self, 0));
        }
        let mut config = self.config.clone();
        let day_epoch_unix_ns = self.day_epoch_unix_ns;
        drop(self);
        let report = super::truncate_after(&config.dir, seq)?;
        assert!(
            report.last_seq == seq,
            "truncation kept every record up to seq"
        );
        config.create_dir = false;
        let (writer, reopened) = JournalWriter::open_or_create(config, day_epoch_unix_ns)?;
        assert!(reopened.last_seq == seq && writer.next_seq == seq + 1);
        assert!(writer.day_epoch_unix_ns == day_epoch_unix_ns);
        Ok((writer, last_seq - seq))
    }

    /// Sequence number the next `append` will return.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn last_timestamp(&self) -> Timestamp {
        self.last_timestamp
    }

    /// Unix ns of midnight UTC of the journal's day: timestamps count from it.
    pub fn day_epoch_unix_ns(&self) -> u64 {
        self.day_epoch_unix_ns
    }

    pub fn durability(&self) -> Durability {
        self.config.durability
    }

    /// Highest sequence number made durable by `flush` (Release-stored; load with Acquire).
    pub fn durable_seq_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.durable_seq)
    }

    /// Seam for the replication layer: it stores the highest sequence number the standby has
    /// confirmed here. Starts at the recovered last sequence number.
    pub fn confirmed_seq_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.confirmed_seq)
    }

    /// What the output stage consults before releasing an input's outputs.
    pub fn durability_gate(&self) -> DurabilityGate {
        DurabilityGate {
            durability: self.config.durability,
            durable_seq: self.durable_seq_handle(),
            confirmed_seq: self.confirmed_seq_handle(),
        }
    }
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        if self.crash_on_drop {
            self.helper.stop(false);
            return;
        }
        if self.config.durability != Durability::Async
            && let Err(error) = self.sync_all()
        {
            tracing::error!(%error, "journal: final sync failed");
        }
        self.helper.stop(true);
    }
}

/// When a rotation's seal is made durable.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SealSync {
    /// With the batch's flush, as the records before it (a full segment: should a machine
    /// crash lose it, recovery and the readers know the writer rotates only there).
    WithTheNextFlush,
    /// Before the next segment's header is published: a segment ended early, which only
    /// its seal can say.
    BeforeNextHeader,
}

/// Create a segment on the calling thread and publish its header (open, not the hot path).
fn start_segment(
    config: &JournalConfig,
    segment_index: u64,
    first_seq: u64,
    day_epoch_unix_ns: u64,
) -> Result<MappedSegment, JournalError> {
    // A spare left there is all zero (recovery checked) and may be the required successor of
    // a sealed segment: it is reused, never removed first.
    let segment = MappedSegment::create_or_reuse(&config.dir, segment_index, config.segment_bytes)?;
    let header = SegmentHeader {
        segment_index,
        first_seq,
        day_epoch_unix_ns,
        created_unix_ns: segment.created_unix_ns,
        segment_bytes: config.segment_bytes,
        max_payload_bytes: config.max_payload_bytes,
    };
    // SAFETY: a new segment, not yet known to any reader; this writer is its only writer.
    unsafe { header.publish(segment.bytes()) };
    segment.sync_range(0, HEADER_BYTES)?;
    Ok(segment)
}

fn ensure_dir(dir: &Path, create_dir: bool) -> Result<(), JournalError> {
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(JournalError::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && create_dir => {
            std::fs::create_dir_all(dir).map_err(|e| JournalError::io(dir, "create directory", e))
        }
        Err(error) => Err(segment::dir_error(dir, error)),
    }
}

/// Take the journal directory's advisory lock (flock on the directory itself): one writer.
pub(crate) fn lock_dir(dir: &Path) -> Result<File, JournalError> {
    let handle = File::open(dir).map_err(|e| segment::dir_error(dir, e))?;
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => Err(JournalError::Locked {
            path: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(JournalError::io(dir, "lock directory", error))
        }
    }
}

enum HelperRequest {
    Prepare {
        segment_index: u64,
        segment_bytes: u64,
    },
    Retire(MappedSegment),
}

/// The background thread that prepares the next segment and unmaps retired ones.
struct Helper {
    requests: Option<Sender<HelperRequest>>,
    prepared: Receiver<Result<MappedSegment, JournalError>>,
    /// A `Prepare` was sent and its answer not taken yet.
    outstanding: bool,
    thread: Option<JoinHandle<()>>,
}

impl Helper {
    fn spawn(config: &JournalConfig, first_segment_index: u64) -> Result<Helper, JournalError> {
        let (request_tx, request_rx) =
            channel::bounded::<HelperRequest>(RETIRED_UNFLUSHED_LIMIT + 4);
        let (prepared_tx, prepared_rx) = channel::bounded(1);
        let dir = config.dir.clone();
        let thread = std::thread::Builder::new()
            .name("journal-helper".into())
            .spawn(move || helper_loop(&dir, request_rx, prepared_tx))
            .map_err(|e| JournalError::io(&config.dir, "spawn journal helper thread", e))?;
        let mut helper = Helper {
            requests: Some(request_tx),
            prepared: prepared_rx,
            outstanding: false,
            thread: Some(thread),
        };
        helper.request_prepare(first_segment_index, config.segment_bytes);
        Ok(helper)
    }

    fn request_prepare(&mut self, segment_index: u64, segment_bytes: u64) {
        assert!(!self.outstanding);
        let requests = self.requests.as_ref().expect("helper running");
        // Never blocks: at most one Prepare plus RETIRED_UNFLUSHED_LIMIT retirements queue up.
        match requests.try_send(HelperRequest::Prepare {
            segment_index,
            segment_bytes,
        }) {
            Ok(()) => self.outstanding = true,
            Err(error) => tracing::error!(%error, "journal: cannot queue segment preparation"),
        }
    }

    /// The prepared segment, waiting for it if the helper is still at work. On failure the
    /// preparation is requested again so a later append can retry (e.g. after disk space
    /// was freed).
    fn take_prepared(
        &mut self,
        config: &JournalConfig,
        segment_index: u64,
    ) -> Result<MappedSegment, JournalError> {
        if !self.outstanding {
            self.request_prepare(segment_index, config.segment_bytes);
        }
        let answer = self.prepared.recv().map_err(|_| {
            let error = std::io::Error::other("journal helper thread stopped");
            JournalError::io(&config.dir, "prepare next segment", error)
        })?;
        self.outstanding = false;
        if answer.is_err() {
            self.request_prepare(segment_index, config.segment_bytes);
        }
        answer
    }

    /// Hand a full segment to the helper to unmap (munmap of a large mapping is slow).
    fn retire(&mut self, segment: MappedSegment) {
        let requests = self.requests.as_ref().expect("helper running");
        match requests.try_send(HelperRequest::Retire(segment)) {
            Ok(()) => {}
            Err(TrySendError::Full(request) | TrySendError::Disconnected(request)) => drop(request),
        }
    }

    /// Stop the thread and (if `remove_spare`) remove a prepared but unused spare.
    fn stop(&mut self, remove_spare: bool) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("journal helper thread panicked");
        }
        if !remove_spare {
            return;
        }
        if let Ok(Ok(spare)) = self.prepared.try_recv() {
            let path = spare.path.clone();
            drop(spare);
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(%error, path = %path.display(), "journal: cannot remove spare segment");
            }
        }
    }
}

fn helper_loop(
    dir: &Path,
    requests: Receiver<HelperRequest>,
    prepared: Sender<Result<MappedSegment, JournalError>>,
) {
    // Ends when the writer drops its sender.
    for request in requests {
        match request {
            HelperRequest::Prepare {
                segment_index,
                segment_bytes,
            } => {
                let answer = MappedSegment::create(dir, segment_index, segment_bytes);
                if let Err(error) = &answer {
                    tracing::warn!(%error, "journal: preparing the next segment failed");
                }
                if prepared.send(answer).is_err() {
                    return;
                }
            }
            HelperRequest::Retire(segment) => drop(segment),
        }
    }
}

#[cfg(test)]
mod truncate_tests {
    //! `JournalWriter::truncate_after`: exact cuts at every interesting position, appending
    //! after a cut, and the state a crash leaves at each point of a cut.
    use super::*;
    use crate::journal::{JournalReader, segment::list_segments, verify};

    const DAY_EPOCH_UNIX_NS: u64 = 20_001 * NANOS_PER_DAY;
    /// Enough records for three 8-KiB segments.
    const RECORDS: u64 = 400;

    fn config(dir: &Path) -> JournalConfig {
        JournalConfig {
            dir: dir.to_path_buf(),
            segment_bytes: 8192,
            max_payload_bytes: 512,
            durability: Durability::Async,
            create_dir: true,
        }
    }

    /// Contents depend on the generation too, so records written after a cut differ from
    /// the ones cut.
    fn payload(seq: u64, generation: u8) -> Vec<u8> {
        let len = (seq * 13 % 90) as usize + 1;
        (0..len)
            .map(|i| (seq as u8).wrapping_add(i as u8) ^ generation)
            .collect()
    }

    fn append(writer: &mut JournalWriter, from: u64, to: u64, generation: u8) {
        for seq in from..=to {
            let got = writer
                .append(Timestamp(seq * 10), generation, &payload(seq, generation))
                .expect("append");
            assert_eq!(got, seq);
        }
    }

    /// Every record, checked: 1..=`split` from generation 1, the rest from generation 2.
    fn check(dir: &Path, last: u64, split: u64) {
        let mut reader = JournalReader::open(dir, 1).expect("reader");
        for seq in 1..=last {
            let record = reader.next().expect("read").expect("record present");
            let generation = if seq <= split { 1 } else { 2 };
            assert_eq!(record.seq, seq);
            assert_eq!(record.kind, generation);
            assert_eq!(record.timestamp, Timestamp(seq * 10));
            assert_eq!(record.payload, &payload(seq, generation)[..]);
        }
        assert!(
            reader.next().expect("read").is_none(),
            "nothing after {last}"
        );
    }

    #[test]
    fn cut_then_append_continues_the_sequence() {
        let temp = tempfile::tempdir().expect("tempdir");
        for keep in [0u64, 1, 57, 120, 250, 399, RECORDS, RECORDS + 50] {
            let dir = temp.path().join(format!("k{keep}"));
            let (mut writer, _) =
                JournalWriter::open_or_create(config(&dir), DAY_EPOCH_UNIX_NS).expect("open");
            append(&mut writer, 1, RECORDS, 1);
            let segments_before = list_segments(&dir).expect("list").len();
            assert!(segments_before >= 3, "the cut crosses segments");
            let (mut writer, cut) = writer.truncate_after(keep).expect("truncate");
            let kept = keep.min(RECORDS);
            assert_eq!(cut, RECORDS - kept);
            assert_eq!(writer.next_seq(), kept + 1);
            assert_eq!(writer.day_epoch_unix_ns(), DAY_EPOCH_UNIX_NS);
            append(&mut writer, kept + 1, kept + 30, 2);
            drop(writer);
            check(&dir, kept + 30, kept);
        }
    }

    /// A crash inside the cut: `truncate_after` removes later segments last first (emptying the
    /// one after the kept segment), then zeroes the cut range last page first. Stop it after each step; the next open must find every
    /// kept record and, after them, only a prefix of the cut ones; a second cut then finishes.
    #[test]
    fn interrupted_cut_leaves_a_valid_prefix() {
        let temp = tempfile::tempdir().expect("tempdir");
        let pristine = temp.path().join("pristine");
        let (mut writer, _) =
            JournalWriter::open_or_create(config(&pristine), DAY_EPOCH_UNIX_NS).expect("open");
        append(&mut writer, 1, RECORDS, 1);
        drop(writer);
        let files = list_segments(&pristine).expect("list");
        let keep = 57u64;
        let mut exercised = 0;
        for removed_segments in 0..files.len() {
            for zeroed_pages in [0usize, 1, 2] {
                let dir = temp
                    .path()
                    .join(format!("r{removed_segments}-z{zeroed_pages}"));
                std::fs::create_dir_all(&dir).expect("mkdir");
                for (_, path) in &files {
                    std::fs::copy(path, dir.join(path.file_name().expect("name"))).expect("copy");
                }
                let mut remaining = list_segments(&dir).expect("list");
                for n in 0..removed_segments {
                    let (_, path) = remaining.pop().expect("segment");
                    if n + 1 < removed_segments {
                        std::fs::remove_file(path).expect("remove");
                    } else {
                        // The cut empties the segment after the kept one instead of removing
                        // it (a sealed segment never lacks its successor): an empty file.
                        std::fs::File::options()
                            .write(true)
                            .open(&path)
                            .and_then(|f| f.set_len(0))
                            .expect("empty");
                    }
                }
                let Some((_, last_path)) = remaining.last() else {
                    continue;
                };
                zero_last_pages(last_path, zeroed_pages);
                let report = match verify(&dir) {
                    Ok(report) => report,
                    Err(error) => panic!("r{removed_segments} z{zeroed_pages}: {error}"),
                };
                if report.last_seq < keep {
                    // Zeroing pages of a segment that holds kept records is not something the
                    // cut does (it starts after `keep`): only a simulation artefact.
                    continue;
                }
                let (writer, _) =
                    JournalWriter::open_or_create(config(&dir), DAY_EPOCH_UNIX_NS).expect("open");
                assert!(writer.next_seq() > keep);
                check(&dir, writer.next_seq() - 1, RECORDS);
                let (mut writer, _) = writer.truncate_after(keep).expect("finish the cut");
                append(&mut writer, keep + 1, keep + 10, 2);
                drop(writer);
                check(&dir, keep + 10, keep);
                exercised += 1;
            }
        }
        assert!(
            exercised >= 6,
            "only {exercised} interruption points exercised"
        );
    }

    /// Zero the last `pages` pages that hold data (what an interrupted cut leaves).
    fn zero_last_pages(path: &Path, pages: usize) {
        let mut bytes = std::fs::read(path).expect("read");
        let Some(last_data) = bytes.iter().rposition(|&b| b != 0) else {
            return;
        };
        let end = (last_data + 1).next_multiple_of(4096);
        let end = end.min(bytes.len());
        let start = end.saturating_sub(pages * 4096).max(HEADER_BYTES as usize);
        bytes[start..end].fill(0);
        std::fs::write(path, &bytes).expect("write");
    }
}
