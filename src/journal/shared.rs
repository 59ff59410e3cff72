//! [`SharedBytes`]: the one way the journal touches mapped bytes that another thread or
//! process may read or write at the same time.
//!
//! A segment mapping is shared memory: the writer stores records past the published end while
//! readers (threads here, processes elsewhere) load commit words and read published records.
//! Rust references promise that nobody else writes the bytes they cover (`&[u8]`) or even
//! looks at them (`&mut [u8]`), so a reference over a whole mapping while another thread
//! writes part of it is undefined behaviour even if the two never touch the same byte at the
//! same time. This type therefore keeps only a raw pointer and a length:
//!
//! - commit words are loaded and stored through [`AtomicU32::from_ptr`] /
//!   [`AtomicU64::from_ptr`] (never through a reference derived from a byte slice);
//! - unpublished bytes are written with [`ptr::copy_nonoverlapping`] / [`ptr::write_bytes`];
//! - a `&[u8]` is created only over bytes that are published and frozen (a record whose
//!   commit word was loaded with Acquire), or while no one else can write (recovery holds the
//!   directory lock and runs before any reader of this process starts).
//!
//! Storage may be a file mapping or, in tests (and under Miri, which cannot map files), an
//! ordinary heap buffer: [`HeapBytes`].

use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A raw view of `len` bytes at `ptr`, 8-aligned. Copyable; it does not own the storage, so
/// whoever builds one keeps the storage alive and in place for as long as the view is used.
#[derive(Clone, Copy, Debug)]
pub struct SharedBytes {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the view is a pointer and a length; every access it offers is either atomic, or
// unsafe with the caller promising the single-writer / published-bytes discipline above.
unsafe impl Send for SharedBytes {}
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// # Safety
    /// `ptr` is valid for reads of `len` bytes (and for writes too, if any writing method is
    /// called) for as long as the view or anything derived from it is used, and 8-aligned.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> SharedBytes {
        assert!(
            (ptr as usize).is_multiple_of(8),
            "shared bytes must be 8-aligned"
        );
        SharedBytes { ptr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address (for prefetch hints; never dereferenced through this).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    fn check(&self, offset: usize, bytes: usize) {
        assert!(
            offset <= self.len && bytes <= self.len - offset,
            "shared bytes {offset}+{bytes} out of {}",
            self.len
        );
    }

    fn at(&self, offset: usize, bytes: usize) -> *mut u8 {
        self.check(offset, bytes);
        // SAFETY: in bounds (checked), so the pointer stays inside the storage.
        unsafe { self.ptr.add(offset) }
    }

    pub fn load_u32_acquire(&self, offset: usize) -> u32 {
        let word = self.at(offset, 4);
        assert!((word as usize).is_multiple_of(4));
        // SAFETY: in bounds, 4-aligned, valid for the view's life; every concurrent access to
        // a commit word is atomic (writers use `store_u32_release`).
        unsafe { AtomicU32::from_ptr(word as *mut u32) }.load(Ordering::Acquire)
    }

    pub fn load_u64_acquire(&self, offset: usize) -> u64 {
        let word = self.at(offset, 8);
        assert!((word as usize).is_multiple_of(8));
        // SAFETY: as `load_u32_acquire`, 8-aligned.
        unsafe { AtomicU64::from_ptr(word as *mut u64) }.load(Ordering::Acquire)
    }

    /// # Safety
    /// The caller is the only writer of the view's storage.
    pub unsafe fn store_u32_release(&self, offset: usize, value: u32) {
        let word = self.at(offset, 4);
        assert!((word as usize).is_multiple_of(4));
        // SAFETY: in bounds, aligned; readers load this word atomically.
        unsafe { AtomicU32::from_ptr(word as *mut u32) }.store(value, Ordering::Release);
    }

    /// # Safety
    /// The caller is the only writer of the view's storage.
    pub unsafe fn store_u64_release(&self, offset: usize, value: u64) {
        let word = self.at(offset, 8);
        assert!((word as usize).is_multiple_of(8));
        // SAFETY: in bounds, aligned; readers load this word atomically.
        unsafe { AtomicU64::from_ptr(word as *mut u64) }.store(value, Ordering::Release);
    }

    /// Copy `bytes` in at `offset`.
    ///
    /// # Safety
    /// The caller is the only writer, and nobody reads `[offset, offset + bytes.len())` until
    /// it is published by a later Release store (or no reader runs at all).
    pub unsafe fn write(&self, offset: usize, bytes: &[u8]) {
        let to = self.at(offset, bytes.len());
        // SAFETY: in bounds; `bytes` is a Rust slice, so it cannot overlap unpublished bytes
        // of the view (nobody holds a reference to those).
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len()) };
    }

    /// Zero `[offset, offset + bytes)`.
    ///
    /// # Safety
    /// As [`SharedBytes::write`].
    pub unsafe fn zero(&self, offset: usize, bytes: usize) {
        let to = self.at(offset, bytes);
        // SAFETY: in bounds; see the contract.
        unsafe { ptr::write_bytes(to, 0, bytes) };
    }

    /// Copy `out.len()` bytes from `offset` out (non-atomic reads: use only on bytes that no
    /// one writes concurrently, e.g. a published header).
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        let from = self.at(offset, out.len());
        // SAFETY: in bounds; `out` is a distinct Rust buffer.
        unsafe { ptr::copy_nonoverlapping(from, out.as_mut_ptr(), out.len()) };
    }

    /// A shared slice over `[offset, offset + bytes)`.
    ///
    /// # Safety
    /// Nobody writes those bytes while the slice lives: they are published and frozen (a
    /// record seen through an Acquire load of its commit word), or no writer runs. The
    /// storage outlives `'a`.
    pub unsafe fn slice<'a>(&self, offset: usize, bytes: usize) -> &'a [u8] {
        let from = self.at(offset, bytes);
        // SAFETY: in bounds; frozen per the contract.
        unsafe { std::slice::from_raw_parts(from, bytes) }
    }
}

