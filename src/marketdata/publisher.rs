//! The ITCH feed sender (DESIGN.md 5): packs ITCH messages into MoldUDP64 packets of at most
//! `max_payload_bytes` and multicasts them on the configured interface only.
//!
//! Driven by the engine thread, which owns it; it never blocks and never allocates after
//! construction. The engine:
//! - calls [`FeedPublisher::publish`] for every ITCH message, in sequence order (the same order
//!   it appends them to the session's [`crate::stream::StreamWriter`]);
//! - calls [`FeedPublisher::flush`] when no further output is pending (after each released
//!   batch), so a partial packet never waits for traffic that is not coming.
//!
//! Full packets are sealed into an outbox and handed to the kernel together, up to
//! [`SEND_BATCH_PACKETS`] per `sendmmsg` call: at the flush, when the outbox is full, or by the
//! timers. A released batch of a few thousand ITCH messages is one system call instead of one
//! per packet; the bytes of every datagram are what they were. The engine also
//! - calls [`FeedPublisher::poll_timers`] every loop iteration (and by
//!   [`FeedPublisher::next_deadline_ns`] when it parks): heartbeats when idle, the `max_hold_us`
//!   safety net, retries of packets the kernel refused;
//! - calls [`FeedPublisher::end_of_session`] after the end-of-day System Event `C`.
//!
//! A refused send (`WouldBlock`, `ENOBUFS`, ...) keeps the packet in a bounded backlog, retried
//! in order on the next call. When the backlog is full the oldest packet is dropped, counted in
//! [`PublisherStats`] and logged: receivers see a gap and fill it from the re-request server,
//! which has every message.

use crate::config::FeedConfig;
use crate::wire::ascii::SessionId;
use crate::wire::itch;
use crate::wire::moldudp64::{self, BLOCK_HEADER_LEN, HEADER_LEN, PacketBuilder, PushError};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;

/// Smallest ITCH 5.0 message (System Event): when less room than this is left, the packet is
/// as full as it can get, so it goes out at once instead of waiting for the next message.
const MIN_ITCH_MESSAGE_LEN: usize = 12;

/// Sealed packets handed to the kernel in one `sendmmsg` call at most (also the outbox's
/// size): 16 packets of 1,400 bytes are about 600 ITCH messages. Small enough that a full
/// packet waits only while the next 15 are packed in the same hand-off (tens of µs, inside
/// DESIGN.md 5's 100 µs hold), large enough for a loop turn's release at saturation (~14
/// packets for ~350 inputs) to be one call.
pub const SEND_BATCH_PACKETS: usize = 16;

/// Everything the publisher needs, in units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublisherConfig {
    pub group: SocketAddrV4,
    /// Multicast is sent on this interface only (`IP_MULTICAST_IF`).
    pub interface: Ipv4Addr,
    pub ttl: u32,
    pub session: SessionId,
    /// UDP payload limit of one packet, 20-byte header included.
    pub max_payload_bytes: usize,
    /// Longest a partly filled packet waits when the engine does not flush.
    pub max_hold_us: u64,
    /// A heartbeat packet after this much silence.
    pub heartbeat_ms: u64,
    /// After the session ends, End of Session packets replace heartbeats for this long.
    pub end_of_session_ms: u64,
    /// Packets kept for retry while the kernel refuses sends; beyond this the oldest is dropped.
    pub backlog_packets: usize,
}

impl PublisherConfig {
    pub const DEFAULT_END_OF_SESSION_MS: u64 = 10_000;
    pub const DEFAULT_BACKLOG_PACKETS: usize = 256;

