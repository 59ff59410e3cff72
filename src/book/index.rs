//! Price index of one side of a book: which level rests at a price, and the prices in order.
//!
//! Prices are mapped to **keys** so that a larger key is a better price on both sides (the
//! price itself for bids, `u32::MAX - price` for asks). Two stores hold the levels:
//!
//! - a **band**: a window of `width` consecutive lattice keys `lo, lo + step, ...` with one
//!   slot each (the level index, or `NIL`) and a hierarchical bitmap of the occupied slots.
//!   Finding, adding and removing a price in the band is O(1); the best price and the next
//!   one below a given price are three word reads. This is where the book's activity is.
//! - an **overflow** ladder (sorted array, best last) for the levels outside the window:
//!   deep levels far from the top, or prices beyond the window's top after the market moved.
//!
//! The window is laid out around the best price (three quarters of it below, for depth; a
//! quarter above, for improvements). It is laid out again (a *relayout*, O(levels + width /
//! 64)) when (a) a level opens while the band is empty and the price is outside the window,
//! (b) the lattice step shrinks (below), or (c) the overflow has been touched near the best
//! price as many times as there are levels (at least 64): the cost is then amortised over
//! the overflow operations that prompted it, whatever the order flow.
//!
//! The **step** is learned, not configured: it is the greatest common divisor of the
//! differences between every key ever opened on this side and the first one. For exchange
//! prices it becomes the symbol's tick within a few orders; it only ever shrinks (at most 32
//! times), each time with a relayout. So every price ever seen sits on the lattice, and a key
//! inside the window that is off the lattice cannot be on the book.
//!
//! Nothing here decides capacity: the index holds any price the level limit allows, in the
//! band or in the overflow, so answers about room are the same as a plain sorted ladder's.

use super::bitmap::{BITMAP_SLOTS_MAX, Bitmap};
use super::ladder::{Ladder, Rung};
use super::pool::NIL;
use crate::types::{Price, Side};

/// Band slots per side, at least and at most (4 bytes per slot plus its bitmap bit).
pub(crate) const BAND_SLOTS_MIN: u32 = 256;
pub(crate) const BAND_SLOTS_MAX: u32 = 1 << 16;
/// Band slots per level the side can hold: room for gaps between the prices in use.
const BAND_SLOTS_PER_LEVEL: u32 = 4;
/// Overflow operations near the best price before a relayout, at least.
const TOUCHES_MIN: u32 = 64;

const _: () = assert!(BAND_SLOTS_MAX <= BITMAP_SLOTS_MAX && BAND_SLOTS_MIN >= 64);

