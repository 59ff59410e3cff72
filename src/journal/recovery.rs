//! Verification and recovery: every header and every record is checked once, in a tight loop
//! without per-record allocation.
//!
//! Rules:
//! - Segment indexes run 1, 2, 3, … (a hole is a gap); headers carry the magic, the format
//!   version, their own index, the file length and the same day epoch; each segment's first
//!   sequence number continues the previous segment, and records inside continue it by one.
//! - Every segment but the last one with a header ends with a seal word right after its last
//!   record; anything else there is corruption, with one exception: a seal a machine crash
//!   lost (nothing after the last record, the next header continuing the numbering) where
//!   the writer could have rotated, i.e. with less room left than a largest record and a
//!   seal ([`super::record::rotation_room_bytes`]). Recovery writes it back; readers cross it.
//! - In the last segment, the first bad slot (a partial record, a checksum failure, junk
//!   after the end of data) is a **torn tail** if no valid record follows it anywhere in the
//!   segment and its sequence number is above the manifest's durable mark ([`manifest`]): it
//!   was never acknowledged, and is cut (zeroed) back to the last whole record. At or below
//!   the mark it is damage to an acknowledged record, as is a journal that ends before the
//!   mark: refused ([`JournalError::DamagedTail`]) unless the operator asks for the cut
//!   ([`truncate_corrupt_tail`]). If a valid record follows, the journal is corrupt in the
//!   middle and is always refused.
//! - The manifest's *sealed through* segment must have a successor file, and so must a sealed
//!   last segment (the writer creates the next file before it seals): a missing one is
//!   [`JournalError::MissingSegment`].
//! - A last file whose header is blank (all zero) and whose body is zero is the writer's
//!   preallocated spare: ignored by `verify`, removed by the writer on open.
//!
//! **Records vouched for by a state snapshot** ([`verify_vouched`],
//! [`super::JournalWriter::open_or_create_vouched`]): a restart from a snapshot after record
//! `s` needs records `1..s` only to be where the snapshot says they end, not read. Such a scan
//! checks every header as above; a segment that ends before record `s` is checked from its
//! end only (its seal, and its last record found backwards from the seal: checksum and
//! sequence number, which the next header's first sequence number must continue); in the
//! segment holding record `s` the records before it are walked by their lengths and sequence
//! numbers without checksums; record `s` and everything after it are checked exactly as
//! above (torn tail included). Anything unexpected before record `s` (a missing seal, a walk
//! that ends early, a journal that ends before `s`) makes it a full scan instead, so the
//! report and every refusal are the full scan's whenever the shortcut cannot vouch for them.
//! What it does not see: a checksum failure inside records `1..s` (their effect is in the
//! snapshot's state; a reader that reads them later, e.g. a full replay, checks each one).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::JournalError;
use super::alongside::{PROGRESS_EVERY_RECORDS, ScanProgress};
use super::manifest::{self, ManifestState};
use super::reader::Mapped;
use super::record::{
    RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, SEAL_BYTES, SEAL_WORD, Slot, read_slot,
    read_slot_checked, record_span_bytes, rotation_room_bytes, write_seal,
};
use super::segment::{
    self, HEADER_BYTES, HeaderState, MappedSegment, SegmentHeader, corrupt, list_segments,
    segment_path,
};
use super::shared::SharedBytes;
use crate::types::Timestamp;

/// Bytes looked at per step of a scan for non-zero bytes past the end of data.
const ZERO_SCAN_CHUNK_BYTES: usize = 4096;

/// What recovery (or `verify`) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Unix ns of midnight UTC of the journal's day.
    pub day_epoch_unix_ns: u64,
    /// Segment files with a header (a blank spare is not counted).
    pub segments: u32,
    pub records: u64,
    /// Sequence number of the last record; 0 when the journal holds none.
    pub last_seq: u64,
    /// Timestamp of the last record; 0 when the journal holds none.
    pub last_timestamp: Timestamp,
    /// Bytes of headers, records and padding up to the end of data, over all segments.
    pub data_bytes: u64,
    /// The torn tail cut by the writer (or, from `verify`, the one a writer would cut).
    pub torn_tail: Option<TornTail>,
    /// A blank preallocated segment follows the data.
    pub spare_segment: bool,
    /// Full segments whose seal word was missing (lost in a machine crash while the next
    /// segment's header survived); the writer writes them back.
    pub missing_seals: u32,
    /// The manifest's marks as found (`None`: a journal from before manifests, checked by its
    /// seals only).
    pub manifest: Option<ManifestState>,
    /// Highest sequence number the journal had made durable, so possibly acknowledged (see
    /// [`ManifestState::durable_seq`]); 0 without a manifest. Damage at or below it is
    /// corruption, never a torn tail.
    pub durable_seq: u64,
    /// Damage to durable data that recovery accepted and cut only because the operator asked
    /// for it ([`truncate_corrupt_tail`]): the one-line refusal each would have been.
    pub accepted_damage: Vec<String>,
    /// Records `1..=this` were vouched for by a snapshot and their checksums not read (see
    /// the module docs); 0 when the scan checked every record.
    pub vouched_through: u64,
}

/// A partial or checksum-failing record at the very end of the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub path: PathBuf,
    pub offset_bytes: u64,
    pub cut_bytes: u64,
    pub reason: &'static str,
}

/// Where the data of the last segment with a header ends.
#[derive(Debug)]
pub(crate) struct TailPosition {
    pub segment_index: u64,
    pub path: PathBuf,
    pub end_offset_bytes: u64,
    pub sealed: bool,
}

#[derive(Debug)]
pub(crate) struct JournalScan {
    pub report: RecoveryReport,
    /// `None` when no segment has a header (empty directory or only a blank spare).
    pub tail: Option<TailPosition>,
    pub spare_path: Option<PathBuf>,
    /// Full segments whose seal is missing: (index, path, offset where it belongs).
    pub missing_seals: Vec<(u64, PathBuf, u64)>,
}

/// Read-only check of a journal directory, for the inspector tool and tests. Nothing is
/// changed: a torn tail is reported, not cut.
pub fn verify(dir: &Path) -> Result<RecoveryReport, JournalError> {
    verify_vouched(dir, 0)
}

