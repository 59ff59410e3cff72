//! Per-account order tokens: every token an account used today, and the symbol its order was
//! routed to (the front's view; whether the order still rests is the shard's).
//!
//! A token stays in the table for the whole day, live or not, because a reused token must be
//! ignored (benign resend, PROTOCOLS.md 2.6). Each token gets a **slot**, its position in a
//! fixed array of [`Entry`] (token, state); the shard indexes its live orders by slot, so a
//! Cancel or a Replace hashes the token once, here. A Replace's replacement token is recorded
//! *pending* until its shard says whether the replace consumed it; one that was not consumed
//! is *voided*: it leaves the hash index and its slot is reused by the next token.
//!
//! Both are sized once from the configured limit and never grow. A token is hashed once per
//! lookup, by reading its 14 bytes as two overlapping words folded through one 128-bit
//! multiply (foldhash's mixer) with a fixed seed: a dozen instructions, deterministic (outputs
//! never depend on table order; the digest sorts). Tables are per account, so an account that
//! chooses colliding tokens slows only its own lookups.
//!
//! The **index** is open addressing with linear probing over an array of `u32` buckets, 4/3
//! of the limit (not rounded up to a power of two: a third less memory on average), so at
//! most 3/4 full; a token's home bucket is its hash's low half scaled to the array (a
//! multiply and a shift, no division). A bucket holds the slot (plus one; 0 is empty) in its
//! low bits and as many of the hash's high bits as the rest leave (the **tag**: 8 bits for 8M
//! tokens an account, 11 for 2^20), so a probe compares the tag before it reads the slot
//! array (one cache line for a miss, the common case: every new order's token). Four bytes a
//! bucket, not eight: the index is most of a table's memory (sized by the limit, not by the
//! tokens used), and a restart populates all of it (see [`BucketCode`]). A voided token
//! leaves by backward shift, so no tombstones accumulate. The slot array is plain
//! `#[repr(C)]` data: a state snapshot writes it as it is in memory and a restore copies it
//! back in one go ([`TokenTable::image`], [`TokenTable::restore_image`]), rebuilding the
//! index in one pass with prefetching instead of a lookup and an insert per token.

use super::slots::{ImageLoan, SlotArray};
use crate::memory::{
    Unresident, advise_huge_pages, on_cores, populate_write, prefetch_line, whole_pages,
};
use crate::types::Token;

/// Fixed seeds: the core reads no randomness.
const SEED_LOW: u64 = 0x626f_7572_7365_2131;
const SEED_HIGH: u64 = 0x243f_6a88_85a3_08d3;

/// A token's bytes 0..8 and 6..14 as little-endian words: two unaligned 8-byte loads that
/// overlap, so together they hold every byte (equal words, equal tokens). Indexing byte by
/// byte made the compiler assemble each word from eight loads and shifts.
#[inline]
pub(crate) fn token_words(token: &Token) -> (u64, u64) {
    words_of(&token.0)
}

/// [`token_words`] of a token's bytes where they lie.
#[inline]
fn words_of(bytes: &[u8; 14]) -> (u64, u64) {
    let (low, high) = (bytes.first_chunk::<8>(), bytes.last_chunk::<8>());
    (
        u64::from_le_bytes(*low.expect("a token has 14 bytes")),
        u64::from_le_bytes(*high.expect("a token has 14 bytes")),
    )
}

/// A token's hash: its two words ([`token_words`]) folded by a 128-bit multiply.
#[inline]
pub(crate) fn token_hash(token: &Token) -> u64 {
    hash_of(&token.0)
}

/// [`token_hash`] of a token's bytes where they lie: hashing a slot's token through a copy
/// ([`Entry::token`]) stored it in three pieces and read it back in two overlapping words,
/// which the store buffer cannot forward (perf: a third of a restore's index rebuild stalled
/// on those loads).
#[inline]
fn hash_of(bytes: &[u8; 14]) -> u64 {
    let (low, high) = words_of(bytes);
    let full = u128::from(low ^ SEED_LOW) * u128::from(high ^ SEED_HIGH);
    (full as u64) ^ ((full >> 64) as u64)
}

/// A lookup that missed: the token's hash, to insert it with, and the empty bucket the probe
/// ended at, valid while the index has not changed since (`changes` says).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacant {
    hash: u64,
    at: usize,
    changes: u64,
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

const CODE_UNROUTED: u16 = 0;
const CODE_ROUTED: u16 = 1;
const CODE_PENDING: u16 = 2;
const CODE_VOID: u16 = 3;
/// Marks a free-list slot while a restore checks the list (never left in a table).
const CODE_LISTED: u16 = 4;

/// One slot of the array, as it lies in memory and in a state snapshot (little-endian):
/// the token's 14 bytes, the state's code, its symbol (0 when it has none). `#[repr(C)]` of
/// byte arrays and `u16`s: 18 bytes, no padding, every bit pattern a value (a restore checks
/// the codes and symbols).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Entry {
    token: [u8; 14],
    code: u16,
    symbol: u16,
}

/// Bytes of one bucket of the index.
const BUCKET_BYTES: usize = std::mem::size_of::<u32>();

/// Bytes of one [`Entry`] in memory and in a snapshot.
pub(crate) const ENTRY_BYTES: usize = 18;
const _: () = assert!(std::mem::size_of::<Entry>() == ENTRY_BYTES);
const _: () = assert!(std::mem::align_of::<Entry>() == 2);
// The snapshot image is the memory layout: little-endian `u16`s.
const _: () = assert!(cfg!(target_endian = "little"));

impl Entry {
    /// A voided slot's value with no token (start-up's fill).
    pub(super) const VOID: Entry = Entry {
        token: [0; 14],
        code: CODE_VOID,
        symbol: 0,
    };

    /// The entry's bytes as they lie in memory and in a snapshot.
    pub(super) fn to_bytes(self) -> [u8; ENTRY_BYTES] {
        let mut bytes = [0; ENTRY_BYTES];
        bytes[..14].copy_from_slice(&self.token);
        bytes[14..16].copy_from_slice(&self.code.to_le_bytes());
        bytes[16..].copy_from_slice(&self.symbol.to_le_bytes());
        bytes
    }

    fn is_pending(&self) -> bool {
        self.code == CODE_PENDING
    }

    fn is_void(&self) -> bool {
        self.code == CODE_VOID
    }

    #[inline]
    fn new(token: Token, state: TokenState) -> Entry {
        let (code, symbol) = match state {
            TokenState::Unrouted => (CODE_UNROUTED, 0),
            TokenState::Routed(symbol) => (CODE_ROUTED, symbol),
            TokenState::Pending(symbol) => (CODE_PENDING, symbol),
            TokenState::Void => (CODE_VOID, 0),
        };
        Entry {
            token: token.0,
            code,
            symbol,
        }
    }

    #[inline]
    fn token(&self) -> Token {
        crate::types::Alpha(self.token)
    }

    #[inline]
    fn state(&self) -> TokenState {
        match self.code {
            CODE_UNROUTED => TokenState::Unrouted,
            CODE_ROUTED => TokenState::Routed(self.symbol),
            CODE_PENDING => TokenState::Pending(self.symbol),
            _ => TokenState::Void,
        }
    }
}

/// How a table's `u32` buckets hold a slot and a tag: the slot plus one in the low bits
/// (enough for the table's limit; 0 is an empty bucket), the hash's high bits above them. The
/// fewer bits the limit leaves for the tag, the more often a probe reads a slot whose token
/// is not the one looked up (1 in 256 occupied buckets with 8 bits); with none (a limit of
/// 2^31 or more) every probe compares tokens: slower, never wrong (the token decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BucketCode {
    /// The low bits that hold the slot plus one.
    slot_mask: u32,
}

