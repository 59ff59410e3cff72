//! Authenticated TCP between cluster members, read and written by the daemon loop's thread.
//!
//! Each member listens on its `members` address and keeps one outbound connection to every
//! other member: messages to a member travel on our outbound connection, messages from it
//! arrive on its outbound connection (our inbound one). Making a connection (connect, accept,
//! the HMAC handshake of `transport/handshake.rs`) happens on helper threads, which hand the
//! authenticated connection over; from then on the loop's thread does every read and write
//! itself, without a queue or a thread in between: a message from raft is one `write` away
//! from the peer's socket, and the peer's loop is woken by its own poll. (A writer and a
//! reader thread per connection put four more thread wake-ups on every quorum round trip;
//! on a busy machine each costs tens of µs, BENCHMARKS §10.)
//!
//! The transport has its own `mio::Poll` for the member connections (and the helpers' waker);
//! its file descriptor ([`Transport::as_raw_fd`]) becomes readable when any of them has an
//! event, so the daemon registers that one descriptor in its own poll and each turn calls
//! [`Transport::turn`] (with whether that descriptor fired) and [`Transport::take`] until
//! `None`, [`Transport::send`] for raft's messages and [`Transport::flush`] once they are all
//! queued.
//!
//! **Frames** after the handshake: length u32 (of what follows), the sender's journal day
//! epoch u64, the ITCH messages the sender has multicast u64 (how a new leader knows where the
//! feed may continue, [`Transport::announce_itch_sent`]), then a raft-rs `Message` in its
//! protobuf encoding; a frame without the message is a keepalive (sent after a third of
//! `idle_timeout_ms` of silence). A length over `frame_bytes_max`, a message that does not decode, carries
//! a snapshot or a protobuf group (members never send either; the walk refuses them before the
//! decoder runs), or claims another sender closes the connection with one log line. Entry
//! payloads are not copied on receipt: the frame buffer is shared by the decoded entries
//! (`Bytes`).
//!
//! **Bounds**: per peer at most `outbound_messages_max` messages and
//! [`outbound_bytes_max`] bytes wait for its socket (past either, messages are dropped and
//! raft resends); at most `inbound_messages_max` decoded messages wait to be stepped (past
//! it the loop stops reading, and TCP pushes back on the sender); one inbound connection per
//! member (a new one replaces the old).

mod handshake;
mod wire;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use crossbeam::channel::{self, Receiver, Sender};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use raft::eraftpb::Message;

#[cfg(test)]
use crate::peer_auth::{CHALLENGE_BYTES, CLIENT_MAGIC, HELLO_BYTES, SERVER_MAGIC};
#[cfg(test)]
use handshake::client_handshake;
use handshake::{Acceptor, Connector, Handoff, HandoffSender};
pub use wire::{append_frame, decode_frame, encode_frame};

/// 3: a frame without a message body is a keepalive.
pub const VERSION: u16 = 3;
const FRAME_HEADER_BYTES: usize = 4 + 8 + 8;
/// Shortest secret accepted (bytes).
pub use crate::peer_auth::SECRET_BYTES_MIN;
/// The helpers' waker in the transport's own poll; connection tokens are below it.
const WAKER_TOKEN: Token = Token(usize::MAX);
/// Members in a cluster at most (a bit each in the transport's event masks).
pub const MEMBERS_MAX: usize = 64;
/// Room for every connection's event and the waker's.
const EVENTS_MAX: usize = 2 * MEMBERS_MAX + 1;
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Idle connections are looked for at most this often.
const IDLE_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// Frames other than appends (heartbeats, votes, answers, keepalives) that may wait beyond
/// `outbound_messages_max`: what keeps a leader a leader is not dropped for appends' backlog.
const CONTROL_FRAMES_EXTRA: usize = 1024;
/// Outbound bytes waiting for one member's socket at most, if `frame_bytes_max` allows.
const OUTBOUND_BYTES_MAX_DEFAULT: usize = 64 << 20;

