//! The output stage: where the merged OUCH and ITCH messages go, in both layouts (inline on
//! the sequencer's thread, or on the output thread).
//!
//! One release mechanism: every message is encoded once and appended to its stream *held*
//! (invisible to readers). The front marks batch ends and, once a batch is durable by the
//! configured mode, releases it — both as markers in the output sequence. At a batch end the
//! stage notes how long each stream it touched is; at a release it publishes the streams
//! through those lengths, hands the released ITCH messages to the multicast feed and wakes the
//! gateway to send the replies. So no reply, no multicast packet and no re-request answer ever
//! shows an input a crash could take back, and nothing downstream waits for durability.

use super::node::OutputShared;
use crate::engine::threaded::OutputStage;
use crate::exchange::{Marker, Sink};
use crate::limits;
use crate::marketdata::glimpse::SnapshotEncoder;
use crate::stream::{StreamReader, StreamWriter};
use crate::types::AccountId;
use crate::wire::{itch, ouch};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Where released ITCH messages go: the multicast publisher.
pub trait FeedOut: Send + 'static {
    fn publish(&mut self, message: &[u8], now_ns: u64);
    /// No further output is pending: send the partial packet.
    fn flush(&mut self, now_ns: u64);
    fn poll_timers(&mut self, now_ns: u64);
    fn end_of_session(&mut self, now_ns: u64);
    /// The earliest time `poll_timers` has something to do (`u64::MAX`: never).
    fn next_deadline_ns(&self) -> u64;
}

/// A feed that sends nothing (replay-only use and tests of the gateway alone).
pub struct NoFeed;

impl FeedOut for NoFeed {
    fn publish(&mut self, _: &[u8], _: u64) {}
    fn flush(&mut self, _: u64) {}
    fn poll_timers(&mut self, _: u64) {}
    fn end_of_session(&mut self, _: u64) {}
    fn next_deadline_ns(&self) -> u64 {
        u64::MAX
    }
}

impl FeedOut for crate::marketdata::publisher::FeedPublisher {
    fn publish(&mut self, message: &[u8], now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::publish(self, message, now_ns);
    }
    fn flush(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::flush(self, now_ns);
    }
    fn poll_timers(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::poll_timers(self, now_ns);
    }
    fn end_of_session(&mut self, now_ns: u64) {
        crate::marketdata::publisher::FeedPublisher::end_of_session(self, now_ns);
    }
    fn next_deadline_ns(&self) -> u64 {
        crate::marketdata::publisher::FeedPublisher::next_deadline_ns(self)
    }
}

/// Stream lengths at a batch end, waiting for the batch's release.
#[derive(Clone, Copy, Debug)]
struct Checkpoint {
    seq: u64,
    itch_len: u64,
    /// Entries of `Streams::touched` that belong to this checkpoint (the next ones in order).
    touched: usize,
}

/// The output stage: OUCH streams per account, the ITCH stream, the feed.
pub struct Streams<F: FeedOut> {
    ouch: Vec<StreamWriter>,
    itch: StreamWriter,
    itch_reader: StreamReader,
    /// None until the feed opens (recovery, a standby before it takes over): streams are
    /// rebuilt and released, nothing is multicast.
    feed: Option<F>,
    /// ITCH messages handed to the feed so far.
    itch_fed: u64,
    /// Accounts whose stream got a message since the last batch end, and the flags behind it.
    batch_touched: Vec<u16>,
    batch_touched_flag: Vec<bool>,
    /// (account, stream length) per touched account at each pending checkpoint, in order.
    touched: VecDeque<(u16, u64)>,
    checkpoints: VecDeque<Checkpoint>,
    /// ITCH count through End of Messages, once it is appended.
    end_of_messages_at: Option<u64>,
    feed_ended: bool,
    /// Inline (compact): released ITCH is multicast in [`OutputStage::idle`], which the event
    /// loop calls after it has written the replies, so the feed's `sendmmsg` does not sit
    /// between an input's release and its reply. On the output thread (sharded) the feed is
    /// flushed at each release: that thread writes no replies, and it reaches `idle` only
    /// when nothing is left to merge.
    feed_flush_in_idle: bool,
    /// Released ITCH messages handed to the feed but not yet flushed: through this count.
    feed_unflushed_through: Option<u64>,
    shared: Arc<OutputShared>,
    started: Instant,
    last_timers_ns: u64,
    snapshot: Option<(u64, SnapshotEncoder)>,
}

