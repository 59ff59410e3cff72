//! A token table's slot array, lendable to a state snapshot's writer without a copy.
//!
//! The slot array is the bulk of a busy day's state (18 bytes for every token of the day:
//! ~350 MB after 20M inputs). A snapshot used to copy it on the engine thread, which paused
//! the venue for 60-120 ms per snapshot on such a day (BENCHMARKS.md section 7, "Stop 27"). It need not: once a table is settled, a
//! slot below its length changes only while it is *voided* (on the free list, reused by a
//! later insert) or *pending* (which a settled table has none of). Every other slot
//! (unrouted or routed) keeps its bytes for the rest of the day. So a snapshot lends the
//! array as it stands ([`SlotArray::lend`]): the loan names the length and carries copies of
//! the voided slots, and the snapshot's writer thread copies the rest from the shared
//! memory while the engine goes on writing new slots past that length and reusing the
//! voided ones, which the loan never reads.
//!
//! One writer: the table that owns the array. Readers: loans, on other threads, each of a
//! prefix whose every slot outside its voided list is never written again. Two assertions
//! hold the owner to that: [`SlotArray::overwrite`] rewrites only a slot its caller says is
//! pending or voided (the token table's states), and a state is saved (and its tables lent)
//! only once the front awaits no verdict, i.e. holds no pending token (`state::save_with`,
//! `TokenTable::lend_image`), so every pending slot was written after the loan, past its
//! length or into a slot it copied. The memory is shared by `Arc`,
//! so a loan outlives a dropped table. Writes go through raw pointers and no `&mut` of a
//! slot is made while a loan may exist, so a loan's reads alias nothing mutable (checked
//! under Miri by the loan tests in `exchange::tokens`, `tools/miri.sh`).

use super::tokens::{ENTRY_BYTES, Entry};
use std::ptr::NonNull;
use std::sync::Arc;

/// The allocation: `capacity` entries, of which the owner's [`SlotArray`] knows how many are
/// initialized.
struct Memory {
    start: NonNull<Entry>,
    capacity: usize,
}

// SAFETY: `Memory` is plain memory of `Copy` data; who writes and reads which slots is the
// protocol of the module docs (one writer, loans reading only slots it never writes again).
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: `start` and `capacity` came from a `Vec<Entry>` (see `SlotArray::with_capacity`);
        // length 0: `Entry` is `Copy`, nothing to drop.
        drop(unsafe { Vec::from_raw_parts(self.start.as_ptr(), 0, self.capacity) });
    }
}

/// A fixed array of [`Entry`], the first `len` initialized; never reallocated.
pub(super) struct SlotArray {
    memory: Arc<Memory>,
    len: usize,
}

impl SlotArray {
    pub fn with_capacity(capacity: usize) -> SlotArray {
        let mut vec = std::mem::ManuallyDrop::new(Vec::<Entry>::with_capacity(capacity));
        let memory = Memory {
            start: NonNull::new(vec.as_mut_ptr()).expect("a vector's pointer is never null"),
            capacity: vec.capacity(),
        };
        SlotArray {
            memory: Arc::new(memory),
            len: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn capacity(&self) -> usize {
        self.memory.capacity
    }

    /// The array's start, for prefetching and for making pages resident (beyond `len`).
    #[inline]
    pub fn as_ptr(&self) -> *const Entry {
        self.memory.start.as_ptr()
    }

    /// The array's start, for making spare capacity resident (writes beyond `len` only).
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut Entry {
        self.memory.start.as_ptr()
    }

    /// The initialized entries.
    #[inline]
    pub fn as_slice(&self) -> &[Entry] {
        // SAFETY: the first `len` entries are initialized; no `&mut` to any entry is ever made
        // (writes are raw), so shared references may coexist with the owner's later writes to
        // other slots and with loans.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// The initialized entries' bytes ([`Entry`] has no padding).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: as `as_slice`; `Entry` is `#[repr(C)]` of byte arrays and `u16`s with no
        // padding (asserted in `tokens`), so each of its bytes is initialized.
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast(), self.len * ENTRY_BYTES) }
    }

    #[inline]
    pub fn get(&self, slot: usize) -> Option<&Entry> {
        self.as_slice().get(slot)
    }

    /// Append an entry. The caller checked there is room.
    #[inline]
    pub fn push(&mut self, entry: Entry) {
        assert!(
            self.len < self.capacity(),
            "slot array full (caller must check)"
        );
        // SAFETY: inside the allocation, past every initialized entry (no loan reads there).
        unsafe { self.memory.start.as_ptr().add(self.len).write(entry) };
        self.len += 1;
    }

