//! Sequenced message streams: the whole session's ITCH messages (for the re-request server)
//! and each account's OUCH messages (for replay on re-login).
//!
//! One writer appends; any number of readers on other threads read every message already
//! published. Storage is reserved once as anonymous memory maps (the OS backs pages only as
//! they are written), so appending never allocates and never moves data under a reader. A
//! full stream refuses the append; the caller decides what that means (the venue stops taking
//! orders rather than losing what it said).
//!
//! Both streams are derived from the journal, so they are rebuilt by replay after a restart.

use crate::journal::shared::SharedBytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of index per message: the end offset of the message in the data area.
const INDEX_ENTRY_BYTES: usize = 8;

/// Owns reserved memory that is reached only through a [`SharedBytes`] view: readers hold
/// `&[u8]` into published messages while the writer appends past them, so nothing may ever
/// borrow the whole area (as `MmapMut`'s `Deref` would).
struct Storage {
    _owner: memmap2::MmapRaw,
}

impl Storage {
    fn reserve(bytes: u64) -> std::io::Result<(Storage, SharedBytes)> {
        let len = usize::try_from(bytes).expect("fits the address space");
        let raw = memmap2::MmapRaw::from(memmap2::MmapMut::map_anon(len)?);
        // SAFETY: a private anonymous mapping of `len` bytes, page aligned, owned by the
        // returned `Storage` and unmapped only when it drops; the pointer is taken without
        // making a reference.
        let view = unsafe { SharedBytes::new(raw.as_mut_ptr(), raw.len()) };
        Ok((Storage { _owner: raw }, view))
    }
}

struct Shared {
    data: SharedBytes,
    index: SharedBytes,
    /// Messages published: readers may read sequence numbers 1..=published.
    published: AtomicU64,
    capacity_bytes: u64,
    capacity_messages: u64,
    // Declared last: dropped (unmapped) after everything above.
    _data_storage: Storage,
    _index_storage: Storage,
}

/// The single writer of a stream.
pub struct StreamWriter {
    shared: Arc<Shared>,
    /// Messages appended (held ones included).
    count: u64,
    /// Messages readers may see.
    published: u64,
    end_bytes: u64,
}

/// A reader of a stream; cheap to clone and send to other threads.
#[derive(Clone)]
pub struct StreamReader {
    shared: Arc<Shared>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamFull;

impl std::fmt::Display for StreamFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("message stream is full")
    }
}

impl std::error::Error for StreamFull {}

/// Reserve a stream of at most `capacity_bytes` of message data and `capacity_messages`.
pub fn stream(
    capacity_bytes: u64,
    capacity_messages: u64,
) -> std::io::Result<(StreamWriter, StreamReader)> {
    assert!(capacity_bytes > 0 && capacity_messages > 0);
    let (data_storage, data) = Storage::reserve(capacity_bytes)?;
    let index_bytes = capacity_messages
        .checked_mul(INDEX_ENTRY_BYTES as u64)
        .expect("index size");
    let (index_storage, index) = Storage::reserve(index_bytes)?;
    let shared = Arc::new(Shared {
        data,
        index,
        published: AtomicU64::new(0),
        capacity_bytes,
        capacity_messages,
        _data_storage: data_storage,
        _index_storage: index_storage,
    });
    Ok((
        StreamWriter {
            shared: shared.clone(),
            count: 0,
            published: 0,
            end_bytes: 0,
        },
        StreamReader { shared },
    ))
}

impl StreamWriter {
    /// Append one message and publish it (with everything held before it); returns its
    /// sequence number (1-based, gapless).
    pub fn append(&mut self, message: &[u8]) -> Result<u64, StreamFull> {
        let seq = self.append_held(message)?;
        self.publish_through(seq);
        Ok(seq)
    }

    /// Append one message without publishing it: readers see it once
    /// [`Self::publish_through`] covers it (the output stage holds replies until their
    /// inputs are durable). Returns its sequence number.
    pub fn append_held(&mut self, message: &[u8]) -> Result<u64, StreamFull> {
        let start = self.end_bytes;
        let end = start + message.len() as u64;
        if end > self.shared.capacity_bytes || self.count >= self.shared.capacity_messages {
            return Err(StreamFull);
        }
        let at = self.count as usize * INDEX_ENTRY_BYTES;
        // SAFETY: this is the stream's only writer (`StreamWriter` is not Clone); bytes
        // [start, end) and index slot `count` are beyond the published end, so no reader
        // looks at them until the Release store below.
        unsafe {
            self.shared.data.write(start as usize, message);
            self.shared.index.write(at, &end.to_ne_bytes());
        }
        self.count += 1;
        self.end_bytes = end;
        Ok(self.count)
    }

    /// Let readers see every message through `seq` (at most what was appended; never less
    /// than what is already published).
    pub fn publish_through(&mut self, seq: u64) {
        assert!(seq <= self.count, "publishing past the appended end");
        if seq > self.published {
            self.published = seq;
            self.shared.published.store(seq, Ordering::Release);
        }
    }

