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
        u64::try_from(since.as_nanos()).expect("clock before 2554")
    }
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
