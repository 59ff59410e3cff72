//! The engine thread's state: sequencer (journal), exchange, and the output streams.
//!
//! Journal first: every input is stamped and appended before the exchange applies it, and
//! its outputs go to the account and ITCH streams, from which the gateway and the feed send
//! them only after the batch's journal flush.

use crate::config::{Config, Layout};
use crate::engine::Pipeline;
use crate::engine::threaded::{Output as PipelineOutput, Sharded, ShardedConfig};
use crate::exchange::{Admin, Command, Exchange, Input, Outcome, Sink};
use crate::gateway::Intake;
use crate::journal::{
    Durability, DurabilityGate, JournalConfig, JournalReader, JournalWriter, RecoveryReport,
    day_epoch_of,
};
use crate::marketdata::glimpse::{PendingSnapshot, SnapshotDesk, SnapshotEncoder};
use crate::replay;
use crate::sequencer::record::{
    self, DayHeader, KIND_ADMIN, KIND_OUCH, KIND_START_OF_DAY, KIND_TICK,
};
use crate::sequencer::{Clock, Sequencer};
use crate::stream::{StreamReader, StreamWriter, stream};
use crate::types::{AccountId, Timestamp};
use crate::wire::ouch::Inbound;
use crate::wire::{itch, ouch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Largest encoded OUCH/ITCH message.
const MESSAGE_BYTES_MAX: usize = 96;

/// Where ITCH messages go after the ITCH stream: the multicast publisher.
pub trait FeedOut: Send + 'static {
    fn publish(&mut self, message: &[u8], now_ns: u64);
    /// No further output is pending: send the partial packet.
    fn flush(&mut self, now_ns: u64);
    fn poll_timers(&mut self, now_ns: u64);
    fn end_of_session(&mut self, now_ns: u64);
}

/// A feed that sends nothing (replay-only use and tests of the gateway alone).
pub struct NoFeed;

impl FeedOut for NoFeed {
    fn publish(&mut self, _: &[u8], _: u64) {}
    fn flush(&mut self, _: u64) {}
    fn poll_timers(&mut self, _: u64) {}
    fn end_of_session(&mut self, _: u64) {}
}

impl FeedOut for crate::marketdata::publisher::FeedPublisher {
    fn publish(&mut self, message: &[u8], now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::publish(self, message, now_ns);
    }
    fn flush(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::flush(self, now_ns);
    }
    fn poll_timers(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::poll_timers(self, now_ns);
    }
    fn end_of_session(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::end_of_session(self, now_ns);
    }
}

/// The exchange's sink on the engine thread: encode once, append to the streams, publish.
pub struct Outputs<F: FeedOut> {
    ouch: Vec<StreamWriter>,
    itch: StreamWriter,
    /// None while recovery replays the journal: rebuild the streams, send nothing.
    pub feed: Option<F>,
    /// Publish each ITCH message as it is appended: only where appends happen after release
    /// (the sharded output stage). The compact layout publishes from the stream after each
    /// batch's durability instead (`Engine::try_release`).
    publish_inline: bool,
    now_ns: u64,
    /// ITCH End of Messages seen: the day is over.
    pub day_ended: bool,
    /// A stream refused an append: the venue must stop (see `Engine::fatal`).
    pub full: Option<String>,
}

impl<F: FeedOut> Sink for Outputs<F> {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        if self.ouch[account.0 as usize].append(&buf[..n]).is_err() {
            self.full
                .get_or_insert(format!("the OUCH stream of account {} is full", account.0));
        }
    }

    fn itch(&mut self, message: &itch::Message) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        if self.itch.append(&buf[..n]).is_err() {
            self.full.get_or_insert("the ITCH stream is full".into());
            return;
        }
        if matches!(
            message.body,
            itch::Body::SystemEvent {
                event: itch::event::END_OF_MESSAGES
            }
        ) {
            self.day_ended = true;
        }
        if self.publish_inline
            && let Some(feed) = self.feed.as_mut()
        {
            feed.publish(&buf[..n], self.now_ns);
        }
    }
}

