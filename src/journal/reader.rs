//! The tailing reader: reads from any sequence number, in this or another process, and keeps
//! up with a live writer across segment rotations. No allocation per record.

use std::fs::File;
use std::ops::RangeInclusive;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::{Advice, MmapOptions, MmapRaw};

use super::JournalError;
use super::record::{Record, SEAL_BYTES, Slot, read_slot_checked, rotation_room_bytes};
use super::recovery::first_nonzero;
use super::segment::{
    HEADER_BYTES, HeaderState, SegmentHeader, corrupt, list_segments, segment_path,
};
use super::shared::SharedBytes;
use crate::types::Timestamp;

/// Upper bound on slots looked at in one `next` call (skipping towards `from_seq` included).
const SLOTS_PER_CALL_LIMIT: u64 = 1 << 40;

struct ReadSegment {
    path: PathBuf,
    header: SegmentHeader,
    /// View of `_map`; the mapping is never borrowed as a slice while the writer appends.
    bytes: SharedBytes,
    _map: MmapRaw,
}

/// A file's device and inode: which file a path named when it was opened.
type FileId = (u64, u64);

/// The segment after the current one, mapped while its header is not published yet.
struct Pending {
    path: PathBuf,
    mapped: Mapped,
    /// The mapped file's device and inode. A restarted writer replaces a blank spare with a
    /// new file, whose header a mapping of the old one would never see: the reader checks the
    /// path still names this file (one `stat`) instead of mapping it again at every poll.
    file_id: FileId,
}

/// A read-only mapping and its view (valid while the `MmapRaw` lives).
pub(crate) struct Mapped {
    pub bytes: SharedBytes,
    pub map: MmapRaw,
}

impl Mapped {
    /// Map `file` (`file_bytes` long, at least a header and a seal) read-only.
    pub fn read_only(path: &Path, file: &File) -> Result<Mapped, JournalError> {
        // A raw mapping hands out its pointer without making a slice reference over bytes
        // the writer may be appending to (`Mmap` would, through `Deref`).
        let map = MmapOptions::new()
            .map_raw_read_only(file)
            .map_err(|e| JournalError::io(path, "map segment", e))?;
        let _ = map.advise(Advice::Sequential);
        // SAFETY: the pointer comes from the mapping (page aligned) and stays valid while
        // `map` lives; moving an `MmapRaw` does not move the mapping. The view is only read
        // through (the mapping is read-only): the journal writer never shortens a segment
        // while it is mapped.
        let bytes = unsafe { SharedBytes::new(map.as_mut_ptr(), map.len()) };
        Ok(Mapped { bytes, map })
    }
}

/// Reads records in sequence order. At the live end `next` returns `Ok(None)` ("nothing
/// yet"); calling it again later picks up what the writer appended since, including new
/// segments, and crosses a seal a machine crash lost (as `verify` accepts it). A hole in the
/// middle of a damaged journal can look like its end here: [`super::verify`] is the check.
/// Do not run a reader while a journal is being recovered or truncated.
pub struct JournalReader {
    dir: PathBuf,
    segment: ReadSegment,
    /// The next segment, mapped but whose header was not published yet: after a seal, or at
    /// an unsealed end within `rotation_room_bytes` of the segment's end.
    pending: Option<Pending>,
    /// Segment files mapped so far (this one included): a tail waiting at a segment's end
    /// maps its successor once, not once a poll (read by tests).
    #[cfg_attr(not(test), allow(dead_code))]
    maps_total: u64,
    offset_bytes: u64,
    /// Sequence number of the record at `offset_bytes`.
    next_seq: u64,
    /// Records below this are skipped (walked by their lengths and numbers: their checksums
    /// are not computed, as they are not read).
    from_seq: u64,
    /// Records in this range were checked by a scan of this process: their checksums are not
    /// computed again (see [`Self::trust`]).
    trusted: RangeInclusive<u64>,
}

/// Position of a found record inside the current mapping (no borrow held while advancing).
struct Found {
    seq: u64,
    timestamp: Timestamp,
    kind: u8,
    payload: std::ops::Range<usize>,
}

