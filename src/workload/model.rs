//! The generator's own model of one book, so that every cancel, reduce and replace it emits
//! names an order that is live at that point of the stream, and so that it can size takers
//! (the "clamped" variants). Deliberately simple and independent of `crate::book`:
//! `BTreeMap` levels of FIFO queues with lazy deletion. Not for the hot path.

use crate::types::Side;
use std::collections::{BTreeMap, VecDeque};

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OrderState {
    pub account: u16,
    pub buy: bool,
    pub price: u32,
    pub leaves: u32,
    /// Shares the order's replace chain has executed so far (OUCH Replace carries the chain
    /// total).
    pub executed: u32,
    pub live: bool,
}

#[derive(Default, Debug)]
struct Level {
    /// Open shares of the live orders queued here.
    total: u64,
    live: u32,
    /// Ids in time priority; may hold ids that are no longer live (skipped, then compacted).
    queue: VecDeque<u32>,
}

#[derive(Default)]
pub(crate) struct Model {
    pub orders: Vec<OrderState>,
    live: Vec<u32>,
    live_pos: Vec<u32>,
    /// [bids, asks] by price in ticks.
    books: [BTreeMap<u32, Level>; 2],
    pub fills: u64,
    pub traded_shares: u64,
    pub max_resting: u32,
    pub max_levels: u32,
}

fn index(side: Side) -> usize {
    match side {
        Side::Buy => 0,
        Side::Sell => 1,
    }
}

/// Can a taker on `side` with `limit` (None = market) trade at `price`?
fn acceptable(side: Side, limit: Option<u32>, price: u32) -> bool {
    match (side, limit) {
        (_, None) => true,
        (Side::Buy, Some(l)) => price <= l,
        (Side::Sell, Some(l)) => price >= l,
    }
}

impl Model {
    pub fn new_id(&mut self, account: u16, side: Side) -> u32 {
        let id = u32::try_from(self.orders.len()).expect("fewer than 2^32 orders");
        self.orders.push(OrderState {
            account,
            buy: side == Side::Buy,
            ..OrderState::default()
        });
        self.live_pos.push(u32::MAX);
        id
    }

    pub fn live_count(&self) -> u32 {
        self.live.len() as u32
    }

    pub fn side_of(&self, id: u32) -> Side {
        if self.orders[id as usize].buy {
            Side::Buy
        } else {
            Side::Sell
        }
    }

    /// A live order chosen uniformly.
    pub fn random_live(&self, rng: &mut super::Rng) -> Option<u32> {
        if self.live.is_empty() {
            return None;
        }
        Some(self.live[rng.below(self.live.len() as u64) as usize])
    }

    pub fn best(&self, side: Side) -> Option<u32> {
        match side {
            Side::Buy => self.books[0].keys().next_back().copied(),
            Side::Sell => self.books[1].keys().next().copied(),
        }
    }

    /// Prices of the best `n` levels of `side`, best first.
    pub fn best_levels(&self, side: Side, n: usize) -> Vec<(u32, u64)> {
        let book = &self.books[index(side)];
        let it: Box<dyn Iterator<Item = (&u32, &Level)>> = match side {
            Side::Buy => Box::new(book.iter().rev()),
            Side::Sell => Box::new(book.iter()),
        };
        it.take(n).map(|(p, l)| (*p, l.total)).collect()
    }

    pub fn crosses(&self, side: Side, limit: Option<u32>) -> bool {
        self.best(side.opposite())
            .is_some_and(|p| acceptable(side, limit, p))
    }

    /// Shares a taker could execute at `limit`, counting until at least `want` are found.
    pub fn executable(&self, side: Side, limit: Option<u32>, want: u64) -> u64 {
        let contra = &self.books[index(side.opposite())];
        let mut found = 0;
        let mut visit = |price: u32, level: &Level| {
            if found >= want || !acceptable(side, limit, price) {
                return false;
            }
            found += level.total;
            true
        };
        match side {
            Side::Buy => {
                for (p, l) in contra.iter() {
                    if !visit(*p, l) {
                        break;
                    }
                }
            }
            Side::Sell => {
                for (p, l) in contra.iter().rev() {
                    if !visit(*p, l) {
                        break;
                    }
                }
            }
        }
        found
    }