/// [`verify`] of a journal whose records before `vouched_seq` are vouched for by a state
/// snapshot after record `vouched_seq` (0: none): only their boundaries are checked (see the
/// module docs). Falls back to the full check, whose report and refusals it then gives,
/// whenever it cannot vouch for them; `vouched_through` says which it was.
pub fn verify_vouched(dir: &Path, vouched_seq: u64) -> Result<RecoveryReport, JournalError> {
    verified(dir, scan_journal(dir, false, false, vouched_seq)?)
}

/// A scan's report, or the refusal of a journal without a single segment header.
fn verified(dir: &Path, scan: JournalScan) -> Result<RecoveryReport, JournalError> {
    if scan.tail.is_none() {
        return Err(JournalError::EmptyJournal {
            path: dir.to_path_buf(),
        });
    }
    Ok(scan.report)
}

/// [`verify`], telling `progress` how far it has checked as it goes (see
/// [`super::alongside`]).
pub(crate) fn verify_reporting(
    dir: &Path,
    progress: &ScanProgress,
) -> Result<RecoveryReport, JournalError> {
    let scan = scan_segments(dir, false, false, 0, Some(progress))?;
    verified(dir, scan.expect("a full scan concludes or refuses"))
}

/// Scan every segment. `sync_files` fsyncs each segment as it goes (the writer does, so the
/// recovered records are on disk before it reports them durable). `accept_damage` turns the
/// refusals of a damaged tail (durable records corrupt or missing, a missing last segment)
/// into cuts, listed in the report's `accepted_damage`. `vouched_seq` > 0: a snapshot after
/// that record vouches for the records before it (see the module docs); the scan is then the
/// full one's whenever the shortcut does not conclude.
pub(crate) fn scan_journal(
    dir: &Path,
    sync_files: bool,
    accept_damage: bool,
    vouched_seq: u64,
) -> Result<JournalScan, JournalError> {
    if vouched_seq > 1 && !accept_damage {
        match scan_segments(dir, sync_files, false, vouched_seq, None) {
            Ok(Some(scan)) => return Ok(scan),
            Ok(None) => tracing::warn!(
                vouched_seq,
                "journal: the records before the snapshot's do not end where it says: checking every record"
            ),
            // The full scan says it again, exactly (or succeeds: a refusal it would not make).
            Err(error) => {
                tracing::debug!("journal: vouched scan refused ({error}): checking every record")
            }
        }
    }
    let scan = scan_segments(dir, sync_files, accept_damage, 0, None)?;
    Ok(scan.expect("a full scan concludes or refuses"))
}

/// [`scan_journal`] with `vouched_seq` (0: none). `Ok(None)`: the records before
/// `vouched_seq` are not as a snapshot after it needs (only with `vouched_seq` > 0). With
/// `progress`, how far the records are checked is reported every [`PROGRESS_EVERY_RECORDS`].
fn scan_segments(
    dir: &Path,
    sync_files: bool,
    accept_damage: bool,
    vouched_seq: u64,
    progress: Option<&ScanProgress>,
) -> Result<Option<JournalScan>, JournalError> {
    // The marks first: a live writer raises them only after the records exist, so marks read
    // before the segments never claim more than the scan will find.
    let manifest = manifest::read(dir)?;
    let mut segments = list_segments(dir)?;
    let file_count = segments.len() as u64;
    // A writer killed while its helper was creating the next segment leaves that file short
    // and all zero: an interrupted preallocation, i.e. a spare, not a foreign file.
    let mut spare_path = None;
    if let Some((_, last)) = segments.last()
        && is_interrupted_preallocation(last)?
    {
        tracing::warn!(path = %last.display(), "journal: an interrupted segment preallocation is treated as a spare");
        spare_path = segments.pop().map(|(_, path)| path);
    }
    // Headers first, so a foreign or mismatched file is named before any record problem.
    let segment_count = segments.len();
    let mut first_seqs = Vec::with_capacity(segment_count);
    for (position, (_, path)) in segments.iter().enumerate() {
        let header = check_header_bytes(path, position + 1 == segment_count)?;
        first_seqs.push(header.map(|h| h.first_seq));
    }
    let mut report = RecoveryReport {
        spare_segment: spare_path.is_some(),
        manifest,
        durable_seq: manifest.map_or(0, |m| m.durable_seq(manifest::current_boot_id())),
        ..RecoveryReport::default()
    };
    if let Some(m) = &manifest
        && m.sealed_through_segment >= 1
        && file_count < m.sealed_through_segment + 1
    {
        let error = JournalError::MissingSegment {
            path: segment_path(dir, file_count + 1),
            reason: "the manifest records the segment before it as sealed",
        };
        accept_or_refuse(error, accept_damage, &mut report)?;
    }
    let mut tail: Option<TailPosition> = None;
    let mut missing_seals = Vec::new();
    for (position, (segment_index, path)) in segments.into_iter().enumerate() {
        let is_last_file = position + 1 == segment_count;
        let (file, mapped) = map_read_only(&path)?;
        let map = mapped.bytes;
        if sync_files {
            file.sync_data()
                .map_err(|e| JournalError::io(&path, "fsync segment", e))?;
        }
        let Some(header) = read_header(&path, map, is_last_file)? else {
            spare_path = Some(path);
            report.spare_segment = true;
            continue;
        };
        check_header(&path, &header, segment_index, map.len() as u64, &report)?;
        if segment_index == 1 {
            report.day_epoch_unix_ns = header.day_epoch_unix_ns;
        }
        let is_last = is_last_file
            || (position + 2 == segment_count && next_is_blank(dir, segment_index + 1)?);
        // The next segment starts at or before the vouched record: this one is checked from
        // its end only.
        let next_first_seq = first_seqs.get(position + 1).copied().flatten();
        if vouched_seq > 0
            && !is_last
            && let Some(next_first_seq) = next_first_seq.filter(|&n| n <= vouched_seq)
        {
            let Some(end) = sealed_end(map, &header, next_first_seq) else {
                return Ok(None);
            };
            report.records += next_first_seq - header.first_seq;
            report.last_seq = next_first_seq - 1;
            if next_first_seq > header.first_seq {
                report.last_timestamp = end.last_timestamp;
            }
            report.segments += 1;
            report.data_bytes += end.end_offset_bytes;
            tail = Some(TailPosition {
                segment_index,
                path,
                end_offset_bytes: end.end_offset_bytes,
                sealed: true,
            });
            continue;
        }
        let walk = Walk {
            expected_seq: report.last_seq + 1,
            is_last,
            vouched_seq,
            progress,
            next_first_seq,
        };
        let end = scan_segment(&path, map, &header, walk, &mut report)?;
        report.segments += 1;
        report.data_bytes += end.end_offset_bytes;
        if !end.sealed && !is_last {
            report.missing_seals += 1;
            missing_seals.push((segment_index, path.clone(), end.end_offset_bytes));
        }
        tail = Some(TailPosition {
            segment_index,
            path,
            end_offset_bytes: end.end_offset_bytes,
            sealed: end.sealed,
        });
    }
    if vouched_seq > 0 {
        // The vouched record itself was checked; the journal may not end before it.
        if report.last_seq < vouched_seq {
            return Ok(None);
        }
        report.vouched_through = vouched_seq - 1;
    }
    check_end(dir, &tail, spare_path.is_some(), accept_damage, &mut report)?;
    Ok(Some(JournalScan {
        report,
        tail,
        spare_path,
        missing_seals,
    }))
}

