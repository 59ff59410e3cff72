//! Per-account order tokens: every token an account used today, and where its order rests.
//!
//! A token stays in the table for the whole day, live or not, because a reused token must be
//! ignored (benign resend, PROTOCOLS.md 2.6). The table is sized once from the configured
//! limit and never grows. The hasher is foldhash with a fixed seed: fast on 14-byte keys and
//! deterministic (outputs never depend on table order anyway; the digest sorts). Tables are
//! per account, so an account that chooses colliding tokens slows only its own lookups.

use crate::book::OrderHandle;
use crate::types::Token;
use std::collections::HashMap;
/// Fixed seed: the core reads no randomness.
const SEED: u64 = 0x626f_7572_7365_2131;

fn hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(SEED)
}

/// Where a token's order is, if it is still on a book.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TokenState {
    /// Resting: symbol index and book handle.
    Live { symbol: u16, handle: OrderHandle },
    /// Used today, no longer (or never) on a book.
    Dead,
}

pub(crate) struct TokenTable {
    map: HashMap<Token, TokenState, foldhash::fast::FixedState>,
    limit: usize,
}

impl TokenTable {
    pub fn new(limit: u32) -> Self {
        let limit = limit as usize;
        TokenTable {
            map: HashMap::with_capacity_and_hasher(limit, hasher()),
            limit,
        }
    }

    #[inline]
    pub fn get(&self, token: &Token) -> Option<TokenState> {
        self.map.get(token).copied()
    }

    pub fn is_full(&self) -> bool {
        self.map.len() >= self.limit
    }

    /// Record a new token. The caller checked that it is unused and that there is room.
    pub fn insert(&mut self, token: Token, state: TokenState) {
        assert!(!self.is_full(), "token table full (caller must check)");
        let previous = self.map.insert(token, state);
        assert!(previous.is_none(), "token recorded twice");
    }

    /// Mark a used token's order as gone from the book.
    pub fn set_dead(&mut self, token: &Token) {
        let state = self.map.get_mut(token).expect("known token");
        *state = TokenState::Dead;
    }

    pub fn set_live(&mut self, token: &Token, symbol: u16, handle: OrderHandle) {
        let state = self.map.get_mut(token).expect("known token");
        *state = TokenState::Live { symbol, handle };
    }

    /// Entries in an order independent of hashing (for the state digest; allocates).
    pub fn sorted_entries(&self) -> Vec<(Token, TokenState)> {
        let mut entries: Vec<_> = self.map.iter().map(|(t, s)| (*t, *s)).collect();
        entries.sort_by_key(|e| e.0);
        entries
    }

    pub fn allocated_bytes(&self) -> usize {
        // hashbrown: one (key, value) slot and one control byte per bucket.
        self.map.capacity() * (std::mem::size_of::<(Token, TokenState)>() + 1)
    }
}
