//! State snapshots: the exchange's state after journal record `last_seq`, in a file next to
//! the journal (`<trading day>/snapshots/snapshot-<last_seq>.bin`), so a restart applies the
//! journal's tail instead of the whole day.
//!
//! A snapshot is a deterministic function of the journal: it is taken after a record chosen
//! from journaled values only (input counts, journaled timestamps; see [`Schedule`]), and
//! holds
//!
//! - the record it follows: `last_seq`, the inputs applied (leader changes are records, not
//!   inputs), that record's timestamp and its **fingerprint** (CRC32C of its number,
//!   timestamp, kind and payload, read back from the journal when the file is written). A
//!   journal can lose records after a snapshot and be written on with other inputs under the
//!   same numbers: an operator's cut back (`truncate_after`, `--truncate-corrupt-tail`), a
//!   standby that was the old primary, a cluster member's uncommitted tail, or a machine crash
//!   that loses `async` mode's unsynced pages after the snapshot file was synced. A snapshot
//!   is used only while the journal's record `last_seq` is still the one it followed;
//!   otherwise it holds inputs the journal no longer has, and is skipped;
//! - the SHA-256 of the day header (venue, sessions): a snapshot of another day or venue is
//!   never used;
//! - every output stream's position (ITCH first, then each account's OUCH in config order):
//!   messages and bytes so far, and optionally the SHA-256 state of the stream's digest over
//!   those messages (BinaryFILE framing), so that a replay from the snapshot prints the same
//!   stream digests as a full replay;
//! - the exchange state ([`crate::exchange::Exchange::save_state`]: the token tables' slot
//!   arrays as they lie in memory, the books' orders logically);
//! - checksums: the CRC32C of every 1 MiB of the bytes above, then their length and the
//!   CRC32C of that list. A file whose checksums, framing or contents do not check is
//!   *damaged*: it is skipped with a log line and an older one (or a full replay) is used
//!   instead. (A busy day's state is gigabytes: CRC32C runs at memory speed where SHA-256
//!   took seconds, and one checksum per MiB keeps a 32-bit check per chunk.)
//!
//! Files are written atomically: a temporary file in the same directory, fsync, rename,
//! fsync of the directory. A crash leaves either the old set of snapshots or the new one (a
//! stray temporary file is ignored and removed by the next write). A snapshot is read through
//! a read-only mapping of its file (populated at once from the page cache; no copy of the
//! state before it is restored).

pub mod writer;

use crate::exchange::state::LentState;
use crate::types::Timestamp;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of a trading day's snapshots (the journal allows this one name beside its
/// segments).
pub const DIR_NAME: &str = "snapshots";
/// Version 3 added the record's fingerprint (a version 2 file is skipped: a full replay).
const MAGIC: &[u8; 16] = b"bourse-snapshot3";
/// Bytes covered by each CRC32C of the body.
const CHUNK_BYTES: usize = 1 << 20;
/// After the chunk checksums: the body's length (u64) and the CRC32C of the checksums and
/// that length (u32).
const TRAILER_FIXED_BYTES: usize = 12;
/// Streams a snapshot may describe (ITCH + every account): a bound for decoding.
const STREAMS_MAX: u32 = 1 << 16;
/// Snapshots listed at most in a directory (older ones are pruned as new ones are written).
const FILES_MAX: usize = 4096;
/// Bytes of a snapshot file's front that [`peek_newest`] reads at most: the header, the
/// streams' positions (a stream's digest state is ~100 bytes: tens of thousands of accounts
/// fit) and the first bytes of the state.
const FRONT_BYTES_MAX: usize = 16 * CHUNK_BYTES;
/// What a read past the bytes at hand reports ([`Reader::take`]).
const CUT_SHORT: &str = "cut short";
/// How many snapshots a writer keeps (the newest; older ones are removed after a write).
pub const KEEP: usize = 3;

/// One output stream's position at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamPosition {
    pub messages: u64,
    pub bytes: u64,
    /// The stream digest's SHA-256 state over those messages, if it was computed.
    pub digest_state: Option<Vec<u8>>,
}

