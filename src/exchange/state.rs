//! The exchange's state between two inputs as bytes, and back: what a state snapshot holds.
//!
//! The encoding is *logical*, not a memory image, so it does not depend on how the state is
//! split over shards nor on the books' internals (pool slots, level pools, ladders), which may
//! change while the format stays:
//!
//! - the day's counters and flags: last input, market phase, next order reference and match
//!   numbers, day ended, halted symbols, blocked accounts, and every account's shares executed
//!   today (history kept for `max_day_shares`; the open orders and shares of the limits are
//!   the books' and are counted again as the orders are restored);
//! - every account's token table as its slot array lies in memory (token, state code,
//!   symbol: 18 bytes a slot, voided slots included) and its free list, with no pending
//!   token: the state is taken settled. The slot array is the bulk of a busy day's state
//!   (every token of the day), so it is written and read back with one copy each way and the
//!   hash index is rebuilt from it ([`super::tokens::TokenTable::restore_image`]); the index
//!   itself is not saved (it is sized by the venue's limit, not by the tokens used);
//! - every symbol's resting orders in **order reference order**, which is the order they
//!   were inserted into the book: re-inserting them in that order rebuilds both the
//!   price-time priority within each price (displayed and hidden queues) and the expiry order
//!   within each deadline second. Pool slots are internal: the shards' live index (account,
//!   token slot → pool slot) and the merge's pool slot → order reference table are rebuilt as
//!   the orders go back in.
//!
//! Restoring into one shard ([`super::Exchange`]) or several ([`super::Split`]) gives the
//! same state: the same digest, the same outputs for any further input.

use super::front::{Front, Phase};
use super::merge::Merge;
use super::msg::shard_of;
use super::shard::{Resting, Shard};
use super::slots::ImageLoan;
use super::tokens::{ENTRY_BYTES, Image, TokenState, TokenTable, restore_images};
use crate::types::{Alpha, Price, Side, Token};
use std::io::Write;

/// First bytes of an encoded state (the version is part of it).
const MAGIC: &[u8; 24] = b"bourse-exchange-state-v2";
/// Last bytes: a state cut short is refused even before the file checksum is looked at.
const END: &[u8; 8] = b"end-v2\0\0";

/// A state that cannot be restored: bytes of another venue, damaged or cut short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError(pub String);

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exchange state: {}", self.0)
    }
}

impl std::error::Error for StateError {}

fn bad<T>(what: impl Into<String>) -> Result<T, StateError> {
    Err(StateError(what.into()))
}

/// One resting order as saved.
#[derive(Clone, Copy, Debug)]
struct SavedOrder {
    order_ref: u64,
    side: Side,
    price: Price,
    leaves: u32,
    hidden: bool,
    deadline_ms: u32,
    resting: Resting,
}

/// Write the settled state of `front`, `shards` and `merge` (one shard or several; the bytes
/// are the same). Allocates (it runs off the hot path: a snapshot helper, tests, tools).
pub(crate) fn save(
    front: &Front,
    shards: &[Shard],
    merge: &Merge,
    out: &mut impl Write,
) -> std::io::Result<()> {
    save_with(front, shards, merge, out, |w, table| {
        w.bytes(table.image().0)
    })
}

/// A state encoded with its token tables' slot arrays lent, not copied (`save_lending`):
/// the bytes around them, and each lent array with where it goes in those bytes. Its bytes
/// ([`Self::for_each_part`]) are `save`'s, read later on any thread while the exchange goes
/// on (see `super::slots`). Reused from one snapshot to the next.
#[derive(Default)]
pub struct LentState {
    around: Vec<u8>,
    /// (offset in `around`, the slot array lent there), in offset order.
    lent: Vec<(usize, ImageLoan)>,
}

impl LentState {
    /// Room for `bytes` bytes around the slot arrays (it grows if a state needs more).
    pub fn with_capacity(bytes: usize) -> LentState {
        LentState {
            around: Vec::with_capacity(bytes),
            lent: Vec::new(),
        }
    }