/// Where a full segment's data ends, found from its end: the last non-zero word must be its
/// seal, right after a whole record (checksum checked) numbered `next_first_seq - 1`, the
/// record before the next segment's first. `None` if not so (a missing seal, damage): the
/// caller then checks every record.
fn sealed_end(map: SharedBytes, header: &SegmentHeader, next_first_seq: u64) -> Option<SegmentEnd> {
    let last_seq = next_first_seq.checked_sub(1)?;
    if next_first_seq == header.first_seq {
        return sealed_empty(map);
    }
    if last_seq < header.first_seq {
        return None; // the next segment starts before this one
    }
    let last_nonzero = last_nonzero(map, HEADER_BYTES)?;
    let seal_offset_bytes = last_nonzero / RECORD_ALIGN_BYTES * RECORD_ALIGN_BYTES;
    if last_nonzero >= seal_offset_bytes + 4
        || seal_offset_bytes + SEAL_BYTES > map.len() as u64
        || map.load_u32_acquire(seal_offset_bytes as usize) != SEAL_WORD
    {
        return None;
    }
    // The record ending at the seal starts at most the largest record's span before it.
    let span_max_bytes = record_span_bytes(header.max_payload_bytes as u64);
    let mut span_bytes = RECORD_HEADER_BYTES;
    while span_bytes <= span_max_bytes && span_bytes <= seal_offset_bytes - HEADER_BYTES {
        let start_bytes = seal_offset_bytes - span_bytes;
        if let Slot::Valid {
            seq,
            timestamp,
            span_bytes: found_span_bytes,
            ..
        } = read_slot(map, start_bytes, header.max_payload_bytes)
            && found_span_bytes == span_bytes
            && seq == last_seq
        {
            return Some(SegmentEnd {
                end_offset_bytes: seal_offset_bytes + SEAL_BYTES,
                sealed: true,
                last_timestamp: timestamp,
            });
        }
        span_bytes += RECORD_ALIGN_BYTES;
    }
    None
}

/// [`sealed_end`] of a segment without a record, which a writer seals when it opens with a
/// larger `max_payload_bytes` than the segment was made with before writing to it
/// (`JournalWriter::rotate_for_a_larger_limit`): the seal right after the header, nothing
/// else. Its `last_timestamp` is no record's: the caller keeps the one before.
fn sealed_empty(map: SharedBytes) -> Option<SegmentEnd> {
    let last_nonzero = last_nonzero(map, HEADER_BYTES)?;
    let sealed =
        last_nonzero < HEADER_BYTES + 4 && map.load_u32_acquire(HEADER_BYTES as usize) == SEAL_WORD;
    sealed.then_some(SegmentEnd {
        end_offset_bytes: HEADER_BYTES + SEAL_BYTES,
        sealed: true,
        last_timestamp: Timestamp(0),
    })
}

/// The end of the journal against what it promised: the manifest belongs to these segments,
/// a sealed last segment has its successor, and nothing the manifest marks durable is torn
/// or missing. A bad last record above the durable mark is a torn tail (a crash mid-append:
/// never acknowledged); at or below it, it is corruption.
fn check_end(
    dir: &Path,
    tail: &Option<TailPosition>,
    has_spare: bool,
    accept_damage: bool,
    report: &mut RecoveryReport,
) -> Result<(), JournalError> {
    if let (Some(m), Some(_)) = (&report.manifest, tail)
        && m.day_epoch_unix_ns != report.day_epoch_unix_ns
    {
        let reason = "the manifest's day epoch differs from segment 1: another journal's manifest";
        return Err(corrupt(&manifest::manifest_path(dir), 16, reason));
    }
    if let Some(tail) = tail
        && tail.sealed
        && !has_spare
    {
        // The writer creates (and fsyncs) the next segment before it seals the current one.
        let error = JournalError::MissingSegment {
            path: segment_path(dir, tail.segment_index + 1),
            reason: "the segment before it is sealed",
        };
        accept_or_refuse(error, accept_damage, report)?;
    }
    let next_seq = report.last_seq + 1;
    if next_seq > report.durable_seq {
        return Ok(());
    }
    let error = match (tail, &report.torn_tail) {
        (_, Some(torn)) => JournalError::DamagedTail {
            path: torn.path.clone(),
            offset_bytes: torn.offset_bytes,
            reason: torn.reason,
            seq: next_seq,
            durable_seq: report.durable_seq,
        },
        (Some(tail), None) => JournalError::DamagedTail {
            path: tail.path.clone(),
            offset_bytes: tail.end_offset_bytes,
            reason: "the journal ends here",
            seq: next_seq,
            durable_seq: report.durable_seq,
        },
        (None, None) => JournalError::MissingSegment {
            path: segment_path(dir, 1),
            reason: "the manifest marks records durable",
        },
    };
    accept_or_refuse(error, accept_damage, report)
}

fn accept_or_refuse(
    error: JournalError,
    accept_damage: bool,
    report: &mut RecoveryReport,
) -> Result<(), JournalError> {
    if !accept_damage {
        return Err(error);
    }
    const ACCEPTED_LIMIT: usize = 4;
    assert!(report.accepted_damage.len() < ACCEPTED_LIMIT);
    report.accepted_damage.push(error.to_string());
    Ok(())
}

