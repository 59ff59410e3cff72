//! The journal read back as inputs, read and decoded on a thread of their own (replay and
//! recovery) and handed over in batches, while the caller applies them: on two cores the
//! reading (the records' walk and decoding, ~18% of a replay's CPU samples) overlaps the
//! apply. The apply side keeps [`LOOKAHEAD_INPUTS`] inputs in hand and warms the cache for
//! each as it takes it ([`crate::exchange::Exchange::prefetch`]) and again halfway to its
//! apply ([`crate::exchange::Exchange::prefetch_deeper`]), so the token lookups of a day's
//! tables, far larger than the cache, find their lines loaded. The inputs and their order are
//! those of reading one record at a time; a record that cannot be read or decoded is
//! reported after every input before it (both users stop at the error; the journal was
//! verified first, or its check runs beside and bounds the reading: [`Through::Checking`]).

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender, bounded};

use super::record::{self, KIND_NOOP, RecordError};
use crate::exchange::{Exchange, Input};
use crate::journal::alongside::{Checked, ScanProgress};
use crate::journal::{JournalError, JournalReader};

/// Inputs decoded ahead of the one being applied. Eight was the fastest of 4, 8 and 16 on a
/// 3M-input replay (the miss it hides is ~100 ns; an input takes a few hundred).
pub const LOOKAHEAD_INPUTS: usize = 8;

/// Inputs a batch from the reading thread holds, at most. The reading thread is faster than
/// the apply, so it waits for each emptied batch and every hand-over wakes it: at 256 inputs
/// a batch a 3M-input replay took twice the system time and ~10% more wall time than at
/// 8,192 (BENCHMARKS.md §7, stop 35). Six batches of 8,192 inputs (in flight, in hand, being
/// filled) are a few MB, read in order.
const BATCH_INPUTS: usize = 8192;
/// Batches filled and not yet taken, at most: the reading thread waits (parks) beyond them.
const BATCHES_IN_FLIGHT: usize = 4;

/// Whom the inputs are decoded ahead for.
pub trait Prefetch {
    /// An input was taken, [`LOOKAHEAD_INPUTS`] before its apply.
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

/// Where reading stops.
pub enum Through {
    /// At this record (or the journal's end before it): a check ran first and ends there.
    Seq(u64),
    /// Where a check running beside the reading ends: records are read only once it has
    /// passed them (and their checksums are not computed again); a refusal ends the
    /// reading (the caller reports the check's error).
    Checking(Arc<ScanProgress>),
}

impl From<u64> for Through {
    fn from(seq: u64) -> Through {
        Through::Seq(seq)
    }
}

impl Through {
    /// Whether extending past `read_seq` would wait for the check.
    fn would_wait(&self, read_seq: u64) -> bool {
        match self {
            Through::Seq(_) => false,
            Through::Checking(progress) => progress.would_wait(read_seq),
        }
    }

