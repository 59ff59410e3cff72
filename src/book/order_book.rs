//! One symbol's book: insert, match, reduce, remove, expire; all O(1) or near the top.

use super::expiry::Wheel;
use super::index::{SideIndex, band_slots_for};
use super::level::{DISPLAYED, HIDDEN, Levels};
use super::pool::{NIL, OrderHandle, Pool, Slot};
use crate::types::{Price, Side};

/// Capacities of one book, fixed at construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BookConfig {
    /// Resting orders the book can hold.
    pub order_capacity: u32,
    /// Distinct prices per side the book can hold.
    pub level_capacity: u32,
}

/// One execution against a resting order, reported in matching order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    pub maker: OrderHandle,
    pub shares: u32,
    /// The resting order's price (the trade price).
    pub price: Price,
    pub maker_hidden: bool,
    /// Shares the maker has left after this fill; 0 means it has left the book.
    pub maker_leaves: u32,
}

/// Read-only view of a resting order.
#[derive(Clone, Copy, Debug)]
pub struct OrderView<'a, T> {
    pub handle: OrderHandle,
    pub side: Side,
    pub price: Price,
    pub leaves: u32,
    pub hidden: bool,
    pub deadline_ms: u32,
    pub payload: &'a T,
}

/// An order that has left the book (cancel or expiry), with what it held.
#[derive(Clone, Copy, Debug)]
pub struct Removal<T> {
    pub handle: OrderHandle,
    pub side: Side,
    pub price: Price,
    pub leaves: u32,
    pub hidden: bool,
    pub payload: T,
}

pub struct OrderBook<T> {
    pool: Pool<T>,
    levels: Levels,
    /// Price index per side (bids, asks).
    sides: [SideIndex; 2],
    wheel: Wheel,
}

#[inline]
fn side_index(side: Side) -> usize {
    match side {
        Side::Buy => 0,
        Side::Sell => 1,
    }
}

/// Can a taker on `taker_side` with `limit` trade at a resting `price`?
#[inline]
pub fn acceptable(taker_side: Side, limit: Price, price: Price) -> bool {
    limit.is_market()
        || match taker_side {
            Side::Buy => price <= limit,
            Side::Sell => price >= limit,
        }
}

impl<T: Copy + Default> OrderBook<T> {
    /// A book with every table allocated (and its pages written) now; nothing grows later.
    /// Each side's price band has `4 x level_capacity` slots (a power of two, 256..=65,536).
    pub fn new(config: BookConfig) -> Self {
        Self::with_band(config, band_slots_for(config.level_capacity))
    }

    /// A book whose price bands have `band_slots` slots per side (tests use tiny bands to
    /// exercise prices outside them).
    pub(crate) fn with_band(config: BookConfig, band_slots: u32) -> Self {
        OrderBook {
            pool: Pool::new(config.order_capacity),
            // Both sides share one level pool: a price is on one side only at a time.
            levels: Levels::new(config.level_capacity.saturating_mul(2)),
            sides: [
                SideIndex::new(Side::Buy, config.level_capacity, band_slots),
                SideIndex::new(Side::Sell, config.level_capacity, band_slots),
            ],
            wheel: Wheel::new(),
        }
    }

    pub fn order_count(&self) -> u32 {
        self.pool.live_count()
    }

    pub fn order_capacity(&self) -> u32 {
        self.pool.capacity()
    }

    pub fn level_count(&self, side: Side) -> usize {
        self.sides[side_index(side)].len()
    }

    /// Orders waiting in the expiry wheel.
    pub fn expiring_count(&self) -> u32 {
        self.wheel.len()
    }

    /// Bytes this book holds, all allocated at construction.
    pub fn allocated_bytes(&self) -> usize {
        use std::mem::size_of;
        self.pool.capacity() as usize * size_of::<Slot<T>>()
            + self.levels.capacity() as usize * size_of::<super::level::Level>()
            + self
                .sides
                .iter()
                .map(SideIndex::allocated_bytes)
                .sum::<usize>()
            + 2 * super::expiry::WHEEL_BUCKETS as usize * size_of::<u32>()
    }

    #[inline]
    pub fn best_price(&self, side: Side) -> Option<Price> {
        let index = &self.sides[side_index(side)];
        Some(index.price(index.best()?.key))
    }

    /// Would an order on `taker_side` at `limit` execute against anything resting?
    #[inline]
    pub fn crosses(&self, taker_side: Side, limit: Price) -> bool {
        self.best_price(taker_side.opposite())
            .is_some_and(|price| acceptable(taker_side, limit, price))
    }

