//! The merge: takes every input's plan in journal-sequence order, pulls the shard events it
//! needs, assigns the day's order reference and match numbers, and formats the exact OUCH and
//! ITCH messages `Exchange::apply` would send, in the same order.
//!
//! Shards name resting orders by (symbol, pool slot). The merge keeps, per symbol, the order
//! reference number of the order in each slot (a table of `orders_per_symbol` entries, written
//! when an order rests, read when it executes, is canceled or replaced). Because a symbol's
//! events reach the merge in the order its shard produced them, the table always holds the
//! slot's current occupant.

use super::msg::{Plan, ReplaceFeed, ShardEvent, shard_of};
use crate::exchange::messages::{self, itch_message, reject, system_event};
use crate::exchange::validate;
use crate::exchange::venue::{SymbolSpec, Venue, VenueError};
use crate::exchange::{Command, Input, Sink};
use crate::types::{AccountId, Firm, MatchNumber, OrderRef, Price, Shares, Side, Timestamp, Token};
use crate::wire::itch;
use crate::wire::ouch::{self, Inbound, cancel_reason, liquidity, order_state};

/// Where the merge reads shard events: the next event of `shard`, waiting for it.
pub trait EventSource {
    fn next_event(&mut self, shard: usize) -> ShardEvent;
}

/// The taker of an order input: whose messages fills and rests produce.
#[derive(Clone, Copy)]
struct Taker {
    account: AccountId,
    token: Token,
    order_ref: u64,
    price: Price,
    display: u8,
}

