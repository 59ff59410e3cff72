//! Seeded, deterministic workloads for benchmarks, the load generator and tests.
//!
//! A workload is a stream of abstract operations on one book ([`Op`]). The generator keeps
//! its own model of the book while it generates, so every cancel, reduce and replace names an
//! order that is live at that point for an engine with price-time priority (the same id's
//! owner account is carried on every op). [`to_inputs`] turns a stream into exchange inputs
//! (OUCH Enter / Cancel / Replace with per-account 14-byte tokens).
//!
//! Pure: no clock, no I/O; the same seed gives the same stream.
//!
//! Workloads ([`Workload`]):
//! 1. [`Workload::QuantCup`]: limit + cancel stream shaped like the QuantCup 2011 feed
//!    (random-walk mid price, orders near the top, about half the messages cancels).
//! 2. [`Workload::ExchangeCore`]: exchange-core's mix, 9% GTC, 3% IOC, 6% cancel, 82% move
//!    (replace to a new price, same size), about 1,000 resting orders over about 750
//!    prices, 1,000 accounts.
//! 3. [`Workload::DeepBook`]: insert-heavy book growing to a target of resting orders
//!    (Liquibook's perf shape: alternating sides, bids 1880-1889, asks 1884-1893 ticks).
//! 4. [`Workload::Sweep`]: build depth, then marketable orders that take 50-500 levels,
//!    each followed by inserts that rebuild what it took.
//! 5. [`Workload::Realistic`]: limits, cancels, reduces, replaces, IOC and market orders.
//!
//! Every workload has a *clamped* variant ([`Spec::clamped`]): an order that crosses is sized
//! so that it never keeps quantity after crossing (for engines that mishandle a taker's
//! limit once it has crossed; see BENCHMARKS.md).

mod generators;
mod model;
mod ouch;
mod rng;

pub use ouch::{account_name, demo_venue, to_inputs, to_message, token_of};
pub use rng::{Rng, SplitMix64};

use crate::types::Side;

/// One operation on one book. Prices are in ticks (see [`to_inputs`] for the conversion).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// Good-till-cancel limit order: trades what it can at `price_ticks` or better, rests
    /// the rest.
    Limit {
        account: u16,
        id: u32,
        side: Side,
        price_ticks: u32,
        shares: u32,
    },
    /// Immediate-or-cancel limit order: trades what it can, the rest is canceled.
    Ioc {
        account: u16,
        id: u32,
        side: Side,
        price_ticks: u32,
        shares: u32,
    },
    /// Market order (immediate-or-cancel, no price limit).
    Market {
        account: u16,
        id: u32,
        side: Side,
        shares: u32,
    },
    /// Cancel a live order.
    Cancel { account: u16, id: u32 },
    /// Lower a live order's open shares to `shares` (`0 < shares < leaves`), keeping its
    /// time priority.
    Reduce { account: u16, id: u32, shares: u32 },
    /// Cancel/replace: `id` leaves the book; `new_id` enters at `price_ticks` with `shares`
    /// open and new time priority, and may trade at once. `executed` is what the replaced
    /// chain has executed so far (OUCH Replace carries `shares + executed`).
    Replace {
        account: u16,
        id: u32,
        new_id: u32,
        side: Side,
        price_ticks: u32,
        shares: u32,
        executed: u32,
    },
}

impl Op {
    pub fn account(&self) -> u16 {
        match *self {
            Op::Limit { account, .. }
            | Op::Ioc { account, .. }
            | Op::Market { account, .. }
            | Op::Cancel { account, .. }
            | Op::Reduce { account, .. }
            | Op::Replace { account, .. } => account,
        }
    }

    /// Index into [`Stats::kinds`].
    pub fn kind_index(&self) -> usize {
        match self {
            Op::Limit { .. } => 0,
            Op::Ioc { .. } => 1,
            Op::Market { .. } => 2,
            Op::Cancel { .. } => 3,
            Op::Reduce { .. } => 4,
            Op::Replace { .. } => 5,
        }
    }
}

/// Names of the op kinds, in [`Op::kind_index`] order.
pub const KIND_NAMES: [&str; 6] = ["limit", "ioc", "market", "cancel", "reduce", "replace"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Workload {
    QuantCup,
    ExchangeCore,
    DeepBook,
    Sweep,
    Realistic,
}

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub workload: Workload,
    pub seed: u64,
    /// Number of operations (for [`Workload::DeepBook`]: an upper bound; generation stops
    /// when `target_resting` orders rest).
    pub ops: u32,
    /// Resting orders the workload aims at (DeepBook: grows to it; others: keeps near it).
    pub target_resting: u32,
    /// Size crossing orders so that no taker keeps quantity after crossing.
    pub clamped: bool,
}

impl Spec {
    /// The default size of each workload used by the benchmarks.
    pub fn standard(workload: Workload, seed: u64) -> Spec {
        let (ops, target_resting) = match workload {
            Workload::QuantCup => (200_000, 1_000),
            Workload::ExchangeCore => (1_000_000, 1_000),
            Workload::DeepBook => (4_000_000, 1_000_000),
            Workload::Sweep => (200_000, 8_000),
            Workload::Realistic => (1_000_000, 5_000),
        };
        Spec {
            workload,
            seed,
            ops,
            target_resting,
            clamped: false,
        }
    }

    pub fn clamped(self) -> Spec {
        Spec {
            clamped: true,
            ..self
        }
    }
}

/// What a generated stream contains and what an engine needs to hold it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Order ids used (`0..ids`).
    pub ids: u32,
    pub accounts: u16,
    /// Most orders resting at once, and most prices on one side at once.
    pub max_resting: u32,
    pub max_levels: u32,
    pub min_price_ticks: u32,
    pub max_price_ticks: u32,
    /// Executions and shares executed (by the generator's model).
    pub fills: u64,
    pub traded_shares: u64,
    /// Ops that executed at least one share.
    pub trading_ops: u64,
    /// Count of each op kind, in [`Op::kind_index`] order.
    pub kinds: [u64; 6],
    /// Resting orders at the end.
    pub final_resting: u32,
    /// Most order tokens (new ids) one account uses.
    pub max_tokens_per_account: u32,
}

/// A generated stream with its statistics.
#[derive(Clone, Debug)]
pub struct Stream {
    pub spec: Spec,
    pub ops: Vec<Op>,
    pub stats: Stats,
}

/// Generate a workload. Deterministic in `spec`.
pub fn generate(spec: Spec) -> Stream {
    generators::generate(spec)
}

#[cfg(test)]
mod tests;