/// Band width for a side that holds up to `level_capacity` prices.
pub(crate) fn band_slots_for(level_capacity: u32) -> u32 {
    level_capacity
        .saturating_mul(BAND_SLOTS_PER_LEVEL)
        .checked_next_power_of_two()
        .unwrap_or(BAND_SLOTS_MAX)
        .clamp(BAND_SLOTS_MIN, BAND_SLOTS_MAX)
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    // Euclid: at most ~47 rounds for u32 operands.
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Division of a `u32` by a fixed divisor with one multiply: `ceil(2^64 / d)` times `n`,
/// high 64 bits, is `n / d` for every 32-bit `n` and `d` (Lemire, Kaser, Kurz, "Faster
/// remainder by direct computation", 2019). A hardware divide would cost ~25 cycles on each
/// lookup.
#[derive(Clone, Copy, Debug)]
struct Divisor {
    divisor: u32,
    /// 0 for a divisor of 1 (whose magic, 2^64, does not fit).
    magic: u64,
}

impl Divisor {
    fn new(divisor: u32) -> Self {
        assert!(divisor > 0);
        let magic = if divisor == 1 {
            0
        } else {
            u64::MAX / u64::from(divisor) + 1
        };
        Divisor { divisor, magic }
    }

    #[inline]
    fn divide(self, n: u32) -> u32 {
        if self.magic == 0 {
            n
        } else {
            ((u128::from(self.magic) * u128::from(n)) >> 64) as u32
        }
    }
}

pub(crate) struct SideIndex {
    side: Side,
    /// Levels this side may hold (band and overflow together).
    limit: u32,
    /// The first key ever opened on this side, and the gcd of every later key's distance to
    /// it (0 while only one key has been seen).
    anchor: Option<u32>,
    unit: u32,
    /// Band: slot `s` is key `lo + s * step`, for `s < width`.
    width: u32,
    lo: u32,
    step: Divisor,
    /// `width * step`: keys `lo .. lo + span` are the window.
    span: u64,
    slots: Vec<u32>,
    bits: Bitmap,
    band_len: u32,
    /// Levels whose keys are outside the window, ascending.
    overflow: Ladder,
    /// Overflow operations near the best since the last relayout.
    touches: u32,
    /// The best level (`level == NIL` when the side is empty).
    best: Rung,
    #[cfg(test)]
    relayouts: u32,
}

const NO_BEST: Rung = Rung { key: 0, level: NIL };

impl SideIndex {
    /// All tables are allocated and written here; nothing grows later.
    pub fn new(side: Side, level_capacity: u32, width: u32) -> Self {
        assert!(level_capacity > 0);
        assert!(
            (64..=BAND_SLOTS_MAX).contains(&width) && width.is_power_of_two(),
            "band width must be a power of two in 64..=2^16"
        );
        SideIndex {
            side,
            limit: level_capacity,
            anchor: None,
            unit: 0,
            width,
            lo: 0,
            step: Divisor::new(1),
            span: u64::from(width),
            slots: vec![NIL; width as usize],
            bits: Bitmap::new(width),
            band_len: 0,
            overflow: Ladder::new(level_capacity),
            touches: 0,
            best: NO_BEST,
            #[cfg(test)]
            relayouts: 0,
        }
    }

    #[inline]
    fn key(&self, price: Price) -> u32 {
        match self.side {
            Side::Buy => price.0,
            Side::Sell => u32::MAX - price.0,
        }
    }

    #[inline]
    pub fn price(&self, key: u32) -> Price {
        match self.side {
            Side::Buy => Price(key),
            Side::Sell => Price(u32::MAX - key),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.band_len as usize + self.overflow.len()
    }

    #[inline]
    pub fn is_full(&self) -> bool {
        self.len() == self.limit as usize
    }

    /// Bytes of this side's tables (all allocated at construction).
    pub fn allocated_bytes(&self) -> usize {
        use std::mem::size_of;
        self.slots.len() * size_of::<u32>()
            + self.bits.words() * size_of::<u64>()
            + self.overflow.capacity() as usize * size_of::<Rung>()
    }

    #[inline]
    pub fn best(&self) -> Option<Rung> {
        (self.best.level != NIL).then_some(self.best)
    }

    /// The slot of `key` if it is inside the window and on the lattice.
    #[inline]
    fn band_slot(&self, key: u32) -> Option<u32> {
        let offset = key.wrapping_sub(self.lo);
        if key < self.lo || u64::from(offset) >= self.span {
            return None;
        }
        let slot = self.step.divide(offset);
        (slot * self.step.divisor == offset).then_some(slot)
    }

    #[inline]
    fn key_of_slot(&self, slot: u32) -> u32 {
        self.lo + slot * self.step.divisor
    }

    /// The level resting at `price`, if any.
    #[inline]
    pub fn find(&self, price: Price) -> Option<u32> {
        let key = self.key(price);
        if let Some(slot) = self.band_slot(key) {
            let level = self.slots[slot as usize];
            return (level != NIL).then_some(level);
        }
        if self.overflow.is_empty() {
            return None;
        }
        let at = self.overflow.find(key).ok()?;
        Some(self.overflow.get(at).level)
    }

    /// Add a price that is not on this side yet, resting on `level`.
    pub fn insert(&mut self, price: Price, level: u32) {
        assert!(!self.is_full(), "price index capacity exceeded");
        assert!(level != NIL);
        let key = self.key(price);
        let new_best = self.best.level == NIL || key > self.best.key;
        // A key on a band slot is on the lattice once the step is known: no gcd (divisions)
        // on the common path.
        let mut slot = self.band_slot(key);
        let unit_changed = (slot.is_none() || self.unit == 0) && self.learn(key);
        if unit_changed || (self.band_len == 0 && slot.is_none()) {
            self.relayout(if new_best { key } else { self.best.key });
            slot = self.band_slot(key);
        }
        if new_best {
            self.best = Rung { key, level };
        }
        match slot {
            Some(slot) => self.band_set(slot, level),
            None => {
                let at = self
                    .overflow
                    .find(key)
                    .expect_err("price already on the index");
                self.overflow.insert(at, Rung { key, level });
                self.touched(key);
            }
        }
    }

    /// Remove a price that is on this side; returns its level.
    pub fn remove(&mut self, price: Price) -> u32 {
        self.remove_key(self.key(price))
    }

    /// Remove the best price (the matching loop empties levels from the top).
    pub fn pop_best(&mut self) -> Option<Rung> {
        let best = self.best()?;
        self.remove_key(best.key);
        Some(best)
    }

    fn remove_key(&mut self, key: u32) -> u32 {
        let in_band = self
            .band_slot(key)
            .filter(|&slot| self.slots[slot as usize] != NIL);
        let level = match in_band {
            Some(slot) => self.band_clear(slot),
            None => {
                let at = self.overflow.find(key).expect("price on the index");
                self.overflow.remove(at).level
            }
        };
        if key == self.best.key {
            self.best = self.find_best();
        }
        if in_band.is_none() {
            self.touched(key);
        }
        level
    }

    /// Prices from best to worst: overflow above the window, the band, overflow below.
    pub fn best_first(&self) -> BestFirst<'_> {
        let split = self.overflow.count_below(u64::from(self.lo));
        BestFirst {
            index: self,
            phase: Phase::Above,
            cursor: self.overflow.len(),
            split,
            band_next: self.bits.highest(),
        }
    }

    /// Extend the lattice with `key`; true if its step shrank (the band must be laid out
    /// again).
    fn learn(&mut self, key: u32) -> bool {
        let Some(anchor) = self.anchor else {
            self.anchor = Some(key);
            return false;
        };
        let unit = gcd(self.unit, key.abs_diff(anchor));
        if unit == self.unit {
            return false;
        }
        self.unit = unit;
        true
    }

    fn find_best(&self) -> Rung {
        let band = self.bits.highest().map(|slot| Rung {
            key: self.key_of_slot(slot),
            level: self.slots[slot as usize],
        });
        match (band, self.overflow.best()) {
            (Some(b), Some(o)) => {
                if o.key > b.key {
                    o
                } else {
                    b
                }
            }
            (Some(b), None) => b,
            (None, Some(o)) => o,
            (None, None) => NO_BEST,
        }
    }

    #[inline]
    fn band_set(&mut self, slot: u32, level: u32) {
        let entry = &mut self.slots[slot as usize];
        assert!(*entry == NIL, "band slot already holds a level");
        *entry = level;
        self.bits.set(slot);
        self.band_len += 1;
    }

    #[inline]
    fn band_clear(&mut self, slot: u32) -> u32 {
        let level = std::mem::replace(&mut self.slots[slot as usize], NIL);
        debug_assert!(level != NIL);
        self.bits.clear(slot);
        self.band_len -= 1;
        level
    }

    /// An overflow operation at `key`: counted when near the best (the window no longer
    /// covers where the book is active), and enough of them lay the band out again.
    fn touched(&mut self, key: u32) {
        if self.best.level == NIL {
            return;
        }
        let reach = u64::from(self.width / 2) * u64::from(self.step.divisor);
        if u64::from(key) + reach < u64::from(self.best.key) {
            return;
        }
        self.touches += 1;
        if self.touches >= TOUCHES_MIN.max(self.len() as u32) {
            self.relayout(self.best.key);
        }
    }

    /// Lay the window out again around `centre` (a key on the lattice) with the current
    /// step: every band level goes to the overflow, then every overflow level inside the new
    /// window comes back. O(levels + width / 64); no allocation (the overflow holds every
    /// level the side may have).
    fn relayout(&mut self, centre: u32) {
        self.flush_band();
        let step = self.unit.max(1);
        if step != self.step.divisor {
            self.step = Divisor::new(step);
        }
        self.span = u64::from(self.width) * u64::from(step);
        // Three quarters of the window below the centre (depth), a quarter above.
        let below = (self.width - self.width / 4).min(centre / step);
        self.lo = centre - below * step;
        let from = self.overflow.count_below(u64::from(self.lo));
        let to = self.overflow.count_below(u64::from(self.lo) + self.span);
        for at in from..to {
            let rung = self.overflow.get(at);
            let slot = self
                .band_slot(rung.key)
                .expect("every key on the book is on the lattice");
            self.band_set(slot, rung.level);
        }
        self.overflow.remove_range(from, to);
        self.touches = 0;
        #[cfg(test)]
        {
            self.relayouts += 1;
        }
    }

    /// Move every band level into the overflow, in key order (between the overflow levels
    /// below the window and those above it).
    fn flush_band(&mut self) {
        let count = self.band_len as usize;
        if count == 0 {
            return;
        }
        let at = self.overflow.count_below(u64::from(self.lo));
        self.overflow.open_gap(at, count);
        let mut next = self.bits.highest();
        let mut moved = 0;
        while let Some(slot) = next {
            moved += 1;
            assert!(moved <= count, "band bitmap out of step with its count");
            let rung = Rung {
                key: self.key_of_slot(slot),
                level: self.slots[slot as usize],
            };
            self.overflow.set(at + count - moved, rung);
            next = self.bits.highest_below(slot);
            self.band_clear(slot);
        }
        assert_eq!(moved, count, "band bitmap out of step with its count");
    }

    /// Check every invariant (tests): band slots and bits agree, the overflow is sorted and
    /// outside the window, every key is on the lattice, the cached best is the best.
    #[cfg(test)]
    pub fn assert_consistent(&self) {
        let mut in_band = 0;
        for slot in 0..self.width {
            let level = self.slots[slot as usize];
            assert_eq!(level != NIL, self.bits.is_set(slot), "slot {slot}");
            if level != NIL {
                in_band += 1;
            }
        }
        assert_eq!(in_band, self.band_len);
        let over = self.overflow.slice(0, self.overflow.len());
        assert!(
            over.windows(2).all(|w| w[0].key < w[1].key),
            "overflow sorted"
        );
        for rung in over {
            let key = u64::from(rung.key);
            assert!(
                key < u64::from(self.lo) || key >= u64::from(self.lo) + self.span,
                "overflow key {key} inside the window"
            );
        }
        if let Some(anchor) = self.anchor {
            let keys = over
                .iter()
                .map(|r| r.key)
                .chain(self.best_first().map(|r| r.key));
            for key in keys {
                let distance = key.abs_diff(anchor);
                assert!(
                    distance == 0 || (self.unit != 0 && distance % self.unit == 0),
                    "key {key} off the lattice"
                );
            }
        }
        assert_eq!(self.best, self.find_best(), "cached best");
        assert!(self.len() <= self.limit as usize);
        let order: Vec<u32> = self.best_first().map(|r| r.key).collect();
        assert_eq!(order.len(), self.len());
        assert!(order.windows(2).all(|w| w[0] > w[1]), "best first");
    }
}

#[derive(Clone, Copy)]
enum Phase {
    Above,
    Band,
    Below,
}

/// Iterator over one side's levels, best first. Bounded by the side's level count.
pub(crate) struct BestFirst<'a> {
    index: &'a SideIndex,
    phase: Phase,
    /// Next overflow position (exclusive) while walking the overflow downwards.
    cursor: usize,
    /// Overflow positions below this are below the window.
    split: usize,
    band_next: Option<u32>,
}

impl Iterator for BestFirst<'_> {
    type Item = Rung;

    fn next(&mut self) -> Option<Rung> {
        let index = self.index;
        loop {
            match self.phase {
                Phase::Above => {
                    if self.cursor > self.split {
                        self.cursor -= 1;
                        return Some(index.overflow.get(self.cursor));
                    }
                    self.phase = Phase::Band;
                }
                Phase::Band => {
                    if let Some(slot) = self.band_next {
                        self.band_next = index.bits.highest_below(slot);
                        return Some(Rung {
                            key: index.key_of_slot(slot),
                            level: index.slots[slot as usize],
                        });
                    }
                    self.phase = Phase::Below;
                    self.cursor = self.split;
                }
                Phase::Below => {
                    if self.cursor == 0 {
                        return None;
                    }
                    self.cursor -= 1;
                    return Some(index.overflow.get(self.cursor));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
