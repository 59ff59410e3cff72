//! Wire codecs shared by the daemon and the tools: SoupBinTCP 4.00, OUCH 4.2, MoldUDP64 1.00,
//! TotalView-ITCH 5.0 and GLIMPSE 5.0. Zero-copy decoding from byte slices; encoding into
//! caller-provided buffers.

pub mod itch;
pub mod ouch;

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

/// Big-endian field readers over a slice whose length the caller has already checked.
#[allow(dead_code)] // the outbound codecs use the rest
pub(crate) mod be {
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    pub fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        let mut x = [0u8; N];
        x.copy_from_slice(&b[at..at + N]);
        x
    }
}