impl<F: FeedOut> Streams<F> {
    pub fn new(
        ouch: Vec<StreamWriter>,
        itch: StreamWriter,
        itch_reader: StreamReader,
        shared: Arc<OutputShared>,
    ) -> Self {
        let accounts = ouch.len();
        let batches = limits::UNRELEASED_BATCHES_MAX;
        Streams {
            ouch,
            itch,
            itch_reader,
            feed: None,
            itch_fed: 0,
            batch_touched: Vec::with_capacity(accounts),
            batch_touched_flag: vec![false; accounts],
            touched: VecDeque::with_capacity(accounts * (batches + 1)),
            checkpoints: VecDeque::with_capacity(batches + 1),
            end_of_messages_at: None,
            feed_ended: false,
            feed_flush_in_idle: false,
            feed_unflushed_through: None,
            shared,
            started: Instant::now(),
            last_timers_ns: 0,
            snapshot: None,
        }
    }

    /// Open the feed: it continues after every ITCH message released so far (those were
    /// multicast by whoever held the feed before, or are a recovered day's).
    pub fn open_feed(&mut self, feed: F) {
        self.itch_fed = self.itch.published();
        self.feed = Some(feed);
        self.end_feed_if_day_ended();
    }

    /// Open the feed after ITCH message `sent` (a cluster's new leader: messages up to `sent`
    /// are known to have been multicast; every released one after it is multicast now, and
    /// the rest as they are released).
    pub fn open_feed_after(&mut self, sent: u64, feed: F) {
        self.itch_fed = sent;
        self.feed = Some(feed);
        self.feed_released();
        // No reply waits behind these: sent now, not at the next idle (a start that fails
        // after this would otherwise never send them).
        self.flush_feed(self.now_ns());
        self.end_feed_if_day_ended();
    }

    /// Stop multicasting (a cluster member that stopped leading); released messages are
    /// no longer handed to any feed.
    pub fn close_feed(&mut self) {
        self.feed = None;
        // A feed opened later (leading again) ends the day on its own.
        self.feed_ended = false;
    }

    /// Multicast a new day's opening messages, released before the feed opened.
    pub fn publish_from_start(&mut self) {
        self.itch_fed = 0;
        self.feed_released();
        self.flush_feed(self.now_ns());
    }

