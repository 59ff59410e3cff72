//! Record layout, the commit protocol and checksum.
//!
//! Layout (little-endian, each record starts 8-aligned inside its segment):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 4 | length: 32 + payload bytes — the commit word, stored last with Release |
//! | 4  | 4 | CRC32C of the length's 4 bytes followed by bytes 8..length |
//! | 8  | 8 | journal sequence number (gapless from 1) |
//! | 16 | 8 | timestamp, ns since the day epoch |
//! | 24 | 1 | record kind (opaque to the journal) |
//! | 25 | 7 | reserved, zero |
//! | 32 | n | payload (opaque), then zero padding to the next multiple of 8 |
//!
//! Commit word values: `0` = end of data (segments are zero-filled when preallocated),
//! [`SEAL_WORD`] = the segment is finished, continue in the next one; anything else is a length.
//! The writer keeps room for a seal after every record, so a seal always fits.

use std::ops::Range;

use super::shared::SharedBytes;
use crate::types::Timestamp;

pub const RECORD_HEADER_BYTES: u64 = 32;
pub const RECORD_ALIGN_BYTES: u64 = 8;
pub const SEAL_WORD: u32 = u32::MAX;
pub const SEAL_BYTES: u64 = 8;

const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(SEAL_BYTES == RECORD_ALIGN_BYTES);

/// One journal record, borrowing its payload from the mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub seq: u64,
    pub timestamp: Timestamp,
    pub kind: u8,
    pub payload: &'a [u8],
}

/// Bytes a record with `payload_bytes` occupies in a segment, padding included.
pub const fn record_span_bytes(payload_bytes: u64) -> u64 {
    (RECORD_HEADER_BYTES + payload_bytes).next_multiple_of(RECORD_ALIGN_BYTES)
}

/// A writer rotates only when the next record and a seal no longer fit: so a segment's data
/// (or its lost seal) can end where the next segment begins only with less room than this
/// left (`max_payload_bytes` from the segment's header).
pub const fn rotation_room_bytes(max_payload_bytes: u32) -> u64 {
    record_span_bytes(max_payload_bytes as u64) + SEAL_BYTES
}

fn record_crc(length: u32, body_parts: [&[u8]; 2]) -> u32 {
    let total = 4 + body_parts[0].len() + body_parts[1].len();
    if total <= SMALL_RECORD_BYTES {
        // One pass over a contiguous copy: each crc32c call costs ~150 instructions of
        // set-up, three of them were most of the checksum's cost for an order's record
        // (callgrind). Same value: CRC32C of the concatenation.
        let mut bytes = [0u8; SMALL_RECORD_BYTES];
        bytes[..4].copy_from_slice(&length.to_le_bytes());
        let (first, second) = bytes[4..total].split_at_mut(body_parts[0].len());
        first.copy_from_slice(body_parts[0]);
        second.copy_from_slice(body_parts[1]);
        return crc32c::crc32c(&bytes[..total]);
    }
    let crc = crc32c::crc32c(&length.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c_append(crc, body_parts[0]), body_parts[1])
}

/// Records up to this size (length word included) are checksummed in one call.
const SMALL_RECORD_BYTES: usize = 256;

/// Write a record at `offset_bytes` and publish it: body and checksum first, then the length
/// with Release, so a reader that loads a non-zero length (Acquire) sees the whole record.
///
/// # Safety
/// The caller is the storage's only writer; the span plus a seal fits and is zero and
/// unpublished (no reader looks past the commit word at `offset_bytes` until it is non-zero).
pub unsafe fn write_record(
    map: SharedBytes,
    offset_bytes: u64,
    seq: u64,
    timestamp: Timestamp,
    kind: u8,
    payload: &[u8],
) {
    let length_bytes = RECORD_HEADER_BYTES + payload.len() as u64;
    let offset = offset_bytes as usize;
    assert!(seq >= 1);
    assert!(offset_bytes.is_multiple_of(RECORD_ALIGN_BYTES));
    assert!(
        offset_bytes + record_span_bytes(payload.len() as u64) + SEAL_BYTES <= map.len() as u64
    );
    debug_assert!(map.load_u32_acquire(offset) == 0);
    let length = u32::try_from(length_bytes).expect("max_payload_bytes keeps lengths in u32");
    let mut header = [0u8; RECORD_HEADER_BYTES as usize];
    header[8..16].copy_from_slice(&seq.to_le_bytes());
    header[16..24].copy_from_slice(&timestamp.0.to_le_bytes());
    header[24] = kind;
    let crc = record_crc(length, [&header[8..], payload]);
    header[4..8].copy_from_slice(&crc.to_le_bytes());
    // SAFETY: the caller's contract: only writer, the bytes are unpublished until the store.
    unsafe {
        map.write(offset + 4, &header[4..]);
        map.write(offset + RECORD_HEADER_BYTES as usize, payload);
        map.store_u32_release(offset, length);
    }
}

