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
use std::sync::atomic::{AtomicU32, Ordering};

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

fn commit_word(map: &[u8], offset_bytes: u64) -> &AtomicU32 {
    let offset = offset_bytes as usize;
    assert!(offset.is_multiple_of(RECORD_ALIGN_BYTES as usize));
    assert!(offset + 4 <= map.len());
    // SAFETY: in bounds and 4-aligned (mappings are page aligned, offsets 8-aligned); the
    // mapping outlives the borrow; every concurrent access to a commit word is atomic.
    unsafe { &*(map.as_ptr().add(offset) as *const AtomicU32) }
}

fn record_crc(length: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&length.to_le_bytes()), body)
}

/// Write a record at `offset_bytes` and publish it: body and checksum first, then the length
/// with Release, so a reader that loads a non-zero length (Acquire) sees the whole record.
/// The caller guarantees the span plus a seal fits and that the bytes there are zero.
pub fn write_record(
    map: &mut [u8],
    offset_bytes: u64,
    seq: u64,
    timestamp: Timestamp,
    kind: u8,
    payload: &[u8],
) {
    let length_bytes = RECORD_HEADER_BYTES + payload.len() as u64;
    let offset = offset_bytes as usize;
    let end = offset + length_bytes as usize;
    assert!(seq >= 1);
    assert!(
        offset_bytes + record_span_bytes(payload.len() as u64) + SEAL_BYTES <= map.len() as u64
    );
    debug_assert!(commit_word(map, offset_bytes).load(Ordering::Relaxed) == 0);
    let length = u32::try_from(length_bytes).expect("max_payload_bytes keeps lengths in u32");
    map[offset + 8..offset + 16].copy_from_slice(&seq.to_le_bytes());
    map[offset + 16..offset + 24].copy_from_slice(&timestamp.0.to_le_bytes());
    map[offset + 24..offset + 32].copy_from_slice(&[kind, 0, 0, 0, 0, 0, 0, 0]);
    map[offset + 32..end].copy_from_slice(payload);
    let crc = record_crc(length, &map[offset + 8..end]);
    map[offset + 4..offset + 8].copy_from_slice(&crc.to_le_bytes());
    commit_word(map, offset_bytes).store(length, Ordering::Release);
}

/// Mark the segment finished at `offset_bytes` (after its last record).
pub fn write_seal(map: &mut [u8], offset_bytes: u64) {
    assert!(offset_bytes + SEAL_BYTES <= map.len() as u64);
    assert!(commit_word(map, offset_bytes).load(Ordering::Relaxed) == 0);
    commit_word(map, offset_bytes).store(SEAL_WORD, Ordering::Release);
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
pub fn read_slot(map: &[u8], offset_bytes: u64, max_payload_bytes: u32) -> Slot {
    assert!(offset_bytes + SEAL_BYTES <= map.len() as u64);
    let length = commit_word(map, offset_bytes).load(Ordering::Acquire);
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
    let end = offset + length_bytes as usize;
    let stored_crc = u32::from_le_bytes(map[offset + 4..offset + 8].try_into().expect("4"));
    if record_crc(length, &map[offset + 8..end]) != stored_crc {
        return Slot::Invalid {
            reason: "record checksum mismatch",
        };
    }
    if map[offset + 25..offset + 32].iter().any(|&b| b != 0) {
        return Slot::Invalid {
            reason: "record reserved bytes are not zero",
        };
    }
    Slot::Valid {
        seq: u64::from_le_bytes(map[offset + 8..offset + 16].try_into().expect("8")),
        timestamp: Timestamp(u64::from_le_bytes(
            map[offset + 16..offset + 24].try_into().expect("8"),
        )),
        kind: map[offset + 24],
        payload: offset + RECORD_HEADER_BYTES as usize..end,
        span_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(8))]
    struct Buffer([u8; 512]);

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

    #[test]
    fn span_is_aligned() {
        assert_eq!(record_span_bytes(0), 32);
        assert_eq!(record_span_bytes(1), 40);
        assert_eq!(record_span_bytes(8), 40);
        assert_eq!(record_span_bytes(100), 136);
    }

    #[test]
    fn record_round_trip() {
        let mut buffer = Buffer([0; 512]);
        let map = &mut buffer.0[..];
        assert_eq!(read_slot(map, 0, 256), Slot::End);
        write_record(map, 0, 7, Timestamp(123_456), 4, b"hello");
        let (seq, timestamp, kind, payload, span) = valid(read_slot(map, 0, 256));
        assert_eq!((seq, timestamp, kind, span), (7, Timestamp(123_456), 4, 40));
        assert_eq!(&map[payload], b"hello");
        assert_eq!(read_slot(map, 40, 256), Slot::End);
        write_record(map, 40, 8, Timestamp(123_457), 5, &[]);
        let (seq, _, kind, payload, span) = valid(read_slot(map, 40, 256));
        assert_eq!((seq, kind, payload.len(), span), (8, 5, 0, 32));
        write_seal(map, 72);
        assert_eq!(read_slot(map, 72, 256), Slot::Seal);
    }

    #[test]
    fn crc_catches_every_flipped_bit() {
        let mut buffer = Buffer([0; 512]);
        write_record(&mut buffer.0, 0, 1, Timestamp(99), 2, b"payload bytes");
        let length = RECORD_HEADER_BYTES as usize + 13;
        for byte in 0..length {
            for bit in 0..8 {
                let mut damaged = Buffer(buffer.0);
                damaged.0[byte] ^= 1 << bit;
                let slot = read_slot(&damaged.0, 0, 256);
                assert!(
                    matches!(slot, Slot::Invalid { .. }),
                    "byte {byte} bit {bit}: {slot:?}"
                );
            }
        }
    }

    #[test]
    fn length_bounds_are_checked() {
        let mut buffer = Buffer([0; 512]);
        write_record(&mut buffer.0, 0, 1, Timestamp(1), 1, &[9u8; 100]);
        assert!(matches!(read_slot(&buffer.0, 0, 99), Slot::Invalid { .. }));
        assert!(matches!(read_slot(&buffer.0, 0, 100), Slot::Valid { .. }));
        buffer.0[0..4].copy_from_slice(&16u32.to_le_bytes());
        assert!(matches!(read_slot(&buffer.0, 0, 100), Slot::Invalid { .. }));
        buffer.0[0..4].copy_from_slice(&500u32.to_le_bytes());
        assert!(matches!(
            read_slot(&buffer.0, 0, 1000),
            Slot::Invalid { .. }
        ));
    }
}