impl BucketCode {
    /// For slots `0..limit`: the bits of `limit` (the largest slot plus one).
    fn for_limit(limit: u32) -> BucketCode {
        let bits = u32::BITS - limit.leading_zeros();
        BucketCode {
            slot_mask: u32::MAX.checked_shr(u32::BITS - bits).unwrap_or(0),
        }
    }

    /// The tag of `hash`: its high bits where a bucket keeps them (the home bucket is chosen
    /// by its low bits, so the two are independent).
    #[inline(always)]
    fn tag(self, hash: u64) -> u32 {
        (hash >> 32) as u32 & !self.slot_mask
    }

    #[inline(always)]
    fn bucket(self, hash: u64, slot: u32) -> u32 {
        debug_assert!(slot < self.slot_mask, "the slot plus one fits its bits");
        self.tag(hash) | (slot + 1)
    }

    /// Does occupied `bucket` carry `tag` ([`Self::tag`])?
    #[inline(always)]
    fn tagged(self, bucket: u32, tag: u32) -> bool {
        bucket & !self.slot_mask == tag
    }

    #[inline(always)]
    fn slot(self, bucket: u32) -> u32 {
        (bucket & self.slot_mask).wrapping_sub(1)
    }
}

/// Buckets for `limit` tokens: 4/3 of it (the index is at most 3/4 full, where linear
/// probing's expected miss is ~8.5 buckets, two cache lines), whole cache lines of them.
fn bucket_count(limit: usize) -> usize {
    (limit + limit.div_ceil(3)).next_multiple_of(16).max(16)
}

/// The home bucket of `hash` among `buckets`: its low 32 bits scaled to the count (the
/// high 64 bits of a 64 x 64-bit product: one multiply), independent of the tag, which is
/// taken from the high half. Above 2^32 buckets the tag's bits take part too (the home is
/// still in range; the tag only filters less).
#[inline(always)]
fn home_of(hash: u64, buckets: usize) -> usize {
    ((u128::from(hash.rotate_right(32)) * buckets as u128) >> 64) as usize
}

/// The bucket after `at` on a probe path of `buckets` (wrapping to the first).
#[inline(always)]
fn next_bucket(at: usize, buckets: usize) -> usize {
    if at + 1 == buckets { 0 } else { at + 1 }
}

/// Buckets from `from` forward to `to` on a probe path of `buckets` (wrapping).
#[inline(always)]
fn probe_distance(from: usize, to: usize, buckets: usize) -> usize {
    if to >= from {
        to - from
    } else {
        to + buckets - from
    }
}

/// A large index is rebuilt one range of this many buckets at a time (256 KiB: within the
/// L2 cache and the TLB's reach), its tokens sorted into ranges by home bucket first: random
/// writes over a table of hundreds of megabytes cost a TLB and a cache miss each.
const REBUILD_RANGE_BUCKETS: usize = 1 << 16;
/// Arrays up to this size are prefaulted by writing them (see [`TokenTable::prefault`]).
const FILL_BYTES_MAX: usize = 1 << 20;
/// Slots of a large slot array made resident at once: the next million tokens of an account
/// (18 MiB). The slot array grows from its start, so the rest can wait for a thread of the
/// daemon ([`TokenTable::unresident`]) instead of holding up a restart.
const ENTRIES_RESIDENT_AHEAD: usize = 1 << 20;
/// Slots after a restored table's last one made resident by the restore (and the live
/// index's entries for them, `Front::slots_written_next`): the first tokens after a restart
/// (288 KiB of slots an account), enough until the daemon's `prefault` thread, started right
/// after recovery, has populated the rest ([`TokenTable::unresident`]; it reaches every
/// table's next 2 MiB within a fraction of a second).
pub(crate) const RESTORED_RESIDENT_AHEAD: u32 = 1 << 14;

pub(crate) struct TokenTable {
    /// Slot numbers tagged with their token's hash (see the module docs).
    buckets: Vec<u32>,
    /// How a bucket holds its slot and tag.
    code: BucketCode,
    /// Slot -> (token, state); lent to a state snapshot's writer ([`Self::lend_image`]).
    entries: SlotArray,
    /// Slots of voided tokens, reused before new ones (at most the pending count).
    free: Vec<u32>,
    limit: usize,
    /// Voided slots that can wait at once (the resident part of `free`).
    voided_max: usize,
    /// Slots of `entries` made resident by [`Self::prefault`] (all of a small array).
    entries_resident: usize,
    /// Bumped whenever a bucket is written: a [`Vacant`] taken before the last change must
    /// probe again (inline, a Replace's insert follows its lookup with no change between).
    changes: u64,
}

impl TokenTable {
    /// A table for `limit` tokens, resident at once (tests; the venue's tables are made by
    /// [`new_tables`]).
    #[cfg(test)]
    pub fn new(limit: u32) -> Self {
        let mut table = TokenTable::reserve(limit, limit as usize);
        table.prefault();
        table
    }

    /// A table for `limit` tokens whose arrays are reserved, not yet resident: see
    /// [`Self::prefault`]. At most `voided_max` voided slots wait for reuse at once (the
    /// pending replacement tokens the front can have in flight, see `Front::new`), so only
    /// that much of the free list is made resident; its capacity stays `limit`, for a
    /// restored list longer than that (a snapshot of a venue with longer rings).
    fn reserve(limit: u32, voided_max: usize) -> Self {
        assert!(limit < u32::MAX, "a slot plus one fits a bucket's u32");
        let limit = limit as usize;
        let buckets = bucket_count(limit);
        TokenTable {
            // Zeroed: untouched pages from the allocator when large (all allocations happen
            // here, before `prefault` runs on other threads: an mmap waits for every
            // populate in flight).
            buckets: vec![0; buckets],
            code: BucketCode::for_limit(limit as u32),
            entries: SlotArray::with_capacity(limit),
            free: Vec::with_capacity(limit),
            limit,
            voided_max: voided_max.clamp(1, limit.max(1)),
            entries_resident: 0,
            changes: 0,
        }
    }

    /// Make the pages the day writes first resident now, so that no insert takes a page
    /// fault: the index and the resident part of the free list whole, the slot array's first
    /// [`ENTRIES_RESIDENT_AHEAD`] slots (a restore's copy faults in what it fills; the rest is
    /// [`Self::unresident`]). Arrays small enough to stay in the cache are written whole (the
    /// day starts from the cache); larger ones are populated by the kernel, which is what
    /// their first writes would otherwise pay for (a fault a page), without writing them
    /// once more (a restore writes them next).
    fn prefault(&mut self) {
        // `populate` may write zero bytes into what it makes resident: nothing is there yet.
        assert!(
            self.entries.is_empty() && self.free.is_empty(),
            "a fresh table"
        );
        let bucket_bytes = self.buckets.len() * BUCKET_BYTES;
        if bucket_bytes > FILL_BYTES_MAX {
            // Zeroed by the allocator (untouched pages), then populated: still zero.
            populate(self.buckets.as_mut_ptr().cast(), bucket_bytes);
        }
        if self.limit * ENTRY_BYTES <= FILL_BYTES_MAX {
            self.entries.fill_capacity_then_clear(Entry::VOID);
            self.free.resize(self.voided_max, 0);
            self.free.clear();
            self.entries_resident = self.entries_to_prefault();
        } else {
            let entries = self.entries.as_mut_ptr().cast::<u8>();
            // The whole array on huge pages (advised before any page is touched).
            advise_huge_pages(entries, self.limit * ENTRY_BYTES);
            self.entries_resident = self.entries_to_prefault();
            populate(entries, self.entries_resident * ENTRY_BYTES);
            populate(self.free.as_mut_ptr().cast(), self.voided_max * 4);
        }
    }

