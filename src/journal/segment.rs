//! Segment files: naming, the versioned 64-byte header, preallocation and mapping.
//!
//! Header layout (little-endian, 64 bytes, at offset 0 of every segment):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 8 | magic `BOURSEJ\x01` — the header's commit word, stored last with Release |
//! | 8  | 4 | format version |
//! | 12 | 4 | header bytes (64) |
//! | 16 | 8 | segment index (1, 2, 3, … = the file name) |
//! | 24 | 8 | first sequence number in this segment |
//! | 32 | 8 | day epoch: unix ns of midnight UTC of the journal's day (same in every segment) |
//! | 40 | 8 | creation wall-clock time of the file, unix ns |
//! | 48 | 8 | segment bytes (the file length) |
//! | 56 | 4 | max payload bytes the writer used (bounds a torn record during recovery) |
//! | 60 | 4 | CRC32C of bytes 0..60 (magic included) |
//!
//! A preallocated segment that the writer has not started yet has an all-zero header ("blank").

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::{Advice, MmapOptions, MmapRaw};

use super::JournalError;
use super::shared::SharedBytes;

pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"BOURSEJ\x01");
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_BYTES: u64 = 64;
/// Largest first sequence number a header may carry (2^62).
pub const MAX_FIRST_SEQ: u64 = 1 << 62;
pub const SEGMENT_SUFFIX: &str = ".seg";
/// Segment sizes are whole pages so msync ranges and preallocation stay simple.
pub const PAGE_BYTES: u64 = 4096;

const _: () = assert!(HEADER_BYTES.is_multiple_of(8));
const _: () = assert!(HEADER_BYTES <= PAGE_BYTES);

/// The decoded fields of a segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub segment_index: u64,
    pub first_seq: u64,
    pub day_epoch_unix_ns: u64,
    pub created_unix_ns: u64,
    pub segment_bytes: u64,
    pub max_payload_bytes: u32,
}

/// What the first 64 bytes of a segment file hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderState {
    /// All zero: preallocated, not started (or its header never reached the disk).
    Blank,
    Valid(SegmentHeader),
}

