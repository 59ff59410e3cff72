//! Replay of a journal whose records after a valid start of day come from the bytes: orders,
//! cancels and replaces of two accounts on one symbol, ticks, admin commands, disconnects,
//! leader changes, and raw records of any kind and payload. `bourse replay` must answer
//! without panicking (a record that does not decode is an error, never a crash), and the
//! digesting replay and the no-digest one (the recovery path) must agree: both fail or both
//! report the same inputs, message counts and state digest. Runs the journal-read thread
//! and the replay-digest thread on every input.
//!
//! Bytes: a sequence of records, each a choice byte and its fields (see `next_record`).
#![no_main]

use bourse::exchange::{Admin, Limits, Venue};
use bourse::journal::{Durability, JournalConfig, JournalWriter};
use bourse::replay::{ReplayOptions, replay_with};
use bourse::sequencer::record::{
    DayHeader, KIND_ADMIN, KIND_DISCONNECT, KIND_NOOP, KIND_OUCH, KIND_START_OF_DAY, KIND_TICK,
    encode_admin, encode_ouch,
};
use bourse::types::{AccountId, Alpha, Firm, Locate, Price, Shares, Timestamp, Token};
use bourse::wire::ouch::{CancelOrder, EnterOrder, Inbound, ReplaceOrder};
use bourse_fuzz::scratch_dir;
use libfuzzer_sys::fuzz_target;

/// Records a run writes, at most (a run stays fast).
const RECORDS_MAX: usize = 512;

fn token(id: u8) -> Token {
    Alpha::from_str_padded(&format!("T{id}")).expect("a short token")
}

/// The next record from `bytes` (consumed): its kind and payload; None when they run out.
fn next_record(bytes: &mut &[u8]) -> Option<(u8, Vec<u8>)> {
    let (&choice, rest) = bytes.split_first()?;
    let [a, b, c, d, rest @ ..] = rest else {
        return None;
    };
    *bytes = rest;
    let account = AccountId(u16::from(a & 1));
    let ouch = |message: Inbound| {
        let mut raw = [0u8; 64];
        let len = message.encode(&mut raw);
        let mut payload = [0u8; bourse::limits::OUCH_RECORD_BYTES_MAX];
        let n = encode_ouch(account, &raw[..len], &mut payload);
        (KIND_OUCH, payload[..n].to_vec())
    };
    let price = Price(1_000_000 + u32::from(d % 8) * 100);
    Some(match choice % 10 {
        0..=2 => ouch(Inbound::Enter(EnterOrder {
            token: token(*b),
            side: if c & 1 == 0 { b'B' } else { b'S' },
            shares: Shares(1 + u32::from(c >> 1) * 10),
            stock: Alpha::from_str_padded("AAPL").expect("a symbol"),
            price,
            tif: if a & 2 == 0 { 99_999 } else { 0 },
            firm: Firm::SPACES,
            display: if a & 4 == 0 { b'Y' } else { b'N' },
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(u32::from(a >> 5) * 10),
            cross_type: b'N',
            customer_type: b' ',
        })),
        3 => ouch(Inbound::Cancel(CancelOrder {
            token: token(*b),
            shares: Shares(u32::from(c % 4) * 10),
        })),
        4 => ouch(Inbound::Replace(ReplaceOrder {
            existing: token(*b),
            replacement: token(*c),
            shares: Shares(1 + u32::from(*d) * 5),
            price,
            tif: 99_999,
            display: b'Y',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
        })),
        5 => (KIND_TICK, Vec::new()),
        6 => {
            let admin = match b % 6 {
                0 => Admin::Halt(Locate(1)),
                1 => Admin::Resume(Locate(1)),
                2 => Admin::EndOfDay,
                3 => Admin::CancelAll {
                    account,
                    symbol: None,
                },
                4 => Admin::Block(account),
                _ => Admin::Unblock(account),
            };
            let mut payload = [0u8; 16];
            let n = encode_admin(admin, &mut payload);
            (KIND_ADMIN, payload[..n].to_vec())
        }
        7 => (KIND_DISCONNECT, account.0.to_be_bytes().to_vec()),
        8 => (KIND_NOOP, u64::from(*b).to_be_bytes().to_vec()),
        _ => {
            // Any kind, any payload: decoding must refuse what it cannot read.
            let len = usize::from(c % 48).min(bytes.len());
            let (payload, rest) = bytes.split_at(len);
            *bytes = rest;
            (*b % 8, payload.to_vec())
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch_dir("replay-records");
    let config = JournalConfig {
        segment_bytes: 1 << 20,
        max_payload_bytes: 64 << 10,
        durability: Durability::Async,
        ..JournalConfig::new(&dir)
    };
    let (mut writer, _) = JournalWriter::open_or_create(config, 0).expect("a fresh journal");
    let limits = Limits {
        orders_per_symbol: 64,
        levels_per_side: 16,
        tokens_per_account: 64,
    };
    let header = DayHeader {
        format: DayHeader::FORMAT,
        gateway_session: "S1".into(),
        feed_session: "F1".into(),
        venue: Venue::demo(&["AAPL"], &[("U1", "F1"), ("U2", "F2")], limits),
    };
    let mut at = 34_200_000_000_000u64;
    writer
        .append(Timestamp(at), KIND_START_OF_DAY, &header.encode())
        .expect("room");
    let mut bytes = data;
    for _ in 0..RECORDS_MAX {
        let Some((kind, payload)) = next_record(&mut bytes) else {
            break;
        };
        at += 1_000;
        writer.append(Timestamp(at), kind, &payload).expect("room");
    }
    writer.flush().expect("written");
    drop(writer);
    let digests = replay_with(&dir, ReplayOptions::default(), |_| {});
    let counts = replay_with(
        &dir,
        ReplayOptions {
            no_digest: true,
            ..ReplayOptions::default()
        },
        |_| {},
    );
    match (digests, counts) {
        (Ok(d), Ok(c)) => {
            assert_eq!(
                (d.inputs, d.last_seq, d.itch_messages, d.state_digest),
                (c.inputs, c.last_seq, c.itch_messages, c.state_digest)
            );
            let messages = |r: &bourse::replay::ReplayReport| -> Vec<u64> {
                r.ouch.iter().map(|(_, m, _)| *m).collect()
            };
            assert_eq!(messages(&d), messages(&c));
        }
        (Err(_), Err(_)) => {}
        (d, c) => panic!("the replays disagree: {d:?} against {c:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
});
