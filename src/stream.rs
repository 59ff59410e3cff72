//! Sequenced message streams: the whole session's ITCH messages (for the re-request server)
//! and each account's OUCH messages (for replay on re-login).
//!
//! One writer appends; any number of readers on other threads read every message already
//! published. A stream is one reserved mapping — a header page, an index of end offsets (8
//! bytes a message) and the message bytes — so appending is a `memcpy` into it: it never
//! allocates, never makes a system call and never moves data under a reader. A full stream
//! refuses the append; the caller decides what that means (the venue stops taking orders
//! rather than losing what it said).
//!
//! **Stores** ([`StreamWriter::create`], [`StreamWriter::open`]) map a sparse file next to the
//! journal (`<day>/stores/`, see [`store_dir`]) with `MAP_SHARED`: what is written lives in
//! the page cache and reaches the file by the kernel's writeback, not in the process's
//! anonymous memory. Written pages would still count in the process's RSS (as `RssFile`)
//! while they stay mapped, so a keeper thread (`keeper`) drops the mapping of every page
//! more than [`KEEP_BYTES`] behind the published end (`MADV_DONTNEED`: on a shared file
//! mapping that unmaps the page and keeps its contents in the page cache; a reader that looks
//! at it again faults it back in, then it is dropped again) and maps the pages just ahead of
//! the writer (`MADV_POPULATE_WRITE`), so the writer's first touch of a page does not fault
//! into the file system on the hot path. It also reserves the file's blocks ahead of the
//! writer (`fallocate`): a write into a hole the file system cannot fill would be a SIGBUS,
//! so a refused reservation makes the store full instead. Reserved address space is not
//! memory: only touched page tables and pages cost anything.
//!
//! [`stream`] keeps the anonymous variant (tests, Miri).
//!
//! Streams are derived from the journal: the daemon rebuilds them by replay at start
//! ([`StreamWriter::create`] starts a store afresh). A restart from a state snapshot instead
//! reopens them ([`StreamWriter::open`]) and cuts them to the snapshot's positions
//! ([`StreamWriter::truncate_to`]) before it replays the journal's tail.

use crate::journal::shared::SharedBytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Bytes of index per message: the end offset of the message in the data area.
const INDEX_ENTRY_BYTES: u64 = 8;
/// The header page: magic, format, capacities, published and synced counts, boot id.
const HEADER_BYTES: u64 = 4096;
const PAGE_BYTES: u64 = 4096;
const MAGIC: [u8; 8] = *b"BRSSTORE";
const FORMAT: u64 = 1;
const AT_MAGIC: usize = 0;
const AT_FORMAT: usize = 8;
const AT_BYTES: usize = 16;
const AT_MESSAGES: usize = 24;
/// Messages published (readers may read 1..=published). Stored with Release by the writer.
const AT_PUBLISHED: usize = 32;
/// Messages known on disk (msynced by [`StreamReader::sync`]); trusted after a reboot.
const AT_SYNCED: usize = 40;
/// The kernel boot id of the last writer: a store written under another boot may have lost
/// pages that were never synced.
const AT_BOOT_ID: usize = 48;

/// Pages this far behind the published end stay mapped (what live readers read next).
pub const KEEP_BYTES: u64 = 1 << 20;
/// The keeper's interval.
pub const KEEPER_INTERVAL_MS: u64 = 50;
/// Every this many rounds the keeper drops the whole cold range again (readers of old
/// messages — a re-login replay from 1, a re-request — fault pages back in).
const KEEPER_FULL_ROUNDS: u64 = 20;
/// Pages mapped ahead of the writer: twice what it wrote in the last interval, within these.
const AHEAD_BYTES_MIN: u64 = 64 << 10;
const AHEAD_BYTES_MAX: u64 = 4 << 20;
/// Disk blocks reserved (`fallocate`) ahead of a writer, and ahead of an idle store: a write
/// into a mapped hole the file system cannot fill would be a SIGBUS; a failed reservation
/// makes the store full instead (the venue stops taking orders, as at its caps).
///
/// A store being written reserves `RESERVE_RATE_ROUNDS` keeper rounds of what it wrote in
/// the last one, within [`RESERVE_ACTIVE_MIN_BYTES`, `RESERVE_AHEAD_BYTES`]: a flat 64 MiB
/// per store took 35 GB of disk for a 1,000-account day before it listened (its first start
/// rebuilds every account's store). A store jumping from slow to more than 4 MiB in one 50 ms
/// round (80 MB/s: five times the whole venue's live output at its measured capacity) would
/// outrun its reservation, as one jumping past 64 MiB did before.
const RESERVE_AHEAD_BYTES: u64 = 64 << 20;
const RESERVE_ACTIVE_MIN_BYTES: u64 = 4 << 20;
const RESERVE_RATE_ROUNDS: u64 = 64;
const RESERVE_IDLE_BYTES: u64 = 64 << 10;
/// Streams the keeper looks after at once (every account's store and the ITCH store of a few
/// nodes in one process).
pub const KEPT_STREAMS_MAX: usize = 1 << 18;

/// The capacities of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub bytes: u64,
    pub messages: u64,
}

impl Caps {
    /// A store of `bytes` of messages averaging 16 bytes or more (the index is half the
    /// data: 8 bytes a message).
    pub const fn for_bytes(bytes: u64) -> Caps {
        Caps {
            bytes,
            messages: bytes / 16,
        }
    }

    fn index_at(&self) -> u64 {
        HEADER_BYTES
    }

    fn data_at(&self) -> u64 {
        let index_end = HEADER_BYTES + self.messages * INDEX_ENTRY_BYTES;
        index_end.div_ceil(PAGE_BYTES) * PAGE_BYTES
    }

    fn mapping_bytes(&self) -> u64 {
        (self.data_at() + self.bytes).div_ceil(PAGE_BYTES) * PAGE_BYTES
    }
}

/// The directory of a journal's message stores.
pub fn store_dir(journal_dir: &Path) -> PathBuf {
    journal_dir.join("stores")
}