impl SegmentHeader {
    /// The 64 header bytes, magic included (the writer stores the magic word last).
    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        assert!(self.segment_index >= 1);
        assert!(self.first_seq >= 1);
        assert!(self.segment_bytes.is_multiple_of(PAGE_BYTES));
        let mut bytes = [0u8; HEADER_BYTES as usize];
        bytes[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.segment_index.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.first_seq.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.day_epoch_unix_ns.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        bytes[48..56].copy_from_slice(&self.segment_bytes.to_le_bytes());
        bytes[56..60].copy_from_slice(&self.max_payload_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[0..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decode and check a header; `path` only names the file in errors.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<HeaderState, JournalError> {
        if bytes.len() < HEADER_BYTES as usize {
            return Err(foreign(path, "shorter than a segment header"));
        }
        let bytes = &bytes[..HEADER_BYTES as usize];
        if bytes.iter().all(|&b| b == 0) {
            return Ok(HeaderState::Blank);
        }
        if u64_at(bytes, 0) != SEGMENT_MAGIC {
            return Err(foreign(path, "bad magic"));
        }
        let version = u32_at(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(JournalError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if crc32c::crc32c(&bytes[0..60]) != u32_at(bytes, 60) {
            return Err(corrupt(path, 0, "segment header checksum mismatch"));
        }
        if u32_at(bytes, 12) as u64 != HEADER_BYTES {
            return Err(corrupt(path, 12, "segment header size is not 64"));
        }
        let header = SegmentHeader {
            segment_index: u64_at(bytes, 16),
            first_seq: u64_at(bytes, 24),
            day_epoch_unix_ns: u64_at(bytes, 32),
            created_unix_ns: u64_at(bytes, 40),
            segment_bytes: u64_at(bytes, 48),
            max_payload_bytes: u32_at(bytes, 56),
        };
        if header.segment_index == 0 || header.first_seq == 0 {
            return Err(corrupt(
                path,
                16,
                "segment index or first sequence number is 0",
            ));
        }
        if header.first_seq > MAX_FIRST_SEQ {
            // Far beyond any real journal; keeps every later sequence number (at most one
            // per 32 bytes of segments) from overflowing.
            return Err(corrupt(path, 24, "first sequence number out of range"));
        }
        Ok(HeaderState::Valid(header))
    }

    /// Publish the header into a mapping: body first, then the magic word with Release so a
    /// reader that sees the magic (Acquire) sees the whole header.
    ///
    /// # Safety
    /// The caller is the mapping's only writer.
    pub unsafe fn publish(&self, map: SharedBytes) {
        assert!(map.len() as u64 == self.segment_bytes);
        assert!(map.load_u64_acquire(0) == 0, "header published twice");
        let bytes = self.encode();
        // SAFETY: only writer (the caller's contract); readers look at the body only after
        // an Acquire load of the magic word sees it non-zero.
        unsafe {
            map.write(8, &bytes[8..]);
            map.store_u64_release(0, SEGMENT_MAGIC);
        }
    }

    /// Read a published header from a live mapping (Acquire on the magic word first).
    pub fn load_published(path: &Path, map: SharedBytes) -> Result<HeaderState, JournalError> {
        if map.len() < HEADER_BYTES as usize {
            return Err(foreign(path, "shorter than a segment header"));
        }
        if map.load_u64_acquire(0) == 0 {
            return Ok(HeaderState::Blank);
        }
        // The header is frozen once its magic word is published: a plain copy is fine.
        let mut bytes = [0u8; HEADER_BYTES as usize];
        map.copy_out(0, &mut bytes);
        SegmentHeader::decode(path, &bytes)
    }
}

pub fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

pub fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

pub fn foreign(path: &Path, reason: &'static str) -> JournalError {
    JournalError::ForeignFile {
        path: path.to_path_buf(),
        reason,
    }
}

pub fn corrupt(path: &Path, offset_bytes: u64, reason: &'static str) -> JournalError {
    JournalError::Corrupt {
        path: path.to_path_buf(),
        offset_bytes,
        reason,
    }
}

/// `00000001.seg`, `00000002.seg`, …: zero-padded so a plain listing sorts in order.
pub fn segment_path(dir: &Path, segment_index: u64) -> PathBuf {
    assert!(segment_index >= 1);
    dir.join(format!("{segment_index:08}{SEGMENT_SUFFIX}"))
}

/// The segment index a file name encodes, or `None` if it is not a segment name.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index: u64 = digits.parse().ok()?;
    (index >= 1).then_some(index)
}

/// Directory entries that may live next to segments without being segments.
const ALLOWED_NAMES: [&str; 4] = [
    "snapshots",
    // The session's message stores (`crate::stream::store_dir`).
    "stores",
    super::manifest::MANIFEST_NAME,
    super::manifest::MANIFEST_TMP_NAME,
];

/// The segment files of a journal directory in index order. Any other entry is a foreign
/// file; indexes must run 1, 2, 3, … without a hole.
pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, JournalError> {
    let entries = std::fs::read_dir(dir).map_err(|e| dir_error(dir, e))?;
    let mut segments: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| JournalError::io(dir, "list directory", e))?;
        let path = entry.path();
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(foreign(&path, "file name is not UTF-8"));
        };
        if ALLOWED_NAMES.contains(&name) {
            continue;
        }
        let Some(index) = parse_segment_name(name) else {
            return Err(foreign(&path, "unexpected file in the journal directory"));
        };
        let file_type = entry
            .file_type()
            .map_err(|e| JournalError::io(&path, "stat", e))?;
        if !file_type.is_file() {
            return Err(foreign(&path, "not a regular file"));
        }
        segments.push((index, path));
    }
    segments.sort_unstable_by_key(|(index, _)| *index);
    for (position, (index, path)) in segments.iter().enumerate() {
        let expected = position as u64 + 1;
        if *index != expected {
            return Err(JournalError::Gap {
                path: path.clone(),
                offset_bytes: 0,
                expected,
                found: *index,
                what: "segment index",
            });
        }
    }
    Ok(segments)
}

/// Map errors on the directory itself to the clear variants.
pub fn dir_error(dir: &Path, error: std::io::Error) -> JournalError {
    match error.kind() {
        std::io::ErrorKind::NotFound => JournalError::MissingDirectory {
            path: dir.to_path_buf(),
        },
        std::io::ErrorKind::NotADirectory => JournalError::NotADirectory {
            path: dir.to_path_buf(),
        },
        _ => JournalError::io(dir, "read directory", error),
    }
}

pub fn now_unix_ns() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// A segment file mapped read-write. Its bytes are reached only through [`SharedBytes`]
/// (`bytes()`): the mapping is never borrowed as a slice, because readers in this process map
/// the same file and read it while the writer appends.
pub struct MappedSegment {
    pub segment_index: u64,
    pub path: PathBuf,
    pub created_unix_ns: u64,
    /// Owns the mapping; used only for msync and madvise (syscalls). A raw mapping hands out
    /// its pointer without ever making a slice reference (`MmapMut` would, through `Deref`).
    map: MmapRaw,
    bytes: SharedBytes,
    // Kept open so the mapping's file stays the one we preallocated (and for future fsyncs).
    _file: File,
}

impl MappedSegment {
    pub fn segment_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The mapping's bytes, valid while `self` lives.
    pub fn bytes(&self) -> SharedBytes {
        self.bytes
    }

