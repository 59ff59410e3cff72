//! Hierarchical bitmap over a fixed number of slots (64-ary, three layers): set and clear in
//! O(1), highest set slot and highest set slot below a given one in three word reads.
//!
//! Layer 0 has one bit per slot; bit `j` of word `i` in layer 1 says whether word
//! `64 i + j` of layer 0 is non-zero; the single top word says the same of layer 1. Three
//! layers cover 64^3 = 262,144 slots, more than any band the book is built with.

/// Slots one bitmap can cover.
pub(crate) const BITMAP_SLOTS_MAX: u32 = 1 << 18;

const WORD_BITS: u32 = 64;

pub(crate) struct Bitmap {
    leaf: Vec<u64>,
    mid: Vec<u64>,
    top: u64,
    slots: u32,
}

#[inline]
fn bit(index: u32) -> u64 {
    1u64 << (index % WORD_BITS)
}

/// Index of the highest set bit of a non-zero word.
#[inline]
fn highest_bit(word: u64) -> u32 {
    debug_assert!(word != 0);
    WORD_BITS - 1 - word.leading_zeros()
}

/// The bits of `word` strictly below bit `index % 64`.
#[inline]
fn below(word: u64, index: u32) -> u64 {
    word & (bit(index) - 1)
}

/// Zeroed words whose pages are really written: a zeroed allocation may be mapped lazily and
/// fault on its first write on the hot path.
/// (`black_box` hides that the values are zero, so the allocation is not turned into a
/// zeroed one.)
fn written_zeroes(words: usize) -> Vec<u64> {
    (0..words).map(|_| std::hint::black_box(0u64)).collect()
}

impl Bitmap {
    /// All words are written here, so their pages are touched at start-up, not on first use.
    pub fn new(slots: u32) -> Self {
        assert!(
            slots >= WORD_BITS && slots.is_power_of_two() && slots <= BITMAP_SLOTS_MAX,
            "bitmap slots must be a power of two in 64..=2^18"
        );
        let leaf_words = slots / WORD_BITS;
        let mid_words = leaf_words.div_ceil(WORD_BITS);
        Bitmap {
            leaf: written_zeroes(leaf_words as usize),
            mid: written_zeroes(mid_words as usize),
            top: 0,
            slots,
        }
    }

    pub fn words(&self) -> usize {
        self.leaf.len() + self.mid.len() + 1
    }

    #[cfg(test)]
    pub fn is_set(&self, slot: u32) -> bool {
        self.leaf[(slot / WORD_BITS) as usize] & bit(slot) != 0
    }

    #[inline]
    pub fn set(&mut self, slot: u32) {
        debug_assert!(slot < self.slots);
        let word = slot / WORD_BITS;
        self.leaf[word as usize] |= bit(slot);
        self.mid[(word / WORD_BITS) as usize] |= bit(word);
        self.top |= bit(word / WORD_BITS);
    }

    #[inline]
    pub fn clear(&mut self, slot: u32) {
        debug_assert!(slot < self.slots);
        let word = slot / WORD_BITS;
        let leaf = &mut self.leaf[word as usize];
        *leaf &= !bit(slot);
        if *leaf != 0 {
            return;
        }
        let mid_word = word / WORD_BITS;
        let mid = &mut self.mid[mid_word as usize];
        *mid &= !bit(word);
        if *mid == 0 {
            self.top &= !bit(mid_word);
        }
    }

    /// The highest set slot, if any.
    #[inline]
    pub fn highest(&self) -> Option<u32> {
        if self.top == 0 {
            return None;
        }
        Some(self.highest_under_mid(highest_bit(self.top)))
    }

    /// The highest set slot strictly below `slot`, if any.
    #[inline]
    pub fn highest_below(&self, slot: u32) -> Option<u32> {
        debug_assert!(slot < self.slots);
        let word = slot / WORD_BITS;
        let here = below(self.leaf[word as usize], slot);
        if here != 0 {
            return Some(word * WORD_BITS + highest_bit(here));
        }
        let mid_word = word / WORD_BITS;
        let mids = below(self.mid[mid_word as usize], word);
        if mids != 0 {
            return Some(self.highest_under_leaf(mid_word * WORD_BITS + highest_bit(mids)));
        }
        let tops = below(self.top, mid_word);
        if tops != 0 {
            return Some(self.highest_under_mid(highest_bit(tops)));
        }
        None
    }

    /// Highest set slot under a non-zero layer-1 word.
    #[inline]
    fn highest_under_mid(&self, mid_word: u32) -> u32 {
        let mid = self.mid[mid_word as usize];
        self.highest_under_leaf(mid_word * WORD_BITS + highest_bit(mid))
    }

    /// Highest set slot in a non-zero layer-0 word.
    #[inline]
    fn highest_under_leaf(&self, word: u32) -> u32 {
        word * WORD_BITS + highest_bit(self.leaf[word as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn empty_then_edges() {
        let mut b = Bitmap::new(1 << 18);
        assert_eq!(b.highest(), None);
        b.set(0);
        assert_eq!(b.highest(), Some(0));
        assert_eq!(b.highest_below(0), None);
        b.set((1 << 18) - 1);
        assert_eq!(b.highest(), Some((1 << 18) - 1));
        assert_eq!(b.highest_below((1 << 18) - 1), Some(0));
        b.clear((1 << 18) - 1);
        assert_eq!(b.highest(), Some(0));
        b.clear(0);
        assert_eq!(b.highest(), None);
        assert_eq!(b.top, 0);
        assert!(b.mid.iter().all(|&w| w == 0));
    }

    #[test]
    fn smallest_bitmap_is_one_word() {
        let mut b = Bitmap::new(64);
        assert_eq!(b.words(), 3);
        b.set(63);
        b.set(5);
        assert_eq!(b.highest(), Some(63));
        assert_eq!(b.highest_below(63), Some(5));
        assert_eq!(b.highest_below(5), None);
    }

    proptest! {
        #[test]
        fn matches_a_btreeset(
            log_slots in 6u32..=18,
            ops in proptest::collection::vec((any::<bool>(), any::<u32>()), 1..400),
        ) {
            let slots = 1u32 << log_slots;
            // Cluster half the slots near a random point so words fill up and empty.
            let mut b = Bitmap::new(slots);
            let mut model = BTreeSet::new();
            for (set, raw) in ops {
                let slot = if raw % 2 == 0 { raw % slots } else { (raw % 200).min(slots - 1) };
                if set {
                    b.set(slot);
                    model.insert(slot);
                } else {
                    b.clear(slot);
                    model.remove(&slot);
                }
                prop_assert_eq!(b.highest(), model.iter().next_back().copied());
                prop_assert_eq!(b.is_set(slot), model.contains(&slot));
                prop_assert_eq!(b.highest_below(slot), model.range(..slot).next_back().copied());
                let probe = raw.rotate_left(7) % slots;
                prop_assert_eq!(b.highest_below(probe), model.range(..probe).next_back().copied());
            }
        }
    }
}