/// Check one segment image in memory exactly as recovery checks the last segment of a
/// journal (header, every record, the tail against `durable_seq`), without files: for the
/// fuzzer and for Miri (which cannot map files). `image` is the whole segment file; it is
/// segment 1 unless its header says otherwise, and its first sequence number starts the
/// journal. Never panics, whatever the bytes.
#[doc(hidden)]
pub fn check_segment_image(
    image: SharedBytes,
    durable_seq: u64,
) -> Result<RecoveryReport, JournalError> {
    let path = Path::new("image.seg");
    if (image.len() as u64) < HEADER_BYTES + SEAL_BYTES {
        return Err(segment::foreign(path, "shorter than a segment header"));
    }
    let mut report = RecoveryReport {
        durable_seq,
        ..RecoveryReport::default()
    };
    let Some(header) = read_header(path, image, true)? else {
        report.spare_segment = true;
        return Ok(report);
    };
    report.last_seq = header.first_seq - 1;
    report.day_epoch_unix_ns = header.day_epoch_unix_ns;
    check_header(
        path,
        &header,
        header.segment_index,
        image.len() as u64,
        &report,
    )?;
    let walk = Walk {
        expected_seq: header.first_seq,
        is_last: true,
        vouched_seq: 0,
        progress: None,
        next_first_seq: None,
    };
    let end = scan_segment(path, image, &header, walk, &mut report)?;
    report.segments = 1;
    report.data_bytes = end.end_offset_bytes;
    let tail = TailPosition {
        segment_index: header.segment_index,
        path: path.to_path_buf(),
        end_offset_bytes: end.end_offset_bytes,
        sealed: end.sealed,
    };
    // A sealed image stands alone here: its successor is not part of the check.
    check_end(Path::new("."), &Some(tail), true, false, &mut report)?;
    Ok(report)
}

/// The cheap header check of the first pass (64 bytes read, no mapping). A damaged header on
/// the last file is left for `read_header`, which may find it torn.
fn check_header_bytes(
    path: &Path,
    is_last_file: bool,
) -> Result<Option<SegmentHeader>, JournalError> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let mut bytes = [0u8; HEADER_BYTES as usize];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return Err(segment::foreign(path, "shorter than a segment header"));
    }
    match SegmentHeader::decode(path, &bytes) {
        Ok(HeaderState::Blank) if !is_last_file => {
            Err(corrupt(path, 0, "blank segment header in front of data"))
        }
        Ok(HeaderState::Valid(header)) => Ok(Some(header)),
        Ok(HeaderState::Blank) => Ok(None),
        Err(JournalError::Corrupt { .. }) if is_last_file => Ok(None),
        Err(error) => Err(error),
    }
}

fn map_read_only(path: &Path) -> Result<(File, Mapped), JournalError> {
    let file = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let bytes = file
        .metadata()
        .map_err(|e| JournalError::io(path, "stat", e))?
        .len();
    if bytes < HEADER_BYTES + SEAL_BYTES {
        return Err(segment::foreign(path, "shorter than a segment header"));
    }
    let mapped = Mapped::read_only(path, &file)?;
    Ok((file, mapped))
}

/// `None` for a blank spare (only allowed as the last file, with an all-zero body).
fn read_header(
    path: &Path,
    map: SharedBytes,
    is_last_file: bool,
) -> Result<Option<SegmentHeader>, JournalError> {
    match SegmentHeader::load_published(path, map) {
        Ok(HeaderState::Valid(header)) => Ok(Some(header)),
        Ok(HeaderState::Blank) if is_last_file && first_nonzero(map, 0).is_none() => Ok(None),
        Ok(HeaderState::Blank) => Err(corrupt(path, 0, "blank segment header in front of data")),
        Err(JournalError::Corrupt { .. })
            if is_last_file && first_nonzero(map, HEADER_BYTES).is_none() =>
        {
            // A header torn by a machine crash before any record was written into the file.
            tracing::warn!(path = %path.display(), "torn header on an empty last segment: treated as spare");
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

fn check_header(
    path: &Path,
    header: &SegmentHeader,
    segment_index: u64,
    file_bytes: u64,
    report: &RecoveryReport,
) -> Result<(), JournalError> {
    if header.segment_index != segment_index {
        return Err(corrupt(
            path,
            16,
            "header names a different segment index than the file name",
        ));
    }
    if header.segment_bytes != file_bytes {
        return Err(corrupt(
            path,
            48,
            "file length differs from the header's segment size",
        ));
    }
    let largest_bytes =
        HEADER_BYTES + record_span_bytes(header.max_payload_bytes as u64) + SEAL_BYTES;
    if largest_bytes > header.segment_bytes {
        return Err(corrupt(
            path,
            56,
            "header's max payload does not fit its segment",
        ));
    }
    if segment_index > 1 && header.day_epoch_unix_ns != report.day_epoch_unix_ns {
        return Err(corrupt(
            path,
            32,
            "day epoch differs from segment 1: another journal's segment",
        ));
    }
    if header.first_seq != report.last_seq + 1 {
        return Err(JournalError::Gap {
            path: path.to_path_buf(),
            offset_bytes: 24,
            expected: report.last_seq + 1,
            found: header.first_seq,
            what: "first sequence number",
        });
    }
    Ok(())
}

/// Whether the file after this one exists only as a blank spare (so this segment is the last
/// with data). Reads its first 64 bytes.
/// Shorter than a header and every byte zero (possibly empty): a segment file whose creation
/// never finished.
fn is_interrupted_preallocation(path: &Path) -> Result<bool, JournalError> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| JournalError::io(path, "stat", e))?
        .len();
    if bytes >= HEADER_BYTES + SEAL_BYTES {
        return Ok(false);
    }
    let content = std::fs::read(path).map_err(|e| JournalError::io(path, "read segment", e))?;
    Ok(content.iter().all(|&b| b == 0))
}

fn next_is_blank(dir: &Path, segment_index: u64) -> Result<bool, JournalError> {
    use std::os::unix::fs::FileExt;
    let path = segment_path(dir, segment_index);
    let file = File::open(&path).map_err(|e| JournalError::io(&path, "open segment", e))?;
    let mut bytes = [0u8; HEADER_BYTES as usize];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => Ok(bytes.iter().all(|&b| b == 0)),
        Err(_) => Ok(false), // too short: the full check reports it
    }
}