    /// From the `[feed]` section; the two keys it lacks take the defaults above.
    pub fn from_feed(feed: &FeedConfig) -> Result<PublisherConfig, String> {
        let SocketAddr::V4(group) = feed.group else {
            return Err(format!("feed.group {} is not IPv4", feed.group));
        };
        if !group.ip().is_multicast() {
            return Err(format!("feed.group {group} is not a multicast address"));
        }
        let session = SessionId::new(&feed.session)
            .ok_or_else(|| format!("feed.session {:?} is too long", feed.session))?;
        let max_payload_bytes = usize::from(feed.max_payload_bytes);
        let smallest = HEADER_LEN + BLOCK_HEADER_LEN + itch::MAX_MESSAGE_LEN;
        if !(smallest..=moldudp64::MAX_UDP_PAYLOAD).contains(&max_payload_bytes) {
            return Err(format!(
                "feed.max_payload_bytes {max_payload_bytes} must hold the largest ITCH message \
                 ({smallest}..={})",
                moldudp64::MAX_UDP_PAYLOAD
            ));
        }
        if feed.heartbeat_ms == 0 {
            return Err("feed.heartbeat_ms must be positive".into());
        }
        Ok(PublisherConfig {
            group,
            interface: feed.interface,
            ttl: feed.ttl,
            session,
            max_payload_bytes,
            max_hold_us: feed.max_hold_us,
            heartbeat_ms: feed.heartbeat_ms,
            end_of_session_ms: Self::DEFAULT_END_OF_SESSION_MS,
            backlog_packets: Self::DEFAULT_BACKLOG_PACKETS,
        })
    }
}

/// Counters for the operator (and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublisherStats {
    pub data_packets_sent: u64,
    pub messages_sent: u64,
    pub heartbeats_sent: u64,
    pub end_of_session_sent: u64,
    /// Sends the kernel refused (the packet was kept, or was a heartbeat).
    pub send_errors: u64,
    /// Data packets dropped because the backlog was full (receivers re-request them).
    pub dropped_packets: u64,
    pub dropped_messages: u64,
}

pub struct FeedPublisher {
    outlet: Outlet,
    session: SessionId,
    max_payload_bytes: usize,
    builder: PacketBuilder,
    /// Sealed packets not yet offered to the kernel (sent together at the next flush).
    outbox: PacketQueue,
    /// Packets the kernel refused, retried in order before anything newer.
    backlog: PacketQueue,
    /// Buffer for heartbeat and End of Session packets.
    control: [u8; HEADER_LEN],
    max_hold_ns: u64,
    heartbeat_ns: u64,
    end_of_session_ns: u64,
    /// When the first message of the packet being built was pushed.
    pending_since_ns: Option<u64>,
    /// Last time anything was handed to the kernel (or tried): heartbeats count idleness from here.
    last_send_ns: u64,
    ended_at_ns: Option<u64>,
    /// The last send failed: log the next failure at debug only, the recovery at info.
    failing: bool,
    stats: PublisherStats,
}

/// Whether a sending socket for `config` can be opened now (made and closed, no datagram
/// sent, nothing allocated): a cluster member that cannot open its feed stands back in
/// elections instead of winning one it cannot serve.
pub fn sender_opens(config: &PublisherConfig) -> io::Result<()> {
    open_multicast_sender(config).map(drop)
}

impl FeedPublisher {
    /// Open the sending socket. `next_sequence` is the MoldUDP64 number of the next message
    /// (1 for a new journal; recovered from the journal after a restart or failover).
    pub fn new(
        config: &PublisherConfig,
        next_sequence: u64,
        now_ns: u64,
    ) -> io::Result<FeedPublisher> {
        assert!(config.backlog_packets > 0);
        assert!(config.heartbeat_ms > 0);
        let socket = open_multicast_sender(config)?;
        Ok(FeedPublisher {
            outlet: Outlet {
                socket,
                group: SockAddr::from(config.group),
                #[cfg(test)]
                refuse_sends: 0,
                #[cfg(test)]
                batch_calls: 0,
            },
            session: config.session,
            max_payload_bytes: config.max_payload_bytes,
            builder: PacketBuilder::new(config.session, next_sequence, config.max_payload_bytes),
            outbox: PacketQueue::new(SEND_BATCH_PACKETS, config.max_payload_bytes),
            backlog: PacketQueue::new(config.backlog_packets, config.max_payload_bytes),
            control: [0; HEADER_LEN],
            max_hold_ns: config.max_hold_us.saturating_mul(1_000),
            heartbeat_ns: config.heartbeat_ms.saturating_mul(1_000_000),
            end_of_session_ns: config.end_of_session_ms.saturating_mul(1_000_000),
            pending_since_ns: None,
            last_send_ns: now_ns,
            ended_at_ns: None,
            failing: false,
            stats: PublisherStats::default(),
        })
    }

