//! The read-only check of a whole journal ([`super::verify`]) run on a thread of its own
//! while a replay reads and applies the records it has checked (`bourse replay`). The check
//! is ~10% of a full replay's wall time when it runs first; beside the apply it costs the
//! other core instead.
//!
//! What a reader may take is what the check has passed: [`ScanProgress`] says how far that
//! is, and the reader blocks on it when it catches up. A full scan's verdict is about a
//! prefix: every record it passes is whole, checksummed and numbered in sequence, and its
//! report ends at the last of them or it refuses the journal; so a reader bounded by its
//! progress reads exactly the records a check run first would have let it read, and a
//! refusal is known, and reported instead of the replay's result, before anything is
//! believed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::JournalError;
use super::recovery::{RecoveryReport, verify_reporting};

/// Records checked between two reports of progress: the first batch a reader waits for
/// is checked in well under a millisecond, and the lock is taken ~730 times over a
/// 3M-record day.
pub(crate) const PROGRESS_EVERY_RECORDS: u64 = 4096;

/// How far a check running beside a reader has got. Made only by [`VerifyAlongside`] (and
/// this crate's tests): a progress nobody concludes would hold its reader for ever.
pub struct ScanProgress {
    state: Mutex<Progress>,
    changed: Condvar,
}

#[derive(Clone, Copy, Default)]
struct Progress {
    /// Records `1..=this` are checked.
    checked_through: u64,
    /// `None` while the check runs; `Some(true)` when it passed the journal (ending at
    /// `checked_through`), `Some(false)` when it refused it (or its thread died).
    passed: Option<bool>,
}

impl Progress {
    /// A reader at record `seq` has to wait: nothing past it is checked, and the check runs.
    fn holds(&self, seq: u64) -> bool {
        self.checked_through <= seq && self.passed.is_none()
    }
}

/// What a reader at some record may do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Read on through this record (later than the one asked about).
    Through(u64),
    /// The journal ends at or before the record asked about: stop there.
    End,
    /// The check refused the journal: stop; its error is the replay's.
    Refused,
}

impl ScanProgress {
    pub(crate) fn new() -> ScanProgress {
        ScanProgress {
            state: Mutex::new(Progress::default()),
            changed: Condvar::new(),
        }
    }

    /// Records through `seq` are checked (the check's side; `seq` never goes back).
    pub(crate) fn advance(&self, seq: u64) {
        let mut state = self.lock();
        debug_assert!(seq >= state.checked_through, "a scan goes forward");
        state.checked_through = seq;
        drop(state);
        self.changed.notify_all();
    }

    /// The check is over: it passed a journal ending at `last_seq`, or refused it (`None`).
    /// The first conclusion stands.
    pub(crate) fn conclude(&self, last_seq: Option<u64>) {
        let mut state = self.lock();
        if state.passed.is_some() {
            return;
        }
        match last_seq {
            Some(last) => {
                assert!(
                    last >= state.checked_through,
                    "a passed journal holds its checked records"
                );
                state.checked_through = last;
                state.passed = Some(true);
            }
            None => state.passed = Some(false),
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Wait (blocking, no spinning) until records past `seq` are checked or the check is
    /// over, and say which.
    pub fn wait_past(&self, seq: u64) -> Checked {
        let state = self.lock();
        let state = self
            .changed
            .wait_while(state, |s| s.holds(seq))
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match (state.checked_through > seq, state.passed) {
            (_, Some(false)) => Checked::Refused,
            (true, _) => Checked::Through(state.checked_through),
            (false, _) => Checked::End,
        }
    }

    /// Whether [`Self::wait_past`] of `seq` would wait now.
    pub fn would_wait(&self, seq: u64) -> bool {
        self.lock().holds(seq)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        // The state is two words written whole: a panic elsewhere cannot leave it half set.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Concludes the progress as refused if the check's thread unwinds before concluding, so
/// that no reader waits for ever.
struct RefuseOnUnwind<'a>(&'a ScanProgress);

impl Drop for RefuseOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.conclude(None);
    }
}

/// [`super::verify`] of a journal directory running on its own thread.
pub struct VerifyAlongside {
    progress: Arc<ScanProgress>,
    scan: Option<JoinHandle<Result<RecoveryReport, JournalError>>>,
}

impl VerifyAlongside {
    /// Start the full check of `dir` (every record's checksum; no snapshot vouches for any).
    pub fn start(dir: &Path) -> VerifyAlongside {
        let progress = Arc::new(ScanProgress::new());
        let dir: PathBuf = dir.to_path_buf();
        let reporting = Arc::clone(&progress);
        let scan = std::thread::Builder::new()
            .name("journal-check".into())
            .spawn(move || {
                let guard = RefuseOnUnwind(&reporting);
                let result = verify_reporting(&dir, &reporting);
                guard.0.conclude(result.as_ref().ok().map(|r| r.last_seq));
                result
            })
            .expect("a thread for checking the journal");
        VerifyAlongside {
            progress,
            scan: Some(scan),
        }
    }

    pub fn progress(&self) -> Arc<ScanProgress> {
        Arc::clone(&self.progress)
    }

    /// Wait for the check's verdict: exactly [`super::verify`]'s.
    pub fn finish(mut self) -> Result<RecoveryReport, JournalError> {
        let scan = self.scan.take().expect("finished once");
        match scan.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for VerifyAlongside {
    /// Not finished (the replay stopped early): the check is read-only and bounded by the
    /// journal's size; wait for it rather than leave a thread mapping the journal.
    fn drop(&mut self) {
        if let Some(scan) = self.scan.take() {
            let _ = scan.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_for_the_check_and_learns_where_the_journal_ends() {
        let progress = Arc::new(ScanProgress::new());
        let checker = Arc::clone(&progress);
        let (first_answered, answered) = std::sync::mpsc::channel();
        let scan = std::thread::spawn(move || {
            checker.advance(4096);
            // Concluded only once the reader had its first answer, so that it then waits.
            answered.recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            checker.conclude(Some(5000));
        });
        assert_eq!(progress.wait_past(0), Checked::Through(4096));
        first_answered.send(()).unwrap();
        // Blocks until the conclusion.
        assert_eq!(progress.wait_past(4096), Checked::Through(5000));
        assert_eq!(progress.wait_past(5000), Checked::End);
        scan.join().unwrap();
    }

    #[test]
    fn a_refusal_stops_a_reader_even_behind_the_checked_records() {
        let progress = ScanProgress::new();
        progress.advance(8192);
        progress.conclude(None);
        assert_eq!(progress.wait_past(10), Checked::Refused);
        // The first conclusion stands.
        progress.conclude(Some(9000));
        assert_eq!(progress.wait_past(10), Checked::Refused);
    }

    #[test]
    fn a_check_that_dies_refuses() {
        let progress = Arc::new(ScanProgress::new());
        let checker = Arc::clone(&progress);
        let died = std::thread::spawn(move || {
            let _guard = RefuseOnUnwind(&checker);
            panic!("the check's thread dies");
        })
        .join();
        assert!(died.is_err());
        assert_eq!(progress.wait_past(0), Checked::Refused);
    }
}