struct SegmentEnd {
    end_offset_bytes: u64,
    sealed: bool,
    /// Of the last record of a segment checked from its end ([`sealed_end`]).
    last_timestamp: Timestamp,
}

/// How one segment's records are walked.
struct Walk<'a> {
    /// The sequence number its first record must have.
    expected_seq: u64,
    /// The journal's last segment (a torn tail may end it).
    is_last: bool,
    /// Records before this one are vouched for by a snapshot: no checksums (0: none).
    vouched_seq: u64,
    /// Told of the records checked, every [`PROGRESS_EVERY_RECORDS`].
    progress: Option<&'a ScanProgress>,
    /// The first sequence number of the segment after this one, if there is one.
    next_first_seq: Option<u64>,
}

/// Check one segment's records; `walk.expected_seq` is the sequence number of its first
/// record. Records before `walk.vouched_seq` are walked without their checksums (see the
/// module docs).
fn scan_segment(
    path: &Path,
    map: SharedBytes,
    header: &SegmentHeader,
    walk: Walk,
    report: &mut RecoveryReport,
) -> Result<SegmentEnd, JournalError> {
    let Walk {
        expected_seq,
        is_last,
        vouched_seq,
        progress,
        next_first_seq,
    } = walk;
    let segment_bytes = map.len() as u64;
    let mut offset_bytes = HEADER_BYTES;
    let mut seq = expected_seq;
    let limit = segment_bytes / RECORD_ALIGN_BYTES;
    for _ in 0..limit {
        let check_crc = seq >= vouched_seq;
        match read_slot_checked(map, offset_bytes, header.max_payload_bytes, check_crc) {
            Slot::Valid {
                seq: found,
                timestamp,
                span_bytes,
                ..
            } => {
                if found != seq {
                    let what = "sequence number";
                    return Err(JournalError::Gap {
                        path: path.to_path_buf(),
                        offset_bytes,
                        expected: seq,
                        found,
                        what,
                    });
                }
                report.records += 1;
                report.last_seq = seq;
                report.last_timestamp = timestamp;
                if let Some(progress) = progress
                    && seq.is_multiple_of(PROGRESS_EVERY_RECORDS)
                {
                    progress.advance(seq);
                }
                seq += 1;
                offset_bytes += span_bytes;
            }
            Slot::Seal => {
                return Ok(SegmentEnd {
                    end_offset_bytes: offset_bytes + SEAL_BYTES,
                    sealed: true,
                    last_timestamp: report.last_timestamp,
                });
            }
            Slot::End if !is_last => {
                // The seal may not have reached the disk before the next header did (machine
                // crash): harmless if nothing follows; the next header's first sequence
                // number then proves no record is missing.
                if first_nonzero(map, offset_bytes).is_some() {
                    let reason = "data after the end of a segment that a later segment follows";
                    return Err(corrupt(path, offset_bytes, reason));
                }
                // Numbered on in the next segment, yet ended where another record fit: no
                // writer rotates there (lost records show as a gap at the next header).
                let room_bytes = segment_bytes - offset_bytes;
                if next_first_seq == Some(seq)
                    && room_bytes >= rotation_room_bytes(header.max_payload_bytes)
                {
                    let reason = "a segment that a later one continues ends early, unsealed";
                    return Err(corrupt(path, offset_bytes, reason));
                }
                return Ok(SegmentEnd {
                    end_offset_bytes: offset_bytes,
                    sealed: false,
                    last_timestamp: report.last_timestamp,
                });
            }
            Slot::End => {
                check_tail(
                    path,
                    map,
                    header,
                    offset_bytes,
                    "junk after the end of data",
                    report,
                )?;
                return Ok(SegmentEnd {
                    end_offset_bytes: offset_bytes,
                    sealed: false,
                    last_timestamp: report.last_timestamp,
                });
            }
            Slot::Invalid { reason } if is_last => {
                check_tail(path, map, header, offset_bytes, reason, report)?;
                return Ok(SegmentEnd {
                    end_offset_bytes: offset_bytes,
                    sealed: false,
                    last_timestamp: report.last_timestamp,
                });
            }
            Slot::Invalid { reason } => return Err(corrupt(path, offset_bytes, reason)),
        }
    }
    Err(corrupt(path, offset_bytes, "record scan did not end"))
}

/// After the last whole record of the last segment: zeros to the end are a clean end; a bad
/// slot or junk with no valid record after it is a torn tail (recorded in the report); a
/// valid record after it is mid-journal corruption.
fn check_tail(
    path: &Path,
    map: SharedBytes,
    header: &SegmentHeader,
    end_offset_bytes: u64,
    reason: &'static str,
    report: &mut RecoveryReport,
) -> Result<(), JournalError> {
    let Some(first_junk) = first_nonzero(map, end_offset_bytes) else {
        return Ok(());
    };
    let last_junk = last_nonzero(map, end_offset_bytes).expect("some byte is not zero");
    assert!(first_junk <= last_junk);
    let mut offset_bytes = end_offset_bytes + RECORD_ALIGN_BYTES;
    let scan_end = (last_junk + 1).min(map.len() as u64 - SEAL_BYTES);
    while offset_bytes < scan_end {
        let word = map.load_u32_acquire(offset_bytes as usize);
        if word != 0
            && word != SEAL_WORD
            && matches!(
                read_slot(map, offset_bytes, header.max_payload_bytes),
                Slot::Valid { .. }
            )
        {
            return Err(corrupt(path, end_offset_bytes, reason));
        }
        offset_bytes += RECORD_ALIGN_BYTES;
    }
    let cut_end = (last_junk + 1).next_multiple_of(RECORD_ALIGN_BYTES);
    report.torn_tail = Some(TornTail {
        path: path.to_path_buf(),
        offset_bytes: end_offset_bytes,
        cut_bytes: cut_end - end_offset_bytes,
        reason,
    });
    Ok(())
}

/// The bytes from `from_bytes` to the end, for scanning what lies past the end of data.
fn unpublished<'a>(map: SharedBytes, from_bytes: u64) -> &'a [u8] {
    let from = from_bytes as usize;
    // SAFETY: recovery and `verify` read a journal no writer of this process appends to: the
    // writer's own recovery runs before it appends, and the scan ends before the storage is
    // unmapped (callers drop the slice with the scan). The tailing reader scans only a
    // segment whose successor is published, which its writer never writes again. A writer in
    // another process is outside this process's memory model (shared memory), as for any
    // mapping.
    unsafe { map.slice(from, map.len() - from) }
}

