//! The workload shapes. Each one drives a [`Gen`], which applies every op to the model as
//! it emits it (so later ops see the book the engines will have).

use super::model::Model;
use super::{Op, Rng, Spec, Stats, Stream, Workload};
use crate::types::Side;

struct Gen {
    rng: Rng,
    model: Model,
    ops: Vec<Op>,
    clamped: bool,
    trading_ops: u64,
    kinds: [u64; 6],
    min_price: u32,
    max_price: u32,
    /// Tokens (new order ids) used by each account.
    tokens: Vec<u32>,
}

fn pick_side(rng: &mut Rng) -> Side {
    if rng.chance(1, 2) {
        Side::Buy
    } else {
        Side::Sell
    }
}

/// `base` moved `by` ticks towards the passive side of `side` (down for bids, up for asks),
/// kept at least 1 tick.
fn passive(side: Side, base: u32, by: u32) -> u32 {
    match side {
        Side::Buy => base.saturating_sub(by).max(1),
        Side::Sell => base + by,
    }
}

/// `base` moved `by` ticks towards the aggressive side of `side`.
fn aggressive(side: Side, base: u32, by: u32) -> u32 {
    passive(side.opposite(), base, by)
}

impl Gen {
    fn new(spec: &Spec) -> Gen {
        Gen {
            rng: Rng::new(spec.seed),
            model: Model::default(),
            ops: Vec::with_capacity(spec.ops as usize),
            clamped: spec.clamped,
            trading_ops: 0,
            kinds: [0; 6],
            min_price: u32::MAX,
            max_price: 0,
            tokens: Vec::new(),
        }
    }

    fn push(&mut self, op: Op, traded: bool) {
        self.kinds[op.kind_index()] += 1;
        if !matches!(op, Op::Cancel { .. } | Op::Reduce { .. }) {
            let account = usize::from(op.account());
            if self.tokens.len() <= account {
                self.tokens.resize(account + 1, 0);
            }
            self.tokens[account] += 1;
        }
        self.trading_ops += u64::from(traded);
        self.ops.push(op);
    }

    fn see_price(&mut self, price: u32) {
        self.min_price = self.min_price.min(price);
        self.max_price = self.max_price.max(price);
    }

    /// In clamped mode, the size a crossing order may have so it leaves nothing after
    /// crossing.
    fn clamp(&self, side: Side, limit: u32, shares: u32) -> u32 {
        if !self.clamped || !self.model.crosses(side, Some(limit)) {
            return shares;
        }
        let can = self.model.executable(side, Some(limit), u64::from(shares));
        shares.min(can as u32)
    }

    fn limit(&mut self, account: u16, side: Side, price: u32, shares: u32) -> u32 {
        let shares = self.clamp(side, price, shares);
        let id = self.model.new_id(account, side);
        self.see_price(price);
        let left = self.model.take(side, Some(price), shares);
        self.model.orders[id as usize].executed = shares - left;
        if left > 0 {
            self.model.rest(id, price, left);
        }
        let op = Op::Limit {
            account,
            id,
            side,
            price_ticks: price,
            shares,
        };
        self.push(op, left < shares);
        id
    }

    fn ioc(&mut self, account: u16, side: Side, price: u32, shares: u32) {
        let shares = self.clamp(side, price, shares);
        let id = self.model.new_id(account, side);
        self.see_price(price);
        let left = self.model.take(side, Some(price), shares);
        let op = Op::Ioc {
            account,
            id,
            side,
            price_ticks: price,
            shares,
        };
        self.push(op, left < shares);
    }

    fn market(&mut self, account: u16, side: Side, shares: u32) {
        let id = self.model.new_id(account, side);
        let left = self.model.take(side, None, shares);
        let op = Op::Market {
            account,
            id,
            side,
            shares,
        };
        self.push(op, left < shares);
    }

    fn cancel(&mut self, id: u32) {
        let account = self.model.orders[id as usize].account;
        self.model.remove(id);
        self.push(Op::Cancel { account, id }, false);
    }

