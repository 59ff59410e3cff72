//! The journal: the venue's truth (DESIGN.md section 1). A memory-mapped, append-only,
//! checksummed log of every sequenced input; books, replies and market data are a
//! deterministic function of it.
//!
//! # Shape
//!
//! - A journal is a directory of **segment files** `00000001.seg`, `00000002.seg`, …, each
//!   preallocated to `segment_bytes`, starting with a 64-byte versioned header
//!   ([`segment`]) and followed by 8-aligned **records** ([`record`]): length (the commit
//!   word), CRC32C, sequence number (gapless from 1), timestamp (ns since the day epoch), kind,
//!   payload. The **day epoch** (unix ns of midnight UTC of the day the journal was started) is
//!   in every header and never changes for the life of the journal.
//! - **One writer** ([`JournalWriter`]) appends; it owns the directory (advisory lock). A helper
//!   thread creates, preallocates, fsyncs, maps and prefaults the *next* segment while the
//!   writer fills the current one, and unmaps retired ones, so crossing a segment boundary costs
//!   the appending thread a seal word and a 64-byte header — no syscall, no allocation, no page
//!   fault. (Preparing "ahead at a threshold" on the appending thread would still put a file
//!   creation and a multi-megabyte prefault on some append; a helper thread keeps it off every
//!   append, at the price of one mostly idle thread.)
//! - **Readers** ([`JournalReader`]), in this or another process, map the same files and tail
//!   them: the writer stores each record's body first and its length last with Release; a
//!   reader loads the length with Acquire and checks the CRC, so it never sees half a record.
//!   A full segment ends with a seal word; the next segment's header is published (magic word
//!   last) before the reader needs it.
//! - **Recovery** ([`recovery`]) runs when the writer opens: it checks every header and every
//!   record, refuses gaps, foreign files and mid-journal corruption (naming the file and byte
//!   offset), and cuts a torn tail back to the last whole record. The **manifest**
//!   ([`manifest`]) tells a torn tail (above the durable mark: never acknowledged) from damage
//!   to acknowledged records or a missing last segment, which are refused.
//!
//! # Durability modes and what they guarantee
//!
//! - **`Async`**: `append` returns once the record is in the shared mapping, i.e. in the
//!   kernel's page cache. *Process crash* (kill -9, panic, OOM kill): nothing is lost — the
//!   kernel owns the dirty pages and writes them back; recovery finds every record whose
//!   `append` returned. *Machine crash* (power loss, kernel panic, VM killed): whatever the
//!   kernel had not written back yet is lost (by default up to ~30 s of data), possibly with a
//!   torn record at the end; recovery cuts back to the longest valid prefix. `flush()` costs
//!   one atomic store: it advances the durable sequence number in the process-crash sense.
//! - **`Flush`** (group commit): as `Async`, and `flush()` msyncs (MS_SYNC) exactly the bytes
//!   written since the previous flush — across segment boundaries — then advances the durable
//!   sequence number ([`JournalWriter::durable_seq_handle`]). Every record up to that number
//!   survives a *machine crash* too (given a storage device that honours flushes). Records
//!   after it may be lost or torn by a machine crash; the output stage waits for the durable
//!   number, so no reply or market data was ever sent for them. Segments are preallocated with
//!   `posix_fallocate` and fsynced together with their directory entry before the writer uses
//!   them, so a full disk is an error at preparation, never a SIGBUS inside an append.
//! - **`Replicated`**: locally identical to `Flush`. In addition, the replication layer (not
//!   built yet) advances a separate *confirmed by standby* number
//!   ([`JournalWriter::confirmed_seq_handle`]); [`DurabilityGate::releasable_seq`] is then the
//!   minimum of the two, so an output leaves only when its input is on the local disk *and* at
//!   the standby: it survives the loss of the primary machine. Until that layer exists nothing
//!   advances the confirmed number, so this mode holds outputs back — it is a seam, not a mode
//!   to run with yet.
//!
//! In every mode recovery after a crash yields a journal that is a prefix of what was written,
//! never a journal with holes. A machine crash can write pages back out of order: a lost seal
//! before a surviving next segment is harmless (recovery writes it back), but a lost page
//! *followed by* surviving records is indistinguishable from mid-journal corruption, so open
//! refuses, naming the file and byte offset, instead of silently dropping what follows. In
//! `Flush` mode those records were never reported durable; the operator cuts the journal back
//! with [`truncate_after`] (which needs only the records it keeps to be intact).

pub mod alongside;
pub mod error;
pub mod manifest;
pub mod reader;
pub mod record;
pub mod recovery;
pub mod segment;
pub mod shared;
pub mod writer;

#[cfg(test)]
mod tests;

