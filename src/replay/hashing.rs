//! A replay's stream digests computed on a thread of their own: the apply side encodes each
//! message into a batch of frames and hands full batches over; the hashing thread feeds them
//! to the streams' SHA-256 states. perf of `bourse replay` put ~15% of its CPU samples in
//! the hashing (SHA-256 compression, `StreamHasher::add`); on two cores that now overlaps the
//! apply. The digests are those of hashing inline ([`super::DigestSink`]): the same bytes
//! reach the same hashers in the same order.

use crossbeam::channel::{Receiver, Sender, bounded};
use std::io::Write;

use super::{MESSAGE_BYTES_MAX, StreamHasher};
use crate::exchange::Sink;
use crate::types::AccountId;
use crate::wire::{itch, ouch};

/// Bytes of frames handed over at once, at most: a hand-over every ~20,000 messages. The
/// hashing thread waits for each batch and every hand-over wakes it: at 64 KiB those
/// wake-ups cost a 3M-input replay ~0.1 s of system time and 6% of its wall time (BENCHMARKS
/// §7, stop 35).
const BATCH_BYTES: usize = 1 << 20;
/// Batches handed over and not yet hashed, at most: the apply side waits (parks) beyond.
const BATCHES_IN_FLIGHT: usize = 4;
/// A frame's header: the stream (`u16`, little-endian: 0 is ITCH, 1 + account an account's
/// OUCH) and the message's length (`u8`).
const FRAME_HEADER_BYTES: usize = 3;
const _: () = assert!(MESSAGE_BYTES_MAX <= u8::MAX as usize);

enum Work {
    /// Frames in `bytes[..used]`, in the order their messages were output.
    Frames { bytes: Vec<u8>, used: usize },
    /// Every stream's hasher after the frames before (ITCH first, then the accounts'),
    /// answered on the thread's own reply channel.
    Settle,
}

/// The sink of a digesting replay: encodes every output, writes the ITCH stream as a
/// BinaryFILE if asked, and has the hashing thread digest the streams.
pub(super) struct HashingSink<'w> {
    /// The batch being filled: always `batch_bytes` long, frames in `frames[..used]` (each
    /// message is encoded in place, after the room for its header).
    frames: Vec<u8>,
    used: usize,
    batch_bytes: usize,
    work: Sender<Work>,
    /// Hashed batches back from the hashing thread (nothing is allocated per batch).
    empties: Receiver<Vec<u8>>,
    hashing: Option<std::thread::JoinHandle<()>>,
    settled: Receiver<Vec<StreamHasher>>,
    itch_out: Option<&'w mut dyn Write>,
    pub(super) write_error: Option<std::io::Error>,
}

impl<'w> HashingSink<'w> {
    /// Streams continuing from `hashers` (ITCH first, then one per account).
    pub(super) fn start(hashers: Vec<StreamHasher>, itch_out: Option<&'w mut dyn Write>) -> Self {
        HashingSink::with_batch(hashers, itch_out, BATCH_BYTES)
    }

    /// [`HashingSink::start`] with batches of `batch_bytes` (tests use small ones to cross
    /// many).
    fn with_batch(
        hashers: Vec<StreamHasher>,
        itch_out: Option<&'w mut dyn Write>,
        batch_bytes: usize,
    ) -> Self {
        assert!(!hashers.is_empty(), "the ITCH stream at least");
        assert!(batch_bytes >= FRAME_ROOM_BYTES, "a batch holds a frame");
        assert!(
            hashers.len() <= usize::from(u16::MAX) + 1,
            "a stream number fits a frame"
        );
        let (work, work_rx) = bounded(BATCHES_IN_FLIGHT);
        // In flight, one being hashed, and one to fill while the sink's own is handed over.
        let (empty_tx, empties) = crate::memory::buffer_pool(BATCHES_IN_FLIGHT + 2, batch_bytes);
        let (settled_tx, settled) = bounded(1);
        let hashing = std::thread::Builder::new()
            .name("replay-digest".into())
            .spawn(move || hash_batches(hashers, &work_rx, &empty_tx, &settled_tx))
            .expect("a thread for the digests");
        HashingSink {
            frames: vec![0; batch_bytes],
            used: 0,
            batch_bytes,
            work,
            empties,
            hashing: Some(hashing),
            settled,
            itch_out,
            write_error: None,
        }
    }

