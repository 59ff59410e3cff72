//! The split state machine run in one thread: front, shards and merge connected by queues.
//!
//! With [`Pipeline::new`] every input goes through the three parts at once (the benchmarkable
//! form). With [`Pipeline::shuffled`] the stages run in a pseudo-random interleaving drawn
//! from a seed — shards race ahead or lag, the merge falls behind, verdicts arrive late — to
//! show that the outputs do not depend on timing. Either way the outputs equal
//! `Exchange::apply` over the same inputs.

use super::front::{Front, FrontLink};
use super::merge::{EventSource, Merge};
use super::msg::{Plan, ShardCmd, ShardEvent, Verdict};
use super::shard::{Shard, ShardOut};
use crate::exchange::venue::{Venue, VenueError};
use crate::exchange::{Input, Outcome, Sink};
use crate::types::Timestamp;
use crate::wire::itch;
use std::collections::VecDeque;

/// The shards and the queues around them.
struct Lanes {
    shards: Vec<Shard>,
    cmds: Vec<VecDeque<ShardCmd>>,
    events: Vec<VecDeque<ShardEvent>>,
    verdicts: Vec<VecDeque<Verdict>>,
}

struct LaneOut<'a> {
    events: &'a mut VecDeque<ShardEvent>,
    verdicts: &'a mut VecDeque<Verdict>,
}

impl ShardOut for LaneOut<'_> {
    fn event(&mut self, event: ShardEvent) {
        self.events.push_back(event);
    }
    fn verdict(&mut self, verdict: Verdict) {
        self.verdicts.push_back(verdict);
    }
}

impl Lanes {
    /// Run shard `k` on its next command; false when it has none.
    fn step(&mut self, k: usize) -> bool {
        let Some(cmd) = self.cmds[k].pop_front() else {
            return false;
        };
        let mut out = LaneOut {
            events: &mut self.events[k],
            verdicts: &mut self.verdicts[k],
        };
        self.shards[k].apply(&cmd, &mut out);
        true
    }
}

impl EventSource for Lanes {
    fn next_event(&mut self, shard: usize) -> ShardEvent {
        loop {
            if let Some(e) = self.events[shard].pop_front() {
                return e;
            }
            assert!(
                self.step(shard),
                "merge waits for shard {shard}, which has no work"
            );
        }
    }
}

struct FrontSide<'a> {
    lanes: &'a mut Lanes,
    plans: &'a mut VecDeque<Plan>,
}

impl FrontLink for FrontSide<'_> {
    fn to_shard(&mut self, shard: usize, cmd: ShardCmd) {
        self.lanes.cmds[shard].push_back(cmd);
    }
    fn to_merge(&mut self, plan: Plan) {
        self.plans.push_back(plan);
    }
    fn verdict(&mut self, shard: usize) -> Verdict {
        loop {
            if let Some(v) = self.lanes.verdicts[shard].pop_front() {
                return v;
            }
            assert!(
                self.lanes.step(shard),
                "front waits for shard {shard}, which has no work"
            );
        }
    }
    fn try_verdict(&mut self, shard: usize) -> Option<Verdict> {
        self.lanes.verdicts[shard].pop_front()
    }
}

pub struct Pipeline {
    front: Front,
    merge: Merge,
    lanes: Lanes,
    plans: VecDeque<Plan>,
    /// xorshift state for the shuffled schedule; 0 = run everything at once.
    rng: u64,
    snapshots: u64,
}

impl Pipeline {
    /// Front, `shards` shards and merge, every input carried through at once.
    pub fn new(venue: &Venue, shards: usize) -> Result<Pipeline, VenueError> {
        let lanes = Lanes {
            shards: (0..shards)
                .map(|k| Shard::new(venue, k, shards))
                .collect::<Result<_, _>>()?,
            cmds: (0..shards).map(|_| VecDeque::new()).collect(),
            events: (0..shards).map(|_| VecDeque::new()).collect(),
            verdicts: (0..shards).map(|_| VecDeque::new()).collect(),
        };
        Ok(Pipeline {
            front: Front::new(venue, shards)?,
            merge: Merge::new(venue, shards)?,
            lanes,
            plans: VecDeque::new(),
            rng: 0,
            snapshots: 0,
        })
    }

    /// As [`Self::new`], with the stages interleaved pseudo-randomly from `seed`.
    pub fn shuffled(venue: &Venue, shards: usize, seed: u64) -> Result<Pipeline, VenueError> {
        let mut p = Pipeline::new(venue, shards)?;
        p.rng = seed | 1;
        Ok(p)
    }

    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Sequence one input. Its outputs may come out later (shuffled schedule): call
    /// [`Self::flush`] to get everything.
    pub fn apply<S: Sink>(&mut self, input: &Input, sink: &mut S) -> Outcome {
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        let outcome = self.front.apply(input, &mut side);
        if self.rng == 0 {
            self.flush(sink);
        } else {
            self.wander(sink);
        }
        outcome
    }

    /// A few random steps: shards run ahead, the merge catches up on some plans.
    fn wander<S: Sink>(&mut self, sink: &mut S) {
        let steps = self.random() % 6;
        for _ in 0..steps {
            let r = self.random();
            let shards = self.lanes.shards.len() as u64;
            let pick = r % (shards + 2);
            if pick < shards {
                self.lanes.step(pick as usize);
            } else if let Some(plan) = self.plans.pop_front() {
                self.merge
                    .process(&plan, &mut self.lanes, sink, &mut |_, _| {});
            }
        }
    }

    /// Carry every sequenced input through to its outputs.
    pub fn flush<S: Sink>(&mut self, sink: &mut S) {
        while let Some(plan) = self.plans.pop_front() {
            self.merge
                .process(&plan, &mut self.lanes, sink, &mut |_, _| {});
        }
    }

    /// The GLIMPSE body at this point (after flushing outputs into `sink`), as
    /// `Exchange::snapshot` would give it.
    pub fn snapshot<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) -> Vec<itch::Message> {
        self.snapshots += 1;
        let id = self.snapshots;
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        self.front.snapshot(ts, id, &mut side);
        let mut messages = Vec::new();
        while let Some(plan) = self.plans.pop_front() {
            self.merge
                .process(&plan, &mut self.lanes, sink, &mut |i, m| {
                    assert_eq!(i, id);
                    if let Some(m) = m {
                        messages.push(*m);
                    }
                });
        }
        messages
    }

    pub fn last_seq(&self) -> u64 {
        self.front.last_seq()
    }

    pub fn order_refs_used(&self) -> u64 {
        self.merge.order_refs_used()
    }

    pub fn matches_used(&self) -> u64 {
        self.merge.matches_used()
    }

    pub fn resting_orders(&self) -> u64 {
        self.lanes.shards.iter().map(Shard::resting_orders).sum()
    }

    /// The three parts, every sequenced input carried through (to start the threads from a
    /// state rebuilt by replay).
    pub fn into_parts<S: Sink>(mut self, sink: &mut S) -> (Front, Vec<Shard>, Merge) {
        self.flush(sink);
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        // Answered verdicts still queued: settle them so the front starts with no debt.
        self.front.settle_all(&mut side);
        assert!(self.lanes.cmds.iter().all(VecDeque::is_empty));
        assert!(self.lanes.events.iter().all(VecDeque::is_empty));
        (self.front, self.lanes.shards, self.merge)
    }

    /// Times the front had to wait for a shard's verdict.
    pub fn front_waits(&self) -> u64 {
        self.front.waits
    }
}