    /// Create a new, blank segment file: preallocate real blocks (so a full disk is an error
    /// here, not a SIGBUS later when a store through the mapping finds no block), make the
    /// file and its directory entry durable, map it and prefault its pages writable.
    pub fn create(
        dir: &Path,
        segment_index: u64,
        segment_bytes: u64,
    ) -> Result<Self, JournalError> {
        Self::create_with(dir, segment_index, segment_bytes, false)
    }

    /// As [`MappedSegment::create`], but a file already there (a spare that recovery found
    /// all zero) is emptied and made the segment instead of being an error. Removing the
    /// spare first would open a window where a sealed segment has no successor on disk.
    pub fn create_or_reuse(
        dir: &Path,
        segment_index: u64,
        segment_bytes: u64,
    ) -> Result<Self, JournalError> {
        Self::create_with(dir, segment_index, segment_bytes, true)
    }

    fn create_with(
        dir: &Path,
        segment_index: u64,
        segment_bytes: u64,
        reuse: bool,
    ) -> Result<Self, JournalError> {
        assert!(segment_bytes.is_multiple_of(PAGE_BYTES) && segment_bytes >= 2 * PAGE_BYTES);
        let path = segment_path(dir, segment_index);
        // Reusing truncates to 0 first: interrupted anywhere, the file is still all zero.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(!reuse)
            .create(reuse)
            .truncate(reuse)
            .open(&path)
            .map_err(|e| JournalError::io(&path, "create segment", e))?;
        let prepared = preallocate(&file, &path, segment_bytes).and_then(|()| {
            file.sync_all()
                .map_err(|e| JournalError::io(&path, "fsync segment", e))?;
            sync_dir(dir)?;
            Self::map(file, path.clone(), segment_index, segment_bytes)
        });
        if prepared.is_err() && !reuse {
            // Leave no half-made file behind: recovery would have to explain it. (A reused
            // spare stays: all zero, it is still a spare, and it may be a sealed segment's
            // required successor.)
            let _ = std::fs::remove_file(&path);
        }
        let mut segment = prepared?;
        segment.created_unix_ns = now_unix_ns();
        segment.prefault(0);
        Ok(segment)
    }

    /// Open an existing segment read-write (recovery hands the last one to the writer).
    pub fn open(path: &Path, segment_index: u64) -> Result<Self, JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| JournalError::io(path, "open segment", e))?;
        let bytes = file
            .metadata()
            .map_err(|e| JournalError::io(path, "stat", e))?
            .len();
        Self::map(file, path.to_path_buf(), segment_index, bytes)
    }

    fn map(
        file: File,
        path: PathBuf,
        segment_index: u64,
        bytes: u64,
    ) -> Result<Self, JournalError> {
        let len = usize::try_from(bytes).map_err(|_| foreign(&path, "too large to map"))?;
        // The journal directory is owned by this writer (directory lock); other processes
        // only read. Concurrent access goes through `SharedBytes`.
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| JournalError::io(&path, "map segment", e))?;
        // SAFETY: the pointer comes from the mapping itself (no slice reference is made), is
        // page aligned, and stays valid while `map` lives, i.e. as long as `self`: moving an
        // `MmapRaw` does not move the mapping. The file is preallocated to `len` bytes and
        // never shortened while mapped (truncation runs with no writer).
        let bytes = unsafe { SharedBytes::new(map.as_mut_ptr(), map.len()) };
        Ok(MappedSegment {
            segment_index,
            path,
            created_unix_ns: 0,
            map,
            bytes,
            _file: file,
        })
    }

    /// Fault the pages from `offset_bytes` on in writable, so the appending thread never takes
    /// a page fault (MADV_POPULATE_WRITE does not change the contents: safe while a reader
    /// maps the file). Best effort: an old kernel only costs latency, not correctness.
    pub fn prefault(&self, offset_bytes: u64) {
        let start = offset_bytes / PAGE_BYTES * PAGE_BYTES;
        let len = self.segment_bytes().saturating_sub(start);
        if len == 0 {
            return;
        }
        if let Err(error) =
            self.map
                .advise_range(Advice::PopulateWrite, start as usize, len as usize)
        {
            tracing::debug!(%error, path = %self.path.display(), "MADV_POPULATE_WRITE failed");
        }
    }

    /// msync `[start, end)` of this segment (page-aligned down by memmap2).
    pub fn sync_range(&self, start_bytes: u64, end_bytes: u64) -> Result<(), JournalError> {
        assert!(start_bytes <= end_bytes && end_bytes <= self.segment_bytes());
        if start_bytes == end_bytes {
            return Ok(());
        }
        self.map
            .flush_range(start_bytes as usize, (end_bytes - start_bytes) as usize)
            .map_err(|e| JournalError::io(&self.path, "msync segment", e))
    }
}

