//! Trading days on disk: which journal directory the daemon, `bourse replay` and the tools use.
//!
//! **Layout.** `journal.dir` holds one subdirectory per trading day, named by the UTC date of
//! the day's epoch (`data/journal/2026-12-01/`): a new day is a new journal, with its own
//! numbering from 1; earlier days stay for audit and replay. Only names that are exactly a
//! date (`YYYY-MM-DD`) are days; anything else beside them is left alone (a cluster member's
//! `2026-12-01.raft` state directory, for instance: raft's index is the day's journal sequence,
//! so its state is per day). What belongs to the venue rather than to a day lives beside
//! `journal.dir` itself (the admin secret, `data/journal.admin-secret`).
//!
//! **The date** of a day is the UTC date of its journal's day epoch (midnight UTC of the day
//! the journal was started; the sequencer's timestamps count from it). A day that is not
//! ended continues past midnight (its timestamps keep counting past 24 h) until the operator
//! ends it.
//!
//! **Single-journal layout.** A `journal.dir` that holds segment files itself (the layout
//! before trading days existed) is one journal for good: it is read and continued as before,
//! whatever the date, and never rolls over. To move such a venue to trading days, stop it and
//! move its segment files into a subdirectory named by the journal's date (or point
//! `journal.dir` at a new directory). The two layouts never mix: a directory with segments
//! and anything else in it is refused by the journal itself.
//!
//! **Which day `bourse run` opens** ([`for_run`]), today being the sequencer clock's UTC date:
//! 1. no day yet: today's, new;
//! 2. the latest day is today's: that one, continued (ended or not: after an ended day a
//!    restart on the same date stays ended, and sessions get `C` rejects);
//! 3. the latest day is earlier and was not ended: that one, continued (a day ends only by
//!    `end-of-day`; its open orders are never dropped by a restart);
//! 4. the latest day is earlier and ended: today's, new;
//! 5. the latest day is later than today and ended: refused (the clock went back).
//!
//! A day directory without a record (a start interrupted before its first record) counts only
//! if it is today's.

use crate::exchange::{Admin, Command};
use crate::journal::{JournalReader, NANOS_PER_DAY, segment};
use crate::sequencer::record::{self, KIND_ADMIN, KIND_START_OF_DAY};
use std::path::{Path, PathBuf};

/// Entries of a journal root looked at, at most (days plus whatever else lives there).
const ROOT_ENTRIES_MAX: usize = 1 << 20;
/// Records a day's end-of-day search reads, at most.
const SCAN_RECORDS_MAX: u64 = 1 << 40;

/// One trading day's journal directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Day {
    /// Midnight UTC of the day, unix ns.
    pub epoch_unix_ns: u64,
    pub dir: PathBuf,
}

/// What a day's journal holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DayState {
    /// No record (no segment, or a segment without records).
    Empty,
    /// Started and not ended.
    Open,
    /// `end-of-day` is journaled.
    Ended,
}

/// The journal `bourse run` uses, and a sentence for the log saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub dir: PathBuf,
    pub note: String,
}