/// The state machine behind the sequencer: the compact layout applies inputs inline; the
/// sharded layout hands them to the front of the threaded pipeline (DESIGN.md 1).
enum Core<F: FeedOut> {
    Compact {
        exchange: Exchange,
        outputs: Outputs<F>,
    },
    Sharded {
        pipeline: Sharded<ShardedOutputs<F>>,
        shared: Arc<OutputShared>,
        next_snapshot: u64,
    },
}

pub struct Engine<C: Clock, F: FeedOut> {
    core: Core<F>,
    sequencer: Sequencer<C>,
    pub header: DayHeader,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    last_tick: Timestamp,
    tick_ns: u64,
    /// A journal or stream failure: stop taking inputs and shut down.
    pub fatal: Option<String>,
    pub recovery: RecoveryReport,
    durability: Durability,
    /// Compact layout: ITCH messages handed to the feed so far (the rest await durability).
    itch_published: u64,
    /// Compact layout, `replicated` mode: a batch waits for a standby's confirmation.
    awaiting: bool,
}

/// Capacities of the output streams (virtual reservations; pages are used as written).
pub const ITCH_STREAM_BYTES: u64 = 8 << 30;
pub const ITCH_STREAM_MESSAGES: u64 = 256 << 20;
pub const OUCH_STREAM_BYTES: u64 = 1 << 30;
pub const OUCH_STREAM_MESSAGES: u64 = 32 << 20;

impl<C: Clock, F: FeedOut> Engine<C, F> {
    /// Open (or start) the journal, replay it to rebuild the exchange and the streams, then
    /// open the feed (`make_feed(next_seq)`). Returns an engine ready for new inputs.
    /// `progress(done, total)` reports the replay.
    ///
    /// The sharded layout replays through the same split state machine in one thread, then
    /// starts its shard and output threads from that state. A new day's opening messages are
    /// multicast once the feed is open; a recovered day's are not sent again.
    pub fn recover(
        config: &Config,
        mut clock: C,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let day_epoch = day_epoch_of(clock.unix_ns());
        let mut opened = Opened::open(config, clock, day_epoch, config.engine.layout, progress)?;
        let new_day = opened.report.last_seq == 0;
        if new_day {
            let Opened {
                sequencer,
                header,
                core,
                outputs,
                ..
            } = &mut opened;
            start_day(sequencer, header, core, outputs)?;
        }
        let next_itch = if new_day {
            1
        } else {
            opened.itch_reader.len() + 1
        };
        let mut feed = make_feed(next_itch)?;
        if new_day {
            let now = 0;
            for seq in 1..=opened.itch_reader.len() {
                feed.publish(opened.itch_reader.get(seq).expect("published"), now);
            }
            feed.flush(now);
        }
        opened.outputs.feed = Some(feed);
        opened.into_engine(config)
    }

    /// A standby's engine (compact layout): the journal recovered and replayed, but no day
    /// started (the primary's records, start of day included, arrive through
    /// [`Self::apply_replicated`]) and no feed until it takes over ([`Self::open_feed`]). A new
    /// journal gets the primary's day epoch.
    pub fn follower(
        config: &Config,
        clock: C,
        day_epoch_unix_ns: u64,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        Opened::open(config, clock, day_epoch_unix_ns, Layout::Compact, progress)?
            .into_engine(config)
    }

    /// Open the market-data feed at the next ITCH sequence number (a standby taking over).
    pub fn open_feed(
        &mut self,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
    ) -> Result<(), String> {
        let next = self.next_itch_seq();
        match &mut self.core {
            Core::Compact { outputs, .. } => outputs.feed = Some(make_feed(next)?),
            Core::Sharded { .. } => return Err("a standby runs the compact layout".into()),
        }
        self.itch_published = self.itch_reader.len();
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
        let Core::Compact { exchange, outputs } = &mut self.core else {
            return Err("a standby runs the compact layout".into());
        };
        replay::apply_record(exchange, seq, timestamp, kind, payload, outputs)
            .map_err(|e| e.to_string())?;
        if let Some(full) = outputs.full.take() {
            return Err(full);
        }
        Ok(())
    }

    /// Make everything applied so far durable (a standby acks what this returns).
    pub fn flush_journal(&mut self) -> Result<u64, String> {
        self.sequencer.flush().map_err(|e| e.to_string())?;
        Ok(self.last_seq())
    }

    /// The journal's confirmed-by-standby number (raised by the replication server).
    pub fn confirmed_seq_handle(&self) -> Arc<AtomicU64> {
        self.sequencer.journal().confirmed_seq_handle()
    }