    /// Forget the state (and give the slot arrays back).
    pub fn clear(&mut self) {
        self.around.clear();
        self.lent.clear();
    }

    /// The state's bytes.
    pub fn len(&self) -> usize {
        self.around.len() + self.lent.iter().map(|(_, l)| l.bytes()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state's bytes gathered (allocates: tests and tools).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each_part(|part| {
            out.extend_from_slice(part);
            Ok::<(), ()>(())
        })
        .expect("gathering into memory");
        out
    }

    /// Bytes encoded on the engine's thread (the rest are lent).
    pub fn encoded_bytes(&self) -> usize {
        self.around.len()
    }

    /// The state's bytes in order, as slices of this and of the lent arrays.
    pub fn for_each_part<E>(&self, mut each: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut from = 0;
        for (at, loan) in &self.lent {
            each(&self.around[from..*at])?;
            loan.for_each_part(&mut each)?;
            from = *at;
        }
        each(&self.around[from..])
    }
}

/// [`save`] into `out`, the token tables' slot arrays lent instead of copied: what the
/// daemon's engine thread does at a snapshot point, so that it pauses for the books and the
/// counters only, not for the bulk of the state (every token of the day), which the
/// snapshot's writer thread reads from the lent arrays.
pub(crate) fn save_lending(
    front: &Front,
    shards: &[Shard],
    merge: &Merge,
    out: &mut LentState,
) -> std::io::Result<()> {
    out.clear();
    let LentState { around, lent } = out;
    save_with(front, shards, merge, around, |w, table| {
        lent.push((w.0.len(), table.lend_image()));
        Ok(())
    })
}

