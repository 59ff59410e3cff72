//! The state machine split over several shards, run in one thread: front, shards and merge
//! connected by queues.
//!
//! With [`Split::new`] every input goes through the three stages at once. With
//! [`Split::shuffled`] the stages run in a pseudo-random interleaving drawn from a seed —
//! shards race ahead or lag, the merge falls behind, verdicts arrive late — to show that the
//! outputs do not depend on timing. Either way the outputs equal [`super::Exchange`]'s over
//! the same inputs. The sharded daemon replays its journal through a `Split` before it
//! starts its threads ([`Split::into_parts`]).

use super::digest::{StateDigest, state_digest};
use super::front::{Front, FrontLink};
use super::input::{Input, Outcome};
use super::merge::{EventSource, Merge};
use super::msg::{AccountRisk, Marker, Plan, ShardCmd, ShardEvent, Verdict};
use super::shard::{Shard, ShardOut};
use super::sink::Sink;
use super::state::{self, StateError};
use super::tokens::RESTORED_RESIDENT_AHEAD;
use super::venue::{Venue, VenueError};
use crate::types::{AccountId, Timestamp};
use crate::wire::{itch, ouch};
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
    fn event(&mut self, event: &ShardEvent) {
        self.events.push_back(*event);
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
    fn to_merge(&mut self, plan: &Plan) {
        self.plans.push_back(*plan);
    }
    fn to_shard(&mut self, shard: usize, cmd: &ShardCmd) {
        self.lanes.cmds[shard].push_back(*cmd);
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

    fn risk(&mut self, account: u16) -> AccountRisk {
        // Every shard does the commands it has; the merge reads their events later.
        let mut total = AccountRisk::default();
        for k in 0..self.lanes.shards.len() {
            while self.lanes.step(k) {}
            total = total.plus(self.lanes.shards[k].risk().get(account));
        }
        total
    }
}

/// Forwards outputs and keeps the messages of the snapshot being taken.
struct Snapshotting<'a, S: Sink> {
    sink: &'a mut S,
    messages: Vec<itch::Message>,
}

impl<S: Sink> Sink for Snapshotting<'_, S> {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        self.sink.ouch(account, message);
    }
    fn itch(&mut self, message: &itch::Message) {
        self.sink.itch(message);
    }
    fn snapshot(&mut self, _: u64, message: Option<&itch::Message>) {
        if let Some(m) = message {
            self.messages.push(*m);
        }
    }
    fn marker(&mut self, marker: Marker) {
        self.sink.marker(marker);
    }
}

pub struct Split {
    front: Front,
    merge: Merge,
    lanes: Lanes,
    plans: VecDeque<Plan>,
    /// xorshift state for the shuffled schedule; 0 = run everything at once.
    rng: u64,
}

impl Split {
    /// Front, `shards` shards and merge, every input carried through at once.
    pub fn new(venue: &Venue, shards: usize) -> Result<Split, VenueError> {
        Split::with_shards(venue, shards, Shard::new)
    }

    fn with_shards(
        venue: &Venue,
        shards: usize,
        shard: fn(&Venue, usize, usize) -> Result<Shard, VenueError>,
    ) -> Result<Split, VenueError> {
        let lanes = Lanes {
            shards: (0..shards)
                .map(|k| shard(venue, k, shards))
                .collect::<Result<_, _>>()?,
            cmds: (0..shards).map(|_| VecDeque::new()).collect(),
            events: (0..shards).map(|_| VecDeque::new()).collect(),
            verdicts: (0..shards).map(|_| VecDeque::new()).collect(),
        };
        Ok(Split {
            // Queues here are unbounded, so the bound on awaited verdicts is the input count.
            front: Front::new(venue, shards, crate::limits::SPLIT_IN_FLIGHT_MAX)?,
            merge: Merge::new(venue, shards)?,
            lanes,
            plans: VecDeque::new(),
            rng: 0,
        })
    }