    /// Sequence number the next published message gets; equals the stream's `len() + 1`.
    pub fn next_sequence(&self) -> u64 {
        self.builder.next_sequence()
    }

    pub fn stats(&self) -> PublisherStats {
        self.stats
    }

    /// Data packets waiting for the kernel to take them: sealed and not yet offered, or
    /// refused and kept for retry.
    pub fn backlog_packets(&self) -> usize {
        self.outbox.len() + self.backlog.len()
    }

    /// Add one encoded ITCH message; returns its sequence number. A full packet is sealed
    /// and goes out with the next flush (or at once when the outbox is full).
    pub fn publish(&mut self, encoded_itch: &[u8], now_ns: u64) -> u64 {
        let message_len = encoded_itch.len();
        self.publish_with(message_len, now_ns, |b| b.push(encoded_itch))
    }

    /// Like [`FeedPublisher::publish`], encoding the message in place (no intermediate copy).
    pub fn publish_itch(&mut self, message: &itch::Message, now_ns: u64) -> u64 {
        let message_len = message.encoded_len();
        self.publish_with(message_len, now_ns, |b| b.push_itch(message))
    }

    fn publish_with(
        &mut self,
        message_len: usize,
        now_ns: u64,
        mut push: impl FnMut(&mut PacketBuilder) -> Result<u64, PushError>,
    ) -> u64 {
        assert!(
            self.ended_at_ns.is_none(),
            "ITCH message published after End of Session"
        );
        let sequence = match push(&mut self.builder) {
            Ok(sequence) => sequence,
            Err(PushError::Full) => {
                self.seal_packet(now_ns);
                // An empty packet holds any message the config admits (checked at load).
                push(&mut self.builder).expect("message fits an empty packet")
            }
            Err(PushError::TooLarge) => {
                panic!("ITCH message of {message_len} bytes exceeds max_payload_bytes")
            }
        };
        self.pending_since_ns.get_or_insert(now_ns);
        if self.builder_room() < BLOCK_HEADER_LEN + MIN_ITCH_MESSAGE_LEN {
            self.seal_packet(now_ns);
        }
        sequence
    }

    fn builder_room(&self) -> usize {
        self.max_payload_bytes - self.builder.len()
    }

    /// Send the sealed packets and the partial one now (the engine has no further output
    /// pending), behind any backlog.
    pub fn flush(&mut self, now_ns: u64) {
        if !self.builder.is_empty() {
            self.seal_packet(now_ns);
        }
        self.send_outbox(now_ns);
    }

    /// Timers: the `max_hold_us` bound, backlog retries, heartbeats or End of Session packets.
    pub fn poll_timers(&mut self, now_ns: u64) {
        if let Some(since) = self.pending_since_ns
            && now_ns.saturating_sub(since) >= self.max_hold_ns
        {
            self.seal_packet(now_ns);
        }
        // Sealed packets are full: they wait for nothing.
        self.send_outbox(now_ns);
        let idle = self.builder.is_empty() && self.backlog.is_empty();
        if idle && now_ns.saturating_sub(self.last_send_ns) >= self.heartbeat_ns {
            match self.ended_at_ns {
                None => self.send_control(now_ns, false),
                Some(ended) if now_ns.saturating_sub(ended) < self.end_of_session_ns => {
                    self.send_control(now_ns, true)
                }
                // The session is over and its End of Session window has passed: silence.
                Some(_) => {}
            }
        }
    }

    /// The earliest time [`FeedPublisher::poll_timers`] has something to do.
    pub fn next_deadline_ns(&self) -> u64 {
        if !self.outbox.is_empty() {
            return 0;
        }
        if !self.backlog.is_empty() {
            // Retry soon, but do not spin on a refusing kernel: one hold interval.
            return self.last_send_ns.saturating_add(self.max_hold_ns.max(1));
        }
        if let Some(since) = self.pending_since_ns {
            return since.saturating_add(self.max_hold_ns);
        }
        let next_control_ns = self.last_send_ns.saturating_add(self.heartbeat_ns);
        match self.ended_at_ns {
            // Same test as poll_timers: past the End of Session window nothing more is sent.
            Some(ended) if next_control_ns.saturating_sub(ended) >= self.end_of_session_ns => {
                u64::MAX
            }
            _ => next_control_ns,
        }
    }