/// A snapshot: what is in the file; `State` is the exchange state's bytes (owned when
/// writing, borrowed from the file's mapping when read, `()` once restored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot<State = Vec<u8>> {
    /// Journal records `1..=last_seq` are in the state.
    pub last_seq: u64,
    /// Inputs among them (records that are not leader changes).
    pub inputs: u64,
    /// The timestamp of record `last_seq`.
    pub timestamp: Timestamp,
    /// [`record_fingerprint`] of record `last_seq`.
    pub record_fingerprint: u32,
    /// SHA-256 of the day header's encoding.
    pub header_digest: [u8; 32],
    /// ITCH first, then every account's OUCH in config order.
    pub streams: Vec<StreamPosition>,
    /// [`crate::exchange::Exchange::save_state`]'s bytes.
    pub state: State,
}

/// SHA-256 of a day header's encoding (what a snapshot must match).
pub fn header_digest(header_bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(header_bytes).into()
}

/// CRC32C of each [`CHUNK_BYTES`] of a stream of bytes written in parts.
struct ChunkSums {
    sums: Vec<u32>,
    current: u32,
    in_chunk: usize,
    total: u64,
}

impl ChunkSums {
    fn new() -> ChunkSums {
        ChunkSums {
            sums: Vec::new(),
            current: 0,
            in_chunk: 0,
            total: 0,
        }
    }

    fn add(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        // Bounded: each round consumes up to the rest of a chunk.
        while !bytes.is_empty() {
            let take = bytes.len().min(CHUNK_BYTES - self.in_chunk);
            let (now, rest) = bytes.split_at(take);
            self.current = crc32c::crc32c_append(self.current, now);
            self.in_chunk += take;
            if self.in_chunk == CHUNK_BYTES {
                self.sums.push(self.current);
                (self.current, self.in_chunk) = (0, 0);
            }
            bytes = rest;
        }
    }

    /// The trailer: every chunk's checksum, the body's length, the checksum of both.
    fn trailer(mut self) -> Vec<u8> {
        if self.in_chunk > 0 {
            self.sums.push(self.current);
        }
        let mut out = Vec::with_capacity(self.sums.len() * 4 + TRAILER_FIXED_BYTES);
        for sum in &self.sums {
            out.extend_from_slice(&sum.to_le_bytes());
        }
        out.extend_from_slice(&self.total.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// A snapshot's state bytes, contiguous or in parts (the daemon's: the encoded counters and
/// books around token tables' slot arrays lent by the engine, [`LentState`]), written to the
/// file without being gathered first.
pub trait StateBytes {
    /// The bytes in all.
    fn byte_count(&self) -> usize;
    /// The bytes in order.
    fn for_each_part(
        &self,
        each: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()>;
}

impl<T: AsRef<[u8]>> StateBytes for T {
    fn byte_count(&self) -> usize {
        self.as_ref().len()
    }

    fn for_each_part(
        &self,
        each: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        each(self.as_ref())
    }
}

impl StateBytes for LentState {
    fn byte_count(&self) -> usize {
        LentState::len(self)
    }

    fn for_each_part(
        &self,
        each: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        LentState::for_each_part(self, each)
    }
}

impl<S: StateBytes> Snapshot<S> {
    /// Everything before the state, and the state's length.
    fn head(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.streams.len() * 160);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.last_seq.to_le_bytes());
        out.extend_from_slice(&self.inputs.to_le_bytes());
        out.extend_from_slice(&self.timestamp.0.to_le_bytes());
        out.extend_from_slice(&self.record_fingerprint.to_le_bytes());
        out.extend_from_slice(&self.header_digest);
        out.extend_from_slice(&(self.streams.len() as u32).to_le_bytes());
        for s in &self.streams {
            out.extend_from_slice(&s.messages.to_le_bytes());
            out.extend_from_slice(&s.bytes.to_le_bytes());
            let state = s.digest_state.as_deref().unwrap_or(&[]);
            out.extend_from_slice(&(state.len() as u32).to_le_bytes());
            out.extend_from_slice(state);
        }
        out.extend_from_slice(&(self.state.byte_count() as u64).to_le_bytes());
        out
    }

    /// Write the file's bytes into `out`: the state is written as it is (no copy) and
    /// checksummed on the way, in one pass. Returns the bytes written.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<u64> {
        let head = self.head();
        let mut sums = ChunkSums::new();
        sums.add(&head);
        out.write_all(&head)?;
        // One pass: each part checksummed as it is written (the trailer comes last).
        self.state.for_each_part(&mut |part| {
            sums.add(part);
            out.write_all(part)
        })?;
        let trailer = sums.trailer();
        out.write_all(&trailer)?;
        Ok((head.len() + self.state.byte_count() + trailer.len()) as u64)
    }

    /// The file's bytes, checksums included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out).expect("writing into memory");
        out
    }
}

