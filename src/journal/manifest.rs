//! The journal manifest: what the journal has promised, so recovery can tell a torn tail
//! (cut it) from damage to something already acknowledged (refuse).
//!
//! One file, `manifest`, in the journal directory: 4096 bytes holding two 128-byte slots at
//! offsets 0 and 512 (different disk sectors). The writer updates the older slot in place
//! through a shared mapping; recovery takes the valid slot with the higher generation, so a
//! slot torn by a crash mid-update leaves the other, older one (older marks are lower, which is
//! always safe: every mark is a lower bound). Slot layout (little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0   | 8  | magic `BOURSEM\x01` |
//! | 8   | 8  | generation (the higher valid slot wins) |
//! | 16  | 8  | day epoch of the journal (ties the manifest to its segments) |
//! | 24  | 8  | sealed through: segments 1..=this are sealed, so files 1..=this+1 exist |
//! | 32  | 8  | synced through: records 1..=this were msynced before this was stored |
//! | 40  | 8  | mapped through: records 1..=this were whole in the mapping before this was stored |
//! | 48  | 16 | boot id of the kernel that stored `mapped through` |
//! | 64  | 60 | reserved, zero |
//! | 124 | 4  | CRC32C of bytes 0..124 |
//!
//! Why each mark is true when it reaches the disk, in any order of page write-back:
//! - *synced through* is stored only after the msync of those records returned;
//! - *mapped through* is stored after the records were stored in the mapping; it means
//!   something only while the same kernel runs (the page cache is the truth until a machine
//!   crash), hence the boot id;
//! - *sealed through* is stored after the seal, and the next segment's file was created,
//!   fsynced and its directory entry fsynced before the seal was written.
//!
//! Journals written before the manifest existed have none: they open as before (seal rules
//! only), and the writer adds one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::{MmapOptions, MmapRaw};

use super::JournalError;
use super::segment::{self, corrupt, u64_at};
use super::shared::SharedBytes;

pub const MANIFEST_NAME: &str = "manifest";
/// Written first, then renamed over `manifest`; a leftover one is removed by the writer.
pub const MANIFEST_TMP_NAME: &str = "manifest.tmp";
pub const MANIFEST_BYTES: usize = 4096;
const SLOT_BYTES: usize = 128;
const SLOT_OFFSETS: [usize; 2] = [0, 512];
const CRC_OFFSET: usize = SLOT_BYTES - 4;
pub const MANIFEST_MAGIC: u64 = u64::from_le_bytes(*b"BOURSEM\x01");

const _: () = assert!(SLOT_OFFSETS[1] >= SLOT_BYTES && SLOT_OFFSETS[1] + SLOT_BYTES <= 4096);

/// The marks of one manifest slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManifestState {
    pub day_epoch_unix_ns: u64,
    pub sealed_through_segment: u64,
    pub synced_through_seq: u64,
    pub mapped_through_seq: u64,
    pub boot_id: [u8; 16],
}

impl ManifestState {
    /// The highest sequence number this manifest proves was durable (and so may have been
    /// acknowledged) on the running kernel: `synced through`, or `mapped through` if it was
    /// stored by this same boot (the page cache then still holds those records whole).
    pub fn durable_seq(&self, current_boot_id: [u8; 16]) -> u64 {
        let same_boot = self.boot_id != [0; 16] && self.boot_id == current_boot_id;
        if same_boot {
            self.synced_through_seq.max(self.mapped_through_seq)
        } else {
            self.synced_through_seq
        }
    }

    /// Marks that claim no more than `self` and no more than `other` (for cutting back).
    pub fn lowered_to(&self, seq: u64, sealed_through_segment: u64) -> ManifestState {
        ManifestState {
            sealed_through_segment: self.sealed_through_segment.min(sealed_through_segment),
            synced_through_seq: self.synced_through_seq.min(seq),
            mapped_through_seq: self.mapped_through_seq.min(seq),
            ..*self
        }
    }

