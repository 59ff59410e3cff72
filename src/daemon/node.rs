//! One venue node: the sequencer (the journal), the state machine behind it (its stages
//! inline or on threads, [`crate::engine::Pipeline`]) and the output streams.
//!
//! Journal first: every input is stamped and appended before the state machine sees it. Its
//! outputs are appended held; the node ends each batch with a group commit and releases the
//! batch once it is durable by the configured mode — the same markers for both layouts (see
//! [`super::output`]).

use super::output::{FeedOut, Streams};
use crate::config::{Config, Layout};
use crate::engine::Pipeline;
use crate::engine::threaded::{Sharded, ShardedConfig};
use crate::exchange::{Admin, Command, Exchange, Input, Marker, Outcome, Split};
use crate::gateway::Intake;
use crate::journal::{
    Durability, JournalConfig, JournalReader, JournalWriter, RecoveryReport, day_epoch_of,
};
use crate::limits;
use crate::marketdata::glimpse::{PendingSnapshot, SnapshotDesk};
use crate::sequencer::ahead::{AheadError, InputsAhead, Prefetch};
use crate::sequencer::record::{
    self, DayHeader, KIND_ADMIN, KIND_DISCONNECT, KIND_NOOP, KIND_OUCH, KIND_START_OF_DAY,
    KIND_TICK,
};
use crate::sequencer::{Clock, JournalLog, Sequencer, SequencingError};
use crate::snapshot::StreamPosition;
use crate::snapshot::writer::SnapshotWriter;
use crate::stream::{StreamReader, StreamWriter};
use crate::types::{AccountId, Timestamp};
use crate::wake::Waker;
use crate::wire::ouch::Inbound;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the sequencer's thread and the output stage share (the same thread in the compact
/// layout, two threads in the sharded one).
#[derive(Default)]
pub struct OutputShared {
    /// The day's End of Messages is released.
    pub(crate) day_ended: AtomicBool,
    /// The last input whose outputs are released.
    pub(crate) released_seq: AtomicU64,
    /// A stream refused an append: the venue must stop.
    pub(crate) fatal: Mutex<Option<String>>,
    /// Wakes the gateway when replies are released (the output thread's release).
    pub(crate) waker: OnceLock<Waker>,
    /// GLIMPSE requests travelling the pipeline, by id (at most the GLIMPSE connections).
    pub(crate) snapshots: Mutex<Vec<(u64, PendingSnapshot)>>,
    /// ITCH messages handed to the multicast socket (the feed's last sequence number sent).
    pub(crate) itch_sent: AtomicU64,
}

pub struct Node<C: Clock, F: FeedOut> {
    pipeline: Pipeline<Streams<F>>,
    sequencer: Sequencer<C>,
    shared: Arc<OutputShared>,
    pub header: DayHeader,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    /// The standby-confirmed number of a venue alone (`replicated`); none in a cluster.
    confirmed_seq: Option<Arc<AtomicU64>>,
    /// A start-of-day record is applied (a cluster's leader journals one if not).
    day_started: bool,
    last_tick: Timestamp,
    tick_ns: u64,
    /// A journal or stream failure: stop taking inputs and shut down.
    pub fatal: Option<String>,
    pub recovery: RecoveryReport,
    /// The last input a batch end was marked for, and the last released.
    batch_end_seq: u64,
    released_seq: u64,
    /// Batch ends marked and not yet released, oldest first.
    unreleased: VecDeque<u64>,
    next_snapshot: u64,
    /// This trading day's journal directory (a cluster member's: `journal.dir` itself).
    journal_dir: PathBuf,
    /// Latency and flush timings for the metrics endpoint (off: records nothing).
    pub(crate) probe: super::metrics::Probe,
    /// State snapshots (`[snapshot]`): the compact layout (a venue alone, a cluster member).
    state_snapshots: Option<SnapshotWriter>,
    /// The streams' positions and digest states of the snapshot the state was restored
    /// from, for the snapshot writer to continue from (taken when it starts).
    restored_streams: Option<Vec<StreamPosition>>,
    /// Inputs applied so far: journal records other than leader changes (a venue alone
    /// journals none, so there it is the last sequence number).
    inputs: u64,
}

impl<C: Clock, F: FeedOut> Node<C, F> {
    /// Open (or start) the journal, replay it to rebuild the state and the streams, then open
    /// the feed (`make_feed(next_seq)`). Returns a node ready for new inputs. `progress(done,
    /// total)` reports the replay.
    ///
    /// The sharded layout replays through the same stages in one thread, then starts its
    /// threads from that state. A new day's opening messages are multicast once the feed is
    /// open; a recovered day's are not sent again.
    pub fn recover(
        config: &Config,
        clock: C,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let mut clock = clock;
        let day_epoch = day_epoch_of(clock.unix_ns());
        let day = crate::days::for_run(&config.journal.dir, day_epoch)?;
        tracing::info!(journal = %day.dir.display(), "{}", day.note);
        let layout = config.engine.layout;
        let mut opened = Opened::open(config, day.dir, clock, day_epoch, layout, progress)?;
        let new_day = opened.report.last_seq == 0;
        if new_day {
            opened.start_day()?;
        }
        // A new day's feed starts at 1 with the opening messages; a recovered day's feed
        // continues after what it released before the restart.
        let streams = &mut opened.state.streams;
        let next_itch = if new_day { 1 } else { streams.next_itch_seq() };
        streams.open_feed(make_feed(next_itch)?);
        if new_day {
            streams.publish_from_start();
        }
        let mut node = opened.into_node(config)?;
        node.start_state_snapshots(config)?;
        Ok(node)
    }