impl JournalReader {
    /// Open `dir` to read from `from_seq` (1 = the beginning). A `from_seq` beyond the end is
    /// allowed: the reader waits there for the writer.
    pub fn open(dir: &Path, from_seq: u64) -> Result<JournalReader, JournalError> {
        if from_seq == 0 {
            return Err(JournalError::SeqOutOfRange {
                requested: 0,
                last_seq: 0,
                op: "read from",
            });
        }
        let segments = list_segments(dir)?;
        let mut start: Option<(PathBuf, SegmentHeader)> = None;
        for (segment_index, path) in segments {
            let header = match read_header(&path)? {
                HeaderState::Valid(header) => header,
                HeaderState::Blank => break,
            };
            if header.segment_index != segment_index {
                return Err(corrupt(
                    &path,
                    16,
                    "header names a different segment index than the file name",
                ));
            }
            if header.first_seq > from_seq && start.is_some() {
                break;
            }
            start = Some((path, header));
        }
        let Some((path, _)) = start else {
            return Err(JournalError::EmptyJournal {
                path: dir.to_path_buf(),
            });
        };
        let segment =
            map_segment(&path)?.ok_or_else(|| corrupt(&path, 0, "segment header vanished"))?;
        let next_seq = segment.header.first_seq;
        Ok(JournalReader {
            dir: dir.to_path_buf(),
            segment,
            pending: None,
            maps_total: 1,
            offset_bytes: HEADER_BYTES,
            next_seq,
            from_seq,
            // Nothing trusted (an empty range).
            trusted: RangeInclusive::new(1, 0),
        })
    }

    /// Skip the checksum of records up to `seq`: a scan of this process (the writer's
    /// recovery, [`super::verify`]) has just checked every one of them, and a published
    /// record is never written again. Replay then reads each record's checksum once, not
    /// twice. Lengths, ranges and sequence numbers are still checked.
    pub fn trust_through(&mut self, seq: u64) {
        self.trust(1..=seq);
    }

    /// [`Self::trust_through`] for the records of `seqs` only: those a scan vouched for by a
    /// snapshot checked ([`super::verify_vouched`]: from its `vouched_through` + 1 on).
    pub fn trust(&mut self, seqs: RangeInclusive<u64>) {
        self.trusted = seqs;
    }