/// Is every byte of `chunk` zero? An OR over 8-byte words the compiler vectorizes: the tail
/// of a preallocated segment is hundreds of megabytes of zeros scanned at every recovery,
/// `verify` and replay (a byte-wise early-exit loop ran at ~1 GB/s; this at memory speed).
fn all_zero(chunk: &[u8]) -> bool {
    let (words, rest) = chunk.as_chunks::<8>();
    let folded = words
        .iter()
        .fold(0u64, |acc, w| acc | u64::from_ne_bytes(*w));
    folded == 0 && rest.iter().all(|&b| b == 0)
}

/// Offset of the first non-zero byte at or after `from_bytes`.
pub(super) fn first_nonzero(map: SharedBytes, from_bytes: u64) -> Option<u64> {
    let from = from_bytes as usize;
    let chunks = unpublished(map, from_bytes).chunks(ZERO_SCAN_CHUNK_BYTES);
    for (chunk_index, chunk) in chunks.enumerate() {
        if all_zero(chunk) {
            continue;
        }
        let inner = chunk
            .iter()
            .position(|&b| b != 0)
            .expect("chunk has a non-zero byte");
        return Some((from + chunk_index * ZERO_SCAN_CHUNK_BYTES + inner) as u64);
    }
    None
}

/// Offset of the last non-zero byte at or after `from_bytes`.
fn last_nonzero(map: SharedBytes, from_bytes: u64) -> Option<u64> {
    let from = from_bytes as usize;
    let bytes = unpublished(map, from_bytes);
    let chunks = bytes.rchunks(ZERO_SCAN_CHUNK_BYTES);
    for (back_index, chunk) in chunks.enumerate() {
        if all_zero(chunk) {
            continue;
        }
        // `rchunks` yields the short chunk last: this one starts at its length from its end.
        let start = bytes.len() - back_index * ZERO_SCAN_CHUNK_BYTES - chunk.len();
        let inner = chunk
            .iter()
            .rposition(|&b| b != 0)
            .expect("chunk has a non-zero byte");
        return Some((from + start + inner) as u64);
    }
    None
}

/// The writer's recovery: scan (fsyncing every segment), record the recovered marks in the
/// manifest, write missing seals back, cut a torn tail, remove an unneeded spare. Returns the
/// report, the last segment with a header mapped read-write (if any) and the marks written.
/// `day_epoch_for_new` is the day epoch a new journal would get (`None`: no writer follows;
/// an empty journal then keeps no manifest).
pub(crate) fn recover(
    dir: &Path,
    accept_damage: bool,
    day_epoch_for_new: Option<u64>,
    vouched_seq: u64,
) -> Result<Recovered, JournalError> {
    remove_if_present(dir, &dir.join(manifest::MANIFEST_TMP_NAME))?;
    let scan = scan_journal(dir, true, accept_damage, vouched_seq)?;
    for damage in &scan.report.accepted_damage {
        tracing::error!(damage = %damage, "journal: damage to durable data accepted (--truncate-corrupt-tail): cutting back to the last intact record");
    }
    // The marks of what survives recovery go to disk before anything is changed, so a crash
    // during the cuts below never leaves marks claiming more than the journal holds.
    let marks = recovered_marks(&scan, day_epoch_for_new);
    match &marks {
        Some(marks) => manifest::write_durable(dir, marks)?,
        None => remove_if_present(dir, &manifest::manifest_path(dir))?,
    }
    for (segment_index, path, offset_bytes) in &scan.missing_seals {
        let mapped = MappedSegment::open(path, *segment_index)?;
        // SAFETY: recovery holds the directory lock and runs before any reader starts.
        unsafe { write_seal(mapped.bytes(), *offset_bytes) };
        mapped.sync_range(*offset_bytes, *offset_bytes + SEAL_BYTES)?;
        tracing::warn!(path = %path.display(), offset_bytes, "journal: missing seal written back");
    }
    let tail = match scan.tail {
        Some(tail) => {
            let mapped = MappedSegment::open(&tail.path, tail.segment_index)?;
            if let Some(torn) = &scan.report.torn_tail {
                assert!(torn.path == tail.path && torn.offset_bytes == tail.end_offset_bytes);
                cut(
                    &mapped,
                    torn.offset_bytes,
                    torn.offset_bytes + torn.cut_bytes,
                )?;
                tracing::warn!(
                    path = %torn.path.display(),
                    offset_bytes = torn.offset_bytes,
                    cut_bytes = torn.cut_bytes,
                    reason = torn.reason,
                    last_seq = scan.report.last_seq,
                    "journal: torn tail cut back to the last whole record"
                );
            }
            Some((mapped, tail))
        }
        None => None,
    };
    // A spare after a sealed segment (or in an empty journal) becomes the next segment; after
    // an unsealed one it is not needed (the helper prepares a new one).
    let continues_in_tail = tail.as_ref().is_some_and(|(_, tail)| !tail.sealed);
    if let Some(spare) = &scan.spare_path
        && continues_in_tail
    {
        std::fs::remove_file(spare)
            .map_err(|e| JournalError::io(spare, "remove spare segment", e))?;
        segment::sync_dir(dir)?;
    }
    Ok(Recovered {
        report: scan.report,
        tail,
        marks,
    })
}

/// What [`recover`] hands the writer.
pub(crate) struct Recovered {
    pub report: RecoveryReport,
    pub tail: Option<(MappedSegment, TailPosition)>,
    /// The manifest written (`None` only without a writer and without records).
    pub marks: Option<ManifestState>,
}

/// After recovery every record up to the last one is on disk (the scan fsynced the files),
/// and every segment before the tail is sealed (missing seals are written back).
fn recovered_marks(scan: &JournalScan, day_epoch_for_new: Option<u64>) -> Option<ManifestState> {
    let (day_epoch_unix_ns, sealed_through_segment) = match &scan.tail {
        Some(tail) if tail.sealed => (scan.report.day_epoch_unix_ns, tail.segment_index),
        Some(tail) => (scan.report.day_epoch_unix_ns, tail.segment_index - 1),
        None => (day_epoch_for_new?, 0),
    };
    Some(ManifestState {
        day_epoch_unix_ns,
        sealed_through_segment,
        synced_through_seq: scan.report.last_seq,
        mapped_through_seq: scan.report.last_seq,
        boot_id: manifest::current_boot_id(),
    })
}