    /// Start the snapshot writer (`[snapshot]`) of a venue alone or a cluster member. The
    /// state is encoded on this thread after the input a snapshot is due at (the pause,
    /// logged with each snapshot); hashing the streams and writing the file happen on the
    /// writer's thread. A cluster member's writer writes only once the record is released,
    /// i.e. committed (a leader's inputs are applied before their commit, and a deposed
    /// leader's uncommitted records are cut and written again by its successor). The sharded
    /// layout's threads lend their stages to this thread for the encoding
    /// ([`Sharded::save_state`]): the same state as the compact layout's at that point.
    fn start_state_snapshots(&mut self, config: &Config) -> Result<(), String> {
        let c = &config.snapshot;
        let schedule = crate::snapshot::Schedule::new(c.every_inputs, c.every_seconds);
        if !schedule.enabled() {
            return Ok(());
        }
        let mut streams = vec![self.itch_reader.clone()];
        streams.extend(self.ouch_readers.iter().cloned());
        let committed = config.is_clustered().then(|| {
            let shared = Arc::clone(&self.shared);
            let released = move || shared.released_seq.load(Ordering::Acquire);
            Box::new(released) as crate::snapshot::writer::Committed
        });
        let setup = crate::snapshot::writer::WriterSetup {
            journal_dir: self.journal_dir.clone(),
            header_digest: crate::snapshot::header_digest(&self.header.encode()),
            streams,
            keep: c.keep.max(1) as usize,
            schedule,
            buffer_bytes: limits::SNAPSHOT_BUFFER_BYTES,
            committed,
            resume: self.restored_streams.take(),
        };
        let mut writer = SnapshotWriter::start(setup)
            .map_err(|e| format!("cannot start the snapshot writer: {e}"))?;
        // The points are the journal's: count on from its last input.
        writer.start_at(self.inputs, self.recovery.last_timestamp);
        self.state_snapshots = Some(writer);
        Ok(())
    }

    /// After input `seq`: take a state snapshot if one is due (decided from the input count
    /// and the journaled timestamp only).
    #[inline]
    fn state_snapshot_if_due(&mut self, seq: u64, timestamp: Timestamp) {
        // A venue alone journals no leader changes: there every record is an input.
        debug_assert!(self.cluster().is_some() || self.inputs == seq);
        let Some(writer) = &mut self.state_snapshots else {
            return;
        };
        if !writer.due(self.inputs, timestamp) {
            return;
        }
        match &mut self.pipeline {
            Pipeline::Inline { exchange, out } => {
                writer.take(seq, self.inputs, timestamp, |buffer| {
                    exchange.save_state_lending(buffer)?;
                    Ok(crate::engine::threaded::OutputStage::stream_counts(out))
                });
            }
            Pipeline::Threads(sharded) => {
                writer.take(seq, self.inputs, timestamp, |buffer| {
                    sharded.save_state(buffer)
                });
            }
        }
    }

    /// A standby's node (compact layout): the journal recovered and replayed, but no day
    /// started (the primary's records, start of day included, arrive through
    /// [`Self::apply_replicated`]) and no feed until it takes over ([`Self::open_feed`]). A new
    /// journal gets the primary's day epoch.
    pub fn follower(
        config: &Config,
        clock: C,
        day_epoch_unix_ns: u64,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let dir = crate::days::for_epoch(&config.journal.dir, day_epoch_unix_ns)?;
        Opened::open(
            config,
            dir,
            clock,
            day_epoch_unix_ns,
            Layout::Compact,
            progress,
        )?
        .into_node(config)
    }

    /// A cluster member's node: the member's journal replayed through the committed records
    /// (`commit_seq`; later ones may still be cut and arrive through [`Self::apply_committed`]
    /// once committed). No day is started and no feed opened: the leader journals the start of
    /// day ([`Self::propose_start_of_day`]) and opens the feed while it serves
    /// ([`Self::open_feed_after`]).
    pub fn open_member(
        config: &Config,
        clock: C,
        member: crate::cluster::node::ClusterNode,
        commit_seq: u64,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        assert!(config.is_clustered());
        let log = Box::new(member);
        // A cluster's journal is `journal.dir` itself (the single-journal layout: a cluster does
        // not roll over to a new trading day by itself).
        let dir = config.journal.dir.clone();
        let mut node = Opened::build(
            config,
            dir,
            clock,
            log,
            commit_seq,
            Layout::Compact,
            progress,
        )?
        .into_node(config)?;
        node.start_state_snapshots(config)?;
        Ok(node)
    }

    /// A member stopped leading with inputs applied past the commit index: rebuild the state
    /// and the streams from the committed records (the log's `last_seq`), dropping every
    /// output not released. The feed is closed; readers of the old streams are stale. By a
    /// full replay, never from a snapshot: that would reopen and cut the very store files the
    /// old streams' readers (servers still stopping, the old snapshot writer) map, where a
    /// full replay replaces them with new files.
    pub fn rebuild(&mut self, config: &Config) -> Result<(), String> {
        let through = self.sequencer.log().last_seq();
        let state = Replayed::replay(config, &self.journal_dir, through, Replay::Full, |_, _| {})?;
        let (pipeline, parts) = state.into_pipeline(config)?;
        assert!(parts.header == self.header);
        self.pipeline = pipeline;
        self.shared = parts.shared;
        self.ouch_readers = parts.ouch_readers;
        self.itch_reader = parts.itch_reader;
        self.day_started = parts.day_started;
        self.inputs = parts.inputs;
        self.restored_streams = parts.restored_streams;
        self.batch_end_seq = through;
        self.released_seq = through;
        self.unreleased.clear();
        self.recovery.last_timestamp = parts.last_timestamp;
        // The old writer (stopped when the lead was lost, see `stop_state_snapshots`) read the
        // old streams: a new one starts on the new streams, from the committed state.
        self.stop_state_snapshots();
        self.start_state_snapshots(config)?;
        Ok(())
    }

    /// Take no more state snapshots, without waiting for the writer (a member that lost the
    /// lead with inputs past the commit: from here until [`Self::rebuild`] its state is
    /// stale, and what the writer holds uncommitted is dropped). [`Self::rebuild`] starts a
    /// new writer.
    pub fn stop_state_snapshots(&mut self) {
        if let Some(writer) = self.state_snapshots.take() {
            writer.abandon();
        }
    }

    /// The cluster member behind the sequencer, if this node is one.
    pub fn cluster(&self) -> Option<&crate::cluster::node::ClusterNode> {
        self.sequencer.log().cluster()
    }

    pub fn cluster_mut(&mut self) -> Option<&mut crate::cluster::node::ClusterNode> {
        self.sequencer.log_mut().cluster_mut()
    }

