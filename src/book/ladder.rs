//! Sorted run of `(key, level)` rungs, ascending by key (so the best, the largest key, is
//! last). The level index keeps here the levels whose prices fall outside its band.
//!
//! A larger key is a better price on both sides (see `index.rs`). Lookups scan a few entries
//! from the best end before falling back to a binary search, and inserting or removing near
//! the best end moves only the entries above it.

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
}

impl Ladder {
    pub fn new(capacity: u32) -> Self {
        assert!(capacity > 0);
        // Written in full once (a non-zero filler, so not a lazily zeroed allocation), then
        // emptied: the pages are touched at start-up, not on the hot path.
        let mut rungs = vec![
            Rung {
                key: u32::MAX,
                level: u32::MAX,
            };
            capacity as usize
        ];
        rungs.clear();
        Ladder {
            rungs,
            limit: capacity as usize,
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

    #[inline]
    pub fn set(&mut self, index: usize, rung: Rung) {
        self.rungs[index] = rung;
    }

    pub fn capacity(&self) -> u32 {
        self.limit as u32
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.rungs.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rungs.is_empty()
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

    /// How many rungs have a key below `bound`.
    pub fn count_below(&self, bound: u64) -> usize {
        self.rungs.partition_point(|r| u64::from(r.key) < bound)
    }

    pub fn insert(&mut self, index: usize, rung: Rung) {
        assert!(self.rungs.len() < self.limit, "ladder capacity exceeded");
        debug_assert!(index == 0 || self.rungs[index - 1].key < rung.key);
        debug_assert!(index == self.rungs.len() || self.rungs[index].key > rung.key);
        self.rungs.insert(index, rung);
    }

    pub fn remove(&mut self, index: usize) -> Rung {
        self.rungs.remove(index)
    }

    /// Make room for `count` rungs at `index` (their contents are for the caller to `set`).
    pub fn open_gap(&mut self, index: usize, count: usize) {
        let len = self.rungs.len();
        assert!(
            index <= len && len + count <= self.limit,
            "ladder gap out of range"
        );
        let filler = Rung {
            key: u32::MAX,
            level: u32::MAX,
        };
        // Within capacity: never reallocates.
        self.rungs.resize(len + count, filler);
        self.rungs.copy_within(index..len, index + count);
    }

    /// Drop the rungs `from..to`.
    pub fn remove_range(&mut self, from: usize, to: usize) {
        let len = self.rungs.len();
        assert!(from <= to && to <= len, "ladder range out of range");
        self.rungs.copy_within(to..len, from);
        self.rungs.truncate(len - (to - from));
    }

    /// The rungs `from..to`, ascending.
    #[cfg(test)]
    pub fn slice(&self, from: usize, to: usize) -> &[Rung] {
        &self.rungs[from..to]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder_with(keys: &[u32]) -> Ladder {
        let mut ladder = Ladder::new(64);
        for (i, &key) in keys.iter().enumerate() {
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

    fn keys(ladder: &Ladder) -> Vec<u32> {
        ladder
            .slice(0, ladder.len())
            .iter()
            .map(|r| r.key)
            .collect()
    }

    #[test]
    fn best_is_the_largest_key() {
        let ladder = ladder_with(&[100, 300, 200]);
        assert_eq!(ladder.best().unwrap().level, 1);
    }

    #[test]
    fn find_works_past_the_linear_window() {
        let prices: Vec<u32> = (1..=40).map(|p| p * 10).collect();
        let ladder = ladder_with(&prices);
        for (i, &p) in prices.iter().enumerate() {
            assert_eq!(ladder.find(p), Ok(i));
            assert_eq!(ladder.find(p + 1), Err(i + 1));
        }
        assert_eq!(ladder.find(5), Err(0));
        assert_eq!(ladder.best().unwrap().level, 39);
    }

    #[test]
    fn gaps_and_ranges() {
        let mut ladder = ladder_with(&[10, 20, 60, 70]);
        assert_eq!(ladder.count_below(20), 1);
        assert_eq!(ladder.count_below(21), 2);
        assert_eq!(ladder.count_below(u64::from(u32::MAX) + 1), 4);
        ladder.open_gap(2, 3);
        for (i, key) in [30, 40, 50].into_iter().enumerate() {
            ladder.set(2 + i, Rung { key, level: 0 });
        }
        assert_eq!(keys(&ladder), vec![10, 20, 30, 40, 50, 60, 70]);
        ladder.remove_range(1, 4);
        assert_eq!(keys(&ladder), vec![10, 50, 60, 70]);
        ladder.remove_range(4, 4);
        ladder.open_gap(4, 0);
        assert_eq!(keys(&ladder), vec![10, 50, 60, 70]);
    }
}
