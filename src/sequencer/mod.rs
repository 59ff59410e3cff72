//! The sequencer: the only clock reader. It stamps every input with a gapless journal
//! sequence number and a timestamp (ns since midnight UTC of the journal's day), appends it to
//! the journal and hands it on. Time-driven inputs (TIF expiry ticks) enter here too.

pub mod ahead;
pub mod record;

use crate::journal::{DurabilityGate, JournalWriter};
use crate::types::Timestamp;

/// Where the time comes from: the system clock in the daemon, a fake one in tests.
pub trait Clock {
    /// Unix time in nanoseconds.
    fn unix_ns(&mut self) -> u64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_ns(&mut self) -> u64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970");
        let now = u64::try_from(since.as_nanos()).expect("clock before 2554");
        if cfg!(debug_assertions) {
            now.saturating_add_signed(test_clock_offset_ns())
        } else {
            now
        }
    }
}

/// A test hook: `BOURSE_TEST_CLOCK_OFFSET_S=N` (seconds, may be negative) moves the
/// sequencer's clock by N seconds, so a test can start the next trading day without waiting
/// for midnight. Read once, at the first clock reading (start-up). Only debug builds (the
/// tests run the debug binary) look at it; release builds have no such hook.
fn test_clock_offset_ns() -> i64 {
    static OFFSET_NS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET_NS.get_or_init(|| {
        let Ok(text) = std::env::var("BOURSE_TEST_CLOCK_OFFSET_S") else {
            return 0;
        };
        let Ok(offset_s) = text.trim().parse::<i64>() else {
            tracing::error!(%text, "BOURSE_TEST_CLOCK_OFFSET_S is not a whole number of seconds: ignored");
            return 0;
        };
        tracing::warn!(
            offset_s,
            "test hook BOURSE_TEST_CLOCK_OFFSET_S: the sequencer's clock is moved"
        );
        offset_s.saturating_mul(1_000_000_000)
    })
}

/// Why a record was not sequenced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SequencingError {
    /// Not now, nothing was journaled (a cluster member that does not lead, a leader still
    /// applying its predecessor's records or over its uncommitted bound): the input is refused.
    Refused(&'static str),
    /// The journal failed: the venue must stop.
    Failed(String),
}

impl std::fmt::Display for SequencingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequencingError::Refused(why) => write!(f, "input refused: {why}"),
            SequencingError::Failed(why) => write!(f, "journal append failed: {why}"),
        }
    }
}

/// Where the sequencer's records go: this node's journal alone ([`JournalLog`]), or a cluster
/// member that replicates them through raft (`crate::cluster::node::ClusterNode`). Either way
/// the state machine applies a record once `append` returned its number, and its outputs leave
/// once `releasable` reaches it.
pub trait Sequencing: Send {
    /// Journal one record; returns its sequence number.
    fn append(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, SequencingError>;
    /// Group commit at the end of a batch, per the durability mode.
    fn flush(&mut self) -> Result<(), String>;
    /// Highest sequence number whose outputs may leave now; `None`: none may (a cluster member
    /// that leads without a lease).
    fn releasable(&self) -> Option<u64>;
    /// The last record handed to the state machine.
    fn last_seq(&self) -> u64;
    /// Unix ns of the journal's midnight UTC; 0 while there is no journal yet (a new cluster
    /// member).
    fn day_epoch_unix_ns(&self) -> u64;
    /// The last record's timestamp: the sequencer never stamps an earlier one.
    fn last_timestamp(&self) -> Timestamp;
    /// Would `append` take a record now?
    fn accepts_input(&self) -> bool {
        true
    }
    /// The cluster member behind this log, if it is one.
    fn cluster(&self) -> Option<&crate::cluster::node::ClusterNode> {
        None
    }
    fn cluster_mut(&mut self) -> Option<&mut crate::cluster::node::ClusterNode> {
        None
    }
}

/// A venue alone: the journal is the log, and outputs leave once the durability mode allows.
pub struct JournalLog {
    writer: JournalWriter,
    gate: DurabilityGate,
}

impl JournalLog {
    pub fn new(writer: JournalWriter) -> Self {
        let gate = writer.durability_gate();
        JournalLog { writer, gate }
    }

    pub fn writer(&self) -> &JournalWriter {
        &self.writer
    }
}

impl Sequencing for JournalLog {
    #[inline]
    fn append(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, SequencingError> {
        self.writer
            .append(timestamp, kind, payload)
            .map_err(|e| SequencingError::Failed(e.to_string()))
    }

    fn flush(&mut self) -> Result<(), String> {
        self.writer.flush().map(|_| ()).map_err(|e| e.to_string())
    }

    fn releasable(&self) -> Option<u64> {
        Some(self.gate.releasable_seq())
    }

    fn last_seq(&self) -> u64 {
        self.writer.next_seq() - 1
    }

    fn day_epoch_unix_ns(&self) -> u64 {
        self.writer.day_epoch_unix_ns()
    }

    fn last_timestamp(&self) -> Timestamp {
        self.writer.last_timestamp()
    }
}

pub struct Sequencer<C: Clock> {
    log: Box<dyn Sequencing>,
    clock: C,
    day_epoch_unix_ns: u64,
    last: Timestamp,
}

impl<C: Clock> Sequencer<C> {
    pub fn new(log: Box<dyn Sequencing>, clock: C) -> Self {
        let day_epoch_unix_ns = log.day_epoch_unix_ns();
        let last = log.last_timestamp();
        Sequencer {
            log,
            clock,
            day_epoch_unix_ns,
            last,
        }
    }

    /// Now as a journal timestamp, never earlier than the last one stamped (the system clock
    /// may step back; the journal's time may not).
    pub fn now(&mut self) -> Timestamp {
        if self.day_epoch_unix_ns == 0 {
            // A new cluster member learns its journal's day from the first leader's record.
            self.day_epoch_unix_ns = self.log.day_epoch_unix_ns();
        }
        let since_epoch = self.clock.unix_ns().saturating_sub(self.day_epoch_unix_ns);
        self.last = self.last.max(Timestamp(since_epoch));
        self.last
    }

    /// Stamp and journal one input; returns its sequence number and timestamp.
    pub fn append(
        &mut self,
        kind: u8,
        payload: &[u8],
    ) -> Result<(u64, Timestamp), SequencingError> {
        let timestamp = self.now();
        let seq = self.log.append(timestamp, kind, payload)?;
        Ok((seq, timestamp))
    }

    /// Journal an input stamped elsewhere (a standby copying its primary's records).
    pub fn append_at(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, SequencingError> {
        self.last = self.last.max(timestamp);
        self.log.append(timestamp, kind, payload)
    }

    /// A record journaled by another member was applied: later stamps are not earlier.
    pub fn note_applied(&mut self, timestamp: Timestamp) {
        self.last = self.last.max(timestamp);
    }

    /// Group commit: make everything appended so far durable per the journal's mode.
    pub fn flush(&mut self) -> Result<(), String> {
        self.log.flush()
    }

    pub fn next_seq(&self) -> u64 {
        self.log.last_seq() + 1
    }

    pub fn log(&self) -> &dyn Sequencing {
        self.log.as_ref()
    }

    pub fn log_mut(&mut self) -> &mut dyn Sequencing {
        self.log.as_mut()
    }
}