    /// A cluster member applies a committed record its leader journaled (the member's node
    /// journaled it already). Leader changes have no effect.
    pub fn apply_committed(
        &mut self,
        seq: u64,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<(), String> {
        self.sequencer.note_applied(timestamp);
        if kind == KIND_NOOP {
            return Ok(());
        }
        if !self.day_started {
            check_start_of_day(
                std::path::Path::new("the leader's"),
                seq,
                kind,
                payload,
                &self.header,
            )?;
            self.day_started = true;
        }
        let command = record::decode(kind, payload)
            .map_err(|e| format!("committed record {seq}: {}", e.0))?;
        // A stream that overflows shows at the batch end (`take_fatal` locks: once per batch).
        self.pipeline.apply(&Input {
            seq,
            timestamp,
            command,
        });
        self.inputs += 1;
        self.state_snapshot_if_due(seq, timestamp);
        Ok(())
    }

    /// A start-of-day record is applied.
    pub fn day_started(&self) -> bool {
        self.day_started
    }

    /// A cluster's leader whose journal has no start of day yet journals one.
    pub fn propose_start_of_day(&mut self) {
        assert!(!self.day_started);
        let payload = self.header.encode();
        if self
            .sequence(KIND_START_OF_DAY, &payload, Command::StartOfDay)
            .is_some()
        {
            self.day_started = true;
        }
    }

    /// Open the feed so that it multicasts every released ITCH message after `sent` (the
    /// messages known to have been multicast, by this member or another): a cluster's leader
    /// taking office.
    pub fn open_feed_after(
        &mut self,
        sent: u64,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
    ) -> Result<(), String> {
        let Some(streams) = self.pipeline.output() else {
            return Err("a cluster member runs the compact layout".into());
        };
        streams.open_feed_after(sent, make_feed(sent + 1)?);
        Ok(())
    }

    /// Stop multicasting (a cluster member that no longer leads).
    pub fn close_feed(&mut self) {
        if let Some(streams) = self.pipeline.output() {
            streams.close_feed();
        }
    }

    /// ITCH messages this node has multicast (the highest sequence number handed to the
    /// socket).
    pub fn itch_sent(&self) -> u64 {
        self.shared.itch_sent.load(Ordering::Acquire)
    }

    /// Open the market-data feed at the next ITCH sequence number (a standby taking over).
    pub fn open_feed(
        &mut self,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
    ) -> Result<(), String> {
        let Some(streams) = self.pipeline.output() else {
            return Err("a standby runs the compact layout".into());
        };
        let next = streams.next_itch_seq();
        streams.open_feed(make_feed(next)?);
        Ok(())
    }

    /// A standby applies a record from the primary: journal it with the primary's timestamp
    /// (it must get the same sequence number), then apply it.
    pub fn apply_replicated(
        &mut self,
        seq: u64,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<(), String> {
        let own = self
            .sequencer
            .append_at(timestamp, kind, payload)
            .map_err(|e| e.to_string())?;
        if own != seq {
            return Err(format!(
                "replicated record {seq} landed at {own} in this journal"
            ));
        }
        if kind == KIND_START_OF_DAY {
            let header = DayHeader::decode(payload).map_err(|e| e.0)?;
            if header != self.header {
                return Err("the primary's journal has other sessions or another venue definition than this config".into());
            }
        }
        let command = record::decode(kind, payload).map_err(|e| e.0)?;
        self.pipeline.apply(&Input {
            seq,
            timestamp,
            command,
        });
        self.inputs += 1;
        self.take_fatal().map_or(Ok(()), Err)
    }

    /// Make everything applied so far durable and release it (a standby acks what this
    /// returns).
    pub fn flush_journal(&mut self) -> Result<u64, String> {
        self.sequencer.flush()?;
        let last = self.last_seq();
        self.mark_batch_end(last);
        self.release_through(last);
        Ok(last)
    }

    /// The journal's confirmed-by-standby number (raised by the replication server).
    pub fn confirmed_seq_handle(&self) -> Arc<AtomicU64> {
        let handle = self.confirmed_seq.as_ref();
        Arc::clone(handle.expect("a venue alone has a standby-confirmed number"))
    }

    pub fn ouch_streams(&self) -> &[StreamReader] {
        &self.ouch_readers
    }

    /// This trading day's journal directory (under `journal.dir`, see [`crate::days`]).
    pub fn journal_dir(&self) -> &Path {
        &self.journal_dir
    }

    pub fn itch_stream(&self) -> &StreamReader {
        &self.itch_reader
    }

    fn take_fatal(&mut self) -> Option<String> {
        let fatal = self.shared.fatal.lock().expect("not poisoned").take();
        if let Some(f) = &fatal {
            self.fatal.get_or_insert(f.clone());
        }
        fatal
    }

    /// Journal and apply one input. Nothing is taken once a fatal error happened.
    fn sequence(&mut self, kind: u8, payload: &[u8], command: Command) -> Option<Outcome> {
        if self.fatal.is_some() {
            return None;
        }
        let (seq, timestamp) = match self.sequencer.append(kind, payload) {
            Ok(x) => x,
            Err(SequencingError::Refused(why)) => {
                tracing::debug!("input refused: {why}");
                return None;
            }
            Err(e) => {
                self.fatal = Some(e.to_string());
                return None;
            }
        };
        self.probe.journaled();
        let input = Input {
            seq,
            timestamp,
            command,
        };
        let outcome = self.pipeline.apply(&input);
        self.probe.matched();
        self.inputs += 1;
        self.state_snapshot_if_due(seq, timestamp);
        Some(outcome)
    }

    pub fn admin(&mut self, admin: Admin) -> Option<Outcome> {
        let mut payload = [0u8; record::ADMIN_RECORD_BYTES_MAX];
        let n = record::encode_admin(admin, &mut payload);
        self.sequence(KIND_ADMIN, &payload[..n], Command::Admin(admin))
    }

    /// Journal a timer input when orders can expire and a tick interval has passed.
    pub fn tick_if_due(&mut self) {
        if self.pipeline.expiring_orders() == 0 || !self.ready_for_input() {
            return;
        }
        let now = self.sequencer.now();
        if now.0.saturating_sub(self.last_tick.0) < self.tick_ns {
            return;
        }
        self.last_tick = now;
        self.sequence(KIND_TICK, &[], Command::Tick);
    }

    /// Nanoseconds until this thread has timed work: the next expiry tick (when orders may
    /// expire) or the inline output stage's feed timers. `u64::MAX`: none.
    pub fn timers_due_in_ns(&mut self) -> u64 {
        let output_ns = self.pipeline.output_timers_due_in_ns();
        if self.pipeline.expiring_orders() == 0 {
            return output_ns;
        }
        let since_tick_ns = self.sequencer.now().0.saturating_sub(self.last_tick.0);
        output_ns.min(self.tick_ns.saturating_sub(since_tick_ns))
    }

    /// May the sequencer take another input now? Not while the rings to the shard threads
    /// are nearly full, nor while as many batches as the output stage can track wait for
    /// their release (`replicated`: the standby's confirmation). When it may not, the caller
    /// ends the batch and reads no more input until it may: back-pressure on the sockets.
    #[inline]
    pub fn ready_for_input(&self) -> bool {
        self.holding().is_none()
    }

    /// Why the sequencer takes no input now (`None`: it does), for an operator's answer.
    /// The one statement of the conditions: [`Node::ready_for_input`] (per read) is this.
    #[inline]
    pub fn holding(&self) -> Option<&'static str> {
        if self.fatal.is_some() {
            Some("the venue is stopping")
        } else if self.unreleased.len() >= limits::UNRELEASED_BATCHES_MAX {
            Some(
                "as many batches as the venue tracks wait for their release (durability `replicated`: a standby's confirmation)",
            )
        } else if !self.pipeline.room_for_input() {
            Some("the rings to the shard threads are nearly full")
        } else if !self.sequencer.log().accepts_input() {
            Some("the journal takes no input now")
        } else {
            None
        }
    }

    /// End of a batch: make it durable (group commit), mark it, and release what the
    /// durability mode allows. Returns whether everything sequenced is released.
    pub fn end_batch(&mut self) -> bool {
        let last = self.last_seq();
        if last > self.batch_end_seq {
            let flush_started = self.probe.flush_start();
            if let Err(e) = self.sequencer.flush() {
                self.fatal
                    .get_or_insert(format!("journal flush failed: {e}"));
                return false;
            }
            self.probe.flushed(flush_started);
            self.mark_batch_end(last);
        }
        self.try_release()
    }

    fn mark_batch_end(&mut self, seq: u64) {
        if seq > self.batch_end_seq {
            assert!(self.unreleased.len() < limits::UNRELEASED_BATCHES_MAX);
            self.batch_end_seq = seq;
            self.unreleased.push_back(seq);
            self.pipeline.marker(Marker::BatchEnd { seq });
        }
    }

    /// Release every marked batch the durability mode allows now. Returns whether everything
    /// sequenced is released (the caller may then send replies and take snapshots).
    pub fn try_release(&mut self) -> bool {
        // None: a cluster member leading without a lease releases nothing.
        if let Some(releasable) = self.sequencer.log().releasable() {
            self.release_through(releasable.min(self.batch_end_seq));
        }
        self.take_fatal();
        self.released_seq == self.last_seq()
    }

    fn release_through(&mut self, seq: u64) {
        if seq > self.released_seq {
            self.released_seq = seq;
            self.pipeline.marker(Marker::Release { seq });
            while self.unreleased.front().is_some_and(|&b| b <= seq) {
                self.unreleased.pop_front();
            }
        }
    }

    /// The last input whose outputs the output stage has released.
    pub fn released_seq(&self) -> u64 {
        self.shared.released_seq.load(Ordering::Acquire)
    }

    /// Inputs are journaled but not yet released (a standby's confirmation is awaited).
    pub fn awaiting_release(&self) -> bool {
        self.released_seq < self.last_seq()
    }

    /// The output stage's timers when it runs on this thread.
    pub fn idle(&mut self) {
        self.pipeline.idle();
    }

    /// The journal's current time (for stamps outside inputs, e.g. GLIMPSE snapshots).
    pub fn now(&mut self) -> Timestamp {
        self.sequencer.now()
    }

    /// The day's End of Messages is released.
    pub fn day_ended(&self) -> bool {
        self.shared.day_ended.load(Ordering::Acquire)
    }

    /// The inline exchange (tools and tests); None in the sharded layout.
    pub fn exchange(&self) -> Option<&Exchange> {
        self.pipeline.exchange()
    }

    /// Last sequenced input.
    pub fn last_seq(&self) -> u64 {
        self.sequencer.next_seq() - 1
    }

    /// `seq=… resting=… order_refs=… matches=…` for the admin status line (sharded: as far
    /// as the output stage has merged).
    pub fn status(&self) -> String {
        let s = self.pipeline.status();
        format!(
            "seq={} resting={} order_refs={} matches={} merged_seq={} released_seq={} held_batches={}",
            s.last_seq,
            s.resting,
            s.order_refs,
            s.matches,
            s.merged_seq,
            self.shared.released_seq.load(Ordering::Acquire),
            self.unreleased.len()
        )
    }

    /// Sequence numbers, resting orders, numbers handed out (sharded: as far as merged).
    pub fn pipeline_status(&self) -> crate::engine::PipelineStatus {
        self.pipeline.status()
    }

    /// Answer GLIMPSE requests between two inputs, once everything sequenced is released (a
    /// snapshot never shows state a crash could take back). The request travels the pipeline
    /// like an input; the output stage answers it.
    pub fn answer_snapshots(&mut self, desk: &SnapshotDesk) {
        if self.awaiting_release() {
            return;
        }
        let ts = self.sequencer.now();
        let (pipeline, shared, next) = (&mut self.pipeline, &self.shared, &mut self.next_snapshot);
        desk.take_snapshot_requests(|request| {
            let id = *next;
            *next += 1;
            shared
                .snapshots
                .lock()
                .expect("not poisoned")
                .push((id, request));
            pipeline.snapshot(ts, id);
        });
    }

    /// Wake the gateway thread when the output stage has released new replies.
    pub fn set_output_waker(&self, wake: Waker) {
        let _ = self.shared.waker.set(wake);
    }

    /// Wait (bounded) until the output stage has released every sequenced input.
    pub fn drain_outputs(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let last = self.last_seq();
        while self.shared.released_seq.load(Ordering::Acquire) < last && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A journal opened and replayed, before the feed and (sharded) the threads start.
struct Opened<C: Clock, F: FeedOut> {
    dir: PathBuf,
    sequencer: Sequencer<C>,
    state: Replayed<F>,
    confirmed_seq: Option<Arc<AtomicU64>>,
    report: RecoveryReport,
}

impl<C: Clock, F: FeedOut> Opened<C, F> {
    fn open(
        config: &Config,
        dir: PathBuf,
        clock: C,
        day_epoch: u64,
        layout: Layout,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        if config.journal.truncate_corrupt_tail && dir.exists() {
            truncate_damaged_tail(&dir)?;
        }
        let journal_config = journal_config(config, &dir);
        // A venue alone restarts from its newest snapshot, which vouches for the records
        // before it: recovery checks where they end, not each one (if that snapshot turns out
        // unusable, replay's reader checks every record it reads).
        let vouched = crate::snapshot::newest_through(&dir, u64::MAX);
        let (writer, report) =
            JournalWriter::open_or_create_vouched(journal_config, day_epoch, vouched)
                .map_err(|e| e.to_string())?;
        if let Some(tail) = &report.torn_tail {
            tracing::warn!(path = %tail.path.display(), offset = tail.offset_bytes, cut_bytes = tail.cut_bytes, "journal: cut a torn tail ({})", tail.reason);
        }
        let confirmed_seq = Some(writer.confirmed_seq_handle());
        let log = Box::new(JournalLog::new(writer));
        let last_seq = report.last_seq;
        let mut opened = Self::build(config, dir, clock, log, last_seq, layout, progress)?;
        opened.confirmed_seq = confirmed_seq;
        opened.report = report;
        Ok(opened)
    }

    /// The state machine and streams around `log`, rebuilt from journal records
    /// `1..=through` (all of them for a venue alone; a cluster member's committed ones).
    fn build(
        config: &Config,
        dir: PathBuf,
        clock: C,
        log: Box<dyn crate::sequencer::Sequencing>,
        through: u64,
        layout: Layout,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let state = Replayed::replay(
            config,
            &dir,
            through,
            Replay::FromSnapshot(layout),
            progress,
        )?;
        let last_timestamp = state.last_timestamp;
        Ok(Opened {
            dir,
            sequencer: Sequencer::new(log, clock),
            state,
            confirmed_seq: None,
            report: RecoveryReport {
                last_seq: through,
                records: through,
                last_timestamp,
                ..RecoveryReport::default()
            },
        })
    }

    /// Journal and apply the first input of a new day, durable and released.
    fn start_day(&mut self) -> Result<(), String> {
        let state = &mut self.state;
        let payload = state.header.encode();
        let (seq, timestamp) = self
            .sequencer
            .append(KIND_START_OF_DAY, &payload)
            .map_err(|e| e.to_string())?;
        assert_eq!(seq, 1, "a new journal starts at 1");
        // The journal's last timestamp now (the snapshot schedule counts time from it).
        self.report.last_timestamp = timestamp;
        state.day_started = true;
        state.inputs += 1;
        let input = Input {
            seq,
            timestamp,
            command: Command::StartOfDay,
        };
        state.core.apply(&input, &mut state.streams);
        self.sequencer.flush()?;
        state
            .core
            .marker(Marker::BatchEnd { seq }, &mut state.streams);
        state
            .core
            .marker(Marker::Release { seq }, &mut state.streams);
        Ok(())
    }

    /// Start the layout's machinery around the replayed state.
    fn into_node(self, config: &Config) -> Result<Node<C, F>, String> {
        let Opened {
            dir,
            sequencer,
            state,
            confirmed_seq,
            report,
        } = self;
        let (pipeline, parts) = state.into_pipeline(config)?;
        let last_seq = sequencer.next_seq() - 1;
        Ok(Node {
            pipeline,
            sequencer,
            shared: parts.shared,
            header: parts.header,
            ouch_readers: parts.ouch_readers,
            itch_reader: parts.itch_reader,
            confirmed_seq,
            day_started: parts.day_started,
            last_tick: Timestamp(0),
            tick_ns: config.engine.tick_ms.max(1) * 1_000_000,
            fatal: None,
            recovery: report,
            batch_end_seq: last_seq,
            released_seq: last_seq,
            unreleased: VecDeque::with_capacity(limits::UNRELEASED_BATCHES_MAX),
            next_snapshot: 1,
            journal_dir: dir,
            probe: super::metrics::Probe::off(),
            state_snapshots: None,
            restored_streams: parts.restored_streams,
            inputs: parts.inputs,
        })
    }
}

/// How [`Replayed::replay`] rebuilds the state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Replay {
    /// The layout's stages from the newest valid snapshot and the journal's tail, else in
    /// full (the state's encoding does not depend on the layout: a snapshot of either
    /// restores into either).
    FromSnapshot(Layout),
    /// Compact, every record (new store files).
    Full,
}

/// The state machine and the output streams rebuilt from the journal, before the layout's
/// machinery starts.
struct Replayed<F: FeedOut> {
    header: DayHeader,
    core: Replaying,
    streams: Streams<F>,
    shared: Arc<OutputShared>,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    /// A start-of-day record was applied.
    day_started: bool,
    /// Inputs applied (records other than leader changes).
    inputs: u64,
    /// The last input's timestamp (0 before the first): where a snapshot schedule by
    /// journaled time counts from.
    last_timestamp: Timestamp,
    /// The streams' positions of the snapshot the state was restored from (none: replayed
    /// in full).
    restored_streams: Option<Vec<StreamPosition>>,
}

/// What a node keeps of a [`Replayed`] beside its pipeline.
struct Parts {
    header: DayHeader,
    shared: Arc<OutputShared>,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    day_started: bool,
    inputs: u64,
    last_timestamp: Timestamp,
    restored_streams: Option<Vec<StreamPosition>>,
}

impl<F: FeedOut> Replayed<F> {
    /// Fresh streams and state machine, with journal records `1..=through` applied and
    /// released.
    fn replay(
        config: &Config,
        dir: &Path,
        through: u64,
        how: Replay,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let layout = match how {
            Replay::FromSnapshot(layout) => layout,
            Replay::Full => Layout::Compact,
        };
        let header = DayHeader {
            format: DayHeader::FORMAT,
            gateway_session: config.gateway.session.clone(),
            feed_session: config.feed.session.clone(),
            venue: config.venue(),
        };
        let resumed = match how {
            Replay::FromSnapshot(layout) if through > 0 => resume_from_snapshot(
                dir,
                through,
                &header,
                config.is_clustered(),
                (layout, config.engine.shards as usize),
            ),
            _ => None,
        };
        let resumed_inputs = resumed.as_ref().map_or(0, |r| r.inputs);
        let restored_streams = resumed.as_ref().map(|r| r.positions.clone());
        let mut last_timestamp = resumed.as_ref().map_or(Timestamp(0), |r| r.timestamp);
        let (ouch_writers, ouch_readers, itch, itch_reader, from_seq, mut core) = match resumed {
            Some(r) => {
                let core = r.core;
                let s = r.streams;
                (
                    s.ouch_writers,
                    s.ouch_readers,
                    s.itch,
                    s.itch_reader,
                    r.last_seq + 1,
                    Some(core),
                )
            }
            None => {
                // The stores are rebuilt from the journal: started afresh (a store left by an
                // earlier run is replaced, so nothing is doubled).
                let stores = crate::stream::store_dir(dir);
                let (ouch_writers, ouch_readers) = ouch_stores(&stores, config.accounts.len())?;
                let (itch, itch_reader) =
                    StreamWriter::create(&stores.join(ITCH_STORE_NAME), limits::ITCH_STORE)
                        .map_err(|e| format!("cannot create the ITCH store: {e}"))?;
                (ouch_writers, ouch_readers, itch, itch_reader, 1, None)
            }
        };
        let shared = Arc::new(OutputShared::default());
        let mut streams = Streams::new(ouch_writers, itch, itch_reader.clone(), shared.clone());
        if layout == Layout::Compact {
            // On the event loop's thread: the feed's send waits until the replies are written.
            streams.flush_feed_in_idle();
        }
        let venue = &header.venue;
        let fresh = from_seq == 1;
        let built = match layout {
            _ if !fresh => None,
            Layout::Compact => Some(Replaying::Compact(Box::new(
                Exchange::new(venue.clone()).map_err(|e| e.to_string())?,
            ))),
            Layout::Sharded => Some(Replaying::Sharded(Box::new(
                Split::new(venue, config.engine.shards as usize).map_err(|e| e.to_string())?,
            ))),
        };
        let mut core = core
            .take()
            .or(built)
            .expect("a state from a snapshot or fresh");
        let mut day_started = !fresh;
        let mut inputs = resumed_inputs;
        if through > 0 {
            let applied = replay_journal(
                dir,
                from_seq,
                through,
                &header,
                &mut core,
                &mut streams,
                &mut progress,
            )?;
            day_started |= applied.day_started;
            inputs += applied.inputs;
            last_timestamp = applied.last_timestamp.unwrap_or(last_timestamp);
            // What the journal holds is durable (a cluster's: committed): release it all.
            core.marker(Marker::BatchEnd { seq: through }, &mut streams);
            core.marker(Marker::Release { seq: through }, &mut streams);
        }
        if let Some(full) = shared.fatal.lock().expect("not poisoned").take() {
            return Err(full);
        }
        populate_in_background(core.unresident());
        Ok(Replayed {
            header,
            core,
            streams,
            shared,
            ouch_readers,
            itch_reader,
            day_started,
            inputs,
            last_timestamp,
            restored_streams,
        })
    }

    /// Start the layout's machinery (sharded: the threads) around the state.
    fn into_pipeline(self, config: &Config) -> Result<(Pipeline<Streams<F>>, Parts), String> {
        let Replayed {
            header,
            core,
            mut streams,
            shared,
            ouch_readers,
            itch_reader,
            day_started,
            inputs,
            last_timestamp,
            restored_streams,
        } = self;
        let pipeline = match core {
            Replaying::Compact(exchange) => Pipeline::Inline {
                exchange,
                out: streams,
            },
            Replaying::Sharded(split) => {
                let (front, shards, merge) = split.into_parts(&mut streams);
                let threads = ShardedConfig {
                    shards: config.engine.shards as usize,
                    wait: config.engine.wait,
                    ring_slots: config.engine.ring_slots as usize,
                    pin_cores: config.engine.pin_cores,
                };
                Pipeline::Threads(Box::new(Sharded::from_parts(
                    front, shards, merge, &threads, streams,
                )?))
            }
        };
        let parts = Parts {
            header,
            shared,
            ouch_readers,
            itch_reader,
            day_started,
            inputs,
            last_timestamp,
            restored_streams,
        };
        Ok((pipeline, parts))
    }
}

/// Output streams reopened as they were after a snapshot's record.
struct ReopenedStreams {
    ouch_writers: Vec<StreamWriter>,
    ouch_readers: Vec<StreamReader>,
    itch: StreamWriter,
    itch_reader: StreamReader,
}

/// A state restored from the newest valid snapshot, with its streams.
struct Resumed {
    last_seq: u64,
    /// Inputs among records `1..=last_seq`.
    inputs: u64,
    /// Record `last_seq`'s timestamp.
    timestamp: Timestamp,
    core: Replaying,
    streams: ReopenedStreams,
    /// The snapshot's stream positions and digest states.
    positions: Vec<StreamPosition>,
}

/// The output streams as they were after a snapshot's record: every store in the day's
/// `stores/` reopened and cut to `positions[k].messages` (ITCH first, then each account's
/// OUCH in config order), checked against the snapshot's byte counts. `None` (with a log
/// line) when a store holds fewer messages than the snapshot says — a machine restart lost
/// pages never synced, or the store was removed — or different bytes: the daemon then tries
/// an older snapshot or replays the whole journal, which recreates every store. Cutting is
/// safe either way: whatever is cut is rebuilt from the journal's tail.
fn reopen_streams_at(
    dir: &Path,
    positions: &[crate::snapshot::StreamPosition],
) -> Option<ReopenedStreams> {
    let stores = crate::stream::store_dir(dir);
    let (itch_at, ouch_at) = positions.split_first()?;
    let (itch, itch_reader) =
        reopen_store_at(&stores.join(ITCH_STORE_NAME), limits::ITCH_STORE, itch_at)?;
    let caps = limits::ouch_store(ouch_at.len());
    let mut ouch_writers = Vec::with_capacity(ouch_at.len());
    let mut ouch_readers = Vec::with_capacity(ouch_at.len());
    for (index, at) in ouch_at.iter().enumerate() {
        let (w, r) = reopen_store_at(&stores.join(ouch_store_name(index)), caps, at)?;
        ouch_writers.push(w);
        ouch_readers.push(r);
    }
    Some(ReopenedStreams {
        ouch_writers,
        ouch_readers,
        itch,
        itch_reader,
    })
}

/// One store reopened and cut to `at` (see [`reopen_streams_at`]).
fn reopen_store_at(
    path: &Path,
    caps: crate::stream::Caps,
    at: &crate::snapshot::StreamPosition,
) -> Option<(StreamWriter, StreamReader)> {
    if !path.exists() {
        tracing::warn!(path = %path.display(), "no store to resume from a snapshot");
        return None;
    }
    let (mut writer, held) = StreamWriter::open(path, caps)
        .map_err(|e| tracing::warn!("cannot reopen a store for a snapshot: {e}"))
        .ok()?;
    if held < at.messages {
        tracing::warn!(
            path = %path.display(),
            held,
            wanted = at.messages,
            "a store holds fewer messages than the snapshot"
        );
        return None;
    }
    writer.truncate_to(at.messages);
    let reader = writer.reader();
    let bytes = reader.bytes_from(1);
    if bytes != at.bytes {
        tracing::warn!(
            path = %path.display(),
            bytes,
            wanted = at.bytes,
            "a store's messages are not the snapshot's"
        );
        return None;
    }
    Some((writer, reader))
}

/// The newest valid snapshot of the day whose streams reopen (damaged ones are skipped with
/// a log line); `None`: a full replay.
fn resume_from_snapshot(
    dir: &Path,
    through: u64,
    header: &DayHeader,
    clustered: bool,
    (layout, shards): (Layout, usize),
) -> Option<Resumed> {
    if crate::snapshot::list(dir).is_empty() {
        return None;
    }
    let digest = crate::snapshot::header_digest(&header.encode());
    let (s, (core, streams)) = crate::snapshot::load_latest(dir, &digest, through, |s| {
        if s.streams.len() != header.venue.accounts.len() + 1 {
            return Err("not a snapshot of a venue with these accounts".into());
        }
        // A venue alone journals no leader changes: every record is an input.
        if !clustered && s.inputs != s.last_seq {
            return Err("a cluster member's snapshot, not a venue alone's".into());
        }
        // The stores first: they are quick to check, the state is gigabytes on a busy day.
        // (Cutting them to this snapshot is safe if it is refused below: an older one cuts
        // them further, a full replay recreates them.)
        let streams = reopen_streams_at(dir, &s.streams).ok_or("the streams do not reopen")?;
        let core = match layout {
            Layout::Compact => Replaying::Compact(Box::new(
                Exchange::from_state(header.venue.clone(), s.state).map_err(|e| e.to_string())?,
            )),
            Layout::Sharded => Replaying::Sharded(Box::new(
                Split::from_state(&header.venue, shards, s.state).map_err(|e| e.to_string())?,
            )),
        };
        // The journal's tail is applied after the snapshot's record: a state past it (a
        // writer's defect: the file's checksums hold) would stop the restart at the first
        // tail input, so it is refused like a damaged file.
        if core.last_seq() > s.last_seq {
            return Err("the state is past the snapshot's record".into());
        }
        // After End of Messages the output stage must know where that message is: an ended
        // day (short to replay anyway) restarts by a full replay.
        if core.day_ended() {
            return Err("taken after the end of day".into());
        }
        Ok((core, streams))
    })?;
    tracing::info!(last_seq = s.last_seq, "restarting from a state snapshot");
    Some(Resumed {
        last_seq: s.last_seq,
        inputs: s.inputs,
        timestamp: s.timestamp,
        core,
        streams,
        positions: s.streams.clone(),
    })
}

/// Make the rest of the token tables and of the shards' live-order index resident on a
/// thread of its own (see `TokenTable::unresident`, `Shard::unresident`), once the state is
/// rebuilt: a restart does not wait for the gigabytes a busy day may still fill, and the
/// engine finds them resident when it gets there (seconds later, not the day's millions of
/// tokens later).
fn populate_in_background(later: Vec<crate::memory::Unresident>) {
    if later.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("prefault".into())
        .spawn(move || {
            let started = std::time::Instant::now();
            let wanted: usize = later.iter().map(|r| r.bytes()).sum();
            // The tables in turn, 2 MiB each, from their fronts: every account's next
            // slots first. A range stops when the kernel refuses or the tables are gone.
            let mut done = 0;
            let mut open = vec![true; later.len()];
            let steps = later.iter().map(|r| r.steps()).max().unwrap_or(0);
            for step in 0..steps {
                for (range, open) in later.iter().zip(open.iter_mut()) {
                    if *open && step < range.steps() {
                        match range.populate_step(step) {
                            Some(bytes) => done += bytes,
                            None => *open = false,
                        }
                    }
                }
            }
            tracing::info!(
                mib = done >> 20,
                wanted_mib = wanted >> 20,
                ms = started.elapsed().as_millis() as u64,
                "token tables and live-order index made resident in the background"
            );
        });
    if let Err(e) = spawned {
        tracing::warn!(
            "no thread to make the token tables resident ({e}): they fault in as the day fills them"
        );
    }
}

/// The state being rebuilt by replay, before the sharded threads start.
enum Replaying {
    Compact(Box<Exchange>),
    Sharded(Box<Split>),
}

/// Only the compact layout takes the hints; the sharded stages (replayed split on this thread)
/// get their inputs ahead all the same, unwarmed.
impl Prefetch for Replaying {
    #[inline]
    fn prefetch(&self, input: &Input) {
        if let Replaying::Compact(exchange) = self {
            exchange.prefetch(input);
        }
    }
    #[inline]
    fn prefetch_deeper(&self, input: &Input) {
        if let Replaying::Compact(exchange) = self {
            exchange.prefetch_deeper(input);
        }
    }
}

impl Replaying {
    fn last_seq(&self) -> u64 {
        match self {
            Replaying::Compact(exchange) => exchange.last_seq(),
            Replaying::Sharded(split) => split.last_seq(),
        }
    }

    fn day_ended(&self) -> bool {
        match self {
            Replaying::Compact(exchange) => exchange.day_ended(),
            Replaying::Sharded(split) => split.day_ended(),
        }
    }

    fn unresident(&self) -> Vec<crate::memory::Unresident> {
        match self {
            Replaying::Compact(exchange) => exchange.unresident(),
            Replaying::Sharded(split) => split.unresident(),
        }
    }

    fn apply<F: FeedOut>(&mut self, input: &Input, streams: &mut Streams<F>) {
        match self {
            Replaying::Compact(exchange) => {
                exchange.apply(input, streams);
            }
            Replaying::Sharded(split) => {
                split.apply(input, streams);
            }
        }
    }

    fn marker<F: FeedOut>(&mut self, marker: Marker, streams: &mut Streams<F>) {
        match self {
            Replaying::Compact(exchange) => exchange.marker(marker, streams),
            Replaying::Sharded(split) => split.marker(marker, streams),
        }
    }
}

/// `--truncate-corrupt-tail`: cut a damaged durable tail back to the last intact record
/// (what the operator asked for after a refusal), logging what was lost.
fn truncate_damaged_tail(dir: &Path) -> Result<(), String> {
    let report = crate::journal::truncate_corrupt_tail(dir).map_err(|e| e.to_string())?;
    if report.accepted_damage.is_empty() {
        tracing::info!(dir = %dir.display(), "--truncate-corrupt-tail: the journal has no damaged tail; nothing cut");
    }
    for damage in &report.accepted_damage {
        tracing::error!(
            last_seq = report.last_seq,
            "--truncate-corrupt-tail: cut back to the last intact record: {damage}"
        );
    }
    Ok(())
}

/// What [`replay_journal`] applied.
struct Applied {
    /// A start of day was among the records (a cluster member may have none committed yet).
    day_started: bool,
    inputs: u64,
    /// The last input's timestamp, if any was applied.
    last_timestamp: Option<Timestamp>,
}

/// Apply journal records `from_seq..=last_seq` to `core`; leader changes (a cluster's) are
/// counted, not applied.
fn replay_journal<F: FeedOut>(
    dir: &std::path::Path,
    from_seq: u64,
    last_seq: u64,
    header: &DayHeader,
    core: &mut Replaying,
    streams: &mut Streams<F>,
    progress: &mut impl FnMut(u64, u64),
) -> Result<Applied, String> {
    let mut applied = Applied {
        day_started: false,
        inputs: 0,
        last_timestamp: None,
    };
    if from_seq > last_seq {
        return Ok(applied);
    }
    let mut reader = JournalReader::open(dir, from_seq).map_err(|e| e.to_string())?;
    let mut read_seq = from_seq - 1;
    let mut applied_day_start = false;
    // From a snapshot the day has started (the snapshot follows its start). From the first
    // record, the first that is no leader change must start the day: checked as it lies.
    // Bounded by `last_seq`.
    while from_seq == 1 && !applied_day_start && read_seq < last_seq {
        let Some(r) = reader.next().map_err(|e| e.to_string())? else {
            break;
        };
        read_seq = r.seq;
        if r.kind == KIND_NOOP {
            continue;
        }
        check_start_of_day(dir, r.seq, r.kind, r.payload, header)?;
        let command = record::decode(r.kind, r.payload)
            .map_err(|e| format!("journal record {}: {}", r.seq, e.0))?;
        let input = Input {
            seq: r.seq,
            timestamp: r.timestamp,
            command,
        };
        core.apply(&input, streams);
        applied_day_start = true;
        applied.inputs += 1;
        applied.last_timestamp = Some(r.timestamp);
    }
    let mut inputs = InputsAhead::new(reader, read_seq, last_seq);
    let failed = |e| match e {
        AheadError::Journal(e) => e.to_string(),
        AheadError::Record { seq, error } => format!("journal record {seq}: {}", error.0),
    };
    const PROGRESS_RECORDS: u64 = 1 << 16;
    let mut report_at = (read_seq / PROGRESS_RECORDS + 1) * PROGRESS_RECORDS;
    while let Some(input) = inputs.next(core).map_err(failed)? {
        core.apply(&input, streams);
        applied.inputs += 1;
        applied.last_timestamp = Some(input.timestamp);
        // Every 65,536 records, leader changes counted (one may sit on the multiple).
        if input.seq >= report_at {
            progress(input.seq, last_seq);
            report_at = (input.seq / PROGRESS_RECORDS + 1) * PROGRESS_RECORDS;
        }
    }
    let done = inputs.read_seq();
    progress(done, last_seq);
    if done != last_seq {
        return Err(format!(
            "journal replay read through record {done}, recovery counted {last_seq}"
        ));
    }
    applied.day_started = applied_day_start;
    Ok(applied)
}

/// The first record that is not a leader change starts the day, with this config's venue.
fn check_start_of_day(
    dir: &std::path::Path,
    seq: u64,
    kind: u8,
    payload: &[u8],
    header: &DayHeader,
) -> Result<(), String> {
    if kind != KIND_START_OF_DAY {
        return Err(format!(
            "journal record {seq}: the first record is kind {kind}, not start of day"
        ));
    }
    let journal_header =
        DayHeader::decode(payload).map_err(|e| format!("journal record {seq}: {}", e.0))?;
    if journal_header != *header {
        return Err(format!(
            "the journal in {} was started with other sessions or another venue definition (symbols, accounts, limits) than this config; use its config or a new journal directory",
            dir.display()
        ));
    }
    Ok(())
}

impl<C: Clock, F: FeedOut> Intake for Node<C, F> {
    fn submit(&mut self, account: AccountId, raw: &[u8], message: &Inbound) {
        let mut payload = [0u8; record::OUCH_RECORD_BYTES_MAX];
        let n = record::encode_ouch(account, raw, &mut payload);
        self.sequence(
            KIND_OUCH,
            &payload[..n],
            Command::Ouch {
                account,
                message: *message,
            },
        );
    }

    fn has_room(&self) -> bool {
        self.ready_for_input()
    }

    #[inline]
    fn prefetch(&self, account: AccountId, message: &Inbound) {
        self.pipeline.prefetch_message(account, message);
    }

    fn disconnect(&mut self, account: AccountId) {
        // Only an account that cancels on disconnect has anything to journal: a venue that
        // does not use the control writes the journals it always wrote.
        let cancels = self
            .header
            .venue
            .accounts
            .get(account.0 as usize)
            .is_some_and(|a| a.cancel_on_disconnect);
        if !cancels {
            return;
        }
        let mut payload = [0u8; 2];
        let n = record::encode_disconnect(account, &mut payload);
        self.sequence(
            KIND_DISCONNECT,
            &payload[..n],
            Command::Disconnect { account },
        );
    }
}

fn journal_durability(mode: crate::config::DurabilityMode) -> Durability {
    match mode {
        crate::config::DurabilityMode::Async => Durability::Async,
        crate::config::DurabilityMode::Flush => Durability::Flush,
        crate::config::DurabilityMode::Replicated => Durability::Replicated,
        // Commit is a quorum's mappings; the daemon msyncs in the background (`daemon::member`).
        crate::config::DurabilityMode::Quorum => Durability::Async,
    }
}

/// The journal of one trading day, `dir` (see [`crate::days`]).
pub(crate) fn journal_config(config: &Config, dir: &Path) -> JournalConfig {
    let durability = journal_durability(config.journal.durability);
    JournalConfig {
        segment_bytes: config.journal.segment_bytes,
        max_payload_bytes: config.journal.max_payload_bytes,
        durability,
        create_dir: true,
        ..JournalConfig::new(dir)
    }
}

type StreamSet = (Vec<StreamWriter>, Vec<StreamReader>);

/// The session's ITCH store in a journal's store directory ([`crate::stream::store_dir`]).
pub const ITCH_STORE_NAME: &str = "itch.store";

/// Account `index`'s (0-based, config order) OUCH store in a journal's store directory.
pub fn ouch_store_name(index: usize) -> String {
    format!("ouch-{index:05}.store")
}

/// Every account's OUCH store, started afresh.
fn ouch_stores(dir: &Path, count: usize) -> Result<StreamSet, String> {
    let caps = limits::ouch_store(count);
    let mut writers = Vec::with_capacity(count);
    let mut readers = Vec::with_capacity(count);
    for index in 0..count {
        let (w, r) = StreamWriter::create(&dir.join(ouch_store_name(index)), caps)
            .map_err(|e| format!("cannot create an OUCH store: {e}"))?;
        writers.push(w);
        readers.push(r);
    }
    Ok((writers, readers))
}
