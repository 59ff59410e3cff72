//! The recorded days in `replay-logs/`: how each journal is made, deterministically.
//!
//! Every input's timestamp is fixed by the generator (no clock), so regenerating a day gives
//! a journal whose records, and so whose replay digests, are identical. (Segment headers carry
//! the creation wall-clock time, which replay ignores.)

use bourse::exchange::{Admin, Limits, Stp, Venue};
use bourse::journal::{Durability, JournalConfig, JournalWriter, day_epoch_of};
use bourse::sequencer::record::{
    self, DayHeader, KIND_ADMIN, KIND_DISCONNECT, KIND_OUCH, KIND_START_OF_DAY, KIND_TICK,
};
use bourse::types::{AccountId, Alpha, Firm, Locate, Price, Shares, Timestamp, Token};
use bourse::wire::ouch::{CancelOrder, EnterOrder, Inbound, ModifyOrder, ReplaceOrder};
use std::path::Path;

/// 2026-11-30 00:00:00 UTC: the day every sample journal claims.
pub const DAY_EPOCH_UNIX_NS: u64 = day_epoch_of(1_796_083_200_000_000_000);
/// 09:30:00 in ns since midnight: the first input's timestamp.
const OPEN_NS: u64 = 34_200_000_000_000;
const SEGMENT_BYTES: u64 = 1 << 20;

/// One input of a sample day.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Ouch(u16, Inbound),
    Admin(Admin),
    Tick,
    /// A logged-in session of the account lost its connection (DESIGN.md 4a).
    Disconnect(u16),
}

pub struct Day {
    pub venue: Venue,
    /// (timestamp in ns since midnight, input); strictly increasing timestamps.
    pub steps: Vec<(u64, Step)>,
}

/// Write `day` as a journal in `dir` (which must not hold one yet). The writer's manifest is
/// removed: the recorded days keep the segment files only (as replay-logs/ always had), so
/// they stay byte-for-byte reproducible (a manifest holds the boot id) and the torn-tail day's
/// cut record reads as a crash mid-append, not as damage to a durable record.
pub fn record(day: &Day, dir: &Path) -> Result<(), String> {
    record_with(day, dir, SEGMENT_BYTES)?;
    let manifest = bourse::journal::manifest::manifest_path(dir);
    std::fs::remove_file(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))
}

/// [`record()`] with another segment size (large synthetic days).
pub fn record_with(day: &Day, dir: &Path, segment_bytes: u64) -> Result<(), String> {
    record_steps(&day.venue, day.steps.iter().copied(), dir, segment_bytes)
}

