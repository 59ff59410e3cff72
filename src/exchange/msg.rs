//! What flows between the three stages of the state machine: commands from the front to a
//! shard, the plan of every input from the front to the merge, events from a shard to the
//! merge, verdicts from a shard back to the front. All `Copy` and fixed size, so they fit in
//! pre-allocated ring slots when the stages run on threads.

use super::input::Input;
use crate::types::{AccountId, Price, Side, Timestamp, Token};
use crate::wire::ouch::{EnterOrder, ReplaceOrder};

/// Market state the front saw when it sequenced a Replace (the shard validates it).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Market {
    pub halted: bool,
    pub closed: bool,
    /// The account is blocked by the kill switch (reject `a`).
    pub blocked: bool,
}

/// Work for one shard, in journal-sequence order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ShardCmd {
    /// An Enter Order that passed every check that needs no book; its token is consumed and
    /// recorded in `slot` of the account's token table.
    Enter {
        seq: u64,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        side: Side,
        slot: u32,
        order: EnterOrder,
    },
    /// A Cancel naming a token the front routed to `symbol` (the shard knows if it is live).
    Cancel {
        seq: u64,
        account: AccountId,
        symbol: u16,
        slot: u32,
        token: Token,
        shares: u32,
    },
    /// A Replace whose existing token (in `existing_slot`) the front routed to `symbol`.
    /// `replacement_slot`: where the replacement token is recorded, pending this shard's
    /// [`Verdict`]; `None` when the account's token table is full (exact: the front resolved
    /// pending tokens first), and then no verdict is sent.
    Replace {
        seq: u64,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        existing_slot: u32,
        replacement_slot: Option<u32>,
        order: ReplaceOrder,
        market: Market,
    },
    /// Cancel, in every symbol of the shard within `first..=last` (config order), the resting
    /// orders that `scope` selects, telling each owner `reason`.
    Sweep {
        seq: u64,
        ts: Timestamp,
        scope: SweepScope,
        first: u16,
        last: u16,
    },
    /// Not an input: report every displayed resting order (GLIMPSE), between two inputs.
    Snapshot { after_seq: u64 },
    /// No more work: the shard thread ends.
    Stop,
}

impl ShardCmd {
    pub const EMPTY: ShardCmd = ShardCmd::Stop;
}

/// Which resting orders a sweep cancels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SweepScope {
    /// Orders whose time in force ran out by the input's timestamp (reason `T`), each symbol
    /// in deadline order.
    Expired,
    /// Every order (end of day, reason `E`), bids then asks in priority order.
    All,
}

/// Did a Replace consume its replacement token (outcomes 3 and 4) or not (1, 2)?
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Verdict {
    pub seq: u64,
    pub consumed: bool,
}

/// How a successful replace appears on the feed (DESIGN.md 4).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReplaceFeed {
    /// ITCH `U`: the replacement rests quietly in `new_slot`.
    Replace { new_slot: u32 },
    /// ITCH `D` for the displayed old order, then executions and any `A`/`F`.
    DeleteOld,
    /// The old order was hidden: nothing for it.
    Nothing,
}

/// One result of a shard, in the order the outputs are produced. Resting orders are named
/// by their pool slot in their symbol's book; the merge translates slots to order reference
/// numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ShardEvent {
    /// The Enter Order is accepted (`dead`: Order State `D`).
    Accepted { dead: bool },
    /// The input's order token (Enter) or replacement token (Replace) is rejected.
    Rejected { reason: u8 },
    /// A successful replace; the old order (in `old_slot`) is off the book.
    Replaced {
        old_slot: u32,
        side_letter: u8,
        capacity: u8,
        exposure: u32,
        dead: bool,
        feed: ReplaceFeed,
    },
    /// One fill of the input's order (the taker) against a resting order.
    Executed {
        maker_slot: u32,
        maker_account: u16,
        maker_token: Token,
        shares: u32,
        price: Price,
        maker_hidden: bool,
    },
    /// Shares of the taker that will not rest are canceled (`I`: IOC or market remainder).
    TakerCanceled { shares: u32, reason: u8 },
    /// The input's order rests in `slot` with `shares`.
    Rested { slot: u32, side: Side, shares: u32 },
    /// A resting order lost `decrement` shares (`gone`: it left the book).
    Canceled {
        symbol: u16,
        slot: u32,
        account: u16,
        token: Token,
        decrement: u32,
        reason: u8,
        displayed: bool,
        gone: bool,
    },
    /// A displayed resting order, for a snapshot.
    Resting {
        symbol: u16,
        slot: u32,
        side: Side,
        price: Price,
        shares: u32,
        account: u16,
        attributed: bool,
    },
    /// Everything for one symbol of a sweep or snapshot has been reported.
    SymbolDone,
    /// Everything for the command has been reported.
    Done,
}

impl ShardEvent {
    pub const EMPTY: ShardEvent = ShardEvent::Done;
}

/// What a sweep does in the merge: the owner's cancel reason and what follows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SweepKind {
    Expiry,
    EndOfDay,
}

/// Points in the output sequence that are not inputs. They travel the plan queue in order,
/// so the output stage sees them exactly between the inputs they separate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Marker {
    /// The inputs through `seq` form a batch (a group commit is under way for them).
    BatchEnd { seq: u64 },
    /// The inputs through `seq` are durable by the configured mode: their outputs may leave.
    Release { seq: u64 },
}

/// What the merge does for one input (or marker, or snapshot), in journal-sequence order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Plan {
    /// No output (ignored input, refused admin command).
    Silent {
        seq: u64,
    },
    /// Rejected by the front (no book needed).
    Reject {
        input: Input,
        account: AccountId,
        token: Token,
        reason: u8,
    },
    StartOfDay {
        input: Input,
    },
    /// Halt or resume: ITCH Stock Trading Action.
    TradingAction {
        input: Input,
        symbol: u16,
        state: u8,
    },
    /// An Enter, Cancel or Replace handled by the shard of `symbol`.
    Order {
        input: Input,
        symbol: u16,
    },
    /// A sweep of symbols `first..=last`, symbol by symbol in config order.
    Sweep {
        input: Input,
        kind: SweepKind,
        first: u16,
        last: u16,
    },
    /// A GLIMPSE snapshot between inputs (not journaled): request `id`.
    Snapshot {
        after_seq: u64,
        ts: Timestamp,
        id: u64,
    },
    Marker(Marker),
}

impl Plan {
    pub const EMPTY: Plan = Plan::Silent { seq: 0 };

    /// The journal sequence number of the input this plan completes (None: not an input).
    pub fn input_seq(&self) -> Option<u64> {
        match self {
            Plan::Silent { seq } => Some(*seq),
            Plan::Snapshot { .. } | Plan::Marker(_) => None,
            Plan::Reject { input, .. }
            | Plan::StartOfDay { input }
            | Plan::TradingAction { input, .. }
            | Plan::Order { input, .. }
            | Plan::Sweep { input, .. } => Some(input.seq),
        }
    }
}

/// Symbols are dealt to shards round-robin in config order.
#[inline]
pub fn shard_of(symbol: u16, shards: usize) -> usize {
    symbol as usize % shards
}

/// The shards holding at least one of the symbols `first..=last`, in the order the merge
/// collects their `Done`s.
pub fn shards_of_range(first: u16, last: u16, shards: usize) -> impl Iterator<Item = usize> {
    let distinct = (usize::from(last - first) + 1).min(shards);
    (0..distinct).map(move |k| shard_of(first + k as u16, shards))
}
