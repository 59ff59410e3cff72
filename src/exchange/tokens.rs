//! Per-account order tokens: every token an account used today, and where its order rests.
//!
//! A token stays in the table for the whole day, live or not, because a reused token must be
//! ignored (benign resend, PROTOCOLS.md 2.6). Each token gets a **slot**, its position in a
//! fixed array of (token, state); a resting order carries its slot, so marking a token live or
//! dead, or naming the token of a maker, never hashes. Only looking a token up by its bytes
//! (Enter dedupe, Cancel, Replace) goes through the hash index, which holds slot numbers.
//!
//! Both are sized once from the configured limit and never grow. The hasher is foldhash with a
//! fixed seed: fast on 14-byte keys and deterministic (outputs never depend on table order;
//! the digest sorts). Tables are per account, so an account that chooses colliding tokens
//! slows only its own lookups.

use crate::book::OrderHandle;
use crate::types::Token;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Fixed seed: the core reads no randomness.
const SEED: u64 = 0x626f_7572_7365_2131;

/// Where a token's order is, if it is still on a book.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TokenState {
    /// Resting: symbol index and book handle.
    Live { symbol: u16, handle: OrderHandle },
    /// Used today, no longer (or never) on a book.
    Dead,
}

pub(crate) struct TokenTable {
    /// Slot numbers, hashed by their token.
    index: HashTable<u32>,
    /// Slot -> (token, state); slots are handed out in order and never freed.
    entries: Vec<(Token, TokenState)>,
    hasher: foldhash::fast::FixedState,
    limit: usize,
}

impl TokenTable {
    pub fn new(limit: u32) -> Self {
        let limit = limit as usize;
        let mut table = TokenTable {
            index: HashTable::with_capacity(limit),
            entries: Vec::with_capacity(limit),
            hasher: foldhash::fast::FixedState::with_seed(SEED),
            limit,
        };
        table.prefault();
        table
    }

    /// Touch every page now, so the first day's inserts take no page faults.
    fn prefault(&mut self) {
        let hasher = self.hasher.clone();
        for slot in 0..self.limit as u32 {
            self.index.insert_unique(
                u64::from(slot).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                slot,
                |&s| hasher.hash_one(s),
            );
        }
        self.index.clear();
        self.entries
            .resize(self.limit, (Token::SPACES, TokenState::Dead));
        self.entries.clear();
    }

    fn hash(&self, token: &Token) -> u64 {
        self.hasher.hash_one(token)
    }

    /// The slot of a token used today.
    #[inline]
    pub fn find(&self, token: &Token) -> Option<u32> {
        let entries = &self.entries;
        self.index
            .find(self.hash(token), |&slot| entries[slot as usize].0 == *token)
            .copied()
    }

    #[inline]
    pub fn get(&self, token: &Token) -> Option<(u32, TokenState)> {
        let slot = self.find(token)?;
        Some((slot, self.entries[slot as usize].1))
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.limit
    }

    /// Record a new token; returns its slot. The caller checked that it is unused and that
    /// there is room.
    pub fn insert(&mut self, token: Token, state: TokenState) -> u32 {
        assert!(!self.is_full(), "token table full (caller must check)");
        debug_assert!(self.find(&token).is_none(), "token recorded twice");
        let slot = self.entries.len() as u32;
        let hash = self.hash(&token);
        self.entries.push((token, state));
        let (entries, hasher) = (&self.entries, &self.hasher);
        // Never rehashes: the index was reserved for `limit` slots.
        self.index
            .insert_unique(hash, slot, |&s| hasher.hash_one(entries[s as usize].0));
        slot
    }

    #[inline]
    pub fn token(&self, slot: u32) -> Token {
        self.entries[slot as usize].0
    }

    #[inline]
    pub fn set(&mut self, slot: u32, state: TokenState) {
        self.entries[slot as usize].1 = state;
    }

    /// Entries in an order independent of hashing (for the state digest; allocates).
    pub fn sorted_entries(&self) -> Vec<(Token, TokenState)> {
        let mut entries = self.entries.clone();
        entries.sort_by_key(|e| e.0);
        entries
    }

    pub fn allocated_bytes(&self) -> usize {
        // Index: one u32 and one control byte per bucket; entries: one (token, state) each.
        self.index.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.entries.capacity() * std::mem::size_of::<(Token, TokenState)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Token {
        Token::from_str_padded(s).unwrap()
    }

    #[test]
    fn slots_are_stable_and_lookups_exact() {
        let mut t = TokenTable::new(4);
        let a = t.insert(tok("a"), TokenState::Dead);
        let b = t.insert(
            tok("B"),
            TokenState::Live {
                symbol: 1,
                handle: OrderHandle(7),
            },
        );
        assert_eq!((a, b), (0, 1));
        assert_eq!(
            t.get(&tok("B")),
            Some((
                1,
                TokenState::Live {
                    symbol: 1,
                    handle: OrderHandle(7)
                }
            ))
        );
        assert_eq!(t.get(&tok("b")), None, "case-sensitive");
        t.set(b, TokenState::Dead);
        assert_eq!(t.get(&tok("B")), Some((1, TokenState::Dead)));
        assert_eq!(t.token(a), tok("a"));
        t.insert(tok("c"), TokenState::Dead);
        t.insert(tok("d"), TokenState::Dead);
        assert!(t.is_full());
        assert_eq!(
            t.sorted_entries().iter().map(|e| e.0).collect::<Vec<_>>(),
            [tok("B"), tok("a"), tok("c"), tok("d")]
        );
    }
}