    /// The next record, or `Ok(None)` at the (live) end of the journal.
    // A lending reader (records borrow the mapping) cannot be an `Iterator`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>, JournalError> {
        match self.advance()? {
            Some(found) => Ok(Some(self.record(found))),
            None => Ok(None),
        }
    }

    /// Like `next`, but at the live end sleeps (20 µs doubling to 1 ms, never spins) until a
    /// record arrives or `timeout` passes.
    pub fn next_wait(&mut self, timeout: Duration) -> Result<Option<Record<'_>>, JournalError> {
        let deadline = Instant::now() + timeout;
        let mut sleep = Duration::from_micros(20);
        loop {
            if let Some(found) = self.advance()? {
                return Ok(Some(self.record(found)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(sleep.min(deadline - now));
            sleep = (sleep * 2).min(Duration::from_millis(1));
        }
    }

    /// Sequence number of the next record the journal will hold at the reader's position.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.max(self.from_seq)
    }

    pub fn day_epoch_unix_ns(&self) -> u64 {
        self.segment.header.day_epoch_unix_ns
    }

    fn record(&self, found: Found) -> Record<'_> {
        let (start, bytes) = (found.payload.start, found.payload.len());
        Record {
            seq: found.seq,
            timestamp: found.timestamp,
            kind: found.kind,
            // SAFETY: the record was published (its commit word loaded with Acquire) and is
            // never written again; the mapping lives in `self.segment` for the borrow.
            payload: unsafe { self.segment.bytes.slice(start, bytes) },
        }
    }

    fn advance(&mut self) -> Result<Option<Found>, JournalError> {
        for _ in 0..SLOTS_PER_CALL_LIMIT {
            let segment = &self.segment;
            let check_crc =
                self.next_seq >= self.from_seq && !self.trusted.contains(&self.next_seq);
            match read_slot_checked(
                segment.bytes,
                self.offset_bytes,
                segment.header.max_payload_bytes,
                check_crc,
            ) {
                Slot::End => {
                    if !self.cross_lost_seal()? {
                        return Ok(None);
                    }
                }
                Slot::Seal => {
                    if !self.enter_next_segment()? {
                        return Ok(None);
                    }
                }
                Slot::Invalid { reason } => {
                    return Err(corrupt(&segment.path, self.offset_bytes, reason));
                }
                Slot::Valid {
                    seq,
                    timestamp,
                    kind,
                    payload,
                    span_bytes,
                } => {
                    if seq != self.next_seq {
                        let path = segment.path.clone();
                        let (offset_bytes, expected) = (self.offset_bytes, self.next_seq);
                        return Err(JournalError::Gap {
                            path,
                            offset_bytes,
                            expected,
                            found: seq,
                            what: "sequence number",
                        });
                    }
                    self.offset_bytes += span_bytes;
                    self.next_seq += 1;
                    if seq >= self.from_seq {
                        return Ok(Some(Found {
                            seq,
                            timestamp,
                            kind,
                            payload,
                        }));
                    }
                }
            }
        }
        Err(corrupt(
            &self.segment.path,
            self.offset_bytes,
            "reader made no progress",
        ))
    }

    /// After a seal: move to the next segment once its header is published. `Ok(false)` means
    /// "not yet" (the writer is between sealing and publishing, or recreating it).
    fn enter_next_segment(&mut self) -> Result<bool, JournalError> {
        let Some(header) = self.next_header()? else {
            return Ok(false);
        };
        self.enter_pending(header)?;
        Ok(true)
    }

    /// At the end of data where the next record might not have fit: if the next segment's
    /// header is published, the writer rotated here (it seals first, then publishes) and a
    /// machine crash lost the seal. As for `verify`, the header's first sequence number then
    /// proves no record missing, and nothing may follow in this segment. `Ok(true)`: entered
    /// the next segment, or the seal is there now (read the slot again).
    fn cross_lost_seal(&mut self) -> Result<bool, JournalError> {
        let (bytes, header) = (self.segment.bytes, self.segment.header);
        let room_bytes = header.segment_bytes - self.offset_bytes;
        if room_bytes >= rotation_room_bytes(header.max_payload_bytes) {
            // Any record fits: the writer cannot have rotated here (`verify` refuses a later
            // segment after such an end). The live (or last) end.
            return Ok(false);
        }
        let Some(next) = self.next_header()? else {
            return Ok(false);
        };
        // The header was loaded with Acquire after the writer's seal store, if it made one.
        match read_slot_checked(bytes, self.offset_bytes, header.max_payload_bytes, false) {
            Slot::End => {}
            _ => return Ok(true),
        }
        if first_nonzero(bytes, self.offset_bytes).is_some() {
            let reason = "data after the end of a segment that a later segment follows";
            return Err(corrupt(&self.segment.path, self.offset_bytes, reason));
        }
        self.enter_pending(next)?;
        Ok(true)
    }

    /// The next segment's header once it is published (its file mapped into `pending`).
    fn next_header(&mut self) -> Result<Option<SegmentHeader>, JournalError> {
        // Twice at most: a kept mapping of a file since replaced is dropped, the new one mapped.
        for _ in 0..2 {
            if self.pending.is_none() && !self.map_pending()? {
                return Ok(None);
            }
            let pending = self.pending.as_ref().expect("mapped above");
            match SegmentHeader::load_published(&pending.path, pending.mapped.bytes)? {
                HeaderState::Valid(header)
                    if header.segment_bytes == pending.mapped.bytes.len() as u64 =>
                {
                    return Ok(Some(header));
                }
                HeaderState::Valid(_) => {
                    // Not the size its header says: a file since resized (e.g. a restarted
                    // writer with another `segment_bytes` reusing it): map it again next time.
                    self.pending = None;
                    return Ok(None);
                }
                HeaderState::Blank if names_file(&pending.path, pending.file_id)? => {
                    return Ok(None);
                }
                // Replaced (a restarted writer's new spare) or removed: map what is there now.
                HeaderState::Blank => self.pending = None,
            }
        }
        Ok(None)
    }

    /// Map the next segment's file into `pending`; `false` if there is none yet.
    fn map_pending(&mut self) -> Result<bool, JournalError> {
        let path = segment_path(&self.dir, self.segment.header.segment_index + 1);
        let Some((mapped, file_id)) = map_file(&path)? else {
            return Ok(false);
        };
        self.maps_total += 1;
        self.pending = Some(Pending {
            path,
            mapped,
            file_id,
        });
        Ok(true)
    }

    /// Segment files this reader has mapped (see `maps_total`).
    #[cfg(test)]
    pub(crate) fn segments_mapped(&self) -> u64 {
        self.maps_total
    }

    /// Continue in the pending segment, whose published header is `header`.
    fn enter_pending(&mut self, header: SegmentHeader) -> Result<(), JournalError> {
        let Pending { path, mapped, .. } = self.pending.take().expect("a published next segment");
        check_next_header(
            &path,
            &header,
            &self.segment.header,
            self.segment.header.segment_index + 1,
            self.next_seq,
        )?;
        self.segment = ReadSegment {
            path,
            header,
            bytes: mapped.bytes,
            _map: mapped.map,
        };
        self.offset_bytes = HEADER_BYTES;
        Ok(())
    }
}

