//! Bench-only crate: one [`Engine`] adapter per order book (ours, the peers, and a naive
//! reference), a checker that compares every engine's fills with the reference's, and the
//! exchange state machine driven through OUCH inputs. Used by `benches/book.rs` and the
//! binaries in `src/bin/`.

use bourse::book::{BookConfig, OrderBook, OrderHandle};
use bourse::exchange::{Exchange, Input, Limits, Sink};
use bourse::types::{AccountId, Price, Side};
use bourse::wire::{itch, ouch};
use bourse::workload::{Op, Stats, Stream};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One execution, in engine-neutral terms (ids are the workload's order ids).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fill {
    pub taker: u32,
    pub maker: u32,
    pub price_ticks: u32,
    pub shares: u32,
}

/// An order book that can run a workload stream.
pub trait Engine {
    const NAME: &'static str;
    /// Can it run `Op::Reduce` (keep priority on a size decrease)?
    const REDUCES: bool = true;
    /// A fresh book sized for the stream.
    fn build(stats: &Stats) -> Self;
    /// A fresh book for the correctness check (may report fills by a slower route).
    fn build_checked(stats: &Stats) -> Self
    where
        Self: Sized,
    {
        Self::build(stats)
    }
    /// Apply one op, reporting each execution in matching order.
    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, on_fill: &mut F);
    /// Anything the engine refused so far (rejections that a correct run never has).
    fn errors(&self) -> u64 {
        0
    }
}

/// Run a whole stream on a fresh engine, collecting the fills.
pub fn record<E: Engine>(stream: &Stream) -> (Vec<Fill>, u64) {
    let mut engine = E::build_checked(&stream.stats);
    let mut fills = Vec::with_capacity(stream.stats.fills as usize);
    for op in &stream.ops {
        engine.apply(op, &mut |f| fills.push(f));
    }
    (fills, engine.errors())
}