    /// The session is over: send what is pending, then an End of Session packet now and, for
    /// `end_of_session_ms`, one each `heartbeat_ms` instead of heartbeats.
    pub fn end_of_session(&mut self, now_ns: u64) {
        if self.ended_at_ns.is_some() {
            return;
        }
        self.flush(now_ns);
        self.ended_at_ns = Some(now_ns);
        self.send_control(now_ns, true);
    }

    pub fn has_ended(&self) -> bool {
        self.ended_at_ns.is_some()
    }

    /// Seal the packet being built into the outbox (sending the outbox first if it is full).
    fn seal_packet(&mut self, now_ns: u64) {
        assert!(self.builder.message_count() > 0);
        self.pending_since_ns = None;
        if self.outbox.len() == self.outbox.slots() {
            self.send_outbox(now_ns);
        }
        assert!(
            self.outbox.len() < self.outbox.slots(),
            "send_outbox empties it"
        );
        let dropped = self.outbox.push(self.builder.finish());
        assert!(dropped.is_none(), "the outbox had room");
    }

    /// Offer the outbox to the kernel in one call, behind any backlog; what is refused joins
    /// the backlog (in order).
    fn send_outbox(&mut self, now_ns: u64) {
        self.drain_backlog(now_ns);
        if self.outbox.is_empty() {
            return;
        }
        self.last_send_ns = now_ns;
        if self.backlog.is_empty() {
            let offered = self.outbox.len().min(SEND_BATCH_PACKETS);
            let (sent, error) = self.send_front(Queue::Outbox);
            if sent < offered {
                let sequence = packet_sequence(self.outbox.front().expect("refused packet"));
                self.note_failure(&error, sequence);
            }
        }
        // Packets go out in sequence order: whatever is left waits behind the backlog.
        while let Some(packet) = self.outbox.front() {
            let dropped = self.backlog.push(packet);
            self.outbox.pop();
            if let Some(dropped) = dropped {
                self.note_dropped(dropped);
            }
        }
    }

    /// Send queued packets in order until the kernel refuses one or the queue is empty.
    fn drain_backlog(&mut self, now_ns: u64) {
        // Each round sends at least one packet or stops.
        for _ in 0..=self.backlog.slots() {
            if self.backlog.is_empty() {
                return;
            }
            self.last_send_ns = now_ns;
            let offered = self.backlog.len().min(SEND_BATCH_PACKETS);
            let (sent, error) = self.send_front(Queue::Backlog);
            if sent < offered {
                let sequence = packet_sequence(self.backlog.front().expect("refused packet"));
                self.note_failure(&error, sequence);
                return;
            }
        }
    }

    /// Offer up to [`SEND_BATCH_PACKETS`] from the front of one queue in one system call and
    /// pop what the kernel took; returns how many, and why the rest were not (a partial send
    /// means the next packet would have been refused).
    fn send_front(&mut self, which: Queue) -> (usize, io::Error) {
        let queue = match which {
            Queue::Outbox => &mut self.outbox,
            Queue::Backlog => &mut self.backlog,
        };
        let (sent, error) = match self.outlet.send_batch(queue) {
            Ok(n) => (n, io::ErrorKind::WouldBlock.into()),
            Err(e) => (0, e),
        };
        for _ in 0..sent {
            let messages = u64::from(packet_count(queue.front().expect("sent packet")));
            queue.pop();
            self.stats.data_packets_sent += 1;
            self.stats.messages_sent += messages;
        }
        if sent > 0 {
            self.note_recovered();
        }
        (sent, error)
    }

    /// A heartbeat or End of Session packet; never queued (the next one carries the same news).
    fn send_control(&mut self, now_ns: u64, end: bool) {
        let session = self.session;
        let next = self.builder.next_sequence();
        if end {
            moldudp64::encode_end_of_session(&mut self.control, session, next);
        } else {
            moldudp64::encode_heartbeat(&mut self.control, session, next);
        }
        self.last_send_ns = now_ns;
        match self.outlet.send(&self.control) {
            Ok(_) if end => self.stats.end_of_session_sent += 1,
            Ok(_) => self.stats.heartbeats_sent += 1,
            Err(e) => self.note_failure(&e, next),
        }
    }

