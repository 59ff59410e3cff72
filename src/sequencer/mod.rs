//! The sequencer: the only clock reader. It stamps every input with a gapless journal
//! sequence number and a timestamp (ns since midnight UTC of the journal's day), appends it to
//! the journal and hands it on. Time-driven inputs (TIF expiry ticks) enter here too.

pub mod record;

use crate::journal::{JournalError, JournalWriter};
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

pub struct Sequencer<C: Clock> {
    journal: JournalWriter,
    clock: C,
    day_epoch_unix_ns: u64,
    last: Timestamp,
}

impl<C: Clock> Sequencer<C> {
    pub fn new(journal: JournalWriter, clock: C) -> Self {
        let day_epoch_unix_ns = journal.day_epoch_unix_ns();
        let last = journal.last_timestamp();
        Sequencer {
            journal,
            clock,
            day_epoch_unix_ns,
            last,
        }
    }

    /// Now as a journal timestamp, never earlier than the last one stamped (the system clock
    /// may step back; the journal's time may not).
    pub fn now(&mut self) -> Timestamp {
        let since_epoch = self.clock.unix_ns().saturating_sub(self.day_epoch_unix_ns);
        self.last = self.last.max(Timestamp(since_epoch));
        self.last
    }

    /// Stamp and journal one input; returns its sequence number and timestamp.
    pub fn append(&mut self, kind: u8, payload: &[u8]) -> Result<(u64, Timestamp), JournalError> {
        let timestamp = self.now();
        let seq = self.journal.append(timestamp, kind, payload)?;
        Ok((seq, timestamp))
    }

    /// Journal an input stamped elsewhere (a standby copying its primary's records).
    pub fn append_at(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, JournalError> {
        self.last = self.last.max(timestamp);
        self.journal.append(timestamp, kind, payload)
    }

    /// Group commit: make everything appended so far durable per the journal's mode.
    pub fn flush(&mut self) -> Result<u64, JournalError> {
        self.journal.flush()
    }

    pub fn next_seq(&self) -> u64 {
        self.journal.next_seq()
    }

    pub fn journal(&self) -> &JournalWriter {
        &self.journal
    }
}