/// Compare an engine's fills with the reference's: count, total shares, then fill by fill.
pub fn compare(reference: &[Fill], got: &[Fill], errors: u64) -> Result<(), String> {
    let total = |fs: &[Fill]| fs.iter().map(|f| u64::from(f.shares)).sum::<u64>();
    let mut problems = Vec::new();
    if errors > 0 {
        problems.push(format!("{errors} commands rejected"));
    }
    if got.len() != reference.len() {
        problems.push(format!(
            "{} fills, reference {}",
            got.len(),
            reference.len()
        ));
    }
    if total(got) != total(reference) {
        problems.push(format!(
            "{} shares executed, reference {}",
            total(got),
            total(reference)
        ));
    }
    if let Some(at) = (0..got.len().min(reference.len())).find(|&i| got[i] != reference[i]) {
        problems.push(format!(
            "first difference at fill #{at}: {:?}, reference {:?}",
            got[at], reference[at]
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Check engine `E` against the reference fills and print one line either way.
pub fn check<E: Engine>(label: &str, stream: &Stream, reference: &[Fill]) -> bool {
    let reduces = stream.stats.kinds[4] > 0;
    if reduces && !E::REDUCES {
        println!(
            "CHECK {label}: {} cannot reduce an order in place: excluded",
            E::NAME
        );
        return false;
    }
    let (fills, errors) = record::<E>(stream);
    match compare(reference, &fills, errors) {
        Ok(()) => {
            println!(
                "CHECK {label}: {} agrees with the reference ({} fills)",
                E::NAME,
                fills.len()
            );
            true
        }
        Err(why) => {
            println!(
                "CHECK {label}: {} DISAGREES with the reference: {why}: excluded",
                E::NAME
            );
            false
        }
    }
}

// ---- ours ------------------------------------------------------------------------------

/// `bourse::book::OrderBook`, payload = the workload id; handles kept in a Vec by id.
pub struct Ours {
    pub book: OrderBook<u32>,
    handles: Vec<OrderHandle>,
}

/// Book capacities for a stream: what it needs plus a little headroom.
pub fn book_config(stats: &Stats) -> BookConfig {
    BookConfig {
        order_capacity: stats.max_resting + 64,
        level_capacity: stats.max_levels + 64,
    }
}

impl Ours {
    #[inline]
    fn take<F: FnMut(Fill)>(
        &mut self,
        taker: u32,
        side: Side,
        limit: Price,
        shares: u32,
        on_fill: &mut F,
    ) -> u32 {
        self.book.execute(side, limit, shares, |f, maker| {
            on_fill(Fill {
                taker,
                maker: *maker,
                price_ticks: f.price.0,
                shares: f.shares,
            })
        })
    }

    #[inline]
    fn limit<F: FnMut(Fill)>(&mut self, id: u32, side: Side, price: u32, shares: u32, f: &mut F) {
        let left = self.take(id, side, Price(price), shares, f);
        if left > 0 {
            assert!(self.book.can_rest(side, Price(price)), "book capacity");
            self.handles[id as usize] = self.book.insert(side, Price(price), left, false, 0, id);
        }
    }
}

impl Engine for Ours {
    const NAME: &'static str = "bourse";

    fn build(stats: &Stats) -> Self {
        Ours {
            book: OrderBook::new(book_config(stats)),
            handles: vec![OrderHandle(u32::MAX); stats.ids as usize],
        }
    }

    #[inline]
    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, f: &mut F) {
        match *op {
            Op::Limit {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => self.limit(id, side, price_ticks, shares, f),
            Op::Ioc {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                self.take(id, side, Price(price_ticks), shares, f);
            }
            Op::Market {
                id, side, shares, ..
            } => {
                self.take(id, side, Price::MARKET, shares, f);
            }
            Op::Cancel { id, .. } => {
                self.book.remove(self.handles[id as usize]);
            }
            Op::Reduce { id, shares, .. } => {
                self.book.reduce_to(self.handles[id as usize], shares);
            }
            Op::Replace {
                id,
                new_id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                let (old, price) = (self.handles[id as usize], Price(price_ticks));
                // A move that does not cross takes the book's one-step replace (as the
                // exchange's Replace does); one that trades is a cancel and a new order.
                if !self.book.crosses(side, price) && self.book.can_rest_replacing(old, side, price)
                {
                    self.handles[new_id as usize] =
                        self.book.replace(old, price, shares, false, 0, new_id);
                } else {
                    self.book.remove(old);
                    self.limit(new_id, side, price_ticks, shares, f);
                }
            }
        }
    }
}

// ---- the reference -------------------------------------------------------------------

/// An obviously-correct book: an unsorted Vec of price levels, each a FIFO of
/// (id, leaves). The best level is found by scanning every level of the contra side; a
/// cancel scans its level's queue. Slow, simple, independent of the other engines.
pub struct Reference {
    levels: Vec<RefLevel>,
    /// Price and side of each id while it rests.
    where_: Vec<(u32, Side)>,
}

struct RefLevel {
    side: Side,
    price: u32,
    queue: VecDeque<(u32, u32)>,
}

impl Reference {
    fn best(&self, side: Side) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, l) in self.levels.iter().enumerate() {
            if l.side != side {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => match side {
                    Side::Buy => l.price > self.levels[b].price,
                    Side::Sell => l.price < self.levels[b].price,
                },
            };
            if better {
                best = Some(i);
            }
        }
        best
    }

    fn take<F: FnMut(Fill)>(
        &mut self,
        taker: u32,
        side: Side,
        limit: Option<u32>,
        mut shares: u32,
        f: &mut F,
    ) -> u32 {
        while shares > 0 {
            let Some(at) = self.best(side.opposite()) else {
                break;
            };
            let level = &mut self.levels[at];
            let ok = match (side, limit) {
                (_, None) => true,
                (Side::Buy, Some(l)) => level.price <= l,
                (Side::Sell, Some(l)) => level.price >= l,
            };
            if !ok {
                break;
            }
            while shares > 0 && !level.queue.is_empty() {
                let (maker, leaves) = level.queue[0];
                let traded = shares.min(leaves);
                shares -= traded;
                f(Fill {
                    taker,
                    maker,
                    price_ticks: level.price,
                    shares: traded,
                });
                if traded == leaves {
                    level.queue.pop_front();
                } else {
                    level.queue[0].1 -= traded;
                }
            }
            if level.queue.is_empty() {
                self.levels.swap_remove(at);
            }
        }
        shares
    }

    fn rest(&mut self, id: u32, side: Side, price: u32, shares: u32) {
        self.where_[id as usize] = (price, side);
        match self
            .levels
            .iter_mut()
            .find(|l| l.side == side && l.price == price)
        {
            Some(l) => l.queue.push_back((id, shares)),
            None => self.levels.push(RefLevel {
                side,
                price,
                queue: VecDeque::from([(id, shares)]),
            }),
        }
    }

    /// Set an order's leaves (0 removes it).
    fn set_leaves(&mut self, id: u32, leaves: u32) {
        let (price, side) = self.where_[id as usize];
        let at = self
            .levels
            .iter()
            .position(|l| l.side == side && l.price == price)
            .expect("reference: level of a live order");
        let queue = &mut self.levels[at].queue;
        let pos = queue
            .iter()
            .position(|o| o.0 == id)
            .expect("reference: live order");
        if leaves == 0 {
            queue.remove(pos);
            if queue.is_empty() {
                self.levels.swap_remove(at);
            }
        } else {
            queue[pos].1 = leaves;
        }
    }
}

impl Engine for Reference {
    const NAME: &'static str = "reference";

    fn build(stats: &Stats) -> Self {
        Reference {
            levels: Vec::new(),
            where_: vec![(0, Side::Buy); stats.ids as usize],
        }
    }

    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, f: &mut F) {
        match *op {
            Op::Limit {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                let left = self.take(id, side, Some(price_ticks), shares, f);
                if left > 0 {
                    self.rest(id, side, price_ticks, left);
                }
            }
            Op::Ioc {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                self.take(id, side, Some(price_ticks), shares, f);
            }
            Op::Market {
                id, side, shares, ..
            } => {
                self.take(id, side, None, shares, f);
            }
            Op::Cancel { id, .. } => self.set_leaves(id, 0),
            Op::Reduce { id, shares, .. } => self.set_leaves(id, shares),
            Op::Replace {
                id,
                new_id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                self.set_leaves(id, 0);
                let left = self.take(new_id, side, Some(price_ticks), shares, f);
                if left > 0 {
                    self.rest(new_id, side, price_ticks, left);
                }
            }
        }
    }
}

// ---- matchcore 0.4.0 -----------------------------------------------------------------

/// matchcore: sequence-numbered commands; order id = the submit's sequence number.
/// Replace = Amend (price and quantity: loses priority, re-matches), Reduce = Amend
/// (quantity decrease keeps priority).
pub struct Matchcore {
    book: matchcore::OrderBook,
    seq: u64,
    /// Our id -> matchcore id, and matchcore id (a sequence number) -> our current id.
    to_mc: Vec<u64>,
    from_mc: Vec<u32>,
    rejected: u64,
}

impl Matchcore {
    fn run<F: FnMut(Fill)>(&mut self, taker: u32, kind: matchcore::CommandKind, f: &mut F) {
        use matchcore::{Command, CommandMeta, CommandOutcome, CommandReport, SequenceNumber};
        let seq = self.seq;
        self.seq += 1;
        let outcome = self.book.execute(&Command {
            meta: CommandMeta {
                sequence_number: SequenceNumber(seq),
                timestamp: matchcore::Timestamp(seq),
            },
            kind,
        });
        let effects = match &outcome {
            CommandOutcome::Applied(CommandReport::Submit(e) | CommandReport::Amend(e)) => e,
            CommandOutcome::Applied(CommandReport::Cancel) => return,
            CommandOutcome::Rejected(_) => {
                self.rejected += 1;
                return;
            }
        };
        if let Some(m) = effects.target_order().match_result() {
            for t in m.trades() {
                f(Fill {
                    taker,
                    maker: self.from_mc[t.maker_order_id().0 as usize],
                    price_ticks: t.price().0 as u32,
                    shares: t.quantity().0 as u32,
                });
            }
        }
    }

    fn submit<F: FnMut(Fill)>(&mut self, id: u32, order: matchcore::NewOrder, f: &mut F) {
        self.to_mc[id as usize] = self.seq;
        self.from_mc[self.seq as usize] = id;
        let kind = matchcore::CommandKind::Submit(matchcore::SubmitCmd { order });
        self.run(id, kind, f);
    }
}

fn mc_side(side: Side) -> matchcore::Side {
    match side {
        Side::Buy => matchcore::Side::Buy,
        Side::Sell => matchcore::Side::Sell,
    }
}

fn mc_limit(
    side: Side,
    price: u32,
    shares: u32,
    tif: matchcore::TimeInForce,
) -> matchcore::NewOrder {
    use matchcore::{LimitOrder, OrderFlags, Quantity, QuantityPolicy};
    matchcore::NewOrder::Limit(LimitOrder::new(
        matchcore::Price(u64::from(price)),
        QuantityPolicy::Standard {
            quantity: Quantity(u64::from(shares)),
        },
        OrderFlags::new(mc_side(side), false, tif),
    ))
}

impl Engine for Matchcore {
    const NAME: &'static str = "matchcore";

    fn build(stats: &Stats) -> Self {
        Matchcore {
            book: matchcore::OrderBook::new("BNCH"),
            seq: 0,
            to_mc: vec![0; stats.ids as usize],
            // One command per op; at most one per id plus cancels and reduces.
            from_mc: vec![u32::MAX; stats.kinds.iter().sum::<u64>() as usize + 1],
            rejected: 0,
        }
    }

    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, f: &mut F) {
        use matchcore::{
            AmendCmd, AmendPatch, CancelCmd, CommandKind, LimitOrderPatch, MarketOrder, OrderId,
            Quantity, QuantityPolicy, TimeInForce,
        };
        match *op {
            Op::Limit {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => self.submit(id, mc_limit(side, price_ticks, shares, TimeInForce::Gtc), f),
            Op::Ioc {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => self.submit(id, mc_limit(side, price_ticks, shares, TimeInForce::Ioc), f),
            Op::Market {
                id, side, shares, ..
            } => {
                let order = MarketOrder::new(Quantity(u64::from(shares)), mc_side(side), false);
                self.submit(id, matchcore::NewOrder::Market(order), f);
            }
            Op::Cancel { id, .. } => {
                let order_id = OrderId(self.to_mc[id as usize]);
                self.run(
                    id,
                    CommandKind::Cancel(CancelCmd {
                        order_id,
                        order_kind: matchcore::OrderKind::Limit,
                    }),
                    f,
                );
            }
            Op::Reduce { id, shares, .. } => {
                let order_id = OrderId(self.to_mc[id as usize]);
                let patch = LimitOrderPatch::new().with_quantity_policy(QuantityPolicy::Standard {
                    quantity: Quantity(u64::from(shares)),
                });
                let kind = CommandKind::Amend(AmendCmd {
                    order_id,
                    patch: AmendPatch::Limit(patch),
                });
                self.run(id, kind, f);
            }
            Op::Replace {
                id,
                new_id,
                price_ticks,
                shares,
                ..
            } => {
                let mc = self.to_mc[id as usize];
                self.to_mc[new_id as usize] = mc;
                self.from_mc[mc as usize] = new_id;
                let patch = LimitOrderPatch::new()
                    .with_price(matchcore::Price(u64::from(price_ticks)))
                    .with_quantity_policy(QuantityPolicy::Standard {
                        quantity: Quantity(u64::from(shares)),
                    });
                let kind = CommandKind::Amend(AmendCmd {
                    order_id: OrderId(mc),
                    patch: AmendPatch::Limit(patch),
                });
                self.run(new_id, kind, f);
            }
        }
    }

    fn errors(&self) -> u64 {
        self.rejected
    }
}

// ---- lobster 0.7.0 -------------------------------------------------------------------

/// lobster: Limit / Market / Cancel only. IOC = Limit, then Cancel of what rested;
/// Replace = Cancel + Limit; no in-place reduce.
pub struct Lobster {
    book: lobster::OrderBook,
}

fn lob_side(side: Side) -> lobster::Side {
    match side {
        Side::Buy => lobster::Side::Bid,
        Side::Sell => lobster::Side::Ask,
    }
}

impl Lobster {
    /// Returns whether some of the order rests.
    fn run<F: FnMut(Fill)>(&mut self, order: lobster::OrderType, f: &mut F) -> bool {
        use lobster::OrderEvent;
        match self.book.execute(order) {
            OrderEvent::Placed { .. } => true,
            OrderEvent::Filled { fills, .. } => {
                Self::report(&fills, f);
                false
            }
            OrderEvent::PartiallyFilled { fills, .. } => {
                Self::report(&fills, f);
                true
            }
            _ => false,
        }
    }

    fn report<F: FnMut(Fill)>(fills: &[lobster::FillMetadata], f: &mut F) {
        for m in fills {
            f(Fill {
                taker: m.order_1 as u32,
                maker: m.order_2 as u32,
                price_ticks: m.price as u32,
                shares: m.qty as u32,
            });
        }
    }

    fn limit<F: FnMut(Fill)>(
        &mut self,
        id: u32,
        side: Side,
        price: u32,
        qty: u32,
        f: &mut F,
    ) -> bool {
        let order = lobster::OrderType::Limit {
            id: u128::from(id),
            side: lob_side(side),
            qty: u64::from(qty),
            price: u64::from(price),
        };
        self.run(order, f)
    }
}

impl Engine for Lobster {
    const NAME: &'static str = "lobster";
    const REDUCES: bool = false;

    fn build(stats: &Stats) -> Self {
        Lobster {
            book: lobster::OrderBook::new(stats.max_resting as usize + 64, 10, false),
        }
    }

    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, f: &mut F) {
        match *op {
            Op::Limit {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                self.limit(id, side, price_ticks, shares, f);
            }
            Op::Ioc {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                // A partial fill also answers PartiallyFilled for a market-like remainder;
                // cancel whatever may have rested (a no-op if nothing did).
                if self.limit(id, side, price_ticks, shares, f) {
                    self.book
                        .execute(lobster::OrderType::Cancel { id: u128::from(id) });
                }
            }
            Op::Market {
                id, side, shares, ..
            } => {
                let order = lobster::OrderType::Market {
                    id: u128::from(id),
                    side: lob_side(side),
                    qty: u64::from(shares),
                };
                self.run(order, f);
            }
            Op::Cancel { id, .. } => {
                self.book
                    .execute(lobster::OrderType::Cancel { id: u128::from(id) });
            }
            Op::Reduce { .. } => panic!("lobster cannot reduce in place"),
            Op::Replace {
                id,
                new_id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                self.book
                    .execute(lobster::OrderType::Cancel { id: u128::from(id) });
                self.limit(new_id, side, price_ticks, shares, f);
            }
        }
    }
}

// ---- orderbook-rs 0.15.3 -------------------------------------------------------------

/// orderbook-rs (concurrent book, `&self` API): add_limit_order_with_result (GTC / IOC),
/// submit_market_order, cancel_order; Replace = cancel + add.
///
/// An IOC that fills only in part returns `Err(InsufficientLiquidity)` and its trades are
/// committed but not returned, so [`Engine::build_checked`] installs a trade listener and
/// reports fills from it; timed runs use the plain book and its return values.
pub struct OrderbookRs {
    book: orderbook_rs::OrderBook<()>,
    errors: u64,
    heard: Option<Arc<Mutex<Vec<Fill>>>>,
}

fn obr_side(side: Side) -> orderbook_rs::prelude::Side {
    match side {
        Side::Buy => orderbook_rs::prelude::Side::Buy,
        Side::Sell => orderbook_rs::prelude::Side::Sell,
    }
}

fn obr_id(id: u32) -> orderbook_rs::prelude::Id {
    orderbook_rs::prelude::Id::Sequential(u64::from(id))
}

fn obr_fills(m: &pricelevel::MatchResult) -> impl Iterator<Item = Fill> + '_ {
    let taker = m.order_id().as_u64().expect("sequential id") as u32;
    m.trades().as_vec().iter().map(move |t| Fill {
        taker,
        maker: t.maker_order_id().as_u64().expect("sequential id") as u32,
        price_ticks: t.price().as_u128() as u32,
        shares: t.quantity().as_u64() as u32,
    })
}