/// Owns the mapping, reached only through a [`SharedBytes`] view: readers hold `&[u8]` into
/// published messages while the writer appends past them, so nothing may ever borrow the
/// whole area (as `MmapMut`'s `Deref` would).
struct Storage {
    raw: memmap2::MmapRaw,
    /// The file of a shared file mapping (only those may be tended: `MADV_DONTNEED` on
    /// anonymous memory would zero it); kept open to reserve its blocks ahead of the writer.
    file: Option<std::fs::File>,
}

impl Storage {
    fn view(&self) -> SharedBytes {
        // SAFETY: a mapping of `len` bytes, page aligned, owned by this `Storage` and unmapped
        // only when it drops; the pointer is taken without making a reference.
        unsafe { SharedBytes::new(self.raw.as_mut_ptr(), self.raw.len()) }
    }
}

/// What the keeper remembers of one region (index or data) of a store.
#[derive(Default)]
struct RegionMarks {
    /// Mapping offset below which pages were dropped.
    dropped: u64,
    /// Mapping offset below which pages were populated ahead of the writer.
    populated: u64,
    /// The region's published end at the last round.
    last_end: u64,
    /// Mapping offset below which the file's blocks are reserved.
    reserved: u64,
}

#[derive(Default)]
struct KeeperMarks {
    index: RegionMarks,
    data: RegionMarks,
}

struct Shared {
    view: SharedBytes,
    caps: Caps,
    /// Readers alive ([`StreamWriter::truncate_to`] must have none).
    readers: AtomicU64,
    /// The keeper thread locks it each round; the writer only when it outruns the blocks
    /// reserved ahead of it (then it may wait for a keeper round in progress).
    marks: Mutex<KeeperMarks>,
    /// The file system refused to reserve blocks ahead: the writer refuses appends.
    no_space: std::sync::atomic::AtomicBool,
    /// Mapping offsets below which the file's blocks are reserved, of the index region and
    /// of the data region (`u64::MAX` for an anonymous store): copies of the keeper's marks
    /// the writer reads before each append, so that it never writes into a hole.
    reserved_index: AtomicU64,
    reserved_data: AtomicU64,
    /// Tests: reservations fail as on a full file system.
    #[cfg(test)]
    fail_reservations: std::sync::atomic::AtomicBool,
    // Declared last: dropped (unmapped) after everything above.
    storage: Storage,
}

/// The single writer of a stream.
pub struct StreamWriter {
    shared: Arc<Shared>,
    /// Messages appended (held ones included).
    count: u64,
    /// Messages readers may see.
    published: u64,
    end_bytes: u64,
}

/// A reader of a stream; cheap to clone and send to other threads.
pub struct StreamReader {
    shared: Arc<Shared>,
}

impl Clone for StreamReader {
    fn clone(&self) -> Self {
        StreamReader::of(&self.shared)
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        self.shared.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamFull;

impl std::fmt::Display for StreamFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("message stream is full")
    }
}

impl std::error::Error for StreamFull {}

/// Reserve an anonymous stream of at most `capacity_bytes` of message data and
/// `capacity_messages` (tests; the daemon's streams are stores).
pub fn stream(
    capacity_bytes: u64,
    capacity_messages: u64,
) -> std::io::Result<(StreamWriter, StreamReader)> {
    let caps = Caps {
        bytes: capacity_bytes,
        messages: capacity_messages,
    };
    check_caps(caps)?;
    let len = usize::try_from(caps.mapping_bytes()).map_err(|_| too_large())?;
    let raw = memmap2::MmapRaw::from(memmap2::MmapMut::map_anon(len)?);
    let shared = Shared::new(Storage { raw, file: None }, caps);
    shared.write_header();
    let writer = StreamWriter::at(Arc::new(shared), 0);
    let reader = writer.reader();
    Ok((writer, reader))
}

fn check_caps(caps: Caps) -> std::io::Result<()> {
    if caps.bytes == 0 || caps.messages == 0 {
        return Err(std::io::Error::other(
            "a stream holds at least one byte and one message",
        ));
    }
    if caps.messages.checked_mul(INDEX_ENTRY_BYTES).is_none()
        || caps
            .bytes
            .checked_add(caps.messages * INDEX_ENTRY_BYTES + 2 * PAGE_BYTES)
            .is_none()
    {
        return Err(too_large());
    }
    Ok(())
}

fn too_large() -> std::io::Error {
    std::io::Error::other("stream capacity exceeds the address space")
}