/// Heap storage for a [`SharedBytes`] view: 8-aligned, zero-filled, fixed size. Used by tests
/// (and under Miri) in place of a file mapping.
pub struct HeapBytes {
    words: *mut [u64],
    len: usize,
}

// SAFETY: owns a plain heap allocation; all shared access goes through `SharedBytes`.
unsafe impl Send for HeapBytes {}
unsafe impl Sync for HeapBytes {}

impl HeapBytes {
    pub fn zeroed(len: usize) -> HeapBytes {
        let words = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        HeapBytes {
            words: Box::into_raw(words),
            len,
        }
    }

    /// A view of the whole buffer; valid while `self` lives.
    pub fn view(&self) -> SharedBytes {
        // SAFETY: the allocation is `len` bytes or more, 8-aligned (u64), owned by `self`
        // and freed only on drop; the pointer comes from `Box::into_raw` (no reference).
        unsafe { SharedBytes::new(self.words as *mut u8, self.len) }
    }
}

impl Drop for HeapBytes {
    fn drop(&mut self) {
        // SAFETY: `words` came from `Box::into_raw` in `zeroed` and is dropped once.
        drop(unsafe { Box::from_raw(self.words) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_bytes_round_trip() {
        let heap = HeapBytes::zeroed(64);
        let view = heap.view();
        assert_eq!(view.len(), 64);
        assert_eq!(view.load_u32_acquire(8), 0);
        // SAFETY: this test is the only writer.
        unsafe {
            view.write(12, b"abcd");
            view.store_u32_release(8, 7);
            view.store_u64_release(16, u64::MAX);
        }
        assert_eq!(view.load_u32_acquire(8), 7);
        assert_eq!(view.load_u64_acquire(16), u64::MAX);
        let mut out = [0u8; 4];
        view.copy_out(12, &mut out);
        assert_eq!(&out, b"abcd");
        // SAFETY: no writer while the slice lives.
        assert_eq!(unsafe { view.slice(12, 4) }, b"abcd");
        // SAFETY: only writer.
        unsafe { view.zero(8, 8) };
        assert_eq!(view.load_u64_acquire(8), 0);
    }

    #[test]
    #[should_panic(expected = "out of")]
    fn out_of_bounds_panics_instead_of_touching_memory() {
        let heap = HeapBytes::zeroed(16);
        heap.view().load_u32_acquire(16);
    }
}