impl OrderbookRs {
    fn report<F: FnMut(Fill)>(&self, m: &pricelevel::MatchResult, f: &mut F) {
        if self.heard.is_none() {
            obr_fills(m).for_each(f);
        }
    }

    fn limit<F: FnMut(Fill)>(
        &mut self,
        id: u32,
        side: Side,
        price: u32,
        qty: u32,
        ioc: bool,
        f: &mut F,
    ) {
        use orderbook_rs::prelude::TimeInForce;
        let tif = if ioc {
            TimeInForce::Ioc
        } else {
            TimeInForce::Gtc
        };
        let result = self.book.add_limit_order_with_result(
            obr_id(id),
            u128::from(price),
            u64::from(qty),
            obr_side(side),
            tif,
            None,
        );
        match result {
            Ok((_, Some(trade))) => self.report(&trade.match_result, f),
            Ok((_, None)) => {}
            // A partly filled IOC: the remainder was dropped, as it should be.
            Err(orderbook_rs::OrderBookError::InsufficientLiquidity { .. }) if ioc => {}
            Err(_) => self.errors += 1,
        }
    }
}

impl Engine for OrderbookRs {
    const NAME: &'static str = "orderbook-rs";
    const REDUCES: bool = false;

    fn build(_stats: &Stats) -> Self {
        OrderbookRs {
            book: orderbook_rs::OrderBook::new("BNCH"),
            errors: 0,
            heard: None,
        }
    }