    /// Reduce to a random size below the leaves; cancels when the leaves are 1.
    fn reduce(&mut self, id: u32) {
        let state = self.model.orders[id as usize];
        if state.leaves < 2 {
            return self.cancel(id);
        }
        let to = self.rng.range(1, u64::from(state.leaves - 1)) as u32;
        self.model.reduce(id, to);
        let op = Op::Reduce {
            account: state.account,
            id,
            shares: to,
        };
        self.push(op, false);
    }

    fn replace(&mut self, id: u32, price: u32, shares: u32) {
        let old = self.model.orders[id as usize];
        let side = self.model.side_of(id);
        self.model.remove(id);
        let shares = self.clamp(side, price, shares);
        let new_id = self.model.new_id(old.account, side);
        self.model.orders[new_id as usize].executed = old.executed;
        self.see_price(price);
        let left = self.model.take(side, Some(price), shares);
        self.model.orders[new_id as usize].executed += shares - left;
        if left > 0 {
            self.model.rest(new_id, price, left);
        }
        let op = Op::Replace {
            account: old.account,
            id,
            new_id,
            side,
            price_ticks: price,
            shares,
            executed: old.executed,
        };
        self.push(op, left < shares);
    }

    fn finish(self, spec: Spec, accounts: u16) -> Stream {
        let stats = Stats {
            ids: self.model.orders.len() as u32,
            accounts,
            max_resting: self.model.max_resting,
            max_levels: self.model.max_levels,
            min_price_ticks: if self.min_price == u32::MAX {
                0
            } else {
                self.min_price
            },
            max_price_ticks: self.max_price,
            fills: self.model.fills,
            traded_shares: self.model.traded_shares,
            trading_ops: self.trading_ops,
            kinds: self.kinds,
            final_resting: self.model.live_count(),
            max_tokens_per_account: self.tokens.iter().copied().max().unwrap_or(0),
        };
        Stream {
            spec,
            ops: self.ops,
            stats,
        }
    }
}

pub(crate) fn generate(spec: Spec) -> Stream {
    assert!(spec.ops > 0 && spec.target_resting > 0);
    match spec.workload {
        Workload::QuantCup => quantcup(spec),
        Workload::ExchangeCore => exchange_core(spec),
        Workload::DeepBook => deep_book(spec),
        Workload::Sweep => sweep(spec),
        Workload::Realistic => realistic(spec),
    }
}

/// Limit + cancel stream shaped like the QuantCup 2011 feed: a random-walk mid price, limit
/// orders a geometric number of ticks from the top (one in twenty priced through the mid), and about half the messages cancels of a random live order.
fn quantcup(spec: Spec) -> Stream {
    const ACCOUNTS: u16 = 100;
    let mut g = Gen::new(&spec);
    let mut mid: u32 = 10_000;
    while g.ops.len() < spec.ops as usize {
        if g.rng.chance(1, 50) {
            mid = if g.rng.chance(1, 2) { mid + 1 } else { mid - 1 };
        }
        let live = g.model.live_count();
        let cancel_odds = if live > spec.target_resting { 52 } else { 45 };
        if live > 0 && g.rng.chance(cancel_odds, 100) {
            let id = g.model.random_live(&mut g.rng).expect("live order");
            g.cancel(id);
            continue;
        }
        let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
        let side = pick_side(&mut g.rng);
        let price = if g.rng.chance(1, 20) {
            aggressive(side, mid, g.rng.geometric(0.5, 5))
        } else {
            passive(side, mid, 1 + g.rng.geometric(0.2, 60))
        };
        let shares = 100 * g.rng.range(1, 10) as u32 - g.rng.below(100) as u32;
        g.limit(account, side, price, shares);
    }
    g.finish(spec, ACCOUNTS)
}