impl<S> Snapshot<S> {
    /// The same snapshot without its state (once restored).
    pub fn without_state(&self) -> Snapshot<()> {
        self.with_state(())
    }

    /// The same snapshot around another state (a test's altered bytes, or none).
    pub fn with_state<T>(&self, state: T) -> Snapshot<T> {
        Snapshot {
            last_seq: self.last_seq,
            inputs: self.inputs,
            timestamp: self.timestamp,
            record_fingerprint: self.record_fingerprint,
            header_digest: self.header_digest,
            streams: self.streams.clone(),
            state,
        }
    }
}

impl Snapshot {
    /// Check the checksums and the framing; the exchange state inside (borrowed from
    /// `bytes`) is checked when it is restored.
    pub fn decode(bytes: &[u8]) -> Result<Snapshot<&[u8]>, String> {
        let body = checked_body(bytes)?;
        let mut r = Reader { bytes: body, at: 0 };
        let (head, state_len) = Snapshot::decode_head(&mut r)?;
        let state = r.take(state_len)?;
        if r.at != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(head.with_state(state))
    }

    /// Everything before the state, and the state's length.
    fn decode_head(r: &mut Reader<'_>) -> Result<(Snapshot<()>, usize), String> {
        if r.take(MAGIC.len())? != MAGIC {
            return Err("not a snapshot of this version".into());
        }
        let last_seq = r.u64()?;
        let inputs = r.u64()?;
        let timestamp = Timestamp(r.u64()?);
        let record_fingerprint = r.u32()?;
        let header_digest: [u8; 32] = r.take(32)?.try_into().expect("32 bytes");
        let count = r.u32()?;
        if count == 0 || count > STREAMS_MAX {
            return Err(format!("{count} streams"));
        }
        let mut streams = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let messages = r.u64()?;
            let bytes = r.u64()?;
            let state_len = r.u32()? as usize;
            let state = r.take(state_len)?;
            streams.push(StreamPosition {
                messages,
                bytes,
                digest_state: (state_len > 0).then(|| state.to_vec()),
            });
        }
        let state_len = usize::try_from(r.u64()?).map_err(|_| "state length".to_string())?;
        if last_seq == 0 || inputs == 0 || inputs > last_seq {
            return Err("record counts out of range".into());
        }
        let head = Snapshot {
            last_seq,
            inputs,
            timestamp,
            record_fingerprint,
            header_digest,
            streams,
            state: (),
        };
        Ok((head, state_len))
    }
}

/// The body of a snapshot file whose trailer and every chunk's checksum check.
fn checked_body(bytes: &[u8]) -> Result<&[u8], String> {
    let Some(fixed_at) = bytes.len().checked_sub(TRAILER_FIXED_BYTES) else {
        return Err("shorter than a snapshot".into());
    };
    let body_bytes = u64::from_le_bytes(bytes[fixed_at..fixed_at + 8].try_into().expect("8"));
    let stored = u32::from_le_bytes(bytes[fixed_at + 8..].try_into().expect("4"));
    let chunks = body_bytes.div_ceil(CHUNK_BYTES as u64);
    let expected_bytes = chunks
        .checked_mul(4)
        .and_then(|sums| sums.checked_add(body_bytes))
        .and_then(|n| n.checked_add(TRAILER_FIXED_BYTES as u64));
    if expected_bytes != Some(bytes.len() as u64) {
        return Err("cut short or lengthened (its length is not its trailer's)".into());
    }
    let body_bytes = body_bytes as usize;
    if crc32c::crc32c(&bytes[body_bytes..fixed_at + 8]) != stored {
        return Err("checksum mismatch (trailer)".into());
    }
    let (body, trailer) = bytes.split_at(body_bytes);
    let (sums, _) = trailer[..fixed_at - body_bytes].as_chunks::<4>();
    for (index, (chunk, sum)) in body.chunks(CHUNK_BYTES).zip(sums).enumerate() {
        if crc32c::crc32c(chunk) != u32::from_le_bytes(*sum) {
            return Err(format!("checksum mismatch (MiB {index})"));
        }
    }
    Ok(body)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(CUT_SHORT)?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

/// The snapshot directory of the trading day journaled in `journal_dir`.
pub fn dir_of(journal_dir: &Path) -> PathBuf {
    journal_dir.join(DIR_NAME)
}

fn file_name(last_seq: u64) -> String {
    format!("snapshot-{last_seq:020}.bin")
}

fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".bin")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The file writer's buffer for a state in parts.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Write `snapshot` atomically into the day's snapshot directory: temporary file (the
/// state written straight from its buffer), fsync, rename, fsync of the directory. Returns
/// the file's path and size.
pub fn write_atomic<S: StateBytes>(
    journal_dir: &Path,
    snapshot: &Snapshot<S>,
) -> std::io::Result<(PathBuf, u64)> {
    let dir = dir_of(journal_dir);
    std::fs::create_dir_all(&dir)?;
    let last_seq = snapshot.last_seq;
    let path = dir.join(file_name(last_seq));
    let tmp = dir.join(format!(".{}.tmp", file_name(last_seq)));
    let bytes = {
        // Buffered: a lent state comes in parts, some of a slot's 18 bytes (large parts go
        // straight through).
        let mut file = std::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, File::create(&tmp)?);
        let bytes = snapshot.write_to(&mut file)?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        bytes
    };
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(&dir)?.sync_all()?;
    Ok((path, bytes))
}

