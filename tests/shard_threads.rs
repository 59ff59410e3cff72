//! The sharded pipeline on real threads and rings (`bourse::engine::threaded`) produces the
//! same outputs, numbers and snapshots as `Exchange::apply`, with 1, 2 and 3 shards and each
//! wait strategy (park everywhere it can take long: tests must not busy-spin).

use bourse::config::WaitStrategy;
use bourse::engine::threaded::{Output as PipelineOutput, Sharded, ShardedConfig};
use bourse::exchange::{Command, Exchange, Input, Output, Recorder, Sink};
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
}

impl PipelineOutput for Collect {
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
    for name in ["busy-day", "edge-cases", "torn-tail"] {
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
