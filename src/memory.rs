//! Hints to the memory system: where a line will be read or written next (the exchange's
//! large tables, the journal's and the message stores' writers), and which arrays should sit
//! on huge pages (neither changes any value); and large start-up work on memory spread over
//! the cores.

/// A hint to load the cache line holding `p`; never faults, changes nothing observable.
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it does not dereference `p` in the language's sense and
    // never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bytes of a huge page (x86-64 and aarch64 with 4 KiB pages).
pub(crate) const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The pages of `page_bytes` lying whole inside `start..start + bytes`: the offset of the
/// first (`head`, at most `bytes`) and their length in bytes (`whole`, maybe 0), so that
/// `head + whole <= bytes`.
pub(crate) fn whole_pages(start: *const u8, bytes: usize, page_bytes: usize) -> (usize, usize) {
    let head = start.align_offset(page_bytes).min(bytes);
    (head, (bytes - head) / page_bytes * page_bytes)
}

/// Ask the kernel to back the whole 2 MiB pages inside `start..start + bytes` (none for an
/// array under 2 MiB, maybe none under 4 MiB: only aligned pages inside it) with huge pages
/// (transparent huge pages, when the system allows them for regions that ask): a lookup in a
/// table of many megabytes is a random access, and with 4 KiB pages each one also missed the
/// TLB (perf put most of the gateway's prefetch of the next message on page walks). Call it
/// before the pages are touched. A hint: refused or unsupported, nothing changes.
pub(crate) fn advise_huge_pages(start: *mut u8, bytes: usize) {
    let (head, whole) = whole_pages(start, bytes, HUGE_PAGE_BYTES);
    if cfg!(miri) || whole == 0 {
        return;
    }
    // SAFETY: a range inside the caller's allocation, aligned to the huge page size;
    // MADV_HUGEPAGE changes how pages are backed, never their contents.
    let _ = unsafe { libc::madvise(start.add(head).cast(), whole, libc::MADV_HUGEPAGE) };
}

/// A pool of `count` empty buffers of `capacity` each, for two threads that hand batches
/// to each other: the filling side takes a buffer from the receiver (waiting when all are
/// out), the emptying side gives it back through the sender. Nothing is allocated per batch,
/// and the buffers in flight are bounded by `count`.
pub(crate) fn buffer_pool<T>(
    count: usize,
    capacity: usize,
) -> (
    crossbeam::channel::Sender<Vec<T>>,
    crossbeam::channel::Receiver<Vec<T>>,
) {
    let (give_back, take) = crossbeam::channel::bounded(count);
    for _ in 0..count {
        give_back
            .send(Vec::with_capacity(capacity))
            .expect("room for every buffer");
    }
    (give_back, take)
}

/// Work of at least this many bytes is spread over the cores (smaller: one thread).
pub(crate) const PARALLEL_BYTES_MIN: usize = 64 << 20;
/// Threads of one start-up task, at most.
const STARTUP_THREADS_MAX: usize = 8;

