//! What flows between the three stages of the state machine: commands from the front to a
//! shard, the plan of every input from the front to the merge, events from a shard to the
//! merge, verdicts from a shard back to the front. All `Copy` and fixed size, so they fit in
//! pre-allocated ring slots when the stages run on threads.

use super::input::Input;
use crate::types::{AccountId, Price, Side, Timestamp, Token};
use crate::wire::ouch::{EnterOrder, ReplaceOrder};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Market state the front saw when it sequenced a Replace (the shard validates it).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Market {
    pub halted: bool,
    pub closed: bool,
    /// The account is blocked by the kill switch (reject `a`).
    pub blocked: bool,
}

/// An account's position for its limits (DESIGN.md 4a): resting orders, their leaves, and
/// shares executed today (both sides).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AccountRisk {
    pub open_orders: u32,
    pub open_shares: u64,
    pub executed: u64,
}

impl AccountRisk {
    pub fn plus(self, other: AccountRisk) -> AccountRisk {
        AccountRisk {
            open_orders: self.open_orders + other.open_orders,
            open_shares: self.open_shares + other.open_shares,
            executed: self.executed + other.executed,
        }
    }
}

/// A shard's part of every limited account's position, written only by the shard (plain
/// loads and stores of atomics: one writer) and read by the front once the shard has done
/// every command sent to it (`processed_seq`, stored with Release after each command).
#[derive(Debug)]
pub struct RiskBoard {
    accounts: Box<[Counters]>,
    pub processed_seq: AtomicU64,
}

#[derive(Debug, Default)]
struct Counters {
    open_orders: AtomicU32,
    open_shares: AtomicU64,
    executed: AtomicU64,
}

impl RiskBoard {
    pub fn new(accounts: usize) -> RiskBoard {
        RiskBoard {
            accounts: (0..accounts).map(|_| Counters::default()).collect(),
            processed_seq: AtomicU64::new(0),
        }
    }

    pub fn get(&self, account: u16) -> AccountRisk {
        let c = &self.accounts[account as usize];
        AccountRisk {
            open_orders: c.open_orders.load(Ordering::Relaxed),
            open_shares: c.open_shares.load(Ordering::Relaxed),
            executed: c.executed.load(Ordering::Relaxed),
        }
    }

    /// An order of `account` rested with `shares` (the shard's thread only).
    #[inline]
    pub(crate) fn rested(&self, account: u16, shares: u32) {
        let c = &self.accounts[account as usize];
        bump32(&c.open_orders, 1);
        bump64(&c.open_shares, u64::from(shares));
    }

    /// A resting order of `account` lost `shares`; `gone`: it left the book.
    #[inline]
    pub(crate) fn reduced(&self, account: u16, shares: u32, gone: bool) {
        let c = &self.accounts[account as usize];
        let orders = c.open_orders.load(Ordering::Relaxed);
        let open = c.open_shares.load(Ordering::Relaxed);
        assert!(
            open >= u64::from(shares) && (!gone || orders > 0),
            "position underflow"
        );
        c.open_shares
            .store(open - u64::from(shares), Ordering::Relaxed);
        if gone {
            c.open_orders.store(orders - 1, Ordering::Relaxed);
        }
    }

    /// Shares `account` executed before a restored state was taken.
    pub(crate) fn restore_executed(&self, account: u16, executed: u64) {
        bump64(&self.accounts[account as usize].executed, executed);
    }

    /// `account` executed `shares` (as taker or maker).
    #[inline]
    pub(crate) fn executed(&self, account: u16, shares: u32) {
        bump64(&self.accounts[account as usize].executed, u64::from(shares));
    }
}

#[inline]
fn bump32(a: &AtomicU32, by: u32) {
    a.store(a.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

#[inline]
fn bump64(a: &AtomicU64, by: u64) {
    a.store(a.load(Ordering::Relaxed) + by, Ordering::Relaxed);
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
        /// The account's position before this input when it has limits (the front knows it
        /// across shards; the shard finishes the check with the old order's leaves).
        risk: Option<AccountRisk>,
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
    /// Not an input: the shard thread lends its shard to the front's thread for a state
    /// snapshot and waits for it back (`crate::engine::threaded`). Handled by the thread,
    /// never by [`super::shard::Shard::apply`] (a no-op there).
    Lend,
    /// No more work: the shard thread ends.
    Stop,
}

impl ShardCmd {
    pub const EMPTY: ShardCmd = ShardCmd::Stop;

    /// The input this command belongs to (None: a snapshot or the stop).
    pub fn seq(&self) -> Option<u64> {
        match *self {
            ShardCmd::Enter { seq, .. }
            | ShardCmd::Cancel { seq, .. }
            | ShardCmd::Replace { seq, .. }
            | ShardCmd::Sweep { seq, .. } => Some(seq),
            ShardCmd::Snapshot { .. } | ShardCmd::Lend | ShardCmd::Stop => None,
        }
    }
}

/// Which resting orders a sweep cancels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SweepScope {
    /// Orders whose time in force ran out by the input's timestamp (reason `T`), each symbol
    /// in deadline order.
    Expired,
    /// Every order (end of day, reason `E`), bids then asks in priority order.
    All,
    /// The orders of one account (kill switch `S`, cancel on disconnect `Z`), bids then asks
    /// in priority order.
    Account { account: u16, reason: u8 },
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
    /// ITCH `U` once the replacement rests, after self-trade prevention has removed the own
    /// orders it crossed (it executes nothing: see `validate::rests_after_preventing_only`).
    AfterPrevention,
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
    /// Kill switch or cancel on disconnect: only the cancels.
    Account,
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
    /// Not an input: the output thread lends the merge (and the output stage's stream
    /// counts) to the front's thread for a state snapshot and waits for it back
    /// (`crate::engine::threaded`). A no-op in [`super::merge::Merge::process`].
    Lend,
}

impl Plan {
    pub const EMPTY: Plan = Plan::Silent { seq: 0 };

    /// The journal sequence number of the input this plan completes (None: not an input).
    pub fn input_seq(&self) -> Option<u64> {
        match self {
            Plan::Silent { seq } => Some(*seq),
            Plan::Snapshot { .. } | Plan::Marker(_) | Plan::Lend => None,
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
    // One shard (compact) needs no division, which costs tens of cycles per input.
    if shards == 1 {
        0
    } else {
        symbol as usize % shards
    }
}

/// The shards holding at least one of the symbols `first..=last`, in the order the merge
/// collects their `Done`s.
pub fn shards_of_range(first: u16, last: u16, shards: usize) -> impl Iterator<Item = usize> {
    let distinct = (usize::from(last - first) + 1).min(shards);
    (0..distinct).map(move |k| shard_of(first + k as u16, shards))
}