    fn build_checked(_stats: &Stats) -> Self {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&heard);
        let listener: orderbook_rs::TradeListener =
            Arc::new(move |t: &orderbook_rs::TradeResult| {
                sink.lock()
                    .expect("listener")
                    .extend(obr_fills(&t.match_result));
            });
        OrderbookRs {
            book: orderbook_rs::OrderBook::with_trade_listener("BNCH", listener),
            errors: 0,
            heard: Some(heard),
        }
    }

    fn apply<F: FnMut(Fill)>(&mut self, op: &Op, f: &mut F) {
        match *op {
            Op::Limit {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => self.limit(id, side, price_ticks, shares, false, f),
            Op::Ioc {
                id,
                side,
                price_ticks,
                shares,
                ..
            } => self.limit(id, side, price_ticks, shares, true, f),
            Op::Market {
                id, side, shares, ..
            } => match self
                .book
                .submit_market_order(obr_id(id), u64::from(shares), obr_side(side))
            {
                Ok(m) => self.report(&m, f),
                Err(orderbook_rs::OrderBookError::InsufficientLiquidity { .. }) => {}
                Err(_) => self.errors += 1,
            },
            Op::Cancel { id, .. } => {
                if self.book.cancel_order(obr_id(id)).is_err() {
                    self.errors += 1;
                }
            }
            Op::Reduce { .. } => panic!("orderbook-rs adapter has no in-place reduce"),
            Op::Replace {
                id,
                new_id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                if self.book.cancel_order(obr_id(id)).is_err() {
                    self.errors += 1;
                }
                self.limit(new_id, side, price_ticks, shares, false, f);
            }
        }
        if let Some(heard) = &self.heard {
            heard.lock().expect("listener").drain(..).for_each(f);
        }
    }

    fn errors(&self) -> u64 {
        self.errors
    }
}

