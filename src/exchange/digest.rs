//! State digest: SHA-256 over a canonical encoding of every book, every token table and the
//! day's counters, so "live state == replayed state" is one comparison. Not on the hot path.

use super::machine::{Exchange, Phase};
use super::tokens::TokenState;
use crate::types::Side;
use sha2::{Digest, Sha256};

/// A 32-byte state digest, printed as hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateDigest(pub [u8; 32]);

impl std::fmt::Display for StateDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for StateDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Exchange {
    pub fn state_digest(&self) -> StateDigest {
        let mut h = Sha256::new();
        h.update(b"bourse-state-v1");
        h.update(self.next_order_ref.to_be_bytes());
        h.update(self.next_match.to_be_bytes());
        h.update([match self.phase {
            Phase::PreOpen => 0u8,
            Phase::Open => 1,
            Phase::Closed => 2,
        }]);
        for (symbol, book) in self.books.iter().enumerate() {
            h.update([u8::from(self.halted[symbol])]);
            for side in [Side::Buy, Side::Sell] {
                h.update(book.order_count().to_be_bytes());
                book.for_each_order(side, |o| {
                    let p = o.payload;
                    h.update(p.order_ref.to_be_bytes());
                    h.update(o.price.0.to_be_bytes());
                    h.update(o.leaves.to_be_bytes());
                    h.update(o.deadline_ms.to_be_bytes());
                    h.update([u8::from(o.hidden), p.side_letter, p.display, p.capacity]);
                    h.update(p.account.to_be_bytes());
                    h.update(self.tokens[p.account as usize].token(p.token_slot).0);
                    h.update(p.chain_executed.to_be_bytes());
                });
            }
        }
        for table in &self.tokens {
            let entries = table.sorted_entries();
            h.update((entries.len() as u64).to_be_bytes());
            for (token, state) in entries {
                h.update(token.0);
                match state {
                    TokenState::Dead => h.update([0u8]),
                    TokenState::Live { symbol, handle } => {
                        // The handle is an internal slot index; the book part above already
                        // pins down the order, so only liveness and symbol go in.
                        let _ = handle;
                        h.update([1u8]);
                        h.update(symbol.to_be_bytes());
                    }
                }
            }
        }
        StateDigest(h.finalize().into())
    }
}