fn with_path(path: &Path, what: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

impl Shared {
    fn new(storage: Storage, caps: Caps) -> Shared {
        Shared {
            view: storage.view(),
            caps,
            readers: AtomicU64::new(0),
            marks: Mutex::new(KeeperMarks::default()),
            no_space: std::sync::atomic::AtomicBool::new(false),
            // A file store reserves before its first append (`reserve_now`, or the writer).
            reserved_index: AtomicU64::new(if storage.file.is_some() { 0 } else { u64::MAX }),
            reserved_data: AtomicU64::new(if storage.file.is_some() { 0 } else { u64::MAX }),
            #[cfg(test)]
            fail_reservations: std::sync::atomic::AtomicBool::new(false),
            storage,
        }
    }

    /// A fresh header (no reader exists yet).
    fn write_header(&self) {
        // SAFETY: called before any reader or writer of this storage exists.
        unsafe {
            self.view.write(AT_MAGIC, &MAGIC);
            self.view.write(AT_FORMAT, &FORMAT.to_ne_bytes());
            self.view.write(AT_BYTES, &self.caps.bytes.to_ne_bytes());
            self.view
                .write(AT_MESSAGES, &self.caps.messages.to_ne_bytes());
            self.view.store_u64_release(AT_PUBLISHED, 0);
            self.view.store_u64_release(AT_SYNCED, 0);
            // Only a file outlives this boot (and Miri, which runs the anonymous tests, may
            // not read /proc).
            let boot = if self.storage.file.is_some() {
                boot_id()
            } else {
                [0; 16]
            };
            self.view.write(AT_BOOT_ID, &boot);
        }
    }

    fn header_u64(&self, at: usize) -> u64 {
        let mut word = [0u8; 8];
        self.view.copy_out(at, &mut word);
        u64::from_ne_bytes(word)
    }

    fn published(&self) -> u64 {
        self.view.load_u64_acquire(AT_PUBLISHED)
    }

    /// End offset (in the data area) of the first `count` messages (0 for none). `count` must
    /// be published (loaded with Acquire) or the caller the writer: its entry is then written
    /// and not written again while a reader can see it.
    fn end_offset(&self, count: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        let mut entry = [0u8; INDEX_ENTRY_BYTES as usize];
        let at = self.caps.index_at() + (count - 1) * INDEX_ENTRY_BYTES;
        self.view.copy_out(at as usize, &mut entry);
        u64::from_ne_bytes(entry)
    }
}

/// This boot of the kernel (zero if unknown: then never "the same boot").
fn boot_id() -> [u8; 16] {
    crate::journal::manifest::current_boot_id()
}

impl StreamWriter {
    fn at(shared: Arc<Shared>, count: u64) -> StreamWriter {
        let end_bytes = shared.end_offset(count);
        StreamWriter {
            shared,
            count,
            published: count,
            end_bytes,
        }
    }

    /// Start the store at `path` afresh (empty), reserving `caps` as a sparse file (directory
    /// created if missing). An existing store is replaced, not cut: a new file is renamed over
    /// it, so readers of the old one (mapped) keep reading what it held.
    pub fn create(path: &Path, caps: Caps) -> std::io::Result<(StreamWriter, StreamReader)> {
        Self::create_tended(path, caps, true)
    }

    /// [`Self::create`]; `tended: false` (tests) leaves it out of the keeper's rounds.
    fn create_tended(
        path: &Path,
        caps: Caps,
        tended: bool,
    ) -> std::io::Result<(StreamWriter, StreamReader)> {
        check_caps(caps)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| with_path(dir, "cannot create", e))?;
        }
        let mut fresh = path.as_os_str().to_owned();
        fresh.push(".new");
        let fresh = PathBuf::from(fresh);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&fresh)
            .map_err(|e| with_path(&fresh, "cannot create", e))?;
        file.set_len(caps.mapping_bytes())
            .map_err(|e| with_path(&fresh, "cannot size (sparse)", e))?;
        let raw = memmap2::MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| with_path(&fresh, "cannot map", e))?;
        let shared = Shared::new(
            Storage {
                raw,
                file: Some(file),
            },
            caps,
        );
        shared.write_header();
        shared
            .reserve_now()
            .map_err(|e| with_path(&fresh, "cannot reserve disk blocks for", e))?;
        std::fs::rename(&fresh, path).map_err(|e| with_path(path, "cannot rename into", e))?;
        let shared = Arc::new(shared);
        if tended {
            keeper().keep(&shared)?;
        }
        let writer = StreamWriter::at(shared, 0);
        let reader = writer.reader();
        Ok((writer, reader))
    }

    /// Reopen the store at `path` (a restart), or create it empty if there is none. Returns
    /// the writer and the messages it holds: every published message if this boot of the
    /// kernel wrote it (a process crash loses nothing: the page cache has it), only the ones
    /// [`StreamReader::sync`] put on disk if the machine restarted since. Anything after that
    /// count is overwritten by later appends. No reader exists until
    /// [`StreamWriter::reader`]; cut the store first ([`Self::truncate_to`]) if the state it
    /// must match is shorter.
    pub fn open(path: &Path, caps: Caps) -> std::io::Result<(StreamWriter, u64)> {
        check_caps(caps)?;
        if !path.exists() {
            let (writer, reader) = Self::create(path, caps)?;
            drop(reader);
            return Ok((writer, 0));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| with_path(path, "cannot open", e))?;
        let file_bytes = file
            .metadata()
            .map_err(|e| with_path(path, "cannot stat", e))?
            .len();
        if file_bytes != caps.mapping_bytes() {
            return Err(std::io::Error::other(format!(
                "{}: a store of {file_bytes} bytes, not the {} these capacities make",
                path.display(),
                caps.mapping_bytes()
            )));
        }
        let raw = memmap2::MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| with_path(path, "cannot map", e))?;
        let shared = Shared::new(
            Storage {
                raw,
                file: Some(file),
            },
            caps,
        );
        let held = shared.trusted_count().map_err(|why| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
            )
        })?;
        // SAFETY: no reader of this storage exists yet and this is its only writer.
        unsafe {
            shared.view.store_u64_release(AT_PUBLISHED, held);
            shared
                .view
                .store_u64_release(AT_SYNCED, shared.header_u64(AT_SYNCED).min(held));
            shared.view.write(AT_BOOT_ID, &boot_id());
        }
        shared
            .reserve_now()
            .map_err(|e| with_path(path, "cannot reserve disk blocks for", e))?;
        let shared = Arc::new(shared);
        keeper().keep(&shared)?;
        Ok((StreamWriter::at(shared, held), held))
    }

    /// Cut the stream to its first `messages` (a restart whose state ends there: a snapshot's
    /// position, or a journal cut back past a torn tail). Only before any reader exists (a
    /// reader may hold the messages being cut).
    pub fn truncate_to(&mut self, messages: u64) {
        assert!(messages <= self.count, "truncating past the end");
        assert_eq!(
            self.shared.readers.load(Ordering::Acquire),
            0,
            "a stream is cut only before it has readers"
        );
        self.count = messages;
        self.published = messages;
        self.end_bytes = self.shared.end_offset(messages);
        let synced = self.shared.header_u64(AT_SYNCED).min(messages);
        // SAFETY: the only writer, and no reader exists (checked above).
        unsafe {
            self.shared.view.store_u64_release(AT_SYNCED, synced);
            self.shared.view.store_u64_release(AT_PUBLISHED, messages);
        }
    }

    /// Append one message and publish it (with everything held before it); returns its
    /// sequence number (1-based, gapless).
    pub fn append(&mut self, message: &[u8]) -> Result<u64, StreamFull> {
        let seq = self.append_held(message)?;
        self.publish_through(seq);
        Ok(seq)
    }

    /// Append one message without publishing it: readers see it once
    /// [`Self::publish_through`] covers it (the output stage holds replies until their
    /// inputs are durable). Returns its sequence number.
    pub fn append_held(&mut self, message: &[u8]) -> Result<u64, StreamFull> {
        let caps = self.shared.caps;
        let start = self.end_bytes;
        let end = start + message.len() as u64;
        if end > caps.bytes || self.count >= caps.messages {
            return Err(StreamFull);
        }
        // The keeper reserves blocks well ahead of a steady writer (at least
        // RESERVE_ACTIVE_MIN_BYTES, and 64 rounds of its rate); a burst that outruns it
        // reserves on this thread (below) rather than write into a hole.
        if self.shared.no_space.load(Ordering::Relaxed) {
            return Err(StreamFull);
        }
        let at = caps.index_at() + self.count * INDEX_ENTRY_BYTES;
        let (index_end, data_end) = (at + INDEX_ENTRY_BYTES, caps.data_at() + end);
        if index_end > self.shared.reserved_index.load(Ordering::Acquire)
            || data_end > self.shared.reserved_data.load(Ordering::Acquire)
        {
            self.shared.reserve_for_writer(index_end, data_end)?;
        }
        // SAFETY: this is the stream's only writer (`StreamWriter` is not Clone); bytes
        // [start, end) and index slot `count` are beyond the published end, so no reader
        // looks at them until the Release store in `publish_through`.
        unsafe {
            self.shared
                .view
                .write((caps.data_at() + start) as usize, message);
            self.shared.view.write(at as usize, &end.to_ne_bytes());
        }
        self.count += 1;
        self.end_bytes = end;
        self.prefetch_ahead(at, caps.data_at() + end);
        Ok(self.count)
    }

    /// Warm the lines a few pages ahead of the writer's index and data: the keeper mapped
    /// those pages, but the kernel zeroed them on the keeper's CPU, and their TLB entries are
    /// cold; a hint now takes the miss off a later append (as the journal's writer does).
    #[inline(always)]
    fn prefetch_ahead(&self, index_at: u64, data_at: u64) {
        const AHEAD_BYTES: u64 = 4 * PAGE_BYTES;
        let limit = self.shared.caps.mapping_bytes();
        let base = self.shared.view.as_ptr();
        for offset in [index_at + AHEAD_BYTES, data_at + AHEAD_BYTES] {
            if offset < limit {
                // In bounds (checked); only an address for the hint, never dereferenced.
                crate::memory::prefetch_line(base.wrapping_add(offset as usize));
            }
        }
    }

    /// Let readers see every message through `seq` (at most what was appended; never less
    /// than what is already published).
    pub fn publish_through(&mut self, seq: u64) {
        assert!(seq <= self.count, "publishing past the appended end");
        if seq > self.published {
            self.published = seq;
            // SAFETY: the only writer; readers load this word atomically.
            unsafe { self.shared.view.store_u64_release(AT_PUBLISHED, seq) };
        }
    }

    /// Messages published so far.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// Messages appended so far (the last sequence number, held ones included).
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn reader(&self) -> StreamReader {
        StreamReader::of(&self.shared)
    }
}

