//! Convert an op stream into sequenced exchange inputs (OUCH 4.2 messages).

use super::Op;
use crate::exchange::{Command, Input, Limits, Venue};
use crate::types::{AccountId, Firm, Price, Shares, Side, Timestamp, Token};
use crate::wire::ouch::{CancelOrder, EnterOrder, Inbound, ReplaceOrder};

/// TIF of resting orders: "system hours" (a DAY order, no expiry timer).
const TIF_DAY: u32 = 99_999;
const TIF_IOC: u32 = 0;
/// 09:30 in ns since midnight: inputs are stamped from here, 1 µs apart.
const OPEN_NS: u64 = 34_200 * Timestamp::NANOS_PER_SECOND;

/// Username of account `index` in [`demo_venue`] (`U00000`..).
pub fn account_name(index: u16) -> String {
    format!("U{index:05}")
}

/// A [`Venue::demo`] with one symbol and `accounts` accounts (firm `F` + 3 digits, cycling),
/// without the fat-finger limits (shares up to the OUCH maximum, no notional cap).
pub fn demo_venue(symbol: &str, accounts: u16, limits: Limits) -> Venue {
    let names: Vec<(String, String)> = (0..accounts)
        .map(|a| (account_name(a), format!("F{:03}", a % 1000)))
        .collect();
    let pairs: Vec<(&str, &str)> = names
        .iter()
        .map(|(u, f)| (u.as_str(), f.as_str()))
        .collect();
    let mut venue = Venue::demo(&[symbol], &pairs, limits);
    // Sweeps take hundreds of levels: allow any OUCH size and no notional cap.
    venue.symbols[0].max_order_shares = 999_999;
    venue.symbols[0].max_order_notional = None;
    venue
}

/// The 14-byte token of order `id`: its decimal digits, zero-padded. Ids are unique across
/// accounts, so tokens are unique per account.
pub fn token_of(id: u32) -> Token {
    let mut bytes = [b'0'; 14];
    let mut v = id;
    for b in bytes.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    crate::types::Alpha(bytes)
}

fn side_byte(side: Side) -> u8 {
    match side {
        Side::Buy => b'B',
        Side::Sell => b'S',
    }
}

fn enter(op_token: Token, side: Side, shares: u32, stock: &str, price: Price, tif: u32) -> Inbound {
    Inbound::Enter(EnterOrder {
        token: op_token,
        side: side_byte(side),
        shares: Shares(shares),
        stock: crate::types::Symbol::from_str_padded(stock).expect("symbol fits 8 bytes"),
        price,
        tif,
        firm: Firm::SPACES,
        display: b'Y',
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    })
}

/// The OUCH message of one op (price = ticks x `tick`).
pub fn to_message(op: &Op, stock: &str, tick: u32) -> (AccountId, Inbound) {
    let price = |ticks: u32| Price(ticks.checked_mul(tick).expect("price fits u32"));
    let message = match *op {
        Op::Limit {
            id,
            side,
            price_ticks,
            shares,
            ..
        } => enter(
            token_of(id),
            side,
            shares,
            stock,
            price(price_ticks),
            TIF_DAY,
        ),
        Op::Ioc {
            id,
            side,
            price_ticks,
            shares,
            ..
        } => enter(
            token_of(id),
            side,
            shares,
            stock,
            price(price_ticks),
            TIF_IOC,
        ),
        Op::Market {
            id, side, shares, ..
        } => enter(token_of(id), side, shares, stock, Price::MARKET, TIF_IOC),
        Op::Cancel { id, .. } => Inbound::Cancel(CancelOrder {
            token: token_of(id),
            shares: Shares(0),
        }),
        Op::Reduce { id, shares, .. } => Inbound::Cancel(CancelOrder {
            token: token_of(id),
            shares: Shares(shares),
        }),
        Op::Replace {
            id,
            new_id,
            price_ticks,
            shares,
            executed,
            ..
        } => Inbound::Replace(ReplaceOrder {
            existing: token_of(id),
            replacement: token_of(new_id),
            shares: Shares(shares + executed),
            price: price(price_ticks),
            tif: TIF_DAY,
            display: b'Y',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
        }),
    };
    (AccountId(op.account()), message)
}

/// The inputs of a day: `StartOfDay` (seq 1), then one OUCH input per op, stamped 1 µs
/// apart from 09:30. Prices are ticks x `tick` (the symbol's tick; 100 in `Venue::demo`).
pub fn to_inputs(ops: &[Op], stock: &str, tick: u32) -> Vec<Input> {
    let mut inputs = Vec::with_capacity(ops.len() + 1);
    inputs.push(Input {
        seq: 1,
        timestamp: Timestamp(OPEN_NS),
        command: Command::StartOfDay,
    });
    for (i, op) in ops.iter().enumerate() {
        let (account, message) = to_message(op, stock, tick);
        let n = i as u64 + 1;
        inputs.push(Input {
            seq: n + 1,
            timestamp: Timestamp(OPEN_NS + n * 1_000),
            command: Command::Ouch { account, message },
        });
    }
    inputs
}
