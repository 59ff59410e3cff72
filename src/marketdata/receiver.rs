//! The client side of the feed, for tools and end-to-end tests: a multicast receiver joined on a
//! pinned interface that decodes MoldUDP64 and reports sequence gaps, and a re-request client.
//!
//! Not on the daemon's hot path: simple blocking sockets with timeouts.

use crate::wire::DecodeError;
use crate::wire::ascii::SessionId;
use crate::wire::moldudp64::{self, MAX_UDP_PAYLOAD, Packet, PacketKind, Request};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// What a received packet means for the receiver's position in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Carries the next expected message (or is a heartbeat/End of Session that agrees).
    InOrder,
    /// Nothing new: every message in it was already seen.
    Duplicate,
    /// Messages `first .. first + count` were skipped; re-request them.
    Gap { first: u64, count: u64 },
}

/// Tracks the next expected MoldUDP64 sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceTracker {
    next_expected: u64,
}

impl SequenceTracker {
    /// `next_expected` is 1 for a receiver that wants the whole session, or the number from a
    /// GLIMPSE end-of-snapshot `G`.
    pub fn new(next_expected: u64) -> SequenceTracker {
        assert!(next_expected >= 1);
        SequenceTracker { next_expected }
    }

    pub fn next_expected(&self) -> u64 {
        self.next_expected
    }

    /// Move past a packet. For heartbeats and End of Session the header's sequence number is
    /// the sender's next one, so a gap before a quiet period is noticed too.
    pub fn observe(&mut self, packet: &Packet<'_>) -> Observed {
        let first = packet.header.sequence;
        let next = match packet.kind() {
            PacketKind::Data => packet.next_sequence(),
            PacketKind::Heartbeat | PacketKind::EndOfSession => first,
        };
        if first > self.next_expected {
            let gap = Observed::Gap {
                first: self.next_expected,
                count: first - self.next_expected,
            };
            self.next_expected = next;
            return gap;
        }
        if next <= self.next_expected && packet.kind() == PacketKind::Data {
            return Observed::Duplicate;
        }
        self.next_expected = self.next_expected.max(next);
        Observed::InOrder
    }
}

/// Why [`FeedReceiver::recv`] returned no packet.
#[derive(Debug)]
pub enum RecvError {
    /// Nothing arrived within the read timeout.
    Timeout,
    Io(io::Error),
    /// A datagram that is not a MoldUDP64 downstream packet.
    Decode(DecodeError),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Timeout => f.write_str("timed out"),
            RecvError::Io(e) => write!(f, "{e}"),
            RecvError::Decode(e) => write!(f, "bad MoldUDP64 packet: {e}"),
        }
    }
}

impl std::error::Error for RecvError {}

/// A received packet and what it meant for the sequence.
pub struct Received<'a> {
    pub packet: Packet<'a>,
    pub observed: Observed,
    /// UDP payload bytes (the datagram).
    pub bytes: &'a [u8],
}

/// A multicast member of one group, joined on one interface.
pub struct FeedReceiver {
    socket: UdpSocket,
    buf: Box<[u8]>,
    tracker: SequenceTracker,
}

impl FeedReceiver {
    /// Join `group` on `interface` (pinned: never the default route) and expect sequence 1.
    pub fn join(
        group: SocketAddrV4,
        interface: Ipv4Addr,
        read_timeout: Duration,
    ) -> io::Result<FeedReceiver> {
        assert!(group.ip().is_multicast());
        assert!(
            !read_timeout.is_zero(),
            "a zero timeout means block forever"
        );
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        // Several receivers (and tools) may listen to one group on one host.
        socket.set_reuse_address(true)?;
        // Bound to the group address: datagrams sent to other groups on this port stay out.
        socket.bind(&SockAddr::from(group))?;
        socket.join_multicast_v4(group.ip(), &interface)?;
        socket.set_read_timeout(Some(read_timeout))?;
        Ok(FeedReceiver {
            socket: socket.into(),
            buf: vec![0u8; MAX_UDP_PAYLOAD].into_boxed_slice(),
            tracker: SequenceTracker::new(1),
        })
    }