    /// Every stream's hasher as of the last message output (ITCH first): waits for the
    /// hashing thread to have hashed everything before.
    pub(super) fn settle(&mut self) -> Vec<StreamHasher> {
        self.hand_over();
        let sent = self.work.send(Work::Settle).ok();
        match sent.and_then(|()| self.settled.recv().ok()) {
            Some(hashers) => hashers,
            None => self.hashing_failed(),
        }
    }

    /// The frames so far to the hashing thread, and an empty batch to go on with.
    fn hand_over(&mut self) {
        if self.used == 0 {
            return;
        }
        let next = match self.empties.recv() {
            // Zero-filled once, when a pooled buffer is first used.
            Ok(mut next) => {
                next.resize(self.batch_bytes, 0);
                next
            }
            Err(_) => self.hashing_failed(),
        };
        let full = std::mem::replace(&mut self.frames, next);
        let used = std::mem::take(&mut self.used);
        if self.work.send(Work::Frames { bytes: full, used }).is_err() {
            self.hashing_failed();
        }
    }

    /// The hashing thread has gone: it panicked. Its panic goes on here.
    fn hashing_failed(&mut self) -> ! {
        let hashing = self.hashing.take().expect("the hashing thread was started");
        match hashing.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the hashing thread ends only when this sink drops"),
        }
    }

    /// Where the next frame starts, with room for its header and the longest message.
    #[inline]
    fn frame_at(&mut self) -> usize {
        if self.used + FRAME_ROOM_BYTES > self.frames.len() {
            self.hand_over();
        }
        self.used
    }

    /// The header of the frame at `at`, whose message of `len` bytes is in place after it.
    #[inline]
    fn seal(&mut self, at: usize, stream: u16, len: usize) {
        let [low, high] = stream.to_le_bytes();
        let len_byte = u8::try_from(len).expect("messages are short");
        self.frames[at..at + FRAME_HEADER_BYTES].copy_from_slice(&[low, high, len_byte]);
        self.used = at + FRAME_HEADER_BYTES + len;
    }
}

/// A frame's header and the longest message.
const FRAME_ROOM_BYTES: usize = FRAME_HEADER_BYTES + MESSAGE_BYTES_MAX;

impl Sink for HashingSink<'_> {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        let at = self.frame_at();
        let body = at + FRAME_HEADER_BYTES;
        let n = message.encode(&mut self.frames[body..body + MESSAGE_BYTES_MAX]);
        self.seal(at, account.0 + 1, n);
    }

    fn itch(&mut self, message: &itch::Message) {
        let at = self.frame_at();
        // The BinaryFILE record (a 2-byte length, then the message) is written over the last
        // two header bytes, so the message lands where the frame's goes; then the header.
        let record = at + FRAME_HEADER_BYTES - 2;
        let n = itch::binary_file::write_message(
            &mut self.frames[record..record + MESSAGE_BYTES_MAX],
            message,
        );
        if let Some(out) = self.itch_out.as_mut()
            && self.write_error.is_none()
            && let Err(e) = out.write_all(&self.frames[record..record + n])
        {
            self.write_error = Some(e);
        }
        self.seal(at, 0, n - 2);
    }
}

impl Drop for HashingSink<'_> {
    /// Stops the hashing thread (its next receive fails) and waits for it.
    fn drop(&mut self) {
        drop(std::mem::replace(&mut self.work, bounded(0).0));
        if let Some(hashing) = self.hashing.take() {
            // A panic there was reported already if the digests were settled.
            let _ = hashing.join();
        }
    }
}

