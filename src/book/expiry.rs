//! Expiry wheel: orders with a time-to-live, bucketed by the second of their deadline.
//!
//! Buckets are intrusive doubly linked lists through the order slots, so adding, removing
//! and expiring an order is O(1) and needs no memory beyond the slots. The wheel has a fixed
//! number of one-second buckets; a deadline further away than one revolution shares a bucket
//! with nearer ones and is skipped until the walk reaches its own second. Orders expire in
//! (deadline second, insertion order): deterministic.

use super::pool::{NIL, Pool};

/// One-second buckets: 4096 s (68 min) per revolution, 16 KiB per book.
pub(crate) const WHEEL_BUCKETS: u32 = 4096;
const MS_PER_SECOND: u32 = 1000;

pub(crate) struct Wheel {
    heads: Vec<u32>,
    tails: Vec<u32>,
    /// Every bucket for seconds below this has been fully drained of due orders.
    next_second: u32,
    count: u32,
}

impl Wheel {
    pub fn new() -> Self {
        Wheel {
            heads: vec![NIL; WHEEL_BUCKETS as usize],
            tails: vec![NIL; WHEEL_BUCKETS as usize],
            next_second: 0,
            count: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.count
    }

    fn bucket(deadline_ms: u32) -> usize {
        ((deadline_ms / MS_PER_SECOND) % WHEEL_BUCKETS) as usize
    }

    pub fn link<T: Copy + Default>(&mut self, pool: &mut Pool<T>, index: u32) {
        let deadline_ms = pool.get(index).deadline_ms;
        assert!(deadline_ms > 0);
        let bucket = Self::bucket(deadline_ms);
        let tail = self.tails[bucket];
        {
            let slot = pool.get_mut(index);
            slot.expiry_prev = tail;
            slot.expiry_next = NIL;
        }
        if tail == NIL {
            self.heads[bucket] = index;
        } else {
            pool.get_mut(tail).expiry_next = index;
        }
        self.tails[bucket] = index;
        self.count += 1;
    }

    pub fn unlink<T: Copy + Default>(&mut self, pool: &mut Pool<T>, index: u32) {
        let (prev, next, deadline_ms) = {
            let slot = pool.get(index);
            (slot.expiry_prev, slot.expiry_next, slot.deadline_ms)
        };
        assert!(deadline_ms > 0);
        let bucket = Self::bucket(deadline_ms);
        match prev {
            NIL => self.heads[bucket] = next,
            p => pool.get_mut(p).expiry_next = next,
        }
        match next {
            NIL => self.tails[bucket] = prev,
            n => pool.get_mut(n).expiry_prev = prev,
        }
        self.count -= 1;
    }

    /// The first order due at `now_ms` in deterministic order (deadline second, then
    /// insertion), as its slot index. The caller removes it (which unlinks it) before asking
    /// again.
    ///
    /// Seconds are walked one at a time from the first one not yet drained, and a bucket only
    /// yields entries whose deadline second has been reached, so entries that share a bucket
    /// from different revolutions still come out oldest first, however long the gap between
    /// two calls. The walk is bounded by the seconds elapsed since the previous call.
    pub fn first_due<T: Copy + Default>(&mut self, pool: &Pool<T>, now_ms: u32) -> Option<u32> {
        let now_second = now_ms / MS_PER_SECOND;
        if self.count == 0 {
            self.next_second = self.next_second.max(now_second);
            return None;
        }
        while self.next_second <= now_second {
            if let Some(index) = self.due_in_bucket(pool, self.next_second, now_ms) {
                return Some(index);
            }
            if self.next_second == now_second {
                break;
            }
            self.next_second += 1;
        }
        None
    }

    fn due_in_bucket<T: Copy + Default>(
        &self,
        pool: &Pool<T>,
        second: u32,
        now_ms: u32,
    ) -> Option<u32> {
        let mut index = self.heads[(second % WHEEL_BUCKETS) as usize];
        let mut steps = 0u32;
        while index != NIL {
            let slot = pool.get(index);
            // Only entries of this revolution: a later one waits for the walk to reach it.
            if slot.deadline_ms / MS_PER_SECOND <= second && slot.deadline_ms <= now_ms {
                return Some(index);
            }
            index = slot.expiry_next;
            steps += 1;
            assert!(steps <= pool.capacity(), "expiry bucket cycle");
        }
        None
    }
}