    /// Shares a taker could execute at `limit`, counting until at least `want` are found.
    pub fn executable_shares(&self, taker_side: Side, limit: Price, want: u64) -> u64 {
        let mut found = 0u64;
        for rung in self.sides[side_index(taker_side.opposite())].best_first() {
            let level = self.levels.get(rung.level);
            if found >= want || !acceptable(taker_side, limit, level.price) {
                break;
            }
            found += level.total_shares;
        }
        found
    }

    /// Room to rest an order at `price` on `side`: a free slot and a level (existing or free).
    pub fn can_rest(&self, side: Side, price: Price) -> bool {
        if self.pool.is_full() {
            return false;
        }
        let index = &self.sides[side_index(side)];
        // The cheap answer first: a free level needs no search for an existing one.
        (self.levels.has_free() && !index.is_full()) || index.find(price).is_some()
    }

    /// Room to rest a replacement at `price` once `old` (same side) has been removed: its
    /// slot comes free, and its level too when it is that level's only order.
    #[inline]
    pub fn can_rest_replacing(&self, old: OrderHandle, side: Side, price: Price) -> bool {
        let slot = self.pool.get(old.0);
        assert!(
            slot.live && slot.side == side,
            "replacing a stale handle or across sides"
        );
        let index = &self.sides[side_index(side)];
        let level_free = self.levels.has_free() && !index.is_full();
        let old_level_frees = self.levels.get(slot.level).order_count == 1;
        // The search for an existing level only when no cheaper answer says yes.
        level_free || old_level_frees || index.find(price).is_some()
    }

    /// The order that would trade first on `side`, if any.
    pub fn first_in_priority(&self, side: Side) -> Option<OrderHandle> {
        let rung = self.sides[side_index(side)].best()?;
        let level = self.levels.get(rung.level);
        let head = if level.heads[DISPLAYED] != NIL {
            level.heads[DISPLAYED]
        } else {
            level.heads[HIDDEN]
        };
        assert!(head != NIL, "empty level on the price index");
        Some(OrderHandle(head))
    }

    /// Match a taker against the contra side, best price first, displayed before hidden,
    /// oldest first. Calls `on_fill` for each execution with the maker's payload. Returns the
    /// taker's unexecuted shares.
    pub fn execute<F>(&mut self, taker_side: Side, limit: Price, shares: u32, mut on_fill: F) -> u32
    where
        F: FnMut(&Fill, &mut T),
    {
        let contra = side_index(taker_side.opposite());
        let mut remaining = shares;
        // Each pass empties a level or ends the loop: bounded by the level count.
        let mut passes = 0u32;
        while remaining > 0 {
            let Some(rung) = self.sides[contra].best() else {
                break;
            };
            if !acceptable(taker_side, limit, self.sides[contra].price(rung.key)) {
                break;
            }
            remaining = self.consume_level(rung.level, remaining, &mut on_fill);
            if self.levels.get(rung.level).is_empty() {
                self.sides[contra].pop_best();
                self.levels.close(rung.level);
            }
            passes += 1;
            assert!(
                passes <= self.levels.capacity(),
                "matching loop exceeded the level count"
            );
        }
        remaining
    }

    fn consume_level<F>(&mut self, level_index: u32, mut remaining: u32, on_fill: &mut F) -> u32
    where
        F: FnMut(&Fill, &mut T),
    {
        let price = self.levels.get(level_index).price;
        for queue in [DISPLAYED, HIDDEN] {
            while remaining > 0 {
                let maker = self.levels.get(level_index).heads[queue];
                if maker == NIL {
                    break;
                }
                let traded = remaining.min(self.pool.get(maker).leaves);
                remaining -= traded;
                self.levels.reduce(level_index, queue == HIDDEN, traded);
                let slot = self.pool.get_mut(maker);
                slot.leaves -= traded;
                let fill = Fill {
                    maker: OrderHandle(maker),
                    shares: traded,
                    price,
                    maker_hidden: queue == HIDDEN,
                    maker_leaves: slot.leaves,
                };
                on_fill(&fill, &mut slot.payload);
                if fill.maker_leaves == 0 {
                    self.release(maker);
                }
            }
        }
        remaining
    }

