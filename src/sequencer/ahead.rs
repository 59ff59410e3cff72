//! The journal read back as inputs, decoded a few ahead of their apply (replay and
//! recovery): the exchange warms the cache for each input as it is decoded
//! ([`crate::exchange::Exchange::prefetch`]) and again halfway to its apply
//! ([`crate::exchange::Exchange::prefetch_deeper`]), so the token lookups of a day's tables,
//! far larger than the cache, find their lines loaded. Hints only: the inputs and their
//! order are those of reading one record at a time. One difference: a record that cannot be
//! read or decoded is reported when it is decoded, with up to [`LOOKAHEAD_INPUTS`] inputs
//! before it not applied yet (both users stop at the error; the journal was verified first).

use std::collections::VecDeque;

use super::record::{self, KIND_NOOP, RecordError};
use crate::exchange::{Exchange, Input};
use crate::journal::{JournalError, JournalReader};

/// Inputs decoded ahead of the one being applied. Eight was the fastest of 4, 8 and 16 on a
/// 3M-input replay (the miss it hides is ~100 ns; an input takes a few hundred).
pub const LOOKAHEAD_INPUTS: usize = 8;

/// Whom the inputs are decoded ahead for.
pub trait Prefetch {
    /// An input was decoded, [`LOOKAHEAD_INPUTS`] before its apply.
    fn prefetch(&self, input: &Input);
    /// The same input, halfway to its apply.
    fn prefetch_deeper(&self, input: &Input);
}

impl Prefetch for Exchange {
    #[inline]
    fn prefetch(&self, input: &Input) {
        Exchange::prefetch(self, input);
    }
    #[inline]
    fn prefetch_deeper(&self, input: &Input) {
        Exchange::prefetch_deeper(self, input);
    }
}

#[derive(Debug)]
pub enum AheadError {
    Journal(JournalError),
    Record { seq: u64, error: RecordError },
}

impl From<JournalError> for AheadError {
    fn from(e: JournalError) -> Self {
        AheadError::Journal(e)
    }
}

/// The journal's inputs in order from a reader's position (leader changes, which are no
/// inputs, skipped), decoded [`LOOKAHEAD_INPUTS`] ahead.
pub struct InputsAhead {
    reader: JournalReader,
    /// Sequence number of the last record read (0: none yet).
    read_seq: u64,
    ended: bool,
    ahead: VecDeque<Input>,
}

impl InputsAhead {
    /// Inputs from the reader's next record on; `read_seq` is the record before it.
    pub fn new(reader: JournalReader, read_seq: u64) -> InputsAhead {
        InputsAhead {
            reader,
            read_seq,
            ended: false,
            ahead: VecDeque::with_capacity(LOOKAHEAD_INPUTS),
        }
    }

    /// The next input through record `last_seq`; None after it or at the journal's end.
    pub fn next(
        &mut self,
        last_seq: u64,
        warm: &impl Prefetch,
    ) -> Result<Option<crate::exchange::Input>, AheadError> {
        // Bounded: at most LOOKAHEAD_INPUTS inputs, and the records to `last_seq`.
        while self.ahead.len() < LOOKAHEAD_INPUTS && !self.ended && self.read_seq < last_seq {
            let Some(r) = self.reader.next()? else {
                self.ended = true;
                break;
            };
            self.read_seq = r.seq;
            if r.kind == KIND_NOOP {
                continue;
            }
            let command = record::decode(r.kind, r.payload)
                .map_err(|error| AheadError::Record { seq: r.seq, error })?;
            let input = Input {
                seq: r.seq,
                timestamp: r.timestamp,
                command,
            };
            warm.prefetch(&input);
            self.ahead.push_back(input);
            let half = self.ahead.len().saturating_sub(LOOKAHEAD_INPUTS / 2 + 1);
            warm.prefetch_deeper(&self.ahead[half]);
        }
        Ok(self.ahead.pop_front())
    }

    /// Sequence number of the last record read (inputs and leader changes), which may be up
    /// to [`LOOKAHEAD_INPUTS`] inputs past the last one handed out.
    pub fn read_seq(&self) -> u64 {
        self.read_seq
    }
}
