//! A shard: the books of its symbols and every outcome that depends on them — matching,
//! cancels, the four replace outcomes, post-only / IOC / minimum-quantity deadness, capacity,
//! expiry and end-of-day sweeps. It reports [`ShardEvent`]s naming resting orders by pool
//! slot instead of formatting messages: order reference and match numbers are global to the
//! day, so the merge assigns them.
//!
//! Live orders are found by (account, token slot): the front hashes the token once and sends
//! its slot; the shard keeps, per account and slot, the pool handle the order rested in.
//! Entries are never cleared: a handle is believed only if its pool slot is occupied by an
//! order with the same account and token (a token is used once per account per day, so the
//! check is exact even after the pool slot is reused). An entry holds the handle plus one, so
//! that zero, what fresh memory reads as, is "no order": the index is sized by the token
//! limit (hundreds of megabytes on a busy venue) and only the entries of slots still to be
//! written are made resident before the first input (see `Shard::make_live_resident`).

use super::msg::{
    AccountRisk, Market, ReplaceFeed, RiskBoard, ShardCmd, ShardEvent, SweepScope, Verdict,
    shard_of,
};
use super::tokens::token_words;
use super::validate::{self, MarketState, ReplaceFault};
use super::venue::{AccountDef, Stp, SymbolSpec, Venue, VenueError};
use crate::book::{BookConfig, OrderBook, OrderHandle, OrderView, Removal};
use crate::types::{AccountId, Price, Side, Timestamp, Token};
use crate::wire::ouch::{self, cancel_reason, reject_reason as why};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where a shard's results go.
pub trait ShardOut {
    /// By reference: inline, the event goes straight into the merge without a copy.
    fn event(&mut self, event: &ShardEvent);
    fn verdict(&mut self, verdict: Verdict);
}

/// What a shard keeps with every resting order (no reference number: the merge has it).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Resting {
    pub token: Token,
    pub account: u16,
    /// Shares executed by the whole replace chain so far.
    pub chain_executed: u32,
    /// The entered Buy/Sell Indicator letter (`B`, `S`, `T`, `E`), echoed on Replaced.
    pub side_letter: u8,
    pub display: u8,
    pub capacity: u8,
}

impl Resting {
    pub fn displayed(&self) -> bool {
        self.display != b'N'
    }
}

/// Everything needed to enter one order (from an Enter, or from a Replace's chain).
#[derive(Clone, Copy, Debug)]
struct Entry {
    account: AccountId,
    symbol: u16,
    side: Side,
    price: Price,
    /// Shares this order may still execute (exposure).
    shares: u32,
    tif: u32,
    min_qty: u32,
    /// Where the order's token is recorded in its account's table.
    slot: u32,
    resting: Resting,
}

/// What a replace keeps of the order it replaces.
struct OldOrder {
    handle: OrderHandle,
    side: Side,
    leaves: u32,
    resting: Resting,
}

/// No order: an empty entry of the live index (an entry is a handle plus one).
const NO_HANDLE: u32 = 0;

pub struct Shard {
    index: usize,
    specs: Vec<SymbolSpec>,
    /// Books of this shard's symbols, indexed by global symbol index (None: another shard's).
    books: Vec<Option<OrderBook<Resting>>>,
    /// This shard's symbols in config order.
    symbols: Vec<u16>,
    /// Held while this shard lives: the thread populating its live index's unresident part
    /// holds only a weak reference (see [`Self::unresident`]). Declared before `live`, so
    /// dropped first: the thread stops before the memory goes.
    alive: Arc<()>,
    /// Pool handle plus one by (account, token slot): `live[account * tokens_per_account +
    /// slot]`; [`NO_HANDLE`] where no order ever rested.
    live: Box<[u32]>,
    /// Per account: the live index is resident below this slot where the day writes (see
    /// [`Self::make_live_resident`]); beyond it, [`Self::unresident`].
    resident_to: Vec<u32>,
    tokens_per_account: usize,
    /// Per account: its controls (self-trade prevention, limits).
    accounts: Vec<AccountDef>,
    /// Per account: does it have limits (then its position is kept on `risk`)?
    limited: Vec<bool>,
    /// Per account: its self-trade prevention, read by every order: a byte an account kept
    /// together (reading it from `accounts` cost a cache miss an input, 1,000 accounts).
    stp: Vec<Stp>,
    /// This shard's part of the limited accounts' positions.
    risk: Arc<RiskBoard>,
    /// Handles collected by an account sweep before it removes them (sized for one book).
    scratch: Vec<OrderHandle>,
    /// Why the last command did nothing, if it did nothing (the inline exchange reports it).
    pub(crate) ignored: Option<&'static str>,
}

