//! Journal record payloads: how each kind of input is stored, and back.
//!
//! | kind | payload |
//! |---|---|
//! | 1 start of day | UTF-8 TOML of [`DayHeader`]: sessions and the venue definition |
//! | 2 OUCH | account (u16, big-endian), then the OUCH message exactly as received |
//! | 3 admin | operation (`H` halt, `R` resume, `E` end of day), locate (u16, big-endian); or `C` cancel-all, account (u16), locate (u16, 0 = every symbol); or `B` block / `U` unblock, account (u16) |
//! | 4 tick | empty: time passes (TIF expiry) |
//! | 5 leader change | term (u64, big-endian): a cluster leader took office (not an input) |
//! | 6 disconnect | account (u16, big-endian): a logged-in session lost its connection without Logout |
//!
//! **Leader change** (`KIND_NOOP`) exists only in a clustered venue's journal (`src/cluster`).
//! Raft appends one empty entry at the start of every leader's term; the journal keeps it as
//! this record so that raft index = journal sequence number holds. It carries no input: it has
//! no effect on the exchange, hands out no number and produces no output; replay and apply
//! skip it. Its timestamp is the previous record's (0 for record 1), so every node writes the
//! same bytes without reading a clock. Consequences: journal sequence numbers stay gapless,
//! but "+1 per journaled input" becomes "+1 per journaled input or leader change"; and a
//! cluster's journal starts with the first leader's record 1 = leader change, then start of
//! day (the first record that is not a leader change). A venue without a cluster (or with a
//! cluster of one) never writes one: its journals stay byte-identical to before.
//!
//! The journal stays self-describing: replay needs nothing but the journal directory.

use crate::exchange::{Admin, Command, Venue};
use crate::types::{AccountId, Locate};
use crate::wire::ouch::Inbound;
use serde::{Deserialize, Serialize};

pub const KIND_START_OF_DAY: u8 = 1;
pub const KIND_OUCH: u8 = 2;
pub const KIND_ADMIN: u8 = 3;
pub const KIND_TICK: u8 = 4;
/// A cluster leader took office (raft's empty entry); not an input. See the table above.
pub const KIND_NOOP: u8 = 5;
pub const KIND_DISCONNECT: u8 = 6;

/// A record kind's name (metrics labels, the journal tools); `None` for a kind this build
/// does not know.
pub fn kind_name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        KIND_START_OF_DAY => "start_of_day",
        KIND_OUCH => "ouch",
        KIND_ADMIN => "admin",
        KIND_TICK => "tick",
        KIND_NOOP => "leader_change",
        KIND_DISCONNECT => "disconnect",
        _ => return None,
    })
}

/// Longest admin record payload (cancel-all: operation, account, locate).
pub const ADMIN_RECORD_BYTES_MAX: usize = 5;

/// Longest OUCH payload record: account plus the longest inbound message.
pub use crate::limits::OUCH_RECORD_BYTES_MAX;

/// What the first record of every journal fixes for the journal's life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayHeader {
    /// Record format of the payloads; bumped on any change (see replay-logs/README.md).
    pub format: u32,
    pub gateway_session: String,
    pub feed_session: String,
    pub venue: Venue,
}

impl DayHeader {
    pub const FORMAT: u32 = 1;

    pub fn encode(&self) -> Vec<u8> {
        toml::to_string(self)
            .expect("day header serializes")
            .into_bytes()
    }