/// The hashing thread: frames into their streams' hashers until the sink drops.
fn hash_batches(
    mut hashers: Vec<StreamHasher>,
    work: &Receiver<Work>,
    empties: &Sender<Vec<u8>>,
    settled: &Sender<Vec<StreamHasher>>,
) {
    // Bounded: one turn per batch or settle the sink sends.
    while let Ok(next) = work.recv() {
        match next {
            Work::Frames { bytes, used } => {
                hash_frames(&mut hashers, &bytes[..used]);
                // The sink may be gone: then nobody wants it back.
                let _ = empties.try_send(bytes);
            }
            Work::Settle => {
                let _ = settled.send(hashers.clone());
            }
        }
    }
}

fn hash_frames(hashers: &mut [StreamHasher], frames: &[u8]) {
    let mut at = 0;
    // Bounded: each frame is at least a header long.
    while at < frames.len() {
        let stream = u16::from_le_bytes([frames[at], frames[at + 1]]);
        let len = usize::from(frames[at + 2]);
        let message = &frames[at + FRAME_HEADER_BYTES..at + FRAME_HEADER_BYTES + len];
        hashers[usize::from(stream)].add(message);
        at += FRAME_HEADER_BYTES + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{DigestSink, StreamDigest};
    use crate::types::{Alpha, Timestamp};

    fn outputs(n: u32) -> Vec<(Option<AccountId>, ouch::Outbound, itch::Message)> {
        (0..n)
            .map(|i| {
                let account = (i % 3 != 0).then_some(AccountId((i % 5) as u16));
                let token = Alpha::from_str_padded(&format!("T{i}")).unwrap();
                let reply = ouch::Outbound::Canceled(ouch::Canceled {
                    timestamp: Timestamp(u64::from(i)),
                    token,
                    decrement: crate::types::Shares(i),
                    reason: b'U',
                });
                let event = itch::Message {
                    header: itch::Header {
                        locate: 0,
                        tracking: 0,
                        timestamp: Timestamp(u64::from(i)),
                    },
                    body: itch::Body::SystemEvent { event: b'O' },
                };
                (account, reply, event)
            })
            .collect()
    }

    /// The same outputs hashed inline and on the thread give the same streams, across many
    /// batches, settled midway and at the end, and the BinaryFILE written is the ITCH
    /// stream's (its SHA-256 is the stream's digest).
    #[test]
    fn hashing_on_a_thread_equals_hashing_inline() {
        use sha2::{Digest, Sha256};
        let outputs = outputs(20_000); // ~600 KB of frames: ten batches and more
        let mut file = Vec::new();
        let mut inline = DigestSink::new(5);
        let fresh = vec![StreamHasher::default(); 6];
        let mut thread = HashingSink::with_batch(fresh, Some(&mut file), 64 << 10);
        let mut midway = None;
        for (i, (account, reply, event)) in outputs.iter().enumerate() {
            for sink in [&mut inline as &mut dyn Sink, &mut thread] {
                match account {
                    Some(a) => sink.ouch(*a, reply),
                    None => sink.itch(event),
                }
            }
            if i == 7_777 {
                midway = Some((thread.settle(), inline.itch.digest()));
            }
        }
        let (mid_hashers, mid_itch) = midway.unwrap();
        assert_eq!(mid_hashers[0].digest(), mid_itch, "settled midway");
        let settled = thread.settle();
        let want: Vec<_> = std::iter::once(&inline.itch).chain(&inline.ouch).collect();
        assert_eq!(settled.len(), want.len());
        for (got, want) in settled.iter().zip(want) {
            assert_eq!(
                (got.messages, got.bytes, got.digest()),
                (want.messages, want.bytes, want.digest())
            );
        }
        assert!(settled[0].messages > 0 && settled[1].messages > 0);
        drop(thread);
        let file_digest: [u8; 32] = Sha256::digest(&file).into();
        assert_eq!(StreamDigest(file_digest), inline.itch.digest());
    }

    /// Every kind of output a trading day makes (the realistic workload through the
    /// exchange), through batches a few frames long: pooled buffers come back holding old
    /// frames and each message is encoded over them, so an encoder that left a byte of its
    /// length unwritten would change a digest here.
    #[test]
    fn a_days_outputs_through_small_reused_batches_hash_as_inline() {
        use crate::exchange::{Exchange, Limits};
        use crate::workload::{Spec, Workload, demo_venue, generate, to_inputs};
        let mut spec = Spec::standard(Workload::Realistic, 7);
        spec.ops = spec.ops.min(5_000);
        let stream = generate(spec);
        let limits = Limits {
            orders_per_symbol: stream.stats.max_resting + 16,
            levels_per_side: stream.stats.max_levels + 16,
            tokens_per_account: stream.stats.max_tokens_per_account,
        };
        let venue = demo_venue("BNCH", stream.stats.accounts, limits);
        let accounts = venue.accounts.len();
        struct Tee<'a, 'w>(&'a mut DigestSink, &'a mut HashingSink<'w>);
        impl Sink for Tee<'_, '_> {
            fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
                self.0.ouch(account, message);
                self.1.ouch(account, message);
            }
            fn itch(&mut self, message: &itch::Message) {
                self.0.itch(message);
                self.1.itch(message);
            }
        }
        let mut inline = DigestSink::new(accounts);
        let fresh = vec![StreamHasher::default(); accounts + 1];
        // Room for five of the longest frames.
        let mut thread = HashingSink::with_batch(fresh, None, 5 * FRAME_ROOM_BYTES);
        let mut exchange = Exchange::new(venue).expect("venue");
        let mut tee = Tee(&mut inline, &mut thread);
        // The start of day first, then the day's orders.
        for input in &to_inputs(&stream.ops, "BNCH", 100) {
            exchange.apply(input, &mut tee);
        }
        let settled = thread.settle();
        let want: Vec<_> = std::iter::once(&inline.itch).chain(&inline.ouch).collect();
        for (got, want) in settled.iter().zip(want) {
            assert_eq!(
                (got.messages, got.bytes, got.digest()),
                (want.messages, want.bytes, want.digest())
            );
        }
        assert!(settled[0].messages > 5_000, "a day's ITCH messages");
    }

    /// A panic on the hashing thread while a settle waits reaches the caller (it hung: the
    /// reply's sender sat in the closed channel's buffer, found by a second reading).
    #[test]
    fn a_panic_on_the_hashing_thread_reaches_the_settle() {
        let (done, verdict) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let settled = std::panic::catch_unwind(|| {
                // The ITCH stream only: an account's frame (stream 1) panics the thread.
                let hashers = vec![StreamHasher::default()];
                let mut sink = HashingSink::with_batch(hashers, None, 64 << 10);
                let (_, reply, event) = outputs(1).remove(0);
                for _ in 0..20_000 {
                    sink.itch(&event);
                }
                sink.ouch(AccountId(0), &reply);
                sink.settle()
            });
            let _ = done.send(settled.is_err());
        });
        match verdict.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(panicked) => assert!(panicked, "settle returned hashers after a panic"),
            Err(_) => panic!("settle still waits 10 s after the hashing thread panicked"),
        }
    }

    /// A venue of 65,535 accounts (the most `Venue` allows) has a stream number for each.
    #[test]
    fn the_largest_venue_has_a_stream_number_for_every_account() {
        let mut sink = HashingSink::start(vec![StreamHasher::default(); 65_536], None);
        let (_, reply, _) = outputs(1).remove(0);
        sink.ouch(AccountId(65_534), &reply);
        assert_eq!(sink.settle()[65_535].messages, 1);
    }
}