/// exchange-core's throughput mix: 9% GTC, 3% IOC, 6% cancel, 82% move (replace to a new
/// price keeping the size). GTC orders rest up to 375 ticks either side of the mid (about
/// 750 prices); the book is held near `target_resting` orders by trading GTC for cancel
/// when it strays more than 10%; 1,000 accounts.
fn exchange_core(spec: Spec) -> Stream {
    const ACCOUNTS: u16 = 1_000;
    const HALF_SPREAD: u32 = 375;
    let mut g = Gen::new(&spec);
    let mut mid: u32 = 100_000;
    let target = spec.target_resting;
    while g.ops.len() < spec.ops as usize {
        if g.rng.chance(1, 200) {
            mid = if g.rng.chance(1, 2) { mid + 1 } else { mid - 1 };
        }
        let live = g.model.live_count();
        let mut roll = g.rng.below(100);
        if roll < 9 && live > target + target / 10 {
            roll = 15;
        } else if (12..18).contains(&roll) && live < target - target / 10 {
            roll = 0;
        }
        if live == 0 || (roll >= 18 && live < target / 2) {
            roll = 0;
        }
        let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
        match roll {
            0..9 => {
                let side = pick_side(&mut g.rng);
                let price = if g.rng.chance(1, 20) {
                    aggressive(side, mid, g.rng.range(0, 3) as u32)
                } else {
                    passive(side, mid, g.rng.range(1, u64::from(HALF_SPREAD)) as u32)
                };
                let shares = g.rng.range(1, 1_000) as u32;
                g.limit(account, side, price, shares);
            }
            9..12 => {
                let side = pick_side(&mut g.rng);
                let top = g.model.best(side.opposite()).unwrap_or(mid);
                let price = aggressive(side, top, g.rng.range(0, 2) as u32);
                let shares = g.rng.range(1, 300) as u32;
                g.ioc(account, side, price, shares);
            }
            12..18 => {
                let id = g.model.random_live(&mut g.rng).expect("live order");
                g.cancel(id);
            }
            _ => {
                let id = g.model.random_live(&mut g.rng).expect("live order");
                let state = g.model.orders[id as usize];
                let side = g.model.side_of(id);
                // Moves wander a few ticks either way; orders that drifted more than the
                // half spread from the mid are pulled back towards it.
                let distance = state.price.abs_diff(mid);
                let step = g.rng.range(1, 8) as u32;
                let toward_mid = distance > HALF_SPREAD || g.rng.chance(1, 2);
                let price = if g.rng.chance(1, 25) {
                    // Now and then a move goes for the other side's top.
                    let top = g.model.best(side.opposite()).unwrap_or(mid);
                    aggressive(side, top, g.rng.range(0, 2) as u32)
                } else if toward_mid == (state.price < mid) {
                    state.price + step
                } else {
                    state.price.saturating_sub(step).max(1)
                };
                g.replace(id, price, state.leaves);
            }
        }
    }
    g.finish(spec, ACCOUNTS)
}

/// Liquibook's perf shape: alternating buy/sell limits, bids 1880-1889 and asks 1884-1893
/// ticks, 100-1000 shares; stops when `target_resting` orders rest (or after `ops`).
fn deep_book(spec: Spec) -> Stream {
    const ACCOUNTS: u16 = 100;
    let mut g = Gen::new(&spec);
    let mut buy = true;
    while g.ops.len() < spec.ops as usize && g.model.live_count() < spec.target_resting {
        let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
        let (side, price) = if buy {
            (Side::Buy, g.rng.range(1880, 1889) as u32)
        } else {
            (Side::Sell, g.rng.range(1884, 1893) as u32)
        };
        let shares = g.rng.range(100, 1000) as u32;
        g.limit(account, side, price, shares);
        buy = !buy;
    }
    g.finish(spec, ACCOUNTS)
}

