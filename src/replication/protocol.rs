//! The replication protocol between a primary and its standbys (TCP, big-endian).
//!
//! | frame | direction | layout |
//! |---|---|---|
//! | Hello `L` | standby → primary | version u32, tail count u16, then (seq u64, crc u32) for the standby's last records, newest last; then (version 2) the day epoch u64 of the journal the tail is from (0: none) |
//! | Welcome `W` | primary → standby | day epoch u64, common seq u64, primary's last seq u64 |
//! | Refused `X` | primary → standby | length u16, UTF-8 reason |
//! | Record `R` | primary → standby | seq u64, timestamp u64, kind u8, length u32, payload |
//! | Heartbeat `H` | primary → standby | primary's next seq u64, primary's clock (unix ns) u64 |
//! | Ack `A` | standby → primary | seq u64: every record up to it is in the standby's journal |
//!
//! The standby's tail lets the primary find the last record both journals share (same seq and
//! same checksum of timestamp, kind and payload); the standby cuts anything after it — records
//! an old primary journaled that the new primary never had — before following. A tail from an
//! earlier trading day than the primary's shares nothing with it: the standby starts the
//! primary's day in a new journal (`crate::days`) and keeps the earlier one.
//!
//! With `[replication] secret` on both sides, the connection first passes
//! [`crate::peer_auth`] ([`AUTH`]: its own labels, ids 0 and 0), then the frames above follow
//! as before.

use std::io::{self, Read, Write};

/// 2: Hello carries the day epoch of the standby's tail.
pub const VERSION: u32 = 2;
/// The authentication that precedes Hello when the primary and standby share a secret.
pub const AUTH: crate::peer_auth::Protocol = crate::peer_auth::Protocol::new(
    "replication",
    1,
    b"bourse-replication server",
    b"bourse-replication client",
);
/// Records of its tail a standby offers; a divergence deeper than this needs an operator.
pub const TAIL_RECORDS_MAX: usize = 64;
/// Largest record payload on the wire (the journal's own bound is checked again on append).
pub const PAYLOAD_BYTES_MAX: u32 = 64 << 20;
const REASON_BYTES_MAX: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello {
        version: u32,
        tail: Vec<(u64, u32)>,
        /// The trading day (day epoch, unix ns) the tail is from; 0 without a journal.
        day_epoch_unix_ns: u64,
    },
    Welcome {
        day_epoch_unix_ns: u64,
        common_seq: u64,
        primary_last_seq: u64,
    },
    Refused {
        reason: String,
    },
    Record {
        seq: u64,
        timestamp: u64,
        kind: u8,
        payload: Vec<u8>,
    },
    Heartbeat {
        next_seq: u64,
        unix_ns: u64,
    },
    Ack {
        seq: u64,
    },
}

