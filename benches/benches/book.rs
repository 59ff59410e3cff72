//! ns/message of our book and the peers on the same op streams, in one run; plus the full
//! exchange state machine (OUCH inputs, `Discard` sink).
//!
//! Before timing, every engine runs each stream once and its fills are compared with the
//! naive reference book; an engine that disagrees is reported (`CHECK ... DISAGREES`) and
//! left out of that workload's timings. matchcore is timed on the clamped variant of each
//! workload (no taker keeps quantity after crossing), where it agrees.
//!
//! `cargo bench -p bourse-benches --bench book -- --warm-up-time 1 --measurement-time 3`
//! Filter by group name, e.g. `-- book/exchange-core`.

use bourse::exchange::{Discard, Input};
use bourse::workload::{Op, Spec, Stream, Workload, generate, to_inputs};
use bourse_benches::*;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, measurement::WallTime};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SEED: u64 = 2011;

/// Time whole passes over the stream, each on a fresh engine (built outside the timing).
fn bench_engine<E: Engine>(group: &mut BenchmarkGroup<'_, WallTime>, stream: &Stream) {
    group.bench_function(E::NAME, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut engine = E::build(&stream.stats);
                let mut shares = 0u64;
                let start = Instant::now();
                for op in &stream.ops {
                    engine.apply(black_box(op), &mut |f: Fill| shares += u64::from(f.shares));
                }
                total += start.elapsed();
                black_box(shares);
                drop(engine);
            }
            total
        })
    });
}

fn bench_exchange(group: &mut BenchmarkGroup<'_, WallTime>, stream: &Stream, inputs: &[Input]) {
    group.bench_function("bourse-exchange", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut exchange = exchange_for(stream, inputs);
                let mut sink = Discard::default();
                let start = Instant::now();
                for input in &inputs[1..] {
                    exchange.apply(black_box(input), &mut sink);
                }
                total += start.elapsed();
                black_box(sink.ouch_count);
            }
            total
        })
    });
}

fn group<'a>(c: &'a mut Criterion, name: &str, ops: &[Op]) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.throughput(Throughput::Elements(ops.len() as u64));
    g
}

fn workload(c: &mut Criterion, name: &str, workload: Workload, exchange: bool) {
    let plain = generate(Spec::standard(workload, SEED));
    let clamped = generate(Spec::standard(workload, SEED).clamped());
    let (reference, _) = record::<Reference>(&plain);
    let (reference_clamped, _) = record::<Reference>(&clamped);

    let label = name.to_string();
    let ok_ours = check::<Ours>(&label, &plain, &reference);
    let ok_lobster = check::<Lobster>(&label, &plain, &reference);
    let ok_obr = check::<OrderbookRs>(&label, &plain, &reference);
    // Shown for the record; matchcore is timed on the clamped variant only.
    check::<Matchcore>(&label, &plain, &reference);
    let label_c = format!("{name}-clamped");
    let ok_ours_c = check::<Ours>(&label_c, &clamped, &reference_clamped);
    let ok_mc_c = check::<Matchcore>(&label_c, &clamped, &reference_clamped);

    let mut g = group(c, &format!("book/{name}"), &plain.ops);
    if ok_ours {
        bench_engine::<Ours>(&mut g, &plain);
    }
    if ok_lobster {
        bench_engine::<Lobster>(&mut g, &plain);
    }
    if ok_obr {
        bench_engine::<OrderbookRs>(&mut g, &plain);
    }
    if exchange {
        let inputs = to_inputs(&plain.ops, SYMBOL, TICK);
        if check_exchange(&label, &plain, &inputs, &reference) {
            bench_exchange(&mut g, &plain, &inputs);
        }
    }
    g.finish();

    let mut g = group(c, &format!("book/{name}-clamped"), &clamped.ops);
    if ok_ours_c {
        bench_engine::<Ours>(&mut g, &clamped);
    }
    if ok_mc_c {
        bench_engine::<Matchcore>(&mut g, &clamped);
    }
    g.finish();
}

fn all(c: &mut Criterion) {
    // Skip generating and checking workloads that the filter excludes.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .collect();
    let wanted = |name: &str| {
        filter.is_empty()
            || filter
                .iter()
                .any(|f| format!("book/{name}").contains(f.as_str()) || f.contains(name))
    };
    let list = [
        ("quantcup", Workload::QuantCup, true),
        ("exchange-core", Workload::ExchangeCore, true),
        ("deep", Workload::DeepBook, false),
        ("sweep", Workload::Sweep, false),
    ];
    for (name, w, exchange) in list {
        if wanted(name) {
            workload(c, name, w, exchange);
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    all(&mut c);
    c.final_summary();
}