/// Slots of each account whose live-index entries a fresh shard makes resident before the
/// first input (4 MiB an account): the tokens the day records first (see
/// `tokens::ENTRIES_RESIDENT_AHEAD`, the same for the slot arrays; a restore makes fewer
/// resident, `tokens::RESTORED_RESIDENT_AHEAD`).
pub(crate) const LIVE_RESIDENT_AHEAD: u32 = 1 << 20;

/// How a taker's matching ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Matched {
    /// It may rest (or cancel an IOC remainder) with what is left.
    Open,
    /// Self-trade prevention canceled what was left: nothing rests, nothing more follows.
    Canceled,
}

/// Whether a successful replace is published as ITCH `U` (DESIGN.md 4), and when.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ItchReplace {
    /// `D` for a displayed old order, then executions and any `A`/`F`.
    No,
    /// `U` at once: the replacement crosses nothing and takes the old order's place.
    InPlace,
    /// `U` once it rests, after the cancels of the own orders it crossed.
    AfterPrevention,
}

impl Shard {
    /// A shard of a fresh day: the live index's entries of each account's first tokens are
    /// resident (`Self::make_live_resident`).
    pub fn new(venue: &Venue, index: usize, shards: usize) -> Result<Shard, VenueError> {
        let mut shard = Shard::unpopulated(venue, index, shards)?;
        let first = 0..(shard.tokens_per_account as u32).min(LIVE_RESIDENT_AHEAD);
        let windows: Vec<_> = (0..venue.accounts.len() as u16)
            .map(|account| (account, first.clone()))
            .collect();
        shard.make_live_resident(&windows);
        Ok(shard)
    }

