//! Generate each benchmark workload, print its shape, and check every engine's fills (and
//! the exchange's, through OUCH) against the naive reference book.
//!
//! `cargo run --release -p bourse-benches --bin check [quantcup|exchange-core|deep|sweep|realistic]`

use bourse::workload::{KIND_NAMES, Spec, Stream, Workload, generate, to_inputs};
use bourse_benches::*;
use std::time::Instant;

pub const SEED: u64 = 2011;

fn describe(stream: &Stream) {
    let s = &stream.stats;
    let n = stream.ops.len() as f64;
    let kinds: Vec<String> = KIND_NAMES
        .iter()
        .zip(s.kinds)
        .filter(|(_, c)| *c > 0)
        .map(|(k, c)| format!("{k} {:.1}%", 100.0 * c as f64 / n))
        .collect();
    println!(
        "{:?}{}: {} ops [{}], {:.1}% of ops trade, {} fills, {} shares; max resting {}, \
         max levels/side {}, final resting {}, prices {}..{} ticks, {} accounts",
        stream.spec.workload,
        if stream.spec.clamped {
            " (clamped)"
        } else {
            ""
        },
        stream.ops.len(),
        kinds.join(", "),
        100.0 * s.trading_ops as f64 / n,
        s.fills,
        s.traded_shares,
        s.max_resting,
        s.max_levels,
        s.final_resting,
        s.min_price_ticks,
        s.max_price_ticks,
        s.accounts
    );
}

fn main() {
    let which = std::env::args().nth(1);
    let all = [
        ("quantcup", Workload::QuantCup),
        ("exchange-core", Workload::ExchangeCore),
        ("deep", Workload::DeepBook),
        ("sweep", Workload::Sweep),
        ("realistic", Workload::Realistic),
    ];
    for (name, workload) in all {
        if which.as_deref().is_some_and(|w| w != name) {
            continue;
        }
        for clamped in [false, true] {
            let spec = Spec::standard(workload, SEED);
            let spec = if clamped { spec.clamped() } else { spec };
            let t = Instant::now();
            let stream = generate(spec);
            describe(&stream);
            println!("  generated in {:.2?}", t.elapsed());
            let label = format!("{name}{}", if clamped { "-clamped" } else { "" });
            let t = Instant::now();
            let (reference, _) = record::<Reference>(&stream);
            println!("  reference ran in {:.2?}", t.elapsed());
            assert_eq!(
                reference.len() as u64,
                stream.stats.fills,
                "reference vs model"
            );
            check::<Ours>(&label, &stream, &reference);
            check::<Matchcore>(&label, &stream, &reference);
            check::<Lobster>(&label, &stream, &reference);
            check::<OrderbookRs>(&label, &stream, &reference);
            let inputs = to_inputs(&stream.ops, SYMBOL, TICK);
            check_exchange(&label, &stream, &inputs, &reference);
        }
    }
}