    /// Slots of the slot array [`Self::prefault`] makes resident.
    fn entries_to_prefault(&self) -> usize {
        if self.limit * ENTRY_BYTES <= FILL_BYTES_MAX {
            self.limit
        } else {
            self.limit.min(ENTRIES_RESIDENT_AHEAD)
        }
    }

    /// Bytes [`Self::prefault`] makes resident (known before it runs).
    fn resident_bytes(&self) -> usize {
        self.buckets.len() * BUCKET_BYTES
            + self.entries_to_prefault() * ENTRY_BYTES
            + self.voided_max * 4
    }

    /// The part of the slot array not yet resident (beyond the prefaulted slots and those a
    /// restore filled): for [`Unresident::populate_step`] on another thread while this table
    /// is in use. `None` when nothing is left.
    /// `owner`: the marker of whoever holds this table (the front), so that the range is
    /// left alone once the table is dropped.
    pub(crate) fn unresident(&self, owner: &std::sync::Arc<()>) -> Option<Unresident> {
        let from = self.entries_resident.max(self.entries.len()) * ENTRY_BYTES;
        let to = self.limit * ENTRY_BYTES;
        let start = self.entries.as_ptr().cast::<u8>().wrapping_add(from);
        (from < to).then(|| Unresident::new(start, to - from, std::sync::Arc::downgrade(owner)))
    }

    /// The slots the next inserts take: the voided ones (in any order) and the fresh ones
    /// from the first never used.
    pub(crate) fn slots_next(&self) -> (&[u32], u32) {
        (&self.free, self.entries.len() as u32)
    }

    #[inline]
    pub fn get(&self, token: &Token) -> Option<(u32, TokenState)> {
        self.lookup(token).ok()
    }

    /// The token's slot and state, or where to insert it (the hash, computed once).
    #[inline(always)]
    pub fn lookup(&self, token: &Token) -> Result<(u32, TokenState), Vacant> {
        let hash = token_hash(token);
        match self.position(hash, token) {
            Ok(at) => {
                let slot = self.code.slot(self.buckets[at]);
                Ok((slot, self.entries[slot as usize].state()))
            }
            Err(at) => Err(Vacant {
                hash,
                at,
                changes: self.changes,
            }),
        }
    }

    /// Ask the cache for `token`'s home bucket ahead of its lookup (replay and batches know
    /// their next inputs): a table of a day's tokens is far larger than the cache, and the
    /// bucket's miss is most of a lookup's time. No effect on the table's state.
    #[inline]
    pub fn prefetch(&self, token: &Token) {
        let at = home_of(token_hash(token), self.buckets.len());
        prefetch_line(self.buckets.as_ptr().wrapping_add(at));
    }

    /// The second step after [`Self::prefetch`] (once the bucket is loaded): ask for the
    /// slot of the token in its home bucket, and return that slot, if the tag there matches.
    /// A guess for the cache only (the token is not compared, later buckets not probed).
    #[inline]
    pub fn prefetch_slot(&self, token: &Token) -> Option<u32> {
        let hash = token_hash(token);
        let bucket = self.buckets[home_of(hash, self.buckets.len())];
        if bucket == 0 || !self.code.tagged(bucket, self.code.tag(hash)) {
            return None;
        }
        let slot = self.code.slot(bucket);
        prefetch_line(self.entries.as_ptr().wrapping_add(slot as usize));
        Some(slot)
    }