/// `work` applied to each item with its thread's working state (an `S` made once per
/// thread, kept from one item to the next), the results in the items' order; on this thread and up to
/// `available_parallelism - 1` scoped helpers that take the next item as they finish one (tables
/// differ in size) when the items total `bytes >= PARALLEL_BYTES_MIN`. Start-up only: it
/// spawns threads.
pub(crate) fn on_cores<T: Send, S: Default, R: Send>(
    items: Vec<T>,
    bytes: usize,
    work: impl Fn(&mut S, T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len())
        .min(STARTUP_THREADS_MAX);
    if cfg!(miri) || threads <= 1 || bytes < PARALLEL_BYTES_MIN {
        let mut state = S::default();
        return items
            .into_iter()
            .map(|item| work(&mut state, item))
            .collect();
    }
    let count = items.len();
    let queue = std::sync::Mutex::new(items.into_iter().enumerate());
    let next = || queue.lock().unwrap_or_else(|e| e.into_inner()).next();
    let drain = || {
        let (mut results, mut state) = (Vec::new(), S::default());
        // Bounded: the queue holds `count` items.
        while let Some((index, item)) = next() {
            results.push((index, work(&mut state, item)));
        }
        results
    };
    // The helpers start once all are spawned: a spawn maps a stack, and an mmap waits for
    // the populates already in flight (seen: the second thread starting 3.5 s late).
    let gate = std::sync::RwLock::new(());
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let held = gate.write().unwrap_or_else(|e| e.into_inner());
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                let spawned = std::thread::Builder::new()
                    .name("startup".into())
                    .spawn_scoped(scope, || {
                        drop(gate.read().unwrap_or_else(|e| e.into_inner()));
                        drain()
                    });
                // Fewer helpers if a thread cannot be made: this thread works through the rest.
                spawned.ok()
            })
            .collect();
        drop(held);
        let mut done = drain();
        for helper in helpers {
            done.extend(
                helper
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        done
    });
    assert_eq!(done.len(), count, "every item done once");
    done.sort_unstable_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, r)| r).collect()
}

/// `madvise(MADV_POPULATE_WRITE)` of `bytes` (whole 4 KiB pages) at `start`: the pages
/// made resident and writable as a write would, without changing any byte (a page already
/// there is left alone; a zero or shared page is replaced by a copy). False if the kernel
/// refuses (before Linux 5.14; a range not mapped writable) and under Miri (no foreign
/// calls). The caller names its own address range; nothing is read or written through it,
/// so the owner may be writing the same pages meanwhile.
pub(crate) fn populate_write(start: *const u8, bytes: usize) -> bool {
    debug_assert!(start.align_offset(4096) == 0 && bytes.is_multiple_of(4096));
    // SAFETY: see above: an address range and a kernel call that changes no contents.
    !cfg!(miri)
        && bytes > 0
        && unsafe { libc::madvise(start.cast_mut().cast(), bytes, libc::MADV_POPULATE_WRITE) } == 0
}

/// Make resident the whole 4 KiB pages around `whole[part]` that lie inside `whole` (a
/// window of a larger array: the pages at its edges may hold neighbouring elements, never
/// bytes outside the array): [`populate_write`], which changes no value. False if nothing
/// was populated (an empty window, the kernel refused, Miri).
pub(crate) fn populate_part<T>(whole: &[T], part: std::ops::Range<usize>) -> bool {
    const PAGE_BYTES: usize = 4096;
    assert!(part.start <= part.end && part.end <= whole.len());
    if part.is_empty() {
        return false;
    }
    let size = std::mem::size_of::<T>();
    let base = whole.as_ptr() as usize;
    let (inside_from, inside_to) = (
        base.next_multiple_of(PAGE_BYTES),
        (base + std::mem::size_of_val(whole)) / PAGE_BYTES * PAGE_BYTES,
    );
    let from = ((base + part.start * size) / PAGE_BYTES * PAGE_BYTES).max(inside_from);
    let to = (base + part.end * size)
        .next_multiple_of(PAGE_BYTES)
        .min(inside_to);
    from < to
        && populate_write(
            whole.as_ptr().cast::<u8>().wrapping_add(from - base),
            to - from,
        )
}

/// Pages of an array in use that were left to be made resident later (see
/// `TokenTable::unresident`): an address range, not a borrow, so that another thread can
/// populate it while the owner keeps writing, and a weak reference to the owner's marker
/// (an `Arc<()>` it holds), so that it stops once the owner is dropped. Nothing is read or
/// written through it.
#[derive(Clone, Debug)]
pub struct Unresident {
    start: usize,
    bytes: usize,
    owner: std::sync::Weak<()>,
}

/// Bytes [`Unresident::populate_step`] populates at a time (one call holds the process's
/// memory map lock for that long).
const UNRESIDENT_STEP_BYTES: usize = HUGE_PAGE_BYTES;