    /// Next MoldUDP64 sequence number of what is released.
    pub fn next_itch_seq(&self) -> u64 {
        self.itch.published() + 1
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn fail(&self, why: String) {
        let mut fatal = self.shared.fatal.lock().expect("not poisoned");
        fatal.get_or_insert(why);
    }

    fn batch_end(&mut self, seq: u64) {
        for &account in &self.batch_touched {
            let len = self.ouch[account as usize].len();
            self.touched.push_back((account, len));
            self.batch_touched_flag[account as usize] = false;
        }
        let touched = self.batch_touched.len();
        self.batch_touched.clear();
        assert!(
            self.checkpoints.len() < self.checkpoints.capacity(),
            "unreleased batches are bounded by the sequencer"
        );
        self.checkpoints.push_back(Checkpoint {
            seq,
            itch_len: self.itch.len(),
            touched,
        });
    }

    /// Run inline with the gateway (compact): multicast released ITCH in `idle`, after the
    /// replies.
    pub fn flush_feed_in_idle(&mut self) {
        self.feed_flush_in_idle = true;
    }

    fn release(&mut self, seq: u64) {
        let mut released = false;
        while self.checkpoints.front().is_some_and(|c| c.seq <= seq) {
            let c = self.checkpoints.pop_front().expect("front exists");
            for _ in 0..c.touched {
                let (account, len) = self.touched.pop_front().expect("touched per checkpoint");
                self.ouch[account as usize].publish_through(len);
            }
            self.itch.publish_through(c.itch_len);
            self.shared.released_seq.store(c.seq, Ordering::Release);
            released = true;
        }
        if !released {
            return;
        }
        self.feed_released();
        self.end_feed_if_day_ended();
        if let Some(wake) = self.shared.waker.get() {
            wake();
        }
    }

    /// Once the day's last ITCH message is released, the feed says End of Session (and
    /// only that, never a heartbeat again). Also when the feed opens on a day that ended
    /// before: a restart, a takeover or a new leader after end of day.
    fn end_feed_if_day_ended(&mut self) {
        let ended = self
            .end_of_messages_at
            .is_some_and(|at| self.itch.published() >= at);
        if !ended {
            return;
        }
        self.shared.day_ended.store(true, Ordering::Release);
        if self.feed.is_some() && !self.feed_ended {
            self.feed_ended = true;
            let now = self.now_ns();
            // The day's last messages leave before its End of Session.
            self.flush_feed(now);
            if let Some(feed) = self.feed.as_mut() {
                feed.end_of_session(now);
            }
        }
    }

    /// Hand every released ITCH message not yet multicast to the feed, then flush it.
    fn feed_released(&mut self) {
        let now = self.now_ns();
        let Some(feed) = self.feed.as_mut() else {
            self.itch_fed = self.itch.published();
            return;
        };
        let last = self.itch.published();
        for seq in self.itch_fed + 1..=last {
            feed.publish(self.itch_reader.get(seq).expect("published"), now);
        }
        // A new leader may know of messages sent beyond what it has released yet.
        self.itch_fed = self.itch_fed.max(last);
        self.feed_unflushed_through = Some(last);
        if !self.feed_flush_in_idle {
            self.flush_feed(now);
        }
    }

    /// Send what the feed holds; only then count it as multicast (a new leader continues the
    /// feed after what the old one said it sent).
    fn flush_feed(&mut self, now: u64) {
        let (Some(feed), Some(last)) = (self.feed.as_mut(), self.feed_unflushed_through.take())
        else {
            return;
        };
        feed.flush(now);
        self.shared.itch_sent.fetch_max(last, Ordering::Release);
    }
}

impl<F: FeedOut> Sink for Streams<F> {
    #[inline]
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        let mut buf = [0u8; limits::MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        let a = account.0 as usize;
        if self.ouch[a].append_held(&buf[..n]).is_err() {
            self.fail(format!("the OUCH stream of account {} is full", account.0));
            return;
        }
        if !self.batch_touched_flag[a] {
            self.batch_touched_flag[a] = true;
            self.batch_touched.push(account.0);
        }
    }

    #[inline]
    fn itch(&mut self, message: &itch::Message) {
        let mut buf = [0u8; limits::MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        let Ok(seq) = self.itch.append_held(&buf[..n]) else {
            self.fail("the ITCH stream is full".into());
            return;
        };
        if matches!(
            message.body,
            itch::Body::SystemEvent {
                event: itch::event::END_OF_MESSAGES
            }
        ) {
            self.end_of_messages_at = Some(seq);
        }
    }

    fn snapshot(&mut self, id: u64, message: Option<&itch::Message>) {
        // Snapshots are taken only when everything sequenced is released, so the appended
        // and published ends agree: the `G` number is the next message the feed sends.
        let next = self.itch.len() + 1;
        let (_, encoder) = self
            .snapshot
            .get_or_insert_with(|| (id, SnapshotEncoder::new(next)));
        match message {
            Some(m) => encoder.push(m),
            None => {
                let (at, encoder) = self.snapshot.take().expect("started");
                assert_eq!(at, id, "one snapshot at a time");
                let request = {
                    let mut pending = self.shared.snapshots.lock().expect("not poisoned");
                    let found = pending.iter().position(|(i, _)| *i == id);
                    found.map(|i| pending.swap_remove(i).1)
                };
                if let Some(request) = request {
                    request.answer(encoder.finish());
                }
            }
        }
    }

    fn marker(&mut self, marker: Marker) {
        match marker {
            Marker::BatchEnd { seq } => self.batch_end(seq),
            Marker::Release { seq } => self.release(seq),
        }
    }
}

impl<F: FeedOut> OutputStage for Streams<F> {
    fn idle(&mut self) {
        let now = self.now_ns();
        self.flush_feed(now);
        if now.saturating_sub(self.last_timers_ns) >= limits::OUTPUT_TIMERS_INTERVAL_NS {
            self.last_timers_ns = now;
            if let Some(feed) = self.feed.as_mut() {
                feed.poll_timers(now);
            }
        }
    }

