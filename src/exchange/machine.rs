//! The exchange state machine: `apply(input) -> outputs`, single-threaded and pure.
//!
//! It owns every book, every account's token table and the day's counters (order reference
//! and match numbers, gapless from 1). All outputs carry the input's timestamp.

use super::input::{Admin, Command, Input, Outcome};
use super::messages;
use super::sink::Sink;
use super::tokens::{TokenState, TokenTable};
use super::validate::{self, MarketState, ReplaceFault};
use super::venue::{SymbolSpec, Venue, VenueError};
use crate::book::{BookConfig, OrderBook, OrderHandle, Removal};
use crate::types::{AccountId, Firm, MatchNumber, OrderRef, Price, Shares, Side, Timestamp, Token};
use crate::wire::itch;
use crate::wire::ouch::{self, Inbound, cancel_reason, liquidity, order_state};

/// What the exchange keeps with every resting order (the book's payload).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Resting {
    pub order_ref: u64,
    /// The order's slot in its account's token table (the token itself lives there).
    pub token_slot: u32,
    pub account: u16,
    /// Shares executed by the whole replace chain so far.
    pub chain_executed: u32,
    /// The entered Buy/Sell Indicator letter (`B`, `S`, `T`, `E`), echoed on Replaced.
    pub side_letter: u8,
    pub display: u8,
    pub capacity: u8,
}

impl Resting {
    fn displayed(&self) -> bool {
        self.display != b'N'
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Before the start-of-day input.
    PreOpen,
    Open,
    /// After end of day: new orders are rejected `C`.
    Closed,
}

/// Everything needed to enter one order (from an Enter, or from a Replace's chain).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub account: AccountId,
    pub symbol: u16,
    pub side: Side,
    pub price: Price,
    /// Shares this order may still execute (exposure).
    pub shares: u32,
    pub tif: u32,
    pub min_qty: u32,
    /// The order's token (for outputs; the book keeps only the slot).
    pub token: Token,
    pub resting: Resting,
}

pub struct Exchange {
    pub(crate) venue: Venue,
    pub(crate) specs: Vec<SymbolSpec>,
    pub(crate) firms: Vec<Firm>,
    pub(crate) books: Vec<OrderBook<Resting>>,
    pub(crate) halted: Vec<bool>,
    pub(crate) tokens: Vec<TokenTable>,
    pub(crate) phase: Phase,
    pub(crate) next_order_ref: u64,
    pub(crate) next_match: u64,
    pub(crate) last_seq: u64,
}

impl Exchange {
    /// Build every book and table at their configured sizes; nothing is allocated later.
    pub fn new(venue: Venue) -> Result<Exchange, VenueError> {
        let specs = venue.specs()?;
        let limits = venue.limits;
        let book_config = BookConfig {
            order_capacity: limits.orders_per_symbol,
            level_capacity: limits.levels_per_side,
        };
        let firms = (0..venue.accounts.len())
            .map(|a| venue.firm(AccountId(a as u16)))
            .collect();
        Ok(Exchange {
            books: specs.iter().map(|_| OrderBook::new(book_config)).collect(),
            halted: vec![false; specs.len()],
            tokens: venue
                .accounts
                .iter()
                .map(|_| TokenTable::new(limits.tokens_per_account))
                .collect(),
            firms,
            specs,
            venue,
            phase: Phase::PreOpen,
            next_order_ref: 1,
            next_match: 1,
            last_seq: 0,
        })
    }

    pub fn venue(&self) -> &Venue {
        &self.venue
    }

    /// Sequence number of the last input applied (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Order reference numbers handed out so far.
    pub fn order_refs_used(&self) -> u64 {
        self.next_order_ref - 1
    }

    /// Match numbers handed out so far.
    pub fn matches_used(&self) -> u64 {
        self.next_match - 1
    }

    pub fn resting_orders(&self) -> u64 {
        self.books.iter().map(|b| u64::from(b.order_count())).sum()
    }

    /// Bytes held by books and token tables (all allocated at construction).
    pub fn allocated_bytes(&self) -> (usize, usize) {
        let books = self.books.iter().map(|b| b.allocated_bytes()).sum();
        let tokens = self.tokens.iter().map(|t| t.allocated_bytes()).sum();
        (books, tokens)
    }