impl Unresident {
    pub(crate) fn new(start: *const u8, bytes: usize, owner: std::sync::Weak<()>) -> Unresident {
        Unresident {
            start: start as usize,
            bytes,
            owner,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The whole 4 KiB pages inside the range: the offset of the first, their bytes.
    fn whole_pages(&self) -> (usize, usize) {
        whole_pages(self.start as *const u8, self.bytes, 4096)
    }

    /// Steps of [`Self::populate_step`] that cover the range's whole pages.
    pub fn steps(&self) -> usize {
        self.whole_pages().1.div_ceil(UNRESIDENT_STEP_BYTES)
    }

    /// Make step `step` of the range's whole pages (2 MiB) resident and writable. Only
    /// `madvise(MADV_POPULATE_WRITE)`, which faults pages in as a write would without
    /// changing any byte (a page already there is left alone; a zero or shared page is
    /// replaced by a copy): safe while the owner writes the same pages. Never a write of its
    /// own (the owner's values may be there by now). Skipped once the owner is dropped; if
    /// it is dropped during the call, the call fails on the unmapped range or only makes
    /// pages resident on a range mapped anew (dirtying them, if that is a shared file
    /// mapping). Returns the bytes populated: `None` once the owner is gone or the kernel
    /// refuses (before Linux 5.14).
    pub fn populate_step(&self, step: usize) -> Option<usize> {
        if self.owner.strong_count() == 0 {
            return None;
        }
        let (head, whole) = self.whole_pages();
        let from = step * UNRESIDENT_STEP_BYTES;
        if from >= whole {
            return Some(0);
        }
        let bytes = UNRESIDENT_STEP_BYTES.min(whole - from);
        let start = (self.start as *const u8).wrapping_add(head + from);
        populate_write(start, bytes).then_some(bytes)
    }

    /// Every step in turn (tests; the daemon interleaves the tables' steps).
    #[cfg(test)]
    pub fn populate(&self) -> usize {
        (0..self.steps())
            .map_while(|step| self.populate_step(step))
            .sum()
    }
}

/// Tests: a field (`VmFlags`, `AnonHugePages`, ...) of the mapping holding `address`, from
/// /proc/self/smaps.
#[cfg(test)]
pub(crate) fn smaps_field_at(address: usize, field: &str) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        // A mapping's first line starts with its range, `from-to` in hex.
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        if let Some((Ok(from), Ok(to))) =
            range.map(|(f, t)| (usize::from_str_radix(f, 16), usize::from_str_radix(t, 16)))
        {
            inside = (from..to).contains(&address);
            continue;
        }
        let value = line.strip_prefix(field).and_then(|l| l.strip_prefix(':'));
        if let Some(value) = value.filter(|_| inside) {
            return Some(value.trim().to_string());
        }
    }
    None
}

