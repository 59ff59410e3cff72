//! The hot path allocates nothing after start-up: a counting global allocator watches the
//! exchange apply enters, matches, cancels, replaces, expiries and end of day.

mod common;

use bourse::exchange::{Admin, Command, Discard, Exchange, Input, Limits, Venue};
use bourse::types::{AccountId, Alpha, Price, Shares, Timestamp, Token};
use bourse::wire::ouch::{CancelOrder, Inbound, ReplaceOrder};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Per thread, so tests running in parallel do not count each other's allocations.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_if_watching() {
    if WATCHING.with(|w| w.get()) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

fn allocations() -> u64 {
    ALLOCATIONS.with(|a| a.get())
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_watching();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_watching();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn token(n: u64) -> Token {
    let mut t = [b' '; 14];
    let digits = format!("T{n}");
    t[..digits.len()].copy_from_slice(digits.as_bytes());
    Alpha(t)
}

fn enter(n: u64, side: u8, shares: u32, price: u32, tif: u32, display: u8) -> Inbound {
    common::order(&format!("T{n}"), side, shares, "AAPL", price, tif, display)
}

/// A day's worth of mixed inputs, built before counting starts.
fn inputs() -> Vec<Input> {
    let mut commands = vec![Command::StartOfDay];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for n in 1..=20_000u64 {
        let account = AccountId((n % 3) as u16);
        let r = next();
        let price = 1_000_000 + (r % 40) as u32 * 100;
        let side = if r & 64 == 0 { b'B' } else { b'S' };
        let message = match r % 10 {
            0..=4 => enter(
                n,
                side,
                100 + (r % 500) as u32,
                price,
                [99_999, 0, 3][(r % 3) as usize],
                [b'Y', b'N', b'A', b'P'][(r % 4) as usize],
            ),
            5 | 6 => Inbound::Cancel(CancelOrder {
                token: token(n.saturating_sub(1 + r % 30)),
                shares: Shares((r % 3) as u32 * 50),
            }),
            _ => Inbound::Replace(ReplaceOrder {
                existing: token(n.saturating_sub(1 + r % 30)),
                replacement: token(n),
                shares: Shares(100 + (r % 400) as u32),
                price: Price(price),
                tif: 99_999,
                display: b'Y',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
            }),
        };
        commands.push(Command::Ouch { account, message });
        if n % 500 == 0 {
            commands.push(Command::Tick);
        }
    }
    commands.push(Command::Admin(Admin::EndOfDay));
    commands
        .into_iter()
        .enumerate()
        .map(|(i, command)| Input {
            seq: i as u64 + 1,
            timestamp: Timestamp(1_000_000_000 + i as u64 * 10_000_000),
            command,
        })
        .collect()
}

#[test]
fn apply_allocates_nothing_after_start_up() {
    let venue = Venue::demo(
        &["AAPL", "MSFT"],
        &[("A", "FA"), ("B", "FB"), ("C", "FC")],
        Limits {
            orders_per_symbol: 50_000,
            levels_per_side: 1_000,
            tokens_per_account: 20_000,
        },
    );
    let mut exchange = Exchange::new(venue).unwrap();
    let inputs = inputs();
    let mut sink = Discard::default();
    WATCHING.with(|w| w.set(true));
    for input in &inputs {
        exchange.apply(input, &mut sink);
    }
    WATCHING.with(|w| w.set(false));
    let allocations = allocations();
    println!(
        "{} inputs, {} OUCH and {} ITCH outputs, {} matches, {} allocations",
        inputs.len(),
        sink.ouch_count,
        sink.itch_count,
        exchange.matches_used(),
        allocations
    );
    assert!(
        exchange.matches_used() > 1_000,
        "the workload must actually trade"
    );
    assert!(sink.ouch_count > 20_000);
    assert_eq!(allocations, 0, "the hot path allocated");
}

#[test]
fn the_counter_sees_allocations() {
    WATCHING.with(|w| w.set(true));
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 64]);
    let after = allocations();
    WATCHING.with(|w| w.set(false));
    drop(v);
    assert!(after > before);
}

