//! A shard: the books of its symbols and every outcome that depends on them — matching,
//! cancels, the four replace outcomes, post-only / IOC / minimum-quantity deadness, capacity,
//! expiry and end-of-day cancels. It mirrors `exchange::machine` step for step, but reports
//! [`ShardEvent`]s naming orders by pool slot instead of formatting messages: order reference
//! and match numbers are global, so the merge assigns them.

use super::msg::{Market, ReplaceFeed, ShardCmd, ShardEvent, Verdict, shard_of};
use crate::book::{BookConfig, OrderBook, OrderHandle, Removal};
use crate::exchange::validate::{self, MarketState, ReplaceFault};
use crate::exchange::venue::{SymbolSpec, Venue, VenueError};
use crate::types::{AccountId, Price, Side, Timestamp, Token};
use crate::wire::ouch::{self, cancel_reason, reject_reason as why};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

/// Where a shard's results go.
pub trait ShardOut {
    fn event(&mut self, event: ShardEvent);
    fn verdict(&mut self, verdict: Verdict);
}

/// What a shard keeps with every resting order (no reference number: the merge has it).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Resting {
    token: Token,
    account: u16,
    chain_executed: u32,
    side_letter: u8,
    display: u8,
    capacity: u8,
}

impl Resting {
    fn displayed(&self) -> bool {
        self.display != b'N'
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    account: AccountId,
    symbol: u16,
    side: Side,
    price: Price,
    shares: u32,
    tif: u32,
    min_qty: u32,
    resting: Resting,
}

pub struct Shard {
    index: usize,
    specs: Vec<SymbolSpec>,
    /// Books of this shard's symbols, indexed by global symbol index (None: another shard's).
    books: Vec<Option<OrderBook<Resting>>>,
    /// This shard's symbols in config order.
    symbols: Vec<u16>,
    /// Live orders by (account, token).
    live: HashMap<(u16, Token), (u16, OrderHandle), BuildHasherDefault<DefaultHasher>>,
}

impl Shard {
    pub fn new(venue: &Venue, index: usize, shards: usize) -> Result<Shard, VenueError> {
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
        let live_capacity = (limits.orders_per_symbol as usize).saturating_mul(symbols.len());
        Ok(Shard {
            index,
            specs,
            books,
            live: HashMap::with_capacity_and_hasher(live_capacity, Default::default()),
            symbols,
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

    fn book(&self, symbol: u16) -> &OrderBook<Resting> {
        self.books[symbol as usize]
            .as_ref()
            .expect("symbol routed to its shard")
    }

    fn book_mut(&mut self, symbol: u16) -> &mut OrderBook<Resting> {
        self.books[symbol as usize]
            .as_mut()
            .expect("symbol routed to its shard")
    }

    /// Handle one command; returns false for `Stop`.
    pub fn apply<O: ShardOut>(&mut self, cmd: &ShardCmd, out: &mut O) -> bool {
        match *cmd {
            ShardCmd::Enter {
                ts,
                account,
                symbol,
                side,
                order,
                ..
            } => self.enter(ts, account, symbol, side, &order, out),
            ShardCmd::Cancel {
                account,
                symbol,
                token,
                shares,
                ..
            } => self.cancel(account, symbol, token, shares, out),
            ShardCmd::Replace {
                seq,
                ts,
                account,
                symbol,
                order,
                market,
                tokens_full,
            } => {
                let consumed = self.replace(ts, account, symbol, &order, market, tokens_full, out);
                if !tokens_full {
                    out.verdict(Verdict { seq, consumed });
                }
            }
            ShardCmd::Tick { ts, .. } => self.expire(ts, out),
            ShardCmd::EndOfDay { .. } => self.end_of_day(out),
            ShardCmd::Snapshot { .. } => self.snapshot(out),
            ShardCmd::Stop => return false,
        }
        out.event(ShardEvent::Done);
        true
    }

    // ---- order entry -------------------------------------------------------------------

    fn enter<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        side: Side,
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
            resting: Resting {
                token: o.token,
                account: account.0,
                chain_executed: 0,
                side_letter: o.side,
                display: o.display,
                capacity: validate::normalize_capacity(o.capacity),
            },
        };
        let dead = self.dead_on_arrival(&entry);
        if !dead && self.would_not_fit(&entry, None) {
            out.event(ShardEvent::Rejected { reason: why::OTHER });
            return;
        }
        out.event(ShardEvent::Accepted { dead });
        if !dead {
            self.execute_and_rest(ts, entry, out);
        }
    }

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
    fn would_not_fit(&self, e: &Entry, replacing: Option<OrderHandle>) -> bool {
        validate::would_not_fit(self.book(e.symbol), &Self::arrival(e), replacing)
    }

    /// Accepted with state `D`: see [`validate::dead_on_arrival`].
    fn dead_on_arrival(&self, e: &Entry) -> bool {
        validate::dead_on_arrival(self.book(e.symbol), &Self::arrival(e))
    }

    fn execute_and_rest<O: ShardOut>(&mut self, ts: Timestamp, mut e: Entry, out: &mut O) {
        let executed = self.execute(&e, out);
        e.resting.chain_executed += executed;
        let remaining = e.shares - executed;
        if remaining == 0 {
            return;
        }
        if e.tif == validate::TIF_IOC {
            out.event(ShardEvent::IocRemainder { shares: remaining });
            return;
        }
        let handle = self.insert(ts, &e, remaining);
        out.event(ShardEvent::Rested {
            slot: handle.0,
            side: e.side,
            shares: remaining,
        });
    }

    fn insert(&mut self, ts: Timestamp, e: &Entry, shares: u32) -> OrderHandle {
        let deadline_ms = validate::deadline_ms(ts.0, e.tif);
        let hidden = !e.resting.displayed();
        let book = self.book_mut(e.symbol);
        let handle = book.insert(e.side, e.price, shares, hidden, deadline_ms, e.resting);
        self.live
            .insert((e.account.0, e.resting.token), (e.symbol, handle));
        handle
    }

    fn execute<O: ShardOut>(&mut self, e: &Entry, out: &mut O) -> u32 {
        let Shard { books, live, .. } = self;
        let book = books[e.symbol as usize]
            .as_mut()
            .expect("symbol routed to its shard");
        let remaining = book.execute(e.side, e.price, e.shares, |fill, maker| {
            maker.chain_executed += fill.shares;
            out.event(ShardEvent::Executed {
                maker_slot: fill.maker.0,
                maker_account: maker.account,
                maker_token: maker.token,
                shares: fill.shares,
                price: fill.price,
                maker_hidden: fill.maker_hidden,
            });
            if fill.maker_leaves == 0 {
                live.remove(&(maker.account, maker.token));
            }
        });
        e.shares - remaining
    }

    // ---- cancel ------------------------------------------------------------------------

    fn cancel<O: ShardOut>(
        &mut self,
        account: AccountId,
        symbol: u16,
        token: Token,
        intended: u32,
        out: &mut O,
    ) {
        let Some(&(at, handle)) = self.live.get(&(account.0, token)) else {
            return;
        };
        debug_assert_eq!(at, symbol, "a token routes to its order's symbol");
        let book = self.book_mut(symbol);
        let before = book.get(handle);
        let (displayed, leaves) = (before.payload.displayed(), before.leaves);
        let decrement = book.reduce_to(handle, intended);
        if decrement == 0 {
            return;
        }
        let gone = decrement == leaves;
        if gone {
            self.live.remove(&(account.0, token));
        }
        out.event(ShardEvent::Canceled {
            symbol,
            slot: handle.0,
            account: account.0,
            token,
            decrement,
            reason: cancel_reason::USER,
            displayed,
            gone,
        });
    }

    /// An order left its book for a reason other than its owner's cancel.
    fn removed<O: ShardOut>(&mut self, symbol: u16, r: &Removal<Resting>, reason: u8, out: &mut O) {
        self.live.remove(&(r.payload.account, r.payload.token));
        out.event(ShardEvent::Canceled {
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
    #[allow(clippy::too_many_arguments)]
    fn replace<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        u: &ouch::ReplaceOrder,
        market: Market,
        tokens_full: bool,
        out: &mut O,
    ) -> bool {
        let Some(&(at, handle)) = self.live.get(&(account.0, u.existing)) else {
            return false; // outcome 1: not live, ignored
        };
        debug_assert_eq!(at, symbol, "a token routes to its order's symbol");
        let market = MarketState {
            halted: market.halted,
            closed: market.closed,
        };
        match validate::check_replace(u, &self.specs[symbol as usize], market) {
            Err(ReplaceFault::Invalid) => {
                let removal = self.book_mut(symbol).remove(handle);
                self.removed(symbol, &removal, cancel_reason::USER, out);
                return false;
            }
            Err(ReplaceFault::Rejected(reason)) => {
                out.event(ShardEvent::Rejected { reason });
                return !tokens_full;
            }
            Ok(()) => {}
        }
        let old = self.book(symbol).get(handle);
        let probe = Entry {
            account,
            symbol,
            side: old.side,
            price: u.price,
            shares: u.shares.0.saturating_sub(old.payload.chain_executed),
            tif: u.tif,
            min_qty: u.min_qty.0,
            resting: Resting {
                display: u.display,
                ..*old.payload
            },
        };
        if !self.dead_on_arrival(&probe) && self.would_not_fit(&probe, Some(handle)) {
            out.event(ShardEvent::Rejected { reason: why::OTHER });
            return !tokens_full;
        }
        if tokens_full {
            out.event(ShardEvent::Rejected { reason: why::OTHER });
            return false;
        }
        let old = self.book_mut(symbol).remove(handle);
        self.live.remove(&(account.0, u.existing));
        self.enter_replacement(ts, account, symbol, &old, u, out);
        true
    }

    fn enter_replacement<O: ShardOut>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        old: &Removal<Resting>,
        u: &ouch::ReplaceOrder,
        out: &mut O,
    ) {
        let exposure = u.shares.0.saturating_sub(old.payload.chain_executed);
        let entry = Entry {
            account,
            symbol,
            side: old.side,
            price: u.price,
            shares: exposure,
            tif: u.tif,
            min_qty: u.min_qty.0,
            resting: Resting {
                token: u.replacement,
                display: u.display,
                ..old.payload
            },
        };
        let dead = self.dead_on_arrival(&entry);
        let replaced = |feed| ShardEvent::Replaced {
            old_slot: old.handle.0,
            old_token: old.payload.token,
            side_letter: old.payload.side_letter,
            capacity: old.payload.capacity,
            exposure,
            dead,
            feed,
        };
        if self.publish_as_itch_replace(old, &entry, dead) {
            let handle = self.insert(ts, &entry, exposure);
            out.event(replaced(ReplaceFeed::Replace { new_slot: handle.0 }));
            return;
        }
        let feed = if old.payload.displayed() {
            ReplaceFeed::DeleteOld
        } else {
            ReplaceFeed::Nothing
        };
        out.event(replaced(feed));
        if !dead {
            self.execute_and_rest(ts, entry, out);
        }
    }

    fn publish_as_itch_replace(&self, old: &Removal<Resting>, new: &Entry, dead: bool) -> bool {
        let attributed = |d: u8| d == b'A';
        !dead
            && old.payload.displayed()
            && new.resting.displayed()
            && attributed(old.payload.display) == attributed(new.resting.display)
            && new.tif != validate::TIF_IOC
            && !self.book(new.symbol).crosses(new.side, new.price)
    }

    // ---- time, day boundaries, snapshots -----------------------------------------------

    fn expire<O: ShardOut>(&mut self, ts: Timestamp, out: &mut O) {
        let now_ms = u32::try_from(ts.0 / 1_000_000).unwrap_or(u32::MAX);
        for i in 0..self.symbols.len() {
            let symbol = self.symbols[i];
            let limit = self.book(symbol).order_capacity();
            for _ in 0..limit {
                let Some(removal) = self.book_mut(symbol).expire_next(now_ms) else {
                    break;
                };
                self.removed(symbol, &removal, cancel_reason::TIME_IN_FORCE, out);
            }
            out.event(ShardEvent::SymbolDone);
        }
    }

    fn end_of_day<O: ShardOut>(&mut self, out: &mut O) {
        for i in 0..self.symbols.len() {
            let symbol = self.symbols[i];
            for side in [Side::Buy, Side::Sell] {
                let limit = self.book(symbol).order_capacity();
                for _ in 0..limit {
                    let Some(handle) = self.book(symbol).first_in_priority(side) else {
                        break;
                    };
                    let removal = self.book_mut(symbol).remove(handle);
                    self.removed(symbol, &removal, cancel_reason::CLOSED, out);
                }
            }
            out.event(ShardEvent::SymbolDone);
        }
    }

    fn snapshot<O: ShardOut>(&self, out: &mut O) {
        for &symbol in &self.symbols {
            for side in [Side::Buy, Side::Sell] {
                self.book(symbol).for_each_order(side, |o| {
                    if o.hidden {
                        return;
                    }
                    out.event(ShardEvent::Resting {
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
            out.event(ShardEvent::SymbolDone);
        }
    }
}