// ---- the exchange state machine ------------------------------------------------------

/// Exchange limits sized for a stream.
pub fn exchange_limits(stats: &Stats) -> Limits {
    Limits {
        orders_per_symbol: stats.max_resting + 64,
        levels_per_side: stats.max_levels + 64,
        tokens_per_account: stats.max_tokens_per_account + 16,
    }
}

/// A fresh exchange for a stream, past its start-of-day input (`inputs[0]`).
pub fn exchange_for(stream: &Stream, inputs: &[Input]) -> Exchange {
    let venue = bourse::workload::demo_venue(
        SYMBOL,
        stream.stats.accounts,
        exchange_limits(&stream.stats),
    );
    let mut exchange = Exchange::new(venue).expect("venue");
    exchange.apply(&inputs[0], &mut bourse::exchange::Discard::default());
    exchange
}

pub const SYMBOL: &str = "BNCH";
pub const TICK: u32 = 100;

/// Records executions from the OUCH stream: each taker Executed (liquidity R) is followed
/// by its maker's Executed.
#[derive(Default)]
pub struct FillSink {
    pub fills: Vec<Fill>,
    pending: Option<(u32, u32, u32)>,
}

fn id_of(token: &bourse::types::Token) -> u32 {
    token
        .bytes()
        .iter()
        .fold(0u32, |v, b| v * 10 + u32::from(b - b'0'))
}