    /// The reading is at `read_seq`, the last record it may read so far: how far it may
    /// read on, or `None` to stop.
    fn extend(&self, read_seq: u64, reader: &mut JournalReader) -> Option<u64> {
        match self {
            Through::Seq(_) => None,
            Through::Checking(progress) => match progress.wait_past(read_seq) {
                Checked::Through(seq) => {
                    reader.trust_through(seq);
                    Some(seq)
                }
                Checked::End | Checked::Refused => None,
            },
        }
    }
}

/// Inputs read and decoded by the reading thread, in journal order.
struct Batch {
    inputs: Vec<Input>,
    /// Sequence number of the last record read for this batch.
    read_seq: u64,
    /// Why reading stopped after these inputs: `Some(Ok)` at the end (`last` or the
    /// journal's), `Some(Err)` at a record it could not read or decode, `None`: more follow.
    stop: Option<Result<(), AheadError>>,
}

/// The journal's inputs in order from a reader's position (leader changes, which are no
/// inputs, skipped) through a last record, read on a thread of their own.
pub struct InputsAhead {
    batches: Receiver<Batch>,
    /// Emptied batches back to the reading thread (nothing is allocated per batch).
    empties: Sender<Vec<Input>>,
    reading: Option<std::thread::JoinHandle<()>>,
    /// The batch being taken from, and where.
    current: Vec<Input>,
    taken: usize,
    /// What ends `current` once it is taken (see [`Batch::stop`]).
    current_stop: Option<Result<(), AheadError>>,
    ahead: VecDeque<Input>,
    /// The reading thread's position as of the last batch received.
    read_seq: u64,
    /// The end or the error was reached in `ahead`'s source: nothing more to receive.
    ended: bool,
    error: Option<AheadError>,
}

impl InputsAhead {
    /// Inputs from the reader's next record through `last` (a record, or where a check
    /// running beside ends) or the journal's end; `read_seq` is the record before the
    /// reader's next. Starts the reading thread.
    pub fn new(reader: JournalReader, read_seq: u64, last: impl Into<Through>) -> InputsAhead {
        InputsAhead::with_batch(reader, read_seq, last, BATCH_INPUTS)
    }

    /// [`InputsAhead::new`] with batches of at most `batch_inputs` inputs (tests use small
    /// ones to cross many batches).
    pub fn with_batch(
        reader: JournalReader,
        read_seq: u64,
        last: impl Into<Through>,
        batch_inputs: usize,
    ) -> InputsAhead {
        assert!(batch_inputs > 0);
        let last = last.into();
        let (batch_tx, batches) = bounded(BATCHES_IN_FLIGHT);
        // In flight, in the caller's hand, and one being filled.
        let (empties, empty_rx) = crate::memory::buffer_pool(BATCHES_IN_FLIGHT + 2, batch_inputs);
        let reading = std::thread::Builder::new()
            .name("journal-read".into())
            .spawn(move || {
                let batches = Batches {
                    filled: &batch_tx,
                    empties: &empty_rx,
                    inputs_max: batch_inputs,
                };
                read_batches(reader, read_seq, &last, &batches)
            })
            .expect("a thread for reading the journal");
        InputsAhead {
            batches,
            empties,
            reading: Some(reading),
            current: Vec::new(),
            taken: 0,
            current_stop: None,
            ahead: VecDeque::with_capacity(LOOKAHEAD_INPUTS),
            read_seq,
            ended: false,
            error: None,
        }
    }

    /// The next input; None after the last one. An error once the inputs before it are out.
    pub fn next(&mut self, warm: &impl Prefetch) -> Result<Option<Input>, AheadError> {
        // Bounded: at most LOOKAHEAD_INPUTS inputs, and one batch received per batch drained.
        while self.ahead.len() < LOOKAHEAD_INPUTS && !self.ended {
            let Some(input) = self.take_one() else {
                continue;
            };
            warm.prefetch(&input);
            self.ahead.push_back(input);
            let half = self.ahead.len().saturating_sub(LOOKAHEAD_INPUTS / 2 + 1);
            warm.prefetch_deeper(&self.ahead[half]);
        }
        match self.ahead.pop_front() {
            Some(input) => Ok(Some(input)),
            None => self.error.take().map_or(Ok(None), Err),
        }
    }

    /// The current batch's next input; at its end, what stopped reading or the next batch
    /// (`None` then: call again). Sets `ended` when nothing more will come.
    fn take_one(&mut self) -> Option<Input> {
        if let Some(input) = self.current.get(self.taken) {
            self.taken += 1;
            return Some(*input);
        }
        if let Some(stop) = self.current_stop.take() {
            self.ended = true;
            self.error = stop.err();
            return None;
        }
        let emptied = std::mem::take(&mut self.current);
        if emptied.capacity() > 0 {
            // The reading thread may have stopped already: then nobody wants it back.
            let _ = self.empties.send(emptied);
        }
        match self.batches.recv() {
            Ok(batch) => {
                self.current = batch.inputs;
                self.taken = 0;
                self.read_seq = batch.read_seq;
                self.current_stop = batch.stop;
            }
            // The reading thread ended without saying why: it panicked (the join reports it).
            Err(_) => {
                self.ended = true;
                self.join_reading();
            }
        }
        None
    }