    pub fn ouch_streams(&self) -> &[StreamReader] {
        &self.ouch_readers
    }

    pub fn itch_stream(&self) -> &StreamReader {
        &self.itch_reader
    }

    /// Next MoldUDP64 sequence number (sharded layout: of what the output stage has merged).
    pub fn next_itch_seq(&self) -> u64 {
        self.itch_reader.len() + 1
    }

    pub fn set_now(&mut self, now_ns: u64) {
        if let Core::Compact { outputs, .. } = &mut self.core {
            outputs.now_ns = now_ns;
        }
    }

    /// Journal and apply one input. Nothing is taken once a fatal error happened.
    fn sequence(&mut self, kind: u8, payload: &[u8], command: Command) -> Option<Outcome> {
        if self.fatal.is_some() {
            return None;
        }
        let (seq, timestamp) = match self.sequencer.append(kind, payload) {
            Ok(x) => x,
            Err(e) => {
                self.fatal = Some(format!("journal append failed: {e}"));
                return None;
            }
        };
        let input = Input {
            seq,
            timestamp,
            command,
        };
        let outcome = match &mut self.core {
            Core::Compact { exchange, outputs } => {
                let outcome = exchange.apply(&input, outputs);
                if let Some(full) = outputs.full.take() {
                    self.fatal = Some(full);
                }
                outcome
            }
            Core::Sharded { pipeline, .. } => pipeline.apply(&input),
        };
        Some(outcome)
    }

    pub fn admin(&mut self, admin: Admin) -> Option<Outcome> {
        let mut payload = [0u8; 3];
        let n = record::encode_admin(admin, &mut payload);
        self.sequence(KIND_ADMIN, &payload[..n], Command::Admin(admin))
    }

    fn expiring_orders(&self) -> u64 {
        match &self.core {
            Core::Compact { exchange, .. } => exchange.expiring_orders(),
            Core::Sharded { pipeline, .. } => pipeline.expiring_orders(),
        }
    }

    /// Journal a timer input when orders can expire and a tick interval has passed.
    pub fn tick_if_due(&mut self) {
        if self.expiring_orders() == 0 {
            return;
        }
        let now = self.sequencer.now();
        if now.0.saturating_sub(self.last_tick.0) < self.tick_ns {
            return;
        }
        self.last_tick = now;
        self.sequence(KIND_TICK, &[], Command::Tick);
    }

    /// End of a batch: make the batch durable (group commit). Returns whether its outputs may
    /// leave now. Compact layout: always in `async` and `flush` modes (after the msync); in
    /// `replicated` mode only once a standby has confirmed the batch's last input (until then
    /// [`Self::awaiting_confirmation`] is true and the caller takes no new inputs). Sharded
    /// layout: the output thread appends only released outputs, so the streams may always be
    /// sent; it is woken to release this batch.
    pub fn end_batch(&mut self, now_ns: u64) -> bool {
        if let Err(e) = self.sequencer.flush() {
            self.fatal
                .get_or_insert(format!("journal flush failed: {e}"));
            return false;
        }
        if let Core::Sharded {
            pipeline, shared, ..
        } = &mut self.core
        {
            pipeline.wake_output();
            if let Some(full) = shared.fatal.lock().expect("not poisoned").take() {
                self.fatal.get_or_insert(full);
            }
            return true;
        }
        self.try_release(now_ns)
    }

    /// Compact layout: release the batch if the durability mode allows (publish its ITCH).
    pub fn try_release(&mut self, now_ns: u64) -> bool {
        let last_seq = self.last_seq();
        let confirmed = self
            .sequencer
            .journal()
            .confirmed_seq_handle()
            .load(Ordering::Acquire);
        self.awaiting = self.durability == Durability::Replicated && confirmed < last_seq;
        if self.awaiting {
            return false;
        }
        self.publish_released(now_ns);
        true
    }

    /// Inputs are journaled but not yet confirmed by a standby: hold replies, take no input.
    pub fn awaiting_confirmation(&self) -> bool {
        self.awaiting
    }

