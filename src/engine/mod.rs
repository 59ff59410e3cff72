//! The state machine's runtimes. `crate::exchange` holds the rules, written once as three
//! stages (front, shard, merge); this module runs them for the daemon:
//!
//! - [`Pipeline::Inline`]: the compact layout — the stages composed inline on the
//!   sequencer's thread (`exchange::Exchange`), the output stage called directly.
//! - [`Pipeline::Threads`]: the sharded layout — the front on the sequencer's thread, one
//!   thread per shard and an output thread, connected by rings ([`threaded`]).
//!
//! Both take the same inputs and markers and drive the same output stage; only where the
//! stages run differs.

pub mod threaded;

use crate::exchange::{Exchange, Input, Marker, Outcome};
use crate::types::{AccountId, Timestamp};
use crate::wire::ouch::Inbound;
use std::sync::atomic::Ordering;
use threaded::{OutputStage, Sharded};

/// Where the stages run.
pub enum Pipeline<O: OutputStage> {
    Inline { exchange: Box<Exchange>, out: O },
    Threads(Box<Sharded<O>>),
}

/// Numbers for status lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStatus {
    pub last_seq: u64,
    pub merged_seq: u64,
    pub resting: u64,
    pub order_refs: u64,
    pub matches: u64,
}

impl<O: OutputStage> Pipeline<O> {
    /// Sequence one input; its outputs reach the output stage now (inline) or soon (threads).
    #[inline]
    pub fn apply(&mut self, input: &Input) -> Outcome {
        match self {
            Pipeline::Inline { exchange, out } => exchange.apply(input, out),
            Pipeline::Threads(t) => t.apply(input),
        }
    }

    /// Warm the cache for an OUCH message of `account` that is about to be sequenced (its
    /// token lookups); a hint only.
    #[inline]
    pub fn prefetch_message(&self, account: AccountId, message: &Inbound) {
        match self {
            Pipeline::Inline { exchange, .. } => exchange.front.prefetch_message(account, message),
            Pipeline::Threads(t) => t.prefetch_message(account, message),
        }
    }

    /// A point between inputs for the output stage, in order.
    pub fn marker(&mut self, marker: Marker) {
        match self {
            Pipeline::Inline { exchange, out } => exchange.marker(marker, out),
            Pipeline::Threads(t) => t.marker(marker),
        }
    }

    /// A GLIMPSE snapshot at this point between inputs, answered through the output stage.
    pub fn snapshot(&mut self, ts: Timestamp, id: u64) {
        match self {
            Pipeline::Inline { exchange, out } => exchange.snapshot_into(ts, id, out),
            Pipeline::Threads(t) => t.snapshot(ts, id),
        }
    }

    /// Room for one more input (the threads' rings); the inline pipeline always has room.
    pub fn room_for_input(&self) -> bool {
        match self {
            Pipeline::Inline { .. } => true,
            Pipeline::Threads(t) => t.room_for_input(),
        }
    }

    /// The output stage's timers when it runs on this thread (threads run their own).
    pub fn idle(&mut self) {
        match self {
            Pipeline::Inline { out, .. } => out.idle(),
            Pipeline::Threads(t) => t.wake_output(),
        }
    }

    /// Nanoseconds until [`Pipeline::idle`] has timer work on this thread (`u64::MAX`: none;
    /// the threads' output stage keeps its own timers).
    pub fn output_timers_due_in_ns(&self) -> u64 {
        match self {
            Pipeline::Inline { out, .. } => out.timers_due_in_ns(),
            Pipeline::Threads(_) => u64::MAX,
        }
    }

    pub fn expiring_orders(&self) -> u64 {
        match self {
            Pipeline::Inline { exchange, .. } => exchange.expiring_orders(),
            Pipeline::Threads(t) => t.expiring_orders(),
        }
    }

    pub fn status(&self) -> PipelineStatus {
        match self {
            Pipeline::Inline { exchange: e, .. } => PipelineStatus {
                last_seq: e.last_seq(),
                merged_seq: e.last_seq(),
                resting: e.resting_orders(),
                order_refs: e.order_refs_used(),
                matches: e.matches_used(),
            },
            Pipeline::Threads(t) => {
                let stats = t.stats();
                PipelineStatus {
                    last_seq: t.last_seq(),
                    merged_seq: stats.merged_seq.load(Ordering::Acquire),
                    resting: t.resting_orders(),
                    order_refs: stats.order_refs.load(Ordering::Relaxed),
                    matches: stats.matches.load(Ordering::Relaxed),
                }
            }
        }
    }

    /// The output stage, when it runs on this thread.
    pub fn output(&mut self) -> Option<&mut O> {
        match self {
            Pipeline::Inline { out, .. } => Some(out),
            Pipeline::Threads(_) => None,
        }
    }

    /// The inline exchange (tools and tests); None when the stages run on threads.
    pub fn exchange(&self) -> Option<&Exchange> {
        match self {
            Pipeline::Inline { exchange, .. } => Some(exchange),
            Pipeline::Threads(_) => None,
        }
    }
}
