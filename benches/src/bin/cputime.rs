//! ns/message by **thread CPU time**, for a shared machine: every engine runs whole passes
//! over the same stream (a fresh engine per pass, built outside the timing), interleaved
//! engine by engine, and each pass is charged the CPU time of this thread only
//! (`CLOCK_THREAD_CPUTIME_ID`), so time spent descheduled while other work runs does not
//! count (the cache refills after a switch still do). Prints the fastest and the median pass.
//!
//! `cargo run --release -p bourse-benches --bin cputime [passes, default 7] [workload...]`
//!
//! Engines are checked against the reference first, as in the criterion bench; matchcore
//! runs on the clamped streams only (see BENCHMARKS.md).

use bourse::exchange::{Discard, Input};
use bourse::workload::{Spec, Stream, Workload, generate, to_inputs};
use bourse_benches::*;
use std::hint::black_box;

const SEED: u64 = 2011;

/// This thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One pass of engine `E` over the stream: CPU ns per op.
fn pass<E: Engine>(stream: &Stream) -> f64 {
    let mut engine = E::build(&stream.stats);
    let mut shares = 0u64;
    let start = thread_cpu_ns();
    for op in &stream.ops {
        engine.apply(black_box(op), &mut |f: Fill| shares += u64::from(f.shares));
    }
    let ns = thread_cpu_ns() - start;
    black_box(shares);
    ns as f64 / stream.ops.len() as f64
}

/// `Exchange::apply` over the inputs; with `next_known`, each input's token lines are asked
/// for while the one before it is applied, as the gateway does when the next message is
/// already in its buffer (always, at load; never for a lone message).
fn pass_exchange(stream: &Stream, inputs: &[Input], next_known: bool) -> f64 {
    let mut exchange = exchange_for(stream, inputs);
    let mut sink = Discard::default();
    let body = &inputs[1..];
    let start = thread_cpu_ns();
    for (i, input) in body.iter().enumerate() {
        if let Some(next) = body.get(i + 1).filter(|_| next_known) {
            exchange.prefetch(next);
        }
        exchange.apply(black_box(input), &mut sink);
    }
    let ns = thread_cpu_ns() - start;
    black_box(sink.ouch_count);
    ns as f64 / (inputs.len() - 1) as f64
}

/// A row per engine: name and its per-pass figures.
type Rows = Vec<(&'static str, Vec<f64>)>;

fn report(label: &str, rows: &mut Rows) {
    let ours = rows
        .iter()
        .find(|(n, _)| *n == Ours::NAME)
        .map(|(_, v)| median(v));
    for (name, passes) in rows.iter_mut() {
        passes.sort_by(f64::total_cmp);
        let ratio = ours
            .filter(|_| *name != Ours::NAME)
            .map(|o| format!("  ({:.1}x ours)", median(passes) / o))
            .unwrap_or_default();
        println!(
            "{label:>22} {name:>16}: min {:8.1} ns, median {:8.1} ns, max {:8.1} ns over {} passes{ratio}",
            passes[0],
            median(passes),
            passes[passes.len() - 1],
            passes.len()
        );
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn workload(name: &str, w: Workload, passes: usize, exchange: bool) {
    let plain = generate(Spec::standard(w, SEED));
    let clamped = generate(Spec::standard(w, SEED).clamped());
    let (reference, _) = record::<Reference>(&plain);
    let (reference_clamped, _) = record::<Reference>(&clamped);
    let label_c = format!("{name}-clamped");
    let ok = [
        check::<Ours>(name, &plain, &reference),
        check::<Lobster>(name, &plain, &reference),
        check::<OrderbookRs>(name, &plain, &reference),
    ];
    let ok_c = [
        check::<Ours>(&label_c, &clamped, &reference_clamped),
        check::<Matchcore>(&label_c, &clamped, &reference_clamped),
    ];
    let inputs = to_inputs(&plain.ops, SYMBOL, TICK);
    let ok_x = exchange && check_exchange(name, &plain, &inputs, &reference);

    let mut rows: Rows = vec![
        (Ours::NAME, vec![]),
        (Lobster::NAME, vec![]),
        (OrderbookRs::NAME, vec![]),
    ];
    let mut rows_c: Rows = vec![(Ours::NAME, vec![]), (Matchcore::NAME, vec![])];
    if ok_x {
        rows.push(("bourse-exchange", vec![]));
        rows.push(("exchange+next", vec![]));
    }
    // Interleaved: pass i of every engine before pass i + 1 of any, so a noisy stretch of
    // the machine hits all of them.
    for _ in 0..passes {
        let timings = [
            ok[0].then(|| pass::<Ours>(&plain)),
            ok[1].then(|| pass::<Lobster>(&plain)),
            ok[2].then(|| pass::<OrderbookRs>(&plain)),
        ];
        for (row, t) in rows.iter_mut().zip(timings) {
            row.1.extend(t);
        }
        if ok_x {
            rows[3].1.push(pass_exchange(&plain, &inputs, false));
            rows[4].1.push(pass_exchange(&plain, &inputs, true));
        }
        let timings_c = [
            ok_c[0].then(|| pass::<Ours>(&clamped)),
            ok_c[1].then(|| pass::<Matchcore>(&clamped)),
        ];
        for (row, t) in rows_c.iter_mut().zip(timings_c) {
            row.1.extend(t);
        }
    }
    rows.retain(|(_, v)| !v.is_empty());
    rows_c.retain(|(_, v)| !v.is_empty());
    report(name, &mut rows);
    report(&label_c, &mut rows_c);
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let passes = args
        .next_if(|a| a.parse::<usize>().is_ok())
        .map_or(7, |a| a.parse().expect("passes"));
    let wanted: Vec<String> = args.collect();
    let all = [
        ("quantcup", Workload::QuantCup, true),
        ("exchange-core", Workload::ExchangeCore, true),
        ("deep", Workload::DeepBook, false),
        ("sweep", Workload::Sweep, false),
    ];
    for (name, w, exchange) in all {
        if wanted.is_empty() || wanted.iter().any(|x| x == name) {
            workload(name, w, passes, exchange);
        }
    }
}
