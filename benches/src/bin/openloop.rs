//! Open-loop latency (coordinated-omission corrected) and saturation throughput, the deep
//! book's worst single operation, and bytes per resting order.
//!
//! `cargo run --release -p bourse-benches --bin openloop [rate_ops_per_s]`
//!
//! Open loop: op `i` is due at `start + i / rate`; the thread spins on the clock only while
//! it is ahead of schedule; each op's latency runs from its due time to its completion, so
//! a stall delays (and is charged to) every op queued behind it.

use bourse::book::{BookConfig, OrderBook};
use bourse::exchange::{Discard, Exchange, Input, Limits};
use bourse::workload::{Spec, Stream, Workload, generate, to_inputs};
use bourse_benches::*;
use hdrhistogram::Histogram;
use std::hint::black_box;
use std::time::{Duration, Instant};

const SEED: u64 = 2011;

/// (involuntary context switches, minor page faults) of this process so far, from /proc
/// (zeros where unavailable): tells preemption and first-touch faults from engine stalls.
fn disturbances() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let switches = status
        .lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Field 10 (minflt), counted after the parenthesised command name.
    let faults = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (switches, faults)
}

fn since(before: (u64, u64)) -> String {
    let now = disturbances();
    format!(
        "  during the run: {} involuntary context switches, {} minor page faults",
        now.0 - before.0,
        now.1 - before.1
    )
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn report(label: &str, h: &Histogram<u64>) {
    let us = |ns: u64| ns as f64 / 1_000.0;
    println!(
        "{label}: n={} p50 {:.3} µs, p90 {:.3} µs, p99 {:.3} µs, p99.9 {:.3} µs, p99.99 {:.3} µs, max {:.3} µs",
        h.len(),
        us(h.value_at_quantile(0.50)),
        us(h.value_at_quantile(0.90)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.value_at_quantile(0.9999)),
        us(h.max()),
    );
}

/// Run `n` operations open-loop at `rate` per second; `op(i)` performs operation i.
fn open_loop(n: usize, rate: u64, mut op: impl FnMut(usize)) -> Histogram<u64> {
    let mut h = histogram();
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let start = Instant::now() + Duration::from_millis(1);
    let mut due = start;
    for i in 0..n {
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        op(i);
        let done = Instant::now();
        h.record((done - due).as_nanos().max(1) as u64)
            .expect("latency in range");
        due += interval;
    }
    h
}

/// Ops per second of one unpaced pass.
fn saturation(n: usize, mut op: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn book_latency(stream: &Stream, rate: u64) {
    let n = stream.ops.len();
    let mut engine = Ours::build(&stream.stats);
    let mut shares = 0u64;
    let ops_s = saturation(n, |i| {
        engine.apply(&stream.ops[i], &mut |f| shares += u64::from(f.shares))
    });
    println!(
        "book saturation (exchange-core mix, {n} ops): {:.2} M ops/s ({:.1} ns/op)",
        ops_s / 1e6,
        1e9 / ops_s
    );
    let mut engine = Ours::build(&stream.stats);
    let h = open_loop(n, rate, |i| {
        engine.apply(&stream.ops[i], &mut |f| shares += u64::from(f.shares))
    });
    report(
        &format!("book open loop @ {:.1} M ops/s", rate as f64 / 1e6),
        &h,
    );
    black_box(shares);
}

fn exchange_latency(stream: &Stream, inputs: &[Input], rate: u64) {
    let n = inputs.len() - 1;
    let mut exchange = exchange_for(stream, inputs);
    let mut sink = Discard::default();
    let ops_s = saturation(n, |i| {
        exchange.apply(&inputs[i + 1], &mut sink);
    });
    println!(
        "exchange saturation ({n} OUCH inputs): {:.2} M inputs/s ({:.1} ns/input)",
        ops_s / 1e6,
        1e9 / ops_s
    );
    let mut exchange = exchange_for(stream, inputs);
    let mut sink = Discard::default();
    let h = open_loop(n, rate, |i| {
        exchange.apply(&inputs[i + 1], &mut sink);
    });
    report(
        &format!("exchange open loop @ {:.1} M inputs/s", rate as f64 / 1e6),
        &h,
    );
    black_box(sink.ouch_count);
}

/// Closed loop, each op timed alone: the worst single op while the book grows.
fn deep_max<E: Engine>(stream: &Stream) {
    let mut engine = E::build(&stream.stats);
    let mut h = histogram();
    let mut shares = 0u64;
    let mut worst = (0u64, 0usize);
    let before = disturbances();
    for (i, op) in stream.ops.iter().enumerate() {
        let start = Instant::now();
        engine.apply(op, &mut |f| shares += u64::from(f.shares));
        let ns = start.elapsed().as_nanos() as u64;
        h.record(ns.max(1)).expect("latency in range");
        if ns > worst.0 {
            worst = (ns, i);
        }
    }
    black_box(shares);
    report(&format!("deep book to 1M, {:>12}", E::NAME), &h);
    println!("{}", since(before));
    println!(
        "  worst op #{} ({:?}) took {:.1} µs; ops slower than 20 µs: {}",
        worst.1,
        stream.ops[worst.1].kind_index(),
        worst.0 as f64 / 1e3,
        h.count_between(20_000, h.max().max(20_000))
    );
}

fn deep_max_exchange(stream: &Stream) {
    let inputs = to_inputs(&stream.ops, SYMBOL, TICK);
    let mut exchange = exchange_for(stream, &inputs);
    let mut sink = Discard::default();
    let mut h = histogram();
    let before = disturbances();
    for input in &inputs[1..] {
        let start = Instant::now();
        exchange.apply(input, &mut sink);
        h.record((start.elapsed().as_nanos() as u64).max(1))
            .expect("latency in range");
    }
    report("deep book to 1M, bourse-exchange", &h);
    println!("{}", since(before));
    println!(
        "  ops slower than 20 µs: {}",
        h.count_between(20_000, h.max().max(20_000))
    );
}

fn bytes_per_order() {
    for (label, config) in [
        (
            "book<u32>, 1M orders, 8192 levels/side",
            BookConfig {
                order_capacity: 1 << 20,
                level_capacity: 8_192,
            },
        ),
        (
            "book<u32>, 1M orders, 64 levels/side",
            BookConfig {
                order_capacity: 1 << 20,
                level_capacity: 64,
            },
        ),
    ] {
        let book: OrderBook<u32> = OrderBook::new(config);
        println!(
            "bytes per resting order, {label}: {:.1} (total {} bytes)",
            book.allocated_bytes() as f64 / f64::from(config.order_capacity),
            book.allocated_bytes()
        );
    }
    let limits = Limits {
        orders_per_symbol: 1 << 20,
        levels_per_side: 8_192,
        tokens_per_account: 1 << 16,
    };
    let venue = bourse::workload::demo_venue(SYMBOL, 16, limits);
    let exchange = Exchange::new(venue).expect("venue");
    let (books, tokens) = exchange.allocated_bytes();
    println!(
        "bytes per resting order, exchange book (payload = its Resting), 1M orders, 8192 levels/side: {:.1}",
        books as f64 / f64::from(limits.orders_per_symbol)
    );
    println!(
        "bytes per token, exchange token table (16 accounts x 65,536 tokens): {:.1}",
        tokens as f64 / (16.0 * f64::from(limits.tokens_per_account))
    );
}

fn main() {
    let rate: u64 = std::env::args()
        .nth(1)
        .map(|r| r.parse().expect("rate in ops/s"))
        .unwrap_or(1_000_000);
    if std::env::args().nth(2).as_deref() == Some("profile-exchange") {
        // For `perf record`: only the exchange, unpaced, five days.
        let ec = generate(Spec::standard(Workload::ExchangeCore, SEED));
        let inputs = to_inputs(&ec.ops, SYMBOL, TICK);
        for _ in 0..5 {
            let mut exchange = exchange_for(&ec, &inputs);
            let mut sink = Discard::default();
            let ops_s = saturation(inputs.len() - 1, |i| {
                exchange.apply(&inputs[i + 1], &mut sink);
            });
            println!("exchange saturation: {:.2} M inputs/s", ops_s / 1e6);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("profile-book") {
        let ec = generate(Spec::standard(Workload::ExchangeCore, SEED));
        for _ in 0..5 {
            let mut engine = Ours::build(&ec.stats);
            let mut shares = 0u64;
            let ops_s = saturation(ec.ops.len(), |i| {
                engine.apply(&ec.ops[i], &mut |f| shares += u64::from(f.shares))
            });
            println!("book saturation: {:.2} M ops/s", ops_s / 1e6);
            black_box(shares);
        }
        return;
    }
    match pin_last_core() {
        Some(core) => println!("pinned to core {core}"),
        None => println!("not pinned (core_affinity unavailable)"),
    }
    bytes_per_order();

    let ec = generate(Spec::standard(Workload::ExchangeCore, SEED));
    book_latency(&ec, rate);
    let inputs = to_inputs(&ec.ops, SYMBOL, TICK);
    exchange_latency(&ec, &inputs, rate);

    let deep = generate(Spec::standard(Workload::DeepBook, SEED));
    let deep_clamped = generate(Spec::standard(Workload::DeepBook, SEED).clamped());
    deep_max::<Ours>(&deep);
    deep_max_exchange(&deep);
    deep_max::<Lobster>(&deep);
    deep_max::<OrderbookRs>(&deep);
    println!("(matchcore on the clamped variant, where it agrees with the reference)");
    deep_max::<Ours>(&deep_clamped);
    deep_max::<Matchcore>(&deep_clamped);
}