    /// Rewrite an initialized slot. Only a pending or voided slot may be rewritten (the
    /// caller's `writable`, asserted): a loan reads every other slot of its prefix.
    #[inline]
    pub fn overwrite(&mut self, slot: usize, entry: Entry, writable: impl Fn(&Entry) -> bool) {
        assert!(
            writable(&self.as_slice()[slot]),
            "a lent slot is never rewritten"
        );
        // SAFETY: `slot < len` (indexed above); no reference to it outlives the check.
        unsafe { self.memory.start.as_ptr().add(slot).write(entry) };
    }

    /// Write `value` into every slot of the capacity and leave none initialized (pages made
    /// resident at start-up). Before any loan.
    pub fn fill_capacity_then_clear(&mut self, value: Entry) {
        self.assert_unlent("filling");
        for slot in 0..self.capacity() {
            // SAFETY: inside the allocation; nothing else refers to it (unlent).
            unsafe { self.memory.start.as_ptr().add(slot).write(value) };
        }
        self.len = 0;
    }

    /// Make `bytes` (whole entries, at most the capacity) the array, replacing what it held.
    /// Before any loan (a restore).
    pub fn copy_from_bytes(&mut self, bytes: &[u8]) {
        self.assert_unlent("restoring");
        assert!(bytes.len().is_multiple_of(ENTRY_BYTES));
        let count = bytes.len() / ENTRY_BYTES;
        assert!(count <= self.capacity());
        // SAFETY: `count` entries fit; every byte pattern is an `Entry` (plain data; a restore
        // checks the codes next); unlent, so no one reads the destination.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.memory.start.as_ptr().cast::<u8>(),
                bytes.len(),
            );
        }
        self.len = count;
    }

    /// Rewrite slot `slot` in place through `change`. Before any loan (a restore's checks).
    pub fn change_unlent(&mut self, slot: usize, change: impl FnOnce(&mut Entry)) {
        self.assert_unlent("changing in place");
        assert!(slot < self.len);
        // SAFETY: initialized; unlent, so this is the only reference to it.
        change(unsafe { &mut *self.memory.start.as_ptr().add(slot) });
    }

    /// Forget every entry. Before any loan (a failed restore).
    pub fn clear_unlent(&mut self) {
        self.assert_unlent("clearing");
        self.len = 0;
    }

    /// No loan exists (`get_mut` acquires: a loan dropped on another thread is done
    /// reading before the owner writes again).
    fn assert_unlent(&mut self, doing: &str) {
        assert!(
            Arc::get_mut(&mut self.memory).is_some(),
            "{doing} a lent slot array"
        );
    }

    /// Lend the array as it stands: `voided` names every slot that may be rewritten later
    /// (those on the free list: the caller is settled, nothing is pending), whose bytes the
    /// loan copies now. Allocates the loan's copy of those slots only.
    pub fn lend(&self, voided: &[u32]) -> ImageLoan {
        let mut voided: Vec<(u32, Entry)> = voided
            .iter()
            .map(|&slot| (slot, self.as_slice()[slot as usize]))
            .collect();
        voided.sort_unstable_by_key(|v| v.0);
        ImageLoan {
            memory: Arc::clone(&self.memory),
            count: self.len,
            voided,
        }
    }
}

impl std::ops::Index<usize> for SlotArray {
    type Output = Entry;

    #[inline]
    fn index(&self, slot: usize) -> &Entry {
        &self.as_slice()[slot]
    }
}

/// A slot array's bytes as they were at [`SlotArray::lend`], read later on any thread.
pub(crate) struct ImageLoan {
    memory: Arc<Memory>,
    count: usize,
    /// The slots the owner may rewrite after the loan, with their bytes at the loan (sorted).
    voided: Vec<(u32, Entry)>,
}

impl ImageLoan {
    /// Bytes of the image.
    pub fn bytes(&self) -> usize {
        self.count * ENTRY_BYTES
    }

    /// The image's bytes in order: runs of slots the owner never rewrites, read where they
    /// lie, and between them the voided slots' bytes as they were at the loan.
    pub fn for_each_part<E>(&self, each: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut from = 0usize;
        // Bounded: one step per voided slot.
        for &(slot, entry) in &self.voided {
            each(self.settled(from, slot as usize))?;
            each(&entry.to_bytes())?;
            from = slot as usize + 1;
        }
        each(self.settled(from, self.count))
    }

    /// Slots `from..to` of the loan, none of them voided.
    fn settled(&self, from: usize, to: usize) -> &[u8] {
        assert!(from <= to && to <= self.count);
        let start = self.memory.start.as_ptr().cast::<u8>().cast_const();
        // SAFETY: below `count`, so initialized before the loan was made (and the loan sent
        // to this thread through a channel: a happens-before edge), and never voided at the
        // loan, so never written again (the module docs): immutable while the loan, which
        // keeps the memory alive, lives. The owner writes only other slots, through raw
        // pointers, so this shared slice aliases nothing mutable.
        unsafe {
            std::slice::from_raw_parts(start.add(from * ENTRY_BYTES), (to - from) * ENTRY_BYTES)
        }
    }
}
