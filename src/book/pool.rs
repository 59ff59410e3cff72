//! Fixed-capacity slab of order slots with an intrusive free list.

use crate::types::Side;

/// Index of "no slot" in every intrusive link.
pub(crate) const NIL: u32 = u32::MAX;

/// Handle of a resting order: its slot index in the book's pool. Valid from insertion until
/// the order leaves the book (fill, cancel, expiry); the slot is then reused.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct OrderHandle(pub u32);

/// One order slot. Links are slot indices; `NIL` ends a list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<T> {
    /// Previous / next order in the level queue (next doubles as the free-list link).
    pub prev: u32,
    pub next: u32,
    /// Level this order rests on.
    pub level: u32,
    /// Shares still open.
    pub leaves: u32,
    /// Previous / next order in the same expiry bucket.
    pub expiry_prev: u32,
    pub expiry_next: u32,
    /// Expiry deadline in milliseconds since the day epoch; 0 = no expiry.
    pub deadline_ms: u32,
    pub side: Side,
    pub hidden: bool,
    pub live: bool,
    pub payload: T,
}

impl<T: Copy + Default> Slot<T> {
    fn vacant(next: u32) -> Self {
        Slot {
            prev: NIL,
            next,
            level: NIL,
            leaves: 0,
            expiry_prev: NIL,
            expiry_next: NIL,
            deadline_ms: 0,
            side: Side::Buy,
            hidden: false,
            live: false,
            payload: T::default(),
        }
    }
}

/// The slab: all slots allocated at construction, never grown.
pub(crate) struct Pool<T> {
    pub slots: Vec<Slot<T>>,
    free_head: u32,
    live_count: u32,
}

impl<T: Copy + Default> Pool<T> {
    pub fn new(capacity: u32) -> Self {
        assert!(
            capacity > 0 && capacity < NIL,
            "order capacity out of range"
        );
        let slots = (0..capacity)
            .map(|i| Slot::vacant(if i + 1 < capacity { i + 1 } else { NIL }))
            .collect::<Vec<_>>();
        Pool {
            slots,
            free_head: 0,
            live_count: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    pub fn live_count(&self) -> u32 {
        self.live_count
    }

    pub fn is_full(&self) -> bool {
        self.free_head == NIL
    }

    /// Take a free slot; the caller fills every field. `None` when full.
    pub fn take(&mut self) -> Option<u32> {
        let index = self.free_head;
        if index == NIL {
            return None;
        }
        let slot = &mut self.slots[index as usize];
        debug_assert!(!slot.live);
        self.free_head = slot.next;
        slot.live = true;
        self.live_count += 1;
        Some(index)
    }

    /// Return a slot to the free list.
    pub fn give_back(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        assert!(slot.live, "double free of order slot {index}");
        *slot = Slot::vacant(self.free_head);
        self.free_head = index;
        self.live_count -= 1;
    }

    #[inline]
    pub fn get(&self, index: u32) -> &Slot<T> {
        &self.slots[index as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut Slot<T> {
        &mut self.slots[index as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_until_full_then_reuse() {
        let mut pool: Pool<u64> = Pool::new(3);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        let c = pool.take().unwrap();
        assert!(pool.is_full());
        assert_eq!(pool.take(), None);
        assert_eq!(pool.live_count(), 3);
        pool.give_back(b);
        assert_eq!(pool.take(), Some(b));
        assert_ne!(a, c);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let mut pool: Pool<()> = Pool::new(2);
        let a = pool.take().unwrap();
        pool.give_back(a);
        pool.give_back(a);
    }
}