fn check_next_header(
    path: &Path,
    header: &SegmentHeader,
    previous: &SegmentHeader,
    next_index: u64,
    next_seq: u64,
) -> Result<(), JournalError> {
    if header.segment_index != next_index {
        return Err(corrupt(
            path,
            16,
            "header names a different segment index than the file name",
        ));
    }
    if header.day_epoch_unix_ns != previous.day_epoch_unix_ns {
        return Err(corrupt(
            path,
            32,
            "day epoch differs from the previous segment",
        ));
    }
    if header.first_seq != next_seq {
        let what = "first sequence number";
        return Err(JournalError::Gap {
            path: path.to_path_buf(),
            offset_bytes: 24,
            expected: next_seq,
            found: header.first_seq,
            what,
        });
    }
    Ok(())
}

fn read_header(path: &Path) -> Result<HeaderState, JournalError> {
    let file = File::open(path).map_err(|e| JournalError::io(path, "open segment", e))?;
    let mut bytes = [0u8; HEADER_BYTES as usize];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => SegmentHeader::decode(path, &bytes),
        // The writer's helper is creating the next segment (created, not sized yet): it is
        // blank as far as a reader is concerned, like a sized one without a header.
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => Ok(HeaderState::Blank),
        Err(error) => Err(JournalError::io(path, "read segment header", error)),
    }
}

/// Whether `path` still names the file `file_id` (device, inode) identifies.
fn names_file(path: &Path, file_id: FileId) -> Result<bool, JournalError> {
    match std::fs::metadata(path) {
        Ok(metadata) => Ok((metadata.dev(), metadata.ino()) == file_id),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(JournalError::io(path, "stat", error)),
    }
}

/// Map a segment with a published header (`None` if it is still blank).
fn map_segment(path: &Path) -> Result<Option<ReadSegment>, JournalError> {
    let Some((mapped, _)) = map_file(path)? else {
        return Ok(None);
    };
    match SegmentHeader::load_published(path, mapped.bytes)? {
        HeaderState::Blank => Ok(None),
        HeaderState::Valid(header) if header.segment_bytes != mapped.bytes.len() as u64 => {
            Err(corrupt(
                path,
                48,
                "file length differs from the header's segment size",
            ))
        }
        HeaderState::Valid(header) => Ok(Some(ReadSegment {
            path: path.to_path_buf(),
            header,
            bytes: mapped.bytes,
            _map: mapped.map,
        })),
    }
}

/// Map a whole segment file read-only, with its device and inode; `None` if it does not
/// exist (yet) or is too short.
fn map_file(path: &Path) -> Result<Option<(Mapped, FileId)>, JournalError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(JournalError::io(path, "open segment", error)),
    };
    let metadata = file
        .metadata()
        .map_err(|e| JournalError::io(path, "stat", e))?;
    if metadata.len() < HEADER_BYTES + SEAL_BYTES {
        return Ok(None);
    }
    let file_id = (metadata.dev(), metadata.ino());
    Mapped::read_only(path, &file).map(|mapped| Some((mapped, file_id)))
}