impl Sink for FillSink {
    fn ouch(&mut self, _: AccountId, message: &ouch::Outbound) {
        if let ouch::Outbound::Executed(e) = message {
            if e.liquidity == ouch::liquidity::REMOVED {
                self.pending = Some((id_of(&e.token), e.price.0 / TICK, e.shares.0));
            } else {
                let (taker, price_ticks, shares) = self.pending.take().expect("taker first");
                assert_eq!(shares, e.shares.0);
                self.fills.push(Fill {
                    taker,
                    maker: id_of(&e.token),
                    price_ticks,
                    shares,
                });
            }
        }
    }
    fn itch(&mut self, _: &itch::Message) {}
}

/// Run the OUCH inputs of a stream through the exchange and compare its executions with
/// the reference's.
pub fn check_exchange(label: &str, stream: &Stream, inputs: &[Input], reference: &[Fill]) -> bool {
    let mut exchange = exchange_for(stream, inputs);
    let mut sink = FillSink::default();
    let mut ignored = 0u64;
    for input in &inputs[1..] {
        if exchange.apply(input, &mut sink) != bourse::exchange::Outcome::Applied {
            ignored += 1;
        }
    }
    match compare(reference, &sink.fills, ignored) {
        Ok(()) => {
            println!(
                "CHECK {label}: bourse Exchange::apply agrees with the reference ({} fills)",
                sink.fills.len()
            );
            true
        }
        Err(why) => {
            println!("CHECK {label}: bourse Exchange::apply DISAGREES: {why}");
            false
        }
    }
}

/// Pin the current thread to the last core, if the platform allows it.
pub fn pin_last_core() -> Option<usize> {
    let cores = core_affinity::get_core_ids()?;
    let core = *cores.last()?;
    core_affinity::set_for_current(core).then_some(core.id)
}