impl Shared {
    /// The messages of a reopened store that can be trusted, after checking its header and
    /// the index entries that count depends on.
    fn trusted_count(&self) -> Result<u64, String> {
        let mut magic = [0u8; 8];
        self.view.copy_out(AT_MAGIC, &mut magic);
        if magic != MAGIC || self.header_u64(AT_FORMAT) != FORMAT {
            return Err("not a message store (bad magic or format)".into());
        }
        let caps = (self.header_u64(AT_BYTES), self.header_u64(AT_MESSAGES));
        if caps != (self.caps.bytes, self.caps.messages) {
            return Err(format!(
                "made with capacities {caps:?}, not {:?}",
                self.caps
            ));
        }
        let published = self.header_u64(AT_PUBLISHED);
        let synced = self.header_u64(AT_SYNCED);
        let mut written_by = [0u8; 16];
        self.view.copy_out(AT_BOOT_ID, &mut written_by);
        let same_boot = written_by != [0; 16] && written_by == boot_id();
        let held = if same_boot {
            published
        } else {
            synced.min(published)
        };
        if held > self.caps.messages {
            return Err(format!("claims {held} messages, more than its capacity"));
        }
        // The last two ends bound what a reader will slice.
        let (before, end) = (
            self.end_offset(held.saturating_sub(1)),
            self.end_offset(held),
        );
        if before > end || end > self.caps.bytes {
            return Err(format!(
                "index entry {held} is out of order or past the data"
            ));
        }
        Ok(held)
    }
}

impl StreamReader {
    fn of(shared: &Arc<Shared>) -> StreamReader {
        shared.readers.fetch_add(1, Ordering::AcqRel);
        StreamReader {
            shared: Arc::clone(shared),
        }
    }