    fn note_failure(&mut self, e: &io::Error, sequence: u64) {
        self.stats.send_errors += 1;
        if self.failing {
            tracing::debug!(error = %e, sequence, "feed send refused again; kept for retry");
        } else {
            tracing::warn!(error = %e, sequence, "feed send refused; kept for retry");
            self.failing = true;
        }
    }

    fn note_recovered(&mut self) {
        if self.failing {
            tracing::info!(errors = self.stats.send_errors, "feed sends accepted again");
            self.failing = false;
        }
    }

    fn note_dropped(&mut self, (sequence, count): (u64, u16)) {
        self.stats.dropped_packets += 1;
        self.stats.dropped_messages += u64::from(count);
        tracing::error!(
            sequence,
            count,
            backlog = self.backlog.len(),
            "feed backlog full: dropped a packet (receivers must re-request it)"
        );
    }
}

/// The socket and its destination.
struct Outlet {
    socket: Socket,
    group: SockAddr,
    /// Tests: refuse this many sends as a full kernel buffer would.
    #[cfg(test)]
    refuse_sends: u32,
    /// Tests: `sendmmsg` calls made.
    #[cfg(test)]
    batch_calls: u32,
}

/// Which of the publisher's packet queues.
#[derive(Clone, Copy)]
enum Queue {
    Outbox,
    Backlog,
}

