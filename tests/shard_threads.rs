//! The sharded pipeline on real threads and rings (`bourse::engine::threaded`) produces the
//! same outputs, numbers and snapshots as `Exchange::apply`, with 1, 2 and 3 shards and each
//! wait strategy (park everywhere it can take long: tests must not busy-spin).

use bourse::config::WaitStrategy;
use bourse::engine::threaded::{OutputStage, Sharded, ShardedConfig};
use bourse::exchange::{Command, Exchange, Input, LentState, Output, Recorder, Sink};
use bourse::journal::JournalReader;
use bourse::sequencer::record;
use bourse::types::{AccountId, Timestamp};
use bourse::wire::{itch, ouch};

#[derive(Default)]
struct Collect {
    outputs: Vec<Output>,
    snapshots: Vec<(u64, Vec<itch::Message>)>,
    done: Vec<u64>,
}

impl Sink for Collect {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        self.outputs.push(Output::Ouch(account, *message));
    }
    fn itch(&mut self, message: &itch::Message) {
        self.outputs.push(Output::Itch(*message));
    }
    fn snapshot(&mut self, id: u64, message: Option<&itch::Message>) {
        match message {
            Some(m) => match self.snapshots.last_mut() {
                Some((i, v)) if *i == id && !self.done.contains(&id) => v.push(*m),
                _ => self.snapshots.push((id, vec![*m])),
            },
            None => self.done.push(id),
        }
    }
}

impl OutputStage for Collect {
    /// One stream here: every output, in order.
    fn stream_counts(&self) -> Vec<u64> {
        vec![self.outputs.len() as u64]
    }
}

fn journal(name: &str) -> (bourse::exchange::Venue, Vec<Input>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("replay-logs")
        .join(name)
        .join("journal");
    let verified = bourse::journal::verify(&dir).unwrap();
    let mut reader = JournalReader::open(&dir, 1).unwrap();
    let (header, ts) = bourse::replay::read_header(&mut reader).unwrap();
    let mut inputs = vec![Input {
        seq: 1,
        timestamp: ts,
        command: Command::StartOfDay,
    }];
    while (inputs.len() as u64) < verified.last_seq {
        let Some(r) = reader.next().unwrap() else {
            break;
        };
        inputs.push(Input {
            seq: r.seq,
            timestamp: r.timestamp,
            command: record::decode(r.kind, r.payload).unwrap(),
        });
    }
    (header.venue, inputs)
}

#[test]
fn threads_equal_the_exchange_on_the_recorded_days() {
    for name in ["busy-day", "edge-cases", "torn-tail", "venue-controls"] {
        let (venue, inputs) = journal(name);
        let half = inputs.len() / 2;
        let mut ex = Exchange::new(venue.clone()).unwrap();
        let mut rec = Recorder::default();
        let mut want_snapshot = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            ex.apply(input, &mut rec);
            if i + 1 == half {
                ex.snapshot(Timestamp(7), |m| want_snapshot.push(*m));
            }
        }
        let cases = [
            (1, WaitStrategy::Park, 64),
            (2, WaitStrategy::Park, 1024),
            (3, WaitStrategy::Park, 64),
            (3, WaitStrategy::Yield, 4096),
        ];
        for (shards, wait, ring_slots) in cases {
            let config = ShardedConfig {
                shards,
                wait,
                ring_slots,
                pin_cores: false,
            };
            let started = std::time::Instant::now();
            let mut p = Sharded::start(&venue, &config, Collect::default()).unwrap();
            for (i, input) in inputs.iter().enumerate() {
                p.apply(input);
                if i + 1 == half {
                    p.snapshot(Timestamp(7), 1);
                }
            }
            let out = p.finish();
            let what = format!("{name}: {shards} shards, {wait:?}, ring {ring_slots}");
            assert_eq!(out.outputs.len(), rec.outputs.len(), "{what}");
            if let Some(at) = (0..out.outputs.len()).find(|&i| out.outputs[i] != rec.outputs[i]) {
                panic!(
                    "{what}: output {at}: {:?} != {:?}",
                    out.outputs[at], rec.outputs[at]
                );
            }
            assert_eq!(
                out.snapshots,
                vec![(1, want_snapshot.clone())],
                "{what}: snapshot"
            );
            println!(
                "{what}: {} inputs, {} outputs equal in {:?}",
                inputs.len(),
                out.outputs.len(),
                started.elapsed()
            );
        }
    }
}

