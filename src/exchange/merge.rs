//! The merge: takes every input's plan in journal-sequence order and the shard events it
//! needs, assigns the day's order reference and match numbers, and formats the exact OUCH
//! and ITCH messages, in order.
//!
//! It is driven by pushes: [`Merge::begin`] a plan, then feed it events with
//! [`Merge::event`] from the shard [`Merge::want`]s next, until `want` says None. With one
//! shard run inline the shard's events are pushed straight in as they happen; with shards on
//! threads the output thread pulls them from each shard's ring in the order `want` asks.
//!
//! Shards name resting orders by (symbol, pool slot). The merge keeps, per symbol, the order
//! reference number of the order in each slot (written when an order rests, read when it
//! executes, is canceled or replaced). A symbol's events reach the merge in the order its
//! shard produced them, so the table always holds the slot's current occupant.

use super::input::{Command, Input};
use super::messages::{self, itch_message, reject, system_event};
use super::msg::{Plan, ReplaceFeed, ShardEvent, SweepKind, shard_of, shards_of_range};
use super::sink::Sink;
use super::validate;
use super::venue::{SymbolSpec, Venue, VenueError};
use crate::types::{AccountId, Firm, MatchNumber, OrderRef, Price, Shares, Side, Timestamp, Token};
use crate::wire::itch;
use crate::wire::ouch::{self, Inbound, liquidity, order_state};

/// The taker of an order input: whose messages fills and rests produce.
#[derive(Clone, Copy, Debug)]
struct Taker {
    account: AccountId,
    token: Token,
    order_ref: u64,
    price: Price,
    display: u8,
}

impl Taker {
    const NONE: Taker = Taker {
        account: AccountId(0),
        token: Token::SPACES,
        order_ref: 0,
        price: Price(0),
        display: b'N',
    };
}

/// A plan that waits for shard events.
#[derive(Clone, Copy, Debug)]
enum Work {
    Idle,
    /// The order input in [`Merge::order`].
    Order,
    /// A sweep or snapshot over symbols `symbol..=last`, then a `Done` from each shard
    /// (`dones` collected so far of `dones_total`).
    Symbols {
        what: Symbols,
        ts: Timestamp,
        first: u16,
        symbol: u16,
        last: u16,
        dones: usize,
        dones_total: usize,
    },
}

/// The order input being merged (kept in place: events update the taker, nothing is copied
/// per event).
#[derive(Clone, Copy, Debug)]
struct OrderWork {
    input: Input,
    symbol: u16,
    taker: Taker,
    /// A replacement published as ITCH `U` once it rests: the old order's reference (0 when
    /// none; numbering starts at 1). Beside the taker, not in it: the taker is copied for
    /// every event, this is read once.
    replaces: u64,
}

#[derive(Clone, Copy, Debug)]
enum Symbols {
    Sweep { seq: u64, kind: SweepKind },
    Snapshot { id: u64 },
}

/// Where the merge pulls shard events from when the shards do not push them (queues, rings):
/// the next event of `shard`, waiting for it.
pub trait EventSource {
    fn next_event(&mut self, shard: usize) -> ShardEvent;
}

pub struct Merge {
    specs: Vec<SymbolSpec>,
    firms: Vec<Firm>,
    shards: usize,
    /// Per symbol: order reference number of the order in each pool slot.
    pub(crate) refs: Vec<Box<[u64]>>,
    pub(crate) halted: Vec<bool>,
    pub(crate) next_order_ref: u64,
    pub(crate) next_match: u64,
    last_seq: u64,
    pub day_ended: bool,
    work: Work,
    order: OrderWork,
}

impl Merge {
    pub fn new(venue: &Venue, shards: usize) -> Result<Merge, VenueError> {
        let specs = venue.specs()?;
        let slots = venue.limits.orders_per_symbol as usize;
        Ok(Merge {
            firms: (0..venue.accounts.len())
                .map(|a| venue.firm(AccountId(a as u16)))
                .collect(),
            shards,
            refs: specs
                .iter()
                .map(|_| vec![0u64; slots].into_boxed_slice())
                .collect(),
            halted: vec![false; specs.len()],
            specs,
            next_order_ref: 1,
            next_match: 1,
            last_seq: 0,
            day_ended: false,
            work: Work::Idle,
            order: OrderWork {
                input: Input {
                    seq: 0,
                    timestamp: Timestamp(0),
                    command: Command::Tick,
                },
                symbol: 0,
                taker: Taker::NONE,
                replaces: 0,
            },
        })
    }

