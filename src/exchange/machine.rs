//! The exchange state machine as one value: the front, one shard holding every symbol and the
//! merge, run inline — `apply(input) -> outputs`, single-threaded and pure.
//!
//! This is the same code the sharded layout runs on threads (`crate::engine`), composed
//! without rings: the front's command waits in a one-slot hand-off until the front hands the
//! input's plan to the merge; then the shard runs and pushes each event straight into the
//! merge, which writes the messages into the sink. Nothing is copied through a queue.

use super::front::{Front, FrontLink};
use super::input::{Input, Outcome};
use super::merge::Merge;
use super::msg::{AccountRisk, Marker, Plan, ShardCmd, ShardEvent, Verdict};
use super::shard::{Shard, ShardOut};
use super::sink::Sink;
use super::state::{self, StateError};
use super::tokens::{RESTORED_RESIDENT_AHEAD, TokenState};
use super::venue::{Venue, VenueError};
use crate::book::OrderHandle;
use crate::types::{AccountId, Timestamp, Token};
use crate::wire::itch;

pub struct Exchange {
    venue: Venue,
    pub(crate) front: Front,
    pub(crate) shard: Shard,
    pub(crate) merge: Merge,
    /// The verdict of the last Replace, until the front takes it.
    verdict: Option<Verdict>,
}

/// The front's link when everything runs inline: the plan begins in the merge, then the
/// shard runs the command and pushes each event straight into the merge.
struct Inline<'a, S: Sink> {
    shard: &'a mut Shard,
    merge: &'a mut Merge,
    sink: &'a mut S,
    verdict: &'a mut Option<Verdict>,
}

/// The shard's output when everything runs inline: events go straight into the merge.
struct Push<'a, S: Sink> {
    merge: &'a mut Merge,
    sink: &'a mut S,
    verdict: &'a mut Option<Verdict>,
}

impl<S: Sink> ShardOut for Push<'_, S> {
    #[inline]
    fn event(&mut self, event: &ShardEvent) {
        debug_assert_eq!(self.merge.want(), Some(0), "one shard answers in order");
        self.merge.event(event, self.sink);
    }

    fn verdict(&mut self, verdict: Verdict) {
        assert!(
            self.verdict.replace(verdict).is_none(),
            "one verdict at a time"
        );
    }
}

impl<S: Sink> FrontLink for Inline<'_, S> {
    const VERDICT_AT_ONCE: bool = true;

    #[inline]
    fn to_merge(&mut self, plan: &Plan) {
        debug_assert!(self.merge.want().is_none(), "the last plan is merged");
        self.merge.begin(plan, self.sink);
    }

    #[inline]
    fn order_to_merge(&mut self, input: &Input, symbol: u16) {
        debug_assert!(self.merge.want().is_none(), "the last plan is merged");
        self.merge.begin_order(input, symbol);
    }

    #[inline]
    fn to_shard(&mut self, shard: usize, cmd: &ShardCmd) {
        debug_assert_eq!(shard, 0);
        let mut push = Push {
            merge: self.merge,
            sink: self.sink,
            verdict: self.verdict,
        };
        self.shard.apply(cmd, &mut push);
    }

    fn verdict(&mut self, _: usize) -> Verdict {
        self.verdict
            .take()
            .expect("an inline shard answers at once")
    }

    fn try_verdict(&mut self, _: usize) -> Option<Verdict> {
        self.verdict.take()
    }

    fn risk(&mut self, account: u16) -> AccountRisk {
        self.shard.risk().get(account)
    }
}

impl Exchange {
    /// Build every book and table at their configured sizes; nothing is allocated later.
    pub fn new(venue: Venue) -> Result<Exchange, VenueError> {
        Exchange::with_shard(venue, Shard::new)
    }

    fn with_shard(
        venue: Venue,
        shard: fn(&Venue, usize, usize) -> Result<Shard, VenueError>,
    ) -> Result<Exchange, VenueError> {
        Ok(Exchange {
            front: Front::new(&venue, 1, 1)?,
            shard: shard(&venue, 0, 1)?,
            merge: Merge::new(&venue, 1)?,
            venue,
            verdict: None,
        })
    }

    /// Build the stages and fill them with a state [`Self::save_state`] wrote (a snapshot).
    /// Bytes that do not describe a state of this venue are an error, never a panic.
    pub fn from_state(venue: Venue, bytes: &[u8]) -> Result<Exchange, StateError> {
        let mut exchange = Exchange::with_shard(venue, Shard::unpopulated)
            .map_err(|e| StateError(format!("venue: {e}")))?;
        state::restore(
            &mut exchange.front,
            std::slice::from_mut(&mut exchange.shard),
            &mut exchange.merge,
            bytes,
        )?;
        let windows = exchange.front.slots_written_next(RESTORED_RESIDENT_AHEAD);
        exchange.shard.make_live_resident(&windows);
        Ok(exchange)
    }

    /// Write the state between two inputs (see `exchange::state`); off the hot path: it
    /// walks every book and token table.
    pub fn save_state(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        state::save(
            &self.front,
            std::slice::from_ref(&self.shard),
            &self.merge,
            out,
        )
    }