    /// The bucket holding `token` (`Ok`), or the first empty one on its probe path (`Err`).
    #[inline]
    fn position(&self, hash: u64, token: &Token) -> Result<usize, usize> {
        let (code, tag) = (self.code, self.code.tag(hash));
        let buckets = &self.buckets[..];
        let count = buckets.len();
        let mut at = home_of(hash, count);
        // Bounded: the index always has an empty bucket (at most 3/4 full).
        for _ in 0..count {
            let bucket = buckets[at];
            if bucket == 0 {
                return Err(at);
            }
            // `get`: a restored index never sends a lookup out of bounds (see `restore_image`).
            if code.tagged(bucket, tag)
                && self
                    .entries
                    .get(code.slot(bucket) as usize)
                    .is_some_and(|e| e.token == token.0)
            {
                return Ok(at);
            }
            at = next_bucket(at, count);
        }
        unreachable!("the token index is never full");
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
        let Err(vacant) = self.lookup(&token) else {
            panic!("token recorded twice");
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
    #[inline(always)]
    pub fn insert_vacant(&mut self, vacant: Vacant, token: Token, state: TokenState) -> u32 {
        assert!(!self.is_full(), "token table full (caller must check)");
        assert!(state != TokenState::Void);
        debug_assert_eq!(vacant.hash, token_hash(&token));
        let at = if vacant.changes == self.changes {
            debug_assert_eq!(self.position(vacant.hash, &token), Err(vacant.at));
            vacant.at
        } else {
            self.probe_again(vacant.hash, &token)
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                let entry = Entry::new(token, state);
                self.entries.overwrite(slot as usize, entry, Entry::is_void);
                slot
            }
            None => {
                // Never reallocates: reserved for `limit` slots.
                self.entries.push(Entry::new(token, state));
                self.entries.len() as u32 - 1
            }
        };
        self.buckets[at] = self.code.bucket(vacant.hash, slot);
        self.changes += 1;
        slot
    }

    /// Where an insert goes after the index changed since its lookup (the sharded front).
    #[cold]
    #[inline(never)]
    fn probe_again(&self, hash: u64, token: &Token) -> usize {
        let Err(at) = self.position(hash, token) else {
            panic!("token recorded twice");
        };
        at
    }

    #[cfg(test)]
    pub fn token(&self, slot: u32) -> Token {
        self.entries[slot as usize].token()
    }

    #[inline]
    pub fn state(&self, slot: u32) -> TokenState {
        self.entries[slot as usize].state()
    }

    #[inline]
    pub fn set(&mut self, slot: u32, state: TokenState) {
        assert!(state != TokenState::Void, "void through `void`");
        let entry = Entry::new(self.entries[slot as usize].token(), state);
        // Only a pending token's state changes (a lent image reads every other slot).
        self.entries
            .overwrite(slot as usize, entry, Entry::is_pending);
    }

    /// Forget a pending token that was not consumed: it leaves the index, its slot is reused.
    pub fn void(&mut self, slot: u32) {
        let entry = self.entries[slot as usize];
        assert!(
            matches!(entry.state(), TokenState::Pending(_)),
            "voiding a used token"
        );
        let at = self
            .position(hash_of(&entry.token), &entry.token())
            .expect("a pending token is in the index");
        self.remove_at(at);
        let voided = Entry {
            code: CODE_VOID,
            symbol: 0,
            ..entry
        };
        self.entries
            .overwrite(slot as usize, voided, Entry::is_pending);
        assert!(self.free.len() < self.free.capacity(), "free slots bounded");
        self.free.push(slot);
    }

    /// Empty bucket `hole` and shift back the buckets after it that may move (linear
    /// probing's deletion: every token stays reachable from its home bucket, no tombstone).
    fn remove_at(&mut self, mut hole: usize) {
        self.changes += 1;
        self.buckets[hole] = 0;
        let mut at = hole;
        let count = self.buckets.len();
        // Bounded: the index always has an empty bucket, which ends the run.
        for _ in 1..count {
            at = next_bucket(at, count);
            let bucket = self.buckets[at];
            if bucket == 0 {
                return;
            }
            let home = home_of(
                hash_of(&self.entries[self.code.slot(bucket) as usize].token),
                count,
            );
            // It may move into the hole if the hole lies on its path from its home.
            if probe_distance(home, at, count) >= probe_distance(hole, at, count) {
                self.buckets[hole] = bucket;
                self.buckets[at] = 0;
                hole = at;
            }
        }
    }

    /// Recorded entries with their slots, in an order independent of hashing (for the state
    /// digest; allocates).
    pub fn sorted_entries(&self) -> Vec<(u32, Token, TokenState)> {
        let mut entries = Vec::with_capacity(self.len());
        entries.extend(
            (0..self.entries.len() as u32)
                .map(|slot| (slot, self.entries[slot as usize].token(), self.state(slot)))
                .filter(|e| e.2 != TokenState::Void),
        );
        // Tokens are unique in a table: an unstable sort gives the one order (in place).
        entries.sort_unstable_by_key(|e| e.1);
        entries
    }

    /// Tokens the table may hold.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The slot array as it is in memory (voided slots included) and the free list: what a
    /// state snapshot writes ([`Self::restore_image`] reads it back).
    pub fn image(&self) -> (&[u8], &[u32]) {
        (self.entries.as_bytes(), &self.free)
    }

    /// [`Self::image`]'s slot array lent instead of borrowed: read later, on any thread,
    /// while this table goes on (see [`super::slots`]). The table must be settled (no
    /// pending token): every slot but the free list's then keeps its bytes for the day.
    /// Its only caller, `state::save_with`, asserts in every build that the front awaits no
    /// verdict, and the front records a pending token only where it starts awaiting its
    /// verdict (`Front::replace`), so no table holds one; the scan here rechecks that in
    /// tests.
    pub(crate) fn lend_image(&self) -> ImageLoan {
        // A pending slot lent would be rewritten under the loan's reads when it settles.
        debug_assert!(
            !self.entries.as_slice().iter().any(Entry::is_pending),
            "a token table is lent settled"
        );
        self.entries.lend(&self.free)
    }

    /// Fill this fresh table (nothing recorded) from an image ([`Self::image`]'s slot array
    /// bytes and free list) of a settled table of a venue with `symbols` symbols: the slot
    /// array is copied in one go and the index rebuilt in one pass. Every entry is checked
    /// (state codes, symbols, no token twice, the free list naming exactly the voided
    /// slots): bytes that are no such image are an error, never a panic.
    /// `scratch` is working memory, kept by the caller across tables.
    pub fn restore_image(
        &mut self,
        entries: &[u8],
        free: &[[u8; 4]],
        symbols: usize,
        scratch: &mut Vec<(u64, u32)>,
    ) -> Result<(), String> {
        assert!(
            self.entries.is_empty() && self.free.is_empty(),
            "a fresh table"
        );
        if !entries.len().is_multiple_of(ENTRY_BYTES) {
            return Err("a slot array cut short".into());
        }
        let count = entries.len() / ENTRY_BYTES;
        if count > self.limit || free.len() > count {
            return Err(format!(
                "{count} slots and {} free for a table of {}",
                free.len(),
                self.limit
            ));
        }
        self.entries.copy_from_bytes(entries);
        let restored = self
            .check_free_list(free)
            .and_then(|()| self.rebuild_index(symbols, scratch));
        if restored.is_err() {
            self.entries.clear_unlent();
            self.free.clear();
            self.buckets.fill(0);
        } else {
            self.make_next_slots_resident();
        }
        restored
    }

    /// After a restore: the slots the next tokens take, beyond those restored, resident
    /// before the first input (see [`RESTORED_RESIDENT_AHEAD`]).
    fn make_next_slots_resident(&mut self) {
        let from = self.entries.len().max(self.entries_resident);
        let to = (self.entries.len() + RESTORED_RESIDENT_AHEAD as usize).min(self.limit);
        if from < to {
            // Spare capacity: `populate` may write zero bytes there.
            let start = self.entries.as_mut_ptr().wrapping_add(from).cast::<u8>();
            populate(start, (to - from) * ENTRY_BYTES);
            self.entries_resident = to;
        }
    }

    /// Take the free list of an image: each slot voided, each once, every voided slot listed.
    fn check_free_list(&mut self, free: &[[u8; 4]]) -> Result<(), String> {
        for bytes in free {
            let slot = u32::from_le_bytes(*bytes);
            if !self.entries.get(slot as usize).is_some_and(Entry::is_void) {
                return Err("a free slot that is not a voided one, or listed twice".into());
            }
            self.entries
                .change_unlent(slot as usize, |e| e.code = CODE_LISTED);
            self.free.push(slot);
        }
        for &slot in &self.free {
            self.entries
                .change_unlent(slot as usize, |e| e.code = CODE_VOID);
        }
        Ok(())
    }

    /// Index every recorded slot, checking its entry: by ranges of the index (see
    /// [`REBUILD_RANGE_BUCKETS`]), the tokens first counted and then sorted into their
    /// ranges in `scratch` (hash, slot).
    fn rebuild_index(
        &mut self,
        symbols: usize,
        scratch: &mut Vec<(u64, u32)>,
    ) -> Result<(), String> {
        let count = self.buckets.len();
        let ranges = count.div_ceil(REBUILD_RANGE_BUCKETS);
        let shift = REBUILD_RANGE_BUCKETS.trailing_zeros();
        let range_of = |hash: u64| home_of(hash, count) >> shift;
        let mut starts = vec![0usize; ranges + 1];
        let mut voided = 0usize;
        for (slot, entry) in self.entries.as_slice().iter().enumerate() {
            match (entry.code, entry.symbol) {
                (CODE_UNROUTED, 0) => {}
                (CODE_ROUTED, symbol) if (symbol as usize) < symbols => {}
                (CODE_VOID, 0) => {
                    voided += 1;
                    continue;
                }
                _ => return Err(format!("slot {slot}: a state out of range")),
            }
            starts[range_of(hash_of(&entry.token)) + 1] += 1;
        }
        if voided != self.free.len() {
            return Err("voided slots missing from the free list".into());
        }
        for range in 0..ranges {
            starts[range + 1] += starts[range];
        }
        scratch.clear();
        scratch.resize(self.entries.len() - voided, (0, 0));
        let mut next = starts.clone();
        for (slot, entry) in self.entries.as_slice().iter().enumerate() {
            if entry.code != CODE_VOID {
                let hash = hash_of(&entry.token);
                let at = &mut next[range_of(hash)];
                scratch[*at] = (hash, slot as u32);
                *at += 1;
            }
        }
        for range in 0..ranges {
            // Read the range once in order first (the hardware prefetches a sequential
            // read): the writes below then hit the cache instead of missing at random.
            let first = range * REBUILD_RANGE_BUCKETS;
            let warm = &self.buckets[first..count.min(first + REBUILD_RANGE_BUCKETS)];
            std::hint::black_box(warm.iter().fold(0, |acc, &b| acc | b));
            for &(hash, slot) in &scratch[starts[range]..starts[range + 1]] {
                self.place(hash, slot)?;
            }
        }
        Ok(())
    }

    /// Index `slot` (its token hashing to `hash`) in the first empty bucket of its path. The
    /// slot array is read only when a tag matches (a token twice, or a rare collision), so a
    /// rebuild by ranges touches nothing else at random.
    fn place(&mut self, hash: u64, slot: u32) -> Result<(), String> {
        let tag = self.code.tag(hash);
        let count = self.buckets.len();
        let mut at = home_of(hash, count);
        // Bounded: the index always has an empty bucket (at most 3/4 full).
        for _ in 0..count {
            let bucket = self.buckets[at];
            if bucket == 0 {
                self.buckets[at] = self.code.bucket(hash, slot);
                self.changes += 1;
                return Ok(());
            }
            if self.code.tagged(bucket, tag)
                && self.entries[self.code.slot(bucket) as usize].token
                    == self.entries[slot as usize].token
            {
                return Err(format!("slot {slot}: a token recorded twice"));
            }
            at = next_bucket(at, count);
        }
        Err("the token index is full".into())
    }

    pub fn allocated_bytes(&self) -> usize {
        // Index: one u32 per bucket; slot array: one entry per token; free list: one u32.
        self.buckets.capacity() * BUCKET_BYTES
            + self.entries.capacity() * ENTRY_BYTES
            + self.free.capacity() * std::mem::size_of::<u32>()
    }
}

/// The venue's tables, one per account, each for `limit` tokens with at most `voided_max`
/// voided slots waiting at once, resident before the first input ([`TokenTable::prefault`]).
/// Large tables are made resident on this machine's cores at once: what a restart waits for
/// is mostly the kernel zeroing gigabytes of fresh pages (70% of a 100M-input day's
/// restart, each page a fault in the hypervisor when the host had taken the memory back),
/// and that work divides.
pub(crate) fn new_tables(count: usize, limit: u32, voided_max: usize) -> Vec<TokenTable> {
    let mut tables: Vec<TokenTable> = (0..count)
        .map(|_| TokenTable::reserve(limit, voided_max))
        .collect();
    let bytes: usize = tables.iter().map(TokenTable::resident_bytes).sum();
    let work: Vec<&mut TokenTable> = tables.iter_mut().collect();
    on_cores(work, bytes, |(), table| table.prefault());
    tables
}

/// One account's part of a state snapshot: its slot array and its free list.
pub(crate) struct Image<'a> {
    pub entries: &'a [u8],
    pub free: &'a [[u8; 4]],
}

