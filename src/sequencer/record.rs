//! Journal record payloads: how each kind of input is stored, and back.
//!
//! | kind | payload |
//! |---|---|
//! | 1 start of day | UTF-8 TOML of [`DayHeader`]: sessions and the venue definition |
//! | 2 OUCH | account (u16, big-endian), then the OUCH message exactly as received |
//! | 3 admin | operation (`H` halt, `R` resume, `E` end of day), locate (u16, big-endian) |
//! | 4 tick | empty: time passes (TIF expiry) |
//! | 5 leader change | term (u64, big-endian): a cluster leader took office (not an input) |
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
    let (op, locate) = match admin {
        Admin::Halt(l) => (b'H', l.0),
        Admin::Resume(l) => (b'R', l.0),
        Admin::EndOfDay => (b'E', 0),
    };
    buf[0] = op;
    buf[1..3].copy_from_slice(&locate.to_be_bytes());
    3
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
            let [op, hi, lo] = payload else {
                return bad("admin");
            };
            let locate = Locate(u16::from_be_bytes([*hi, *lo]));
            match op {
                b'H' => Ok(Command::Admin(Admin::Halt(locate))),
                b'R' => Ok(Command::Admin(Admin::Resume(locate))),
                b'E' => Ok(Command::Admin(Admin::EndOfDay)),
                _ => bad("admin"),
            }
        }
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
        ] {
            let mut buf = [0u8; 3];
            let n = encode_admin(admin, &mut buf);
            assert_eq!(decode(KIND_ADMIN, &buf[..n]), Ok(Command::Admin(admin)));
        }
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