    /// How long [`FeedReceiver::recv`] waits (must not be zero: that would block forever).
    pub fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        assert!(!timeout.is_zero());
        self.socket.set_read_timeout(Some(timeout))
    }

    /// Expect `next` next (e.g. after a GLIMPSE snapshot).
    pub fn set_next_expected(&mut self, next: u64) {
        self.tracker = SequenceTracker::new(next);
    }

    pub fn next_expected(&self) -> u64 {
        self.tracker.next_expected()
    }

    /// Wait up to the read timeout for one datagram, decode it and track its sequence.
    pub fn recv(&mut self) -> Result<Received<'_>, RecvError> {
        let n = match self.socket.recv(&mut self.buf) {
            Ok(n) => n,
            Err(e) if super::rerequest::is_timeout(&e) => return Err(RecvError::Timeout),
            Err(e) => return Err(RecvError::Io(e)),
        };
        let bytes = &self.buf[..n];
        let packet = Packet::decode(bytes).map_err(RecvError::Decode)?;
        let observed = self.tracker.observe(&packet);
        Ok(Received {
            packet,
            observed,
            bytes,
        })
    }
}

/// Ask the re-request server at `server` for `count` messages from `sequence` and wait up to
/// `timeout` for its answer: the downstream packet's bytes, or `None` if nothing came (the
/// server ignores requests it cannot answer). The answer may hold fewer messages than asked;
/// ask again from its `next_sequence()`.
pub fn request_retransmission(
    server: SocketAddr,
    session: SessionId,
    sequence: u64,
    count: u16,
    timeout: Duration,
) -> io::Result<Option<Vec<u8>>> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)?;
    let mut request = [0u8; Request::LEN];
    Request::new(session, sequence, count).encode(&mut request);
    socket.send_to(&request, server)?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_UDP_PAYLOAD];
    // Bounded by the deadline: each wait is at most the time left.
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        socket.set_read_timeout(Some(left))?;
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(received) => received,
            Err(e) if super::rerequest::is_timeout(&e) => continue,
            Err(e) => return Err(e),
        };
        // Only the server's answer to this request counts; anything else is skipped.
        let answers = |p: &moldudp64::Packet<'_>| {
            p.kind() == PacketKind::Data && p.header.sequence == sequence
        };
        if from == server && Packet::decode(&buf[..n]).is_ok_and(|p| answers(&p)) {
            buf.truncate(n);
            return Ok(Some(buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::moldudp64::PacketBuilder;

    fn data(first: u64, count: usize) -> Vec<u8> {
        let mut b = PacketBuilder::new(SessionId::new("S").unwrap(), first, 1400);
        for _ in 0..count {
            b.push(b"m").unwrap();
        }
        b.finish().to_vec()
    }

    fn heartbeat(next: u64) -> Vec<u8> {
        let mut b = [0u8; 20];
        moldudp64::encode_heartbeat(&mut b, SessionId::new("S").unwrap(), next);
        b.to_vec()
    }

    #[test]
    fn tracker_reports_in_order_gaps_and_duplicates() {
        let mut t = SequenceTracker::new(1);
        let mut see = |bytes: Vec<u8>| t.observe(&Packet::decode(&bytes).unwrap());
        assert_eq!(see(data(1, 3)), Observed::InOrder);
        assert_eq!(see(heartbeat(4)), Observed::InOrder);
        assert_eq!(see(data(6, 2)), Observed::Gap { first: 4, count: 2 });
        assert_eq!(see(data(6, 2)), Observed::Duplicate);
        assert_eq!(see(data(7, 2)), Observed::InOrder);
        assert_eq!(see(heartbeat(12)), Observed::Gap { first: 9, count: 3 });
        assert_eq!(t.next_expected(), 12);
    }
}