/// Bytes that may wait for one member's socket: room for two largest frames at least.
pub fn outbound_bytes_max(frame_bytes_max: u32) -> usize {
    OUTBOUND_BYTES_MAX_DEFAULT.max(2 * (frame_bytes_max as usize + 4))
}

#[derive(Clone)]
pub struct TransportConfig {
    /// This member's id (1-based position in `members`).
    pub id: u64,
    /// Every member's cluster address, this one's included.
    pub members: Vec<SocketAddr>,
    pub secret: Vec<u8>,
    /// Largest frame accepted or sent (bytes after the length word).
    pub frame_bytes_max: u32,
    /// Messages waiting for one peer's socket; past it new ones are dropped (raft resends).
    pub outbound_messages_max: usize,
    /// Messages received and not taken yet; past it the loop stops reading.
    pub inbound_messages_max: usize,
    pub connect_timeout_ms: u64,
    pub handshake_timeout_ms: u64,
    /// An authenticated connection silent this long is closed (heartbeats keep it busy).
    pub idle_timeout_ms: u64,
}

impl std::fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportConfig")
            .field("id", &self.id)
            .field("members", &self.members)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl TransportConfig {
    pub fn validate(&self) -> Result<(), String> {
        let count = self.members.len() as u64;
        if self.id == 0 || self.id > count {
            return Err(format!("cluster id {} is not in 1..={count}", self.id));
        }
        if self.secret.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "the cluster secret must be at least {SECRET_BYTES_MIN} bytes"
            ));
        }
        if (self.frame_bytes_max as usize) < FRAME_HEADER_BYTES + 64 {
            return Err("frame_bytes_max is too small".into());
        }
        if self.outbound_messages_max == 0 || self.inbound_messages_max == 0 {
            return Err("message queues must hold at least one message".into());
        }
        if self.members.len() > MEMBERS_MAX {
            return Err(format!("a cluster has at most {MEMBERS_MAX} members"));
        }
        Ok(())
    }
}

/// A message from a peer, authenticated and decoded.
#[derive(Debug)]
pub struct Inbound {
    pub from: u64,
    pub day_epoch_unix_ns: u64,
    /// ITCH messages the sender had multicast when it sent this (its feed's last sequence
    /// number handed to the socket; 0 if it never led).
    pub itch_sent: u64,
    pub message: Message,
}