/// `YYYY-MM-DD` of the UTC day containing `unix_ns`.
pub fn date_of(unix_ns: u64) -> String {
    let (y, m, d) = civil_from_days((unix_ns / NANOS_PER_DAY) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The day epoch (unix ns of midnight UTC) a `YYYY-MM-DD` name stands for, if it is one.
pub fn parse_date(name: &str) -> Option<u64> {
    let b = name.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let days = days_from_civil(i64::from(y), m, d);
    // Only a real date names itself back (no 2026-02-30, no month 13).
    let epoch = u64::try_from(days).ok()?.checked_mul(NANOS_PER_DAY)?;
    (date_of(epoch) == name).then_some(epoch)
}

/// Does `dir` hold journal segment files itself (one journal, not a root of days)?
pub fn holds_segments(dir: &Path) -> Result<bool, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
    };
    for entry in entries.take(ROOT_ENTRIES_MAX) {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| segment::parse_segment_name(n).is_some())
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The trading days under `root`, oldest first (none if `root` does not exist).
pub fn list(root: &Path) -> Result<Vec<Day>, String> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot list {}: {e}", root.display())),
    };
    let mut days = Vec::new();
    for entry in entries.take(ROOT_ENTRIES_MAX) {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", root.display()))?;
        let Some(epoch) = entry.file_name().to_str().and_then(parse_date) else {
            continue;
        };
        let path = entry.path();
        if !path.is_dir() {
            return Err(format!(
                "{} is named like a trading day but is not a directory",
                path.display()
            ));
        }
        days.push(Day {
            epoch_unix_ns: epoch,
            dir: path,
        });
    }
    days.sort_unstable_by_key(|d| d.epoch_unix_ns);
    Ok(days)
}

/// Empty, open or ended: reads the day's records for a journaled `end-of-day` (the first one
/// always applies: only an ended day refuses admin commands). A record that cannot be read
/// (a torn tail) ends the search: the writer deals with it when the day is opened.
///
/// With a state snapshot of the day, only the records after it are read: the snapshot's state
/// says whether the day had ended by its record (its file's front only, see
/// `snapshot::peek_newest`). A restart after midnight of a day not ended used to read the
/// whole day first (100M records: 52 s with the journal partly in the page cache).
pub fn state(dir: &Path) -> Result<DayState, String> {
    Ok(scan_state(dir)?.0)
}