/// A snapshot file mapped read-only, populated from the page cache at once.
fn map_file(path: &Path) -> Result<memmap2::Mmap, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    // SAFETY: snapshot files are written whole under a temporary name and renamed; nothing
    // writes one afterwards (pruning unlinks, which leaves a mapping intact). Another process
    // truncating it would be outside this process's memory model, as for any mapping.
    unsafe { memmap2::MmapOptions::new().populate().map(&file) }
        .map_err(|e| format!("cannot map: {e}"))
}

/// The day's snapshot files, newest (highest `last_seq`) first. Temporary and foreign files
/// are not listed.
pub fn list(journal_dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir_of(journal_dir)) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let seq = parse_file_name(e.file_name().to_str()?)?;
            Some((seq, e.path()))
        })
        .take(FILES_MAX)
        .collect();
    found.sort_unstable_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    found
}

/// The newest snapshot at or below record `through` (0: none): the one a restart resumes from
/// if it is usable, so its record vouches for the journal's records before it at recovery
/// (`journal::verify_vouched`; should it turn out unusable, the replay's reader checks every
/// record it reads). A venue alone passes its journal's end (`u64::MAX`), a cluster member
/// its recorded commit index.
pub fn newest_through(journal_dir: &Path, through: u64) -> u64 {
    list(journal_dir)
        .into_iter()
        .map(|(seq, _)| seq)
        .find(|&seq| seq <= through)
        .unwrap_or(0)
}

/// Remove every snapshot after record `last_valid_seq`, all but the `keep` newest of the
/// others, and stray temporary files. A snapshot after `last_valid_seq` follows a record cut
/// from the journal since (or one a restart found unusable) and can never be restored; kept,
/// it would push the valid ones out of `keep`. The daemon's writer passes the snapshot it just
/// wrote (it writes at the journal's end, in increasing order); `bourse replay
/// --write-snapshots-every` passes the journal's last record, so the day's later snapshots,
/// which follow the same records, are kept as the newest.
pub fn prune(journal_dir: &Path, keep: usize, last_valid_seq: u64) {
    let (stale, current): (Vec<_>, Vec<_>) = list(journal_dir)
        .into_iter()
        .partition(|(seq, _)| *seq > last_valid_seq);
    for (seq, path) in stale {
        tracing::warn!(
            seq,
            last_valid_seq,
            "snapshot removed: it follows a record cut from the journal"
        );
        let _ = std::fs::remove_file(path);
    }
    remove_all_but_newest(journal_dir, current, keep);
}