/// Counters the loop may log.
#[derive(Debug, Default)]
pub struct TransportStats {
    pub dropped_outbound: AtomicUsize,
    pub rejected_connections: AtomicUsize,
    /// Inbound connections closed for silence.
    pub closed_idle: AtomicUsize,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Our connection to a member: frames wait in `buffer` from `written` on.
struct Outbound {
    stream: TcpStream,
    buffer: Vec<u8>,
    written: usize,
    /// Where each frame not wholly written ends in `buffer` (oldest first): how many
    /// messages wait, exactly.
    frame_ends: VecDeque<usize>,
    /// When bytes last went out (or the connection was made): a keepalive follows silence.
    last_write: Instant,
    /// When a flush first found bytes waiting since all were last written: a stall is
    /// counted from this or the last write, whichever is later (a link quiet for longer than
    /// the stall timeout is not stalled by its next message).
    waiting_since: Option<Instant>,
}

impl Outbound {
    /// Bytes have waited without any going out for `stall_after`: the member stopped reading.
    fn stalled(&mut self, now: Instant, stall_after: Duration) -> bool {
        if self.written == self.buffer.len() {
            self.waiting_since = None;
            return false;
        }
        let since = *self.waiting_since.get_or_insert(now);
        now.duration_since(since.max(self.last_write)) >= stall_after
    }
}

/// A member's connection to us.
struct InboundConn {
    stream: TcpStream,
    address: SocketAddr,
    buffer: BytesMut,
    /// The socket may have bytes: set by an event, cleared when a read would block.
    readable: bool,
    last_heard: Instant,
}

struct Peer {
    outbound: Option<Outbound>,
    inbound: Option<InboundConn>,
    /// Tells the peer's connector that our connection was lost (connect again).
    lost: Option<Sender<()>>,
}

pub struct Transport {
    local: SocketAddr,
    config: Arc<TransportConfig>,
    poll: Poll,
    events: Events,
    handoffs: Receiver<Handoff>,
    /// Index = member id - 1 (this member's own entry stays empty).
    peers: Vec<Peer>,
    /// Decoded messages not taken yet (at most `inbound_messages_max`).
    received: VecDeque<Inbound>,
    /// What every outgoing frame announces as this member's multicast ITCH messages.
    itch_sent: u64,
    outbound_bytes_max: usize,
    /// Where reads land before they join a connection's frame buffer.
    scratch: Box<[u8]>,
    /// The most ITCH messages any member's keepalive said it multicast (messages carry
    /// theirs in [`Inbound::itch_sent`]).
    keepalive_itch_sent: u64,
    last_idle_check: Instant,
    stats: Arc<TransportStats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn outbound_token(peer_index: usize) -> Token {
    Token(2 * peer_index)
}

fn inbound_token(peer_index: usize) -> Token {
    Token(2 * peer_index + 1)
}

impl Transport {
    /// Start serving on `listener` (bound to this member's address) and connecting out.
    pub fn spawn(listener: TcpListener, config: TransportConfig) -> io::Result<Transport> {
        config.validate().map_err(io::Error::other)?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let config = Arc::new(config);
        let poll = Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER_TOKEN)?);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TransportStats::default());
        let members = config.members.len();
        // Each helper hands over at most one connection before the loop takes it.
        let (queue, handoffs) = channel::bounded(2 * members + 8);
        let handoff = HandoffSender { queue, waker };
        let mut threads = Vec::with_capacity(members + 1);
        let accept = Acceptor {
            listener,
            config: config.clone(),
            stop: stop.clone(),
            stats: stats.clone(),
            handoff: handoff.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name("cluster-accept".into())
                .spawn(move || accept.run())?,
        );
        let mut peers = Vec::with_capacity(members);
        for peer in 1..=members as u64 {
            if peer == config.id {
                peers.push(Peer {
                    outbound: None,
                    inbound: None,
                    lost: None,
                });
                continue;
            }
            let (lost, lost_rx) = channel::bounded(1);
            let connector = Connector {
                peer,
                config: config.clone(),
                stop: stop.clone(),
                lost: lost_rx,
                handoff: handoff.clone(),
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cluster-to-{peer}"))
                    .spawn(move || connector.run())?,
            );
            peers.push(Peer {
                outbound: None,
                inbound: None,
                lost: Some(lost),
            });
        }
        let inbound_messages_max = config.inbound_messages_max;
        Ok(Transport {
            local,
            outbound_bytes_max: outbound_bytes_max(config.frame_bytes_max),
            config,
            poll,
            events: Events::with_capacity(EVENTS_MAX),
            handoffs,
            peers,
            received: VecDeque::with_capacity(inbound_messages_max),
            itch_sent: 0,
            scratch: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            keepalive_itch_sent: 0,
            last_idle_check: Instant::now(),
            stats,
            stop,
            threads,
        })
    }

    /// This member has multicast ITCH messages through `sent`: every frame from now on says so
    /// (never less than before).
    pub fn announce_itch_sent(&mut self, sent: u64) {
        self.itch_sent = self.itch_sent.max(sent);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }

    /// Queue a message to `message.to` with this member's day epoch; [`Self::flush`] writes
    /// it. Never blocks: no connection, a full buffer or an unknown destination drops it (raft
    /// retransmits); returns whether it was queued.
    pub fn send(&mut self, message: Message, day_epoch_unix_ns: u64) -> bool {
        let index = (message.to as usize).wrapping_sub(1);
        let frame_bytes_max = self.config.frame_bytes_max as usize;
        let (messages_max, bytes_max) =
            (self.config.outbound_messages_max, self.outbound_bytes_max);
        let Some(outbound) = self.peers.get_mut(index).and_then(|p| p.outbound.as_mut()) else {
            self.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        // Heartbeats, votes and answers are small and what keeps a leader a leader: only
        // appends (which raft sends again) count against the message bound.
        let is_append = message.get_msg_type() == raft::eraftpb::MessageType::MsgAppend;
        let full = outbound.frame_ends.len() >= messages_max;
        let hard_full = outbound.frame_ends.len() >= messages_max + CONTROL_FRAMES_EXTRA;
        if (is_append && full) || hard_full || outbound.buffer.len() - outbound.written >= bytes_max
        {
            self.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let start = outbound.buffer.len();
        if let Err(error) = append_frame(
            &message,
            day_epoch_unix_ns,
            self.itch_sent,
            &mut outbound.buffer,
        ) {
            tracing::error!(peer = message.to, "cluster: message not sent: {error}");
            return false;
        }
        if outbound.buffer.len() - start - 4 > frame_bytes_max {
            outbound.buffer.truncate(start);
            tracing::error!(
                peer = message.to,
                "cluster: message larger than frame_bytes_max dropped"
            );
            return false;
        }
        outbound.frame_ends.push_back(outbound.buffer.len());
        true
    }

    /// Write what [`Self::send`] queued, as far as the sockets take it now (the rest goes when
    /// they are writable again, at a later [`Self::try_recv`] or flush).
    ///
    /// A connection that carried nothing for a third of `idle_timeout_ms` gets a keepalive
    /// (a frame without a message): raft only talks leader to follower, and a follower's link
    /// to another follower would otherwise be closed for silence, logged, and made again,
    /// every `idle_timeout_ms`.
    pub fn flush(&mut self) {
        let now = Instant::now();
        let keepalive_after = Duration::from_millis((self.config.idle_timeout_ms / 3).max(1));
        let stall_after = Duration::from_millis(self.config.handshake_timeout_ms.max(1));
        for index in 0..self.peers.len() {
            // Bytes waiting and none taken for a handshake timeout: the member is gone or
            // stopped. Drop the connection and what waits (stale by the time it could be
            // read) and connect again, rather than wait for TCP to give up.
            let stalled = self.peers[index]
                .outbound
                .as_mut()
                .is_some_and(|o| o.stalled(now, stall_after));
            if stalled {
                self.drop_outbound(index, "the member stopped reading");
                continue;
            }
            if let Some(outbound) = self.peers[index].outbound.as_mut()
                && outbound.written == outbound.buffer.len()
                && now.duration_since(outbound.last_write) >= keepalive_after
            {
                append_keepalive(self.itch_sent, &mut outbound.buffer);
                outbound.frame_ends.push_back(outbound.buffer.len());
            }
            self.write_out(index, now);
        }
    }

    /// The loop's turn: if the transport's descriptor had an event (`signalled`) or a
    /// connection was left with unread bytes, do the I/O it asks for (take handed-over
    /// connections, read whole frames, write what waited for a writable socket). Then take
    /// the messages with [`Self::take`]. Without a signal nothing can have changed: every
    /// member connection's event raises the descriptor (edge-triggered), so a quiet turn costs
    /// no system call.
    pub fn turn(&mut self, signalled: bool) {
        if signalled || self.unread() {
            self.pump(Some(Duration::ZERO));
        }
    }

    /// The most ITCH messages a member's keepalive said it multicast.
    pub fn keepalive_itch_sent(&self) -> u64 {
        self.keepalive_itch_sent
    }

    /// The next message read by a turn, if any.
    pub fn take(&mut self) -> Option<Inbound> {
        self.received.pop_front()
    }

    /// Messages or bytes are waiting (the loop should not sleep).
    pub fn pending(&self) -> bool {
        !self.received.is_empty() || self.unread()
    }

    fn unread(&self) -> bool {
        self.peers
            .iter()
            .any(|p| p.inbound.as_ref().is_some_and(|i| i.readable))
    }

    /// The next message received, if any: a turn when none is waiting (tests and tools).
    pub fn try_recv(&mut self) -> Option<Inbound> {
        if self.received.is_empty() {
            self.pump(Some(Duration::ZERO));
        }
        self.received.pop_front()
    }

    /// Wait up to `timeout` for a message (tests and tools; the daemon polls).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Inbound> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(inbound) = self.try_recv() {
                return Some(inbound);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.pump(Some(left));
        }
    }

    /// One pass of I/O: wait up to `timeout` for events, take handed-over connections, read
    /// the readable inbound connections into `received`, write pending outbound bytes.
    fn pump(&mut self, timeout: Option<Duration>) {
        if let Err(error) = self.poll.poll(&mut self.events, timeout)
            && error.kind() != io::ErrorKind::Interrupted
        {
            tracing::error!("cluster: transport poll failed: {error}");
            return;
        }
        // Per member (ids ≤ MEMBERS_MAX): which connections had which events.
        let (mut readable, mut writable, mut closed) = (0u64, 0u64, 0u64);
        for event in self.events.iter() {
            let token = event.token();
            if token == WAKER_TOKEN || token.0 / 2 >= self.peers.len() {
                continue;
            }
            let bit = 1u64 << (token.0 / 2);
            if token.0 % 2 == 1 {
                readable |= bit;
            } else if event.is_read_closed() || event.is_error() {
                closed |= bit;
            } else {
                writable |= bit;
            }
        }
        for index in 0..self.peers.len() {
            let bit = 1u64 << index;
            if closed & bit != 0 {
                self.drop_outbound(index, "closed by the member");
            }
            if readable & bit != 0
                && let Some(inbound) = self.peers[index].inbound.as_mut()
            {
                inbound.readable = true;
            }
        }
        self.take_handoffs();
        // One clock read for the pass: when bytes came in or went out, and the idle check.
        let now = Instant::now();
        for index in 0..self.peers.len() {
            self.read_in(index, now);
            if writable & (1 << index) != 0 {
                self.write_out(index, now);
            }
        }
        self.close_idle(now);
    }

    fn take_handoffs(&mut self) {
        while let Ok(handoff) = self.handoffs.try_recv() {
            match handoff {
                Handoff::Outbound { peer, stream } => self.install_outbound(peer, stream),
                Handoff::Inbound {
                    peer,
                    stream,
                    address,
                } => self.install_inbound(peer, stream, address),
            }
        }
    }

    fn install_outbound(&mut self, peer: u64, stream: std::net::TcpStream) {
        let index = peer as usize - 1;
        let messages_max = self.config.outbound_messages_max;
        let registered = stream.set_nonblocking(true).and_then(|()| {
            let mut stream = TcpStream::from_std(stream);
            self.poll
                .registry()
                .register(
                    &mut stream,
                    outbound_token(index),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map(|()| stream)
        });
        match registered {
            Ok(stream) => {
                self.drop_outbound(index, "replaced");
                self.peers[index].outbound = Some(Outbound {
                    stream,
                    buffer: Vec::with_capacity(READ_BUFFER_BYTES),
                    written: 0,
                    frame_ends: VecDeque::with_capacity(messages_max + CONTROL_FRAMES_EXTRA),
                    last_write: Instant::now(),
                    waiting_since: None,
                });
            }
            Err(error) => {
                tracing::warn!(
                    peer,
                    "cluster: cannot use the connection to member: {error}"
                );
                self.report_lost(index);
            }
        }
    }

    fn install_inbound(&mut self, peer: u64, stream: std::net::TcpStream, address: SocketAddr) {
        let index = peer as usize - 1;
        let registered = stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| {
                let mut stream = TcpStream::from_std(stream);
                self.poll
                    .registry()
                    .register(&mut stream, inbound_token(index), Interest::READABLE)
                    .map(|()| stream)
            });
        match registered {
            Ok(stream) => {
                if let Some(old) = self.peers[index].inbound.take() {
                    self.close_inbound(old, peer, "replaced by a new connection");
                }
                self.peers[index].inbound = Some(InboundConn {
                    stream,
                    address,
                    buffer: BytesMut::with_capacity(READ_BUFFER_BYTES),
                    // Bytes may have arrived before registration: read at once.
                    readable: true,
                    last_heard: Instant::now(),
                });
            }
            Err(error) => {
                tracing::warn!(peer, %address, "cluster: cannot use the connection from member: {error}");
            }
        }
    }

    /// Write the peer's pending bytes until done or the socket is full.
    fn write_out(&mut self, index: usize, now: Instant) {
        let Some(outbound) = self.peers[index].outbound.as_mut() else {
            return;
        };
        let mut failure = None;
        while outbound.written < outbound.buffer.len() {
            match outbound.stream.write(&outbound.buffer[outbound.written..]) {
                Ok(0) => {
                    failure = Some("wrote nothing".to_string());
                    break;
                }
                Ok(n) => {
                    outbound.written += n;
                    outbound.last_write = now;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        while outbound
            .frame_ends
            .front()
            .is_some_and(|&end| end <= outbound.written)
        {
            outbound.frame_ends.pop_front();
        }
        if outbound.written == outbound.buffer.len() {
            outbound.buffer.clear();
            outbound.written = 0;
            outbound.waiting_since = None;
        } else if outbound.written > outbound.buffer.len() / 2 {
            // Keep the buffer from growing: move the unwritten tail to the front.
            let written = outbound.written;
            outbound.buffer.drain(..written);
            outbound
                .frame_ends
                .iter_mut()
                .for_each(|end| *end -= written);
            outbound.written = 0;
        }
        if let Some(why) = failure {
            self.drop_outbound(index, &why);
        }
    }

    /// Forget our connection to member `index + 1` (and what waited for it: it is stale by
    /// the time a new connection exists), and have its connector connect again.
    fn drop_outbound(&mut self, index: usize, why: &str) {
        let Some(mut outbound) = self.peers[index].outbound.take() else {
            return;
        };
        let replaced = why == "replaced";
        if !replaced {
            tracing::warn!(
                peer = index + 1,
                "cluster: connection to member lost: {why}"
            );
        }
        let _ = self.poll.registry().deregister(&mut outbound.stream);
        let _ = outbound.stream.shutdown(Shutdown::Both);
        // A replaced connection's successor is already here: no new one is wanted.
        if !replaced {
            self.report_lost(index);
        }
    }

    fn report_lost(&self, index: usize) {
        if let Some(lost) = &self.peers[index].lost {
            let _ = lost.try_send(());
        }
    }

    /// Read whole frames from member `index + 1`'s connection into `received` while there is
    /// room, until a read would block. A bad frame or a failed read closes the connection.
    fn read_in(&mut self, index: usize, now: Instant) {
        let peer = index as u64 + 1;
        let Some(inbound) = self.peers[index].inbound.as_mut() else {
            return;
        };
        let frame_bytes_max = self.config.frame_bytes_max;
        let room = self.config.inbound_messages_max;
        let outcome = read_frames(
            inbound,
            &mut self.scratch,
            &mut self.keepalive_itch_sent,
            peer,
            frame_bytes_max,
            room,
            &mut self.received,
        );
        match outcome {
            Ok(true) => inbound.last_heard = now,
            Ok(false) => {}
            Err(why) => {
                let inbound = self.peers[index].inbound.take().expect("present");
                self.close_inbound(inbound, peer, &why.to_string());
            }
        }
    }

    fn close_inbound(&mut self, mut inbound: InboundConn, peer: u64, why: &str) {
        tracing::warn!(%inbound.address, peer, "cluster: connection from member closed: {why}");
        let _ = self.poll.registry().deregister(&mut inbound.stream);
        let _ = inbound.stream.shutdown(Shutdown::Both);
    }

    /// Close inbound connections silent for `idle_timeout_ms` (a live member sends heartbeats).
    fn close_idle(&mut self, now: Instant) {
        if now.duration_since(self.last_idle_check) < IDLE_CHECK_INTERVAL {
            return;
        }
        self.last_idle_check = now;
        let idle = Duration::from_millis(self.config.idle_timeout_ms.max(1));
        for index in 0..self.peers.len() {
            let silent = self.peers[index]
                .inbound
                .as_ref()
                .is_some_and(|i| now.duration_since(i.last_heard) > idle);
            if silent {
                let inbound = self.peers[index].inbound.take().expect("present");
                self.stats.closed_idle.fetch_add(1, Ordering::Relaxed);
                self.close_inbound(inbound, index as u64 + 1, "silent for too long");
            }
        }
    }
}

/// The loop over one inbound connection's bytes: frames out of the buffer first, a read when
/// none is whole, until the socket would block or `received` holds `room` messages. Returns
/// whether any bytes arrived.
fn read_frames(
    inbound: &mut InboundConn,
    scratch: &mut [u8],
    keepalive_itch_sent: &mut u64,
    from: u64,
    frame_bytes_max: u32,
    room: usize,
    received: &mut VecDeque<Inbound>,
) -> io::Result<bool> {
    // Each pass decodes a frame or reads; a read that brings nothing ends it.
    let passes_max = room.saturating_mul(2) + 64;
    let mut heard = false;
    for _ in 0..passes_max {
        if received.len() >= room {
            return Ok(heard);
        }
        if let Some(len) = next_frame(&mut inbound.buffer, frame_bytes_max)? {
            let frame = inbound.buffer.split_to(4 + len).freeze().slice(4..);
            if frame.len() > FRAME_HEADER_BYTES - 4 {
                received.push_back(decode_frame(&frame, from)?);
            } else {
                // A keepalive: the read counted as heard; it says how far the sender's feed got.
                let sent = u64::from_be_bytes(frame[8..16].try_into().expect("16-byte header"));
                *keepalive_itch_sent = (*keepalive_itch_sent).max(sent);
            }
            continue;
        }
        if !inbound.readable {
            return Ok(heard);
        }
        // Into a scratch buffer and then copied: the frame buffer is never zeroed ahead.
        let got = match inbound.stream.read(scratch) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                inbound.readable = false;
                0
            }
            Err(e) => return Err(e),
        };
        inbound.buffer.extend_from_slice(&scratch[..got]);
        if got == 0 && inbound.readable {
            return Err(invalid("the member closed the connection"));
        }
        heard |= got > 0;
    }
    Ok(heard)
}

/// Append a keepalive: a frame header (day epoch 0: no message to judge) and no message.
fn append_keepalive(itch_sent: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&((FRAME_HEADER_BYTES - 4) as u32).to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes());
    out.extend_from_slice(&itch_sent.to_be_bytes());
}

/// Length of the next whole frame at the front of `buffer` (after its length word).
fn next_frame(buffer: &mut BytesMut, frame_bytes_max: u32) -> io::Result<Option<usize>> {
    if buffer.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buffer[0..4].try_into().expect("4"));
    if len > frame_bytes_max || (len as usize) < FRAME_HEADER_BYTES - 4 {
        return Err(invalid("frame length out of range"));
    }
    let len = len as usize;
    if buffer.len() < 4 + len {
        buffer.reserve(4 + len - buffer.len());
        return Ok(None);
    }
    Ok(Some(len))
}

impl AsRawFd for Transport {
    /// The transport's poll: readable when a member connection (or a new one) has an event.
    fn as_raw_fd(&self) -> RawFd {
        self.poll.as_raw_fd()
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for peer in &mut self.peers {
            peer.lost = None;
        }
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("cluster transport thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests;