    /// Apply one sequenced input, sending its outputs to `sink` in order.
    pub fn apply<S: Sink>(&mut self, input: &Input, sink: &mut S) -> Outcome {
        assert!(
            input.seq > self.last_seq,
            "inputs must arrive in sequence order"
        );
        self.last_seq = input.seq;
        let ts = input.timestamp;
        match input.command {
            Command::StartOfDay => self.start_of_day(ts, sink),
            Command::Ouch { account, message } => {
                if account.0 as usize >= self.tokens.len() {
                    return Outcome::Ignored("unknown account");
                }
                match message {
                    Inbound::Enter(o) => self.enter(ts, account, &o, sink),
                    Inbound::Cancel(x) => self.cancel(ts, account, x.token, x.shares.0, sink),
                    Inbound::Replace(u) => self.replace(ts, account, &u, sink),
                    Inbound::Modify(_) => Outcome::Ignored("modify is not offered"),
                }
            }
            Command::Admin(admin) => self.admin(ts, admin, sink),
            Command::Tick => self.expire(ts, sink),
        }
    }

    // ---- order entry -------------------------------------------------------------------

    fn enter<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        o: &ouch::EnterOrder,
        sink: &mut S,
    ) -> Outcome {
        let table = &self.tokens[account.0 as usize];
        if table.get(&o.token).is_some() {
            return Outcome::Ignored("token already used");
        }
        if table.is_full() {
            // Cannot record the token, so cannot promise dedupe: reject without recording.
            self.reject(ts, account, o.token, ouch::reject_reason::OTHER, sink);
            return Outcome::Applied;
        }
        let checked = self.check_enter(account, o);
        let (side, symbol) = match checked {
            Ok(x) => x,
            Err(reason) => {
                self.tokens[account.0 as usize].insert(o.token, TokenState::Dead);
                self.reject(ts, account, o.token, reason, sink);
                return Outcome::Applied;
            }
        };
        let entry = Entry {
            account,
            symbol,
            side,
            price: o.price,
            shares: o.shares.0,
            tif: o.tif,
            min_qty: o.min_qty.0,
            token: o.token,
            resting: Resting {
                order_ref: 0,
                token_slot: 0,
                account: account.0,
                chain_executed: 0,
                side_letter: o.side,
                display: o.display,
                capacity: validate::normalize_capacity(o.capacity),
            },
        };
        let dead = self.dead_on_arrival(&entry);
        if !dead && self.would_not_fit(&entry, None) {
            self.tokens[account.0 as usize].insert(o.token, TokenState::Dead);
            self.reject(ts, account, o.token, ouch::reject_reason::OTHER, sink);
            return Outcome::Applied;
        }
        let token_slot = self.tokens[account.0 as usize].insert(o.token, TokenState::Dead);
        let order_ref = self.take_order_ref();
        let accepted = ouch::Accepted {
            timestamp: ts,
            token: o.token,
            side: o.side,
            shares: o.shares,
            stock: o.stock,
            price: o.price,
            tif: o.tif,
            firm: self.firms[account.0 as usize],
            display: o.display,
            order_ref: OrderRef(order_ref),
            capacity: entry.resting.capacity,
            intermarket_sweep: validate::normalize_sweep(o.intermarket_sweep),
            min_qty: o.min_qty,
            cross_type: o.cross_type,
            order_state: if dead {
                order_state::DEAD
            } else {
                order_state::LIVE
            },
            bbo_weight: b' ',
        };
        sink.ouch(account, &ouch::Outbound::Accepted(accepted));
        if !dead {
            let entry = Entry {
                resting: Resting {
                    order_ref,
                    token_slot,
                    ..entry.resting
                },
                ..entry
            };
            self.execute_and_rest(ts, entry, sink);
        }
        Outcome::Applied
    }

    /// Side and symbol index of a valid Enter Order, or its reject code.
    fn check_enter(&self, account: AccountId, o: &ouch::EnterOrder) -> Result<(Side, u16), u8> {
        let side = Side::from_ouch(o.side).ok_or(ouch::reject_reason::OTHER)?;
        let symbol = self.find_symbol(o).ok_or(ouch::reject_reason::STOCK)?;
        let market = self.market_state(symbol);
        let firm = self.firms[account.0 as usize];
        validate::check_enter(o, side, &self.specs[symbol as usize], market, firm)?;
        Ok((side, symbol))
    }

    fn find_symbol(&self, o: &ouch::EnterOrder) -> Option<u16> {
        self.specs
            .iter()
            .position(|s| s.symbol == o.stock)
            .map(|i| i as u16)
    }

    fn market_state(&self, symbol: u16) -> MarketState {
        MarketState {
            halted: self.halted[symbol as usize],
            closed: self.phase != Phase::Open,
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
        validate::would_not_fit(&self.books[e.symbol as usize], &Self::arrival(e), replacing)
    }

    /// Accepted with state `D`: see [`validate::dead_on_arrival`].
    fn dead_on_arrival(&self, e: &Entry) -> bool {
        validate::dead_on_arrival(&self.books[e.symbol as usize], &Self::arrival(e))
    }

    /// Execute a live order against the book, then cancel an IOC remainder or rest the rest.
    fn execute_and_rest<S: Sink>(&mut self, ts: Timestamp, mut e: Entry, sink: &mut S) {
        let executed = self.execute(ts, &e, sink);
        e.resting.chain_executed += executed;
        let remaining = e.shares - executed;
        if remaining == 0 {
            return;
        }
        if e.tif == validate::TIF_IOC {
            let canceled = ouch::Canceled {
                timestamp: ts,
                token: e.token,
                decrement: Shares(remaining),
                reason: cancel_reason::IMMEDIATE_OR_CANCEL,
            };
            sink.ouch(e.account, &ouch::Outbound::Canceled(canceled));
            return;
        }
        self.rest(ts, &e, remaining, sink);
    }

    fn rest<S: Sink>(&mut self, ts: Timestamp, e: &Entry, shares: u32, sink: &mut S) {
        let deadline_ms = validate::deadline_ms(ts.0, e.tif);
        let book = &mut self.books[e.symbol as usize];
        let hidden = !e.resting.displayed();
        let handle = book.insert(e.side, e.price, shares, hidden, deadline_ms, e.resting);
        let live = TokenState::Live {
            symbol: e.symbol,
            handle,
        };
        self.tokens[e.account.0 as usize].set(e.resting.token_slot, live);
        if hidden {
            return;
        }
        let order_ref = OrderRef(e.resting.order_ref);
        let stock = self.specs[e.symbol as usize].symbol;
        let (side, shares) = (e.side.itch_byte(), Shares(shares));
        let body = if e.resting.display == b'A' {
            let attribution = self.firms[e.account.0 as usize];
            itch::Body::AddOrderMpid {
                order_ref,
                side,
                shares,
                stock,
                price: e.price,
                attribution,
            }
        } else {
            itch::Body::AddOrder {
                order_ref,
                side,
                shares,
                stock,
                price: e.price,
            }
        };
        sink.itch(&self.itch_message(e.symbol, ts, body));
    }

    /// Match the taker; report each fill (taker first, then maker; ITCH `E` or `P`).
    fn execute<S: Sink>(&mut self, ts: Timestamp, e: &Entry, sink: &mut S) -> u32 {
        let Exchange {
            books,
            tokens,
            next_match,
            specs,
            ..
        } = self;
        let stock = specs[e.symbol as usize].symbol;
        let locate = e.symbol + 1;
        let taker_token = e.token;
        let remaining =
            books[e.symbol as usize].execute(e.side, e.price, e.shares, |fill, maker| {
                let match_number = MatchNumber(*next_match);
                *next_match += 1;
                maker.chain_executed += fill.shares;
                let executed = |token, flag| ouch::Executed {
                    timestamp: ts,
                    token,
                    shares: Shares(fill.shares),
                    price: fill.price,
                    liquidity: flag,
                    match_number,
                };
                let taker_msg = executed(taker_token, liquidity::REMOVED);
                sink.ouch(e.account, &ouch::Outbound::Executed(taker_msg));
                let maker_flag = if fill.maker_hidden {
                    liquidity::HIDDEN_ADDED
                } else {
                    liquidity::ADDED
                };
                let maker_table = &mut tokens[maker.account as usize];
                let maker_msg = executed(maker_table.token(maker.token_slot), maker_flag);
                sink.ouch(
                    AccountId(maker.account),
                    &ouch::Outbound::Executed(maker_msg),
                );
                let body = if fill.maker_hidden {
                    itch::Body::Trade {
                        order_ref: OrderRef(0),
                        side: b'B',
                        shares: Shares(fill.shares),
                        stock,
                        price: fill.price,
                        match_number,
                    }
                } else {
                    let order_ref = OrderRef(maker.order_ref);
                    itch::Body::OrderExecuted {
                        order_ref,
                        shares: Shares(fill.shares),
                        match_number,
                    }
                };
                let header = itch::Header {
                    locate,
                    tracking: 0,
                    timestamp: ts,
                };
                sink.itch(&itch::Message { header, body });
                if fill.maker_leaves == 0 {
                    maker_table.set(maker.token_slot, TokenState::Dead);
                }
            });
        e.shares - remaining
    }

    // ---- cancel ------------------------------------------------------------------------

    fn cancel<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        token: Token,
        intended: u32,
        sink: &mut S,
    ) -> Outcome {
        let Some((slot, TokenState::Live { symbol, handle })) =
            self.tokens[account.0 as usize].get(&token)
        else {
            return Outcome::Ignored("cancel of an unknown or dead token");
        };
        let book = &mut self.books[symbol as usize];
        let before = book.get(handle);
        let (order_ref, displayed, leaves) = (
            before.payload.order_ref,
            before.payload.displayed(),
            before.leaves,
        );
        let decrement = book.reduce_to(handle, intended);
        if decrement == 0 {
            return Outcome::Ignored("cancel reduces nothing");
        }
        let gone = decrement == leaves;
        let canceled = ouch::Canceled {
            timestamp: ts,
            token,
            decrement: Shares(decrement),
            reason: cancel_reason::USER,
        };
        sink.ouch(account, &ouch::Outbound::Canceled(canceled));
        if gone {
            self.tokens[account.0 as usize].set(slot, TokenState::Dead);
        }
        if displayed {
            let order_ref = OrderRef(order_ref);
            let body = if gone {
                itch::Body::OrderDelete { order_ref }
            } else {
                itch::Body::OrderCancel {
                    order_ref,
                    shares: Shares(decrement),
                }
            };
            sink.itch(&self.itch_message(symbol, ts, body));
        }
        Outcome::Applied
    }

    /// Take an order off its book for a reason other than the owner's request, telling the
    /// owner (OUCH `C` with `reason`) and the feed (ITCH `D` if displayed).
    fn cancel_removed<S: Sink>(
        &mut self,
        ts: Timestamp,
        symbol: u16,
        r: &Removal<Resting>,
        reason: u8,
        sink: &mut S,
    ) {
        let owner = AccountId(r.payload.account);
        let table = &mut self.tokens[owner.0 as usize];
        table.set(r.payload.token_slot, TokenState::Dead);
        let canceled = ouch::Canceled {
            timestamp: ts,
            token: table.token(r.payload.token_slot),
            decrement: Shares(r.leaves),
            reason,
        };
        sink.ouch(owner, &ouch::Outbound::Canceled(canceled));
        if r.payload.displayed() {
            let body = itch::Body::OrderDelete {
                order_ref: OrderRef(r.payload.order_ref),
            };
            sink.itch(&self.itch_message(symbol, ts, body));
        }
    }

    // ---- replace -----------------------------------------------------------------------

    fn replace<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        u: &ouch::ReplaceOrder,
        sink: &mut S,
    ) -> Outcome {
        let table = &self.tokens[account.0 as usize];
        let Some((existing_slot, TokenState::Live { symbol, handle })) = table.get(&u.existing)
        else {
            return Outcome::Ignored("replace of an order that is not live");
        };
        if table.get(&u.replacement).is_some() {
            return Outcome::Ignored("replacement token already used");
        }
        let market = self.market_state(symbol);
        match validate::check_replace(u, &self.specs[symbol as usize], market) {
            Err(ReplaceFault::Invalid) => {
                let removal = self.books[symbol as usize].remove(handle);
                self.cancel_removed(ts, symbol, &removal, cancel_reason::USER, sink);
                return Outcome::Applied;
            }
            Err(ReplaceFault::Rejected(reason)) => {
                return self.reject_replacement(ts, account, u.replacement, reason, sink);
            }
            Ok(()) => {}
        }
        let old = self.books[symbol as usize].get(handle);
        let probe = Entry {
            account,
            symbol,
            side: old.side,
            price: u.price,
            shares: u.shares.0.saturating_sub(old.payload.chain_executed),
            tif: u.tif,
            min_qty: u.min_qty.0,
            token: u.replacement,
            resting: Resting {
                display: u.display,
                ..*old.payload
            },
        };
        if !self.dead_on_arrival(&probe) && self.would_not_fit(&probe, Some(handle)) {
            let reason = ouch::reject_reason::OTHER;
            return self.reject_replacement(ts, account, u.replacement, reason, sink);
        }
        if self.tokens[account.0 as usize].is_full() {
            return self.reject_replacement(
                ts,
                account,
                u.replacement,
                ouch::reject_reason::OTHER,
                sink,
            );
        }
        let old = self.books[symbol as usize].remove(handle);
        let table = &mut self.tokens[account.0 as usize];
        table.set(existing_slot, TokenState::Dead);
        let slot = table.insert(u.replacement, TokenState::Dead);
        self.enter_replacement(ts, symbol, &old, u, slot, sink);
        Outcome::Applied
    }

    fn reject_replacement<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        token: Token,
        reason: u8,
        sink: &mut S,
    ) -> Outcome {
        let table = &mut self.tokens[account.0 as usize];
        if !table.is_full() {
            table.insert(token, TokenState::Dead);
        }
        self.reject(ts, account, token, reason, sink);
        Outcome::Applied
    }

    /// Outcome 4: the old order is off the book; enter the replacement with new priority.
    fn enter_replacement<S: Sink>(
        &mut self,
        ts: Timestamp,
        symbol: u16,
        old: &Removal<Resting>,
        u: &ouch::ReplaceOrder,
        token_slot: u32,
        sink: &mut S,
    ) {
        let account = AccountId(old.payload.account);
        let executed = old.payload.chain_executed;
        let exposure = u.shares.0.saturating_sub(executed);
        let order_ref = self.take_order_ref();
        let entry = Entry {
            account,
            symbol,
            side: old.side,
            price: u.price,
            shares: exposure,
            tif: u.tif,
            min_qty: u.min_qty.0,
            token: u.replacement,
            resting: Resting {
                order_ref,
                token_slot,
                display: u.display,
                ..old.payload
            },
        };
        let dead = self.dead_on_arrival(&entry);
        let replaced = ouch::Replaced {
            timestamp: ts,
            token: u.replacement,
            side: old.payload.side_letter,
            shares: Shares(exposure),
            stock: self.specs[symbol as usize].symbol,
            price: u.price,
            tif: u.tif,
            firm: self.firms[account.0 as usize],
            display: u.display,
            order_ref: OrderRef(order_ref),
            capacity: old.payload.capacity,
            intermarket_sweep: validate::normalize_sweep(u.intermarket_sweep),
            min_qty: u.min_qty,
            cross_type: b'N',
            order_state: if dead {
                order_state::DEAD
            } else {
                order_state::LIVE
            },
            previous_token: self.tokens[account.0 as usize].token(old.payload.token_slot),
            bbo_weight: b' ',
        };
        sink.ouch(account, &ouch::Outbound::Replaced(replaced));
        if self.publish_as_itch_replace(old, &entry, dead) {
            let body = itch::Body::OrderReplace {
                old_ref: OrderRef(old.payload.order_ref),
                new_ref: OrderRef(order_ref),
                shares: Shares(exposure),
                price: u.price,
            };
            sink.itch(&self.itch_message(symbol, ts, body));
            self.rest_quietly(ts, &entry, exposure);
            return;
        }
        if old.payload.displayed() {
            let body = itch::Body::OrderDelete {
                order_ref: OrderRef(old.payload.order_ref),
            };
            sink.itch(&self.itch_message(symbol, ts, body));
        }
        if !dead {
            self.execute_and_rest(ts, entry, sink);
        }
    }

    /// ITCH `U` only when old and new are displayed with the same attribution and the
    /// replacement rests without executing (DESIGN.md 4).
    fn publish_as_itch_replace(&self, old: &Removal<Resting>, new: &Entry, dead: bool) -> bool {
        let attributed = |d: u8| d == b'A';
        !dead
            && old.payload.displayed()
            && new.resting.displayed()
            && attributed(old.payload.display) == attributed(new.resting.display)
            && new.tif != validate::TIF_IOC
            && !self.books[new.symbol as usize].crosses(new.side, new.price)
    }

    /// Rest a replacement whose ITCH `U` has already been published.
    fn rest_quietly(&mut self, ts: Timestamp, e: &Entry, shares: u32) {
        let deadline_ms = validate::deadline_ms(ts.0, e.tif);
        let book = &mut self.books[e.symbol as usize];
        let handle = book.insert(e.side, e.price, shares, false, deadline_ms, e.resting);
        let live = TokenState::Live {
            symbol: e.symbol,
            handle,
        };
        self.tokens[e.account.0 as usize].set(e.resting.token_slot, live);
    }

    // ---- time, admin, day boundaries ---------------------------------------------------

    /// Expire every order whose time in force has run out by `ts` (Canceled reason `T`),
    /// symbol by symbol in config order, each in deadline order.
    fn expire<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) -> Outcome {
        let now_ms = u32::try_from(ts.0 / 1_000_000).unwrap_or(u32::MAX);
        for symbol in 0..self.books.len() as u16 {
            let limit = self.books[symbol as usize].order_capacity();
            for _ in 0..limit {
                let Some(removal) = self.books[symbol as usize].expire_next(now_ms) else {
                    break;
                };
                self.cancel_removed(ts, symbol, &removal, cancel_reason::TIME_IN_FORCE, sink);
            }
        }
        Outcome::Applied
    }

    fn admin<S: Sink>(&mut self, ts: Timestamp, admin: Admin, sink: &mut S) -> Outcome {
        if self.phase != Phase::Open {
            return Outcome::AdminRefused("market is not open");
        }
        match admin {
            Admin::Halt(locate) | Admin::Resume(locate) => {
                let halt = matches!(admin, Admin::Halt(_));
                let Some(symbol) = locate
                    .0
                    .checked_sub(1)
                    .filter(|&s| (s as usize) < self.specs.len())
                else {
                    return Outcome::AdminRefused("unknown symbol");
                };
                if self.halted[symbol as usize] == halt {
                    return Outcome::AdminRefused(if halt {
                        "already halted"
                    } else {
                        "not halted"
                    });
                }
                self.halted[symbol as usize] = halt;
                let state = if halt {
                    itch::trading_state::HALTED
                } else {
                    itch::trading_state::TRADING
                };
                sink.itch(&self.trading_action(symbol, ts, state));
                Outcome::Applied
            }
            Admin::EndOfDay => {
                self.end_of_day(ts, sink);
                Outcome::Applied
            }
        }
    }

    fn start_of_day<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) -> Outcome {
        if self.phase != Phase::PreOpen {
            return Outcome::Ignored("the day has already started");
        }
        self.phase = Phase::Open;
        sink.itch(&self.system_event(ts, itch::event::START_OF_MESSAGES));
        for symbol in 0..self.specs.len() as u16 {
            sink.itch(&self.stock_directory(symbol, ts));
        }
        for symbol in 0..self.specs.len() as u16 {
            sink.itch(&self.trading_action(symbol, ts, itch::trading_state::TRADING));
        }
        sink.itch(&self.system_event(ts, itch::event::START_OF_SYSTEM_HOURS));
        sink.itch(&self.system_event(ts, itch::event::START_OF_MARKET_HOURS));
        self.ouch_event_to_all(ts, ouch::event::START_OF_DAY, sink);
        Outcome::Applied
    }

    /// Cancel every resting order (reason `E`) symbol by symbol, bids then asks, in priority
    /// order; then System Event `E` to every account and the closing ITCH events.
    fn end_of_day<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) {
        for symbol in 0..self.books.len() as u16 {
            for side in [Side::Buy, Side::Sell] {
                let limit = self.books[symbol as usize].order_capacity();
                for _ in 0..limit {
                    let Some(handle) = self.books[symbol as usize].first_in_priority(side) else {
                        break;
                    };
                    let removal = self.books[symbol as usize].remove(handle);
                    self.cancel_removed(ts, symbol, &removal, cancel_reason::CLOSED, sink);
                }
            }
        }
        self.phase = Phase::Closed;
        self.ouch_event_to_all(ts, ouch::event::END_OF_DAY, sink);
        for event in [
            itch::event::END_OF_MARKET_HOURS,
            itch::event::END_OF_SYSTEM_HOURS,
            itch::event::END_OF_MESSAGES,
        ] {
            sink.itch(&self.system_event(ts, event));
        }
    }

    // ---- helpers -----------------------------------------------------------------------

    fn take_order_ref(&mut self) -> u64 {
        let order_ref = self.next_order_ref;
        self.next_order_ref += 1;
        order_ref
    }

    fn reject<S: Sink>(
        &self,
        ts: Timestamp,
        account: AccountId,
        token: Token,
        reason: u8,
        sink: &mut S,
    ) {
        messages::reject(ts, account, token, reason, sink);
    }

    fn ouch_event_to_all<S: Sink>(&self, ts: Timestamp, event: u8, sink: &mut S) {
        for account in 0..self.tokens.len() as u16 {
            let message = ouch::Outbound::SystemEvent(ouch::SystemEvent {
                timestamp: ts,
                event,
            });
            sink.ouch(AccountId(account), &message);
        }
    }

    pub(crate) fn itch_message(
        &self,
        symbol: u16,
        ts: Timestamp,
        body: itch::Body,
    ) -> itch::Message {
        messages::itch_message(symbol, ts, body)
    }

    fn system_event(&self, ts: Timestamp, event: u8) -> itch::Message {
        messages::system_event(ts, event)
    }

    pub(crate) fn stock_directory(&self, symbol: u16, ts: Timestamp) -> itch::Message {
        messages::stock_directory(&self.specs[symbol as usize], symbol, ts)
    }

    pub(crate) fn trading_action(&self, symbol: u16, ts: Timestamp, state: u8) -> itch::Message {
        messages::trading_action(&self.specs[symbol as usize], symbol, ts, state)
    }

    /// The GLIMPSE 5.0 snapshot body (DESIGN.md 5): per symbol in config order its Stock
    /// Directory, its Trading Action (current state) and an `A`/`F` for every displayed
    /// resting order with its leaves, bids then asks in priority order. Stamped `ts`.
    pub fn snapshot<F: FnMut(&itch::Message)>(&self, ts: Timestamp, mut emit: F) {
        for symbol in 0..self.specs.len() as u16 {
            emit(&self.stock_directory(symbol, ts));
            let state = if self.halted[symbol as usize] {
                itch::trading_state::HALTED
            } else {
                itch::trading_state::TRADING
            };
            emit(&self.trading_action(symbol, ts, state));
            let stock = self.specs[symbol as usize].symbol;
            for side in [Side::Buy, Side::Sell] {
                self.books[symbol as usize].for_each_order(side, |o| {
                    if o.hidden {
                        return;
                    }
                    let order_ref = OrderRef(o.payload.order_ref);
                    let (side, shares, price) = (side.itch_byte(), Shares(o.leaves), o.price);
                    let body = if o.payload.display == b'A' {
                        let attribution = self.firms[o.payload.account as usize];
                        itch::Body::AddOrderMpid {
                            order_ref,
                            side,
                            shares,
                            stock,
                            price,
                            attribution,
                        }
                    } else {
                        itch::Body::AddOrder {
                            order_ref,
                            side,
                            shares,
                            stock,
                            price,
                        }
                    };
                    emit(&self.itch_message(symbol, ts, body));
                });
            }
        }
    }

    /// Orders that will expire by time; the sequencer ticks only while there are any.
    pub fn expiring_orders(&self) -> u64 {
        self.books
            .iter()
            .map(|b| u64::from(b.expiring_count()))
            .sum()
    }

    /// Handle of a live order by account and token (tools and tests).
    pub fn live_order(&self, account: AccountId, token: &Token) -> Option<(u16, OrderHandle)> {
        match self.tokens.get(account.0 as usize)?.get(token)?.1 {
            TokenState::Live { symbol, handle } => Some((symbol, handle)),
            TokenState::Dead => None,
        }
    }
}