    /// [`Self::save_state`] with the token tables' slot arrays lent, not copied (the
    /// daemon's snapshot point: see [`state::save_lending`]).
    pub(crate) fn save_state_lending(&self, out: &mut state::LentState) -> std::io::Result<()> {
        state::save_lending(
            &self.front,
            std::slice::from_ref(&self.shard),
            &self.merge,
            out,
        )
    }

    pub fn venue(&self) -> &Venue {
        &self.venue
    }

    /// Sequence number of the last input applied (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.front.last_seq()
    }

    /// Order reference numbers handed out so far.
    pub fn order_refs_used(&self) -> u64 {
        self.merge.order_refs_used()
    }

    /// Match numbers handed out so far.
    pub fn matches_used(&self) -> u64 {
        self.merge.matches_used()
    }

    pub fn resting_orders(&self) -> u64 {
        self.shard.resting_orders()
    }

    /// End of day was applied (the market is closed for good).
    pub fn day_ended(&self) -> bool {
        self.front.day_ended()
    }

    /// Orders that will expire by time; the sequencer ticks only while there are any.
    pub fn expiring_orders(&self) -> u64 {
        self.shard.expiring_orders()
    }

    /// Bytes held by (books, live index and reference table) and by the token tables, all
    /// allocated at construction.
    pub fn allocated_bytes(&self) -> (usize, usize) {
        let books = self.shard.allocated_bytes() + self.merge.allocated_bytes();
        let tokens = self.front.tokens.iter().map(|t| t.allocated_bytes()).sum();
        (books, tokens)
    }

    /// Memory of the tables not yet resident (see `TokenTable::unresident`), for a thread of
    /// the daemon to populate while the day goes on.
    pub fn unresident(&self) -> Vec<crate::memory::Unresident> {
        let mut later = self.front.unresident();
        later.extend(self.shard.unresident());
        later
    }

    /// Warm the cache for an input that will be applied soon (a few inputs ahead: replay,
    /// recovery and batches know theirs). A hint only: state and outputs are unchanged.
    #[inline]
    pub fn prefetch(&self, input: &Input) {
        self.front.prefetch(input);
    }

    /// The second step, a few inputs after [`Self::prefetch`] (whose lines are loaded by
    /// then): the token's slot and the shard's live-order entry. A hint only.
    #[inline]
    pub fn prefetch_deeper(&self, input: &Input) {
        if let Some((account, slot)) = self.front.prefetch_slot(input) {
            self.shard.prefetch_live(account, slot);
        }
    }

    /// Apply one sequenced input, sending its outputs to `sink` in order.
    #[inline]
    pub fn apply<S: Sink>(&mut self, input: &Input, sink: &mut S) -> Outcome {
        let mut link = Inline {
            shard: &mut self.shard,
            merge: &mut self.merge,
            sink,
            verdict: &mut self.verdict,
        };
        let outcome = self.front.apply(input, &mut link);
        debug_assert!(self.merge.want().is_none(), "the input is merged");
        debug_assert!(self.verdict.is_none(), "every verdict is taken at once");
        match (outcome, self.shard.ignored.take()) {
            (Outcome::Applied, Some(why)) => Outcome::Ignored(why),
            _ => outcome,
        }
    }

    /// A point between inputs for the output stage (see [`Marker`]), in order.
    pub fn marker<S: Sink>(&mut self, marker: Marker, sink: &mut S) {
        let mut link = Inline {
            shard: &mut self.shard,
            merge: &mut self.merge,
            sink,
            verdict: &mut self.verdict,
        };
        self.front.marker(marker, &mut link);
    }

    /// The GLIMPSE 5.0 snapshot body (DESIGN.md 5): per symbol in config order its Stock
    /// Directory, its Trading Action (current state) and an `A`/`F` for every displayed
    /// resting order with its leaves, bids then asks in priority order. Stamped `ts`.
    pub fn snapshot<F: FnMut(&itch::Message)>(&mut self, ts: Timestamp, emit: F) {
        struct Collect<F>(F);
        impl<F: FnMut(&itch::Message)> Sink for Collect<F> {
            fn ouch(&mut self, _: AccountId, _: &crate::wire::ouch::Outbound) {
                unreachable!("a snapshot sends no OUCH");
            }
            fn itch(&mut self, _: &itch::Message) {
                unreachable!("a snapshot sends no ITCH to the stream");
            }
            fn snapshot(&mut self, _: u64, message: Option<&itch::Message>) {
                if let Some(m) = message {
                    (self.0)(m);
                }
            }
        }
        self.snapshot_into(ts, 0, &mut Collect(emit));
    }

    /// The GLIMPSE snapshot `id` at this point, into `sink`'s [`Sink::snapshot`].
    pub fn snapshot_into<S: Sink>(&mut self, ts: Timestamp, id: u64, sink: &mut S) {
        let mut link = Inline {
            shard: &mut self.shard,
            merge: &mut self.merge,
            sink,
            verdict: &mut self.verdict,
        };
        self.front.snapshot(ts, id, &mut link);
    }

    /// Handle of a live order by account and token (tools and tests).
    pub fn live_order(&self, account: AccountId, token: &Token) -> Option<(u16, OrderHandle)> {
        let (slot, state) = self.front.tokens.get(account.0 as usize)?.get(token)?;
        let (TokenState::Routed(symbol) | TokenState::Pending(symbol)) = state else {
            return None;
        };
        let handle = self.shard.live_order(account, slot, token, symbol)?;
        Some((symbol, handle))
    }
}