    /// The last input whose outputs are all produced.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn order_refs_used(&self) -> u64 {
        self.next_order_ref - 1
    }

    pub fn matches_used(&self) -> u64 {
        self.next_match - 1
    }

    /// Shards whose events this merge reads.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Set the day's numbering after a state was restored into this fresh merge.
    pub(crate) fn restore_position(
        &mut self,
        next_order_ref: u64,
        next_match: u64,
        day_ended: bool,
        last_seq: u64,
    ) {
        assert!(matches!(self.work, Work::Idle) && self.last_seq == 0);
        assert!(next_order_ref >= 1 && next_match >= 1);
        self.next_order_ref = next_order_ref;
        self.next_match = next_match;
        self.day_ended = day_ended;
        self.last_seq = last_seq;
    }

    pub fn allocated_bytes(&self) -> usize {
        self.refs.iter().map(|r| r.len() * 8).sum()
    }

    /// Merge `plan` whole, pulling the events it needs from `events`.
    pub fn process<E: EventSource, S: Sink>(&mut self, plan: &Plan, events: &mut E, sink: &mut S) {
        self.begin(plan, sink);
        // Each event either ends the plan or moves it on; a plan's events are bounded by
        // what its shards can hold (orders, symbols), which the rings bound in turn.
        while let Some(shard) = self.want() {
            let event = events.next_event(shard);
            self.event(&event, sink);
        }
    }

    /// Start merging an order's plan (the input of an Enter, Cancel or Replace on `symbol`).
    #[inline]
    pub fn begin_order(&mut self, input: &Input, symbol: u16) {
        assert!(
            matches!(self.work, Work::Idle),
            "a plan begins after the last ended"
        );
        let Command::Ouch { account, .. } = input.command else {
            unreachable!("order plans carry OUCH inputs");
        };
        self.order = OrderWork {
            input: *input,
            symbol,
            taker: Taker {
                account,
                ..Taker::NONE
            },
            replaces: 0,
        };
        self.work = Work::Order;
    }

    /// Start merging `plan`; what needs no shard event is produced now.
    pub fn begin<S: Sink>(&mut self, plan: &Plan, sink: &mut S) {
        assert!(
            matches!(self.work, Work::Idle),
            "a plan begins after the last ended"
        );
        match *plan {
            Plan::Silent { seq } => self.last_seq = seq,
            Plan::Reject {
                input,
                account,
                token,
                reason,
            } => {
                reject(input.timestamp, account, token, reason, sink);
                self.last_seq = input.seq;
            }
            Plan::StartOfDay { input } => {
                self.start_of_day(input.timestamp, sink);
                self.last_seq = input.seq;
            }
            Plan::TradingAction {
                input,
                symbol,
                state,
            } => {
                self.halted[symbol as usize] = state == itch::trading_state::HALTED;
                sink.itch(&self.trading_action(symbol, input.timestamp, state));
                self.last_seq = input.seq;
            }
            Plan::Order { ref input, symbol } => self.begin_order(input, symbol),
            Plan::Sweep {
                input,
                kind,
                first,
                last,
            } => {
                let what = Symbols::Sweep {
                    seq: input.seq,
                    kind,
                };
                self.begin_symbols(what, input.timestamp, first, last);
            }
            Plan::Snapshot { ts, id, .. } => {
                let last = self.specs.len() as u16 - 1;
                self.begin_symbols(Symbols::Snapshot { id }, ts, 0, last);
                self.snapshot_symbol_start(id, 0, ts, sink);
            }
            Plan::Marker(marker) => sink.marker(marker),
            // The output thread lends the merge itself (see `ShardCmd::Lend`).
            Plan::Lend => {}
        }
    }

    fn begin_symbols(&mut self, what: Symbols, ts: Timestamp, first: u16, last: u16) {
        self.work = Work::Symbols {
            what,
            ts,
            first,
            symbol: first,
            last,
            dones: 0,
            dones_total: shards_of_range(first, last, self.shards).count(),
        };
    }

    /// The shard whose next event the plan needs; None once the plan is merged.
    #[inline]
    pub fn want(&self) -> Option<usize> {
        match self.work {
            Work::Idle => None,
            Work::Order => Some(shard_of(self.order.symbol, self.shards)),
            Work::Symbols {
                first,
                symbol,
                last,
                dones,
                ..
            } => {
                if symbol <= last {
                    Some(shard_of(symbol, self.shards))
                } else {
                    shards_of_range(first, last, self.shards).nth(dones)
                }
            }
        }
    }

    /// Merge the next event of the shard [`Self::want`] named.
    #[inline]
    pub fn event<S: Sink>(&mut self, event: &ShardEvent, sink: &mut S) {
        match self.work {
            Work::Order => self.order_event(event, sink),
            Work::Symbols { .. } => self.symbols_event(*event, sink),
            Work::Idle => panic!("shard event {event:?} with no plan"),
        }
    }

    // ---- orders ------------------------------------------------------------------------

    fn order_event<S: Sink>(&mut self, event: &ShardEvent, sink: &mut S) {
        let OrderWork {
            ref input,
            symbol,
            taker,
            ..
        } = self.order;
        let ts = input.timestamp;
        let Command::Ouch {
            account,
            ref message,
        } = input.command
        else {
            unreachable!("order plans carry OUCH inputs");
        };
        match *event {
            ShardEvent::Done => {
                let seq = input.seq;
                if self.order.replaces != 0 {
                    self.old_order_deleted_after_all(symbol, ts, sink);
                }
                self.work = Work::Idle;
                self.last_seq = seq;
            }
            ShardEvent::Accepted { dead } => {
                self.order.taker = self.accepted(ts, account, dead, sink);
            }
            ShardEvent::Rejected { reason } => {
                let token = match message {
                    Inbound::Enter(o) => o.token,
                    Inbound::Replace(u) => u.replacement,
                    _ => unreachable!("only enters and replaces are rejected"),
                };
                reject(ts, account, token, reason, sink);
            }
            ShardEvent::Replaced { .. } => {
                self.order.taker = self.replaced(ts, account, symbol, event, sink);
            }
            ShardEvent::Executed {
                maker_slot,
                maker_account,
                maker_token,
                shares,
                price,
                maker_hidden,
            } => {
                debug_assert_eq!(
                    self.order.replaces, 0,
                    "a replacement announced as U executed"
                );
                let match_number = MatchNumber(self.next_match);
                self.next_match += 1;
                let executed = |token, flag| ouch::Executed {
                    timestamp: ts,
                    token,
                    shares: Shares(shares),
                    price,
                    liquidity: flag,
                    match_number,
                };
                let taker_msg = executed(taker.token, liquidity::REMOVED);
                sink.ouch(taker.account, &ouch::Outbound::Executed(taker_msg));
                let maker_flag = if maker_hidden {
                    liquidity::HIDDEN_ADDED
                } else {
                    liquidity::ADDED
                };
                let maker_msg = executed(maker_token, maker_flag);
                let maker = AccountId(maker_account);
                sink.ouch(maker, &ouch::Outbound::Executed(maker_msg));
                let body = if maker_hidden {
                    itch::Body::Trade {
                        order_ref: OrderRef(0),
                        side: b'B',
                        shares: Shares(shares),
                        stock: self.specs[symbol as usize].symbol,
                        price,
                        match_number,
                    }
                } else {
                    itch::Body::OrderExecuted {
                        order_ref: OrderRef(self.refs[symbol as usize][maker_slot as usize]),
                        shares: Shares(shares),
                        match_number,
                    }
                };
                sink.itch(&itch_message(symbol, ts, body));
            }
            ShardEvent::TakerCanceled { shares, reason } => {
                let canceled = ouch::Canceled {
                    timestamp: ts,
                    token: taker.token,
                    decrement: Shares(shares),
                    reason,
                };
                sink.ouch(taker.account, &ouch::Outbound::Canceled(canceled));
            }
            ShardEvent::Rested { slot, side, shares } => {
                self.refs[symbol as usize][slot as usize] = taker.order_ref;
                let replaces = std::mem::take(&mut self.order.replaces);
                if replaces != 0 {
                    let body = itch::Body::OrderReplace {
                        old_ref: OrderRef(replaces),
                        new_ref: OrderRef(taker.order_ref),
                        shares: Shares(shares),
                        price: taker.price,
                    };
                    sink.itch(&itch_message(symbol, ts, body));
                } else if taker.display != b'N' {
                    let attributed = (taker.display == b'A').then_some(taker.account);
                    let add = self.add_order(
                        symbol,
                        taker.order_ref,
                        side,
                        Shares(shares),
                        taker.price,
                        attributed,
                    );
                    sink.itch(&itch_message(symbol, ts, add));
                }
            }
            ShardEvent::Canceled { .. } => self.canceled(ts, event, sink),
            other => panic!("unexpected shard event for an order: {other:?}"),
        }
    }

    /// A replacement announced for ITCH `U` once it rests (`ReplaceFeed::AfterPrevention`)
    /// that ends without resting would leave its old order on subscribers' books. The
    /// shard's dry walk rules this out (a debug build stops here, as at an execution); a
    /// release build deletes the old order instead, late but never left behind. (One that
    /// executed and then rests still gets its `U`, after the executions: the book the feed
    /// shows is right once it is applied, so only the end of the input is checked.)
    #[cold]
    fn old_order_deleted_after_all<S: Sink>(&mut self, symbol: u16, ts: Timestamp, sink: &mut S) {
        let order_ref = OrderRef(std::mem::take(&mut self.order.replaces));
        if cfg!(debug_assertions) {
            panic!(
                "replacement announced as ITCH U (old ref {order_ref:?}) executed or did not rest"
            );
        }
        let body = itch::Body::OrderDelete { order_ref };
        sink.itch(&itch_message(symbol, ts, body));
    }

    fn take_order_ref(&mut self) -> u64 {
        let order_ref = self.next_order_ref;
        self.next_order_ref += 1;
        order_ref
    }

    /// The order's input is read where it lies (`self.order`), not from a copy: a copy read
    /// back at the tokens' odd offsets stalls on store forwarding (perf: two thirds of
    /// `order_event`'s samples).
    fn accepted<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        dead: bool,
        sink: &mut S,
    ) -> Taker {
        let order_ref = self.take_order_ref();
        let Command::Ouch {
            message: Inbound::Enter(o),
            ..
        } = &self.order.input.command
        else {
            unreachable!("accepted answers an enter");
        };
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
            capacity: validate::normalize_capacity(o.capacity),
            intermarket_sweep: validate::normalize_sweep(o.intermarket_sweep),
            min_qty: o.min_qty,
            cross_type: o.cross_type,
            order_state: state_letter(dead),
            bbo_weight: b' ',
        };
        sink.ouch(account, &ouch::Outbound::Accepted(accepted));
        Taker {
            account,
            token: o.token,
            order_ref,
            price: o.price,
            display: o.display,
        }
    }

    /// Reads the input in place, as [`Self::accepted`] does.
    fn replaced<S: Sink>(
        &mut self,
        ts: Timestamp,
        account: AccountId,
        symbol: u16,
        event: &ShardEvent,
        sink: &mut S,
    ) -> Taker {
        let ShardEvent::Replaced {
            old_slot,
            side_letter,
            capacity,
            exposure,
            dead,
            feed,
        } = *event
        else {
            unreachable!();
        };
        let order_ref = self.take_order_ref();
        let Command::Ouch {
            message: Inbound::Replace(u),
            ..
        } = &self.order.input.command
        else {
            unreachable!("replaced answers a replace");
        };
        let replaced = ouch::Replaced {
            timestamp: ts,
            token: u.replacement,
            side: side_letter,
            shares: Shares(exposure),
            stock: self.specs[symbol as usize].symbol,
            price: u.price,
            tif: u.tif,
            firm: self.firms[account.0 as usize],
            display: u.display,
            order_ref: OrderRef(order_ref),
            capacity,
            intermarket_sweep: validate::normalize_sweep(u.intermarket_sweep),
            min_qty: u.min_qty,
            cross_type: b'N',
            order_state: state_letter(dead),
            previous_token: u.existing,
            bbo_weight: b' ',
        };
        sink.ouch(account, &ouch::Outbound::Replaced(replaced));
        let old_ref = OrderRef(self.refs[symbol as usize][old_slot as usize]);
        match feed {
            ReplaceFeed::Replace { new_slot } => {
                let body = itch::Body::OrderReplace {
                    old_ref,
                    new_ref: OrderRef(order_ref),
                    shares: Shares(exposure),
                    price: u.price,
                };
                sink.itch(&itch_message(symbol, ts, body));
                self.refs[symbol as usize][new_slot as usize] = order_ref;
            }
            // Read now: the old order's slot is free and may be the one it rests in.
            ReplaceFeed::AfterPrevention => self.order.replaces = old_ref.0,
            ReplaceFeed::DeleteOld => {
                let body = itch::Body::OrderDelete { order_ref: old_ref };
                sink.itch(&itch_message(symbol, ts, body));
            }
            ReplaceFeed::Nothing => {}
        }
        Taker {
            account,
            token: u.replacement,
            order_ref,
            price: u.price,
            display: u.display,
        }
    }

    fn add_order(
        &self,
        symbol: u16,
        order_ref: u64,
        side: Side,
        shares: Shares,
        price: Price,
        attributed_to: Option<AccountId>,
    ) -> itch::Body {
        let order_ref = OrderRef(order_ref);
        let stock = self.specs[symbol as usize].symbol;
        let side = side.itch_byte();
        match attributed_to {
            Some(account) => itch::Body::AddOrderMpid {
                order_ref,
                side,
                shares,
                stock,
                price,
                attribution: self.firms[account.0 as usize],
            },
            None => itch::Body::AddOrder {
                order_ref,
                side,
                shares,
                stock,
                price,
            },
        }
    }

    /// A resting order lost shares: OUCH Canceled to its owner, ITCH `X` or `D` if displayed.
    fn canceled<S: Sink>(&self, ts: Timestamp, event: &ShardEvent, sink: &mut S) {
        let ShardEvent::Canceled {
            symbol,
            slot,
            account,
            token,
            decrement,
            reason,
            displayed,
            gone,
        } = *event
        else {
            unreachable!();
        };
        let canceled = ouch::Canceled {
            timestamp: ts,
            token,
            decrement: Shares(decrement),
            reason,
        };
        sink.ouch(AccountId(account), &ouch::Outbound::Canceled(canceled));
        if displayed {
            let order_ref = OrderRef(self.refs[symbol as usize][slot as usize]);
            let body = if gone {
                itch::Body::OrderDelete { order_ref }
            } else {
                itch::Body::OrderCancel {
                    order_ref,
                    shares: Shares(decrement),
                }
            };
            sink.itch(&itch_message(symbol, ts, body));
        }
    }

    // ---- sweeps and snapshots ----------------------------------------------------------

    fn symbols_event<S: Sink>(&mut self, event: ShardEvent, sink: &mut S) {
        let Work::Symbols {
            what,
            ts,
            first,
            mut symbol,
            last,
            mut dones,
            dones_total,
        } = self.work
        else {
            unreachable!();
        };
        match event {
            ShardEvent::Canceled { symbol: s, .. } => {
                debug_assert_eq!(s, symbol, "sweeps go symbol by symbol");
                self.canceled(ts, &event, sink);
            }
            ShardEvent::Resting {
                symbol: s,
                slot,
                side,
                price,
                shares,
                account,
                attributed,
            } => {
                debug_assert_eq!(s, symbol, "snapshots go symbol by symbol");
                let Symbols::Snapshot { id } = what else {
                    panic!("resting order reported outside a snapshot");
                };
                let order_ref = self.refs[s as usize][slot as usize];
                let attributed = attributed.then_some(AccountId(account));
                let body = self.add_order(s, order_ref, side, Shares(shares), price, attributed);
                sink.snapshot(id, Some(&itch_message(s, ts, body)));
            }
            ShardEvent::SymbolDone => {
                assert!(symbol <= last, "more symbols done than swept");
                symbol += 1;
                if let Symbols::Snapshot { id } = what
                    && symbol <= last
                {
                    self.snapshot_symbol_start(id, symbol, ts, sink);
                }
            }
            ShardEvent::Done => {
                assert!(symbol > last, "a shard finished before its symbols");
                dones += 1;
                if dones == dones_total {
                    self.work = Work::Idle;
                    self.end_symbols(what, ts, sink);
                    return;
                }
            }
            other => panic!("unexpected shard event in a sweep: {other:?}"),
        }
        self.work = Work::Symbols {
            what,
            ts,
            first,
            symbol,
            last,
            dones,
            dones_total,
        };
    }

    fn end_symbols<S: Sink>(&mut self, what: Symbols, ts: Timestamp, sink: &mut S) {
        match what {
            Symbols::Sweep { seq, kind } => {
                if kind == SweepKind::EndOfDay {
                    self.end_of_day(ts, sink);
                }
                self.last_seq = seq;
            }
            Symbols::Snapshot { id } => sink.snapshot(id, None),
        }
    }

    /// A snapshot's per-symbol head: Stock Directory and the current trading state.
    fn snapshot_symbol_start<S: Sink>(&self, id: u64, symbol: u16, ts: Timestamp, sink: &mut S) {
        sink.snapshot(id, Some(&self.stock_directory(symbol, ts)));
        let state = if self.halted[symbol as usize] {
            itch::trading_state::HALTED
        } else {
            itch::trading_state::TRADING
        };
        sink.snapshot(id, Some(&self.trading_action(symbol, ts, state)));
    }

    /// After the end-of-day cancels: System Event `E` to every account, closing ITCH events.
    fn end_of_day<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) {
        self.ouch_event_to_all(ts, ouch::event::END_OF_DAY, sink);
        for event in [
            itch::event::END_OF_MARKET_HOURS,
            itch::event::END_OF_SYSTEM_HOURS,
            itch::event::END_OF_MESSAGES,
        ] {
            sink.itch(&system_event(ts, event));
        }
        self.day_ended = true;
    }

    fn start_of_day<S: Sink>(&mut self, ts: Timestamp, sink: &mut S) {
        sink.itch(&system_event(ts, itch::event::START_OF_MESSAGES));
        for symbol in 0..self.specs.len() as u16 {
            sink.itch(&self.stock_directory(symbol, ts));
        }
        for symbol in 0..self.specs.len() as u16 {
            sink.itch(&self.trading_action(symbol, ts, itch::trading_state::TRADING));
        }
        sink.itch(&system_event(ts, itch::event::START_OF_SYSTEM_HOURS));
        sink.itch(&system_event(ts, itch::event::START_OF_MARKET_HOURS));
        self.ouch_event_to_all(ts, ouch::event::START_OF_DAY, sink);
    }

    fn ouch_event_to_all<S: Sink>(&self, ts: Timestamp, event: u8, sink: &mut S) {
        for account in 0..self.firms.len() as u16 {
            let message = ouch::Outbound::SystemEvent(ouch::SystemEvent {
                timestamp: ts,
                event,
            });
            sink.ouch(AccountId(account), &message);
        }
    }

    fn stock_directory(&self, symbol: u16, ts: Timestamp) -> itch::Message {
        messages::stock_directory(&self.specs[symbol as usize], symbol, ts)
    }

    fn trading_action(&self, symbol: u16, ts: Timestamp, state: u8) -> itch::Message {
        messages::trading_action(&self.specs[symbol as usize], symbol, ts, state)
    }
}

fn state_letter(dead: bool) -> u8 {
    if dead {
        order_state::DEAD
    } else {
        order_state::LIVE
    }
}