/// Tests elsewhere: a small journal in `dir` (1 MiB segments, `async`), opened or created
/// for one fixed day.
#[cfg(test)]
pub(crate) fn small_test_journal(dir: &std::path::Path) -> (JournalWriter, RecoveryReport) {
    let config = JournalConfig {
        segment_bytes: 1 << 20,
        max_payload_bytes: 64 << 10,
        durability: Durability::Async,
        ..JournalConfig::new(dir)
    };
    JournalWriter::open_or_create(config, 20_000 * NANOS_PER_DAY).expect("a test journal")
}

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::JournalError;
pub use manifest::ManifestState;
pub use reader::JournalReader;
pub use record::Record;
pub use recovery::{
    RecoveryReport, TornTail, truncate_after, truncate_corrupt_tail, verify, verify_vouched,
};
pub use writer::JournalWriter;

use record::{RECORD_HEADER_BYTES, SEAL_BYTES, record_span_bytes};
use segment::{HEADER_BYTES, PAGE_BYTES};

pub const NANOS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// Unix ns of midnight UTC of the day that contains `unix_ns`: the day epoch for a journal
/// started at `unix_ns`.
pub const fn day_epoch_of(unix_ns: u64) -> u64 {
    unix_ns - unix_ns % NANOS_PER_DAY
}

/// How far an appended record is guaranteed to survive (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Written to the mapping; survives a process crash, not a machine crash.
    Async,
    /// `flush()` msyncs what was written since the last flush; survives a machine crash.
    #[default]
    Flush,
    /// `Flush` plus a confirmation from the standby (seam for the replication layer).
    Replicated,
}

/// Where the journal lives and how it is written.
#[derive(Clone, Debug)]
pub struct JournalConfig {
    pub dir: PathBuf,
    /// Size every new segment file is preallocated to: a multiple of 4096 bytes.
    pub segment_bytes: u64,
    /// Largest payload `append` accepts; larger ones are an error, never a panic.
    pub max_payload_bytes: u32,
    pub durability: Durability,
    /// Create the directory (and its parents) when missing; otherwise a missing directory
    /// is an error.
    pub create_dir: bool,
}

impl JournalConfig {
    pub const DEFAULT_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
    /// Large enough for a start-of-day record carrying a whole venue definition.
    pub const DEFAULT_MAX_PAYLOAD_BYTES: u32 = 1024 * 1024;
    /// Bounds chosen so every length fits the u32 commit word with room to spare.
    pub const LIMIT_MAX_PAYLOAD_BYTES: u32 = 64 * 1024 * 1024;
    pub const LIMIT_SEGMENT_BYTES: u64 = 1 << 40;

    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalConfig {
            dir: dir.into(),
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            max_payload_bytes: Self::DEFAULT_MAX_PAYLOAD_BYTES,
            durability: Durability::default(),
            create_dir: true,
        }
    }

    /// Check the sizes; the error says which bound was broken.
    pub fn validate(&self) -> Result<(), JournalError> {
        let invalid = |reason: String| Err(JournalError::InvalidConfig { reason });
        if !self.segment_bytes.is_multiple_of(PAGE_BYTES) {
            return invalid(format!(
                "segment_bytes {} is not a multiple of {PAGE_BYTES}",
                self.segment_bytes
            ));
        }
        if self.segment_bytes < 2 * PAGE_BYTES || self.segment_bytes > Self::LIMIT_SEGMENT_BYTES {
            return invalid(format!(
                "segment_bytes {} is outside {}..={}",
                self.segment_bytes,
                2 * PAGE_BYTES,
                Self::LIMIT_SEGMENT_BYTES
            ));
        }
        if self.max_payload_bytes > Self::LIMIT_MAX_PAYLOAD_BYTES {
            return invalid(format!(
                "max_payload_bytes {} is above {}",
                self.max_payload_bytes,
                Self::LIMIT_MAX_PAYLOAD_BYTES
            ));
        }
        let largest_bytes =
            HEADER_BYTES + record_span_bytes(self.max_payload_bytes as u64) + SEAL_BYTES;
        if largest_bytes > self.segment_bytes {
            return invalid(format!(
                "a {}-byte payload does not fit a {}-byte segment",
                self.max_payload_bytes, self.segment_bytes
            ));
        }
        const _: () = assert!(RECORD_HEADER_BYTES < PAGE_BYTES);
        Ok(())
    }
}

/// What the output stage reads to decide that an input's outputs may leave: clone it into
/// the output thread. Cheap to read (one or two Acquire loads).
#[derive(Clone, Debug)]
pub struct DurabilityGate {
    durability: Durability,
    durable_seq: Arc<AtomicU64>,
    confirmed_seq: Arc<AtomicU64>,
}

impl DurabilityGate {
    /// Highest sequence number whose outputs may be released under the configured mode.
    pub fn releasable_seq(&self) -> u64 {
        let durable = self.durable_seq.load(Ordering::Acquire);
        match self.durability {
            Durability::Async | Durability::Flush => durable,
            Durability::Replicated => durable.min(self.confirmed_seq.load(Ordering::Acquire)),
        }
    }
}