    /// Front, `shards` shards and merge filled with a saved state (as
    /// [`super::Exchange::from_state`]; the bytes do not depend on the shard count).
    pub fn from_state(venue: &Venue, shards: usize, bytes: &[u8]) -> Result<Split, StateError> {
        let mut p = Split::with_shards(venue, shards, Shard::unpopulated)
            .map_err(|e| StateError(format!("venue: {e}")))?;
        state::restore(&mut p.front, &mut p.lanes.shards, &mut p.merge, bytes)?;
        let windows = p.front.slots_written_next(RESTORED_RESIDENT_AHEAD);
        for shard in &mut p.lanes.shards {
            shard.make_live_resident(&windows);
        }
        Ok(p)
    }

    /// Memory of the tables not yet resident (see `Exchange::unresident`).
    pub fn unresident(&self) -> Vec<crate::memory::Unresident> {
        let mut later = self.front.unresident();
        later.extend(self.lanes.shards.iter().flat_map(Shard::unresident));
        later
    }

    /// Write the state after every sequenced input (outputs still due go to `sink` first).
    pub fn save_state<S: Sink>(
        &mut self,
        sink: &mut S,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        self.settle(sink);
        state::save(&self.front, &self.lanes.shards, &self.merge, out)
    }

    /// As [`Self::new`], with the stages interleaved pseudo-randomly from `seed`.
    pub fn shuffled(venue: &Venue, shards: usize, seed: u64) -> Result<Split, VenueError> {
        let mut p = Split::new(venue, shards)?;
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
                self.merge.process(&plan, &mut self.lanes, sink);
            }
        }
    }

    /// Carry every sequenced input through to its outputs.
    pub fn flush<S: Sink>(&mut self, sink: &mut S) {
        while let Some(plan) = self.plans.pop_front() {
            self.merge.process(&plan, &mut self.lanes, sink);
        }
    }

    /// A point between inputs for the output stage, in order.
    pub fn marker<S: Sink>(&mut self, marker: Marker, sink: &mut S) {
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        self.front.marker(marker, &mut side);
        self.flush(sink);
    }

    /// The GLIMPSE body at this point (after flushing outputs into `sink`), as
    /// [`super::Exchange::snapshot`] gives it.
    pub fn snapshot<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) -> Vec<itch::Message> {
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        self.front.snapshot(ts, 0, &mut side);
        let mut collect = Snapshotting {
            sink,
            messages: Vec::new(),
        };
        self.flush(&mut collect);
        collect.messages
    }

    pub fn day_ended(&self) -> bool {
        self.front.day_ended()
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

    pub fn expiring_orders(&self) -> u64 {
        self.lanes.shards.iter().map(Shard::expiring_orders).sum()
    }

    /// The state digest, equal to [`super::Exchange::state_digest`] after the same inputs.
    pub fn state_digest<S: Sink>(&mut self, sink: &mut S) -> StateDigest {
        self.settle(sink);
        state_digest(&self.front, &self.lanes.shards, &self.merge)
    }

    /// Carry everything through and take every verdict.
    fn settle<S: Sink>(&mut self, sink: &mut S) {
        self.flush(sink);
        for k in 0..self.lanes.shards.len() {
            while self.lanes.step(k) {}
        }
        let mut side = FrontSide {
            lanes: &mut self.lanes,
            plans: &mut self.plans,
        };
        self.front.settle_all(&mut side);
        assert!(self.lanes.events.iter().all(VecDeque::is_empty));
    }

    /// The three stages, every sequenced input carried through (to start the threads from a
    /// state rebuilt by replay).
    pub fn into_parts<S: Sink>(mut self, sink: &mut S) -> (Front, Vec<Shard>, Merge) {
        self.settle(sink);
        assert!(self.lanes.cmds.iter().all(VecDeque::is_empty));
        assert_eq!(self.front.pending(), 0);
        (self.front, self.lanes.shards, self.merge)
    }

    /// Times the front had to wait for a shard's verdict.
    pub fn front_waits(&self) -> u64 {
        self.front.waits
    }
}
