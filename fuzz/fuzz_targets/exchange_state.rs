//! The exchange state a snapshot holds, restored from damaged bytes. A valid state is built
//! from the input (orders, cancels and replaces of two accounts on two symbols, some left
//! resting), encoded, then damaged where the input says. `Exchange::from_state` (the compact
//! layout's restore) and `Split::from_state` with two shards (the sharded layout's) must answer
//! without panicking — bytes that do not describe a state of this venue are an error — and
//! must agree: both refuse, or both accept with the same state digest and answer the same
//! next inputs with the same outputs. Undamaged, both must accept with the digest of the
//! state that was saved.
//!
//! Bytes: byte 0 the number of damages (0-3), then 3 bytes per damage (offset u16 scaled to
//! the state, xor), then 4 bytes per input (choice, token, shares, price).
#![no_main]

use bourse::exchange::{Command, Exchange, Input, Limits, Recorder, Split, Venue};
use bourse::types::{AccountId, Alpha, Firm, Price, Shares, Timestamp, Token};
use bourse::wire::ouch::{CancelOrder, EnterOrder, Inbound, ReplaceOrder};
use libfuzzer_sys::fuzz_target;

/// Inputs a run applies, at most (a run stays fast).
const INPUTS_MAX: usize = 256;
const SYMBOLS: [&str; 2] = ["AAPL", "MSFT"];

fn venue() -> Venue {
    let limits = Limits {
        orders_per_symbol: 32,
        levels_per_side: 8,
        tokens_per_account: 32,
    };
    Venue::demo(&SYMBOLS, &[("U1", "F1"), ("U2", "F2")], limits)
}

fn token(id: u8) -> Token {
    Alpha::from_str_padded(&format!("T{}", id % 48)).expect("a short token")
}

/// Input `seq` from four bytes: an Enter, Cancel or Replace of one of two accounts.
fn input(seq: u64, [choice, id, shares, level]: [u8; 4]) -> Input {
    let account = AccountId(u16::from(choice & 1));
    let price = Price(1_000_000 + u32::from(level % 6) * 100);
    let message = match (choice >> 1) % 4 {
        0 | 1 => Inbound::Enter(EnterOrder {
            token: token(id),
            side: if shares & 1 == 0 { b'B' } else { b'S' },
            shares: Shares(100 + u32::from(shares >> 1) * 10),
            stock: Alpha::from_str_padded(SYMBOLS[usize::from(choice >> 7)]).expect("symbol"),
            price,
            tif: 99_999,
            firm: Firm::SPACES,
            display: if choice & 8 == 0 { b'Y' } else { b'N' },
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
            cross_type: b'N',
            customer_type: b' ',
        }),
        2 => Inbound::Cancel(CancelOrder {
            token: token(id),
            shares: Shares(u32::from(shares) * 10),
        }),
        _ => Inbound::Replace(ReplaceOrder {
            existing: token(id),
            replacement: token(shares),
            shares: Shares(100 + u32::from(level) * 10),
            price,
            tif: 99_999,
            display: b'Y',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
        }),
    };
    Input {
        seq,
        timestamp: Timestamp(34_200_000_000_000 + seq * 1_000),
        command: Command::Ouch { account, message },
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&damages, rest)) = data.split_first() else {
        return;
    };
    let damages = usize::from(damages % 4);
    let Some((damage, orders)) = rest.split_at_checked(damages * 3) else {
        return;
    };
    let inputs: Vec<Input> = std::iter::once(Input {
        seq: 1,
        timestamp: Timestamp(34_200_000_000_000),
        command: Command::StartOfDay,
    })
    .chain(
        orders
            .chunks_exact(4)
            .take(INPUTS_MAX)
            .enumerate()
            .map(|(i, b)| input(i as u64 + 2, [b[0], b[1], b[2], b[3]])),
    )
    .collect();
    // The last quarter of the inputs come after the restore.
    let cut = inputs.len() - inputs.len() / 4;
    let mut exchange = Exchange::new(venue()).expect("the venue");
    let mut recorder = Recorder::default();
    for input in &inputs[..cut] {
        exchange.apply(input, &mut recorder);
    }
    let saved = exchange.state_digest();
    let mut state = Vec::new();
    exchange.save_state(&mut state).expect("in memory");
    for d in damage.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([d[0], d[1]])) * state.len() / 65_536;
        state[at] ^= d[2] | 1;
    }
    let compact = Exchange::from_state(venue(), &state);
    let split = Split::from_state(&venue(), 2, &state);
    let (mut compact, mut split) = match (compact, split) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(_), Err(_)) => {
            assert!(damages > 0, "an undamaged state restores");
            return;
        }
        (c, s) => panic!(
            "the layouts disagree: compact {:?}, split {:?}",
            c.err(),
            s.err()
        ),
    };
    let mut sink = Recorder::default();
    let digest = compact.state_digest();
    assert_eq!(
        split.state_digest(&mut sink),
        digest,
        "one shard and two agree"
    );
    if damages == 0 {
        assert_eq!(digest, saved, "restored as saved");
    }
    // The next inputs follow the restored state's last one (damage may have moved it).
    let last_seq = compact.last_seq();
    assert_eq!(split.last_seq(), last_seq, "one shard and two agree");
    if last_seq > u64::MAX / 2 {
        return;
    }
    let (mut a, mut b) = (Recorder::default(), Recorder::default());
    for (k, input) in inputs[cut..].iter().enumerate() {
        let input = Input {
            seq: last_seq + 1 + k as u64,
            ..*input
        };
        compact.apply(&input, &mut a);
        split.apply(&input, &mut b);
    }
    split.flush(&mut b);
    assert!(a.outputs == b.outputs, "the same answers after the restore");
});