    fn timers_due_in_ns(&self) -> u64 {
        let Some(feed) = self.feed.as_ref() else {
            return u64::MAX;
        };
        if self.feed_unflushed_through.is_some() {
            return 0;
        }
        // `idle` looks at the feed's timers once per interval at most.
        let due_ns = feed
            .next_deadline_ns()
            .max(self.last_timers_ns + limits::OUTPUT_TIMERS_INTERVAL_NS);
        due_ns.saturating_sub(self.now_ns())
    }

    /// Messages appended to every stream (held ones included): ITCH first, then every
    /// account's OUCH in config order (a state snapshot's stream positions).
    fn stream_counts(&self) -> Vec<u64> {
        let mut counts = Vec::with_capacity(self.ouch.len() + 1);
        counts.push(self.itch.len());
        counts.extend(self.ouch.iter().map(StreamWriter::len));
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::stream;
    use crate::types::Timestamp;
    use std::sync::Mutex;

    /// A feed that remembers what it was handed, and how many messages it had been handed
    /// at each flush (`usize::MAX` marks the End of Session).
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Vec<u8>>>>, Arc<Mutex<Vec<usize>>>);

    impl FeedOut for Recorder {
        fn publish(&mut self, message: &[u8], _: u64) {
            self.0.lock().unwrap().push(message.to_vec());
        }
        fn flush(&mut self, _: u64) {
            let handed = self.0.lock().unwrap().len();
            self.1.lock().unwrap().push(handed);
        }
        fn poll_timers(&mut self, _: u64) {}
        fn end_of_session(&mut self, _: u64) {
            self.1.lock().unwrap().push(usize::MAX);
        }
        fn next_deadline_ns(&self) -> u64 {
            u64::MAX
        }
    }

    fn event(code: u8) -> itch::Message {
        itch::Message {
            header: itch::Header {
                locate: 0,
                tracking: 0,
                timestamp: Timestamp(u64::from(code)),
            },
            body: itch::Body::SystemEvent { event: code },
        }
    }

    fn system(ts: u64) -> ouch::Outbound {
        ouch::Outbound::SystemEvent(ouch::SystemEvent {
            timestamp: Timestamp(ts),
            event: b'S',
        })
    }

    #[test]
    fn held_outputs_leave_only_with_their_batchs_release() {
        let (ouch_a, reader_a) = stream(1 << 16, 1 << 10).unwrap();
        let (ouch_b, reader_b) = stream(1 << 16, 1 << 10).unwrap();
        let (itch_w, itch_r) = stream(1 << 16, 1 << 10).unwrap();
        let shared = Arc::new(OutputShared::default());
        let mut out: Streams<Recorder> =
            Streams::new(vec![ouch_a, ouch_b], itch_w, itch_r.clone(), shared.clone());
        let feed = Recorder::default();
        let multicast = feed.0.clone();
        out.open_feed(feed);
        // Batch 1 (inputs 1-2): one reply each, one ITCH message.
        out.ouch(AccountId(0), &system(1));
        out.itch(&event(b'O'));
        out.ouch(AccountId(1), &system(2));
        out.marker(Marker::BatchEnd { seq: 2 });
        // Batch 2 (input 3), sequenced before batch 1 is released.
        out.ouch(AccountId(0), &system(3));
        out.itch(&event(b'S'));
        out.marker(Marker::BatchEnd { seq: 3 });
        assert_eq!((reader_a.len(), reader_b.len(), itch_r.len()), (0, 0, 0));
        assert!(
            multicast.lock().unwrap().is_empty(),
            "nothing multicast yet"
        );
        // Release batch 1 only: exactly its messages become visible.
        out.marker(Marker::Release { seq: 2 });
        assert_eq!((reader_a.len(), reader_b.len(), itch_r.len()), (1, 1, 1));
        assert_eq!(multicast.lock().unwrap().len(), 1);
        assert_eq!(shared.released_seq.load(Ordering::Acquire), 2);
        // A release between two batch ends releases only the batches it covers.
        out.marker(Marker::Release { seq: 2 });
        assert_eq!(reader_a.len(), 1);
        out.marker(Marker::Release { seq: 3 });
        assert_eq!((reader_a.len(), reader_b.len(), itch_r.len()), (2, 1, 2));
        assert_eq!(multicast.lock().unwrap().len(), 2);
        assert!(!shared.day_ended.load(Ordering::Acquire));
        // End of Messages counts as the day's end only once released.
        out.itch(&event(itch::event::END_OF_MESSAGES));
        out.marker(Marker::BatchEnd { seq: 4 });
        assert!(!shared.day_ended.load(Ordering::Acquire));
        out.marker(Marker::Release { seq: 4 });
        assert!(shared.day_ended.load(Ordering::Acquire));
    }