/// Mark the segment finished at `offset_bytes` (after its last record).
///
/// # Safety
/// The caller is the storage's only writer.
pub unsafe fn write_seal(map: SharedBytes, offset_bytes: u64) {
    assert!(offset_bytes + SEAL_BYTES <= map.len() as u64);
    assert!(map.load_u32_acquire(offset_bytes as usize) == 0);
    // SAFETY: only writer (the caller's contract); readers load the word atomically.
    unsafe { map.store_u32_release(offset_bytes as usize, SEAL_WORD) };
}

/// What a reader finds at an offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Commit word 0: no (published) data here yet.
    End,
    /// The segment is finished; the next record is in the next segment.
    Seal,
    /// A whole record whose checksum matches. `payload` indexes the mapping.
    Valid {
        seq: u64,
        timestamp: Timestamp,
        kind: u8,
        payload: Range<usize>,
        span_bytes: u64,
    },
    /// A published commit word whose record does not check out.
    Invalid { reason: &'static str },
}

/// Decode the slot at `offset_bytes`, loading the commit word with Acquire.
/// `max_payload_bytes` bounds the length; the record (and a seal after it) must fit.
pub fn read_slot(map: SharedBytes, offset_bytes: u64, max_payload_bytes: u32) -> Slot {
    read_slot_checked(map, offset_bytes, max_payload_bytes, true)
}