pub struct Merge {
    specs: Vec<SymbolSpec>,
    firms: Vec<Firm>,
    shards: usize,
    /// Per symbol: order reference number of the order in each pool slot.
    refs: Vec<Box<[u64]>>,
    halted: Vec<bool>,
    next_order_ref: u64,
    next_match: u64,
    last_seq: u64,
    pub day_ended: bool,
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
        })
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn order_refs_used(&self) -> u64 {
        self.next_order_ref - 1
    }

    pub fn matches_used(&self) -> u64 {
        self.next_match - 1
    }

    /// Produce the outputs of one plan. Snapshot messages go to `snapshot(id, message)`,
    /// `None` ending the snapshot.
    pub fn process<E, S, G>(&mut self, plan: &Plan, events: &mut E, sink: &mut S, snapshot: &mut G)
    where
        E: EventSource,
        S: Sink,
        G: FnMut(u64, Option<&itch::Message>),
    {
        match *plan {
            Plan::Silent { .. } => {}
            Plan::Reject {
                input,
                account,
                token,
                reason,
            } => reject(input.timestamp, account, token, reason, sink),
            Plan::StartOfDay { input } => self.start_of_day(input.timestamp, sink),
            Plan::TradingAction {
                input,
                symbol,
                state,
            } => {
                self.halted[symbol as usize] = state == itch::trading_state::HALTED;
                sink.itch(&self.trading_action(symbol, input.timestamp, state));
            }
            Plan::Order { input, symbol } => self.order(&input, symbol, events, sink),
            Plan::Tick { input } => {
                for symbol in 0..self.specs.len() as u16 {
                    self.symbol_cancels(input.timestamp, symbol, events, sink);
                }
                self.all_done(events);
            }
            Plan::EndOfDay { input } => self.end_of_day(input.timestamp, events, sink),
            Plan::Snapshot { ts, id, .. } => self.snapshot(ts, id, events, snapshot),
        }
        if !matches!(plan, Plan::Snapshot { .. }) {
            self.last_seq = plan.seq();
        }
    }

    fn next(&self, events: &mut impl EventSource, symbol: u16) -> ShardEvent {
        events.next_event(shard_of(symbol, self.shards))
    }

    /// Every shard reported a `Done` after its per-symbol groups.
    fn all_done(&self, events: &mut impl EventSource) {
        for shard in 0..self.shards {
            let e = events.next_event(shard);
            assert_eq!(e, ShardEvent::Done, "shard {shard} out of step");
        }
    }

    fn take_order_ref(&mut self) -> u64 {
        let r = self.next_order_ref;
        self.next_order_ref += 1;
        r
    }

    fn order<E: EventSource, S: Sink>(
        &mut self,
        input: &Input,
        symbol: u16,
        events: &mut E,
        sink: &mut S,
    ) {
        let ts = input.timestamp;
        let Command::Ouch { account, message } = input.command else {
            unreachable!("order plans carry OUCH inputs");
        };
        let mut taker = Taker {
            account,
            token: Token::SPACES,
            order_ref: 0,
            price: Price(0),
            display: b'N',
        };
        loop {
            let event = self.next(events, symbol);
            match event {
                ShardEvent::Done => return,
                ShardEvent::Accepted { dead } => {
                    let Inbound::Enter(o) = message else {
                        unreachable!("accepted answers an enter");
                    };
                    let order_ref = self.take_order_ref();
                    taker = Taker {
                        account,
                        token: o.token,
                        order_ref,
                        price: o.price,
                        display: o.display,
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
                        order_state: if dead {
                            order_state::DEAD
                        } else {
                            order_state::LIVE
                        },
                        bbo_weight: b' ',
                    };
                    sink.ouch(account, &ouch::Outbound::Accepted(accepted));
                }
                ShardEvent::Rejected { reason } => {
                    let token = match message {
                        Inbound::Enter(o) => o.token,
                        Inbound::Replace(u) => u.replacement,
                        _ => unreachable!("only enters and replaces are rejected"),
                    };
                    reject(ts, account, token, reason, sink);
                }
                ShardEvent::Replaced {
                    old_slot,
                    old_token,
                    side_letter,
                    capacity,
                    exposure,
                    dead,
                    feed,
                } => {
                    let Inbound::Replace(u) = message else {
                        unreachable!("replaced answers a replace");
                    };
                    let order_ref = self.take_order_ref();
                    taker = Taker {
                        account,
                        token: u.replacement,
                        order_ref,
                        price: u.price,
                        display: u.display,
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
                        order_state: if dead {
                            order_state::DEAD
                        } else {
                            order_state::LIVE
                        },
                        previous_token: old_token,
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
                        ReplaceFeed::DeleteOld => {
                            let body = itch::Body::OrderDelete { order_ref: old_ref };
                            sink.itch(&itch_message(symbol, ts, body));
                        }
                        ReplaceFeed::Nothing => {}
                    }
                }
                ShardEvent::Executed {
                    maker_slot,
                    maker_account,
                    maker_token,
                    shares,
                    price,
                    maker_hidden,
                } => {
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
                    sink.ouch(
                        AccountId(maker_account),
                        &ouch::Outbound::Executed(maker_msg),
                    );
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
                ShardEvent::IocRemainder { shares } => {
                    let canceled = ouch::Canceled {
                        timestamp: ts,
                        token: taker.token,
                        decrement: Shares(shares),
                        reason: cancel_reason::IMMEDIATE_OR_CANCEL,
                    };
                    sink.ouch(taker.account, &ouch::Outbound::Canceled(canceled));
                }
                ShardEvent::Rested { slot, side, shares } => {
                    self.refs[symbol as usize][slot as usize] = taker.order_ref;
                    if taker.display == b'N' {
                        continue;
                    }
                    let add = self.add_order(
                        symbol,
                        taker.order_ref,
                        side,
                        Shares(shares),
                        taker.price,
                        (taker.display == b'A').then_some(taker.account),
                    );
                    sink.itch(&itch_message(symbol, ts, add));
                }
                ShardEvent::Canceled { .. } => self.canceled(ts, &event, sink),
                other => panic!("unexpected shard event for an order: {other:?}"),
            }
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

    /// The cancels of one symbol in a Tick or End of Day, up to its `SymbolDone`.
    fn symbol_cancels<E: EventSource, S: Sink>(
        &self,
        ts: Timestamp,
        symbol: u16,
        events: &mut E,
        sink: &mut S,
    ) {
        loop {
            let event = self.next(events, symbol);
            match event {
                ShardEvent::SymbolDone => return,
                ShardEvent::Canceled { symbol: s, .. } => {
                    debug_assert_eq!(s, symbol);
                    self.canceled(ts, &event, sink);
                }
                other => panic!("unexpected shard event in a symbol sweep: {other:?}"),
            }
        }
    }

    fn end_of_day<E: EventSource, S: Sink>(&mut self, ts: Timestamp, events: &mut E, sink: &mut S) {
        for symbol in 0..self.specs.len() as u16 {
            self.symbol_cancels(ts, symbol, events, sink);
        }
        self.all_done(events);
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

    /// GLIMPSE body (as `Exchange::snapshot`): per symbol its directory, trading action and
    /// displayed orders, bids then asks in priority order.
    fn snapshot<E, G>(&self, ts: Timestamp, id: u64, events: &mut E, emit: &mut G)
    where
        E: EventSource,
        G: FnMut(u64, Option<&itch::Message>),
    {
        for symbol in 0..self.specs.len() as u16 {
            emit(id, Some(&self.stock_directory(symbol, ts)));
            let state = if self.halted[symbol as usize] {
                itch::trading_state::HALTED
            } else {
                itch::trading_state::TRADING
            };
            emit(id, Some(&self.trading_action(symbol, ts, state)));
            loop {
                match self.next(events, symbol) {
                    ShardEvent::SymbolDone => break,
                    ShardEvent::Resting {
                        slot,
                        side,
                        price,
                        shares,
                        account,
                        attributed,
                        ..
                    } => {
                        let order_ref = self.refs[symbol as usize][slot as usize];
                        let body = self.add_order(
                            symbol,
                            order_ref,
                            side,
                            Shares(shares),
                            price,
                            attributed.then_some(AccountId(account)),
                        );
                        emit(id, Some(&itch_message(symbol, ts, body)));
                    }
                    other => panic!("unexpected shard event in a snapshot: {other:?}"),
                }
            }
        }
        self.all_done(events);
        emit(id, None);
    }

    fn stock_directory(&self, symbol: u16, ts: Timestamp) -> itch::Message {
        messages::stock_directory(&self.specs[symbol as usize], symbol, ts)
    }

    fn trading_action(&self, symbol: u16, ts: Timestamp, state: u8) -> itch::Message {
        messages::trading_action(&self.specs[symbol as usize], symbol, ts, state)
    }
}
