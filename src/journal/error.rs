//! The journal's typed errors: every bad file, bad directory or bad configuration ends here with
//! a one-line `Display` that names the file (and byte offset) involved — never a panic.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong opening, writing, reading or verifying a journal.
#[derive(Debug)]
pub enum JournalError {
    /// The journal directory does not exist and the configuration does not allow creating it.
    MissingDirectory { path: PathBuf },
    /// The journal path exists but is not a directory.
    NotADirectory { path: PathBuf },
    /// The OS refused access to a file or directory.
    PermissionDenied { path: PathBuf, op: &'static str },
    /// The file system is full (ENOSPC/EDQUOT), e.g. while preallocating a segment.
    NoSpace { path: PathBuf, op: &'static str },
    /// Any other I/O failure, with the operation that failed.
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// The configuration cannot work (sizes out of range, ...).
    InvalidConfig { reason: String },
    /// Another writer holds the journal directory's lock.
    Locked { path: PathBuf },
    /// A file in the journal directory is not a journal segment (name or magic).
    ForeignFile { path: PathBuf, reason: &'static str },
    /// A segment written by a format version this build does not read.
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// Sequence numbers (or segment indexes) are not continuous.
    Gap {
        path: PathBuf,
        offset_bytes: u64,
        expected: u64,
        found: u64,
        what: &'static str,
    },
    /// Data that fails its checksum or structure checks in the middle of the journal.
    Corrupt {
        path: PathBuf,
        offset_bytes: u64,
        reason: &'static str,
    },
    /// A segment file the journal must have is missing (the last one deleted, say).
    MissingSegment { path: PathBuf, reason: &'static str },
    /// A record at or below the durable mark (so possibly acknowledged) is corrupt or
    /// missing at the end of the journal: not a torn tail, so not cut without the operator.
    DamagedTail {
        path: PathBuf,
        offset_bytes: u64,
        reason: &'static str,
        /// The first record that is damaged or missing.
        seq: u64,
        /// Records through this one were durable.
        durable_seq: u64,
    },
    /// `append` was given a payload over the configured maximum.
    RecordTooLarge {
        payload_bytes: u64,
        max_payload_bytes: u32,
    },
    /// The directory holds no segment with a header (no journal was ever started there).
    EmptyJournal { path: PathBuf },
    /// A sequence number outside what the journal holds was asked for.
    SeqOutOfRange {
        requested: u64,
        last_seq: u64,
        op: &'static str,
    },
}

impl JournalError {
    /// Classify an `io::Error` from `op` on `path` into the typed variants.
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> JournalError {
        let path = path.to_path_buf();
        let raw = source.raw_os_error();
        if raw == Some(libc::ENOSPC) || raw == Some(libc::EDQUOT) {
            return JournalError::NoSpace { path, op };
        }
        match source.kind() {
            io::ErrorKind::PermissionDenied => JournalError::PermissionDenied { path, op },
            io::ErrorKind::StorageFull => JournalError::NoSpace { path, op },
            _ => JournalError::Io { path, op, source },
        }
    }
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use JournalError::*;
        match self {
            MissingDirectory { path } => {
                write!(f, "journal directory {} does not exist", path.display())
            }
            NotADirectory { path } => {
                write!(f, "journal path {} is not a directory", path.display())
            }
            PermissionDenied { path, op } => {
                write!(f, "permission denied: cannot {op} {}", path.display())
            }
            NoSpace { path, op } => {
                write!(f, "no space left on device: cannot {op} {}", path.display())
            }
            Io { path, op, source } => write!(f, "cannot {op} {}: {source}", path.display()),
            InvalidConfig { reason } => write!(f, "invalid journal configuration: {reason}"),
            Locked { path } => {
                write!(f, "journal {} is locked by another writer", path.display())
            }
            ForeignFile { path, reason } => {
                write!(f, "{} is not a journal segment: {reason}", path.display())
            }
            UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: segment format version {found} is not supported (this build reads {supported})",
                path.display()
            ),
            Gap {
                path,
                offset_bytes,
                expected,
                found,
                what,
            } => write!(
                f,
                "{}: {what} gap at byte offset {offset_bytes}: expected {expected}, found {found}",
                path.display()
            ),
            Corrupt {
                path,
                offset_bytes,
                reason,
            } => write!(
                f,
                "{}: corrupt at byte offset {offset_bytes}: {reason}",
                path.display()
            ),
            MissingSegment { path, reason } => write!(
                f,
                "{}: segment file missing ({reason}); the journal ends before it (`bourse run --truncate-corrupt-tail` continues from the last intact record)",
                path.display()
            ),
            DamagedTail {
                path,
                offset_bytes,
                reason,
                seq,
                durable_seq,
            } => write!(
                f,
                "{}: damaged at byte offset {offset_bytes}: {reason}, at record {seq}, but records through {durable_seq} were durable (not a torn tail: not cut without an operator; `bourse run --truncate-corrupt-tail` drops records {seq}..={durable_seq} and anything after)",
                path.display()
            ),
            RecordTooLarge {
                payload_bytes,
                max_payload_bytes,
            } => write!(
                f,
                "record payload of {payload_bytes} bytes exceeds the configured maximum of {max_payload_bytes}"
            ),
            EmptyJournal { path } => {
                write!(f, "journal directory {} holds no segment", path.display())
            }
            SeqOutOfRange {
                requested,
                last_seq,
                op,
            } => write!(
                f,
                "cannot {op} sequence number {requested}: the journal ends at {last_seq}"
            ),
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line() {
        let errors = [
            JournalError::MissingDirectory { path: "/x".into() },
            JournalError::io(
                Path::new("/x/1.seg"),
                "create",
                io::Error::from_raw_os_error(28),
            ),
            JournalError::io(Path::new("/x"), "open", io::Error::from_raw_os_error(13)),
            JournalError::Corrupt {
                path: "/x/00000001.seg".into(),
                offset_bytes: 64,
                reason: "bad",
            },
            JournalError::Gap {
                path: "/x/00000002.seg".into(),
                offset_bytes: 64,
                expected: 5,
                found: 7,
                what: "sequence number",
            },
            JournalError::MissingSegment {
                path: "/x/00000004.seg".into(),
                reason: "the segment before it is sealed",
            },
            JournalError::DamagedTail {
                path: "/x/00000003.seg".into(),
                offset_bytes: 4000,
                reason: "record checksum mismatch",
                seq: 99,
                durable_seq: 100,
            },
        ];
        for error in &errors {
            let text = error.to_string();
            assert!(!text.contains('\n'), "{text}");
            assert!(!text.is_empty());
        }
        assert!(matches!(errors[1], JournalError::NoSpace { .. }));
        assert!(matches!(errors[2], JournalError::PermissionDenied { .. }));
        assert!(errors[3].to_string().contains("00000001.seg"));
        assert!(errors[3].to_string().contains("offset 64"));
    }
}