fn remove_if_present(dir: &Path, path: &Path) -> Result<(), JournalError> {
    match std::fs::remove_file(path) {
        Ok(()) => segment::sync_dir(dir),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(JournalError::io(path, "remove", error)),
    }
}

/// What `--truncate-corrupt-tail` does before the daemon starts: recover the journal like a
/// writer would, but cut a damaged tail (durable records that are corrupt or missing, a
/// missing last segment) back to the last intact record instead of refusing, and leave the
/// directory ready for a normal start. Every cut is logged and listed in `accepted_damage`.
/// Mid-journal corruption (intact records after the bad one) is still refused: cutting it
/// would drop intact records; see [`truncate_after`]. Takes the directory lock.
pub fn truncate_corrupt_tail(dir: &Path) -> Result<RecoveryReport, JournalError> {
    let _lock = super::writer::lock_dir(dir)?;
    let recovered = recover(dir, true, None, 0)?;
    if let Some((_, tail)) = &recovered.tail
        && tail.sealed
    {
        // A normal start continues in the segment after a sealed one; it must exist (an
        // empty file is an interrupted preallocation, which the writer turns into it).
        let next = segment_path(dir, tail.segment_index + 1);
        if !next.exists() {
            File::create(&next).map_err(|e| JournalError::io(&next, "create segment", e))?;
            segment::sync_dir(dir)?;
        }
    }
    Ok(recovered.report)
}

/// Zero `[start, end)` of a segment, last page first, and msync it: if this is interrupted,
/// what remains is still a valid prefix followed by a (shorter) torn tail.
pub(crate) fn cut(
    segment: &MappedSegment,
    start_bytes: u64,
    end_bytes: u64,
) -> Result<(), JournalError> {
    assert!(start_bytes >= HEADER_BYTES && start_bytes.is_multiple_of(RECORD_ALIGN_BYTES));
    assert!(start_bytes <= end_bytes && end_bytes <= segment.segment_bytes());
    const CHUNK_BYTES: u64 = 4096;
    let mut chunk_end = end_bytes;
    let chunks = (end_bytes - start_bytes).div_ceil(CHUNK_BYTES);
    for _ in 0..chunks {
        let chunk_start = chunk_end.saturating_sub(CHUNK_BYTES).max(start_bytes);
        // SAFETY: cutting runs under the directory lock with no writer or reader of this
        // process on the segment.
        unsafe {
            segment
                .bytes()
                .zero(chunk_start as usize, (chunk_end - chunk_start) as usize)
        };
        chunk_end = chunk_start;
    }
    assert!(chunk_end == start_bytes);
    segment.sync_range(start_bytes, end_bytes)
}

/// Drop every record after `seq` (a standby that was the old primary must forget what the
/// new primary never had; an operator cuts a journal back before a hole). Only the records up
/// to `seq` need to be intact. Run it with no writer open (it takes the directory lock) and no
/// readers; if interrupted, run it again. Returns the report of the shortened journal.
pub fn truncate_after(dir: &Path, seq: u64) -> Result<RecoveryReport, JournalError> {
    let _lock = super::writer::lock_dir(dir)?;
    let segments = list_segments(dir)?;
    let keep_index = segment_holding(dir, &segments, seq.saturating_add(1))?;
    // Lower the marks first, durably: from here on the journal may hold less than they say.
    if let Some(marks) = manifest::read(dir)? {
        manifest::write_durable(dir, &marks.lowered_to(seq, keep_index - 1))?;
    }
    // Later segments hold only records after `seq`. Remove them last first, so an
    // interruption never leaves a hole in the indexes. The one right after the kept segment
    // is emptied instead (an interrupted preallocation, i.e. a spare), so that a sealed kept
    // segment never lacks its successor; it goes once the kept segment's seal is cut.
    for (segment_index, path) in segments.iter().rev() {
        if *segment_index <= keep_index + 1 {
            break;
        }
        std::fs::remove_file(path).map_err(|e| JournalError::io(path, "remove segment", e))?;
    }
    let next = segment_path(dir, keep_index + 1);
    if segments.len() as u64 > keep_index {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&next)
            .map_err(|e| JournalError::io(&next, "open segment", e))?;
        file.set_len(0)
            .map_err(|e| JournalError::io(&next, "empty segment", e))?;
        file.sync_all()
            .map_err(|e| JournalError::io(&next, "fsync segment", e))?;
    }
    segment::sync_dir(dir)?;
    let path = segment_path(dir, keep_index);
    let mapped = MappedSegment::open(&path, keep_index)?;
    let start_bytes = offset_after(&mapped, seq)?;
    if let Some(last_bytes) = last_nonzero(mapped.bytes(), start_bytes) {
        let end_bytes = (last_bytes + 1).next_multiple_of(RECORD_ALIGN_BYTES);
        cut(&mapped, start_bytes, end_bytes)?;
    }
    drop(mapped);
    // The cut started at or before the kept segment's seal: it is unsealed now.
    remove_if_present(dir, &next)?;
    let report = verify(dir)?;
    tracing::warn!(path = %path.display(), seq, last_seq = report.last_seq, "journal truncated");
    Ok(report)
}

/// The last segment whose header is valid and whose first sequence number is at most `seq`.
fn segment_holding(dir: &Path, segments: &[(u64, PathBuf)], seq: u64) -> Result<u64, JournalError> {
    use std::os::unix::fs::FileExt;
    let mut holding = None;
    for (segment_index, path) in segments {
        let file = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
        let mut bytes = [0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| JournalError::io(path, "read header", e))?;
        match SegmentHeader::decode(path, &bytes) {
            Ok(HeaderState::Valid(header)) if header.first_seq <= seq => {
                holding = Some(*segment_index)
            }
            Err(error) if holding.is_none() => return Err(error),
            _ => break,
        }
    }
    holding.ok_or_else(|| JournalError::EmptyJournal {
        path: dir.to_path_buf(),
    })
}