    /// Rest an order at the tail of its price's queue. The caller checked [`Self::can_rest`].
    pub fn insert(
        &mut self,
        side: Side,
        price: Price,
        shares: u32,
        hidden: bool,
        deadline_ms: u32,
        payload: T,
    ) -> OrderHandle {
        self.assert_rests(side, price, shares);
        let index = self
            .pool
            .take()
            .expect("order pool full (caller must check can_rest)");
        {
            let slot = self.pool.get_mut(index);
            slot.leaves = shares;
            slot.side = side;
            slot.hidden = hidden;
            slot.deadline_ms = deadline_ms;
            slot.payload = payload;
        }
        let level = self.level_for(side, price);
        self.levels.push_back(&mut self.pool, level, index);
        if deadline_ms > 0 {
            self.wheel.link(&mut self.pool, index);
        }
        OrderHandle(index)
    }

    /// Take `old` off the book and rest its replacement on the same side at the tail of
    /// `price`'s queue: the book [`Self::remove`] then [`Self::insert`] would leave, in one
    /// step. Those would free `old`'s slot and hand it straight back (the free lists are
    /// last in, first out), and its level too when it empties and `price` needs a new one;
    /// here they stay taken, which spares rewriting them twice. Returns the replacement's
    /// handle: `old`'s slot. The caller checked [`Self::can_rest_replacing`].
    pub fn replace(
        &mut self,
        old: OrderHandle,
        price: Price,
        shares: u32,
        hidden: bool,
        deadline_ms: u32,
        payload: T,
    ) -> OrderHandle {
        let slot = *self.pool.get(old.0);
        assert!(slot.live, "stale order handle {}", old.0);
        self.assert_rests(slot.side, price, shares);
        self.levels.unlink(&mut self.pool, old.0);
        if slot.deadline_ms > 0 {
            self.wheel.unlink(&mut self.pool, old.0);
        }
        let level = self.level_replacing(slot.side, slot.level, price);
        {
            let slot = self.pool.get_mut(old.0);
            slot.leaves = shares;
            slot.hidden = hidden;
            slot.deadline_ms = deadline_ms;
            slot.payload = payload;
        }
        self.levels.push_back(&mut self.pool, level, old.0);
        if deadline_ms > 0 {
            self.wheel.link(&mut self.pool, old.0);
        }
        old
    }

    /// What every order that comes to rest must be: not empty, and not crossing the book.
    #[inline]
    fn assert_rests(&self, side: Side, price: Price, shares: u32) {
        assert!(shares > 0, "resting an empty order");
        assert!(
            !self.crosses(side, price),
            "resting an order that crosses the book"
        );
    }

    /// The level for `price` on `side` once an order has left `old_level` there: as
    /// closing an emptied `old_level` and then [`Self::level_for`] would give, except that
    /// an emptied level is kept when `price` is its own or takes `price` when that needs a
    /// new level (the level free list would hand it back first).
    fn level_replacing(&mut self, side: Side, old_level: u32, price: Price) -> u32 {
        let old_price = self.levels.get(old_level).price;
        if !self.levels.get(old_level).is_empty() {
            return self.level_for(side, price);
        }
        if old_price == price {
            return old_level;
        }
        let index = &mut self.sides[side_index(side)];
        let removed = index.remove(old_price);
        assert_eq!(
            removed, old_level,
            "price index out of step with the levels"
        );
        if let Some(level) = index.find(price) {
            self.levels.close(old_level);
            return level;
        }
        self.levels.reprice(old_level, price);
        index.insert(price, old_level);
        old_level
    }

    fn level_for(&mut self, side: Side, price: Price) -> u32 {
        let index = &mut self.sides[side_index(side)];
        if let Some(level) = index.find(price) {
            return level;
        }
        let level = self.levels.open(price);
        index.insert(price, level);
        level
    }

