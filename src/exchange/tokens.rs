//! Per-account order tokens: every token an account used today, and the symbol its order was
//! routed to (the front's view; whether the order still rests is the shard's).
//!
//! A token stays in the table for the whole day, live or not, because a reused token must be
//! ignored (benign resend, PROTOCOLS.md 2.6). Each token gets a **slot**, its position in a
//! fixed array of (token, state); the shard indexes its live orders by slot, so a Cancel or a
//! Replace hashes the token once, here. A Replace's replacement token is recorded *pending*
//! until its shard says whether the replace consumed it; one that was not consumed is
//! *voided*: it leaves the hash index and its slot is reused by the next token.
//!
//! Both are sized once from the configured limit and never grow. A token is hashed once per
//! lookup, by reading its 14 bytes as two overlapping words folded through one 128-bit
//! multiply (foldhash's mixer) with a fixed seed: a dozen instructions, deterministic (outputs
//! never depend on table order; the digest sorts). Tables are per account, so an account that
//! chooses colliding tokens slows only its own lookups.

use crate::types::Token;
use hashbrown::HashTable;

/// Fixed seeds: the core reads no randomness.
const SEED_LOW: u64 = 0x626f_7572_7365_2131;
const SEED_HIGH: u64 = 0x243f_6a88_85a3_08d3;

/// A token's hash: bytes 0..8 and 6..14 as little-endian words, folded by a 128-bit multiply.
#[inline]
pub(crate) fn token_hash(token: &Token) -> u64 {
    let b = &token.0;
    let low = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let high = u64::from_le_bytes([b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13]]);
    let full = u128::from(low ^ SEED_LOW) * u128::from(high ^ SEED_HIGH);
    (full as u64) ^ ((full >> 64) as u64)
}

/// A lookup that missed: where the token would go, and its hash to insert it with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacant {
    hash: u64,
}

/// What the front knows of a token used today.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TokenState {
    /// Used, and its order never went to a book (rejected by the front).
    Unrouted,
    /// Used; its order went to the book of `symbol` (it may have left it since).
    Routed(u16),
    /// A replacement token waiting for its shard's verdict; its order would be on `symbol`.
    Pending(u16),
    /// A slot freed by a voided pending token, waiting for reuse (not in the index).
    Void,
}

pub(crate) struct TokenTable {
    /// Slot numbers, hashed by their token.
    index: HashTable<u32>,
    /// Slot -> (token, state).
    entries: Vec<(Token, TokenState)>,
    /// Slots of voided tokens, reused before new ones (at most the pending count).
    free: Vec<u32>,
    limit: usize,
}

impl TokenTable {
    pub fn new(limit: u32) -> Self {
        let limit = limit as usize;
        let mut table = TokenTable {
            index: HashTable::with_capacity(limit),
            entries: Vec::with_capacity(limit),
            free: Vec::with_capacity(limit),
            limit,
        };
        table.prefault();
        table
    }

    /// Touch every page now, so the first day's inserts take no page faults.
    fn prefault(&mut self) {
        let spread = |s: u32| u64::from(s).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for slot in 0..self.limit as u32 {
            self.index.insert_unique(spread(slot), slot, |&s| spread(s));
        }
        self.index.clear();
        self.entries
            .resize(self.limit, (Token::SPACES, TokenState::Void));
        self.entries.clear();
        self.free.resize(self.limit, 0);
        self.free.clear();
    }

    /// The slot of a token used today.
    #[inline]
    pub fn find(&self, token: &Token) -> Option<u32> {
        self.lookup(token).ok().map(|(slot, _)| slot)
    }

    #[inline]
    pub fn get(&self, token: &Token) -> Option<(u32, TokenState)> {
        self.lookup(token).ok()
    }

    /// The token's slot and state, or where to insert it (the hash, computed once).
    #[inline]
    pub fn lookup(&self, token: &Token) -> Result<(u32, TokenState), Vacant> {
        let hash = token_hash(token);
        let entries = &self.entries;
        match self
            .index
            .find(hash, |&slot| entries[slot as usize].0 == *token)
        {
            Some(&slot) => Ok((slot, entries[slot as usize].1)),
            None => Err(Vacant { hash }),
        }
    }

    /// Tokens recorded (pending ones included).
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    #[inline]
    pub fn is_full(&self) -> bool {
        self.len() >= self.limit
    }

    /// Record a new token; returns its slot. The caller checked that it is unused and that
    /// there is room.
    #[cfg(test)]
    pub fn insert(&mut self, token: Token, state: TokenState) -> u32 {
        let vacant = Vacant {
            hash: token_hash(&token),
        };
        self.insert_vacant(vacant, token, state)
    }

    /// The slot the next insert will take (a reused one first).
    #[inline]
    pub fn next_slot(&self) -> u32 {
        self.free
            .last()
            .copied()
            .unwrap_or(self.entries.len() as u32)
    }