    /// Compact layout: hand every ITCH message not yet published to the feed, then send the
    /// partial packet.
    fn publish_released(&mut self, now_ns: u64) {
        let Core::Compact { outputs, .. } = &mut self.core else {
            return;
        };
        let Some(feed) = outputs.feed.as_mut() else {
            return;
        };
        let last = self.itch_reader.len();
        for seq in self.itch_published + 1..=last {
            feed.publish(
                self.itch_reader.get(seq).expect("published message"),
                now_ns,
            );
        }
        self.itch_published = last;
        feed.flush(now_ns);
    }

    /// The journal's current time (for stamps outside inputs, e.g. GLIMPSE snapshots).
    pub fn now(&mut self) -> Timestamp {
        self.sequencer.now()
    }

    /// Feed timers (heartbeats); the sharded layout's output thread runs its own.
    pub fn poll_feed_timers(&mut self, now_ns: u64) {
        if let Core::Compact { outputs, .. } = &mut self.core
            && let Some(feed) = outputs.feed.as_mut()
        {
            feed.poll_timers(now_ns);
        }
    }

    /// The day's End of Messages has been produced.
    pub fn day_ended(&self) -> bool {
        match &self.core {
            Core::Compact { outputs, .. } => outputs.day_ended,
            Core::Sharded { shared, .. } => shared.day_ended.load(Ordering::Acquire),
        }
    }

    /// The feed's End of Session (compact layout; the output thread sends its own).
    pub fn feed_end_of_session(&mut self, now_ns: u64) {
        if let Core::Compact { outputs, .. } = &mut self.core
            && let Some(feed) = outputs.feed.as_mut()
        {
            feed.end_of_session(now_ns);
        }
    }

    /// The compact layout's exchange (tools and tests); None in the sharded layout.
    pub fn exchange(&self) -> Option<&Exchange> {
        match &self.core {
            Core::Compact { exchange, .. } => Some(exchange),
            Core::Sharded { .. } => None,
        }
    }

    /// Last sequenced input.
    pub fn last_seq(&self) -> u64 {
        match &self.core {
            Core::Compact { exchange, .. } => exchange.last_seq(),
            Core::Sharded { pipeline, .. } => pipeline.last_seq(),
        }
    }

    /// `seq=… resting=… order_refs=… matches=…` for the admin status line (sharded: as far
    /// as the output stage has merged).
    pub fn status(&self) -> String {
        match &self.core {
            Core::Compact { exchange: e, .. } => format!(
                "seq={} resting={} order_refs={} matches={}",
                e.last_seq(),
                e.resting_orders(),
                e.order_refs_used(),
                e.matches_used()
            ),
            Core::Sharded { pipeline, .. } => {
                let stats = pipeline.stats();
                format!(
                    "seq={} resting={} order_refs={} matches={} merged_seq={}",
                    pipeline.last_seq(),
                    pipeline.resting_orders(),
                    stats.order_refs.load(Ordering::Relaxed),
                    stats.matches.load(Ordering::Relaxed),
                    stats.merged_seq.load(Ordering::Acquire)
                )
            }
        }
    }

    /// Answer GLIMPSE requests between two inputs: inline in the compact layout; in the
    /// sharded layout the request travels the pipeline and the output thread answers it.
    pub fn answer_snapshots(&mut self, desk: &SnapshotDesk) {
        let ts = self.sequencer.now();
        let next = self.next_itch_seq();
        match &mut self.core {
            Core::Compact { exchange, .. } => {
                desk.answer_snapshot_requests(exchange, next, ts);
            }
            Core::Sharded {
                pipeline,
                shared,
                next_snapshot,
            } => {
                desk.take_snapshot_requests(|request| {
                    let id = *next_snapshot;
                    *next_snapshot += 1;
                    shared
                        .snapshots
                        .lock()
                        .expect("not poisoned")
                        .insert(id, request);
                    pipeline.snapshot(ts, id);
                });
            }
        }
    }

    /// Wake the gateway thread when the output thread has released new replies.
    pub fn set_output_waker(&self, wake: crate::marketdata::glimpse::Waker) {
        if let Core::Sharded { shared, .. } = &self.core {
            let _ = shared.waker.set(wake);
        }
    }