    /// Messages published so far.
    pub fn len(&self) -> u64 {
        self.shared.published()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the published messages from `seq` (1-based) to the end; 0 when none.
    pub fn bytes_from(&self, seq: u64) -> u64 {
        let len = self.len();
        if seq == 0 || seq > len {
            return 0;
        }
        self.shared.end_offset(len) - self.shared.end_offset(seq - 1)
    }

    /// The message with sequence number `seq` (1-based), if published.
    pub fn get(&self, seq: u64) -> Option<&[u8]> {
        if seq == 0 || seq > self.len() {
            return None;
        }
        let end = self.shared.end_offset(seq);
        let start = self.shared.end_offset(seq - 1);
        let caps = self.shared.caps;
        assert!(start <= end && end <= caps.bytes);
        // SAFETY: message `seq` is published (Acquire above), so its bytes are written and
        // never written again while a reader exists (`truncate_to` requires none); the
        // storage lives as long as `self.shared`, which the borrow of `self` keeps alive.
        Some(unsafe {
            self.shared
                .view
                .slice((caps.data_at() + start) as usize, (end - start) as usize)
        })
    }

    /// Put every published message of a store on disk (`msync`, off the hot path: it waits
    /// for the writes) and record how many, so that a reopen after a machine restart trusts
    /// them. Returns that count; an anonymous stream has nothing to sync (0).
    pub fn sync(&self) -> std::io::Result<u64> {
        let shared = &self.shared;
        if shared.storage.file.is_none() {
            return Ok(0);
        }
        let published = self.len();
        let data_end = shared.caps.data_at() + shared.end_offset(published);
        shared.storage.raw.flush_range(0, data_end as usize)?;
        // SAFETY: the synced word is written only here and by the writer before readers exist
        // (`open`, `truncate_to`); concurrent `sync` calls store atomically, the lower value
        // being merely conservative.
        unsafe { shared.view.store_u64_release(AT_SYNCED, published) };
        shared.storage.raw.flush_range(0, HEADER_BYTES as usize)?;
        Ok(published)
    }
}

/// The keeper thread: tends every store of the process every [`KEEPER_INTERVAL_MS`] (drops
/// the pages far behind each writer from the mapping, maps the pages just ahead of it). It
/// holds weak references: a store whose writer and readers are gone is unmapped and
/// forgotten.
pub struct Keeper {
    streams: Mutex<Vec<Weak<Shared>>>,
}

static KEEPER: OnceLock<Keeper> = OnceLock::new();

/// The process's keeper (started by the first store).
fn keeper() -> &'static Keeper {
    KEEPER.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("stream-keeper".into())
            .spawn(keeper_loop);
        if let Err(e) = spawned {
            // Without it the stores still work; their written pages stay mapped (RSS grows).
            tracing::error!("cannot start the message stores' keeper thread: {e}");
        }
        Keeper {
            streams: Mutex::new(Vec::with_capacity(64)),
        }
    })
}

impl Keeper {
    fn keep(&self, shared: &Arc<Shared>) -> std::io::Result<()> {
        assert!(shared.storage.file.is_some(), "only file stores are tended");
        let mut streams = self.streams.lock().expect("not poisoned");
        streams.retain(|s| s.strong_count() > 0);
        if streams.len() >= KEPT_STREAMS_MAX {
            return Err(std::io::Error::other(format!(
                "more than {KEPT_STREAMS_MAX} message stores in one process"
            )));
        }
        streams.push(Arc::downgrade(shared));
        Ok(())
    }
}

fn keeper_loop() {
    let mut live: Vec<Arc<Shared>> = Vec::with_capacity(64);
    for round in 1u64.. {
        std::thread::sleep(Duration::from_millis(KEEPER_INTERVAL_MS));
        let Some(keeper) = KEEPER.get() else {
            continue;
        };
        {
            let mut streams = keeper.streams.lock().expect("not poisoned");
            streams.retain(|s| s.strong_count() > 0);
            live.extend(streams.iter().filter_map(Weak::upgrade));
        }
        let full = round.is_multiple_of(KEEPER_FULL_ROUNDS);
        for shared in live.drain(..) {
            shared.tend(full);
        }
    }
}

fn page_floor(offset: u64) -> u64 {
    offset / PAGE_BYTES * PAGE_BYTES
}

fn page_ceil(offset: u64) -> u64 {
    offset.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

impl Shared {
    /// One keeper round for this store; `full` drops the whole cold range again, not only
    /// what went cold since the last round.
    fn tend(&self, full: bool) {
        assert!(self.storage.file.is_some());
        let published = self.published();
        let caps = self.caps;
        let index_end = caps.index_at() + published * INDEX_ENTRY_BYTES;
        let data_end = caps.data_at() + self.end_offset(published);
        let mut marks = self.marks.lock().expect("not poisoned");
        let marks = &mut *marks;
        let index = (&mut marks.index, &self.reserved_index);
        self.tend_region(caps.index_at(), caps.data_at(), index_end, index, full);
        let limit = caps.mapping_bytes();
        let data = (&mut marks.data, &self.reserved_data);
        self.tend_region(caps.data_at(), limit, data_end, data, full);
    }

    /// Tend `[start, limit)` of the mapping, whose published part ends at `end`.
    fn tend_region(
        &self,
        start: u64,
        limit: u64,
        end: u64,
        (marks, reserved): (&mut RegionMarks, &AtomicU64),
        full: bool,
    ) {
        debug_assert!(start.is_multiple_of(PAGE_BYTES) && start <= end && end <= limit);
        let cold_end = page_floor(end.saturating_sub(KEEP_BYTES)).max(start);
        let from = if full {
            start
        } else {
            marks.dropped.max(start)
        };
        if cold_end > from {
            // SAFETY: a shared file mapping: dropping its pages keeps their contents (dirty
            // ones stay in the page cache for writeback) and any later access faults them back
            // in, so no byte anyone reads or writes changes. The range is inside the mapping.
            let dropped = unsafe {
                self.storage.raw.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    from as usize,
                    (cold_end - from) as usize,
                )
            };
            if let Err(e) = dropped {
                tracing::debug!("message store: MADV_DONTNEED failed: {e}");
            }
        }
        marks.dropped = marks.dropped.max(cold_end);
        let grown = end.saturating_sub(marks.last_end.max(start));
        marks.last_end = end;
        let reserve = if grown > 0 {
            grown
                .saturating_mul(RESERVE_RATE_ROUNDS)
                .clamp(RESERVE_ACTIVE_MIN_BYTES, RESERVE_AHEAD_BYTES)
        } else {
            RESERVE_IDLE_BYTES
        };
        self.reserve(marks, reserved, end, reserve, limit);
        // Only a region being written gets pages ahead: an idle account's store costs nothing.
        let ahead = (2 * grown).clamp(AHEAD_BYTES_MIN, AHEAD_BYTES_MAX);
        let want = page_ceil(end + ahead).min(limit);
        let from = marks.populated.max(page_floor(end));
        if grown > 0 && want > from {
            // Maps the pages writable now (the file system's work for a first write happens
            // here, not in the writer's memcpy); contents do not change.
            let populated = self.storage.raw.advise_range(
                memmap2::Advice::PopulateWrite,
                from as usize,
                (want - from) as usize,
            );
            if let Err(e) = populated {
                tracing::debug!("message store: MADV_POPULATE_WRITE failed: {e}");
            }
            marks.populated = want;
        }
    }
}

