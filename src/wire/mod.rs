//! Wire codecs shared by the daemon and the tools: SoupBinTCP 4.00, OUCH 4.2, MoldUDP64 1.00,
//! TotalView-ITCH 5.0 and GLIMPSE 5.0. Zero-copy decoding from byte slices; encoding into
//! caller-provided buffers.
//!
//! Contract shared by every codec here:
//! - **Decoding never panics and never reads out of bounds.** Any byte string yields a message or
//!   a typed [`DecodeError`]; every decoder checks the exact length before touching a field.
//! - **Encoding never allocates.** Encoders write into a caller-provided `&mut [u8]` and return
//!   the number of bytes written. A buffer shorter than the message is a programmer error and
//!   fails an assertion (the caller sizes buffers from the `*_LEN` / `MAX_*` constants).
//!
//! UNCONFIRMED choices (PROTOCOLS.md) are listed in each module's documentation.

pub mod ascii;
pub mod glimpse;
pub mod itch;
pub mod moldudp64;
pub mod ouch;
pub mod pcap;
pub mod soupbin;

#[cfg(test)]
mod tests;

use std::fmt;

/// Why a byte string is not a valid message. Decoders return this instead of panicking; the
/// gateway turns it into closing that one session with a log line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DecodeError {
    /// No bytes at all.
    Empty,
    /// The type letter is not one this decoder knows (for this direction).
    UnknownType(u8),
    /// Known type, but not its fixed length.
    WrongLength {
        kind: u8,
        expected: usize,
        actual: usize,
    },
    /// Too short for the header or a length prefix that points past the end.
    Truncated { needed: usize, actual: usize },
    /// A field that must hold a specific form does not (e.g. ASCII digits).
    BadField { field: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Empty => write!(f, "empty message"),
            DecodeError::UnknownType(t) => write!(f, "unknown message type 0x{t:02x}"),
            DecodeError::WrongLength {
                kind,
                expected,
                actual,
            } => write!(
                f,
                "message type {:?} must be {expected} bytes, got {actual}",
                kind as char
            ),
            DecodeError::Truncated { needed, actual } => {
                write!(f, "truncated: need {needed} bytes, have {actual}")
            }
            DecodeError::BadField { field } => write!(f, "bad value in field {field}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// `b` as an array of exactly `N` bytes, or the wrong-length error for message type `kind`.
/// Decoders convert once, so every later field read has a constant bound and no check.
#[inline(always)]
pub(crate) fn fixed<const N: usize>(kind: u8, b: &[u8]) -> Result<&[u8; N], DecodeError> {
    b.try_into().map_err(|_| DecodeError::WrongLength {
        kind,
        expected: N,
        actual: b.len(),
    })
}

/// Big-endian field readers and writers over a slice whose length the caller has already checked.
pub(crate) mod be {
    #[inline(always)]
    pub fn u48_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x[2..].copy_from_slice(&b[at..at + 6]);
        u64::from_be_bytes(x)
    }
    #[inline(always)]
    pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Writes the low 48 bits of `v` (ITCH timestamps).
    #[inline(always)]
    pub fn put_u48(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 6].copy_from_slice(&v.to_be_bytes()[2..]);
    }
    #[inline(always)]
    pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub fn put_bytes(b: &mut [u8], at: usize, v: &[u8]) {
        b[at..at + v.len()].copy_from_slice(v);
    }
    #[inline(always)]
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline(always)]
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline(always)]
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    #[inline(always)]
    pub fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        let mut x = [0u8; N];
        x.copy_from_slice(&b[at..at + N]);
        x
    }
}
