//! State digest: SHA-256 over a canonical encoding of every book, every token table and the
//! day's counters, so "live state == replayed state" is one comparison. Not on the hot path.
//!
//! The encoding does not depend on how the state is split: the same day gives the same digest
//! with one shard or several.

use super::front::{Front, Phase};
use super::machine::Exchange;
use super::merge::Merge;
use super::msg::shard_of;
use super::shard::Shard;
use super::tokens::TokenState;
use crate::types::{AccountId, Side};
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
        state_digest(&self.front, std::slice::from_ref(&self.shard), &self.merge)
    }
}

/// The digest of a state split over `shards` (every verdict settled, the merge caught up).
pub(crate) fn state_digest(front: &Front, shards: &[Shard], merge: &Merge) -> StateDigest {
    assert_eq!(front.pending(), 0, "digest of a state with pending tokens");
    let shard_of_symbol = |symbol: u16| &shards[shard_of(symbol, shards.len())];
    let mut h = Sha256::new();
    h.update(b"bourse-state-v1");
    h.update(merge.next_order_ref.to_be_bytes());
    h.update(merge.next_match.to_be_bytes());
    h.update([match front.phase {
        Phase::PreOpen => 0u8,
        Phase::Open => 1,
        Phase::Closed => 2,
    }]);
    for (symbol, halted) in front.halted.iter().enumerate() {
        let book = shard_of_symbol(symbol as u16).book(symbol as u16);
        h.update([u8::from(*halted)]);
        for side in [Side::Buy, Side::Sell] {
            h.update(book.order_count().to_be_bytes());
            book.for_each_order(side, |o| {
                let p = o.payload;
                h.update(merge.refs[symbol][o.handle.0 as usize].to_be_bytes());
                h.update(o.price.0.to_be_bytes());
                h.update(o.leaves.to_be_bytes());
                h.update(o.deadline_ms.to_be_bytes());
                h.update([u8::from(o.hidden), p.side_letter, p.display, p.capacity]);
                h.update(p.account.to_be_bytes());
                h.update(p.token.0);
                h.update(p.chain_executed.to_be_bytes());
            });
        }
    }
    for (account, table) in front.tokens.iter().enumerate() {
        let entries = table.sorted_entries();
        h.update((entries.len() as u64).to_be_bytes());
        for (slot, token, state) in entries {
            h.update(token.0);
            let live_on = match state {
                TokenState::Routed(symbol) => shard_of_symbol(symbol)
                    .live_order(AccountId(account as u16), slot, &token, symbol)
                    .map(|_| symbol),
                TokenState::Unrouted => None,
                TokenState::Pending(_) | TokenState::Void => unreachable!("settled, filtered"),
            };
            match live_on {
                None => h.update([0u8]),
                Some(symbol) => {
                    h.update([1u8]);
                    h.update(symbol.to_be_bytes());
                }
            }
        }
    }
    StateDigest(h.finalize().into())
}