    /// Match a taker; returns the shares left. Makers' states are updated.
    pub fn take(&mut self, side: Side, limit: Option<u32>, shares: u32) -> u32 {
        let mut remaining = shares;
        let contra = index(side.opposite());
        while remaining > 0 {
            let best = match side {
                Side::Buy => self.books[contra].keys().next().copied(),
                Side::Sell => self.books[contra].keys().next_back().copied(),
            };
            let Some(price) = best else { break };
            if !acceptable(side, limit, price) {
                break;
            }
            let level = self.books[contra].get_mut(&price).expect("level");
            while remaining > 0 {
                let Some(&maker) = level.queue.front() else {
                    break;
                };
                let state = &mut self.orders[maker as usize];
                if !state.live || state.price != price {
                    level.queue.pop_front();
                    continue;
                }
                let traded = remaining.min(state.leaves);
                remaining -= traded;
                state.leaves -= traded;
                state.executed += traded;
                level.total -= u64::from(traded);
                self.fills += 1;
                self.traded_shares += u64::from(traded);
                if state.leaves == 0 {
                    state.live = false;
                    level.live -= 1;
                    level.queue.pop_front();
                    Self::unlist(&mut self.live, &mut self.live_pos, maker);
                }
            }
            if level.live == 0 {
                self.books[contra].remove(&price);
            }
        }
        remaining
    }

    pub fn rest(&mut self, id: u32, price: u32, shares: u32) {
        assert!(shares > 0);
        let side = self.side_of(id);
        assert!(
            !self.crosses(side, Some(price)),
            "model: resting a crossing order"
        );
        let state = &mut self.orders[id as usize];
        assert!(!state.live, "model: order {id} rests twice");
        state.price = price;
        state.leaves = shares;
        state.live = true;
        let level = self.books[index(side)].entry(price).or_default();
        level.total += u64::from(shares);
        level.live += 1;
        level.queue.push_back(id);
        self.live_pos[id as usize] = self.live.len() as u32;
        self.live.push(id);
        self.max_resting = self.max_resting.max(self.live.len() as u32);
        self.max_levels = self.max_levels.max(self.books[index(side)].len() as u32);
    }

    /// Take a live order off the book; returns its leaves.
    pub fn remove(&mut self, id: u32) -> u32 {
        let side = self.side_of(id);
        let state = &mut self.orders[id as usize];
        assert!(state.live, "model: removing dead order {id}");
        state.live = false;
        let (price, leaves) = (state.price, state.leaves);
        let book = &mut self.books[index(side)];
        let level = book.get_mut(&price).expect("level of a live order");
        level.total -= u64::from(leaves);
        level.live -= 1;
        if level.live == 0 {
            book.remove(&price);
        } else if level.queue.len() > 64 && level.queue.len() > 2 * level.live as usize {
            let orders = &self.orders;
            level
                .queue
                .retain(|&o| orders[o as usize].live && orders[o as usize].price == price);
        }
        Self::unlist(&mut self.live, &mut self.live_pos, id);
        leaves
    }

    /// Lower a live order's leaves to `to` (0 < to < leaves), keeping its place.
    pub fn reduce(&mut self, id: u32, to: u32) {
        let side = self.side_of(id);
        let state = &mut self.orders[id as usize];
        assert!(state.live && to > 0 && to < state.leaves);
        let level = self.books[index(side)]
            .get_mut(&state.price)
            .expect("level of a live order");
        level.total -= u64::from(state.leaves - to);
        state.leaves = to;
    }

    fn unlist(live: &mut Vec<u32>, pos: &mut [u32], id: u32) {
        let at = pos[id as usize] as usize;
        assert_eq!(live[at], id);
        live.swap_remove(at);
        if at < live.len() {
            pos[live[at] as usize] = at as u32;
        }
        pos[id as usize] = u32::MAX;
    }
}