    pub fn get(&self, handle: OrderHandle) -> OrderView<'_, T> {
        let slot = self.pool.get(handle.0);
        assert!(slot.live, "stale order handle {}", handle.0);
        self.view(handle, slot)
    }

    /// The order in `handle`'s slot, or None if the slot is free (the handle went stale).
    #[inline]
    pub fn get_live(&self, handle: OrderHandle) -> Option<OrderView<'_, T>> {
        let slot = self.pool.slots.get(handle.0 as usize)?;
        slot.live.then(|| self.view(handle, slot))
    }

    /// The view of a live slot (`slot` is `handle`'s).
    #[inline]
    fn view<'a>(&'a self, handle: OrderHandle, slot: &'a Slot<T>) -> OrderView<'a, T> {
        OrderView {
            handle,
            side: slot.side,
            price: self.levels.get(slot.level).price,
            leaves: slot.leaves,
            hidden: slot.hidden,
            deadline_ms: slot.deadline_ms,
            payload: &slot.payload,
        }
    }

    pub fn payload_mut(&mut self, handle: OrderHandle) -> &mut T {
        let slot = self.pool.get_mut(handle.0);
        assert!(slot.live, "stale order handle {}", handle.0);
        &mut slot.payload
    }

    /// Lower an order's open shares to `leaves` keeping its priority; 0 removes it.
    /// Returns the shares taken off. Never raises the size.
    pub fn reduce_to(&mut self, handle: OrderHandle, leaves: u32) -> u32 {
        let slot = *self.pool.get(handle.0);
        assert!(slot.live, "stale order handle {}", handle.0);
        if leaves >= slot.leaves {
            return 0;
        }
        if leaves == 0 {
            return self.remove(handle).leaves;
        }
        let decrement = slot.leaves - leaves;
        self.levels.reduce(slot.level, slot.hidden, decrement);
        self.pool.get_mut(handle.0).leaves = leaves;
        decrement
    }

    /// Take an order off the book (cancel, replace, expiry, end of day).
    pub fn remove(&mut self, handle: OrderHandle) -> Removal<T> {
        let slot = *self.pool.get(handle.0);
        assert!(slot.live, "stale order handle {}", handle.0);
        let removal = Removal {
            handle,
            side: slot.side,
            price: self.levels.get(slot.level).price,
            leaves: slot.leaves,
            hidden: slot.hidden,
            payload: slot.payload,
        };
        self.levels.unlink(&mut self.pool, handle.0);
        self.close_level_if_empty(slot.side, slot.level);
        self.release_slot(handle.0);
        removal
    }

    /// Remove the next order whose deadline is at or before `now_ms`, if any.
    pub fn expire_next(&mut self, now_ms: u32) -> Option<Removal<T>> {
        let index = self.wheel.first_due(&self.pool, now_ms)?;
        Some(self.remove(OrderHandle(index)))
    }

    /// A fully executed maker: already out of the level totals, unlink and free it.
    fn release(&mut self, index: u32) {
        self.levels.unlink(&mut self.pool, index);
        self.release_slot(index);
    }

    fn release_slot(&mut self, index: u32) {
        if self.pool.get(index).deadline_ms > 0 {
            self.wheel.unlink(&mut self.pool, index);
        }
        self.pool.give_back(index);
    }

    fn close_level_if_empty(&mut self, side: Side, level: u32) {
        if !self.levels.get(level).is_empty() {
            return;
        }
        let removed = self.sides[side_index(side)].remove(self.levels.get(level).price);
        assert_eq!(removed, level, "price index out of step with the levels");
        self.levels.close(level);
    }

    /// Every resting order of `side` in priority order: best price first; within a price,
    /// displayed orders then hidden ones, oldest first. Bounded by the order count.
    pub fn for_each_order<F: FnMut(OrderView<'_, T>)>(&self, side: Side, mut f: F) {
        self.for_each_order_while(side, |o| {
            f(o);
            true
        });
    }

    /// [`Self::for_each_order`] until `f` answers false (a walk that stops once it knows).
    pub fn for_each_order_while<F: FnMut(OrderView<'_, T>) -> bool>(&self, side: Side, mut f: F) {
        for rung in self.sides[side_index(side)].best_first() {
            let level = self.levels.get(rung.level);
            for queue in [DISPLAYED, HIDDEN] {
                let mut index = level.heads[queue];
                while index != NIL {
                    if !f(self.get(OrderHandle(index))) {
                        return;
                    }
                    index = self.pool.get(index).next;
                }
            }
        }
    }

    /// Check the price indexes' invariants (tests).
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        for (index, side) in self.sides.iter().zip([Side::Buy, Side::Sell]) {
            index.assert_consistent();
            for rung in index.best_first() {
                let level = self.levels.get(rung.level);
                assert_eq!(level.price, index.price(rung.key), "{side:?} level price");
                assert!(!level.is_empty(), "{side:?} empty level indexed");
            }
        }
    }

    /// Each price level of `side`, best first: (price, displayed shares, total shares, orders).
    pub fn for_each_level<F: FnMut(Price, u64, u64, u32)>(&self, side: Side, mut f: F) {
        for rung in self.sides[side_index(side)].best_first() {
            let level = self.levels.get(rung.level);
            f(
                level.price,
                level.displayed_shares,
                level.total_shares,
                level.order_count,
            );
        }
    }
}