/// Deep book, then sweeps: depth of `target_resting / 4` orders per side over 2,000 prices
/// per side; then each sweep (market, or IOC limited at the last level it should reach)
/// takes 50-500 levels and is followed by the inserts that rebuild those levels.
fn sweep(spec: Spec) -> Stream {
    const ACCOUNTS: u16 = 100;
    const LEVELS: u32 = 2_000;
    let mut g = Gen::new(&spec);
    let mid: u32 = 50_000;
    let per_level = (spec.target_resting / (2 * LEVELS)).max(1);
    let build = |g: &mut Gen, side: Side, from: u32, to: u32| {
        for by in from..=to {
            for _ in 0..per_level {
                let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
                let shares = g.rng.range(1, 5) as u32 * 100;
                g.limit(account, side, passive(side, mid, by), shares);
            }
        }
    };
    build(&mut g, Side::Buy, 1, LEVELS);
    build(&mut g, Side::Sell, 1, LEVELS);
    while g.ops.len() < spec.ops as usize {
        let side = pick_side(&mut g.rng);
        let contra = side.opposite();
        let n = g.rng.range(50, 500) as usize;
        let levels = g.model.best_levels(contra, n);
        let Some(&(last_price, last_total)) = levels.last() else {
            break;
        };
        let before: u64 = levels.iter().map(|l| l.1).sum::<u64>() - last_total;
        let shares = (before + 1 + g.rng.below(last_total)) as u32;
        let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
        if g.rng.chance(1, 2) {
            g.market(account, side, shares);
        } else {
            g.ioc(account, side, last_price, shares);
        }
        // Rebuild the contra side from the level after its new best back to the mid.
        let best = g.model.best(contra).unwrap_or(passive(contra, mid, LEVELS));
        let taken = best.abs_diff(mid) - 1;
        if taken >= 1 {
            build(&mut g, contra, 1, taken);
        }
    }
    g.finish(spec, ACCOUNTS)
}

/// A mix for the load generator: 35% limit (1 in 10 priced through the top), 10% IOC, 5%
/// market, 25% cancel, 5% reduce, 20% replace (new price a few ticks away and new size);
/// random-walk mid, 100 accounts, book held near `target_resting`.
fn realistic(spec: Spec) -> Stream {
    const ACCOUNTS: u16 = 100;
    let mut g = Gen::new(&spec);
    let mut mid: u32 = 20_000;
    let target = spec.target_resting;
    while g.ops.len() < spec.ops as usize {
        if g.rng.chance(1, 20) {
            mid = if g.rng.chance(1, 2) { mid + 1 } else { mid - 1 };
        }
        let live = g.model.live_count();
        let mut roll = g.rng.below(100);
        if live < target / 2 && roll >= 50 {
            roll = 0;
        } else if live > target * 2 && roll < 35 {
            roll = 50;
        }
        if live == 0 && roll >= 50 {
            roll = 0;
        }
        let account = g.rng.below(u64::from(ACCOUNTS)) as u16;
        let side = pick_side(&mut g.rng);
        let shares = g.rng.range(1, 20) as u32 * 100;
        match roll {
            0..35 => {
                let price = if g.rng.chance(1, 10) {
                    aggressive(side, mid, g.rng.range(0, 3) as u32)
                } else {
                    passive(side, mid, 1 + g.rng.geometric(0.1, 200))
                };
                g.limit(account, side, price, shares);
            }
            35..45 => {
                let price = aggressive(side, mid, g.rng.range(0, 5) as u32);
                g.ioc(account, side, price, shares);
            }
            45..50 => g.market(account, side, shares),
            50..75 => {
                let id = g.model.random_live(&mut g.rng).expect("live order");
                g.cancel(id);
            }
            75..80 => {
                let id = g.model.random_live(&mut g.rng).expect("live order");
                g.reduce(id);
            }
            _ => {
                let id = g.model.random_live(&mut g.rng).expect("live order");
                let price = g.model.orders[id as usize].price;
                let step = g.rng.range(0, 6) as u32;
                let price = if g.rng.chance(1, 2) {
                    price + step
                } else {
                    price.saturating_sub(step).max(1)
                };
                g.replace(id, price, shares);
            }
        }
    }
    g.finish(spec, ACCOUNTS)
}