impl Outlet {
    /// Offer up to [`SEND_BATCH_PACKETS`] packets from the front of `queue`, one datagram
    /// each, in one `sendmmsg`; returns how many the kernel took (in order). The headers live
    /// on the stack: nothing is allocated.
    fn send_batch(&mut self, queue: &PacketQueue) -> io::Result<usize> {
        #[cfg(test)]
        if self.refuse_sends > 0 {
            self.refuse_sends -= 1;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let count = queue.len().min(SEND_BATCH_PACKETS);
        if count == 0 {
            return Ok(0);
        }
        #[cfg(test)]
        {
            self.batch_calls += 1;
        }
        // SAFETY: all-zero iovec and mmsghdr are valid values (null pointers, zero lengths).
        let mut iovecs: [libc::iovec; SEND_BATCH_PACKETS] = unsafe { std::mem::zeroed() };
        let mut headers: [libc::mmsghdr; SEND_BATCH_PACKETS] = unsafe { std::mem::zeroed() };
        for (i, iovec) in iovecs.iter_mut().enumerate().take(count) {
            let packet = queue.get(i);
            iovec.iov_base = packet.as_ptr() as *mut libc::c_void;
            iovec.iov_len = packet.len();
        }
        for (header, iovec) in headers.iter_mut().zip(iovecs.iter_mut()).take(count) {
            header.msg_hdr.msg_name = self.group.as_ptr() as *mut libc::c_void;
            header.msg_hdr.msg_namelen = self.group.len();
            header.msg_hdr.msg_iov = iovec;
            header.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `count` initialised headers, each pointing at one iovec over a packet of
        // `queue` and at the group's address; all outlive the call, which only reads them.
        let sent = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let sent = sent as usize;
        assert!(sent <= count);
        Ok(sent)
    }

    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        if self.refuse_sends > 0 {
            self.refuse_sends -= 1;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.socket.send_to(datagram, &self.group).map(|_| ())
    }
}

#[cfg(test)]
impl FeedPublisher {
    /// Make the next `n` sends fail with `WouldBlock`.
    pub(crate) fn refuse_next_sends(&mut self, n: u32) {
        self.outlet.refuse_sends = n;
    }

    /// `sendmmsg` calls made so far.
    pub(crate) fn batch_calls(&self) -> u32 {
        self.outlet.batch_calls
    }
}

/// A UDP socket that multicasts on `interface` only, non-blocking (the engine never waits on it).
fn open_multicast_sender(config: &PublisherConfig) -> io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    // Pin the interface: the host's default route for 239/8 may leave the machine.
    socket.set_multicast_if_v4(&config.interface)?;
    socket.set_multicast_ttl_v4(config.ttl)?;
    socket.set_multicast_loop_v4(true)?;
    socket.bind(&SockAddr::from(SocketAddrV4::new(config.interface, 0)))?;
    Ok(socket)
}

fn packet_sequence(packet: &[u8]) -> u64 {
    u64::from_be_bytes(packet[10..18].try_into().expect("8 bytes"))
}

fn packet_count(packet: &[u8]) -> u16 {
    u16::from_be_bytes([packet[18], packet[19]])
}

/// Fixed ring of whole packets waiting to be sent, allocated once.
struct PacketQueue {
    bytes: Box<[u8]>,
    lens: Box<[usize]>,
    slot_bytes: usize,
    head: usize,
    len: usize,
}

impl PacketQueue {
    fn new(slots: usize, slot_bytes: usize) -> PacketQueue {
        PacketQueue {
            bytes: vec![0u8; slots * slot_bytes].into_boxed_slice(),
            lens: vec![0usize; slots].into_boxed_slice(),
            slot_bytes,
            head: 0,
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slots(&self) -> usize {
        self.lens.len()
    }

    fn slot(&self, index: usize) -> std::ops::Range<usize> {
        let at = index * self.slot_bytes;
        at..at + self.lens[index]
    }

    /// Append a copy of `packet`; when full, the oldest packet is dropped first and its
    /// `(sequence, count)` returned.
    fn push(&mut self, packet: &[u8]) -> Option<(u64, u16)> {
        assert!(packet.len() >= HEADER_LEN && packet.len() <= self.slot_bytes);
        let mut dropped = None;
        if self.len == self.slots() {
            let front = self.front().expect("full queue has a front");
            dropped = Some((packet_sequence(front), packet_count(front)));
            self.pop();
        }
        let index = (self.head + self.len) % self.slots();
        self.lens[index] = packet.len();
        let range = self.slot(index);
        self.bytes[range].copy_from_slice(packet);
        self.len += 1;
        dropped
    }

    fn front(&self) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        Some(&self.bytes[self.slot(self.head)])
    }

    /// The `index`-th packet from the front.
    fn get(&self, index: usize) -> &[u8] {
        assert!(index < self.len);
        &self.bytes[self.slot((self.head + index) % self.slots())]
    }

    fn pop(&mut self) {
        assert!(self.len > 0);
        self.head = (self.head + 1) % self.slots();
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(sequence: u64, count: u16, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[10..18].copy_from_slice(&sequence.to_be_bytes());
        p[18..20].copy_from_slice(&count.to_be_bytes());
        p
    }

    #[test]
    fn packet_queue_keeps_order_and_drops_the_oldest_when_full() {
        let mut q = PacketQueue::new(2, 64);
        assert!(q.push(&packet(1, 2, 30)).is_none());
        assert!(q.push(&packet(3, 1, 64)).is_none());
        assert_eq!(q.push(&packet(4, 5, 20)), Some((1, 2)));
        assert_eq!(q.len(), 2);
        assert_eq!(packet_sequence(q.front().unwrap()), 3);
        assert_eq!(q.front().unwrap().len(), 64);
        q.pop();
        assert_eq!(packet_sequence(q.front().unwrap()), 4);
        assert_eq!(q.front().unwrap().len(), 20);
        q.pop();
        assert!(q.front().is_none());
    }

    #[test]
    fn config_from_feed_checks_what_the_publisher_relies_on() {
        let feed = FeedConfig::default();
        let c = PublisherConfig::from_feed(&feed).unwrap();
        assert_eq!(c.max_payload_bytes, 1400);
        assert_eq!(c.interface, Ipv4Addr::LOCALHOST);
        assert_eq!(c.ttl, 1);
        let mut small = feed.clone();
        small.max_payload_bytes = 60;
        assert!(PublisherConfig::from_feed(&small).is_err());
        let mut unicast = feed;
        unicast.group = "127.0.0.1:5".parse().unwrap();
        assert!(PublisherConfig::from_feed(&unicast).is_err());
    }
}