impl Shared {
    /// Reserve the file's blocks through `end + ahead` (within `limit`); a refusal other than
    /// "not supported" marks the store out of space.
    fn reserve(
        &self,
        marks: &mut RegionMarks,
        reserved: &AtomicU64,
        end: u64,
        ahead: u64,
        limit: u64,
    ) {
        let want = page_ceil(end + ahead).min(limit);
        let from = marks.reserved.max(page_floor(end));
        self.reserve_range(marks, reserved, from, want);
    }

    /// The writer reached blocks not reserved yet (a burst faster than the keeper's rounds,
    /// or an idle store's 64 KiB outrun within one): reserve them now, on the writer's
    /// thread, from the reserved mark on, rather than write into a hole the file system may
    /// be unable to fill (a SIGBUS on a full disk). Rare: each call reserves
    /// `RESERVE_ACTIVE_MIN_BYTES` past what the append needs. Refused: the store is full.
    #[cold]
    #[inline(never)]
    fn reserve_for_writer(&self, index_end: u64, data_end: u64) -> Result<(), StreamFull> {
        let caps = self.caps;
        let mut marks = self.marks.lock().expect("not poisoned");
        let marks = &mut *marks;
        for (marks, reserved, end, limit) in [
            (
                &mut marks.index,
                &self.reserved_index,
                index_end,
                caps.data_at(),
            ),
            (
                &mut marks.data,
                &self.reserved_data,
                data_end,
                caps.mapping_bytes(),
            ),
        ] {
            if end > marks.reserved {
                let want = page_ceil(end + RESERVE_ACTIVE_MIN_BYTES).min(limit);
                self.reserve_range(marks, reserved, marks.reserved, want);
            }
        }
        if self.no_space.load(Ordering::Relaxed) {
            return Err(StreamFull);
        }
        Ok(())
    }