fn preallocate(file: &File, path: &Path, segment_bytes: u64) -> Result<(), JournalError> {
    let len = libc::off_t::try_from(segment_bytes).map_err(|_| JournalError::InvalidConfig {
        reason: "segment_bytes too large".into(),
    })?;
    // SAFETY: plain syscall on an fd we own.
    let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if code == 0 {
        return Ok(());
    }
    if code == libc::EOPNOTSUPP || code == libc::EINVAL {
        // A file system without fallocate: fall back to a (sparse) set_len.
        return file
            .set_len(segment_bytes)
            .map_err(|e| JournalError::io(path, "size segment", e));
    }
    Err(JournalError::io(
        path,
        "preallocate segment",
        std::io::Error::from_raw_os_error(code),
    ))
}

/// fsync the directory so a created or removed segment's entry survives a machine crash.
pub fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    let handle = File::open(dir).map_err(|e| dir_error(dir, e))?;
    handle
        .sync_all()
        .map_err(|e| JournalError::io(dir, "fsync directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SegmentHeader {
        SegmentHeader {
            segment_index: 3,
            first_seq: 1001,
            day_epoch_unix_ns: 1_700_000_000_000_000_000,
            created_unix_ns: 1_700_000_123_000_000_000,
            segment_bytes: 1 << 20,
            max_payload_bytes: 4096,
        }
    }

    #[test]
    fn header_round_trip() {
        let header = sample();
        let bytes = header.encode();
        assert_eq!(&bytes[0..8], b"BOURSEJ\x01");
        let decoded = SegmentHeader::decode(Path::new("x.seg"), &bytes).unwrap();
        assert_eq!(decoded, HeaderState::Valid(header));
    }

    #[test]
    fn header_rejects_damage() {
        let path = Path::new("00000003.seg");
        let good = sample().encode();
        assert_eq!(
            SegmentHeader::decode(path, &[0u8; 64]).unwrap(),
            HeaderState::Blank
        );
        for offset in 0..HEADER_BYTES as usize {
            let mut bad = good;
            bad[offset] ^= 0x40;
            let error = SegmentHeader::decode(path, &bad).unwrap_err();
            assert!(!error.to_string().is_empty());
        }
        let mut wrong_version = sample().encode();
        wrong_version[8] = 9;
        assert!(matches!(
            SegmentHeader::decode(path, &wrong_version),
            Err(JournalError::UnsupportedVersion { found: 9, .. })
        ));
        let text = b"hello, this is not a journal segment at all; some text file ....";
        assert!(matches!(
            SegmentHeader::decode(path, text),
            Err(JournalError::ForeignFile { .. })
        ));
    }

    /// The header is published magic-last: a reader thread polling the magic word sees either
    /// a blank header or the whole one (checked for races by Miri, `tools/miri.sh`).
    #[test]
    fn published_header_is_seen_whole_by_another_thread() {
        use super::super::shared::HeapBytes;
        let header = SegmentHeader {
            segment_bytes: 8192,
            ..sample()
        };
        let heap = std::sync::Arc::new(HeapBytes::zeroed(8192));
        let reader_heap = std::sync::Arc::clone(&heap);
        let reader = std::thread::spawn(move || {
            for _ in 0..100_000 {
                match SegmentHeader::load_published(Path::new("x.seg"), reader_heap.view()) {
                    Ok(HeaderState::Blank) => {
                        std::thread::sleep(std::time::Duration::from_micros(10))
                    }
                    Ok(HeaderState::Valid(found)) => return found,
                    Err(error) => panic!("torn header: {error}"),
                }
            }
            panic!("header never published");
        });
        // SAFETY: this thread is the only writer.
        unsafe { header.publish(heap.view()) };
        assert_eq!(reader.join().expect("reader"), header);
        let mut bytes = [0u8; 64];
        heap.view().copy_out(0, &mut bytes);
        assert_eq!(bytes, header.encode());
    }

    #[test]
    fn names_sort_and_parse() {
        let dir = Path::new("/j");
        assert_eq!(segment_path(dir, 1), Path::new("/j/00000001.seg"));
        assert_eq!(parse_segment_name("00000001.seg"), Some(1));
        assert_eq!(parse_segment_name("123456789.seg"), Some(123_456_789));
        assert_eq!(parse_segment_name("00000000.seg"), None);
        assert_eq!(parse_segment_name("1.seg"), None);
        assert_eq!(parse_segment_name("0000000a.seg"), None);
        assert_eq!(parse_segment_name("00000001.seg.tmp"), None);
    }
}