/// [`state`], and the records it read.
fn scan_state(dir: &Path) -> Result<(DayState, u64), String> {
    if segment::list_segments(dir)
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return Ok((DayState::Empty, 0));
    }
    let mut reader = match JournalReader::open(dir, 1) {
        Ok(reader) => reader,
        Err(crate::journal::JournalError::EmptyJournal { .. }) => {
            return Ok((DayState::Empty, 0));
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut read = 0u64;
    if let Some((ended, after)) = state_at_snapshot(dir, &mut read) {
        if ended {
            return Ok((DayState::Ended, read));
        }
        reader = after;
    }
    let mut records = 0u64;
    while records < SCAN_RECORDS_MAX {
        let Ok(Some(r)) = reader.next() else {
            break;
        };
        records += 1;
        if r.kind == KIND_ADMIN
            && matches!(
                record::decode(r.kind, r.payload),
                Ok(Command::Admin(Admin::EndOfDay))
            )
        {
            return Ok((DayState::Ended, read + records));
        }
    }
    let started = read + records > 0;
    Ok((
        if started {
            DayState::Open
        } else {
            DayState::Empty
        },
        read + records,
    ))
}

/// The newest snapshot of the day whose record the journal holds: whether the day had ended
/// by that record, and a reader after it. Reads the day's first record (the header a
/// snapshot must match, as a restore derives it; counted in `read`). `None` without one.
fn state_at_snapshot(dir: &Path, read: &mut u64) -> Option<(bool, JournalReader)> {
    let mut reader = JournalReader::open(dir, 1).ok()?;
    let first = reader.next().ok()??;
    *read += 1;
    if first.kind != KIND_START_OF_DAY {
        return None;
    }
    let header = record::DayHeader::decode(first.payload).ok()?;
    let digest = crate::snapshot::header_digest(&header.encode());
    let (_, found) = crate::snapshot::peek_newest(
        dir,
        &digest,
        crate::exchange::state::FRONT_BYTES,
        |head, front| {
            // A snapshot of records cut and written again since proves nothing either.
            crate::snapshot::still_follows(dir, head).ok()?;
            let ended = crate::exchange::state::ended_in(front)?;
            Some((ended, open_after(dir, head.last_seq)?))
        },
    )?;
    Some(found)
}

/// A reader of `dir` after record `seq`, if the journal holds `seq` (a snapshot of a record
/// the journal no longer holds proves nothing: the caller reads the day from the start).
/// The records before `seq` are only stepped over, their checksums not read.
fn open_after(dir: &Path, seq: u64) -> Option<JournalReader> {
    let mut reader = JournalReader::open(dir, seq).ok()?;
    reader.trust(1..=seq);
    let held = reader.next().ok()?.is_some_and(|r| r.seq == seq);
    held.then_some(reader)
}

/// The journal directory `bourse run` opens under `root` when the sequencer's clock says
/// `today_epoch_unix_ns` (the rules in the module docs).
pub fn for_run(root: &Path, today_epoch_unix_ns: u64) -> Result<Chosen, String> {
    assert!(today_epoch_unix_ns.is_multiple_of(NANOS_PER_DAY));
    if holds_segments(root)? {
        return Ok(Chosen {
            dir: root.to_path_buf(),
            note: "single-journal layout (segments directly in journal.dir): continuing it; it never rolls over to a new trading day".into(),
        });
    }
    let today = date_of(today_epoch_unix_ns);
    let new_today = |why: String| Chosen {
        dir: root.join(&today),
        note: why,
    };
    let mut latest = None;
    for day in list(root)?.into_iter().rev() {
        if day.epoch_unix_ns == today_epoch_unix_ns {
            latest = Some((day, None));
            break;
        }
        match state(&day.dir)? {
            DayState::Empty => continue,
            s => {
                latest = Some((day, Some(s)));
                break;
            }
        }
    }
    let Some((day, state)) = latest else {
        return Ok(new_today(format!("trading day {today}: new")));
    };
    let date = date_of(day.epoch_unix_ns);
    Ok(match state {
        None => Chosen {
            dir: day.dir,
            note: format!("trading day {today}: continuing it"),
        },
        Some(DayState::Open) => Chosen {
            dir: day.dir,
            note: format!(
                "trading day {date} was not ended: continuing it (today is {today}; `bourse admin end-of-day` ends it)"
            ),
        },
        Some(DayState::Ended) if day.epoch_unix_ns < today_epoch_unix_ns => {
            new_today(format!("trading day {today}: new (day {date} is ended)"))
        }
        Some(_) => {
            return Err(format!(
                "the latest trading day {date} in {} is ended and later than today, {today} (UTC): is the clock right?",
                root.display()
            ));
        }
    })
}

/// The journal a follower (standby) keeps for the primary's day `epoch_unix_ns`.
pub fn for_epoch(root: &Path, epoch_unix_ns: u64) -> Result<PathBuf, String> {
    if holds_segments(root)? {
        return Ok(root.to_path_buf());
    }
    Ok(root.join(date_of(epoch_unix_ns)))
}

/// The journal to read for `path`: `path` itself when it holds segments (a day's directory
/// or a single-journal layout), else its latest trading day (one with a segment file); with a
/// sentence saying which day when it chose one.
pub fn for_reading(path: &Path) -> Result<(PathBuf, Option<String>), String> {
    if holds_segments(path)? {
        return Ok((path.to_path_buf(), None));
    }
    let mut days = Vec::new();
    for day in list(path)? {
        if holds_segments(&day.dir)? {
            days.push(day);
        }
    }
    let Some(latest) = days.last() else {
        return Ok((path.to_path_buf(), None));
    };
    let note = format!(
        "{} holds {} trading day{} ({}..{}); reading the latest, {}",
        path.display(),
        days.len(),
        if days.len() == 1 { "" } else { "s" },
        date_of(days[0].epoch_unix_ns),
        date_of(latest.epoch_unix_ns),
        latest.dir.display()
    );
    Ok((latest.dir.clone(), Some(note)))
}

/// (year, month, day) of a day count since 1970-01-01 (H. Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a (year, month, day) (H. Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let (m, d) = (i64::from(m), i64::from(d));
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
