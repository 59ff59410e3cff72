//! Journal recovery's check of a segment, on arbitrary bytes in memory: byte 0 = fix-up flags
//! (valid header / record checksums), byte 1 = the durable mark, the rest = the segment image.
//! Must return a report or an error, never panic.
#![no_main]

use bourse::journal::recovery::check_segment_image;
use bourse::journal::shared::HeapBytes;
use bourse_fuzz::{IMAGE_BYTES, segment_image};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, durable, image @ ..] = data else {
        return;
    };
    let (image, _) = segment_image(image, *flags, 1, None);
    let heap = HeapBytes::zeroed(IMAGE_BYTES);
    // SAFETY: a private buffer with no other user.
    unsafe { heap.view().write(0, &image) };
    if let Ok(report) = check_segment_image(heap.view(), u64::from(*durable)) {
        assert!(report.data_bytes <= IMAGE_BYTES as u64);
        if let Some(torn) = &report.torn_tail {
            assert!(torn.offset_bytes + torn.cut_bytes <= IMAGE_BYTES as u64);
            assert!(
                report.last_seq + 1 > report.durable_seq,
                "torn at or below the mark"
            );
        }
    }
});