    /// Record a token a [`Self::lookup`] missed; returns its slot ([`Self::next_slot`]).
    #[inline]
    pub fn insert_vacant(&mut self, vacant: Vacant, token: Token, state: TokenState) -> u32 {
        assert!(!self.is_full(), "token table full (caller must check)");
        assert!(state != TokenState::Void);
        debug_assert_eq!(vacant.hash, token_hash(&token));
        debug_assert!(self.find(&token).is_none(), "token recorded twice");
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = (token, state);
                slot
            }
            None => {
                self.entries.push((token, state));
                self.entries.len() as u32 - 1
            }
        };
        let entries = &self.entries;
        // Never rehashes: the index was reserved for `limit` slots.
        self.index
            .insert_unique(vacant.hash, slot, |&s| token_hash(&entries[s as usize].0));
        slot
    }

    #[cfg(test)]
    pub fn token(&self, slot: u32) -> Token {
        self.entries[slot as usize].0
    }

    #[inline]
    pub fn state(&self, slot: u32) -> TokenState {
        self.entries[slot as usize].1
    }

    #[inline]
    pub fn set(&mut self, slot: u32, state: TokenState) {
        assert!(state != TokenState::Void, "void through `void`");
        self.entries[slot as usize].1 = state;
    }

    /// Forget a pending token that was not consumed: it leaves the index, its slot is reused.
    pub fn void(&mut self, slot: u32) {
        let (token, state) = self.entries[slot as usize];
        assert!(
            matches!(state, TokenState::Pending(_)),
            "voiding a used token"
        );
        let entries = &self.entries;
        let found = self
            .index
            .find_entry(token_hash(&token), |&s| entries[s as usize].0 == token)
            .expect("a pending token is in the index");
        found.remove();
        self.entries[slot as usize].1 = TokenState::Void;
        assert!(self.free.len() < self.free.capacity(), "free slots bounded");
        self.free.push(slot);
    }

    /// Recorded entries with their slots, in an order independent of hashing (for the state
    /// digest; allocates).
    pub fn sorted_entries(&self) -> Vec<(u32, Token, TokenState)> {
        let mut entries: Vec<_> = (0..self.entries.len() as u32)
            .map(|slot| (slot, self.entries[slot as usize].0, self.state(slot)))
            .filter(|e| e.2 != TokenState::Void)
            .collect();
        entries.sort_by_key(|e| e.1);
        entries
    }

    /// Recorded entries in slot order (a state snapshot walks them in place).
    pub fn entries_in_slot_order(&self) -> impl Iterator<Item = (Token, TokenState)> + '_ {
        self.entries
            .iter()
            .copied()
            .filter(|e| e.1 != TokenState::Void)
    }

    /// Tokens the table may hold.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Record a token of a restored state; `None` if the table is full or already has it
    /// (bytes that are not a state of this venue).
    pub fn insert_restored(&mut self, token: Token, state: TokenState) -> Option<u32> {
        if self.is_full() || state == TokenState::Void || matches!(state, TokenState::Pending(_)) {
            return None;
        }
        match self.lookup(&token) {
            Ok(_) => None,
            Err(vacant) => Some(self.insert_vacant(vacant, token, state)),
        }
    }

    pub fn allocated_bytes(&self) -> usize {
        // Index: one u32 and one control byte per bucket; entries: one (token, state) each;
        // the free list: one u32 per token.
        self.index.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.entries.capacity() * std::mem::size_of::<(Token, TokenState)>()
            + self.free.capacity() * std::mem::size_of::<u32>()
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
        let a = t.insert(tok("a"), TokenState::Unrouted);
        let b = t.insert(tok("B"), TokenState::Routed(1));
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.get(&tok("B")), Some((1, TokenState::Routed(1))));
        assert_eq!(t.get(&tok("b")), None, "case-sensitive");
        t.set(b, TokenState::Unrouted);
        assert_eq!(t.get(&tok("B")), Some((1, TokenState::Unrouted)));
        assert_eq!(t.token(a), tok("a"));
        t.insert(tok("c"), TokenState::Unrouted);
        t.insert(tok("d"), TokenState::Unrouted);
        assert!(t.is_full());
        assert_eq!(
            t.sorted_entries().iter().map(|e| e.1).collect::<Vec<_>>(),
            [tok("B"), tok("a"), tok("c"), tok("d")]
        );
    }

    #[test]
    fn a_voided_pending_token_leaves_and_its_slot_is_reused() {
        let mut t = TokenTable::new(2);
        t.insert(tok("a"), TokenState::Routed(0));
        let p = t.insert(tok("p"), TokenState::Pending(0));
        assert!(t.is_full());
        t.void(p);
        assert_eq!((t.len(), t.get(&tok("p"))), (1, None));
        assert!(!t.is_full());
        let q = t.insert(tok("q"), TokenState::Routed(0));
        assert_eq!(q, p, "slot reused");
        assert_eq!(t.get(&tok("q")), Some((q, TokenState::Routed(0))));
        assert_eq!(t.sorted_entries().len(), 2);
    }
}