    pub fn decode(payload: &[u8]) -> Result<DayHeader, RecordError> {
        let text = std::str::from_utf8(payload)
            .map_err(|_| RecordError("start-of-day record is not UTF-8".into()))?;
        let header: DayHeader = toml::from_str(text)
            .map_err(|e| RecordError(format!("start-of-day record: {}", e.message())))?;
        if header.format != Self::FORMAT {
            return Err(RecordError(format!(
                "journal record format {} is not the supported format {}",
                header.format,
                Self::FORMAT
            )));
        }
        Ok(header)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError(pub String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordError {}

/// Write an OUCH input record into `buf`; returns the payload length.
pub fn encode_ouch(account: AccountId, message: &[u8], buf: &mut [u8]) -> usize {
    let len = 2 + message.len();
    assert!(buf.len() >= len, "record buffer too small");
    buf[..2].copy_from_slice(&account.0.to_be_bytes());
    buf[2..len].copy_from_slice(message);
    len
}

/// Write an admin record into `buf`; returns the payload length (3).
pub fn encode_admin(admin: Admin, buf: &mut [u8]) -> usize {
    let (op, first, second) = match admin {
        Admin::Halt(l) => (b'H', l.0, None),
        Admin::Resume(l) => (b'R', l.0, None),
        Admin::EndOfDay => (b'E', 0, None),
        Admin::CancelAll { account, symbol } => (b'C', account.0, Some(symbol.map_or(0, |l| l.0))),
        Admin::Block(account) => (b'B', account.0, None),
        Admin::Unblock(account) => (b'U', account.0, None),
    };
    buf[0] = op;
    buf[1..3].copy_from_slice(&first.to_be_bytes());
    match second {
        Some(locate) => {
            buf[3..5].copy_from_slice(&locate.to_be_bytes());
            5
        }
        None => 3,
    }
}

/// Write a disconnect record into `buf`; returns the payload length (2).
pub fn encode_disconnect(account: AccountId, buf: &mut [u8]) -> usize {
    buf[..2].copy_from_slice(&account.0.to_be_bytes());
    2
}

/// The command a record carries (the start-of-day header is read with [`DayHeader::decode`]).
pub fn decode(kind: u8, payload: &[u8]) -> Result<Command, RecordError> {
    let bad = |what: &str| {
        Err(RecordError(format!(
            "{what} record of {} bytes is malformed",
            payload.len()
        )))
    };
    match kind {
        KIND_START_OF_DAY => Ok(Command::StartOfDay),
        KIND_OUCH => {
            if payload.len() < 3 {
                return bad("OUCH");
            }
            let account = AccountId(u16::from_be_bytes([payload[0], payload[1]]));
            let message = Inbound::decode(&payload[2..])
                .map_err(|e| RecordError(format!("OUCH record: {e}")))?;
            Ok(Command::Ouch { account, message })
        }
        KIND_ADMIN => {
            let admin = match *payload {
                [op, hi, lo] => {
                    let value = u16::from_be_bytes([hi, lo]);
                    match op {
                        b'H' => Admin::Halt(Locate(value)),
                        b'R' => Admin::Resume(Locate(value)),
                        b'E' => Admin::EndOfDay,
                        b'B' => Admin::Block(AccountId(value)),
                        b'U' => Admin::Unblock(AccountId(value)),
                        _ => return bad("admin"),
                    }
                }
                [b'C', a1, a2, l1, l2] => Admin::CancelAll {
                    account: AccountId(u16::from_be_bytes([a1, a2])),
                    symbol: Some(Locate(u16::from_be_bytes([l1, l2]))).filter(|l| l.0 != 0),
                },
                _ => return bad("admin"),
            };
            Ok(Command::Admin(admin))
        }
        KIND_DISCONNECT => match *payload {
            [hi, lo] => Ok(Command::Disconnect {
                account: AccountId(u16::from_be_bytes([hi, lo])),
            }),
            _ => bad("disconnect"),
        },
        KIND_TICK if payload.is_empty() => Ok(Command::Tick),
        KIND_TICK => bad("tick"),
        other => Err(RecordError(format!("unknown record kind {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Limits;

    #[test]
    fn admin_round_trips() {
        for admin in [
            Admin::Halt(Locate(3)),
            Admin::Resume(Locate(1)),
            Admin::EndOfDay,
            Admin::CancelAll {
                account: AccountId(2),
                symbol: None,
            },
            Admin::CancelAll {
                account: AccountId(0),
                symbol: Some(Locate(3)),
            },
            Admin::Block(AccountId(7)),
            Admin::Unblock(AccountId(7)),
        ] {
            let mut buf = [0u8; ADMIN_RECORD_BYTES_MAX];
            let n = encode_admin(admin, &mut buf);
            assert_eq!(decode(KIND_ADMIN, &buf[..n]), Ok(Command::Admin(admin)));
        }
        let mut buf = [0u8; 2];
        let n = encode_disconnect(AccountId(3), &mut buf);
        assert_eq!(
            decode(KIND_DISCONNECT, &buf[..n]),
            Ok(Command::Disconnect {
                account: AccountId(3)
            })
        );
        assert!(decode(KIND_DISCONNECT, &[1]).is_err());
        assert!(decode(KIND_ADMIN, &[b'C', 0, 1]).is_err());
    }

    #[test]
    fn ouch_record_carries_account_and_bytes() {
        let mut msg = [b' '; 19];
        msg[0] = b'X';
        msg[15..].copy_from_slice(&7u32.to_be_bytes());
        let mut buf = [0u8; OUCH_RECORD_BYTES_MAX];
        let n = encode_ouch(AccountId(2), &msg, &mut buf);
        let Ok(Command::Ouch {
            account,
            message: Inbound::Cancel(x),
        }) = decode(KIND_OUCH, &buf[..n])
        else {
            panic!("not a cancel")
        };
        assert_eq!((account, x.shares.0), (AccountId(2), 7));
        assert!(decode(KIND_OUCH, &buf[..n - 1]).is_err());
    }

    #[test]
    fn day_header_round_trips_and_rejects_other_formats() {
        let header = DayHeader {
            format: DayHeader::FORMAT,
            gateway_session: "S1".into(),
            feed_session: "F1".into(),
            venue: Venue::demo(&["AAPL"], &[("U", "F")], Limits::default()),
        };
        assert_eq!(DayHeader::decode(&header.encode()), Ok(header.clone()));
        let newer = DayHeader {
            format: 99,
            ..header
        };
        assert!(
            DayHeader::decode(&newer.encode())
                .unwrap_err()
                .0
                .contains("format 99")
        );
        assert!(decode(9, &[]).is_err());
        assert!(decode(KIND_TICK, &[1]).is_err());
    }
}