    fn encode(&self, generation: u64) -> [u8; SLOT_BYTES] {
        let mut slot = [0u8; SLOT_BYTES];
        slot[0..8].copy_from_slice(&MANIFEST_MAGIC.to_le_bytes());
        slot[8..16].copy_from_slice(&generation.to_le_bytes());
        slot[16..24].copy_from_slice(&self.day_epoch_unix_ns.to_le_bytes());
        slot[24..32].copy_from_slice(&self.sealed_through_segment.to_le_bytes());
        slot[32..40].copy_from_slice(&self.synced_through_seq.to_le_bytes());
        slot[40..48].copy_from_slice(&self.mapped_through_seq.to_le_bytes());
        slot[48..64].copy_from_slice(&self.boot_id);
        let crc = crc32c::crc32c(&slot[..CRC_OFFSET]);
        slot[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        slot
    }

    /// `(generation, state)` of a slot, or `None` if it is torn, blank or not a slot.
    fn decode(slot: &[u8]) -> Option<(u64, ManifestState)> {
        assert!(slot.len() == SLOT_BYTES);
        let crc = u32::from_le_bytes(slot[CRC_OFFSET..].try_into().expect("4"));
        if u64_at(slot, 0) != MANIFEST_MAGIC || crc32c::crc32c(&slot[..CRC_OFFSET]) != crc {
            return None;
        }
        if slot[64..CRC_OFFSET].iter().any(|&b| b != 0) {
            return None;
        }
        let state = ManifestState {
            day_epoch_unix_ns: u64_at(slot, 16),
            sealed_through_segment: u64_at(slot, 24),
            synced_through_seq: u64_at(slot, 32),
            mapped_through_seq: u64_at(slot, 40),
            boot_id: slot[48..64].try_into().expect("16"),
        };
        Some((u64_at(slot, 8), state))
    }
}

pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(MANIFEST_NAME)
}

/// The id of the running kernel's boot (`/proc/sys/kernel/random/boot_id`); all zero when
/// unknown, which never matches (so only `synced through` counts).
pub fn current_boot_id() -> [u8; 16] {
    let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return [0; 16];
    };
    parse_boot_id(text.trim()).unwrap_or([0; 16])
}

fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (index, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        id[index] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(id)
}

/// Decode a whole manifest file's bytes: the newest valid slot. `path` names it in errors.
pub fn decode_file(path: &Path, bytes: &[u8]) -> Result<ManifestState, JournalError> {
    if bytes.len() != MANIFEST_BYTES {
        return Err(corrupt(path, 0, "manifest is not 4096 bytes long"));
    }
    let newest = SLOT_OFFSETS
        .iter()
        .filter_map(|&offset| ManifestState::decode(&bytes[offset..offset + SLOT_BYTES]))
        .max_by_key(|(generation, _)| *generation);
    match newest {
        Some((_, state)) => Ok(state),
        None => Err(corrupt(path, 0, "manifest has no valid slot")),
    }
}

/// Read the manifest of `dir`; `None` if the journal has none (written by an older build).
pub fn read(dir: &Path) -> Result<Option<ManifestState>, JournalError> {
    let path = manifest_path(dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(JournalError::io(&path, "read manifest", error)),
    };
    decode_file(&path, &bytes).map(Some)
}

/// Replace the manifest with one holding `state` in both slots, durably: a temporary file is
/// written and fsynced, renamed over `manifest`, and the directory fsynced. Interrupted, it
/// leaves the old manifest (and maybe a `manifest.tmp`, which the writer removes).
pub fn write_durable(dir: &Path, state: &ManifestState) -> Result<(), JournalError> {
    let tmp = dir.join(MANIFEST_TMP_NAME);
    let mut bytes = vec![0u8; MANIFEST_BYTES];
    for (generation, &offset) in SLOT_OFFSETS.iter().enumerate() {
        bytes[offset..offset + SLOT_BYTES].copy_from_slice(&state.encode(generation as u64 + 1));
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| JournalError::io(&tmp, "create manifest", e))?;
    file.write_all(&bytes)
        .map_err(|e| JournalError::io(&tmp, "write manifest", e))?;
    file.sync_all()
        .map_err(|e| JournalError::io(&tmp, "fsync manifest", e))?;
    drop(file);
    let path = manifest_path(dir);
    std::fs::rename(&tmp, &path).map_err(|e| JournalError::io(&path, "replace manifest", e))?;
    segment::sync_dir(dir)
}

/// The writer's manifest: updated in place through a shared mapping, with no syscall (the
/// kernel writes the page back; see the module docs for why any version on disk is true).
pub struct LiveManifest {
    state: ManifestState,
    generation: u64,
    bytes: SharedBytes,
    path: PathBuf,
    // Declared after `bytes`: the mapping outlives every use of the view.
    map: MmapRaw,
    _file: File,
}