    /// Messages published so far.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// Messages appended so far (the last sequence number, held ones included).
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn reader(&self) -> StreamReader {
        StreamReader {
            shared: self.shared.clone(),
        }
    }
}

impl StreamReader {
    /// Messages published so far.
    pub fn len(&self) -> u64 {
        self.shared.published.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the published messages from `seq` (1-based) to the end; 0 when none.
    pub fn bytes_from(&self, seq: u64) -> u64 {
        let len = self.len();
        if seq == 0 || seq > len {
            return 0;
        }
        self.end_offset(len) - self.end_offset(seq - 1)
    }

    /// End offset of the first `count` messages (0 for none). `count` must be published
    /// (loaded with Acquire): its entry is then written and never written again.
    fn end_offset(&self, count: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        let mut entry = [0u8; INDEX_ENTRY_BYTES];
        let at = (count - 1) as usize * INDEX_ENTRY_BYTES;
        self.shared.index.copy_out(at, &mut entry);
        u64::from_ne_bytes(entry)
    }

    /// The message with sequence number `seq` (1-based), if published.
    pub fn get(&self, seq: u64) -> Option<&[u8]> {
        if seq == 0 || seq > self.len() {
            return None;
        }
        let end = self.end_offset(seq);
        let start = self.end_offset(seq - 1);
        assert!(start <= end && end <= self.shared.capacity_bytes);
        // SAFETY: message `seq` is published (Acquire above), so its bytes are written and
        // never written again; the storage lives as long as `self.shared`, which the borrow
        // of `self` keeps alive.
        Some(unsafe {
            self.shared
                .data
                .slice(start as usize, (end - start) as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_then_read_in_order() {
        let (mut w, r) = stream(1024, 16).unwrap();
        assert!(r.get(1).is_none());
        assert_eq!(w.append(b"abc"), Ok(1));
        assert_eq!(w.append(b""), Ok(2));
        assert_eq!(w.append(b"defg"), Ok(3));
        assert_eq!(r.len(), 3);
        assert_eq!(r.get(1), Some(&b"abc"[..]));
        assert_eq!(r.get(2), Some(&b""[..]));
        assert_eq!(r.get(3), Some(&b"defg"[..]));
        assert_eq!(r.get(0), None);
        assert_eq!(r.get(4), None);
        assert_eq!(r.bytes_from(1), 7);
        assert_eq!(r.bytes_from(3), 4);
        assert_eq!(r.bytes_from(4), 0);
    }

    #[test]
    fn held_messages_are_invisible_until_published() {
        let (mut w, r) = stream(1024, 16).unwrap();
        assert_eq!(w.append_held(b"a"), Ok(1));
        assert_eq!(w.append_held(b"bc"), Ok(2));
        assert_eq!((r.len(), r.get(1)), (0, None));
        w.publish_through(1);
        assert_eq!((r.len(), r.get(1), r.get(2)), (1, Some(&b"a"[..]), None));
        w.publish_through(1);
        assert_eq!(w.append(b"d"), Ok(3), "append publishes what was held");
        assert_eq!((r.len(), r.get(2)), (3, Some(&b"bc"[..])));
        assert_eq!(w.published(), 3);
    }

    #[test]
    fn full_by_bytes_or_by_count() {
        let (mut w, _) = stream(4, 16).unwrap();
        assert!(w.append(b"abcd").is_ok());
        assert_eq!(w.append(b"e"), Err(StreamFull));
        let (mut w, _) = stream(64, 1).unwrap();
        assert!(w.append(b"a").is_ok());
        assert_eq!(w.append(b"b"), Err(StreamFull));
    }

    /// A reader thread holds slices of published messages while the writer keeps appending
    /// (the aliasing Miri checks in `tools/miri.sh`: no reference ever covers the bytes the
    /// writer is writing).
    #[test]
    fn a_reader_thread_sees_every_published_message() {
        const MESSAGES: u64 = if cfg!(miri) { 200 } else { 10_000 };
        let (mut w, r) = stream(1 << 17, 1 << 14).unwrap();
        let reader = std::thread::spawn(move || {
            let mut next = 1u64;
            let first = loop {
                match r.get(1) {
                    Some(m) => break m,
                    None => std::thread::sleep(std::time::Duration::from_micros(50)),
                }
            };
            while next <= MESSAGES {
                match r.get(next) {
                    Some(m) => {
                        assert_eq!(m, next.to_be_bytes());
                        next += 1;
                    }
                    None => std::thread::sleep(std::time::Duration::from_micros(50)),
                }
            }
            // Still valid and unchanged after every later append.
            assert_eq!(first, 1u64.to_be_bytes());
        });
        for n in 1..=MESSAGES {
            w.append(&n.to_be_bytes()).unwrap();
        }
        reader.join().unwrap();
    }
}
