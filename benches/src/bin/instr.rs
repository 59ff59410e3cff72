//! Instructions per input, for a machine whose timings are noise: run under callgrind, which
//! counts instructions and is repeatable for the same binary and inputs.
//!
//! ```sh
//! cargo build --release -p bourse-benches --bin instr
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*instr::measure*' \
//!     target/release/instr exchange-core exchange      # or: book
//! ```
//! then divide `Collected` by the input count it prints. `exchange` runs `Exchange::apply`
//! with a `Discard` sink (the rules, no encoding); `encoded` with a sink that encodes every
//! message (as the daemon and replay do); `next` as `exchange` with the next input's token
//! lines prefetched (the gateway's path at load); `book` runs the bare `OrderBook` on the same ops
//! (the bench adapter `Ours`).

use bourse::exchange::{Discard, Exchange, Input};
use bourse::workload::{Spec, Stream, Workload, generate, to_inputs};
use bourse_benches::{Engine, Ours, SYMBOL, TICK, exchange_for};
use std::hint::black_box;

const SEED: u64 = 2011;
/// Ops per run: enough for a steady state, few enough for valgrind's pace.
const OPS: u32 = 200_000;

#[inline(never)]
fn measure_exchange(exchange: &mut Exchange, inputs: &[Input]) -> u64 {
    let mut sink = Discard::default();
    for input in &inputs[1..] {
        exchange.apply(black_box(input), &mut sink);
    }
    sink.ouch_count + sink.itch_count
}

/// [`measure_exchange`] with each input's token lines asked for while the one before is
/// applied, as the gateway does when the next message is already in its buffer.
#[inline(never)]
fn measure_exchange_next(exchange: &mut Exchange, inputs: &[Input]) -> u64 {
    let mut sink = Discard::default();
    let body = &inputs[1..];
    for (i, input) in body.iter().enumerate() {
        if let Some(next) = body.get(i + 1) {
            exchange.prefetch(next);
        }
        exchange.apply(black_box(input), &mut sink);
    }
    sink.ouch_count + sink.itch_count
}

/// Encodes every message (what the daemon's output stage and replay do per message), so no
/// output's construction can be optimised away the way a counting sink lets it be.
#[derive(Default)]
struct Encode {
    bytes: u64,
}

impl bourse::exchange::Sink for Encode {
    fn ouch(&mut self, _: bourse::types::AccountId, message: &bourse::wire::ouch::Outbound) {
        let mut buf = [0u8; 96];
        self.bytes += message.encode(&mut buf) as u64;
        black_box(&buf);
    }
    fn itch(&mut self, message: &bourse::wire::itch::Message) {
        let mut buf = [0u8; 96];
        self.bytes += message.encode(&mut buf) as u64;
        black_box(&buf);
    }
}

#[inline(never)]
fn measure_exchange_encoded(exchange: &mut Exchange, inputs: &[Input]) -> u64 {
    let mut sink = Encode::default();
    for input in &inputs[1..] {
        exchange.apply(black_box(input), &mut sink);
    }
    sink.bytes
}

#[inline(never)]
fn measure_book(engine: &mut Ours, stream: &Stream) -> u64 {
    let mut shares = 0u64;
    for op in &stream.ops {
        engine.apply(black_box(op), &mut |f| shares += u64::from(f.shares));
    }
    shares
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workload = match args.get(1).map(String::as_str) {
        Some("quantcup") => Workload::QuantCup,
        _ => Workload::ExchangeCore,
    };
    let spec = Spec {
        ops: OPS,
        ..Spec::standard(workload, SEED)
    };
    let stream = generate(spec);
    let inputs = to_inputs(&stream.ops, SYMBOL, TICK);
    let what = args.get(2).map_or("exchange", String::as_str);
    // Built outside the measured functions: construction (sizing, pre-faulting) is not
    // per-input work.
    let result = match what {
        "book" => measure_book(&mut Ours::build(&stream.stats), &stream),
        "encoded" => measure_exchange_encoded(&mut exchange_for(&stream, &inputs), &inputs),
        "next" => measure_exchange_next(&mut exchange_for(&stream, &inputs), &inputs),
        _ => measure_exchange(&mut exchange_for(&stream, &inputs), &inputs),
    };
    println!("{what}: {} ops measured ({result})", stream.ops.len());
}