/// Checksum identifying a record's content across journals.
pub fn record_crc(timestamp: u64, kind: u8, payload: &[u8]) -> u32 {
    let head = crc32c::crc32c_append(crc32c::crc32c(&timestamp.to_be_bytes()), &[kind]);
    crc32c::crc32c_append(head, payload)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_u16(r: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// Write a record frame without copying the payload into a frame value.
pub fn write_record(
    w: &mut impl Write,
    seq: u64,
    timestamp: u64,
    kind: u8,
    payload: &[u8],
) -> io::Result<()> {
    let mut head = [0u8; 22];
    head[0] = b'R';
    head[1..9].copy_from_slice(&seq.to_be_bytes());
    head[9..17].copy_from_slice(&timestamp.to_be_bytes());
    head[17] = kind;
    head[18..22].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    w.write_all(&head)?;
    w.write_all(payload)
}

impl Frame {
    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        match self {
            Frame::Hello {
                version,
                tail,
                day_epoch_unix_ns,
            } => {
                assert!(tail.len() <= TAIL_RECORDS_MAX);
                w.write_all(b"L")?;
                w.write_all(&version.to_be_bytes())?;
                w.write_all(&(tail.len() as u16).to_be_bytes())?;
                for (seq, crc) in tail {
                    w.write_all(&seq.to_be_bytes())?;
                    w.write_all(&crc.to_be_bytes())?;
                }
                w.write_all(&day_epoch_unix_ns.to_be_bytes())
            }
            Frame::Welcome {
                day_epoch_unix_ns,
                common_seq,
                primary_last_seq,
            } => {
                w.write_all(b"W")?;
                w.write_all(&day_epoch_unix_ns.to_be_bytes())?;
                w.write_all(&common_seq.to_be_bytes())?;
                w.write_all(&primary_last_seq.to_be_bytes())
            }
            Frame::Refused { reason } => {
                let bytes = &reason.as_bytes()[..reason.len().min(REASON_BYTES_MAX)];
                w.write_all(b"X")?;
                w.write_all(&(bytes.len() as u16).to_be_bytes())?;
                w.write_all(bytes)
            }
            Frame::Record {
                seq,
                timestamp,
                kind,
                payload,
            } => write_record(w, *seq, *timestamp, *kind, payload),
            Frame::Heartbeat { next_seq, unix_ns } => {
                w.write_all(b"H")?;
                w.write_all(&next_seq.to_be_bytes())?;
                w.write_all(&unix_ns.to_be_bytes())
            }
            Frame::Ack { seq } => {
                w.write_all(b"A")?;
                w.write_all(&seq.to_be_bytes())
            }
        }
    }

    /// Read one frame; bad bytes are an `InvalidData` error (the caller drops the link).
    pub fn read(r: &mut impl Read) -> io::Result<Frame> {
        let mut kind = [0u8; 1];
        r.read_exact(&mut kind)?;
        match kind[0] {
            b'L' => {
                let version = read_u32(r)?;
                let count = read_u16(r)? as usize;
                if count > TAIL_RECORDS_MAX {
                    return Err(bad("hello tail too long"));
                }
                let mut tail = Vec::with_capacity(count);
                for _ in 0..count {
                    tail.push((read_u64(r)?, read_u32(r)?));
                }
                // Version 1 had no day: such a peer is refused for its version.
                let day_epoch_unix_ns = if version >= 2 { read_u64(r)? } else { 0 };
                Ok(Frame::Hello {
                    version,
                    tail,
                    day_epoch_unix_ns,
                })
            }
            b'W' => Ok(Frame::Welcome {
                day_epoch_unix_ns: read_u64(r)?,
                common_seq: read_u64(r)?,
                primary_last_seq: read_u64(r)?,
            }),
            b'X' => {
                let len = read_u16(r)? as usize;
                if len > REASON_BYTES_MAX {
                    return Err(bad("refusal too long"));
                }
                let mut text = vec![0u8; len];
                r.read_exact(&mut text)?;
                Ok(Frame::Refused {
                    reason: String::from_utf8_lossy(&text).into_owned(),
                })
            }
            b'R' => {
                let seq = read_u64(r)?;
                let timestamp = read_u64(r)?;
                let mut k = [0u8; 1];
                r.read_exact(&mut k)?;
                let len = read_u32(r)?;
                if len > PAYLOAD_BYTES_MAX {
                    return Err(bad("record too long"));
                }
                let mut payload = vec![0u8; len as usize];
                r.read_exact(&mut payload)?;
                Ok(Frame::Record {
                    seq,
                    timestamp,
                    kind: k[0],
                    payload,
                })
            }
            b'H' => Ok(Frame::Heartbeat {
                next_seq: read_u64(r)?,
                unix_ns: read_u64(r)?,
            }),
            b'A' => Ok(Frame::Ack { seq: read_u64(r)? }),
            _ => Err(bad("unknown replication frame")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_round_trips() {
        let frames = [
            Frame::Hello {
                version: VERSION,
                tail: vec![(7, 99), (8, 100)],
                day_epoch_unix_ns: 20_000 * 86_400 * 1_000_000_000,
            },
            Frame::Welcome {
                day_epoch_unix_ns: 86_400,
                common_seq: 8,
                primary_last_seq: 12,
            },
            Frame::Refused {
                reason: "diverged".into(),
            },
            Frame::Record {
                seq: 9,
                timestamp: 123,
                kind: 2,
                payload: b"abc".to_vec(),
            },
            Frame::Heartbeat {
                next_seq: 13,
                unix_ns: 5,
            },
            Frame::Ack { seq: 12 },
        ];
        let mut bytes = Vec::new();
        for f in &frames {
            f.write(&mut bytes).unwrap();
        }
        let mut r = &bytes[..];
        for f in &frames {
            assert_eq!(&Frame::read(&mut r).unwrap(), f);
        }
        assert!(Frame::read(&mut r).is_err(), "end of input");
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        for bytes in [&b"Q"[..], b"R\0\0", b"L\0\0\0\x01\xff\xff", b"X\xff\xff"] {
            assert!(Frame::read(&mut &bytes[..]).is_err());
        }
    }

    #[test]
    fn crc_covers_timestamp_kind_and_payload() {
        let base = record_crc(1, 2, b"x");
        assert_ne!(base, record_crc(2, 2, b"x"));
        assert_ne!(base, record_crc(1, 3, b"x"));
        assert_ne!(base, record_crc(1, 2, b"y"));
    }
}
