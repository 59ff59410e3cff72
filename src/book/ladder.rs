//! Sorted price index of one side of a book: `(key, level)` with the best price last.
//!
//! The key is the price for bids and `u32::MAX - price` for asks, so on both sides a larger
//! key is a better price and the best level is the last entry. Activity concentrates near the
//! top of the book, so lookups scan a few entries from the end before falling back to a binary
//! search, and inserting or removing near the top moves only the entries above it.

use crate::types::{Price, Side};

/// Entries scanned linearly from the best end before switching to binary search.
const LINEAR_SCAN_MAX: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rung {
    pub key: u32,
    pub level: u32,
}

pub(crate) struct Ladder {
    rungs: Vec<Rung>,
    /// Configured bound; `rungs` never grows past it, so never reallocates.
    limit: usize,
    side: Side,
}

impl Ladder {
    pub fn new(side: Side, capacity: u32) -> Self {
        assert!(capacity > 0);
        Ladder {
            rungs: Vec::with_capacity(capacity as usize),
            limit: capacity as usize,
            side,
        }
    }

    #[inline]
    pub fn key(&self, price: Price) -> u32 {
        match self.side {
            Side::Buy => price.0,
            Side::Sell => u32::MAX - price.0,
        }
    }

    #[inline]
    pub fn best(&self) -> Option<Rung> {
        self.rungs.last().copied()
    }

    #[inline]
    pub fn get(&self, index: usize) -> Rung {
        self.rungs[index]
    }

    pub fn capacity(&self) -> u32 {
        self.limit as u32
    }

    pub fn len(&self) -> usize {
        self.rungs.len()
    }

    pub fn is_full(&self) -> bool {
        self.rungs.len() == self.limit
    }

    /// `Ok(index)` of the rung with `key`, or `Err(index)` where it would be inserted.
    #[inline]
    pub fn find(&self, key: u32) -> Result<usize, usize> {
        let len = self.rungs.len();
        let mut index = len;
        let mut steps = 0;
        while index > 0 && steps < LINEAR_SCAN_MAX {
            let rung = self.rungs[index - 1];
            if rung.key == key {
                return Ok(index - 1);
            }
            if rung.key < key {
                return Err(index);
            }
            index -= 1;
            steps += 1;
        }
        if index == 0 {
            return Err(0);
        }
        self.rungs[..index].binary_search_by(|rung| rung.key.cmp(&key))
    }

    pub fn insert(&mut self, index: usize, rung: Rung) {
        assert!(!self.is_full(), "ladder capacity exceeded");
        debug_assert!(index == 0 || self.rungs[index - 1].key < rung.key);
        debug_assert!(index == self.rungs.len() || self.rungs[index].key > rung.key);
        self.rungs.insert(index, rung);
    }

    pub fn remove(&mut self, index: usize) -> Rung {
        self.rungs.remove(index)
    }

    /// Pop the best rung (cheapest removal: the matching loop empties levels from the top).
    pub fn pop_best(&mut self) -> Option<Rung> {
        self.rungs.pop()
    }

    /// Rungs from best to worst.
    pub fn best_first(&self) -> impl Iterator<Item = Rung> + '_ {
        self.rungs.iter().rev().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder_with(side: Side, prices: &[u32]) -> Ladder {
        let mut ladder = Ladder::new(side, 64);
        for (i, &p) in prices.iter().enumerate() {
            let key = ladder.key(Price(p));
            let at = ladder.find(key).unwrap_err();
            ladder.insert(
                at,
                Rung {
                    key,
                    level: i as u32,
                },
            );
        }
        ladder
    }

    #[test]
    fn bids_best_is_highest_asks_best_is_lowest() {
        let bids = ladder_with(Side::Buy, &[100, 300, 200]);
        assert_eq!(bids.best().unwrap().level, 1);
        let asks = ladder_with(Side::Sell, &[100, 300, 200]);
        assert_eq!(asks.best().unwrap().level, 0);
    }

    #[test]
    fn find_works_past_the_linear_window() {
        let prices: Vec<u32> = (1..=40).map(|p| p * 10).collect();
        let ladder = ladder_with(Side::Buy, &prices);
        for (i, &p) in prices.iter().enumerate() {
            let at = ladder.find(ladder.key(Price(p))).unwrap();
            assert_eq!(at, i);
            assert_eq!(ladder.find(ladder.key(Price(p + 1))), Err(i + 1));
        }
        assert_eq!(ladder.find(ladder.key(Price(5))), Err(0));
        let order: Vec<u32> = ladder.best_first().map(|r| r.level).collect();
        assert_eq!(order[0], 39);
        assert_eq!(order[39], 0);
    }
}
