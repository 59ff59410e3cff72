//! The engine thread's state: sequencer (journal), exchange, and the output streams.
//!
//! Journal first: every input is stamped and appended before the exchange applies it, and
//! its outputs go to the account and ITCH streams, from which the gateway and the feed send
//! them only after the batch's journal flush.

use crate::config::Config;
use crate::exchange::{Admin, Command, Exchange, Input, Outcome, Sink};
use crate::gateway::Intake;
use crate::journal::{
    Durability, JournalConfig, JournalReader, JournalWriter, RecoveryReport, day_epoch_of,
};
use crate::replay;
use crate::sequencer::record::{
    self, DayHeader, KIND_ADMIN, KIND_OUCH, KIND_START_OF_DAY, KIND_TICK,
};
use crate::sequencer::{Clock, Sequencer};
use crate::stream::{StreamReader, StreamWriter, stream};
use crate::types::{AccountId, Timestamp};
use crate::wire::ouch::Inbound;
use crate::wire::{itch, ouch};
use std::sync::atomic::Ordering;

/// Largest encoded OUCH/ITCH message.
const MESSAGE_BYTES_MAX: usize = 96;

/// Where ITCH messages go after the ITCH stream: the multicast publisher.
pub trait FeedOut {
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
    }
}

pub struct Engine<C: Clock, F: FeedOut> {
    pub exchange: Exchange,
    sequencer: Sequencer<C>,
    pub outputs: Outputs<F>,
    pub header: DayHeader,
    ouch_readers: Vec<StreamReader>,
    itch_reader: StreamReader,
    last_tick: Timestamp,
    tick_ns: u64,
    /// A journal or stream failure: stop taking inputs and shut down.
    pub fatal: Option<String>,
    durability: Durability,
    /// ITCH messages handed to the feed so far (the rest wait for durability).
    itch_published: u64,
    awaiting: bool,
    pub recovery: RecoveryReport,
}

/// Capacities of the output streams (virtual reservations; pages are used as written).
pub const ITCH_STREAM_BYTES: u64 = 8 << 30;
pub const ITCH_STREAM_MESSAGES: u64 = 256 << 20;
pub const OUCH_STREAM_BYTES: u64 = 1 << 30;
pub const OUCH_STREAM_MESSAGES: u64 = 32 << 20;

impl<C: Clock, F: FeedOut> Engine<C, F> {
    /// Open (or start) the journal, replay it to rebuild the exchange and the streams, then
    /// open the feed at the next ITCH sequence number (`make_feed(next_seq)`). Returns an
    /// engine ready for new inputs. `progress(done, total)` reports the replay.
    pub fn recover(
        config: &Config,
        mut clock: C,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        let day_epoch = day_epoch_of(clock.unix_ns());
        let mut engine = Self::open(config, clock, day_epoch, progress)?;
        let new_day = engine.exchange.last_seq() == 0;
        // The feed opens first, so a new day's opening messages are multicast too (they are
        // published with the first batch's release); a recovered day's are not sent again.
        engine.open_feed(make_feed)?;
        if new_day {
            engine.start_day()?;
        }
        Ok(engine)
    }

    /// A standby's engine: the journal recovered and replayed, but no day started (the
    /// primary's records, start of day included, arrive through [`Self::apply_replicated`])
    /// and no feed until it takes over. A new journal gets the primary's day epoch.
    pub fn follower(
        config: &Config,
        clock: C,
        day_epoch_unix_ns: u64,
        progress: impl FnMut(u64, u64),
    ) -> Result<Self, String> {
        Self::open(config, clock, day_epoch_unix_ns, progress)
    }

    /// Open the market-data feed at the next ITCH sequence number (after recovery, or when a
    /// standby takes over).
    pub fn open_feed(
        &mut self,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
    ) -> Result<(), String> {
        self.outputs.feed = Some(make_feed(self.next_itch_seq())?);
        self.itch_published = self.itch_reader.len();
        Ok(())
    }