/// The engine thread's end of the metrics endpoint records latencies and hands its
/// histograms over without allocating (the metrics thread does the allocating).
#[test]
fn the_metrics_probe_allocates_nothing() {
    use bourse::daemon::metrics::{GaugeValues, Sources, spawn};
    let (_writer, itch) = bourse::stream::stream(1024, 16).unwrap();
    let sources = Sources {
        listen: "127.0.0.1:0".parse().unwrap(),
        journal_dir: std::env::temp_dir().join("bourse-no-alloc-no-journal"),
        date: "2026-12-01".into(),
        durability: "flush",
        symbols: vec!["AAPL".into()],
        ouch: Vec::new(),
        itch,
        confirmed_seq: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    let (mut probe, server) = spawn(sources).unwrap();
    assert!(probe.is_on());
    let values = GaugeValues::default();
    let mut seq = 0;
    WATCHING.with(|w| w.set(true));
    // Several hand-overs: each swaps the filled set for the one the metrics thread emptied.
    for _ in 0..4 {
        for _ in 0..1_000 {
            probe.receive();
            for _ in 0..4 {
                seq += 1;
                probe.journaled();
                probe.matched();
            }
            let started = probe.flush_start();
            probe.flushed(started);
            probe.batch(seq, 4);
            probe.released(seq);
            probe.written();
        }
        probe.hand_over(&values);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    WATCHING.with(|w| w.set(false));
    assert_eq!(allocations(), 0);
    drop(server);
}

/// The book's price index, off its fast path: prices outside the band (the overflow), a
/// market that drifts across many band widths (the band is laid out again), a price off the
/// learned tick (laid out again with a finer step), iteration and a sweep through both.
#[test]
fn book_price_index_allocates_nothing_outside_its_band() {
    use bourse::book::{BookConfig, OrderBook, OrderHandle};
    use bourse::types::Side;
    // 64 levels per side: a 256-slot band, so 100-unit ticks cover $2.56 of prices.
    let mut book: OrderBook<u32> = OrderBook::new(BookConfig {
        order_capacity: 4_096,
        level_capacity: 64,
    });
    let mut ring = [OrderHandle(0); 32];
    WATCHING.with(|w| w.set(true));
    let base = 1_000_000u32;
    for far in [1, 2_000, Price::MAX_LIMIT.0 - 100] {
        book.insert(
            Side::Sell,
            Price(far.max(base + 10_000_000)),
            10,
            false,
            0,
            0,
        );
        book.insert(Side::Buy, Price(far.min(base / 2)), 10, false, 0, 0);
    }
    for i in 0..32u32 {
        ring[i as usize] = book.insert(Side::Buy, Price(base + i * 100), 10, false, 0, i);
    }
    // Bids walk up 5,000 ticks (about 20 band widths), one level in and one out per step.
    for step in 0..5_000u32 {
        let slot = (step % 32) as usize;
        book.remove(ring[slot]);
        ring[slot] = book.insert(
            Side::Buy,
            Price(base + (32 + step) * 100),
            10,
            false,
            0,
            step,
        );
    }
    // Off the 100-unit tick: the step shrinks and the band is laid out again.
    book.insert(Side::Buy, Price(base + 37 * 100 + 1), 10, false, 0, 0);
    let mut seen = 0u32;
    book.for_each_order(Side::Buy, |_| seen += 1);
    let depth = book.executable_shares(Side::Sell, Price(1), u64::MAX);
    let left = book.execute(Side::Sell, Price(1), u32::MAX, |_, _| {});
    WATCHING.with(|w| w.set(false));
    let allocations = allocations();
    assert_eq!(seen, 36, "32 walked bids, 3 far ones and the off-tick one");
    assert_eq!(u64::from(u32::MAX - left), depth);
    assert_eq!(book.level_count(Side::Buy), 0);
    assert_eq!(allocations, 0, "the price index allocated");
}