    /// A shard whose live index is allocated (zero: no order anywhere) and not yet resident:
    /// a restore writes its orders, then makes resident where the day goes on writing.
    pub(crate) fn unpopulated(
        venue: &Venue,
        index: usize,
        shards: usize,
    ) -> Result<Shard, VenueError> {
        let specs = venue.specs()?;
        let limits = venue.limits;
        let config = BookConfig {
            order_capacity: limits.orders_per_symbol,
            level_capacity: limits.levels_per_side,
        };
        let symbols: Vec<u16> = (0..specs.len() as u16)
            .filter(|&s| shard_of(s, shards) == index)
            .collect();
        let books = (0..specs.len() as u16)
            .map(|s| (shard_of(s, shards) == index).then(|| OrderBook::new(config)))
            .collect();
        let tokens_per_account = limits.tokens_per_account as usize;
        // Zeroed by the allocator (a large one: untouched pages), on huge pages where the
        // system allows (a Cancel or Replace reads a random entry of it), advised before
        // any page is touched. A read of an untouched page finds zero (the kernel's zero
        // page); the pages the day writes are made resident by `make_live_resident` and
        // `unresident`.
        let entries = tokens_per_account * venue.accounts.len();
        let mut live = vec![NO_HANDLE; entries].into_boxed_slice();
        crate::memory::advise_huge_pages(live.as_mut_ptr().cast(), entries * size_of::<u32>());
        let scratch = Vec::with_capacity(limits.orders_per_symbol as usize);
        Ok(Shard {
            index,
            specs,
            books,
            symbols,
            live,
            alive: Arc::new(()),
            resident_to: vec![0; venue.accounts.len()],
            tokens_per_account,
            accounts: venue.accounts.clone(),
            limited: venue.accounts.iter().map(AccountDef::has_limits).collect(),
            stp: venue.accounts.iter().map(|a| a.stp).collect(),
            risk: Arc::new(RiskBoard::new(venue.accounts.len())),
            scratch,
            ignored: None,
        })
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn symbols(&self) -> &[u16] {
        &self.symbols
    }

    /// Orders in this shard's books that can expire (the sequencer ticks while there are any).
    pub fn expiring_orders(&self) -> u64 {
        self.books
            .iter()
            .flatten()
            .map(|b| u64::from(b.expiring_count()))
            .sum()
    }

    pub fn resting_orders(&self) -> u64 {
        self.books
            .iter()
            .flatten()
            .map(|b| u64::from(b.order_count()))
            .sum()
    }

    /// Bytes held by the books and the live index (all allocated at construction).
    pub fn allocated_bytes(&self) -> usize {
        let books: usize = self
            .books
            .iter()
            .flatten()
            .map(|b| b.allocated_bytes())
            .sum();
        books + self.live.len() * std::mem::size_of::<u32>() + self.scratch.capacity() * 4
    }

    /// This shard's part of the limited accounts' positions (read by the front).
    pub fn risk(&self) -> &Arc<RiskBoard> {
        &self.risk
    }

    pub(crate) fn book(&self, symbol: u16) -> &OrderBook<Resting> {
        self.books[symbol as usize]
            .as_ref()
            .expect("symbol routed to its shard")
    }

    fn book_mut(&mut self, symbol: u16) -> &mut OrderBook<Resting> {
        self.books[symbol as usize]
            .as_mut()
            .expect("symbol routed to its shard")
    }

    /// Make resident the live index's entries of each `(account, slots)` window (whole
    /// pages around them), on the cores when they are large: the slots the day writes next
    /// (an account's next fresh slots, its voided ones). Contents are unchanged (zero, or a
    /// restored order's handle).
    pub(crate) fn make_live_resident(&mut self, windows: &[(u16, std::ops::Range<u32>)]) {
        let ranges: Vec<(usize, usize)> = windows
            .iter()
            .filter(|(_, slots)| !slots.is_empty())
            .map(|(account, slots)| {
                (
                    self.live_at(*account, slots.start),
                    self.live_at(*account, slots.end),
                )
            })
            .collect();
        for (account, slots) in windows {
            let to = &mut self.resident_to[*account as usize];
            *to = (*to).max(slots.end);
        }
        let bytes = ranges.iter().map(|(from, to)| (to - from) * 4).sum();
        let live = &self.live[..];
        crate::memory::on_cores(ranges, bytes, |(), (from, to)| {
            crate::memory::populate_part(live, from..to);
        });
    }

    /// The live index beyond each account's windows made resident by
    /// [`Self::make_live_resident`], for a thread of the daemon to populate while the day
    /// goes on (see `TokenTable::unresident`). Before them: entries the day only reads (a
    /// read of an untouched page finds zero without making it resident).
    pub(crate) fn unresident(&self) -> Vec<crate::memory::Unresident> {
        self.resident_to
            .iter()
            .enumerate()
            .filter(|&(_, &slot)| (slot as usize) < self.tokens_per_account)
            .map(|(account, &slot)| {
                let start = self.live_at(account as u16, slot);
                let end = self.live_at(account as u16, 0) + self.tokens_per_account;
                let owner = Arc::downgrade(&self.alive);
                crate::memory::Unresident::new(
                    self.live[start..end].as_ptr().cast(),
                    (end - start) * 4,
                    owner,
                )
            })
            .collect()
    }

    /// Where the live index keeps `account`'s token `slot`.
    #[inline]
    fn live_at(&self, account: u16, slot: u32) -> usize {
        account as usize * self.tokens_per_account + slot as usize
    }

    /// Ask the cache for the live-order entry of `account`'s token `slot` (see
    /// [`super::Exchange::prefetch_deeper`]); an out-of-range guess is ignored.
    #[inline]
    pub(crate) fn prefetch_live(&self, account: u16, slot: u32) {
        if let Some(entry) = self.live.get(self.live_at(account, slot)) {
            crate::memory::prefetch_line(entry);
        }
    }

    /// The live order of `account` recorded in `slot` with `token`, if it still rests.
    pub(crate) fn live_order(
        &self,
        account: AccountId,
        slot: u32,
        token: &Token,
        symbol: u16,
    ) -> Option<OrderHandle> {
        Some(self.live_view(account, slot, token, symbol)?.handle)
    }

    /// [`Self::live_order`] with what the book holds of it.
    fn live_view(
        &self,
        account: AccountId,
        slot: u32,
        token: &Token,
        symbol: u16,
    ) -> Option<OrderView<'_, Resting>> {
        self.live_in(self.book(symbol), account, slot, token)
    }