/// Remove all but the first `keep` of `newest_first` (as [`list`] orders them) and stray
/// temporary files.
fn remove_all_but_newest(journal_dir: &Path, newest_first: Vec<(u64, PathBuf)>, keep: usize) {
    for (_, path) in newest_first.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
    if let Ok(entries) = std::fs::read_dir(dir_of(journal_dir)) {
        for e in entries.filter_map(Result::ok).take(FILES_MAX) {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".snapshot-") && name.ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// The fingerprint of journal record `seq` in `journal_dir`: CRC32C of its number, timestamp,
/// kind and payload (what a snapshot following it records, and what a restore compares).
/// `timestamp`, when given, must be the record's (a writer checks it read the record its
/// state followed).
pub fn record_fingerprint(
    journal_dir: &Path,
    seq: u64,
    timestamp: Option<Timestamp>,
) -> Result<u32, String> {
    let mut reader = crate::journal::JournalReader::open(journal_dir, seq)
        .map_err(|e| format!("cannot read record {seq}: {e}"))?;
    let record = reader
        .next()
        .map_err(|e| format!("cannot read record {seq}: {e}"))?
        .ok_or_else(|| format!("the journal has no record {seq}"))?;
    if record.seq != seq || timestamp.is_some_and(|t| t != record.timestamp) {
        return Err(format!("the journal's record {seq} is another one"));
    }
    let mut crc = crc32c::crc32c(&record.seq.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &record.timestamp.0.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &[record.kind]);
    Ok(crc32c::crc32c_append(crc, record.payload))
}

/// Is the journal's record `last_seq` still the one `snapshot` followed? ([`load_latest`]
/// checks it; a caller of [`peek_newest`] checks it in its `peek`.)
pub fn still_follows(journal_dir: &Path, snapshot: &Snapshot<()>) -> Result<(), String> {
    let seq = snapshot.last_seq;
    let found = record_fingerprint(journal_dir, seq, None)?;
    if found != snapshot.record_fingerprint {
        return Err(format!(
            "the journal's record {seq} is not the one it followed (cut and written again since)"
        ));
    }
    Ok(())
}

/// The newest snapshot of this day that checks: its file's checksum and framing, the day
/// header, `last_seq <= through` (records the journal holds), and `accept` (the caller's
/// check, e.g. that the state restores). Each one skipped is logged with why; `None` means a
/// full replay. Returns the snapshot and what `accept` built from it.
pub fn load_latest<T>(
    journal_dir: &Path,
    header_digest: &[u8; 32],
    through: u64,
    mut accept: impl FnMut(&Snapshot<&[u8]>) -> Result<T, String>,
) -> Option<(Snapshot<()>, T)> {
    for (seq, path) in list(journal_dir) {
        if seq > through {
            let why = format!("past the journal's last record {through}"); // a cut tail
            tracing::warn!(path = %path.display(), "snapshot skipped: {why}");
            continue;
        }
        // The record it follows first, from the file's front: a stale file of a busy day is
        // gigabytes that need not be read and checked.
        let follows = read_front(&path, 0).and_then(|(head, _)| {
            still_follows(journal_dir, &head)?;
            Ok(head.record_fingerprint)
        });
        let checked = follows.and_then(|fingerprint| {
            let bytes = map_file(&path)?;
            let s = Snapshot::decode(&bytes)?;
            if s.last_seq != seq {
                return Err(format!("holds record {}, named {seq}", s.last_seq));
            }
            if s.header_digest != *header_digest {
                return Err("another day or venue definition".into());
            }
            if s.record_fingerprint != fingerprint {
                return Err("replaced while it was read".into());
            }
            let built = accept(&s)?;
            Ok((s.without_state(), built))
        });
        match checked {
            Ok(found) => return Some(found),
            Err(why) => {
                tracing::warn!(path = %path.display(), "snapshot skipped: {why}");
            }
        }
    }
    None
}

/// The newest snapshot of the day (of the day header whose digest is `header_digest`) whose
/// front checks, read without its state's gigabytes: its head (record, inputs, streams) and
/// `peek` of the first `want` bytes of its state (all of it, if shorter). Only the front of
/// each file is read (at most `FRONT_BYTES_MAX`), each chunk checked against its checksum,
/// the checksums against the trailer's; the state beyond is not checked (a restore still
/// checks the whole file). `peek` (given the head and the state's front) returning `None`
/// skips the file for an older one: e.g. a snapshot of a record the journal no longer holds
/// ([`still_follows`], which this does not check: the file alone is read). For questions
/// about the state's first fields (`days::state`: had the day ended by then?).
pub fn peek_newest<T>(
    journal_dir: &Path,
    header_digest: &[u8; 32],
    want: usize,
    mut peek: impl FnMut(&Snapshot<()>, &[u8]) -> Option<T>,
) -> Option<(Snapshot<()>, T)> {
    list(journal_dir).into_iter().find_map(|(seq, path)| {
        let peeked = read_front(&path, want).and_then(|(head, state)| {
            if head.last_seq != seq || head.header_digest != *header_digest {
                return Err("another record or day than its name or header says".into());
            }
            let found = peek(&head, &state).ok_or("refused by the caller")?;
            Ok((head, found))
        });
        peeked
            .map_err(|why| tracing::debug!(path = %path.display(), "snapshot not peeked: {why}"))
            .ok()
    })
}

/// The head of a snapshot file and the first `want` bytes of its state, reading chunk by
/// chunk from the front (see [`peek_newest`]).
fn read_front(path: &Path, want: usize) -> Result<(Snapshot<()>, Vec<u8>), String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let read_at = |at: u64, n: usize| -> Result<Vec<u8>, String> {
        let mut bytes = vec![0; n];
        file.read_exact_at(&mut bytes, at)
            .map_err(|e| format!("cannot read: {e}"))?;
        Ok(bytes)
    };
    let fixed_at = len
        .checked_sub(TRAILER_FIXED_BYTES as u64)
        .ok_or("shorter than a snapshot")?;
    let fixed = read_at(fixed_at, TRAILER_FIXED_BYTES)?;
    let body_bytes = u64::from_le_bytes(fixed[..8].try_into().expect("8"));
    let chunks = body_bytes.div_ceil(CHUNK_BYTES as u64);
    if chunks
        .checked_mul(4)
        .and_then(|s| s.checked_add(body_bytes))
        != Some(fixed_at)
    {
        return Err("cut short or lengthened (its length is not its trailer's)".into());
    }
    let mut sums = read_at(body_bytes, (fixed_at - body_bytes) as usize + 8)?;
    if crc32c::crc32c(&sums) != u32::from_le_bytes(fixed[8..].try_into().expect("4")) {
        return Err("checksum mismatch (trailer)".into());
    }
    sums.truncate(sums.len() - 8);
    let mut front = Vec::new();
    // Bounded: at most FRONT_BYTES_MAX / CHUNK_BYTES chunks.
    for (index, sum) in sums.as_chunks::<4>().0.iter().enumerate() {
        if front.len() >= FRONT_BYTES_MAX {
            break;
        }
        let at = (index * CHUNK_BYTES) as u64;
        let chunk = read_at(at, CHUNK_BYTES.min((body_bytes - at) as usize))?;
        if crc32c::crc32c(&chunk) != u32::from_le_bytes(*sum) {
            return Err(format!("checksum mismatch (MiB {index})"));
        }
        front.extend_from_slice(&chunk);
        let mut r = Reader {
            bytes: &front,
            at: 0,
        };
        match Snapshot::decode_head(&mut r) {
            Ok((_, state_len)) if r.at.checked_add(state_len) != Some(body_bytes as usize) => {
                return Err("trailing bytes or cut short (its state's length)".into());
            }
            Ok((head, state_len)) if front.len() - r.at >= want.min(state_len) => {
                let state = &front[r.at..r.at + want.min(state_len)];
                return Ok((head, state.to_vec()));
            }
            Ok(_) => {}
            Err(why) if why == CUT_SHORT => {}
            Err(why) => return Err(why),
        }
    }
    Err(format!(
        "its head and state's front exceed {FRONT_BYTES_MAX} bytes"
    ))
}

/// When to take a snapshot, decided from journaled values only, so the snapshots are a
/// deterministic function of the journal whatever the restarts: after every input whose count
/// is a multiple of `every_inputs`, and after the first input of every `every_seconds`
/// window of journaled time (timestamps count from the journal's midnight).
#[derive(Clone, Copy, Debug, Default)]
pub struct Schedule {
    /// A snapshot every this many inputs (0: not by count).
    pub every_inputs: u64,
    /// A snapshot per this many nanoseconds of journaled time (0: not by time).
    pub every_ns: u64,
    last_inputs: u64,
    last_ns: u64,
}

impl Schedule {
    pub fn new(every_inputs: u64, every_seconds: u64) -> Schedule {
        Schedule {
            every_inputs,
            every_ns: every_seconds.saturating_mul(1_000_000_000),
            last_inputs: 0,
            last_ns: 0,
        }
    }

    /// The last input already applied (its count and journaled timestamp): a restart, a
    /// loaded snapshot, the day's start.
    pub fn start_at(&mut self, inputs: u64, timestamp: Timestamp) {
        self.last_inputs = inputs;
        self.last_ns = timestamp.0;
    }

    pub fn enabled(&self) -> bool {
        self.every_inputs > 0 || self.every_ns > 0
    }

    /// Is a snapshot due after input number `inputs`, journaled at `timestamp`?
    #[inline]
    pub fn due(&mut self, inputs: u64, timestamp: Timestamp) -> bool {
        let window = |v: u64, every: u64| v.checked_div(every).unwrap_or(0);
        let by_count =
            window(inputs, self.every_inputs) > window(self.last_inputs, self.every_inputs);
        let by_time = window(timestamp.0, self.every_ns) > window(self.last_ns, self.every_ns);
        self.last_inputs = inputs;
        self.last_ns = self.last_ns.max(timestamp.0);
        by_count || by_time
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            last_seq: 42,
            inputs: 40,
            timestamp: Timestamp(7),
            record_fingerprint: 0x5eed_f00d,
            header_digest: header_digest(b"day"),
            streams: vec![
                StreamPosition {
                    messages: 3,
                    bytes: 90,
                    digest_state: Some(vec![1; 41]),
                },
                StreamPosition {
                    messages: 0,
                    bytes: 0,
                    digest_state: None,
                },
            ],
            state: b"state bytes".to_vec(),
        }
    }

    #[test]
    fn encodes_and_decodes_and_any_flipped_byte_is_refused() {
        let s = sample();
        let bytes = s.encode();
        let decoded = Snapshot::decode(&bytes).unwrap();
        assert_eq!(decoded.without_state(), s.without_state());
        assert_eq!(decoded.state, &s.state[..]);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(Snapshot::decode(&bad).is_err(), "flip at {at} accepted");
        }
        for len in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..len]).is_err(), "cut at {len}");
        }
    }

    #[test]
    fn a_state_of_several_chunks_is_checked_chunk_by_chunk() {
        let s = Snapshot {
            state: (0..(5 * CHUNK_BYTES / 2) as u32)
                .map(|i| (i * 7) as u8)
                .collect(),
            ..sample()
        };
        let bytes = s.encode();
        assert_eq!(Snapshot::decode(&bytes).unwrap().state, &s.state[..]);
        let trailer_at = bytes.len() - TRAILER_FIXED_BYTES - 3 * 4;
        for at in [
            0,
            CHUNK_BYTES - 1,
            CHUNK_BYTES,
            2 * CHUNK_BYTES + 5,
            trailer_at - 1,
            trailer_at + 2,
            bytes.len() - 5,
            bytes.len() - 1,
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x04;
            assert!(Snapshot::decode(&bad).is_err(), "flip at {at} accepted");
        }
        for cut in [1, 4, 12, CHUNK_BYTES] {
            assert!(Snapshot::decode(&bytes[..bytes.len() - cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 4]);
        assert!(Snapshot::decode(&longer).is_err());
    }

    /// A journal of records `1..=count` (opaque kind 9), the timestamp of record n being
    /// `stamp + n`.
    fn journal_of(dir: &Path, count: u64, stamp: u64) {
        let (mut writer, report) = crate::journal::small_test_journal(dir);
        for n in report.last_seq + 1..=count {
            writer
                .append(Timestamp(stamp + n), 9, &n.to_le_bytes())
                .unwrap();
        }
        writer.flush().unwrap();
    }

    /// A snapshot following record `seq` of the journal in `day` as it is now.
    fn following(day: &Path, seq: u64) -> Snapshot {
        Snapshot {
            last_seq: seq,
            inputs: seq,
            record_fingerprint: record_fingerprint(day, seq, None).unwrap(),
            ..sample()
        }
    }

    #[test]
    fn the_newest_valid_snapshot_is_loaded_damaged_ones_skipped() {
        let temp = tempfile::tempdir().unwrap();
        let day = temp.path();
        journal_of(day, 40, 1_000);
        let digest = header_digest(b"day");
        for seq in [10u64, 20, 30] {
            write_atomic(day, &following(day, seq)).unwrap();
        }
        let pick =
            |through| load_latest(day, &digest, through, |_| Ok(())).map(|(s, ())| s.last_seq);
        assert_eq!(pick(100), Some(30));
        assert_eq!(pick(25), Some(20), "past the journal's end: skipped");
        // Damage the newest: the next one is used.
        let newest = dir_of(day).join(file_name(30));
        let mut bytes = std::fs::read(&newest).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&newest, bytes).unwrap();
        assert_eq!(pick(100), Some(20));
        // Another venue's: none fits.
        assert!(load_latest(day, &header_digest(b"other"), 100, |_| Ok(())).is_none());
        prune(day, 1, 30);
        assert_eq!(list(day).len(), 1);
    }

    /// The journal cut back behind a snapshot and written on with other records under the same
    /// numbers: the snapshot follows a record the journal no longer has, and is skipped for an
    /// older one (whose record is intact), by a restore and by a peek alike.
    #[test]
    fn a_snapshot_of_records_cut_and_written_again_is_skipped() {
        let temp = tempfile::tempdir().unwrap();
        let day = temp.path();
        journal_of(day, 40, 1_000);
        let digest = header_digest(b"day");
        for seq in [10u64, 30] {
            write_atomic(day, &following(day, seq)).unwrap();
        }
        let pick =
            |through| load_latest(day, &digest, through, |_| Ok(())).map(|(s, ())| s.last_seq);
        let peek = || {
            let follows = |head: &Snapshot<()>, _: &[u8]| still_follows(day, head).ok();
            peek_newest(day, &digest, 0, follows).map(|(s, ())| s.last_seq)
        };
        assert_eq!((pick(40), peek()), (Some(30), Some(30)));
        crate::journal::truncate_after(day, 20).unwrap();
        assert_eq!(pick(20), Some(10), "record 30 is gone");
        // Records 21..=40 again, stamped later (another run's clock).
        journal_of(day, 40, 5_000);
        assert_eq!(pick(40), Some(10), "record 30 is another one now");
        assert_eq!(peek(), Some(10));
        // The next snapshot written (20, after the cut) removes the stale 30, however many
        // are kept, and keeps the valid ones.
        write_atomic(day, &following(day, 20)).unwrap();
        prune(day, 2, 20);
        let kept: Vec<u64> = list(day).iter().map(|s| s.0).collect();
        assert_eq!(kept, [20, 10]);
        // A snapshot's own check of the record it follows: the writer reads it back.
        assert!(record_fingerprint(day, 30, Some(Timestamp(1_030))).is_err());
        assert!(record_fingerprint(day, 30, Some(Timestamp(5_030))).is_ok());
        assert!(record_fingerprint(day, 41, None).is_err());
    }

    /// `bourse replay --write-snapshots-every` on a day that has later snapshots already
    /// (`prune` with the journal's last record):
    /// they follow the same records (replay cuts nothing), so they are the newest to keep, not
    /// stale ones to remove as the daemon's writer would.
    #[test]
    fn an_offline_writer_keeps_the_newest_snapshots_later_ones_included() {
        let temp = tempfile::tempdir().unwrap();
        let day = temp.path();
        journal_of(day, 40, 1_000);
        for seq in [10u64, 20, 30, 40] {
            write_atomic(day, &following(day, seq)).unwrap();
        }
        prune(day, 3, 40);
        let kept: Vec<u64> = list(day).iter().map(|s| s.0).collect();
        assert_eq!(kept, [40, 30, 20]);
        // Past the journal's end (cut since): removed, whatever the count kept.
        prune(day, 3, 35);
        let kept: Vec<u64> = list(day).iter().map(|s| s.0).collect();
        assert_eq!(kept, [30, 20]);
        // The daemon's rule, for contrast: written 20, so 30 follows cut records.
        prune(day, 3, 20);
        let kept: Vec<u64> = list(day).iter().map(|s| s.0).collect();
        assert_eq!(kept, [20]);
    }

    #[test]
    fn schedule_counts_inputs_and_journaled_time() {
        let mut by_count = Schedule::new(3, 0);
        let due: Vec<u64> = (1..=10)
            .filter(|&n| by_count.due(n, Timestamp(n)))
            .collect();
        assert_eq!(due, [3, 6, 9]);
        let mut by_time = Schedule::new(0, 2);
        let second = 1_000_000_000;
        by_time.start_at(0, Timestamp(10 * second));
        let due: Vec<u64> = (1..=10)
            .filter(|&n| by_time.due(n, Timestamp(10 * second + n * second)))
            .collect();
        assert_eq!(
            due,
            [2, 4, 6, 8, 10],
            "at the first input of each 2 s window"
        );
        // The same points whatever the restart: count from where the journal ends.
        let mut restarted = Schedule::new(3, 0);
        restarted.start_at(4, Timestamp(0));
        let due: Vec<u64> = (5..=10)
            .filter(|&n| restarted.due(n, Timestamp(n)))
            .collect();
        assert_eq!(due, [6, 9]);
        assert!(!Schedule::new(0, 0).enabled());
    }
}