impl LiveManifest {
    /// Map the manifest `write_durable` just wrote with `state`.
    pub fn open(dir: &Path, state: ManifestState) -> Result<LiveManifest, JournalError> {
        let path = manifest_path(dir);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| JournalError::io(&path, "open manifest", e))?;
        let map = MmapOptions::new()
            .len(MANIFEST_BYTES)
            .map_raw(&file)
            .map_err(|e| JournalError::io(&path, "map manifest", e))?;
        // SAFETY: a 4096-byte shared mapping of a 4096-byte file (written so by
        // `write_durable`), page aligned, valid while `map` lives (as long as `self`); the
        // pointer is taken without a reference. This writer (directory lock) is its only
        // writer; other processes read it with read(2).
        let bytes = unsafe { SharedBytes::new(map.as_mut_ptr(), MANIFEST_BYTES) };
        let mut on_disk = vec![0u8; MANIFEST_BYTES];
        bytes.copy_out(0, &mut on_disk);
        let found = decode_file(&path, &on_disk)?;
        assert!(
            found == state,
            "manifest differs from what was just written"
        );
        Ok(LiveManifest {
            state,
            generation: SLOT_OFFSETS.len() as u64,
            bytes,
            path,
            map,
            _file: file,
        })
    }

    pub fn state(&self) -> &ManifestState {
        &self.state
    }

    /// Records through `seq` are whole in the mapping (and, if `synced`, on disk).
    pub fn record_flush(&mut self, seq: u64, synced: bool) {
        assert!(seq >= self.state.mapped_through_seq, "marks only grow");
        self.state.mapped_through_seq = seq;
        if synced {
            assert!(seq >= self.state.synced_through_seq);
            self.state.synced_through_seq = seq;
        }
        self.store();
    }

    /// Segment `segment_index` was sealed (its successor exists and has its header).
    pub fn record_seal(&mut self, segment_index: u64) {
        assert!(segment_index == self.state.sealed_through_segment + 1);
        self.state.sealed_through_segment = segment_index;
        self.store();
    }

    /// msync the manifest page (clean shutdown; a crash before it only leaves older marks).
    pub fn sync(&self) -> Result<(), JournalError> {
        self.map
            .flush_range(0, MANIFEST_BYTES)
            .map_err(|e| JournalError::io(&self.path, "msync manifest", e))
    }

    /// Overwrite the older slot with the current state.
    fn store(&mut self) {
        self.generation += 1;
        let offset = SLOT_OFFSETS[(self.generation % 2) as usize];
        let slot = self.state.encode(self.generation);
        // SAFETY: the writer is the manifest's only writer (directory lock); readers in other
        // processes use read(2) and check the slot's CRC.
        unsafe { self.bytes.write(offset, &slot) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ManifestState {
        ManifestState {
            day_epoch_unix_ns: 7 * 86_400_000_000_000,
            sealed_through_segment: 3,
            synced_through_seq: 100,
            mapped_through_seq: 120,
            boot_id: [9; 16],
        }
    }

    fn file_with(slots: &[(usize, [u8; SLOT_BYTES])]) -> Vec<u8> {
        let mut bytes = vec![0u8; MANIFEST_BYTES];
        for (offset, slot) in slots {
            bytes[*offset..*offset + SLOT_BYTES].copy_from_slice(slot);
        }
        bytes
    }

    #[test]
    fn newest_valid_slot_wins_and_a_torn_one_is_skipped() {
        let path = Path::new("manifest");
        let old = sample();
        let new = ManifestState {
            synced_through_seq: 130,
            ..old
        };
        let both = file_with(&[(0, old.encode(4)), (512, new.encode(5))]);
        assert_eq!(decode_file(path, &both).unwrap(), new);
        let mut torn = both.clone();
        torn[512 + 33] ^= 1;
        assert_eq!(decode_file(path, &torn).unwrap(), old);
        let mut nothing = torn.clone();
        nothing[3] ^= 1;
        assert!(matches!(
            decode_file(path, &nothing),
            Err(JournalError::Corrupt { .. })
        ));
        assert!(decode_file(path, &both[..100]).is_err());
        assert!(decode_file(path, &vec![0u8; MANIFEST_BYTES]).is_err());
    }

    #[test]
    fn mapped_mark_counts_only_on_the_same_boot() {
        let state = sample();
        assert_eq!(state.durable_seq([9; 16]), 120);
        assert_eq!(state.durable_seq([8; 16]), 100);
        let unknown = ManifestState {
            boot_id: [0; 16],
            ..state
        };
        assert_eq!(unknown.durable_seq([0; 16]), 100);
    }

    #[test]
    fn boot_id_parses() {
        assert_eq!(
            parse_boot_id("42512d51-2dc0-4cf6-934d-8d5709df0412").unwrap()[..3],
            [0x42, 0x51, 0x2d]
        );
        assert!(parse_boot_id("nope").is_none());
        assert!(parse_boot_id("42512d51-2dc0-4cf6-934d-8d5709df04zz").is_none());
    }

    #[test]
    fn lowering_never_raises() {
        let state = sample();
        let lowered = state.lowered_to(110, 5);
        assert_eq!(lowered.synced_through_seq, 100);
        assert_eq!(lowered.mapped_through_seq, 110);
        assert_eq!(lowered.sealed_through_segment, 3);
    }
}