    /// Sharded layout: wait (bounded) until the output stage has merged every sequenced input.
    pub fn drain_outputs(&self, timeout: Duration) {
        if let Core::Sharded { pipeline, .. } = &self.core {
            let deadline = Instant::now() + timeout;
            while pipeline.stats().merged_seq.load(Ordering::Acquire) < pipeline.last_seq()
                && Instant::now() < deadline
            {
                pipeline.wake_output();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// A journal opened and replayed, before the feed and (sharded) the threads start.
struct Opened<C: Clock, F: FeedOut> {
    sequencer: Sequencer<C>,
    header: DayHeader,
    core: Replaying,
    outputs: Outputs<F>,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    report: RecoveryReport,
    durability: Durability,
}

impl<C: Clock, F: FeedOut> Opened<C, F> {
    fn open(
        config: &Config,
        clock: C,
        day_epoch: u64,
        layout: Layout,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let journal_config = journal_config(config);
        let (writer, report) =
            JournalWriter::open_or_create(journal_config, day_epoch).map_err(|e| e.to_string())?;
        if let Some(tail) = &report.torn_tail {
            tracing::warn!(path = %tail.path.display(), offset = tail.offset_bytes, cut_bytes = tail.cut_bytes, "journal: cut a torn tail ({})", tail.reason);
        }
        let accounts = config.accounts.len();
        let (ouch_writers, ouch_readers) =
            streams(accounts, OUCH_STREAM_BYTES, OUCH_STREAM_MESSAGES)?;
        let (itch, itch_reader) =
            stream(ITCH_STREAM_BYTES, ITCH_STREAM_MESSAGES).map_err(|e| e.to_string())?;
        let mut outputs = Outputs {
            ouch: ouch_writers,
            itch,
            feed: None,
            publish_inline: false,
            now_ns: 0,
            day_ended: false,
            full: None,
        };
        let header = DayHeader {
            format: DayHeader::FORMAT,
            gateway_session: config.gateway.session.clone(),
            feed_session: config.feed.session.clone(),
            venue: config.venue(),
        };
        let sequencer = Sequencer::new(writer, clock);
        let mut core = match layout {
            Layout::Compact => {
                Replaying::Compact(Exchange::new(header.venue.clone()).map_err(|e| e.to_string())?)
            }
            Layout::Sharded => Replaying::Sharded(
                Pipeline::new(&header.venue, config.engine.shards as usize)
                    .map_err(|e| e.to_string())?,
            ),
        };
        if report.last_seq > 0 {
            replay_journal(
                &config.journal.dir,
                report.last_seq,
                &header,
                &mut core,
                &mut outputs,
                &mut progress,
            )?;
        }
        if let Some(full) = outputs.full.take() {
            return Err(full);
        }
        Ok(Opened {
            sequencer,
            header,
            core,
            outputs,
            ouch_readers,
            itch_reader,
            report,
            durability: journal_durability(config.journal.durability),
        })
    }

    /// Start the layout's machinery around the replayed state.
    fn into_engine(self, config: &Config) -> Result<Engine<C, F>, String> {
        let Opened {
            sequencer,
            header,
            core,
            mut outputs,
            ouch_readers,
            itch_reader,
            report,
            durability,
        } = self;
        let core = match core {
            Replaying::Compact(exchange) => Core::Compact { exchange, outputs },
            Replaying::Sharded(pipeline) => {
                // Appends on the output thread happen after release: publish them inline.
                outputs.publish_inline = true;
                let (front, shards, merge) = pipeline.into_parts(&mut outputs);
                let shared = Arc::new(OutputShared {
                    day_ended: AtomicBool::new(outputs.day_ended),
                    ..OutputShared::default()
                });
                let sink = ShardedOutputs {
                    outputs,
                    gate: sequencer.journal().durability_gate(),
                    shared: shared.clone(),
                    wait: config.engine.wait,
                    started: Instant::now(),
                    dirty: false,
                    feed_ended: false,
                    last_timers_ns: 0,
                    snapshot: None,
                };
                let threads = ShardedConfig {
                    shards: config.engine.shards as usize,
                    wait: config.engine.wait,
                    ring_slots: config.engine.ring_slots as usize,
                    pin_cores: config.engine.pin_cores,
                };
                let pipeline = Sharded::from_parts(front, shards, merge, &threads, sink)?;
                Core::Sharded {
                    pipeline,
                    shared,
                    next_snapshot: 1,
                }
            }
        };
        let itch_published = itch_reader.len();
        Ok(Engine {
            core,
            sequencer,
            header,
            ouch_readers,
            itch_reader,
            last_tick: Timestamp(0),
            tick_ns: config.engine.tick_ms.max(1) * 1_000_000,
            fatal: None,
            recovery: report,
            durability,
            itch_published,
            awaiting: false,
        })
    }
}

/// The state being rebuilt by replay, before the sharded threads start.
#[allow(clippy::large_enum_variant)] // one short-lived value during recovery
enum Replaying {
    Compact(Exchange),
    Sharded(Pipeline),
}

impl Replaying {
    fn apply<F: FeedOut>(&mut self, input: &Input, outputs: &mut Outputs<F>) {
        match self {
            Replaying::Compact(exchange) => {
                exchange.apply(input, outputs);
            }
            Replaying::Sharded(pipeline) => {
                pipeline.apply(input, outputs);
            }
        }
    }
}

fn start_day<C: Clock, F: FeedOut>(
    sequencer: &mut Sequencer<C>,
    header: &DayHeader,
    core: &mut Replaying,
    outputs: &mut Outputs<F>,
) -> Result<(), String> {
    let payload = header.encode();
    let (seq, timestamp) = sequencer
        .append(KIND_START_OF_DAY, &payload)
        .map_err(|e| e.to_string())?;
    assert_eq!(seq, 1, "a new journal starts at 1");
    let input = Input {
        seq,
        timestamp,
        command: Command::StartOfDay,
    };
    core.apply(&input, outputs);
    sequencer.flush().map_err(|e| e.to_string())?;
    Ok(())
}

fn replay_journal<F: FeedOut>(
    dir: &std::path::Path,
    last_seq: u64,
    header: &DayHeader,
    core: &mut Replaying,
    outputs: &mut Outputs<F>,
    progress: &mut impl FnMut(u64, u64),
) -> Result<(), String> {
    let mut reader = JournalReader::open(dir, 1).map_err(|e| e.to_string())?;
    let (journal_header, timestamp) =
        replay::read_header(&mut reader).map_err(|e| e.to_string())?;
    if journal_header != *header {
        return Err(format!(
            "the journal in {} was started with other sessions or another venue definition (symbols, accounts, limits) than this config; use its config or a new journal directory",
            dir.display()
        ));
    }
    let start = Input {
        seq: 1,
        timestamp,
        command: Command::StartOfDay,
    };
    core.apply(&start, outputs);
    let mut done = 1;
    while let Some(r) = reader.next().map_err(|e| e.to_string())? {
        let command = record::decode(r.kind, r.payload)
            .map_err(|e| format!("journal record {}: {}", r.seq, e.0))?;
        let input = Input {
            seq: r.seq,
            timestamp: r.timestamp,
            command,
        };
        core.apply(&input, outputs);
        done += 1;
        if done % (1 << 16) == 0 {
            progress(done, last_seq);
        }
        if r.seq == last_seq {
            break;
        }
    }
    progress(done, last_seq);
    if done != last_seq {
        return Err(format!(
            "journal replay read {done} records, recovery counted {last_seq}"
        ));
    }
    Ok(())
}

/// What the gateway thread and the sharded output thread share.
#[derive(Default)]
pub struct OutputShared {
    day_ended: AtomicBool,
    /// A stream refused an append on the output thread: the venue must stop.
    fatal: Mutex<Option<String>>,
    waker: OnceLock<crate::marketdata::glimpse::Waker>,
    /// GLIMPSE requests travelling the pipeline, by id.
    snapshots: Mutex<HashMap<u64, PendingSnapshot>>,
}

/// The sharded layout's output stage: the streams and the feed, on the output thread.
/// Replies are appended only once the journal's durable sequence covers their input
/// (`DurabilityGate::releasable_seq`), so the gateway may send whatever the streams hold.
pub struct ShardedOutputs<F: FeedOut> {
    outputs: Outputs<F>,
    gate: DurabilityGate,
    shared: Arc<OutputShared>,
    wait: crate::config::WaitStrategy,
    started: Instant,
    /// Outputs appended since the gateway was last woken.
    dirty: bool,
    feed_ended: bool,
    last_timers_ns: u64,
    snapshot: Option<(u64, SnapshotEncoder)>,
}

impl<F: FeedOut> ShardedOutputs<F> {
    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Let the gateway send what was appended, and the feed its partial packet.
    fn release(&mut self) {
        let now = self.now_ns();
        if let Some(feed) = self.outputs.feed.as_mut() {
            feed.flush(now);
        }
        if self.dirty {
            self.dirty = false;
            if let Some(wake) = self.shared.waker.get() {
                wake();
            }
        }
    }
}

impl<F: FeedOut> Sink for ShardedOutputs<F> {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        self.dirty = true;
        self.outputs.ouch(account, message);
    }

    fn itch(&mut self, message: &itch::Message) {
        self.dirty = true;
        self.outputs.itch(message);
    }
}

impl<F: FeedOut> PipelineOutput for ShardedOutputs<F> {
    fn before(&mut self, seq: u64) {
        if self.gate.releasable_seq() >= seq {
            self.outputs.now_ns = self.now_ns();
            return;
        }
        self.release();
        while self.gate.releasable_seq() < seq {
            match self.wait {
                crate::config::WaitStrategy::Spin => std::hint::spin_loop(),
                crate::config::WaitStrategy::Yield => std::thread::yield_now(),
                // The gateway thread rings the output bell after each flush.
                crate::config::WaitStrategy::Park => {
                    std::thread::park_timeout(Duration::from_micros(200))
                }
            }
        }
        self.outputs.now_ns = self.now_ns();
    }

    fn idle(&mut self) {
        if let Some(full) = self.outputs.full.take() {
            self.shared
                .fatal
                .lock()
                .expect("not poisoned")
                .get_or_insert(full);
        }
        if self.outputs.day_ended && !self.shared.day_ended.load(Ordering::Relaxed) {
            self.shared.day_ended.store(true, Ordering::Release);
            self.dirty = true;
        }
        self.release();
        let now = self.now_ns();
        if now.saturating_sub(self.last_timers_ns) >= 10_000_000 {
            self.last_timers_ns = now;
            if let Some(feed) = self.outputs.feed.as_mut() {
                feed.poll_timers(now);
            }
        }
        if self.outputs.day_ended
            && !self.feed_ended
            && let Some(feed) = self.outputs.feed.as_mut()
        {
            self.feed_ended = true;
            feed.end_of_session(now);
        }
    }

    fn snapshot(&mut self, id: u64, message: Option<&itch::Message>) {
        let next = self.outputs.itch.len() + 1;
        let (_, encoder) = self
            .snapshot
            .get_or_insert_with(|| (id, SnapshotEncoder::new(next)));
        match message {
            Some(m) => encoder.push(m),
            None => {
                let (at, encoder) = self.snapshot.take().expect("started");
                debug_assert_eq!(at, id);
                let request = self
                    .shared
                    .snapshots
                    .lock()
                    .expect("not poisoned")
                    .remove(&id);
                if let Some(request) = request {
                    request.answer(encoder.finish());
                }
            }
        }
    }
}

impl<C: Clock, F: FeedOut> Intake for Engine<C, F> {
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
}

fn journal_durability(mode: crate::config::DurabilityMode) -> Durability {
    match mode {
        crate::config::DurabilityMode::Async => Durability::Async,
        crate::config::DurabilityMode::Flush => Durability::Flush,
        crate::config::DurabilityMode::Replicated => Durability::Replicated,
    }
}

pub(crate) fn journal_config(config: &Config) -> JournalConfig {
    let durability = journal_durability(config.journal.durability);
    JournalConfig {
        segment_bytes: config.journal.segment_bytes,
        max_payload_bytes: config.journal.max_payload_bytes,
        durability,
        create_dir: true,
        ..JournalConfig::new(&config.journal.dir)
    }
}

type Streams = (Vec<StreamWriter>, Vec<StreamReader>);

fn streams(count: usize, bytes: u64, messages: u64) -> Result<Streams, String> {
    let mut writers = Vec::with_capacity(count);
    let mut readers = Vec::with_capacity(count);
    for _ in 0..count {
        let (w, r) =
            stream(bytes, messages).map_err(|e| format!("cannot reserve an OUCH stream: {e}"))?;
        writers.push(w);
        readers.push(r);
    }
    Ok((writers, readers))
}