/// Offset of the first slot after the records up to `seq` (the record `seq + 1`, a seal,
/// the end of data or a bad slot).
fn offset_after(segment: &MappedSegment, seq: u64) -> Result<u64, JournalError> {
    let map = segment.bytes();
    let mut header_bytes = [0u8; HEADER_BYTES as usize];
    map.copy_out(0, &mut header_bytes);
    let header = match SegmentHeader::decode(&segment.path, &header_bytes)? {
        HeaderState::Valid(header) => header,
        HeaderState::Blank => return Err(corrupt(&segment.path, 0, "blank header")),
    };
    let mut offset_bytes = HEADER_BYTES;
    let limit = segment.segment_bytes() / RECORD_ALIGN_BYTES;
    for _ in 0..limit {
        match read_slot(map, offset_bytes, header.max_payload_bytes) {
            Slot::Valid {
                seq: found,
                span_bytes,
                ..
            } if found <= seq => offset_bytes += span_bytes,
            _ => return Ok(offset_bytes),
        }
    }
    Err(corrupt(
        &segment.path,
        offset_bytes,
        "record walk did not end",
    ))
}

#[cfg(test)]
mod tests {
    use super::super::record::write_record;
    use super::super::shared::HeapBytes;
    use super::*;

    const IMAGE_BYTES: usize = 8192;

    /// The word-wise zero scans find exactly the bytes a byte-wise scan finds, wherever they
    /// sit relative to the scan's chunks and words.
    #[test]
    fn zero_scans_find_the_first_and_last_non_zero_byte() {
        let len = 3 * ZERO_SCAN_CHUNK_BYTES + 13;
        let spots = [0, 1, 7, 8, 4095, 4096, 4097, 8191, 12_288, len - 1];
        for &a in &spots {
            for &b in &spots {
                let heap = HeapBytes::zeroed(len);
                // SAFETY: a private buffer; this test is its only user.
                unsafe {
                    heap.view().write(a, &[0x5a]);
                    heap.view().write(b, &[0x01]);
                }
                for from in [0usize, 3, 4096, 5000] {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let want_first = [lo, hi].into_iter().find(|&x| x >= from);
                    let want_last = [hi, lo].into_iter().find(|&x| x >= from);
                    let map = heap.view();
                    assert_eq!(
                        first_nonzero(map, from as u64),
                        want_first.map(|x| x as u64)
                    );
                    assert_eq!(last_nonzero(map, from as u64), want_last.map(|x| x as u64));
                }
            }
        }
        assert_eq!(first_nonzero(HeapBytes::zeroed(len).view(), 0), None);
        assert_eq!(last_nonzero(HeapBytes::zeroed(len).view(), 0), None);
    }

    /// A one-segment image with `records` records (payload = the sequence number's bytes).
    fn image(records: u64) -> (HeapBytes, Vec<u64>) {
        let heap = HeapBytes::zeroed(IMAGE_BYTES);
        let header = SegmentHeader {
            segment_index: 1,
            first_seq: 1,
            day_epoch_unix_ns: 0,
            created_unix_ns: 0,
            segment_bytes: IMAGE_BYTES as u64,
            max_payload_bytes: 64,
        };
        // SAFETY: a private buffer; this test is its only user.
        unsafe { header.publish(heap.view()) };
        let mut offsets = Vec::new();
        let mut offset_bytes = HEADER_BYTES;
        for seq in 1..=records {
            offsets.push(offset_bytes);
            // SAFETY: as above.
            unsafe {
                write_record(
                    heap.view(),
                    offset_bytes,
                    seq,
                    Timestamp(seq),
                    1,
                    &seq.to_le_bytes(),
                )
            };
            offset_bytes += record_span_bytes(8);
        }
        (heap, offsets)
    }

    /// The torn-tail / damage rule on an in-memory image (so it also runs under Miri): the
    /// same flipped byte in the last record is a torn tail above the durable mark and damage
    /// at or below it; a bad record with intact ones after it is always corruption.
    #[test]
    fn image_rules_torn_tail_against_durable_mark() {
        let (heap, offsets) = image(5);
        let report = check_segment_image(heap.view(), 5).expect("intact");
        assert_eq!((report.last_seq, report.torn_tail), (5, None));
        // SAFETY: private buffer, no other user.
        unsafe { heap.view().write(offsets[4] as usize + 35, &[0xFF]) };
        let torn = check_segment_image(heap.view(), 4).expect("torn tail above the mark");
        assert_eq!(torn.last_seq, 4);
        assert_eq!(torn.torn_tail.expect("torn").offset_bytes, offsets[4]);
        let refused = check_segment_image(heap.view(), 5).expect_err("damage at the mark");
        assert!(
            matches!(refused, JournalError::DamagedTail { seq: 5, durable_seq: 5, offset_bytes, .. } if offset_bytes == offsets[4]),
            "{refused}"
        );
        let (heap, offsets) = image(5);
        // SAFETY: as above.
        unsafe { heap.view().write(offsets[2] as usize + 35, &[0xFF]) };
        let middle = check_segment_image(heap.view(), 0).expect_err("intact records follow");
        assert!(matches!(middle, JournalError::Corrupt { .. }), "{middle}");
    }

    /// A header whose first sequence number is the largest there is, with a record carrying
    /// it: the next number does not exist, so the file is corrupt, never an overflow panic.
    #[test]
    fn sequence_number_at_the_top_of_the_range_is_an_error_not_a_panic() {
        let heap = HeapBytes::zeroed(IMAGE_BYTES);
        let header = SegmentHeader {
            segment_index: 1,
            first_seq: u64::MAX,
            day_epoch_unix_ns: 0,
            created_unix_ns: 0,
            segment_bytes: IMAGE_BYTES as u64,
            max_payload_bytes: 64,
        };
        // SAFETY: a private buffer; this test is its only user.
        unsafe {
            header.publish(heap.view());
            write_record(heap.view(), HEADER_BYTES, u64::MAX, Timestamp(1), 1, b"top");
        }
        for durable_seq in [0, u64::MAX] {
            let result = check_segment_image(heap.view(), durable_seq);
            assert!(result.is_err(), "{result:?}");
        }
    }

    #[test]
    fn image_of_any_bytes_never_panics() {
        let heap = HeapBytes::zeroed(256);
        for seed in 0..if cfg!(miri) { 4u64 } else { 500 } {
            let mut bytes = [0u8; 256];
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for b in bytes.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            // SAFETY: private buffer.
            unsafe { heap.view().write(0, &bytes) };
            let _ = check_segment_image(heap.view(), seed % 3);
        }
    }
}
