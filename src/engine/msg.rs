//! What flows between the stages: commands from the front to a shard, the plan of every input
//! from the front to the merge, events from a shard to the merge, verdicts from a shard back
//! to the front. All `Copy`, fixed size, so they fit in pre-allocated ring slots.

use crate::exchange::Input;
use crate::types::{AccountId, Price, Side, Timestamp, Token};
use crate::wire::ouch::{EnterOrder, ReplaceOrder};

/// Halted / closed as the front saw them when it sequenced a Replace.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Market {
    pub halted: bool,
    pub closed: bool,
}

/// Work for one shard, in journal-sequence order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ShardCmd {
    /// An Enter Order that passed every check that needs no book; its token is consumed.
    Enter {
        seq: u64,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        side: Side,
        order: EnterOrder,
    },
    /// A Cancel naming a token the front routed to `symbol` (the shard knows if it is live).
    Cancel {
        seq: u64,
        account: AccountId,
        symbol: u16,
        token: Token,
        shares: u32,
    },
    /// A Replace whose existing token the front routed to `symbol`. `tokens_full`: the
    /// account's token table is full (exact: the front resolved pending tokens first). Unless
    /// it is full, the shard answers with a [`Verdict`] for the replacement token.
    Replace {
        seq: u64,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        order: ReplaceOrder,
        market: Market,
        tokens_full: bool,
    },
    /// Expire what is due in every symbol of the shard.
    Tick { seq: u64, ts: Timestamp },
    /// Cancel every resting order of every symbol of the shard.
    EndOfDay { seq: u64 },
    /// Not an input: report every displayed resting order (GLIMPSE), between two inputs.
    Snapshot { after_seq: u64 },
    /// No more work: the shard thread ends.
    Stop,
}

impl ShardCmd {
    pub const EMPTY: ShardCmd = ShardCmd::Stop;
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

/// One result of a shard, in the order the single-threaded exchange produces the outputs.
/// Orders are named by their pool slot in their symbol's book; the merge translates slots to
/// order reference numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ShardEvent {
    /// The Enter Order is accepted (`dead`: Order State `D`).
    Accepted { dead: bool },
    /// The input's order token (Enter) or replacement token (Replace) is rejected.
    Rejected { reason: u8 },
    /// A successful replace; the old order (in `old_slot`) is off the book.
    Replaced {
        old_slot: u32,
        old_token: Token,
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
    /// What is left of an IOC or market order is canceled.
    IocRemainder { shares: u32 },
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
    /// Everything for `symbol` in a Tick, End of Day or Snapshot has been reported.
    SymbolDone,
    /// Everything for the input has been reported.
    Done,
}

impl ShardEvent {
    pub const EMPTY: ShardEvent = ShardEvent::Done;
}

/// What the merge does for one input (or snapshot point), in journal-sequence order.
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
    /// Expiry in every symbol, symbol by symbol in config order.
    Tick {
        input: Input,
    },
    EndOfDay {
        input: Input,
    },
    /// A GLIMPSE snapshot between inputs (not journaled): request `id`.
    Snapshot {
        after_seq: u64,
        ts: Timestamp,
        id: u64,
    },
}

impl Plan {
    pub const EMPTY: Plan = Plan::Silent { seq: 0 };

    /// The journal sequence number this plan completes (a snapshot: the one before it).
    pub fn seq(&self) -> u64 {
        match self {
            Plan::Silent { seq } => *seq,
            Plan::Snapshot { after_seq, .. } => *after_seq,
            Plan::Reject { input, .. }
            | Plan::StartOfDay { input }
            | Plan::TradingAction { input, .. }
            | Plan::Order { input, .. }
            | Plan::Tick { input }
            | Plan::EndOfDay { input } => input.seq,
        }
    }
}

/// Symbols are dealt to shards round-robin in config order.
#[inline]
pub fn shard_of(symbol: u16, shards: usize) -> usize {
    symbol as usize % shards
}