/// A state snapshot of the threaded layout (`Sharded::save_state`: the stages lent to the
/// front's thread) is the compact layout's state at the same input: restored into an
/// `Exchange` it has the same digest and answers the rest of the day with the same outputs.
/// It comes with the output stage's counts of that point, and the pipeline goes on producing
/// exactly the outputs it would have without the saves. (The bytes themselves may differ: the
/// token tables are saved as their slot arrays lie, and a Replace's replacement token takes a
/// slot while its verdict is pending on threads, not inline.)
#[test]
fn a_state_saved_on_threads_is_the_compact_layouts_state() {
    for name in ["busy-day", "edge-cases", "venue-controls"] {
        let (venue, inputs) = journal(name);
        // Seven points spread over the day, the last one after the final input.
        let points: Vec<usize> = (1..=7).map(|k| inputs.len() * k / 7).collect();
        let mut ex = Exchange::new(venue.clone()).unwrap();
        let mut rec = Recorder::default();
        let mut want = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            ex.apply(input, &mut rec);
            if points.contains(&(i + 1)) {
                want.push((ex.state_digest(), rec.outputs.len()));
            }
        }
        for (shards, ring_slots) in [(1, 64), (3, 64), (2, 1024)] {
            let config = ShardedConfig {
                shards,
                wait: WaitStrategy::Park,
                ring_slots,
                pin_cores: false,
            };
            let what = format!("{name}: {shards} shards, ring {ring_slots}");
            let mut p = Sharded::start(&venue, &config, Collect::default()).unwrap();
            let mut saved = Vec::new();
            for (i, input) in inputs.iter().enumerate() {
                p.apply(input);
                if points.contains(&(i + 1)) {
                    // The token tables' slot arrays are lent, not copied: read only after
                    // the rest of the day (and the pipeline's end), as the daemon's writer
                    // reads them while the venue goes on.
                    let mut lent = LentState::with_capacity(0);
                    let counts = p.save_state(&mut lent).unwrap();
                    saved.push((i + 1, lent, counts));
                }
            }
            let out = p.finish();
            assert!(
                out.outputs == rec.outputs,
                "{what}: outputs after the saves"
            );
            for ((applied, lent, counts), (digest, outputs)) in saved.into_iter().zip(&want) {
                let at = format!("{what}: state after input {applied}");
                let bytes = lent.to_vec();
                assert_eq!(counts, vec![*outputs as u64], "{at}: counts");
                let mut restored = Exchange::from_state(venue.clone(), &bytes).unwrap();
                assert_eq!(restored.state_digest(), *digest, "{at}");
                let mut rest = Recorder::default();
                for input in &inputs[applied..] {
                    restored.apply(input, &mut rest);
                }
                assert!(
                    rest.outputs == rec.outputs[*outputs..],
                    "{at}: the rest of the day"
                );
            }
        }
    }
}

/// A burst of Replaces to one shard, each replacing the token the one before created (so each
/// leaves a replacement token pending until the shard's verdict), with a state saved every
/// 5,000 inputs and the pipeline finished. A shard can owe verdicts for its whole ring and the
/// batch it drained before (`limits::shard_in_flight_max`); their channel held a ring's worth,
/// so a lagging shard blocked on it while the output thread waited for its events and the
/// front for a lent stage (or its ring, or the join at the finish): the three threads hung.
/// Each saved state, whose token slot arrays are lent, is read only after the finish (the
/// burst's pending tokens settled past it) and is the compact layout's state at its point.
#[test]
fn a_burst_of_pending_replacements_never_stalls_a_save_or_the_finish() {
    use bourse::types::Side;
    use bourse::workload::{Op, demo_venue, to_message};
    // Hangs are the failure here: give up loudly rather than wait for the CI's timeout.
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(120));
        eprintln!("the burst hung (a save or the finish never returned)");
        std::process::exit(3);
    });
    let venue = demo_venue("S0", 1, bourse::exchange::Limits::default());
    let tick = venue.symbols[0].tick;
    let ts = |seq: u64| Timestamp(34_200_000_000_000 + seq * 1_000);
    let order = |op: &Op| {
        let (account, message) = to_message(op, "S0", tick);
        Command::Ouch { account, message }
    };
    let (side, shares) = (Side::Buy, 100);
    let mut inputs = vec![
        Command::StartOfDay,
        order(&Op::Limit {
            account: 0,
            id: 0,
            side,
            price_ticks: 100,
            shares,
        }),
    ];
    inputs.extend((0..60_000u32).map(|id| {
        order(&Op::Replace {
            account: 0,
            id,
            new_id: id + 1,
            side,
            price_ticks: 100 + id % 50,
            shares,
            executed: 0,
        })
    }));
    let config = ShardedConfig {
        shards: 1,
        wait: WaitStrategy::Park,
        ring_slots: 64,
        pin_cores: false,
    };
    // The compact layout's state digest at every save point.
    let mut ex = Exchange::new(venue.clone()).unwrap();
    let mut digests = Vec::new();
    for (i, command) in inputs.iter().enumerate() {
        let seq = i as u64 + 1;
        ex.apply(
            &Input {
                seq,
                timestamp: ts(seq),
                command: *command,
            },
            &mut Count::default(),
        );
        if seq.is_multiple_of(5_000) {
            digests.push(ex.state_digest());
        }
    }
    // As the daemon builds it (the front of a replay), and fresh.
    for from_replay in [true, false] {
        let mut p = if from_replay {
            let (front, shards, merge) = bourse::exchange::Split::new(&venue, 1)
                .unwrap()
                .into_parts(&mut Collect::default());
            Sharded::from_parts(front, shards, merge, &config, Collect::default()).unwrap()
        } else {
            Sharded::start(&venue, &config, Collect::default()).unwrap()
        };
        let mut saved = Vec::new();
        for (i, command) in inputs.iter().enumerate() {
            let seq = i as u64 + 1;
            p.apply(&Input {
                seq,
                timestamp: ts(seq),
                command: *command,
            });
            if seq.is_multiple_of(5_000) {
                let mut lent = LentState::with_capacity(0);
                p.save_state(&mut lent).unwrap();
                saved.push(lent);
            }
        }
        let out = p.finish();
        // Each state read only now, after the burst's pending tokens settled past it: the
        // compact layout's state at its point.
        for (k, lent) in saved.iter().enumerate() {
            let restored = Exchange::from_state(venue.clone(), &lent.to_vec()).unwrap();
            assert_eq!(
                restored.state_digest(),
                digests[k],
                "from replay: {from_replay}, state {k}"
            );
        }
        let replaced = out
            .outputs
            .iter()
            .filter(|o| matches!(o, Output::Ouch(_, ouch::Outbound::Replaced(_))))
            .count();
        assert_eq!(replaced, 60_000, "from replay: {from_replay}");
    }
}