/// [`record_with`] from steps made as they are written: a synthetic day of 100M inputs would
/// otherwise hold every step in memory (~8 GB) before the first is written.
pub fn record_steps(
    venue: &Venue,
    steps: impl IntoIterator<Item = (u64, Step)>,
    dir: &Path,
    segment_bytes: u64,
) -> Result<(), String> {
    let config = JournalConfig {
        segment_bytes,
        max_payload_bytes: 64 << 10,
        durability: Durability::Async,
        create_dir: true,
        ..JournalConfig::new(dir)
    };
    let (mut writer, report) =
        JournalWriter::open_or_create(config, DAY_EPOCH_UNIX_NS).map_err(|e| e.to_string())?;
    if report.last_seq != 0 {
        return Err(format!("{} already holds a journal", dir.display()));
    }
    let header = DayHeader {
        format: DayHeader::FORMAT,
        gateway_session: "SAMPLE0001".into(),
        feed_session: "SAMPLE0001".into(),
        venue: venue.clone(),
    };
    let append = |w: &mut JournalWriter, ts: u64, kind: u8, payload: &[u8]| {
        w.append(Timestamp(ts), kind, payload)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    append(&mut writer, OPEN_NS, KIND_START_OF_DAY, &header.encode())?;
    let mut payload = [0u8; 128];
    for (ts, step) in steps {
        match step {
            Step::Ouch(account, message) => {
                let mut raw = [0u8; 64];
                let n = message.encode(&mut raw);
                let len = record::encode_ouch(AccountId(account), &raw[..n], &mut payload);
                append(&mut writer, ts, KIND_OUCH, &payload[..len])?;
            }
            Step::Admin(admin) => {
                let len = record::encode_admin(admin, &mut payload);
                append(&mut writer, ts, KIND_ADMIN, &payload[..len])?;
            }
            Step::Tick => append(&mut writer, ts, KIND_TICK, &[])?,
            Step::Disconnect(account) => {
                let len = record::encode_disconnect(AccountId(account), &mut payload);
                append(&mut writer, ts, KIND_DISCONNECT, &payload[..len])?;
            }
        }
    }
    writer.sync_all().map_err(|e| e.to_string())?;
    Ok(())
}

fn token(text: &str) -> Token {
    Token::from_str_padded(text).expect("short token")
}

fn symbol(text: &str) -> Alpha<8> {
    Alpha::from_str_padded(text).expect("short symbol")
}

/// An Enter Order with the usual fields; tests of one field override it.
pub fn enter(tok: &str, side: u8, shares: u32, stock: &str, price: u32) -> EnterOrder {
    EnterOrder {
        token: token(tok),
        side,
        shares: Shares(shares),
        stock: symbol(stock),
        price: Price(price),
        tif: 99_999,
        firm: Firm::SPACES,
        display: b'Y',
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    }
}

fn replace(old: &str, new: &str, shares: u32, price: u32) -> ReplaceOrder {
    ReplaceOrder {
        existing: token(old),
        replacement: token(new),
        shares: Shares(shares),
        price: Price(price),
        tif: 99_999,
        display: b'Y',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
    }
}

fn cancel(tok: &str, shares: u32) -> Inbound {
    Inbound::Cancel(CancelOrder {
        token: token(tok),
        shares: Shares(shares),
    })
}

fn sample_venue(symbols: &[&str], accounts: &[(&str, &str)]) -> Venue {
    let limits = Limits {
        orders_per_symbol: 1 << 14,
        levels_per_side: 1 << 10,
        tokens_per_account: 1 << 16,
    };
    Venue::demo(symbols, accounts, limits)
}

/// Every reject code, every replace outcome, cancels, IOC, min qty, post-only, hidden,
/// attributable, expiry, halt/resume, modify, duplicates and end of day.
pub fn edge_case_day() -> Day {
    let mut steps: Vec<Step> = Vec::new();
    let mut o = |account: u16, message: Inbound| steps.push(Step::Ouch(account, message));
    let e = |m: EnterOrder| Inbound::Enter(m);
    let u = |m: ReplaceOrder| Inbound::Replace(m);
    // Reject codes, in DESIGN.md order.
    o(
        0,
        e(EnterOrder {
            side: b'Q',
            ..enter("J-O-side", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(0, e(enter("J-S", b'B', 100, "NOPE", 1_000_000)));
    o(0, e(enter("J-Z-zero", b'B', 0, "AAPL", 1_000_000)));
    o(0, e(enter("J-Z-big", b'B', 1_000_000, "AAPL", 1_000_000)));
    o(0, e(enter("J-X-zero", b'B', 100, "AAPL", 0)));
    o(0, e(enter("J-X-tick", b'B', 100, "AAPL", 1_000_050)));
    o(0, e(enter("J-X-mkt", b'B', 100, "AAPL", Price::MARKET.0)));
    o(0, e(enter("J-X-high", b'B', 100, "AAPL", 2_000_000_000)));
    o(
        0,
        e(EnterOrder {
            tif: 100_000,
            ..enter("J-O-tif", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            display: b'M',
            ..enter("J-D", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            cross_type: b'C',
            ..enter("J-R", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            min_qty: Shares(10),
            ..enter("J-N-day", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            firm: Firm::from_str_padded("XXXX").unwrap(),
            ..enter("J-L", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(0, e(enter("J-Z-max", b'B', 100_001, "AAPL", 1_000_000)));
    o(0, e(enter("J-n", b'B', 100_000, "AAPL", 5_000_100)));
    o(0, e(enter("J-S-case", b'B', 100, "aapl", 1_000_000)));
    // A book: displayed, hidden, attributable, post-only.
    o(1, e(enter("ask1", b'S', 300, "AAPL", 1_000_500)));
    o(
        1,
        e(EnterOrder {
            display: b'N',
            ..enter("ask-hidden", b'S', 200, "AAPL", 1_000_500)
        }),
    );
    o(
        2,
        e(EnterOrder {
            display: b'A',
            ..enter("ask-attr", b'S', 100, "AAPL", 1_001_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            display: b'P',
            ..enter("bid-post", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    o(
        0,
        e(EnterOrder {
            display: b'P',
            ..enter("post-dead", b'B', 100, "AAPL", 1_000_500)
        }),
    );
    o(0, e(enter("J-dup", b'B', 1, "AAPL", 900_000)));
    o(0, e(enter("J-dup", b'B', 1, "AAPL", 900_000)));
    // Takers: through displayed then hidden; IOC remainder; min qty dead; market order.
    o(0, e(enter("take1", b'B', 400, "AAPL", 1_000_500)));
    o(
        0,
        e(EnterOrder {
            tif: 0,
            ..enter("ioc1", b'B', 500, "AAPL", 1_001_000)
        }),
    );
    o(
        1,
        e(EnterOrder {
            tif: 0,
            min_qty: Shares(500),
            ..enter("ioc-min", b'S', 600, "AAPL", 990_000)
        }),
    );
    o(
        1,
        e(EnterOrder {
            tif: 0,
            ..enter("mkt-dead", b'S', 100, "MSFT", Price::MARKET.0)
        }),
    );
    o(1, e(enter("msft-bid", b'B', 500, "MSFT", 2_000_000)));
    o(
        2,
        e(EnterOrder {
            tif: 0,
            ..enter("mkt", b'S', 700, "MSFT", Price::MARKET.0)
        }),
    );
    // Cancels: partial, to zero, reduces nothing, unknown, another account's.
    o(0, e(enter("c1", b'B', 500, "MSFT", 1_990_000)));
    o(0, cancel("c1", 200));
    o(0, cancel("c1", 300));
    o(1, cancel("c1", 0));
    o(0, cancel("nobody", 0));
    o(0, cancel("c1", 0));
    // Replace outcomes 1..4.
    o(0, e(enter("r1", b'B', 500, "AAPL", 990_000)));
    o(0, u(replace("r-none", "r-x", 100, 990_000)));
    o(0, u(replace("r1", "J-dup", 100, 990_000)));
    o(0, u(replace("r1", "r2", 600, 990_100)));
    o(1, e(enter("hit-r2", b'S', 200, "AAPL", 990_100)));
    o(0, u(replace("r2", "r3", 600, 990_100)));
    o(0, u(replace("r3", "r4", 100, 990_100)));
    o(0, e(enter("r5", b'B', 100, "AAPL", 980_000)));
    o(0, u(replace("r5", "r6", 1_000_000, 980_000)));
    o(0, e(enter("r7", b'B', 100, "MSFT", 1_980_000)));
    steps.push(Step::Admin(Admin::Halt(Locate(2))));
    let mut o = |account: u16, message: Inbound| steps.push(Step::Ouch(account, message));
    o(0, u(replace("r7", "r8", 100, 1_980_000)));
    o(0, e(enter("J-H", b'B', 100, "MSFT", 1_980_000)));
    o(0, cancel("r7", 50));
    steps.push(Step::Admin(Admin::Resume(Locate(2))));
    let mut o = |account: u16, message: Inbound| steps.push(Step::Ouch(account, message));
    o(
        2,
        e(EnterOrder {
            display: b'A',
            ..enter("a1", b'S', 100, "MSFT", 2_100_000)
        }),
    );
    o(
        2,
        u(ReplaceOrder {
            display: b'Y',
            ..replace("a1", "a2", 100, 2_100_000)
        }),
    );
    o(
        2,
        u(ReplaceOrder {
            tif: 0,
            ..replace("a2", "a3", 100, 1_980_000)
        }),
    );
    o(
        0,
        Inbound::Modify(ModifyOrder {
            token: token("r7"),
            side: b'B',
            shares: Shares(10),
        }),
    );
    // Time in force.
    o(
        1,
        e(EnterOrder {
            tif: 2,
            ..enter("ttl", b'S', 100, "MSFT", 2_200_000)
        }),
    );
    let mut timed: Vec<(u64, Step)> = steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| (OPEN_NS + (i as u64 + 1) * 1_000_000, s))
        .collect();
    let mut ts = timed.last().expect("steps").0;
    for _ in 0..3 {
        ts += 1_000_000_000;
        timed.push((ts, Step::Tick));
    }
    timed.push((ts + 1_000, Step::Admin(Admin::EndOfDay)));
    timed.push((
        ts + 2_000,
        Step::Ouch(0, e(enter("J-C", b'B', 100, "AAPL", 1_000_000))),
    ));
    let venue = sample_venue(
        &["AAPL", "MSFT"],
        &[("ALICE", "FRMA"), ("BOB", "FRMB"), ("CAROL", "FRMC")],
    );
    Day {
        venue,
        steps: timed,
    }
}

/// The venue controls of DESIGN.md 4a: self-trade prevention in every mode (against
/// displayed and hidden orders, IOC and market takers, after a partial fill, a replacement as
/// the taker, a post-only against its own order), account limits (open orders, open shares,
/// day shares; on Enter and on Replace), the kill switch for one symbol and for all, block and
/// unblock (with a replace and a cancel while blocked, refused twice, after the close),
/// disconnects with and without cancel_on_disconnect, end of day.
pub fn venue_controls_day() -> Day {
    const ALICE: u16 = 0; // cancel_on_disconnect
    const BOB: u16 = 1; // no controls
    const NEWEST: u16 = 2;
    const OLDEST: u16 = 3;
    const BOTH: u16 = 4;
    const DECR: u16 = 5;
    const LIMIT: u16 = 6; // 2 open orders, 500 open shares, 300 day shares
    let mut steps: Vec<Step> = Vec::new();
    let o = |steps: &mut Vec<Step>, account: u16, message: Inbound| {
        steps.push(Step::Ouch(account, message))
    };
    let e = |m: EnterOrder| Inbound::Enter(m);
    let ioc = |m: EnterOrder| Inbound::Enter(EnterOrder { tif: 0, ..m });
    let hidden = |m: EnterOrder| EnterOrder { display: b'N', ..m };
    let admin = |steps: &mut Vec<Step>, a: Admin| steps.push(Step::Admin(a));
    // cancel-newest on AAPL: a fill with BOB first, then its own order stops it.
    o(&mut steps, BOB, e(enter("x-n1", b'S', 50, "AAPL", 990_000)));
    o(
        &mut steps,
        NEWEST,
        e(enter("n1", b'S', 100, "AAPL", 1_000_000)),
    );
    o(
        &mut steps,
        NEWEST,
        e(enter("n2", b'B', 200, "AAPL", 1_000_000)),
    );
    o(
        &mut steps,
        NEWEST,
        ioc(enter("n3", b'B', 50, "AAPL", 1_000_000)),
    );
    o(
        &mut steps,
        NEWEST,
        ioc(enter("n4", b'B', 10, "AAPL", Price::MARKET.0)),
    );
    o(
        &mut steps,
        NEWEST,
        e(EnterOrder {
            display: b'P',
            ..enter("n5-post", b'B', 100, "AAPL", 1_000_000)
        }),
    );
    // cancel-oldest on MSFT: displayed own, BOB, hidden own; the rest rests.
    o(
        &mut steps,
        OLDEST,
        e(enter("o1", b'S', 100, "MSFT", 500_000)),
    );
    o(
        &mut steps,
        OLDEST,
        e(hidden(enter("o2", b'S', 100, "MSFT", 500_000))),
    );
    o(&mut steps, BOB, e(enter("x-o1", b'S', 50, "MSFT", 500_000)));
    o(
        &mut steps,
        OLDEST,
        e(enter("o3", b'B', 300, "MSFT", 500_000)),
    );
    // A replacement is a taker too.
    o(
        &mut steps,
        OLDEST,
        e(enter("o4", b'S', 100, "MSFT", 510_000)),
    );
    o(
        &mut steps,
        OLDEST,
        Inbound::Replace(replace("o3", "o5", 300, 510_000)),
    );
    // cancel-both on SPY: after a fill with BOB, against an attributable own order.
    o(
        &mut steps,
        BOB,
        e(enter("x-b1", b'B', 100, "SPY", 4_000_000)),
    );
    o(
        &mut steps,
        BOTH,
        e(EnterOrder {
            display: b'A',
            ..enter("b1", b'B', 200, "SPY", 4_000_000)
        }),
    );
    o(
        &mut steps,
        BOTH,
        e(enter("b2", b'S', 250, "SPY", 3_990_000)),
    );
    // decrement on IBM: displayed (to zero), BOB, hidden (reduced); an IOC; a partial X.
    o(
        &mut steps,
        DECR,
        e(enter("d1", b'S', 100, "IBM", 1_500_000)),
    );
    o(
        &mut steps,
        DECR,
        e(hidden(enter("d2", b'S', 300, "IBM", 1_500_000))),
    );
    o(
        &mut steps,
        BOB,
        e(enter("x-d1", b'S', 100, "IBM", 1_500_000)),
    );
    o(
        &mut steps,
        DECR,
        e(enter("d3", b'B', 250, "IBM", 1_500_000)),
    );
    o(
        &mut steps,
        DECR,
        ioc(enter("d4", b'B', 100, "IBM", 1_500_000)),
    );
    o(
        &mut steps,
        DECR,
        e(enter("d5", b'B', 100, "IBM", 1_400_000)),
    );
    o(&mut steps, DECR, e(enter("d6", b'S', 40, "IBM", 1_400_000)));
    // Account limits on QQQ.
    o(&mut steps, LIMIT, e(enter("l1", b'B', 300, "QQQ", 100_000)));
    o(&mut steps, LIMIT, e(enter("l2", b'B', 300, "QQQ", 100_000))); // m: open shares
    o(&mut steps, LIMIT, e(enter("l3", b'B', 200, "QQQ", 100_000)));
    o(&mut steps, LIMIT, e(enter("l4", b'B', 1, "QQQ", 90_000))); // O: open orders
    o(
        &mut steps,
        LIMIT,
        Inbound::Replace(replace("l1", "l5", 301, 100_000)),
    ); // outcome 2
    o(
        &mut steps,
        LIMIT,
        Inbound::Replace(replace("l3", "l5", 300, 100_000)),
    ); // 500: ok
    o(
        &mut steps,
        LIMIT,
        ioc(enter("l6", b'S', 100, "QQQ", 100_000)),
    ); // self-trade: 200
    o(
        &mut steps,
        LIMIT,
        ioc(enter("l7", b'S', 101, "QQQ", 100_000)),
    ); // m: day shares
    o(
        &mut steps,
        LIMIT,
        ioc(enter("l8", b'S', 50, "QQQ", 100_000)),
    ); // 300
    // Kill switch and block.
    o(
        &mut steps,
        ALICE,
        e(enter("a1", b'B', 100, "AAPL", 900_000)),
    );
    o(
        &mut steps,
        ALICE,
        e(enter("a2", b'S', 100, "AAPL", 1_100_000)),
    );
    o(
        &mut steps,
        ALICE,
        e(enter("a3", b'B', 100, "MSFT", 450_000)),
    );
    o(
        &mut steps,
        ALICE,
        e(enter("a4", b'B', 100, "AAPL", 910_000)),
    );
    o(
        &mut steps,
        ALICE,
        e(hidden(enter("a5", b'B', 100, "QQQ", 90_000))),
    );
    admin(
        &mut steps,
        Admin::CancelAll {
            account: AccountId(ALICE),
            symbol: Some(Locate(2)),
        },
    );
    admin(&mut steps, Admin::Block(AccountId(ALICE)));
    o(
        &mut steps,
        ALICE,
        e(enter("a6", b'B', 100, "AAPL", 900_000)),
    );
    o(
        &mut steps,
        ALICE,
        Inbound::Replace(replace("a1", "a7", 100, 900_000)),
    );
    o(&mut steps, ALICE, cancel("a2", 50));
    admin(&mut steps, Admin::Block(AccountId(ALICE))); // refused: already blocked
    admin(
        &mut steps,
        Admin::CancelAll {
            account: AccountId(ALICE),
            symbol: None,
        },
    );
    admin(&mut steps, Admin::Unblock(AccountId(ALICE)));
    admin(&mut steps, Admin::Unblock(AccountId(ALICE))); // refused: not blocked
    o(
        &mut steps,
        ALICE,
        e(enter("a8", b'B', 100, "AAPL", 900_000)),
    );
    o(
        &mut steps,
        ALICE,
        e(enter("a9", b'S', 100, "SPY", 4_100_000)),
    );
    // Disconnects: BOB keeps its orders, ALICE's go (reason Z); ALICE trades on after.
    steps.push(Step::Disconnect(BOB));
    steps.push(Step::Disconnect(ALICE));
    o(
        &mut steps,
        ALICE,
        e(enter("a10", b'B', 100, "AAPL", 900_000)),
    );
    // Blocked and halted: H first; blocked after the close: C first.
    admin(&mut steps, Admin::Block(AccountId(BOB)));
    admin(&mut steps, Admin::Halt(Locate(5)));
    o(&mut steps, BOB, e(enter("x-h", b'B', 100, "QQQ", 100_000)));
    o(&mut steps, BOB, e(enter("x-a", b'B', 100, "AAPL", 900_000)));
    admin(&mut steps, Admin::Resume(Locate(5)));
    let mut timed: Vec<(u64, Step)> = steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| (OPEN_NS + (i as u64 + 1) * 1_000_000, s))
        .collect();
    let ts = timed.last().expect("steps").0;
    timed.push((ts + 1_000, Step::Admin(Admin::EndOfDay)));
    timed.push((
        ts + 2_000,
        Step::Ouch(BOB, e(enter("x-c", b'B', 100, "AAPL", 900_000))),
    ));
    timed.push((ts + 3_000, Step::Admin(Admin::Unblock(AccountId(BOB)))));
    timed.push((ts + 4_000, Step::Disconnect(ALICE)));
    let mut venue = sample_venue(
        &["AAPL", "MSFT", "SPY", "IBM", "QQQ"],
        &[
            ("ALICE", "FRMA"),
            ("BOB", "FRMB"),
            ("NEWEST", "FRMN"),
            ("OLDEST", "FRMO"),
            ("BOTH", "FRMX"),
            ("DECR", "FRMD"),
            ("LIMIT", "FRML"),
        ],
    );
    let a = &mut venue.accounts;
    a[ALICE as usize].cancel_on_disconnect = true;
    a[NEWEST as usize].stp = Stp::CancelNewest;
    a[OLDEST as usize].stp = Stp::CancelOldest;
    a[BOTH as usize].stp = Stp::CancelBoth;
    a[DECR as usize].stp = Stp::Decrement;
    a[LIMIT as usize].max_open_orders = Some(2);
    a[LIMIT as usize].max_open_shares = Some(500);
    a[LIMIT as usize].max_day_shares = Some(300);
    Day {
        venue,
        steps: timed,
    }
}

/// A busy day: `inputs` orders, cancels and replaces from five accounts over three symbols,
/// from a seeded xorshift generator; ticks every simulated second; end of day.
pub fn busy_day(seed: u64, inputs: u32) -> Day {
    let symbols = ["AAPL", "MSFT", "SPY"];
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut steps = Vec::with_capacity(inputs as usize + 64);
    let mut ts = OPEN_NS;
    let mut last_tick = ts;
    let mut live: Vec<Vec<u32>> = vec![Vec::new(); 5];
    for n in 1..=inputs {
        ts += 200_000 + next() % 2_000_000;
        if ts - last_tick >= 1_000_000_000 {
            last_tick = ts;
            steps.push((ts, Step::Tick));
            ts += 1;
        }
        let account = (next() % 5) as u16;
        let r = next();
        let stock = symbols[(r % 3) as usize];
        let mid = [1_500_000u32, 3_000_000, 4_500_000][(r % 3) as usize];
        let price = mid - 2_000 + ((r >> 8) % 41) as u32 * 100;
        let side = if (r >> 20) & 1 == 0 { b'B' } else { b'S' };
        let mine = &mut live[account as usize];
        let message = match (r >> 24) % 10 {
            0..=5 => {
                mine.push(n);
                let tif = [99_999, 99_998, 0, 5][((r >> 32) % 4) as usize];
                let display = [b'Y', b'Y', b'N', b'A', b'P'][((r >> 36) % 5) as usize];
                let shares = 100 * (1 + ((r >> 40) % 10) as u32);
                Inbound::Enter(EnterOrder {
                    tif,
                    display,
                    ..enter(&format!("T{n}"), side, shares, stock, price)
                })
            }
            6 | 7 if !mine.is_empty() => {
                let id = mine.swap_remove(((r >> 32) as usize) % mine.len());
                cancel(&format!("T{id}"), if (r >> 44) & 1 == 0 { 0 } else { 50 })
            }
            _ if !mine.is_empty() => {
                let at = ((r >> 32) as usize) % mine.len();
                let id = mine[at];
                mine[at] = n;
                Inbound::Replace(replace(
                    &format!("T{id}"),
                    &format!("T{n}"),
                    100 * (1 + ((r >> 40) % 8) as u32),
                    price,
                ))
            }
            _ => continue,
        };
        steps.push((ts, Step::Ouch(account, message)));
    }
    steps.push((ts + 1_000, Step::Admin(Admin::EndOfDay)));
    let accounts = [
        ("ACCT1", "AAAA"),
        ("ACCT2", "BBBB"),
        ("ACCT3", "CCCC"),
        ("ACCT4", "DDDD"),
        ("ACCT5", "EEEE"),
    ];
    Day {
        venue: sample_venue(&symbols, &accounts),
        steps,
    }
}

/// Cut the last record of a one-segment journal in half, as a crash mid-append would.
pub fn tear_last_record(dir: &Path) -> Result<u64, String> {
    let report = bourse::journal::verify(dir).map_err(|e| e.to_string())?;
    if report.segments != 1 || report.torn_tail.is_some() {
        return Err("expected one clean segment".into());
    }
    let path = dir.join("00000001.seg");
    let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let end = report.data_bytes as usize;
    // The last record is an end-of-day admin record: 32-byte header + 3 bytes, padded to 40.
    let last_start = end - 40;
    let cut_from = last_start + 20;
    bytes[cut_from..end].fill(0);
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    Ok(report.last_seq)
}