    /// Reserve the file's blocks of `[from, want)`; a refusal other than "not supported"
    /// marks the store out of space.
    fn reserve_range(&self, marks: &mut RegionMarks, reserved: &AtomicU64, from: u64, want: u64) {
        if want <= from || self.no_space.load(Ordering::Relaxed) {
            return;
        }
        let done = match self.fallocate(from, want - from) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => true,
            Err(e) => {
                self.no_space.store(true, Ordering::Relaxed);
                tracing::error!(
                    "message store: cannot reserve disk blocks ({e}); it refuses appends from now on"
                );
                false
            }
        };
        if done {
            marks.reserved = want;
            // Release: the blocks are reserved before the writer sees the new mark.
            reserved.store(want, Ordering::Release);
        }
    }

    /// The first reservation of a store being created or reopened: refused = no store.
    fn reserve_now(&self) -> std::io::Result<()> {
        let published = self.published();
        let caps = self.caps;
        let index_end = caps.index_at() + published * INDEX_ENTRY_BYTES;
        let data_end = caps.data_at() + self.end_offset(published);
        let mut marks = self.marks.lock().expect("not poisoned");
        let marks = &mut *marks;
        self.reserve(
            &mut marks.index,
            &self.reserved_index,
            index_end,
            RESERVE_IDLE_BYTES,
            caps.data_at(),
        );
        self.reserve(
            &mut marks.data,
            &self.reserved_data,
            data_end,
            RESERVE_IDLE_BYTES,
            caps.mapping_bytes(),
        );
        if self.no_space.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    fn fallocate(&self, offset: u64, bytes: u64) -> std::io::Result<()> {
        #[cfg(test)]
        if self.fail_reservations.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let file = self.storage.file.as_ref().expect("a file store");
        let (offset, bytes) = (offset as libc::off_t, bytes as libc::off_t);
        // SAFETY: a plain system call on an open descriptor; mode 0 allocates blocks inside
        // the file's size (it never changes bytes or the size).
        let rc =
            unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(file), 0, offset, bytes) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// One keeper round over `reader`'s store now (tests).
#[cfg(test)]
fn tend_now(reader: &StreamReader) {
    reader.shared.tend(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_then_read_in_order() {
        let (mut w, r) = stream(1024, 16).unwrap();
        assert!(r.get(1).is_none());
        assert_eq!(w.append(b"abc"), Ok(1));
        assert_eq!(w.append(b""), Ok(2));
        assert_eq!(w.append(b"defg"), Ok(3));
        assert_eq!(r.len(), 3);
        assert_eq!(r.get(1), Some(&b"abc"[..]));
        assert_eq!(r.get(2), Some(&b""[..]));
        assert_eq!(r.get(3), Some(&b"defg"[..]));
        assert_eq!(r.get(0), None);
        assert_eq!(r.get(4), None);
        assert_eq!(r.bytes_from(1), 7);
        assert_eq!(r.bytes_from(3), 4);
        assert_eq!(r.bytes_from(4), 0);
    }

    #[test]
    fn held_messages_are_invisible_until_published() {
        let (mut w, r) = stream(1024, 16).unwrap();
        assert_eq!(w.append_held(b"a"), Ok(1));
        assert_eq!(w.append_held(b"bc"), Ok(2));
        assert_eq!((r.len(), r.get(1)), (0, None));
        w.publish_through(1);
        assert_eq!((r.len(), r.get(1), r.get(2)), (1, Some(&b"a"[..]), None));
        w.publish_through(1);
        assert_eq!(w.append(b"d"), Ok(3), "append publishes what was held");
        assert_eq!((r.len(), r.get(2)), (3, Some(&b"bc"[..])));
        assert_eq!(w.published(), 3);
    }

    #[test]
    fn full_by_bytes_or_by_count() {
        let (mut w, _) = stream(4, 16).unwrap();
        assert!(w.append(b"abcd").is_ok());
        assert_eq!(w.append(b"e"), Err(StreamFull));
        let (mut w, _) = stream(64, 1).unwrap();
        assert!(w.append(b"a").is_ok());
        assert_eq!(w.append(b"b"), Err(StreamFull));
    }

    /// A reader thread holds slices of published messages while the writer keeps appending
    /// (the aliasing Miri checks in `tools/miri.sh`: no reference ever covers the bytes the
    /// writer is writing).
    #[test]
    fn a_reader_thread_sees_every_published_message() {
        const MESSAGES: u64 = if cfg!(miri) { 200 } else { 10_000 };
        let (mut w, r) = stream(1 << 17, 1 << 14).unwrap();
        let reader = std::thread::spawn(move || {
            let mut next = 1u64;
            let first = loop {
                match r.get(1) {
                    Some(m) => break m,
                    None => std::thread::sleep(std::time::Duration::from_micros(50)),
                }
            };
            while next <= MESSAGES {
                match r.get(next) {
                    Some(m) => {
                        assert_eq!(m, next.to_be_bytes());
                        next += 1;
                    }
                    None => std::thread::sleep(std::time::Duration::from_micros(50)),
                }
            }
            // Still valid and unchanged after every later append.
            assert_eq!(first, 1u64.to_be_bytes());
        });
        for n in 1..=MESSAGES {
            w.append(&n.to_be_bytes()).unwrap();
        }
        reader.join().unwrap();
    }

    fn message(n: u64) -> Vec<u8> {
        // Lengths vary (0..=40 bytes) so offsets matter.
        let len = (n % 41) as usize;
        (0..len).map(|i| (n as u8).wrapping_add(i as u8)).collect()
    }

    fn check_messages(r: &StreamReader, through: u64) {
        assert_eq!(r.len(), through);
        for n in 1..=through {
            assert_eq!(r.get(n), Some(&message(n)[..]), "message {n}");
        }
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn a_store_survives_its_process_and_reopens_with_its_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_dir(dir.path()).join("itch.store");
        let caps = Caps::for_bytes(1 << 20);
        {
            let (mut w, r) = StreamWriter::create(&path, caps).unwrap();
            for n in 1..=500 {
                w.append(&message(n)).unwrap();
            }
            // Held (never published) messages are not part of the store.
            w.append_held(b"held").unwrap();
            check_messages(&r, 500);
        }
        let (mut w, held) = StreamWriter::open(&path, caps).unwrap();
        assert_eq!((held, w.len(), w.published()), (500, 500, 500));
        let r = w.reader();
        check_messages(&r, 500);
        assert_eq!(w.append(&message(501)), Ok(501));
        check_messages(&r, 501);
        // Other capacities are refused, not misread.
        drop((w, r));
        let other = StreamWriter::open(&path, Caps::for_bytes(2 << 20));
        assert!(other.err().unwrap().to_string().contains("bytes, not the"));
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn truncate_to_cuts_a_reopened_store_and_appends_continue_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ouch-00000.store");
        let caps = Caps::for_bytes(1 << 20);
        let (mut w, _) = StreamWriter::create(&path, caps).unwrap();
        for n in 1..=300 {
            w.append(&message(n)).unwrap();
        }
        drop(w);
        let (mut w, held) = StreamWriter::open(&path, caps).unwrap();
        assert_eq!(held, 300);
        w.truncate_to(120);
        assert_eq!((w.len(), w.published()), (120, 120));
        // What follows the cut is written again (here: what a journal's tail replays).
        for n in 121..=200 {
            assert_eq!(w.append(&message(n)), Ok(n));
        }
        check_messages(&w.reader(), 200);
        drop(w);
        let (w, held) = StreamWriter::open(&path, caps).unwrap();
        assert_eq!(
            held, 200,
            "the cut and the appends after it are what the store holds"
        );
        check_messages(&w.reader(), 200);
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    #[should_panic(expected = "only before it has readers")]
    fn truncate_to_refuses_while_a_reader_may_hold_the_cut_messages() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _r) =
            StreamWriter::create(&dir.path().join("s.store"), Caps::for_bytes(1 << 16)).unwrap();
        w.append(b"abc").unwrap();
        w.truncate_to(0);
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn after_a_machine_restart_only_synced_messages_are_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.store");
        let caps = Caps::for_bytes(1 << 20);
        let (mut w, r) = StreamWriter::create(&path, caps).unwrap();
        for n in 1..=40 {
            w.append(&message(n)).unwrap();
        }
        assert_eq!(r.sync().unwrap(), 40);
        for n in 41..=90 {
            w.append(&message(n)).unwrap();
        }
        drop((w, r));
        // Same boot: everything published is trusted.
        assert_eq!(StreamWriter::open(&path, caps).unwrap().1, 90);
        // Another boot id in the header (the store was written before a reboot).
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xAB; 16], AT_BOOT_ID as u64).unwrap();
        drop(file);
        let (w, held) = StreamWriter::open(&path, caps).unwrap();
        assert_eq!(held, 40);
        check_messages(&w.reader(), 40);
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn create_starts_afresh_and_old_readers_keep_their_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.store");
        let caps = Caps::for_bytes(1 << 20);
        let (mut w, old_reader) = StreamWriter::create(&path, caps).unwrap();
        for n in 1..=50 {
            w.append(&message(n)).unwrap();
        }
        let (mut fresh, fresh_reader) = StreamWriter::create(&path, caps).unwrap();
        assert_eq!(fresh_reader.len(), 0);
        fresh.append(b"new").unwrap();
        check_messages(&old_reader, 50);
        drop((w, old_reader, fresh, fresh_reader));
        assert_eq!(StreamWriter::open(&path, caps).unwrap().1, 1);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn a_full_store_refuses_the_append() {
        let dir = tempfile::tempdir().unwrap();
        let caps = Caps {
            bytes: 8,
            messages: 2,
        };
        let (mut w, r) = StreamWriter::create(&dir.path().join("s.store"), caps).unwrap();
        assert_eq!(w.append(b"abcdefgh"), Ok(1));
        assert_eq!(w.append(b"x"), Err(StreamFull));
        assert_eq!(w.append(b""), Ok(2));
        assert_eq!(w.append(b""), Err(StreamFull));
        assert_eq!(r.len(), 2);
    }

    /// A file system that cannot reserve the blocks ahead (full): the store refuses appends
    /// (the venue stops taking orders) instead of the writer's next page being a SIGBUS.
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    fn a_store_whose_blocks_cannot_be_reserved_refuses_appends() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, r, path) = store_outside_the_keeper(dir.path());
        assert_eq!(w.append(b"before"), Ok(1));
        tend_now(&r);
        assert_eq!(w.append(b"still fine"), Ok(2));
        r.shared.fail_reservations.store(true, Ordering::Relaxed);
        // The writer reaches the end of what was reserved: the reservation it then makes
        // itself fails, and that append is refused, never written into the hole.
        let reserved = r.shared.reserved_data.load(Ordering::Acquire);
        let mut appended = 2;
        while w.append(&[1u8; 64]).is_ok() {
            appended += 1;
            assert!(appended < 1 << 20, "a refusal at the reservation's end");
        }
        assert!(
            r.shared.caps.data_at() + w.end_bytes <= reserved,
            "nothing written past the reserved blocks"
        );
        tend_now(&r);
        assert_eq!(w.append(b"after"), Err(StreamFull));
        assert_eq!(
            r.get(1),
            Some(&b"before"[..]),
            "what was said stays readable"
        );
        // Blocks were reserved ahead of the writer while there was room.
        let allocated = allocated_bytes(&path);
        assert!(allocated >= RESERVE_IDLE_BYTES, "{allocated}");
    }

    /// A burst between two keeper rounds that outruns what was reserved ahead (an idle
    /// store has 64 KiB) reserves on the writer's thread: every byte written lies in a
    /// reserved block, so a full disk can refuse an append but never fault a write.
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    fn a_burst_past_the_reservation_reserves_before_it_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, r, path) = store_outside_the_keeper(dir.path());
        let idle = r.shared.reserved_data.load(Ordering::Acquire);
        // No keeper round in between: ten times the idle reservation in one burst.
        let messages = 10 * RESERVE_IDLE_BYTES / 64;
        for _ in 0..messages {
            w.append(&[3u8; 64]).unwrap();
        }
        let caps = r.shared.caps;
        let (data_end, index_end) = (
            caps.data_at() + w.end_bytes,
            caps.index_at() + messages * INDEX_ENTRY_BYTES,
        );
        assert!(data_end > idle, "the burst went past the first reservation");
        let marks = r.shared.marks.lock().unwrap();
        assert!(
            marks.data.reserved >= data_end,
            "data reserved before written"
        );
        assert!(
            marks.index.reserved >= index_end,
            "index reserved before written"
        );
        drop(marks);
        let allocated = allocated_bytes(&path);
        assert!(allocated >= 10 * RESERVE_IDLE_BYTES, "{allocated}");
    }

    /// A store written slowly reserves a few MiB ahead, not the most a fast one gets: a
    /// thousand accounts' stores must not claim tens of gigabytes of disk between them.
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    fn a_slow_store_reserves_little_disk_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, r, path) = store_outside_the_keeper(dir.path());
        for _ in 0..1_000 {
            w.append(&[7u8; 50]).unwrap();
        }
        tend_now(&r);
        let allocated = allocated_bytes(&path);
        // Index and data each reserve RESERVE_ACTIVE_MIN_BYTES ahead (plus the header page).
        assert!(allocated >= RESERVE_ACTIVE_MIN_BYTES, "{allocated}");
        assert!(
            allocated <= 2 * RESERVE_ACTIVE_MIN_BYTES + (1 << 20),
            "{allocated} bytes reserved for 50 KB written"
        );
    }

    /// A 1 GiB file store that the keeper thread leaves alone (the test runs its rounds).
    fn store_outside_the_keeper(dir: &Path) -> (StreamWriter, StreamReader, PathBuf) {
        let path = dir.join("s.store");
        let (w, r) = StreamWriter::create_tended(&path, Caps::for_bytes(1 << 30), false).unwrap();
        (w, r, path)
    }

    /// Disk blocks the file holds.
    fn allocated_bytes(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    fn rss_file_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }

    /// The point of the keeper: written pages leave the process's RSS (they stay in the page
    /// cache and in the file), and a reader of old messages still gets them.
    #[cfg_attr(miri, ignore = "Miri cannot map files")]
    #[test]
    fn the_keeper_drops_written_pages_from_rss_and_readers_fault_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, r, _) = store_outside_the_keeper(dir.path());
        let before = rss_file_bytes();
        let chunk = [7u8; 64];
        let total: u64 = 64 << 20;
        for _ in 0..total / 64 {
            w.append(&chunk).unwrap();
        }
        let written = rss_file_bytes().saturating_sub(before);
        assert!(written > total / 2, "written pages are mapped: {written}");
        tend_now(&r);
        let kept = rss_file_bytes().saturating_sub(before);
        assert!(
            kept < 20 << 20,
            "only the recent window stays mapped: {kept}"
        );
        assert_eq!(r.get(1), Some(&chunk[..]));
        assert_eq!(r.get(total / 64), Some(&chunk[..]));
    }
}