/// [`TokenTable::restore_image`] of every table from its image, on this machine's cores when
/// the images are large (each table is independent: the result is the same in any order).
/// The error is the first failing account's, by account number.
pub(crate) fn restore_images(
    tables: &mut [TokenTable],
    images: Vec<Image<'_>>,
    symbols: usize,
) -> Result<(), (usize, String)> {
    assert_eq!(tables.len(), images.len(), "an image per table");
    let bytes: usize = images.iter().map(|i| i.entries.len()).sum();
    let work: Vec<_> = tables.iter_mut().zip(images).enumerate().collect();
    // Working memory of the index rebuilds: one per thread, kept from one table to the next
    // (fresh pages for every table would cost what the tables' own do).
    let outcomes = on_cores(work, bytes, |scratch, (account, (table, image))| {
        table
            .restore_image(image.entries, image.free, symbols, scratch)
            .map_err(|e| (account, e))
    });
    outcomes.into_iter().collect()
}

/// Make the pages of `bytes` bytes at `start` (an allocation of this process) resident and
/// writable: `memory::populate_write` of the whole pages, 64 MiB a call (Linux 5.14+; the
/// kernel allocates and zeroes them without a fault each), a write into each page it could
/// not do (older kernels) and into the partial pages at either end. The range must hold no
/// values yet (a vector's spare capacity, or zeroes): a touch writes a zero byte. (It used to
/// read each byte and write it back, which reads uninitialized capacity: undefined behaviour
/// that Miri found in `a_large_image_is_rebuilt_by_ranges_to_the_same_table`.) The whole
/// 2 MiB pages inside the range are advised onto huge pages first ([`advise_huge_pages`]).
fn populate(start: *mut u8, bytes: usize) {
    const PAGE_BYTES: usize = 4096;
    advise_huge_pages(start, bytes);
    let touch = |from: usize, to: usize| {
        for offset in (from..to).step_by(PAGE_BYTES) {
            // SAFETY: inside the allocation, on memory that holds no value yet and that no
            // one else uses (volatile: the write is the point, the byte is never read).
            unsafe { start.add(offset).write_volatile(0) };
        }
    };
    let (head, whole) = whole_pages(start, bytes, PAGE_BYTES);
    // In steps: the call holds the process's memory map lock, which a thread's start (an
    // mmap of its stack) and every other populate wait for. Miri has no madvise: there the
    // pages are touched one by one.
    const STEP_BYTES: usize = 64 << 20;
    let mut done = 0;
    // Bounded: `whole / STEP_BYTES + 1` steps.
    while done < whole {
        let len = STEP_BYTES.min(whole - done);
        if !populate_write(start.wrapping_add(head + done), len) {
            break;
        }
        done += len;
    }
    // What the kernel did not populate (an old kernel, Miri), page by page.
    touch(head + done, head + whole);
    touch(0, head);
    touch(head + whole, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Token {
        Token::from_str_padded(s).unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri has no madvise")]
    fn a_large_table_is_marked_for_huge_pages() {
        let t = TokenTable::new(1 << 20); // 8 MiB of buckets, 18 MiB of slots
        for start in [t.buckets.as_ptr().cast::<u8>(), t.entries.as_ptr().cast()] {
            let Some(advised) = crate::memory::advised_at(start) else {
                return; // no transparent huge pages in this kernel
            };
            assert!(advised, "a large token table's mapping has no `hg` flag");
        }
    }

    #[test]
    fn a_bucket_keeps_the_slot_below_and_as_much_tag_as_the_limit_leaves() {
        let hash = 0xabcd_ef12_3456_7890_u64;
        for (limit, tag_bits) in [(1u32, 31), (64, 25), (1 << 23, 8), (u32::MAX - 1, 0)] {
            let code = BucketCode::for_limit(limit);
            assert_eq!(code.slot_mask.count_zeros(), tag_bits, "limit {limit}");
            let last = limit - 1;
            let bucket = code.bucket(hash, last);
            assert_ne!(bucket, 0, "an occupied bucket is never empty");
            assert_eq!(code.slot(bucket), last);
            assert!(code.tagged(bucket, code.tag(hash)));
            let other = code.tag(hash ^ (1 << 63));
            assert_eq!(code.tagged(bucket, other), tag_bits == 0, "limit {limit}");
            assert_eq!(code.slot(code.bucket(hash, 0)), 0);
        }
    }

    /// With no tag bits left (a limit of 2^31 or more), every probe compares tokens: the
    /// table behaves exactly as with tags (only slower). Crowded tokens: long probe runs.
    #[test]
    fn a_table_without_tag_bits_finds_voids_and_restores_the_same() {
        let untagged = |limit| {
            let mut t = TokenTable::new(limit);
            t.code = BucketCode {
                slot_mask: u32::MAX,
            };
            t
        };
        let (mut tagged, mut bare) = (TokenTable::new(64), untagged(64));
        let tokens = crowded(40);
        for (i, &k) in tokens.iter().enumerate() {
            let state = if i % 3 == 0 {
                TokenState::Pending(0)
            } else {
                TokenState::Routed(1)
            };
            assert_eq!(tagged.insert(k, state), bare.insert(k, state));
        }
        for slot in (0..40).step_by(3) {
            tagged.void(slot);
            bare.void(slot);
        }
        for (i, k) in tokens.iter().enumerate() {
            assert_eq!(bare.get(k), tagged.get(k), "token {i}");
            assert_eq!(bare.get(k).is_some(), i % 3 != 0, "token {i}");
        }
        assert_eq!(bare.get(&tok("absent")), None);
        let (entries, free) = bare.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let mut back = untagged(64);
        back.restore_image(entries, &free_bytes, 2, &mut Vec::new())
            .expect("restores");
        assert_eq!(back.sorted_entries(), tagged.sorted_entries());
    }

    #[test]
    fn slots_are_stable_and_lookups_exact() {
        let mut t = TokenTable::new(4);
        let a = t.insert(tok("a"), TokenState::Unrouted);
        let b = t.insert(tok("B"), TokenState::Pending(1));
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.get(&tok("B")), Some((1, TokenState::Pending(1))));
        assert_eq!(t.get(&tok("b")), None, "case-sensitive");
        t.set(b, TokenState::Routed(1));
        assert_eq!(t.get(&tok("B")), Some((1, TokenState::Routed(1))));
        assert_eq!(t.token(a), tok("a"));
        t.insert(tok("c"), TokenState::Unrouted);
        t.insert(tok("d"), TokenState::Unrouted);
        assert!(t.is_full());
        assert_eq!(
            t.sorted_entries().iter().map(|e| e.1).collect::<Vec<_>>(),
            [tok("B"), tok("a"), tok("c"), tok("d")]
        );
    }

    /// The hints change nothing, and the second one names the slot of a token sitting in its
    /// home bucket (what the shard's live index is prefetched by).
    #[test]
    fn prefetch_hints_name_the_slot_and_change_nothing() {
        let mut t = TokenTable::new(64);
        let slots: Vec<u32> = (0..20)
            .map(|n| t.insert(tok(&format!("p{n}")), TokenState::Routed(0)))
            .collect();
        let before = t.sorted_entries();
        let mut homes = 0;
        for (n, &slot) in slots.iter().enumerate() {
            let token = tok(&format!("p{n}"));
            t.prefetch(&token);
            let home = home_of(token_hash(&token), t.buckets.len());
            let in_home = t.code.slot(t.buckets[home]) == slot;
            homes += usize::from(in_home);
            let guess = t.prefetch_slot(&token);
            assert!(!in_home || guess == Some(slot), "token {n}: {guess:?}");
        }
        assert!(
            homes >= 10,
            "most of 20 tokens sit in their home bucket of 96"
        );
        t.prefetch(&tok("absent"));
        let _ = t.prefetch_slot(&tok("absent"));
        assert_eq!(t.sorted_entries(), before);
    }

    /// A miss remembers the empty bucket it ended at; once another token has taken that
    /// bucket (the sharded front records tokens between a lookup and its insert), the insert
    /// must probe again rather than overwrite it.
    #[test]
    fn an_insert_after_the_index_changed_probes_again() {
        let mut t = TokenTable::new(16);
        let home = |t: &TokenTable, s: &str| home_of(token_hash(&tok(s)), t.buckets.len());
        let Err(vacant) = t.lookup(&tok("late")) else {
            panic!("not recorded yet");
        };
        // A token with the same home bucket, recorded in between, takes that bucket.
        let rival = (0..10_000)
            .map(|n| format!("r{n}"))
            .find(|s| home(&t, s) == home(&t, "late"))
            .expect("some token shares the home bucket");
        let r = t.insert(tok(&rival), TokenState::Routed(0));
        let l = t.insert_vacant(vacant, tok("late"), TokenState::Routed(0));
        assert_eq!(t.get(&tok(&rival)), Some((r, TokenState::Routed(0))));
        assert_eq!(t.get(&tok("late")), Some((l, TokenState::Routed(0))));
        // A void in between shifts later buckets back (the sharded front settles verdicts
        // between a lookup and its insert): the bucket the miss ended at no longer ends the
        // token's probe path.
        let shifted = (0..10_000)
            .map(|n| format!("s{n}"))
            .filter(|s| home(&t, s) == home(&t, "after-void"))
            .take(2)
            .collect::<Vec<_>>();
        let first = t.insert(tok(&shifted[0]), TokenState::Pending(0));
        let second = t.insert(tok(&shifted[1]), TokenState::Routed(0));
        let Err(vacant) = t.lookup(&tok("after-void")) else {
            panic!("not recorded yet");
        };
        t.void(first);
        let a = t.insert_vacant(vacant, tok("after-void"), TokenState::Routed(0));
        assert_eq!(
            t.get(&tok(&shifted[1])),
            Some((second, TokenState::Routed(0)))
        );
        assert_eq!(t.get(&tok("after-void")), Some((a, TokenState::Routed(0))));
        // Without a change in between, the remembered bucket is used (and is the right one).
        let Err(vacant) = t.lookup(&tok("next")) else {
            panic!("not recorded yet");
        };
        let n = t.insert_vacant(vacant, tok("next"), TokenState::Unrouted);
        assert_eq!(t.get(&tok("next")), Some((n, TokenState::Unrouted)));
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

    /// Tokens that all hash into a few home buckets of a small table (long probe runs).
    fn crowded(n: u32) -> Vec<Token> {
        crowded_in(n, 0..3)
    }

    /// `n` tokens whose home buckets in a table of limit 64 lie in `homes`.
    fn crowded_in(n: u32, homes: std::ops::Range<usize>) -> Vec<Token> {
        let count = bucket_count(64);
        (0..200_000u32)
            .map(|i| tok(&format!("T{i}")))
            .filter(|t| homes.contains(&home_of(token_hash(t), count)))
            .take(n as usize)
            .collect()
    }

    #[test]
    fn every_hash_has_its_home_inside_the_index() {
        for count in [16, 96, 133_344, (1 << 32) + 16] {
            for hash in [
                0,
                1,
                u64::MAX,
                0xffff_ffff,
                0xffff_ffff_0000_0000,
                0x9e37_79b9_7f4a_7c15,
            ] {
                assert!(home_of(hash, count) < count, "{hash:#x} of {count}");
            }
        }
        assert_eq!(
            home_of(u64::MAX, 96),
            95,
            "the low half's top scales to the last bucket"
        );
        assert_eq!(
            home_of(0xffff_ffff_0000_0000, 96),
            0,
            "the tag's half plays no part"
        );
        assert_eq!(
            (probe_distance(90, 3, 96), probe_distance(3, 90, 96)),
            (9, 87)
        );
        assert_eq!((next_bucket(95, 96), next_bucket(3, 96)), (0, 4));
    }

    /// Probe runs that start in the last buckets wrap to the first: voids, lookups, reuse
    /// and a restore's rebuild follow them across the end.
    #[test]
    fn probe_runs_across_the_end_of_the_index_keep_every_token_reachable() {
        let count = bucket_count(64);
        let tokens = crowded_in(30, count - 2..count);
        assert_eq!(tokens.len(), 30);
        let mut t = TokenTable::new(64);
        let slots: Vec<u32> = tokens
            .iter()
            .map(|&k| t.insert(k, TokenState::Pending(1)))
            .collect();
        assert!(t.buckets[..20].iter().all(|&b| b != 0), "the run wrapped");
        for (i, &slot) in slots.iter().enumerate() {
            if i % 4 == 1 {
                t.void(slot);
            } else {
                t.set(slot, TokenState::Routed(1));
            }
        }
        for (i, k) in tokens.iter().enumerate() {
            let expected = (i % 4 != 1).then_some((slots[i], TokenState::Routed(1)));
            assert_eq!(t.get(k), expected, "token {i}");
        }
        let (entries, free) = t.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let mut back = TokenTable::new(64);
        back.restore_image(entries, &free_bytes, 2, &mut Vec::new())
            .expect("restores");
        for k in &tokens {
            assert_eq!(back.get(k), t.get(k));
        }
        for k in crowded_in(40, count - 2..count).iter().skip(30) {
            back.insert(*k, TokenState::Unrouted);
            assert_eq!(back.get(k).map(|e| e.1), Some(TokenState::Unrouted));
        }
    }

    #[test]
    fn voiding_inside_probe_runs_keeps_every_other_token_reachable() {
        let tokens = crowded(40);
        assert_eq!(tokens.len(), 40);
        let mut t = TokenTable::new(64);
        let slots: Vec<u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let state = if i % 3 == 0 {
                    TokenState::Pending(0)
                } else {
                    TokenState::Routed(0)
                };
                t.insert(k, state)
            })
            .collect();
        for (i, &slot) in slots.iter().enumerate() {
            if i % 3 == 0 {
                t.void(slot);
            }
        }
        for (i, k) in tokens.iter().enumerate() {
            let expected = (i % 3 != 0).then_some((slots[i], TokenState::Routed(0)));
            assert_eq!(t.get(k), expected, "token {i}");
        }
        // Voided slots are reused; the new tokens are found too.
        let again = crowded(60);
        for &k in &again[40..] {
            t.insert(k, TokenState::Unrouted);
        }
        for &k in &again[40..] {
            assert_eq!(t.get(&k).map(|e| e.1), Some(TokenState::Unrouted));
        }
        assert_eq!(t.len(), 40 - 14 + 20);
    }

    /// What a settled table does after a snapshot lent its slot array: every voided slot
    /// reused (pending, then voided again or routed), new slots past the lent length.
    fn go_on_after_the_loan(t: &mut TokenTable, round: usize) {
        for i in 0..6 {
            let slot = t.insert(tok(&format!("L{round}-{i}")), TokenState::Pending(1));
            if i % 2 == 0 {
                t.void(slot);
            } else {
                t.set(slot, TokenState::Routed(1));
            }
        }
        t.insert(tok(&format!("L{round}-u")), TokenState::Unrouted);
    }

    /// A loan's bytes in one vector.
    fn gathered(loan: &ImageLoan) -> Vec<u8> {
        let mut out = Vec::new();
        loan.for_each_part(&mut |part: &[u8]| {
            out.extend_from_slice(part);
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    /// A lent image ([`TokenTable::lend_image`]) reads as the table's image at the loan,
    /// whatever the table does next (its voided slots reused: read in place they would show
    /// the new tokens) and after the table is dropped.
    #[test]
    fn a_lent_image_is_the_table_at_the_loan_whatever_it_does_next() {
        let mut t = sample_table();
        // Reuse three voided slots and void them again out of order: the free list a loan
        // copies need not be sorted.
        let reused: Vec<u32> = (0..3)
            .map(|i| t.insert(tok(&format!("Q{i}")), TokenState::Pending(2)))
            .collect();
        for &at in &[1, 2, 0] {
            t.void(reused[at]);
        }
        let (at_loan, free) = t.image();
        assert!(!free.is_sorted(), "{free:?}");
        let (at_loan, voided) = (at_loan.to_vec(), free.len());
        assert_eq!(voided, 4, "the sample has voided slots");
        let loan = t.lend_image();
        go_on_after_the_loan(&mut t, 0);
        assert_ne!(&t.image().0[..at_loan.len()], &at_loan[..], "slots reused");
        assert_eq!(loan.bytes(), at_loan.len());
        assert_eq!(gathered(&loan), at_loan);
        drop(t);
        assert_eq!(gathered(&loan), at_loan, "the loan keeps the memory");
    }

    /// The same with the loan read on another thread while the table goes on (what the
    /// daemon does): under Miri (`tools/miri.sh`) a read of a slot the table writes is a
    /// data race, and a `&mut` over a lent slot an aliasing error.
    #[test]
    fn a_lent_image_is_read_on_another_thread_while_the_table_goes_on() {
        let mut t = sample_table();
        let at_loan = t.image().0.to_vec();
        let loan = t.lend_image();
        let reader = std::thread::spawn(move || gathered(&loan));
        for round in 0..3 {
            go_on_after_the_loan(&mut t, round);
        }
        assert_eq!(reader.join().unwrap(), at_loan);
    }

    /// Only a pending slot's state is set (a loan reads every settled slot in place).
    #[test]
    #[should_panic(expected = "a lent slot is never rewritten")]
    fn a_settled_slot_is_never_rewritten() {
        let mut t = sample_table();
        t.set(0, TokenState::Routed(1));
    }

    /// A table with a pending token is not lent (its slot is rewritten when it settles):
    /// checked here in debug builds; in every build `state::save` refuses to save (and so to
    /// lend) while the front awaits a verdict, which every pending token has.
    #[test]
    #[cfg(debug_assertions)] // the check it shows is a debug assertion
    #[should_panic(expected = "a token table is lent settled")]
    fn a_table_with_a_pending_token_is_not_lent() {
        let mut t = sample_table();
        t.insert(tok("P"), TokenState::Pending(1));
        let _ = t.lend_image();
    }

    /// A lent array is never restored over nor cleared (a loan would read the new bytes).
    #[test]
    #[should_panic(expected = "a lent slot array")]
    fn a_lent_array_is_not_restored_over() {
        let t = sample_table();
        let _loan = t.lend_image();
        let mut t = t;
        t.entries.clear_unlent();
    }

    /// A table with routed, unrouted and voided slots, and its image.
    fn sample_table() -> TokenTable {
        let mut t = TokenTable::new(64);
        for i in 0..30u16 {
            let state = match i % 4 {
                0 => TokenState::Unrouted,
                1 => TokenState::Pending(1),
                _ => TokenState::Routed(i % 3),
            };
            t.insert(tok(&format!("K{i}")), state);
        }
        for slot in (1..30).step_by(8) {
            t.void(slot);
        }
        for slot in (5..30).step_by(8) {
            t.set(slot, TokenState::Routed(2));
        }
        t
    }

    #[test]
    fn voids_beyond_the_resident_free_list_still_fit() {
        // The free list is resident for 2 voided slots; a restored list (or a longer ring)
        // may hold more: its capacity stays the limit.
        let mut t = TokenTable::reserve(64, 2);
        t.prefault();
        let slots: Vec<u32> = (0..10)
            .map(|i| t.insert(tok(&format!("P{i}")), TokenState::Pending(0)))
            .collect();
        for &slot in &slots {
            t.void(slot);
        }
        assert_eq!(t.len(), 0);
        assert_eq!(t.free.len(), 10);
        assert_eq!(
            t.resident_bytes(),
            bucket_count(64) * BUCKET_BYTES + 64 * ENTRY_BYTES + 2 * 4
        );
    }

    #[test]
    fn tables_are_restored_from_their_images_and_the_first_bad_account_named() {
        let source = [sample_table(), TokenTable::new(64), sample_table()];
        let images = |damage: &[usize]| -> Vec<(Vec<u8>, Vec<[u8; 4]>)> {
            source
                .iter()
                .enumerate()
                .map(|(account, t)| {
                    let (entries, free) = t.image();
                    let mut entries = entries.to_vec();
                    if damage.contains(&account) {
                        entries[14] = 9; // a state code out of range
                    }
                    (entries, free.iter().map(|s| s.to_le_bytes()).collect())
                })
                .collect()
        };
        let restore = |images: &[(Vec<u8>, Vec<[u8; 4]>)]| {
            let mut tables = new_tables(3, 64, 4);
            let outcome = restore_images(
                &mut tables,
                images
                    .iter()
                    .map(|(entries, free)| Image { entries, free })
                    .collect(),
                3,
            );
            (tables, outcome)
        };
        let (tables, outcome) = restore(&images(&[]));
        assert_eq!(outcome, Ok(()));
        for (back, t) in tables.iter().zip(&source) {
            assert_eq!(back.sorted_entries(), t.sorted_entries());
            assert_eq!(back.free, t.free);
        }
        let damaged = images(&[2, 0]);
        let (_, outcome) = restore(&damaged);
        assert_eq!(outcome.map_err(|(account, _)| account), Err(0));
    }

    #[test]
    #[cfg_attr(miri, ignore = "tens of megabytes; Miri has no madvise")]
    fn the_slot_array_beyond_the_resident_part_is_left_for_later_and_changes_nothing() {
        let owner = std::sync::Arc::new(());
        assert!(
            TokenTable::new(64).unresident(&owner).is_none(),
            "a small table is all resident"
        );
        let limit = 2 * ENTRIES_RESIDENT_AHEAD as u32;
        let mut t = TokenTable::reserve(limit, 4);
        t.prefault();
        let later = t
            .unresident(&owner)
            .expect("a large table leaves its slot array's tail");
        assert_eq!(later.bytes(), ENTRIES_RESIDENT_AHEAD * ENTRY_BYTES);
        let slots: Vec<u32> = (0..1000)
            .map(|i| t.insert(tok(&format!("L{i}")), TokenState::Routed(0)))
            .collect();
        // Populated while the table is in use: whole pages only, nothing written.
        let populated = later.populate();
        assert!(populated > later.bytes() - 8192 && populated <= later.bytes());
        for (i, &slot) in slots.iter().enumerate() {
            assert_eq!(
                t.get(&tok(&format!("L{i}"))),
                Some((slot, TokenState::Routed(0)))
            );
        }
        // A restore fills slots beyond the prefaulted ones and makes the next ones resident:
        // what is left starts after those.
        let mut full = TokenTable::reserve(limit, 4);
        full.prefault();
        let image: Vec<u8> = (0..ENTRIES_RESIDENT_AHEAD + 10)
            .flat_map(|i| {
                let mut token = [b'0'; 14];
                token[..8].copy_from_slice(&(i as u64).to_le_bytes());
                let entry = Entry::new(crate::types::Alpha(token), TokenState::Unrouted);
                let mut bytes = entry.token.to_vec();
                bytes.extend(entry.code.to_le_bytes());
                bytes.extend(entry.symbol.to_le_bytes());
                bytes
            })
            .collect();
        full.restore_image(&image, &[], 1, &mut Vec::new()).unwrap();
        let left = full.unresident(&owner).expect("still a tail");
        let restored_ahead = RESTORED_RESIDENT_AHEAD as usize;
        assert_eq!(
            left.bytes(),
            (limit as usize - ENTRIES_RESIDENT_AHEAD - 10 - restored_ahead) * ENTRY_BYTES
        );
        // Once its owner is gone, a range is left alone.
        drop(owner);
        assert_eq!(left.populate_step(0), None);
        assert_eq!(left.populate(), 0);
    }

    fn restored(t: &TokenTable) -> Result<TokenTable, String> {
        let (entries, free) = t.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let mut back = TokenTable::new(64);
        back.restore_image(entries, &free_bytes, 3, &mut Vec::new())
            .map(|()| back)
    }

    #[test]
    fn an_image_restores_the_same_table() {
        let t = sample_table();
        let back = restored(&t).expect("restores");
        assert_eq!(back.sorted_entries(), t.sorted_entries());
        assert_eq!((back.len(), back.next_slot()), (t.len(), t.next_slot()));
        for i in 0..30u16 {
            let k = tok(&format!("K{i}"));
            assert_eq!(back.get(&k), t.get(&k), "K{i}");
        }
        let (a, b) = (t.image(), back.image());
        assert_eq!((a.0, a.1), (b.0, b.1), "byte for byte");
    }

    #[test]
    fn a_damaged_image_is_refused_and_leaves_the_table_empty() {
        let t = sample_table();
        let (entries, free) = t.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let try_with = |entries: &[u8], free: &[[u8; 4]]| {
            let mut back = TokenTable::new(64);
            let outcome = back.restore_image(entries, free, 3, &mut Vec::new());
            if outcome.is_err() {
                assert_eq!((back.len(), back.next_slot()), (0, 0));
            }
            outcome
        };
        // A pending token (a state taken unsettled), a symbol out of range, a token twice.
        let mut pending = entries.to_vec();
        pending[ENTRY_BYTES + 14] = CODE_PENDING as u8;
        pending[ENTRY_BYTES + 14 + 1] = 0;
        assert!(try_with(&pending, &free_bytes).is_err());
        let mut symbol = entries.to_vec();
        symbol[2 * ENTRY_BYTES + 16] = 9;
        assert!(try_with(&symbol, &free_bytes).is_err());
        let mut twice = entries.to_vec();
        twice.copy_within(2 * ENTRY_BYTES..2 * ENTRY_BYTES + 14, 3 * ENTRY_BYTES);
        assert!(try_with(&twice, &free_bytes).unwrap_err().contains("twice"));
        // A free list naming a used slot, a voided slot twice, or missing one.
        assert!(try_with(entries, &[[0; 4]]).is_err());
        let doubled: Vec<[u8; 4]> = [free_bytes[0], free_bytes[0]].to_vec();
        assert!(try_with(entries, &doubled).is_err());
        assert!(try_with(entries, &free_bytes[1..]).is_err());
        // Cut short, or more slots than the table holds.
        assert!(try_with(&entries[..entries.len() - 1], &free_bytes).is_err());
        assert!(try_with(&vec![0; 65 * ENTRY_BYTES], &[]).is_err());
        // Every single changed byte: refused or restored, never a panic.
        for at in 0..entries.len() {
            let mut changed = entries.to_vec();
            changed[at] ^= 0x41;
            let _ = try_with(&changed, &free_bytes);
        }
        assert!(try_with(entries, &free_bytes).is_ok());
    }

    /// Big enough for the populated (not filled) arrays, small enough for Miri: the pages
    /// are touched, the image is taken and restored (the `unsafe` code of this module).
    #[test]
    fn a_populated_table_round_trips_its_image() {
        let limit = 60_000;
        assert!(limit as usize * ENTRY_BYTES > FILL_BYTES_MAX);
        let mut t = TokenTable::new(limit);
        for n in 0..40 {
            t.insert(tok(&format!("m{n}")), TokenState::Routed(n % 2));
        }
        t.insert(tok("pending"), TokenState::Pending(1));
        t.void(40);
        let (entries, free) = t.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let mut back = TokenTable::new(limit);
        back.restore_image(entries, &free_bytes, 2, &mut Vec::new())
            .expect("restores");
        assert_eq!(back.sorted_entries(), t.sorted_entries());
        assert_eq!(back.next_slot(), 40, "the voided slot is reused first");
    }

    /// A table large enough to be populated by the kernel and rebuilt by ranges.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "70,000 tokens: too slow under Miri (see the test above)"
    )]
    fn a_large_image_is_rebuilt_by_ranges_to_the_same_table() {
        let limit = 100_000;
        assert!(bucket_count(limit as usize) > 2 * REBUILD_RANGE_BUCKETS);
        assert!(limit as usize * ENTRY_BYTES > FILL_BYTES_MAX);
        let mut t = TokenTable::new(limit);
        let tokens: Vec<Token> = (0..70_000).map(|i| tok(&format!("L{i}"))).collect();
        for (i, &k) in tokens.iter().enumerate() {
            let state = match i % 5 {
                0 => TokenState::Pending(0),
                1 => TokenState::Unrouted,
                _ => TokenState::Routed((i % 3) as u16),
            };
            t.insert(k, state);
        }
        for slot in (0..70_000).step_by(5) {
            t.void(slot);
        }
        let (entries, free) = t.image();
        let free_bytes: Vec<[u8; 4]> = free.iter().map(|s| s.to_le_bytes()).collect();
        let mut back = TokenTable::new(limit);
        let mut scratch = Vec::new();
        back.restore_image(entries, &free_bytes, 3, &mut scratch)
            .expect("restores");
        for (i, k) in tokens.iter().enumerate() {
            assert_eq!(back.get(k), t.get(k), "L{i}");
        }
        assert_eq!((back.len(), back.next_slot()), (t.len(), t.next_slot()));
        // A token twice in different ranges' worth of slots is found.
        let mut twice = entries.to_vec();
        let (a, b) = (ENTRY_BYTES, 60_001 * ENTRY_BYTES);
        twice.copy_within(a..a + 14, b);
        let mut again = TokenTable::new(limit);
        let refused = again.restore_image(&twice, &free_bytes, 3, &mut scratch);
        assert!(refused.unwrap_err().contains("twice"));
    }
}