    /// [`Self::live_view`] in `book`, the book of the order's symbol.
    #[inline]
    fn live_in<'b>(
        &self,
        book: &'b OrderBook<Resting>,
        account: AccountId,
        slot: u32,
        token: &Token,
    ) -> Option<OrderView<'b, Resting>> {
        let entry = self.live[self.live_at(account.0, slot)];
        if entry == NO_HANDLE {
            return None;
        }
        let order = book.get_live(OrderHandle(entry - 1))?;
        (order.payload.account == account.0 && same_token(&order.payload.token, token))
            .then_some(order)
    }

    /// Restore shares an account executed today (a state snapshot); false if the account
    /// has no limits, so no position is kept for it.
    pub(crate) fn restore_executed(&mut self, account: u16, executed: u64) -> bool {
        if !self.limited.get(account as usize).copied().unwrap_or(false) {
            return false;
        }
        self.risk.restore_executed(account, executed);
        true
    }

    /// Rest a restored order at the tail of its queue (orders come in order reference order,
    /// which rebuilds time priority and expiry order). `None` if it does not fit the book or
    /// would cross it: bytes that are not a state of this venue.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn restore_order(
        &mut self,
        symbol: u16,
        side: Side,
        price: Price,
        leaves: u32,
        hidden: bool,
        deadline_ms: u32,
        slot: u32,
        resting: Resting,
    ) -> Option<OrderHandle> {
        let account = resting.account as usize;
        if account >= self.accounts.len() || slot as usize >= self.tokens_per_account {
            return None;
        }
        let book = self.books.get_mut(symbol as usize)?.as_mut()?;
        if leaves == 0 || !book.can_rest(side, price) || book.crosses(side, price) {
            return None;
        }
        let handle = book.insert(side, price, leaves, hidden, deadline_ms, resting);
        self.now_resting(resting.account, slot, handle, leaves);
        Some(handle)
    }

    /// After a restore: every command up to `last_seq` counts as done (the front reads
    /// positions once a shard has done the commands sent to it).
    pub(crate) fn restore_position(&mut self, last_seq: u64) {
        self.risk.processed_seq.store(last_seq, Ordering::Release);
    }

    /// Handle one command; returns false for `Stop`.
    pub fn apply<O: ShardOut>(&mut self, cmd: &ShardCmd, out: &mut O) -> bool {
        self.ignored = None;
        match *cmd {
            ShardCmd::Enter {
                ts,
                account,
                symbol,
                side,
                slot,
                order,
                ..
            } => self.enter(ts, account, symbol, side, slot, &order, out),
            ShardCmd::Cancel {
                account,
                symbol,
                slot,
                token,
                shares,
                ..
            } => self.cancel(account, symbol, slot, &token, shares, out),
            ShardCmd::Replace {
                seq,
                replacement_slot,
                ..
            } => {
                let consumed = self.replace(cmd, out);
                if replacement_slot.is_some() {
                    out.verdict(Verdict { seq, consumed });
                }
            }
            ShardCmd::Sweep {
                ts,
                scope,
                first,
                last,
                ..
            } => self.sweep(ts, scope, first, last, out),
            ShardCmd::Snapshot { .. } => self.snapshot(out),
            // The thread lends the shard itself; here (inline) there is nothing to do, and no
            // `Done`: the merge waits for none.
            ShardCmd::Lend => return true,
            ShardCmd::Stop => return false,
        }
        out.event(&ShardEvent::Done);
        if let Some(seq) = cmd.seq() {
            // After every position update of the command: the front may now read them.
            self.risk.processed_seq.store(seq, Ordering::Release);
        }
        true
    }

    // ---- order entry -------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn enter<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        side: Side,
        slot: u32,
        o: &ouch::EnterOrder,
        out: &mut O,
    ) {
        let entry = Entry {
            account,
            symbol,
            side,
            price: o.price,
            shares: o.shares.0,
            tif: o.tif,
            min_qty: o.min_qty.0,
            slot,
            resting: Resting {
                token: o.token,
                account: account.0,
                chain_executed: 0,
                side_letter: o.side,
                display: o.display,
                capacity: validate::normalize_capacity(o.capacity),
            },
        };
        let book = self.book(symbol);
        let dead = Self::dead_on_arrival(book, &entry);
        if !dead && self.would_not_fit(book, &entry, None) {
            out.event(&ShardEvent::Rejected { reason: why::OTHER });
            return;
        }
        out.event(&ShardEvent::Accepted { dead });
        if !dead {
            self.execute_and_rest(ts, entry, out);
        }
    }

    #[inline]
    fn arrival(e: &Entry) -> validate::Arrival {
        validate::Arrival {
            side: e.side,
            price: e.price,
            shares: e.shares,
            tif: e.tif,
            min_qty: e.min_qty,
            post_only: e.resting.display == b'P',
        }
    }

    /// Rejected `O` for room: see [`validate::would_not_fit`].
    #[inline]
    fn would_not_fit(
        &self,
        book: &OrderBook<Resting>,
        e: &Entry,
        replacing: Option<OrderHandle>,
    ) -> bool {
        let stp = self.stp[e.account.0 as usize];
        let own = |r: &Resting| r.account == e.account.0;
        validate::would_not_fit(book, &Self::arrival(e), replacing, stp, own)
    }

    /// Accepted with state `D`: see [`validate::dead_on_arrival`].
    #[inline]
    fn dead_on_arrival(book: &OrderBook<Resting>, e: &Entry) -> bool {
        validate::dead_on_arrival(book, &Self::arrival(e))
    }

    /// Execute a live order against the book, then cancel an IOC remainder or rest the rest.
    fn execute_and_rest<O: ShardOut>(&mut self, ts: Timestamp, mut e: Entry, out: &mut O) {
        let (executed, left, matched) = match self.stp[e.account.0 as usize] {
            Stp::None => {
                let executed = self.execute(&e, e.shares, out);
                (executed, e.shares - executed, Matched::Open)
            }
            stp => self.execute_preventing_self_trades(&e, stp, out),
        };
        e.resting.chain_executed += executed;
        if left == 0 || matched == Matched::Canceled {
            return;
        }
        if e.tif == validate::TIF_IOC {
            out.event(&ShardEvent::TakerCanceled {
                shares: left,
                reason: cancel_reason::IMMEDIATE_OR_CANCEL,
            });
            return;
        }
        let handle = self.rest(ts, &e, left, None);
        out.event(&ShardEvent::Rested {
            slot: handle.0,
            side: e.side,
            shares: left,
        });
    }

    /// Rest `shares` of `e`; `replacing`: a replacement that rests without executing, in one
    /// book step with the removal of the order it replaces.
    fn rest(
        &mut self,
        ts: Timestamp,
        e: &Entry,
        shares: u32,
        replacing: Option<OrderHandle>,
    ) -> OrderHandle {
        let deadline_ms = validate::deadline_ms(ts.0, e.tif);
        let hidden = !e.resting.displayed();
        let book = self.book_mut(e.symbol);
        let handle = match replacing {
            None => book.insert(e.side, e.price, shares, hidden, deadline_ms, e.resting),
            Some(old) => book.replace(old, e.price, shares, hidden, deadline_ms, e.resting),
        };
        self.now_resting(e.account.0, e.slot, handle, shares);
        handle
    }

    /// `account`'s order of token `slot` rests as `handle` with `shares`: the live index and
    /// the account's position say so.
    #[inline]
    fn now_resting(&mut self, account: u16, slot: u32, handle: OrderHandle, shares: u32) {
        let at = self.live_at(account, slot);
        self.live[at] = handle.0 + 1;
        if self.limited[account as usize] {
            self.risk.rested(account, shares);
        }
    }

    /// A resting order of `account` lost `shares` (`gone`: it left the book): its position.
    #[inline]
    fn left(&self, account: u16, shares: u32, gone: bool) {
        if self.limited[account as usize] {
            self.risk.reduced(account, shares, gone);
        }
    }

    /// Match the taker for up to `shares`; report each fill (the merge writes the taker's,
    /// then the maker's messages). Returns the shares executed.
    fn execute<O: ShardOut>(&mut self, e: &Entry, shares: u32, out: &mut O) -> u32 {
        let book = self.books[e.symbol as usize]
            .as_mut()
            .expect("symbol routed to its shard");
        let (limited, risk) = (&self.limited, &self.risk);
        let remaining = book.execute(e.side, e.price, shares, |fill, maker| {
            maker.chain_executed += fill.shares;
            if limited[maker.account as usize] {
                risk.reduced(maker.account, fill.shares, fill.maker_leaves == 0);
                risk.executed(maker.account, fill.shares);
            }
            out.event(&ShardEvent::Executed {
                maker_slot: fill.maker.0,
                maker_account: maker.account,
                maker_token: maker.token,
                shares: fill.shares,
                price: fill.price,
                maker_hidden: fill.maker_hidden,
            });
        });
        let executed = shares - remaining;
        if self.limited[e.account.0 as usize] && executed > 0 {
            self.risk.executed(e.account.0, executed);
        }
        executed
    }

    /// Matching for a taker whose account prevents self-trades (DESIGN.md 4a): resting
    /// orders are taken one at a time in priority order; one of the taker's own account gets
    /// the account's rule instead of a trade. Returns (executed, left, how it ended).
    fn execute_preventing_self_trades<O: ShardOut>(
        &mut self,
        e: &Entry,
        stp: Stp,
        out: &mut O,
    ) -> (u32, u32, Matched) {
        let (mut executed, mut left) = (0u32, e.shares);
        let contra = e.side.opposite();
        // Each round trades with, cancels or reduces one resting order: bounded by them.
        for _ in 0..=self.book(e.symbol).order_capacity() {
            if left == 0 || !self.book(e.symbol).crosses(e.side, e.price) {
                return (executed, left, Matched::Open);
            }
            let head = self
                .book(e.symbol)
                .first_in_priority(contra)
                .expect("a crossing book has a first order");
            let maker = self.book(e.symbol).get(head);
            let (maker_account, maker_leaves) = (maker.payload.account, maker.leaves);
            if maker_account != e.account.0 {
                let n = self.execute(e, left.min(maker_leaves), out);
                debug_assert_eq!(n, left.min(maker_leaves), "the first order takes it all");
                executed += n;
                left -= n;
                continue;
            }
            let q = left.min(maker_leaves);
            let (maker_cut, taker_cut) = match stp {
                Stp::None => unreachable!("no prevention"),
                Stp::CancelNewest => (0, left),
                Stp::CancelOldest => (maker_leaves, 0),
                Stp::CancelBoth => (maker_leaves, left),
                Stp::Decrement => (q, q),
            };
            if maker_cut > 0 {
                self.reduce_resting(e.symbol, head, maker_cut, cancel_reason::SELF_MATCH, out);
            }
            if taker_cut > 0 {
                out.event(&ShardEvent::TakerCanceled {
                    shares: taker_cut,
                    reason: cancel_reason::SELF_MATCH,
                });
                left -= taker_cut;
            }
            if matches!(stp, Stp::CancelNewest | Stp::CancelBoth) {
                return (executed, left, Matched::Canceled);
            }
        }
        unreachable!("matching is bounded by the resting orders")
    }

    /// Take `shares` off a resting order for a reason other than its owner's cancel (it
    /// leaves the book when none remain): its owner is told, the feed too if displayed.
    fn reduce_resting<O: ShardOut>(
        &mut self,
        symbol: u16,
        handle: OrderHandle,
        shares: u32,
        reason: u8,
        out: &mut O,
    ) {
        let order = self.book(symbol).get(handle);
        let (leaves, payload) = (order.leaves, *order.payload);
        assert!(shares > 0 && shares <= leaves);
        let gone = shares == leaves;
        let taken = self.book_mut(symbol).reduce_to(handle, leaves - shares);
        debug_assert_eq!(taken, shares);
        self.left(payload.account, shares, gone);
        out.event(&ShardEvent::Canceled {
            symbol,
            slot: handle.0,
            account: payload.account,
            token: payload.token,
            decrement: shares,
            reason,
            displayed: payload.displayed(),
            gone,
        });
    }

    // ---- cancel ------------------------------------------------------------------------

    fn cancel<O: ShardOut>(
        &mut self,
        account: AccountId,
        symbol: u16,
        slot: u32,
        token: &Token,
        intended: u32,
        out: &mut O,
    ) {
        let Some(order) = self.live_view(account, slot, token, symbol) else {
            self.ignored = Some("cancel of an unknown or dead token");
            return;
        };
        let (handle, displayed, leaves) = (order.handle, order.payload.displayed(), order.leaves);
        let decrement = self.book_mut(symbol).reduce_to(handle, intended);
        if decrement == 0 {
            self.ignored = Some("cancel reduces nothing");
            return;
        }
        self.left(account.0, decrement, decrement == leaves);
        out.event(&ShardEvent::Canceled {
            symbol,
            slot: handle.0,
            account: account.0,
            token: *token,
            decrement,
            reason: cancel_reason::USER,
            displayed,
            gone: decrement == leaves,
        });
    }

    /// An order left its book for a reason other than its owner's cancel.
    fn removed<O: ShardOut>(&self, symbol: u16, r: &Removal<Resting>, reason: u8, out: &mut O) {
        self.left(r.payload.account, r.leaves, true);
        out.event(&ShardEvent::Canceled {
            symbol,
            slot: r.handle.0,
            account: r.payload.account,
            token: r.payload.token,
            decrement: r.leaves,
            reason,
            displayed: r.payload.displayed(),
            gone: true,
        });
    }

    // ---- replace -----------------------------------------------------------------------

    /// The four outcomes of PROTOCOLS.md 2.6. Returns whether the replacement token is used.
    fn replace<O: ShardOut>(&mut self, cmd: &ShardCmd, out: &mut O) -> bool {
        let ShardCmd::Replace {
            ts,
            account,
            symbol,
            existing_slot,
            replacement_slot,
            order: ref u,
            market,
            risk,
            ..
        } = *cmd
        else {
            unreachable!("a replace command");
        };
        let tokens_full = replacement_slot.is_none();
        // Every check before the book changes reads this one book.
        let book = self.book(symbol);
        let Some(old) = self.live_in(book, account, existing_slot, &u.existing) else {
            if market.closed {
                // After end of day no order is live, yet DESIGN.md 4 gives a Replace its
                // reject like an Enter's: `H` on a halted symbol, else `C` (the token names
                // this account's order or replace on `symbol`: side and symbol are known).
                let spec = &self.specs[symbol as usize];
                if let Err(ReplaceFault::Rejected(reason)) =
                    validate::check_replace(u, spec, market_state(market))
                {
                    out.event(&ShardEvent::Rejected { reason });
                    return !tokens_full;
                }
            }
            self.ignored = Some("replace of an order that is not live"); // outcome 1
            return false;
        };
        let old = OldOrder {
            handle: old.handle,
            side: old.side,
            leaves: old.leaves,
            resting: *old.payload,
        };
        let checked =
            validate::check_replace(u, &self.specs[symbol as usize], market_state(market))
                .and_then(|()| self.replace_within_limits(account, old.leaves, u, risk));
        match checked {
            Err(ReplaceFault::Invalid) => {
                let removal = self.book_mut(symbol).remove(old.handle);
                self.removed(symbol, &removal, cancel_reason::USER, out);
                return false;
            }
            Err(ReplaceFault::Rejected(reason)) => {
                out.event(&ShardEvent::Rejected { reason });
                return !tokens_full;
            }
            Ok(()) => {}
        }
        // Its exposure as shares; its slot once the token has one (checked below).
        let mut entry = Entry {
            account,
            symbol,
            side: old.side,
            price: u.price,
            shares: u.shares.0.saturating_sub(old.resting.chain_executed),
            tif: u.tif,
            min_qty: u.min_qty.0,
            slot: 0,
            resting: Resting {
                token: u.replacement,
                display: u.display,
                ..old.resting
            },
        };
        // The replacement's deadness, and whether it crosses, depend on the book without
        // the old order, which is on the other side (an order never crosses its own book):
        // the same before and after.
        let dead = Self::dead_on_arrival(book, &entry);
        if !dead && self.would_not_fit(book, &entry, Some(old.handle)) {
            out.event(&ShardEvent::Rejected { reason: why::OTHER });
            return !tokens_full;
        }
        let itch_replace =
            Self::publish_as_itch_replace(book, &old.resting, &entry, dead, &self.stp);
        let Some(slot) = replacement_slot else {
            out.event(&ShardEvent::Rejected { reason: why::OTHER });
            return false;
        };
        entry.slot = slot;
        self.enter_replacement(ts, &entry, &old, dead, itch_replace, out);
        true
    }

    /// A Replace that would take the account over a limit is invalid (outcome 2): its chain
    /// total counts in place of the old order's leaves (DESIGN.md 4a).
    #[inline]
    fn replace_within_limits(
        &self,
        account: AccountId,
        leaves: u32,
        u: &ouch::ReplaceOrder,
        risk: Option<AccountRisk>,
    ) -> Result<(), ReplaceFault> {
        let Some(risk) = risk else {
            return Ok(());
        };
        let def = &self.accounts[account.0 as usize];
        validate::check_limits(def, risk, u.shares.0, leaves).map_err(|_| ReplaceFault::Invalid)
    }

    /// Outcome 4: take the old order off the book and enter the replacement (`entry`, its
    /// exposure as shares) with new priority; `itch_replace`: whether and when it is
    /// published as an ITCH `U`.
    fn enter_replacement<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        entry: &Entry,
        old: &OldOrder,
        dead: bool,
        itch_replace: ItchReplace,
        out: &mut O,
    ) {
        debug_assert_eq!(dead, Self::dead_on_arrival(self.book(entry.symbol), entry));
        let exposure = entry.shares;
        let replaced = |feed| ShardEvent::Replaced {
            old_slot: old.handle.0,
            side_letter: old.resting.side_letter,
            capacity: old.resting.capacity,
            exposure,
            dead,
            feed,
        };
        if itch_replace == ItchReplace::InPlace {
            self.left(entry.account.0, old.leaves, true);
            let handle = self.rest(ts, entry, entry.shares, Some(old.handle));
            out.event(&replaced(ReplaceFeed::Replace { new_slot: handle.0 }));
            return;
        }
        self.book_mut(entry.symbol).remove(old.handle);
        self.left(entry.account.0, old.leaves, true);
        let feed = if itch_replace == ItchReplace::AfterPrevention {
            ReplaceFeed::AfterPrevention
        } else if old.resting.displayed() {
            ReplaceFeed::DeleteOld
        } else {
            ReplaceFeed::Nothing
        };
        out.event(&replaced(feed));
        if !dead {
            self.execute_and_rest(ts, *entry, out);
        }
    }

    /// ITCH `U` only when old and new are displayed with the same attribution and the
    /// replacement rests without executing (DESIGN.md 4): in place when it crosses nothing;
    /// after the cancels when it crosses only its own account's orders and its account's
    /// self-trade prevention (in `stp`, read only then) leaves it shares to rest.
    #[inline]
    fn publish_as_itch_replace(
        book: &OrderBook<Resting>,
        old: &Resting,
        new: &Entry,
        dead: bool,
        stp: &[Stp],
    ) -> ItchReplace {
        let attributed = |d: u8| d == b'A';
        let shown_alike = !dead
            && old.displayed()
            && new.resting.displayed()
            && attributed(old.display) == attributed(new.resting.display)
            && new.tif != validate::TIF_IOC;
        if !shown_alike {
            return ItchReplace::No;
        }
        if !book.crosses(new.side, new.price) {
            return ItchReplace::InPlace;
        }
        let own = |r: &Resting| r.account == new.account.0;
        let stp = stp[new.account.0 as usize];
        if validate::rests_after_preventing_only(book, &Self::arrival(new), stp, own) {
            ItchReplace::AfterPrevention
        } else {
            ItchReplace::No
        }
    }

    // ---- sweeps and snapshots ----------------------------------------------------------

    fn sweep<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        scope: SweepScope,
        first: u16,
        last: u16,
        out: &mut O,
    ) {
        for i in 0..self.symbols.len() {
            let symbol = self.symbols[i];
            if symbol < first || symbol > last {
                continue;
            }
            match scope {
                SweepScope::Expired => self.expire(symbol, ts, out),
                SweepScope::All => self.cancel_all(symbol, cancel_reason::CLOSED, out),
                SweepScope::Account { account, reason } => {
                    self.cancel_account(symbol, account, reason, out)
                }
            }
            out.event(&ShardEvent::SymbolDone);
        }
    }

    /// Expire what is due in `symbol` (Canceled `T`), in deadline order.
    fn expire<O: ShardOut>(&mut self, symbol: u16, ts: Timestamp, out: &mut O) {
        let now_ms = u32::try_from(ts.0 / 1_000_000).unwrap_or(u32::MAX);
        let limit = self.book(symbol).order_capacity();
        for _ in 0..limit {
            let Some(removal) = self.book_mut(symbol).expire_next(now_ms) else {
                break;
            };
            self.removed(symbol, &removal, cancel_reason::TIME_IN_FORCE, out);
        }
    }

    /// Cancel every order of `symbol`, bids then asks, each side in priority order.
    fn cancel_all<O: ShardOut>(&mut self, symbol: u16, reason: u8, out: &mut O) {
        for side in [Side::Buy, Side::Sell] {
            let limit = self.book(symbol).order_capacity();
            for _ in 0..limit {
                let Some(handle) = self.book(symbol).first_in_priority(side) else {
                    break;
                };
                let removal = self.book_mut(symbol).remove(handle);
                self.removed(symbol, &removal, reason, out);
            }
        }
    }

    /// Cancel the orders of `account` in `symbol`, bids then asks, each side in priority
    /// order (the kill switch, cancel on disconnect).
    fn cancel_account<O: ShardOut>(&mut self, symbol: u16, account: u16, reason: u8, out: &mut O) {
        for side in [Side::Buy, Side::Sell] {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            self.book(symbol).for_each_order(side, |o| {
                if o.payload.account == account {
                    // Bounded: the scratch holds a whole book.
                    assert!(scratch.len() < scratch.capacity());
                    scratch.push(o.handle);
                }
            });
            for &handle in &scratch {
                let removal = self.book_mut(symbol).remove(handle);
                self.removed(symbol, &removal, reason, out);
            }
            self.scratch = scratch;
        }
    }

    fn snapshot<O: ShardOut>(&self, out: &mut O) {
        for &symbol in &self.symbols {
            for side in [Side::Buy, Side::Sell] {
                self.book(symbol).for_each_order(side, |o| {
                    if o.hidden {
                        return;
                    }
                    out.event(&ShardEvent::Resting {
                        symbol,
                        slot: o.handle.0,
                        side,
                        price: o.price,
                        shares: o.leaves,
                        account: o.payload.account,
                        attributed: o.payload.display == b'A',
                    });
                });
            }
            out.event(&ShardEvent::SymbolDone);
        }
    }
}

/// `a == b` as the tokens' two words ([`token_words`]), about half the instructions of the
/// derived 14-byte comparison on every cancel and replace.
#[inline]
fn same_token(a: &Token, b: &Token) -> bool {
    token_words(a) == token_words(b)
}

fn market_state(m: Market) -> MarketState {
    MarketState {
        halted: m.halted,
        closed: m.closed,
        blocked: m.blocked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_token_is_token_equality_at_every_byte() {
        let base = Token::from_str_padded("ABCDEFGHIJKLMN").expect("14 bytes");
        assert!(same_token(&base, &base));
        for at in 0..14 {
            let mut other = base;
            other.0[at] ^= 0x20;
            assert!(!same_token(&base, &other), "byte {at}");
            assert!(!same_token(&other, &base), "byte {at}");
        }
    }
}
