//! GLIMPSE 5.0 (PROTOCOLS.md section 5): the snapshot is ITCH 5.0 messages in SoupBinTCP
//! Sequenced Data packets, ended by the End of Snapshot message defined here.
//!
//! UNCONFIRMED choices (PROTOCOLS.md 5): the type letter is `G` (the OMI GLIMPSE 5.0
//! dissectors and one codec library; no source supports `M`), and the 20-byte sequence number is
//! the first ITCH (MoldUDP64) sequence number the client must apply. It is written
//! right-justified with spaces and read trimming spaces on both sides, leading zeros accepted
//! (same rule as SoupBinTCP's numeric fields, [`super::ascii`]).

use super::DecodeError;
use super::ascii;
use super::itch;

/// Type letter of End of Snapshot.
pub const END_OF_SNAPSHOT: u8 = b'G';
/// Type byte plus 20 ASCII digits.
pub const END_OF_SNAPSHOT_LEN: usize = 21;

/// End of Snapshot `G`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EndOfSnapshot {
    /// First ITCH sequence number to apply after the snapshot.
    pub sequence: u64,
}

impl EndOfSnapshot {
    pub fn decode(b: &[u8]) -> Result<EndOfSnapshot, DecodeError> {
        let kind = *b.first().ok_or(DecodeError::Empty)?;
        if kind != END_OF_SNAPSHOT {
            return Err(DecodeError::UnknownType(kind));
        }
        if b.len() != END_OF_SNAPSHOT_LEN {
            return Err(DecodeError::WrongLength {
                kind,
                expected: END_OF_SNAPSHOT_LEN,
                actual: b.len(),
            });
        }
        Ok(EndOfSnapshot {
            sequence: ascii::parse_decimal(&b[1..], "sequence_number")?,
        })
    }

    pub fn encode(&self, buf: &mut [u8]) -> usize {
        assert!(buf.len() >= END_OF_SNAPSHOT_LEN);
        buf[0] = END_OF_SNAPSHOT;
        ascii::write_decimal_right(&mut buf[1..END_OF_SNAPSHOT_LEN], self.sequence);
        END_OF_SNAPSHOT_LEN
    }
}

/// One message of a GLIMPSE snapshot stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SnapshotMessage {
    Itch(itch::Decoded),
    End(EndOfSnapshot),
}

impl SnapshotMessage {
    /// Decode the payload of one Sequenced Data packet of a snapshot.
    pub fn decode(b: &[u8]) -> Result<SnapshotMessage, DecodeError> {
        match b.first() {
            Some(&END_OF_SNAPSHOT) => EndOfSnapshot::decode(b).map(SnapshotMessage::End),
            _ => itch::decode_any(b).map(SnapshotMessage::Itch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_end_of_snapshot() {
        let mut buf = [0u8; 32];
        let n = EndOfSnapshot { sequence: 1234 }.encode(&mut buf);
        assert_eq!(&buf[..n], b"G                1234");
        assert_eq!(
            EndOfSnapshot::decode(&buf[..n]),
            Ok(EndOfSnapshot { sequence: 1234 })
        );
        assert_eq!(
            EndOfSnapshot::decode(b"G00000000000000001234"),
            Ok(EndOfSnapshot { sequence: 1234 })
        );
        assert_eq!(
            SnapshotMessage::decode(b"G1234                "),
            Ok(SnapshotMessage::End(EndOfSnapshot { sequence: 1234 }))
        );
        assert!(EndOfSnapshot::decode(b"G12x4                ").is_err());
        assert!(EndOfSnapshot::decode(b"G1234").is_err());
        assert!(SnapshotMessage::decode(b"").is_err());
    }
}