/// [`save`], each token table's slot array written by `slot_array`.
fn save_with<W: Write>(
    front: &Front,
    shards: &[Shard],
    merge: &Merge,
    out: &mut W,
    mut slot_array: impl FnMut(&mut Enc<'_, W>, &TokenTable) -> std::io::Result<()>,
) -> std::io::Result<()> {
    assert_eq!(front.pending(), 0, "a state is saved settled");
    assert_eq!(front.last_seq(), merge.last_seq(), "the merge is caught up");
    let mut w = Enc(out);
    w.bytes(MAGIC)?;
    w.u64(front.last_seq())?;
    w.u8(phase_code(front.phase))?;
    w.u64(merge.next_order_ref)?;
    w.u64(merge.next_match)?;
    w.u8(u8::from(merge.day_ended))?;
    w.u32(front.halted.len() as u32)?;
    for &halted in &front.halted {
        w.u8(u8::from(halted))?;
    }
    let accounts = front.tokens.len();
    w.u32(accounts as u32)?;
    for account in 0..accounts {
        let executed: u64 = shards
            .iter()
            .map(|s| s.risk().get(account as u16).executed)
            .sum();
        w.u8(u8::from(front.blocked[account]))?;
        w.u64(executed)?;
    }
    // Token tables as their slot arrays lie in memory: one write each.
    for table in &front.tokens {
        let (entries, free) = table.image();
        w.u32((entries.len() / ENTRY_BYTES) as u32)?;
        w.u32(free.len() as u32)?;
        for &slot in free {
            w.u32(slot)?;
        }
        slot_array(&mut w, table)?;
    }
    for symbol in 0..front.halted.len() as u16 {
        let orders = saved_orders(shards, merge, symbol);
        w.u32(orders.len() as u32)?;
        for o in &orders {
            w.u64(o.order_ref)?;
            w.u8(side_code(o.side))?;
            w.u32(o.price.0)?;
            w.u32(o.leaves)?;
            w.u8(u8::from(o.hidden))?;
            w.u32(o.deadline_ms)?;
            w.u16(o.resting.account)?;
            w.bytes(&o.resting.token.0)?;
            w.u32(o.resting.chain_executed)?;
            w.u8(o.resting.side_letter)?;
            w.u8(o.resting.display)?;
            w.u8(o.resting.capacity)?;
        }
    }
    w.bytes(END)
}

/// The resting orders of `symbol` in order reference (insertion) order.
fn saved_orders(shards: &[Shard], merge: &Merge, symbol: u16) -> Vec<SavedOrder> {
    let book = shards[shard_of(symbol, shards.len())].book(symbol);
    let mut orders = Vec::with_capacity(book.order_count() as usize);
    for side in [Side::Buy, Side::Sell] {
        book.for_each_order(side, |o| {
            let p = *o.payload;
            orders.push(SavedOrder {
                order_ref: merge.refs[symbol as usize][o.handle.0 as usize],
                side,
                price: o.price,
                leaves: o.leaves,
                hidden: o.hidden,
                deadline_ms: o.deadline_ms,
                resting: p,
            });
        });
    }
    orders.sort_unstable_by_key(|o| o.order_ref);
    orders
}

/// Fill freshly built stages (nothing applied yet) with the state in `bytes`. Every count
/// and cross-reference is checked: bytes that do not describe a state of this venue are an
/// error, never a panic. Returns the sequence number of the last input the state includes.
pub(crate) fn restore(
    front: &mut Front,
    shards: &mut [Shard],
    merge: &mut Merge,
    bytes: &[u8],
) -> Result<u64, StateError> {
    assert_eq!(front.last_seq(), 0, "restore into fresh stages");
    assert_eq!(merge.order_refs_used(), 0, "restore into fresh stages");
    let mut r = Dec { bytes, at: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return bad("not a state of this version");
    }
    let last_seq = r.u64()?;
    let phase = phase_of(r.u8()?)?;
    let next_order_ref = r.u64()?;
    let next_match = r.u64()?;
    let day_ended = r.u8()? != 0;
    if last_seq == 0 || next_order_ref == 0 || next_match == 0 {
        return bad("counters out of range");
    }
    let symbols = r.u32()? as usize;
    if symbols != front.halted.len() {
        return bad(format!(
            "{symbols} symbols, the venue has {}",
            front.halted.len()
        ));
    }
    for symbol in 0..symbols {
        let halted = r.u8()? != 0;
        front.halted[symbol] = halted;
        merge.halted[symbol] = halted;
    }
    let accounts = r.u32()? as usize;
    if accounts != front.tokens.len() {
        return bad(format!(
            "{accounts} accounts, the venue has {}",
            front.tokens.len()
        ));
    }
    for account in 0..accounts {
        front.blocked[account] = r.u8()? != 0;
        let executed = r.u64()?;
        if executed > 0 && !shards[0].restore_executed(account as u16, executed) {
            return bad("shares executed by an account without limits");
        }
    }
    // Every account's image first (slices of the snapshot), then the tables from them at
    // once (see `restore_images`).
    let mut images = Vec::with_capacity(accounts);
    for account in 0..accounts {
        let count = r.u32()? as usize;
        let free_count = r.u32()? as usize;
        if count > front.tokens[account].limit() || free_count > count {
            return bad(format!(
                "account {account}: more tokens than its table holds"
            ));
        }
        let (free, _) = r.take(free_count * 4)?.as_chunks::<4>();
        let entries = r.take(count * ENTRY_BYTES)?;
        images.push(Image { entries, free });
    }
    if let Err((account, e)) = restore_images(&mut front.tokens, images, symbols) {
        return bad(format!("account {account}: {e}"));
    }
    for symbol in 0..symbols as u16 {
        let count = r.u32()?;
        let mut last_ref = 0u64;
        for _ in 0..count {
            let order_ref = r.u64()?;
            let side = side_of(r.u8()?)?;
            let price = Price(r.u32()?);
            let leaves = r.u32()?;
            let hidden = r.u8()? != 0;
            let deadline_ms = r.u32()?;
            let account = r.u16()?;
            let token: Token = Alpha(r.array::<14>()?);
            let chain_executed = r.u32()?;
            let (side_letter, display, capacity) = (r.u8()?, r.u8()?, r.u8()?);
            if order_ref <= last_ref || order_ref >= next_order_ref {
                return bad("order references out of order or range");
            }
            last_ref = order_ref;
            let Some((slot, state)) = front
                .tokens
                .get(account as usize)
                .and_then(|t| t.get(&token))
            else {
                return bad("an order names no recorded token");
            };
            let resting = Resting {
                token,
                account,
                chain_executed,
                side_letter,
                display,
                capacity,
            };
            if leaves == 0 || hidden == resting.displayed() {
                return bad("an order with no shares or a display that contradicts it");
            }
            if state != TokenState::Routed(symbol) {
                return bad("an order whose token was not routed to its symbol");
            }
            let shard = &mut shards[shard_of(symbol, merge_shards(merge))];
            if shard
                .live_order(crate::types::AccountId(account), slot, &token, symbol)
                .is_some()
            {
                return bad("two resting orders with one token");
            }
            let placed = shard.restore_order(
                symbol,
                side,
                price,
                leaves,
                hidden,
                deadline_ms,
                slot,
                resting,
            );
            let Some(handle) = placed else {
                return bad("an order does not fit its book or crosses it");
            };
            merge.refs[symbol as usize][handle.0 as usize] = order_ref;
        }
    }
    if r.take(END.len())? != END || r.at != bytes.len() {
        return bad("trailing bytes or no end mark");
    }
    front.restore_position(phase, last_seq);
    merge.restore_position(next_order_ref, next_match, day_ended, last_seq);
    for shard in shards.iter_mut() {
        shard.restore_position(last_seq);
    }
    Ok(last_seq)
}

fn merge_shards(merge: &Merge) -> usize {
    merge.shards()
}

/// Bytes of a state's front that [`ended_in`] reads: the version, the last sequence number,
/// the phase.
pub(crate) const FRONT_BYTES: usize = MAGIC.len() + 8 + 1;

/// Had the day ended (end of day applied: the market closed for good) in the state whose
/// first [`FRONT_BYTES`] are `front`? `None`: not the front of a state of this version. (A
/// snapshot's state is gigabytes on a busy day; this question needs its first bytes only.)
pub(crate) fn ended_in(front: &[u8]) -> Option<bool> {
    let rest = front.strip_prefix(MAGIC.as_slice())?;
    let phase = phase_of(*rest.get(8)?).ok()?;
    Some(phase == Phase::Closed)
}

fn phase_code(phase: Phase) -> u8 {
    match phase {
        Phase::PreOpen => 0,
        Phase::Open => 1,
        Phase::Closed => 2,
    }
}

fn phase_of(code: u8) -> Result<Phase, StateError> {
    match code {
        0 => Ok(Phase::PreOpen),
        1 => Ok(Phase::Open),
        2 => Ok(Phase::Closed),
        _ => bad("market phase out of range"),
    }
}

fn side_code(side: Side) -> u8 {
    match side {
        Side::Buy => 0,
        Side::Sell => 1,
    }
}

fn side_of(code: u8) -> Result<Side, StateError> {
    match code {
        0 => Ok(Side::Buy),
        1 => Ok(Side::Sell),
        _ => bad("side out of range"),
    }
}

/// Little-endian writer.
struct Enc<'a, W: Write>(&'a mut W);

impl<W: Write> Enc<'_, W> {
    fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.write_all(b)
    }
    fn u8(&mut self, v: u8) -> std::io::Result<()> {
        self.bytes(&[v])
    }
    fn u16(&mut self, v: u16) -> std::io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> std::io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> std::io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
}

/// Little-endian reader over a slice; running short is an error.
struct Dec<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return bad("cut short");
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, StateError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, StateError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, StateError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}
