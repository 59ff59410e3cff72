//! Price levels: two FIFO queues per price (displayed first, hidden second) in a fixed pool.

use super::pool::{NIL, Pool};
use crate::types::Price;

/// Queue index of displayed orders (trade first at a price).
pub(crate) const DISPLAYED: usize = 0;
/// Queue index of hidden orders (trade after every displayed order at the price).
pub(crate) const HIDDEN: usize = 1;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Level {
    pub price: Price,
    pub heads: [u32; 2],
    pub tails: [u32; 2],
    pub total_shares: u64,
    pub displayed_shares: u64,
    pub order_count: u32,
    /// Free-list link while the level is not in use.
    next_free: u32,
}

impl Level {
    fn vacant(next_free: u32) -> Self {
        Level {
            price: Price(0),
            heads: [NIL; 2],
            tails: [NIL; 2],
            total_shares: 0,
            displayed_shares: 0,
            order_count: 0,
            next_free,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.order_count == 0
    }
}

pub(crate) struct Levels {
    levels: Vec<Level>,
    free_head: u32,
}

impl Levels {
    pub fn new(capacity: u32) -> Self {
        assert!(
            capacity > 0 && capacity < NIL,
            "level capacity out of range"
        );
        let levels = (0..capacity)
            .map(|i| Level::vacant(if i + 1 < capacity { i + 1 } else { NIL }))
            .collect();
        Levels {
            levels,
            free_head: 0,
        }
    }

    pub fn has_free(&self) -> bool {
        self.free_head != NIL
    }

    pub fn capacity(&self) -> u32 {
        self.levels.len() as u32
    }

    pub fn open(&mut self, price: Price) -> u32 {
        let index = self.free_head;
        assert!(
            index != NIL,
            "level pool exhausted (caller must check has_free)"
        );
        let level = &mut self.levels[index as usize];
        self.free_head = level.next_free;
        *level = Level::vacant(NIL);
        level.price = price;
        index
    }

    pub fn close(&mut self, index: u32) {
        let level = &mut self.levels[index as usize];
        assert!(level.is_empty(), "closing a level that still holds orders");
        *level = Level::vacant(self.free_head);
        self.free_head = index;
    }

    /// Move an empty level in use to another price (as closing and opening it would).
    pub fn reprice(&mut self, index: u32, price: Price) {
        let level = &mut self.levels[index as usize];
        assert!(
            level.is_empty() && level.total_shares == 0,
            "repricing a level that still holds orders"
        );
        debug_assert!(level.heads == [NIL; 2] && level.tails == [NIL; 2]);
        level.price = price;
    }

    #[inline]
    pub fn get(&self, index: u32) -> &Level {
        &self.levels[index as usize]
    }

    /// Append an order slot to the tail of its queue at this level.
    pub fn push_back<T: Copy + Default>(&mut self, pool: &mut Pool<T>, index: u32, order: u32) {
        let level = &mut self.levels[index as usize];
        let slot = pool.get_mut(order);
        let queue = if slot.hidden { HIDDEN } else { DISPLAYED };
        let leaves = u64::from(slot.leaves);
        slot.level = index;
        slot.prev = level.tails[queue];
        slot.next = NIL;
        match level.tails[queue] {
            NIL => level.heads[queue] = order,
            tail => pool.get_mut(tail).next = order,
        }
        level.tails[queue] = order;
        level.order_count += 1;
        level.total_shares += leaves;
        if queue == DISPLAYED {
            level.displayed_shares += leaves;
        }
    }

    /// Unlink an order slot from its queue; its shares leave the level totals.
    #[inline]
    pub fn unlink<T: Copy + Default>(&mut self, pool: &mut Pool<T>, order: u32) {
        let (prev, next, index, hidden, leaves) = {
            let s = pool.get(order);
            (s.prev, s.next, s.level, s.hidden, u64::from(s.leaves))
        };
        let queue = if hidden { HIDDEN } else { DISPLAYED };
        let level = &mut self.levels[index as usize];
        match prev {
            NIL => level.heads[queue] = next,
            p => pool.get_mut(p).next = next,
        }
        match next {
            NIL => level.tails[queue] = prev,
            n => pool.get_mut(n).prev = prev,
        }
        assert!(level.order_count > 0);
        level.order_count -= 1;
        level.total_shares -= leaves;
        if queue == DISPLAYED {
            level.displayed_shares -= leaves;
        }
    }

    /// Take `shares` off an order's level totals (the order stays queued).
    pub fn reduce(&mut self, index: u32, hidden: bool, shares: u32) {
        let level = &mut self.levels[index as usize];
        level.total_shares -= u64::from(shares);
        if !hidden {
            level.displayed_shares -= u64::from(shares);
        }
    }
}