#[derive(Default)]
struct Count(u64);

impl Sink for Count {
    fn ouch(&mut self, _: AccountId, _: &ouch::Outbound) {
        self.0 += 1;
    }
    fn itch(&mut self, _: &itch::Message) {
        self.0 += 1;
    }
}

impl OutputStage for Count {}

/// Throughput figures for BENCHMARKS.md (run in release:
/// `cargo test --release -p bourse --test shard_threads -- --ignored --nocapture`).
/// Three symbols, each with its own seeded ExchangeCore workload and accounts, interleaved.
#[test]
#[ignore]
fn throughput_figures() {
    use bourse::exchange::Limits;
    use bourse::workload::{self, Spec, Workload};
    let symbols = ["S0", "S1", "S2"];
    let streams: Vec<_> = (0..3)
        .map(|k| {
            workload::generate(Spec {
                ops: 1_000_000,
                ..Spec::standard(Workload::ExchangeCore, 11 + k)
            })
        })
        .collect();
    let per = streams.iter().map(|s| s.stats.accounts).max().unwrap();
    let mut venue = workload::demo_venue("S0", per * 3, Limits::default());
    venue.symbols = symbols
        .iter()
        .map(|s| {
            let mut d = venue.symbols[0].clone();
            d.symbol = s.to_string();
            d
        })
        .collect();
    let mut inputs = vec![Input {
        seq: 1,
        timestamp: Timestamp(34_200_000_000_000),
        command: Command::StartOfDay,
    }];
    let longest = streams.iter().map(|s| s.ops.len()).max().unwrap();
    for i in 0..longest {
        for (k, s) in streams.iter().enumerate() {
            if let Some(op) = s.ops.get(i) {
                let (a, message) = workload::to_message(op, symbols[k], 100);
                let n = inputs.len() as u64;
                inputs.push(Input {
                    seq: n + 1,
                    timestamp: Timestamp(34_200_000_000_000 + n * 1_000),
                    command: Command::Ouch {
                        account: AccountId(a.0 + per * k as u16),
                        message,
                    },
                });
            }
        }
    }
    let rate = |n: usize, t: std::time::Duration| n as f64 / t.as_secs_f64() / 1e6;
    let t = std::time::Instant::now();
    let mut ex = Exchange::new(venue.clone()).unwrap();
    let mut c = Count::default();
    for i in &inputs {
        ex.apply(i, &mut c);
    }
    let base = t.elapsed();
    println!(
        "{} inputs, {} outputs; Exchange::apply: {:.2} M inputs/s",
        inputs.len(),
        c.0,
        rate(inputs.len(), base)
    );
    for shards in [1, 3] {
        let t = std::time::Instant::now();
        let mut p = bourse::exchange::Split::new(&venue, shards).unwrap();
        let mut c2 = Count::default();
        for i in &inputs {
            p.apply(i, &mut c2);
        }
        p.flush(&mut c2);
        assert_eq!(c2.0, c.0);
        println!(
            "pure split, {shards} shard(s), one thread: {:.2} M inputs/s",
            rate(inputs.len(), t.elapsed())
        );
    }
    for (shards, wait) in [
        (1, WaitStrategy::Park),
        (2, WaitStrategy::Park),
        (3, WaitStrategy::Park),
        (1, WaitStrategy::Yield),
        (3, WaitStrategy::Yield),
    ] {
        let config = ShardedConfig {
            shards,
            wait,
            ring_slots: 1 << 16,
            pin_cores: true,
        };
        let t = std::time::Instant::now();
        let mut p = Sharded::start(&venue, &config, Count::default()).unwrap();
        for i in &inputs {
            p.apply(i);
        }
        let out = p.finish();
        assert_eq!(out.0, c.0);
        println!(
            "threads, {shards} shard(s), {wait:?}: {:.2} M inputs/s (cores: {})",
            rate(inputs.len(), t.elapsed()),
            core_count()
        );
    }
}

fn core_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