    /// Inline (compact), a release hands its ITCH to the feed but sends it only in `idle`,
    /// after the loop has written the replies; only then is it counted as multicast (what a
    /// new leader continues after). The day's End of Session follows its last messages.
    #[test]
    fn inline_the_feed_sends_released_itch_in_idle_and_counts_it_sent_only_then() {
        let (ouch, _ouch_reader) = stream(1 << 20, 1 << 10).unwrap();
        let (itch, itch_reader) = stream(1 << 20, 1 << 10).unwrap();
        let shared = Arc::new(OutputShared::default());
        let mut streams = Streams::new(vec![ouch], itch, itch_reader, shared.clone());
        streams.flush_feed_in_idle();
        // A new day's opening messages, released before the feed opened (as `Node::recover`
        // does): sent at once, with no idle (a start that fails later must not lose them).
        released_batch(&mut streams, 1, 2);
        let feed = Recorder::default();
        streams.open_feed(feed.clone());
        streams.publish_from_start();
        assert_eq!(*feed.1.lock().unwrap(), vec![2], "sent at once");
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 2);
        feed.0.lock().unwrap().clear();
        feed.1.lock().unwrap().clear();
        released_batch(&mut streams, 2, 3);
        assert_eq!(feed.0.lock().unwrap().len(), 3, "handed to the feed");
        assert!(feed.1.lock().unwrap().is_empty(), "not sent before idle");
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 2);
        streams.idle();
        assert_eq!(*feed.1.lock().unwrap(), vec![3]);
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 5);
        streams.idle();
        assert_eq!(*feed.1.lock().unwrap(), vec![3], "nothing new: no send");
        streams.itch(&event(b'x'));
        streams.itch(&event(itch::event::END_OF_MESSAGES));
        streams.marker(Marker::BatchEnd { seq: 3 });
        streams.marker(Marker::Release { seq: 3 });
        assert_eq!(*feed.1.lock().unwrap(), vec![3, 5, usize::MAX]);
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 7);
    }

    /// `count` more ITCH messages, as one released batch ending at input `seq`.
    fn released_batch(streams: &mut Streams<Recorder>, seq: u64, count: u8) {
        for code in 0..count {
            streams.itch(&event(b'a' + code));
        }
        streams.marker(Marker::BatchEnd { seq });
        streams.marker(Marker::Release { seq });
    }

    /// A cluster's new leader continues the feed after the last message known multicast, not
    /// after what it released as a follower: what the old leader released but may not have
    /// sent goes out again, with its own number.
    #[test]
    fn a_feed_opened_after_a_known_count_multicasts_everything_released_after_it() {
        let (ouch, _ouch_reader) = stream(1 << 20, 1 << 10).unwrap();
        let (itch, itch_reader) = stream(1 << 20, 1 << 10).unwrap();
        let shared = Arc::new(OutputShared::default());
        let mut streams = Streams::new(vec![ouch], itch, itch_reader.clone(), shared.clone());
        released_batch(&mut streams, 1, 5);
        assert_eq!(
            streams.next_itch_seq(),
            6,
            "released as a follower, sent by nobody here"
        );
        let first = Recorder::default();
        streams.open_feed_after(2, first.clone());
        let expected: Vec<Vec<u8>> = (3..=5)
            .map(|s| itch_reader.get(s).unwrap().to_vec())
            .collect();
        assert_eq!(
            *first.0.lock().unwrap(),
            expected,
            "messages 3..=5 multicast at once"
        );
        released_batch(&mut streams, 2, 2);
        assert_eq!(
            first.0.lock().unwrap().len(),
            5,
            "then 6 and 7 as they are released"
        );
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 7);
        // Known sent beyond what is released: nothing until the release passes it.
        streams.close_feed();
        let second = Recorder::default();
        streams.open_feed_after(9, second.clone());
        released_batch(&mut streams, 3, 3);
        let got = second.0.lock().unwrap().clone();
        assert_eq!(got, vec![itch_reader.get(10).unwrap().to_vec()]);
        assert_eq!(shared.itch_sent.load(Ordering::Acquire), 10);
    }
}