    fn join_reading(&mut self) {
        if let Some(reading) = self.reading.take()
            && let Err(panic) = reading.join()
        {
            std::panic::resume_unwind(panic);
        }
    }

    /// Sequence number of the last record read (inputs and leader changes) as of the last
    /// batch received: up to a batch and [`LOOKAHEAD_INPUTS`] inputs (and the leader changes
    /// among them) past the last input handed out; once `next` has returned `None`, the last
    /// record through `last` (or the journal's end).
    pub fn read_seq(&self) -> u64 {
        self.read_seq
    }
}

impl Drop for InputsAhead {
    /// Stops the reading thread (its next send fails) and waits for it.
    fn drop(&mut self) {
        // Close both channels' ends held here, so the thread's next send or receive fails.
        drop(std::mem::replace(&mut self.batches, bounded(0).1));
        drop(std::mem::replace(&mut self.empties, bounded(0).0));
        if let Some(reading) = self.reading.take() {
            // A panic there was reported already if the inputs were read to their end.
            let _ = reading.join();
        }
    }
}

/// The reading thread's ends of the hand-over.
struct Batches<'a> {
    filled: &'a Sender<Batch>,
    empties: &'a Receiver<Vec<Input>>,
    inputs_max: usize,
}

/// The reading thread: records from `reader`'s next through `last` or the journal's end,
/// decoded into batches of at most `inputs_max` inputs, leader changes skipped. Stops at
/// the end, at the first error, or when the other side has gone.
fn read_batches(mut reader: JournalReader, mut read_seq: u64, last: &Through, batches: &Batches) {
    // As far as reading may go now (`last` extends it while a check runs beside).
    let mut last_seq = match last {
        Through::Seq(seq) => *seq,
        Through::Checking(_) => read_seq,
    };
    // Bounded: one batch per `inputs_max` records read (leader changes aside), and the
    // records to the end.
    loop {
        let Ok(mut inputs) = batches.empties.recv() else {
            return;
        };
        inputs.clear();
        let mut stop = None;
        while inputs.len() < batches.inputs_max {
            if read_seq >= last_seq {
                if !inputs.is_empty() && last.would_wait(read_seq) {
                    break; // what is read goes over before the wait for the check
                }
                match last.extend(read_seq, &mut reader) {
                    Some(seq) => last_seq = seq,
                    None => {
                        stop = Some(Ok(()));
                        break;
                    }
                }
            }
            match read_one(&mut reader) {
                Ok(Some((seq, input))) => {
                    read_seq = seq;
                    inputs.extend(input);
                }
                Ok(None) => {
                    stop = Some(Ok(()));
                    break;
                }
                Err(error) => {
                    stop = Some(Err(error));
                    break;
                }
            }
        }
        let last = stop.is_some();
        let batch = Batch {
            inputs,
            read_seq,
            stop,
        };
        if batches.filled.send(batch).is_err() || last {
            return;
        }
    }
}

/// The reader's next record: its sequence number and its input (None for a leader change);
/// None at the journal's end.
fn read_one(reader: &mut JournalReader) -> Result<Option<(u64, Option<Input>)>, AheadError> {
    let Some(r) = reader.next()? else {
        return Ok(None);
    };
    if r.kind == KIND_NOOP {
        return Ok(Some((r.seq, None)));
    }
    let command = record::decode(r.kind, r.payload)
        .map_err(|error| AheadError::Record { seq: r.seq, error })?;
    let input = Input {
        seq: r.seq,
        timestamp: r.timestamp,
        command,
    };
    Ok(Some((r.seq, Some(input))))
}
