//! Hints to the memory system for the exchange's large tables: where a line will be read
//! next, and which arrays should sit on huge pages. Neither changes any value.

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
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Ask the kernel to back the whole 2 MiB pages inside `start..start + bytes` with huge pages
/// (transparent huge pages, when the system allows them for regions that ask): a lookup in a
/// table of many megabytes is a random access, and with 4 KiB pages each one also missed the
/// TLB (perf put most of the gateway's prefetch of the next message on page walks). Call it
/// before the pages are touched. A hint: refused or unsupported, nothing changes.
pub(crate) fn advise_huge_pages(start: *mut u8, bytes: usize) {
    let head = start.align_offset(HUGE_PAGE_BYTES).min(bytes);
    let whole = (bytes - head) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if cfg!(miri) || whole == 0 {
        return;
    }
    // SAFETY: a range inside the caller's allocation, aligned to the huge page size;
    // MADV_HUGEPAGE changes how pages are backed, never their contents.
    let _ = unsafe { libc::madvise(start.add(head).cast(), whole, libc::MADV_HUGEPAGE) };
}

#[cfg(test)]
/// Tests: `AnonHugePages` of the mapping holding `address` (kB), from /proc/self/smaps.
pub(crate) fn huge_kb_at(address: usize) -> Option<u64> {
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
        if inside && line.starts_with("AnonHugePages:") {
            return line.split_whitespace().nth(1)?.parse().ok();
        }
    }
    None
}

/// Tests: is THP off here (then there is nothing to check)?
#[cfg(test)]
pub(crate) fn huge_pages_off() -> bool {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    mode.as_deref().map_or(true, |m| m.contains("[never]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "Miri has no madvise")]
    fn an_advised_table_sits_on_huge_pages() {
        if huge_pages_off() {
            eprintln!("transparent huge pages are off on this system: nothing to check");
            return;
        }
        let len = 16 << 20;
        let mut table = Vec::<u64>::with_capacity(len / 8);
        advise_huge_pages(table.as_mut_ptr().cast(), len);
        table.resize(len / 8, 1);
        // The advice splits the mapping: the advised part starts at the first 2 MiB boundary.
        let start = table.as_ptr().cast::<u8>();
        let first_whole = start as usize + start.align_offset(HUGE_PAGE_BYTES);
        let kb = huge_kb_at(first_whole).expect("the table's mapping in smaps");
        // At least 7 whole 2 MiB pages lie inside 16 MiB; ask for one, not all (the kernel
        // may not find free huge pages for every one).
        assert!(kb >= 2048, "{kb} kB of the advised table on huge pages");
        assert!(table.iter().all(|&v| v == 1));
    }
}