    fn open(
        config: &Config,
        clock: C,
        day_epoch: u64,
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
        let outputs = Outputs {
            ouch: ouch_writers,
            itch,
            feed: None,
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
        let exchange = Exchange::new(header.venue.clone()).map_err(|e| e.to_string())?;
        let mut engine = Engine {
            exchange,
            sequencer: Sequencer::new(writer, clock),
            outputs,
            header,
            ouch_readers,
            itch_reader,
            last_tick: Timestamp(0),
            tick_ns: config.engine.tick_ms.max(1) * 1_000_000,
            fatal: None,
            durability: journal_durability(config.journal.durability),
            itch_published: 0,
            awaiting: false,
            recovery: report.clone(),
        };
        if report.last_seq > 0 {
            engine.replay_journal(&config.journal.dir, report.last_seq, &mut progress)?;
        }
        Ok(engine)
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
        replay::apply_record(
            &mut self.exchange,
            seq,
            timestamp,
            kind,
            payload,
            &mut self.outputs,
        )
        .map_err(|e| e.to_string())?;
        if let Some(full) = self.outputs.full.take() {
            return Err(full);
        }
        Ok(())
    }

    /// The journal's confirmed-by-standby number (raised by the replication server).
    pub fn confirmed_seq_handle(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.sequencer.journal().confirmed_seq_handle()
    }

    /// Make everything applied so far durable (a standby acks what this returns).
    pub fn flush_journal(&mut self) -> Result<u64, String> {
        self.sequencer.flush().map_err(|e| e.to_string())?;
        Ok(self.exchange.last_seq())
    }

    fn start_day(&mut self) -> Result<(), String> {
        let payload = self.header.encode();
        let (seq, timestamp) = self
            .sequencer
            .append(KIND_START_OF_DAY, &payload)
            .map_err(|e| e.to_string())?;
        assert_eq!(seq, 1, "a new journal starts at 1");
        self.exchange.apply(
            &Input {
                seq,
                timestamp,
                command: Command::StartOfDay,
            },
            &mut self.outputs,
        );
        self.sequencer.flush().map_err(|e| e.to_string())?;
        Ok(())
    }

    fn replay_journal(
        &mut self,
        dir: &std::path::Path,
        last_seq: u64,
        progress: &mut impl FnMut(u64, u64),
    ) -> Result<(), String> {
        let mut reader = JournalReader::open(dir, 1).map_err(|e| e.to_string())?;
        let (journal_header, timestamp) =
            replay::read_header(&mut reader).map_err(|e| e.to_string())?;
        if journal_header != self.header {
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
        self.exchange.apply(&start, &mut self.outputs);
        let mut done = 1;
        while let Some(r) = reader.next().map_err(|e| e.to_string())? {
            replay::apply_record(
                &mut self.exchange,
                r.seq,
                r.timestamp,
                r.kind,
                r.payload,
                &mut self.outputs,
            )
            .map_err(|e| e.to_string())?;
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

    pub fn ouch_streams(&self) -> &[StreamReader] {
        &self.ouch_readers
    }

    pub fn itch_stream(&self) -> &StreamReader {
        &self.itch_reader
    }

    /// Next MoldUDP64 sequence number.
    pub fn next_itch_seq(&self) -> u64 {
        self.itch_reader.len() + 1
    }

    pub fn set_now(&mut self, now_ns: u64) {
        self.outputs.now_ns = now_ns;
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
        let outcome = self.exchange.apply(
            &Input {
                seq,
                timestamp,
                command,
            },
            &mut self.outputs,
        );
        if let Some(full) = self.outputs.full.take() {
            self.fatal = Some(full);
        }
        Some(outcome)
    }

    pub fn admin(&mut self, admin: Admin) -> Option<Outcome> {
        let mut payload = [0u8; 3];
        let n = record::encode_admin(admin, &mut payload);
        self.sequence(KIND_ADMIN, &payload[..n], Command::Admin(admin))
    }

    /// Journal a timer input when orders can expire and a tick interval has passed.
    pub fn tick_if_due(&mut self) {
        if self.exchange.expiring_orders() == 0 {
            return;
        }
        let now = self.sequencer.now();
        if now.0.saturating_sub(self.last_tick.0) < self.tick_ns {
            return;
        }
        self.last_tick = now;
        self.sequence(KIND_TICK, &[], Command::Tick);
    }

    /// End of a batch: make the batch durable (group commit), then let the feed send.
    /// End of a batch: make the batch durable (group commit). Returns whether its outputs may
    /// leave now: always in `async` and `flush` modes (after the msync); in `replicated` mode
    /// only once a standby has confirmed the batch's last input (until then
    /// [`Self::awaiting_confirmation`] is true and the caller takes no new inputs).
    pub fn end_batch(&mut self, now_ns: u64) -> bool {
        if let Err(e) = self.sequencer.flush() {
            self.fatal
                .get_or_insert(format!("journal flush failed: {e}"));
            return false;
        }
        self.try_release(now_ns)
    }

    /// Release the batch if the durability mode allows: publish its ITCH messages.
    pub fn try_release(&mut self, now_ns: u64) -> bool {
        let last_seq = self.exchange.last_seq();
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

    /// Hand every ITCH message not yet published to the feed, then send the partial packet.
    fn publish_released(&mut self, now_ns: u64) {
        let Some(feed) = self.outputs.feed.as_mut() else {
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

    pub fn feed(&mut self) -> &mut F {
        self.outputs
            .feed
            .as_mut()
            .expect("the feed opens after recovery")
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
