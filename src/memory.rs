//! Hints to the memory system: where a line will be read or written next (the exchange's
//! large tables, the journal's and the message stores' writers), and which arrays should sit
//! on huge pages. Neither changes any value.

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
