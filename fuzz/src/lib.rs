//! Helpers shared by the fuzz targets and the seed maker: turning fuzz bytes into journal
//! segment images whose checksums can be made valid, so the fuzzer gets past the CRCs and
//! reaches the record, tail and manifest logic.

use std::path::Path;

/// Size of every segment image the journal targets build (the smallest legal segment).
pub const IMAGE_BYTES: usize = 8192;
/// `max_payload_bytes` written into fixed-up headers.
pub const IMAGE_MAX_PAYLOAD: u32 = 512;
const HEADER: usize = 64;

/// Fix-up flags (first input byte of the journal targets).
pub const FIX_HEADER: u8 = 1;
pub const FIX_RECORDS: u8 = 2;

/// `bytes` zero-padded or cut to one segment image, then fixed up per `flags`: a header
/// that is not blank gets magic, version, size, index `segment_index`, a first sequence
/// number (`first_seq`, if given) and a valid CRC; records along the length chain get valid
/// CRCs. Returns the image and the sequence number after its last chained record.
pub fn segment_image(
    bytes: &[u8],
    flags: u8,
    segment_index: u64,
    first_seq: Option<u64>,
) -> (Vec<u8>, u64) {
    let mut image = vec![0u8; IMAGE_BYTES];
    let n = bytes.len().min(IMAGE_BYTES);
    image[..n].copy_from_slice(&bytes[..n]);
    let blank = image[..HEADER].iter().all(|&b| b == 0);
    if flags & FIX_HEADER != 0 && !blank {
        image[0..8].copy_from_slice(b"BOURSEJ\x01");
        image[8..12].copy_from_slice(&1u32.to_le_bytes());
        image[12..16].copy_from_slice(&64u32.to_le_bytes());
        image[16..24].copy_from_slice(&segment_index.to_le_bytes());
        if let Some(first_seq) = first_seq {
            image[24..32].copy_from_slice(&first_seq.to_le_bytes());
        }
        image[48..56].copy_from_slice(&(IMAGE_BYTES as u64).to_le_bytes());
        image[56..60].copy_from_slice(&IMAGE_MAX_PAYLOAD.to_le_bytes());
        let crc = crc32c::crc32c(&image[..60]);
        image[60..64].copy_from_slice(&crc.to_le_bytes());
    }
    let mut seq = u64::from_le_bytes(image[24..32].try_into().expect("8"));
    let mut offset = HEADER;
    for _ in 0..IMAGE_BYTES / 8 {
        if offset + 8 > IMAGE_BYTES {
            break;
        }
        let length = u32::from_le_bytes(image[offset..offset + 4].try_into().expect("4")) as usize;
        if length < 32 || length == u32::MAX as usize || offset + length + 8 > IMAGE_BYTES {
            break;
        }
        if flags & FIX_RECORDS != 0 {
            let crc = crc32c::crc32c_append(
                crc32c::crc32c(&(length as u32).to_le_bytes()),
                &image[offset + 8..offset + length],
            );
            image[offset + 4..offset + 8].copy_from_slice(&crc.to_le_bytes());
        }
        seq = seq.wrapping_add(1);
        offset += length.next_multiple_of(8);
    }
    (image, seq)
}

/// A fresh, empty directory for one fuzz input (on tmpfs when there is one: no real fsync).
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("bourse-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