/// Tests: was the whole huge page starting at or after `start` advised? Its mapping carries
/// the `hg` flag, which only MADV_HUGEPAGE sets, whatever the system's THP mode and free
/// memory; whether the kernel found huge pages for it is printed, not asserted (that depends
/// on the host). `None` when the kernel has no transparent huge pages at all.
#[cfg(test)]
pub(crate) fn advised_at(start: *const u8) -> Option<bool> {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        return None;
    }
    let first_whole = start as usize + start.align_offset(HUGE_PAGE_BYTES);
    let flags = smaps_field_at(first_whole, "VmFlags").expect("the mapping in smaps");
    let huge = smaps_field_at(first_whole, "AnonHugePages").unwrap_or_default();
    eprintln!("mapping at {first_whole:#x}: VmFlags {flags}; AnonHugePages {huge}");
    Some(flags.split_whitespace().any(|f| f == "hg"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "Miri has no madvise")]
    fn an_advised_table_is_marked_for_huge_pages() {
        let len = 16 << 20;
        let mut table = Vec::<u64>::with_capacity(len / 8);
        advise_huge_pages(table.as_mut_ptr().cast(), len);
        table.resize(len / 8, 1);
        let Some(advised) = advised_at(table.as_ptr().cast()) else {
            eprintln!("no transparent huge pages in this kernel: nothing to check");
            return;
        };
        assert!(advised, "the advised table's mapping has no `hg` flag");
        assert!(table.iter().all(|&v| v == 1));
    }

    #[test]
    fn work_on_the_cores_comes_back_in_order_done_once() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        // Large enough to take the threads (when the machine has more than one core).
        let squares = on_cores((0..100u64).collect(), PARALLEL_BYTES_MIN, |(), i| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            threads.lock().unwrap().insert(std::thread::current().id());
            i * i
        });
        assert_eq!(squares, (0..100u64).map(|i| i * i).collect::<Vec<_>>());
        assert_eq!(calls.into_inner(), 100);
        eprintln!("{} threads", threads.lock().unwrap().len());
        // Small: on this thread only.
        let here = std::thread::current().id();
        let ids = on_cores(vec![(); 8], 1, |(), ()| std::thread::current().id());
        assert!(ids.iter().all(|&id| id == here));
    }

    /// Resident 4 KiB pages of `bytes` at `start` (page-aligned), by `mincore`.
    fn resident_pages(start: *const u8, bytes: usize) -> Vec<bool> {
        let mut flags = vec![0u8; bytes.div_ceil(4096)];
        // SAFETY: `start..start + bytes` is mapped (the caller's allocation); `flags` holds
        // a byte per page.
        let done = unsafe { libc::mincore(start.cast_mut().cast(), bytes, flags.as_mut_ptr()) };
        assert_eq!(done, 0, "mincore");
        flags.iter().map(|f| f & 1 == 1).collect()
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri has no madvise or mincore")]
    fn a_window_is_made_resident_and_nothing_else_changes() {
        // Large enough for the allocator to map fresh, untouched pages.
        let whole = vec![0u32; 4 << 20];
        let (head, bytes) = whole_pages(whole.as_ptr().cast(), whole.len() * 4, 4096);
        let first = whole.as_ptr().cast::<u8>().wrapping_add(head);
        let before = resident_pages(first, bytes);
        let window = 1_000_000..1_000_100; // 400 bytes inside one or two pages
        if !populate_part(&whole, window.clone()) {
            eprintln!(
                "the kernel refused MADV_POPULATE_WRITE (before Linux 5.14): nothing to check"
            );
            return;
        }
        let after = resident_pages(first, bytes);
        let page_of = |element: usize| (element * 4 - head) / 4096;
        let pages = page_of(window.start)..=page_of(window.end - 1);
        assert!(
            after[pages].iter().all(|&p| p),
            "the window's pages are resident"
        );
        let far = page_of(3_000_000);
        assert_eq!(
            after[far], before[far],
            "a page far from the window is left alone"
        );
        assert!(!after[far], "the far page was never touched");
        assert!(whole.iter().all(|&v| v == 0), "no value changed");
        assert!(
            !populate_part(&whole, 5..5),
            "an empty window populates nothing"
        );
    }

    #[test]
    fn whole_pages_stay_inside_the_range() {
        let base = HUGE_PAGE_BYTES as *const u8; // an aligned address, never dereferenced
        let page = HUGE_PAGE_BYTES;
        assert_eq!(whole_pages(base, 3 * page, page), (0, 3 * page));
        assert_eq!(
            whole_pages(base.wrapping_add(1), 3 * page, page),
            (page - 1, 2 * page)
        );
        assert_eq!(whole_pages(base.wrapping_add(1), page, page), (page - 1, 0));
        assert_eq!(whole_pages(base.wrapping_add(1), 10, page), (10, 0));
        assert_eq!(whole_pages(base, 0, page), (0, 0));
    }
}