/// [`read_slot`], computing the checksum only if `check_crc`: a reader skips it for records a
/// scan of this process has just checked (recovery, `verify`), which are never written again.
/// Every other check (length, range, reserved bytes) still applies.
#[inline]
pub fn read_slot_checked(
    map: SharedBytes,
    offset_bytes: u64,
    max_payload_bytes: u32,
    check_crc: bool,
) -> Slot {
    assert!(offset_bytes + SEAL_BYTES <= map.len() as u64);
    let length = map.load_u32_acquire(offset_bytes as usize);
    if length == 0 {
        return Slot::End;
    }
    if length == SEAL_WORD {
        return Slot::Seal;
    }
    let length_bytes = length as u64;
    if length_bytes < RECORD_HEADER_BYTES
        || length_bytes > RECORD_HEADER_BYTES + max_payload_bytes as u64
    {
        return Slot::Invalid {
            reason: "record length out of range",
        };
    }
    let span_bytes = length_bytes.next_multiple_of(RECORD_ALIGN_BYTES);
    if offset_bytes + span_bytes + SEAL_BYTES > map.len() as u64 {
        return Slot::Invalid {
            reason: "record runs past the end of the segment",
        };
    }
    let offset = offset_bytes as usize;
    // SAFETY: the commit word was loaded with Acquire and is a length: the writer stored the
    // record's bytes before it (Release) and never writes them again. (Junk found by recovery
    // has no writer at all.)
    let record = unsafe { map.slice(offset, length_bytes as usize) };
    let stored_crc = u32::from_le_bytes(record[4..8].try_into().expect("4"));
    if check_crc && record_crc(length, [&record[8..], &[]]) != stored_crc {
        return Slot::Invalid {
            reason: "record checksum mismatch",
        };
    }
    if record[25..32].iter().any(|&b| b != 0) {
        return Slot::Invalid {
            reason: "record reserved bytes are not zero",
        };
    }
    Slot::Valid {
        seq: u64::from_le_bytes(record[8..16].try_into().expect("8")),
        timestamp: Timestamp(u64::from_le_bytes(record[16..24].try_into().expect("8"))),
        kind: record[24],
        payload: offset + RECORD_HEADER_BYTES as usize..offset + length_bytes as usize,
        span_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::shared::HeapBytes;
    use super::*;

    /// The one-call path for small records gives the chained CRC (the on-disk format), at
    /// every size around the cut-over.
    #[test]
    fn small_record_crc_equals_the_chained_crc() {
        let body: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for split in [0, 1, 24, 100] {
            for len in [0, 1, 60, 227, 228, 229, 400] {
                let (a, b) = body[..split.max(len)].split_at(split);
                let b = &b[..len.saturating_sub(split).min(b.len())];
                let chained = crc32c::crc32c_append(
                    crc32c::crc32c_append(crc32c::crc32c(&77u32.to_le_bytes()), a),
                    b,
                );
                assert_eq!(record_crc(77, [a, b]), chained, "split {split} len {len}");
            }
        }
    }

    fn valid(slot: Slot) -> (u64, Timestamp, u8, Range<usize>, u64) {
        match slot {
            Slot::Valid {
                seq,
                timestamp,
                kind,
                payload,
                span_bytes,
            } => (seq, timestamp, kind, payload, span_bytes),
            other => panic!("expected a valid record, got {other:?}"),
        }
    }

    /// A heap buffer holding `bytes` (for damaged copies).
    fn heap_with(bytes: &[u8]) -> HeapBytes {
        let heap = HeapBytes::zeroed(bytes.len());
        // SAFETY: a fresh buffer with no other user.
        unsafe { heap.view().write(0, bytes) };
        heap
    }

    fn contents(map: SharedBytes) -> Vec<u8> {
        let mut out = vec![0u8; map.len()];
        map.copy_out(0, &mut out);
        out
    }

    #[test]
    fn span_is_aligned() {
        assert_eq!(record_span_bytes(0), 32);
        assert_eq!(record_span_bytes(1), 40);
        assert_eq!(record_span_bytes(8), 40);
        assert_eq!(record_span_bytes(100), 136);
    }

    #[test]
    fn record_round_trip() {
        let heap = HeapBytes::zeroed(512);
        let map = heap.view();
        assert_eq!(read_slot(map, 0, 256), Slot::End);
        // SAFETY: this test is the buffer's only user.
        unsafe { write_record(map, 0, 7, Timestamp(123_456), 4, b"hello") };
        let (seq, timestamp, kind, payload, span) = valid(read_slot(map, 0, 256));
        assert_eq!((seq, timestamp, kind, span), (7, Timestamp(123_456), 4, 40));
        // SAFETY: published, no writer while the slice lives.
        assert_eq!(unsafe { map.slice(payload.start, payload.len()) }, b"hello");
        assert_eq!(read_slot(map, 40, 256), Slot::End);
        // SAFETY: only user.
        unsafe { write_record(map, 40, 8, Timestamp(123_457), 5, &[]) };
        let (seq, _, kind, payload, span) = valid(read_slot(map, 40, 256));
        assert_eq!((seq, kind, payload.len(), span), (8, 5, 0, 32));
        // SAFETY: only user.
        unsafe { write_seal(map, 72) };
        assert_eq!(read_slot(map, 72, 256), Slot::Seal);
    }

    /// The byte layout of the module docs, written out by hand: journals already on disk
    /// (replay-logs/) must keep reading, so the encoding may never drift.
    #[test]
    fn layout_is_the_documented_one() {
        let heap = HeapBytes::zeroed(64);
        // SAFETY: only user.
        unsafe { write_record(heap.view(), 0, 3, Timestamp(0x0102), 9, b"xy") };
        let bytes = contents(heap.view());
        let mut expected = [0u8; 40];
        expected[0..4].copy_from_slice(&34u32.to_le_bytes());
        expected[8..16].copy_from_slice(&3u64.to_le_bytes());
        expected[16..24].copy_from_slice(&0x0102u64.to_le_bytes());
        expected[24] = 9;
        expected[32..34].copy_from_slice(b"xy");
        let crc = crc32c::crc32c_append(crc32c::crc32c(&34u32.to_le_bytes()), &expected[8..34]);
        expected[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(&bytes[..40], &expected[..]);
        assert!(bytes[40..].iter().all(|&b| b == 0));
    }

    #[test]
    fn crc_catches_every_flipped_bit() {
        let heap = HeapBytes::zeroed(512);
        // SAFETY: only user.
        unsafe { write_record(heap.view(), 0, 1, Timestamp(99), 2, b"payload bytes") };
        let pristine = contents(heap.view());
        let length = RECORD_HEADER_BYTES as usize + 13;
        // Miri is ~1000x slower: every byte, but one bit per byte there.
        let bits: &[u8] = if cfg!(miri) {
            &[3]
        } else {
            &[0, 1, 2, 3, 4, 5, 6, 7]
        };
        for byte in 0..length {
            for &bit in bits {
                let mut damaged_bytes = pristine.clone();
                damaged_bytes[byte] ^= 1 << bit;
                let damaged = heap_with(&damaged_bytes);
                let slot = read_slot(damaged.view(), 0, 256);
                assert!(
                    matches!(slot, Slot::Invalid { .. }),
                    "byte {byte} bit {bit}: {slot:?}"
                );
            }
        }
    }

    #[test]
    fn length_bounds_are_checked() {
        let heap = HeapBytes::zeroed(512);
        let map = heap.view();
        // SAFETY: only user (and below, for the patched length words).
        unsafe { write_record(map, 0, 1, Timestamp(1), 1, &[9u8; 100]) };
        assert!(matches!(read_slot(map, 0, 99), Slot::Invalid { .. }));
        assert!(matches!(read_slot(map, 0, 100), Slot::Valid { .. }));
        unsafe { map.write(0, &16u32.to_le_bytes()) };
        assert!(matches!(read_slot(map, 0, 100), Slot::Invalid { .. }));
        unsafe { map.write(0, &500u32.to_le_bytes()) };
        assert!(matches!(read_slot(map, 0, 1000), Slot::Invalid { .. }));
    }

    /// One thread appends records and seals while another tails them through the same
    /// storage: the commit protocol, checked for data races and aliasing by Miri
    /// (`tools/miri.sh`). The reader sleeps instead of spinning when it finds nothing.
    #[test]
    fn a_reader_thread_tails_a_writer_thread() {
        const RECORDS: u64 = if cfg!(miri) { 40 } else { 2_000 };
        const BYTES: usize = 128 * 1024;
        let heap = std::sync::Arc::new(HeapBytes::zeroed(BYTES));
        let reader_heap = std::sync::Arc::clone(&heap);
        let reader = std::thread::spawn(move || {
            let map = reader_heap.view();
            let mut offset_bytes = 0u64;
            let mut seen = 0u64;
            for _ in 0..1_000_000 {
                match read_slot(map, offset_bytes, 64) {
                    Slot::End => std::thread::sleep(std::time::Duration::from_micros(10)),
                    Slot::Seal => return seen,
                    Slot::Valid {
                        seq,
                        payload,
                        span_bytes,
                        ..
                    } => {
                        assert_eq!(seq, seen + 1);
                        // SAFETY: published (Acquire above); the writer never rewrites it.
                        let bytes = unsafe { map.slice(payload.start, payload.len()) };
                        assert_eq!(bytes, &seq.to_le_bytes()[..(seq % 9) as usize]);
                        seen = seq;
                        offset_bytes += span_bytes;
                    }
                    Slot::Invalid { reason } => panic!("reader saw a torn record: {reason}"),
                }
            }
            panic!("reader did not finish");
        });
        let map = heap.view();
        let mut offset_bytes = 0u64;
        for seq in 1..=RECORDS {
            let payload = &seq.to_le_bytes()[..(seq % 9) as usize];
            // SAFETY: this thread is the only writer; the reader only reads published bytes.
            unsafe { write_record(map, offset_bytes, seq, Timestamp(seq), 1, payload) };
            offset_bytes += record_span_bytes(payload.len() as u64);
        }
        // SAFETY: only writer.
        unsafe { write_seal(map, offset_bytes) };
        assert_eq!(reader.join().expect("reader"), RECORDS);
    }
}
