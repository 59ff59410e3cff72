//! Authenticated TCP between cluster members, off the daemon loop's thread.
//!
//! Each member listens on its `members` address and keeps one outbound connection to every
//! other member: messages to a member travel on our outbound connection, messages from it
//! arrive on its outbound connection (our inbound one). Threads: one acceptor, one reader per
//! inbound connection, one writer per peer; the loop only touches two bounded queues
//! ([`Transport::send`], [`Transport::try_recv`]) and is woken when a message arrives.
//!
//! **Handshake** (every connection, both directions authenticated with the shared secret,
//! HMAC-SHA256, fresh 32-byte nonces from the kernel):
//!
//! | step | bytes |
//! |---|---|
//! | client → server | `BRSC`, version u16, client id u64, server id u64, client nonce [32] |
//! | server → client | `BRSS`, server nonce [32], HMAC(secret, `bourse-cluster server` · client nonce · server nonce · client id · server id) |
//! | client → server | HMAC(secret, `bourse-cluster client` · server nonce · client nonce · client id · server id) |
//!
//! (integers big-endian). The client sends nothing after its hello until the server proved
//! it knows the secret, and the server reads no frame until the client did: an unauthenticated
//! peer gets nothing but a nonce and a MAC over nonces (not a byte of journal), and what it
//! sends is never stepped. The MACs are compared in constant time. Connections are not
//! encrypted and frames are not individually MACed: this keeps impostors out, not an
//! attacker on the path (that needs TLS).
//!
//! **Frames** after the handshake: length u32 (of what follows), the sender's journal day
//! epoch u64, the ITCH messages the sender has multicast u64 (how a new leader knows where the
//! feed may continue, [`Transport::announce_itch_sent`]), then a raft-rs `Message` in its
//! protobuf encoding. A length over
//! `frame_bytes_max`, a message that does not decode, carries a snapshot or a protobuf group
//! (members never send either; the walk refuses them before the decoder runs), or claims
//! another sender closes the connection with one log line. Entry payloads are not copied on receipt: the frame buffer is
//! shared by the decoded entries (`Bytes`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use hmac::{Hmac, KeyInit, Mac};
use protobuf::Message as _;
use raft::eraftpb::Message;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const VERSION: u16 = 2;
const CLIENT_MAGIC: &[u8; 4] = b"BRSC";
const SERVER_MAGIC: &[u8; 4] = b"BRSS";
const NONCE_BYTES: usize = 32;
const MAC_BYTES: usize = 32;
const HELLO_BYTES: usize = 4 + 2 + 8 + 8 + NONCE_BYTES;
const CHALLENGE_BYTES: usize = 4 + NONCE_BYTES + MAC_BYTES;
const FRAME_HEADER_BYTES: usize = 4 + 8 + 8;
/// Shortest secret accepted (bytes).
pub const SECRET_BYTES_MIN: usize = 16;
/// Connections being accepted but not authenticated yet, beyond one per member.
const PENDING_CONNECTIONS_MAX: usize = 8;
/// How often blocked threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A waker the transport calls when a message arrived (the daemon's poll waker). It is called
/// once per drain, not per message: after the first message that arrives once
/// [`Transport::try_recv`] found the queue empty (a busy loop is not woken thousands of times a
/// second for messages it drains anyway).
pub type Wake = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone)]
pub struct TransportConfig {
    /// This member's id (1-based position in `members`).
    pub id: u64,
    /// Every member's cluster address, this one's included.
    pub members: Vec<SocketAddr>,
    pub secret: Vec<u8>,
    /// Largest frame accepted or sent (bytes after the length word).
    pub frame_bytes_max: u32,
    /// Messages queued to one peer; past it new ones are dropped (raft resends).
    pub outbound_messages_max: usize,
    /// Messages received and not taken yet; past it new ones are dropped.
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
    pub dropped_inbound: AtomicUsize,
    pub rejected_connections: AtomicUsize,
}

pub struct Transport {
    local: SocketAddr,
    outbound: Vec<Option<Sender<(Message, u64)>>>,
    inbound: Receiver<Inbound>,
    stats: Arc<TransportStats>,
    stop: Arc<AtomicBool>,
    /// What every outgoing frame announces as this member's multicast ITCH messages.
    itch_sent: Arc<AtomicU64>,
    /// A wake is owed or done since the loop last found the queue empty.
    wake_pending: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Transport {
    /// Start serving on `listener` (bound to this member's address) and connecting out.
    pub fn spawn(
        listener: TcpListener,
        config: TransportConfig,
        wake: Option<Wake>,
    ) -> io::Result<Transport> {
        config.validate().map_err(io::Error::other)?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let config = Arc::new(config);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TransportStats::default());
        let itch_sent = Arc::new(AtomicU64::new(0));
        let wake_pending = Arc::new(AtomicBool::new(false));
        let (inbound_tx, inbound_rx) = channel::bounded(config.inbound_messages_max);
        let mut threads = Vec::new();
        let accept = Acceptor {
            listener,
            config: config.clone(),
            stop: stop.clone(),
            stats: stats.clone(),
            inbound: inbound_tx,
            wake,
            wake_pending: wake_pending.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name("cluster-accept".into())
                .spawn(move || accept.run())?,
        );
        let mut outbound = Vec::with_capacity(config.members.len());
        for peer in 1..=config.members.len() as u64 {
            if peer == config.id {
                outbound.push(None);
                continue;
            }
            let (tx, rx) = channel::bounded(config.outbound_messages_max);
            let writer = Writer {
                peer,
                config: config.clone(),
                stop: stop.clone(),
                itch_sent: itch_sent.clone(),
                queue: rx,
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cluster-to-{peer}"))
                    .spawn(move || writer.run())?,
            );
            outbound.push(Some(tx));
        }
        Ok(Transport {
            local,
            outbound,
            inbound: inbound_rx,
            stats,
            stop,
            itch_sent,
            wake_pending,
            threads,
        })
    }

    /// This member has multicast ITCH messages through `sent`: every frame from now on says so
    /// (never less than before).
    pub fn announce_itch_sent(&self, sent: u64) {
        self.itch_sent.fetch_max(sent, Ordering::Relaxed);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }

    /// Queue a message to `message.to` with this member's day epoch. Never blocks: a full queue
    /// or an unknown destination drops it (raft retransmits); returns whether it was queued.
    pub fn send(&self, message: Message, day_epoch_unix_ns: u64) -> bool {
        let Some(Some(queue)) = self.outbound.get((message.to as usize).wrapping_sub(1)) else {
            return false;
        };
        match queue.try_send((message, day_epoch_unix_ns)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The next message received, if any. Finding none re-arms the waker: the next message
    /// to arrive wakes the loop (drain until `None`, or poll again without sleeping).
    pub fn try_recv(&self) -> Option<Inbound> {
        if let Ok(inbound) = self.inbound.try_recv() {
            return Some(inbound);
        }
        self.wake_pending.store(false, Ordering::SeqCst);
        // One that arrived while re-arming may have seen the flag still set: take it now.
        self.inbound.try_recv().ok()
    }

    /// Wait up to `timeout` for a message (tests and tools; the daemon polls).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Inbound> {
        self.inbound.recv_timeout(timeout).ok()
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.outbound.clear();
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("cluster transport thread panicked");
            }
        }
    }
}

fn random_nonce() -> io::Result<[u8; NONCE_BYTES]> {
    let mut nonce = [0u8; NONCE_BYTES];
    let mut filled = 0;
    for _ in 0..16 {
        // SAFETY: writes at most the remaining bytes of our buffer.
        let got = unsafe {
            libc::getrandom(nonce[filled..].as_mut_ptr().cast(), NONCE_BYTES - filled, 0)
        };
        if got < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        filled += got as usize;
        if filled == NONCE_BYTES {
            return Ok(nonce);
        }
    }
    Err(io::Error::other("getrandom returned too little"))
}

fn handshake_mac(
    secret: &[u8],
    label: &[u8],
    first_nonce: &[u8; NONCE_BYTES],
    second_nonce: &[u8; NONCE_BYTES],
    client_id: u64,
    server_id: u64,
) -> HmacSha256 {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(label);
    mac.update(first_nonce);
    mac.update(second_nonce);
    mac.update(&client_id.to_be_bytes());
    mac.update(&server_id.to_be_bytes());
    mac
}

const SERVER_LABEL: &[u8] = b"bourse-cluster server";
const CLIENT_LABEL: &[u8] = b"bourse-cluster client";

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Client side: prove the server knows the secret, then prove we do.
fn client_handshake(
    stream: &mut TcpStream,
    secret: &[u8],
    client_id: u64,
    server_id: u64,
) -> io::Result<()> {
    let client_nonce = random_nonce()?;
    let mut hello = [0u8; HELLO_BYTES];
    hello[0..4].copy_from_slice(CLIENT_MAGIC);
    hello[4..6].copy_from_slice(&VERSION.to_be_bytes());
    hello[6..14].copy_from_slice(&client_id.to_be_bytes());
    hello[14..22].copy_from_slice(&server_id.to_be_bytes());
    hello[22..].copy_from_slice(&client_nonce);
    stream.write_all(&hello)?;
    let mut challenge = [0u8; CHALLENGE_BYTES];
    stream.read_exact(&mut challenge)?;
    if &challenge[0..4] != SERVER_MAGIC {
        return Err(invalid("not a cluster member's answer"));
    }
    let server_nonce: [u8; NONCE_BYTES] = challenge[4..4 + NONCE_BYTES].try_into().expect("32");
    let server_mac = &challenge[4 + NONCE_BYTES..];
    handshake_mac(
        secret,
        SERVER_LABEL,
        &client_nonce,
        &server_nonce,
        client_id,
        server_id,
    )
    .verify_slice(server_mac)
    .map_err(|_| invalid("the server does not know the cluster secret"))?;
    let proof = handshake_mac(
        secret,
        CLIENT_LABEL,
        &server_nonce,
        &client_nonce,
        client_id,
        server_id,
    )
    .finalize()
    .into_bytes();
    stream.write_all(&proof)
}

/// Server side: answer the challenge, check the client's proof. Returns the client's id.
fn server_handshake(stream: &mut TcpStream, config: &TransportConfig) -> io::Result<u64> {
    let mut hello = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello)?;
    if &hello[0..4] != CLIENT_MAGIC {
        return Err(invalid("not a cluster hello"));
    }
    let version = u16::from_be_bytes([hello[4], hello[5]]);
    if version != VERSION {
        return Err(invalid("another cluster protocol version"));
    }
    let client_id = u64::from_be_bytes(hello[6..14].try_into().expect("8"));
    let server_id = u64::from_be_bytes(hello[14..22].try_into().expect("8"));
    let members = config.members.len() as u64;
    if server_id != config.id || client_id == 0 || client_id > members || client_id == config.id {
        return Err(invalid(
            "hello names members that do not match this cluster",
        ));
    }
    let client_nonce: [u8; NONCE_BYTES] = hello[22..].try_into().expect("32");
    let server_nonce = random_nonce()?;
    let mac = handshake_mac(
        &config.secret,
        SERVER_LABEL,
        &client_nonce,
        &server_nonce,
        client_id,
        server_id,
    )
    .finalize()
    .into_bytes();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    challenge[0..4].copy_from_slice(SERVER_MAGIC);
    challenge[4..4 + NONCE_BYTES].copy_from_slice(&server_nonce);
    challenge[4 + NONCE_BYTES..].copy_from_slice(&mac);
    stream.write_all(&challenge)?;
    let mut proof = [0u8; MAC_BYTES];
    stream.read_exact(&mut proof)?;
    handshake_mac(
        &config.secret,
        CLIENT_LABEL,
        &server_nonce,
        &client_nonce,
        client_id,
        server_id,
    )
    .verify_slice(&proof)
    .map_err(|_| invalid("the client does not know the cluster secret"))?;
    Ok(client_id)
}

struct Acceptor {
    listener: TcpListener,
    config: Arc<TransportConfig>,
    stop: Arc<AtomicBool>,
    stats: Arc<TransportStats>,
    inbound: Sender<Inbound>,
    wake: Option<Wake>,
    wake_pending: Arc<AtomicBool>,
}

impl Acceptor {
    fn run(self) {
        let open = Arc::new(AtomicUsize::new(0));
        let open_max = self.config.members.len() + PENDING_CONNECTIONS_MAX;
        let mut readers: Vec<JoinHandle<()>> = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            readers.retain(|r| !r.is_finished());
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => {
                    tracing::warn!("cluster: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if open.load(Ordering::Relaxed) >= open_max {
                self.stats
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, "cluster: connection refused, {open_max} already open");
                continue;
            }
            open.fetch_add(1, Ordering::Relaxed);
            let reader = Reader {
                config: self.config.clone(),
                stop: self.stop.clone(),
                stats: self.stats.clone(),
                inbound: self.inbound.clone(),
                wake: self.wake.clone(),
                wake_pending: self.wake_pending.clone(),
            };
            let open = open.clone();
            let spawned = std::thread::Builder::new()
                .name("cluster-from".into())
                .spawn(move || {
                    reader.run(stream, peer);
                    open.fetch_sub(1, Ordering::Relaxed);
                });
            match spawned {
                Ok(handle) => readers.push(handle),
                Err(e) => tracing::warn!("cluster: cannot start a reader thread: {e}"),
            }
        }
        for reader in readers {
            let _ = reader.join();
        }
    }
}

struct Reader {
    config: Arc<TransportConfig>,
    stop: Arc<AtomicBool>,
    stats: Arc<TransportStats>,
    inbound: Sender<Inbound>,
    wake: Option<Wake>,
    wake_pending: Arc<AtomicBool>,
}

impl Reader {
    fn run(self, mut stream: TcpStream, peer: SocketAddr) {
        let handshake = Duration::from_millis(self.config.handshake_timeout_ms.max(1));
        let from = match stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(handshake)))
            .and_then(|()| stream.set_write_timeout(Some(handshake)))
            .and_then(|()| server_handshake(&mut stream, &self.config))
        {
            Ok(from) => from,
            Err(error) => {
                self.stats
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, "cluster: connection refused: {error}");
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        };
        tracing::info!(%peer, from, "cluster: member connected");
        if let Err(error) = self.frames(&mut stream, from) {
            tracing::warn!(%peer, from, "cluster: connection from member closed: {error}");
        }
        let _ = stream.shutdown(Shutdown::Both);
    }

    fn frames(&self, stream: &mut TcpStream, from: u64) -> io::Result<()> {
        stream.set_read_timeout(Some(STOP_POLL))?;
        stream.set_nodelay(true)?;
        let idle = Duration::from_millis(self.config.idle_timeout_ms.max(1));
        let mut buffer = BytesMut::with_capacity(64 << 10);
        let mut last_heard = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let frame_bytes = match self.next_frame(&mut buffer)? {
                Some(len) => len,
                None => {
                    match read_more(stream, &mut buffer)? {
                        ReadMore::Data => last_heard = Instant::now(),
                        ReadMore::Closed => return Ok(()),
                        ReadMore::Timeout if last_heard.elapsed() > idle => {
                            return Err(invalid("silent for too long"));
                        }
                        ReadMore::Timeout => {}
                    }
                    continue;
                }
            };
            let frame = buffer.split_to(4 + frame_bytes).freeze().slice(4..);
            let inbound = decode_frame(&frame, from)?;
            match self.inbound.try_send(inbound) {
                Ok(()) => {
                    if let Some(wake) = &self.wake
                        && !self.wake_pending.swap(true, Ordering::SeqCst)
                    {
                        wake();
                    }
                }
                Err(_) => {
                    self.stats.dropped_inbound.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Length of the next whole frame at the front of `buffer` (after its length word).
    fn next_frame(&self, buffer: &mut BytesMut) -> io::Result<Option<usize>> {
        if buffer.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(buffer[0..4].try_into().expect("4"));
        if len > self.config.frame_bytes_max || (len as usize) < FRAME_HEADER_BYTES - 4 {
            return Err(invalid("frame length out of range"));
        }
        let len = len as usize;
        if buffer.len() < 4 + len {
            buffer.reserve(4 + len - buffer.len());
            return Ok(None);
        }
        Ok(Some(len))
    }
}

enum ReadMore {
    Data,
    Closed,
    Timeout,
}

fn read_more(stream: &mut TcpStream, buffer: &mut BytesMut) -> io::Result<ReadMore> {
    if buffer.capacity() - buffer.len() < 16 << 10 {
        buffer.reserve(64 << 10);
    }
    let start = buffer.len();
    let spare = buffer.capacity() - start;
    buffer.resize(start + spare, 0);
    let read = stream.read(&mut buffer[start..]);
    match read {
        Ok(0) => {
            buffer.truncate(start);
            Ok(ReadMore::Closed)
        }
        Ok(n) => {
            buffer.truncate(start + n);
            Ok(ReadMore::Data)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            buffer.truncate(start);
            Ok(ReadMore::Timeout)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            buffer.truncate(start);
            Ok(ReadMore::Timeout)
        }
        Err(e) => {
            buffer.truncate(start);
            Err(e)
        }
    }
}

/// Decode one frame (after its length word) from member `from`.
pub fn decode_frame(frame: &Bytes, from: u64) -> io::Result<Inbound> {
    if frame.len() < FRAME_HEADER_BYTES - 4 {
        return Err(invalid("frame shorter than its header"));
    }
    let day_epoch_unix_ns = u64::from_be_bytes(frame[0..8].try_into().expect("8"));
    let itch_sent = u64::from_be_bytes(frame[8..16].try_into().expect("8"));
    let body = frame.slice(16..);
    check_wire(&body)?;
    let message = Message::parse_from_carllerche_bytes(&body)
        .map_err(|e| invalid(&format!("undecodable message: {e}")))?;
    if message.from != from {
        return Err(invalid("message claims another sender"));
    }
    Ok(Inbound {
        from,
        day_epoch_unix_ns,
        itch_sent,
        message,
    })
}

/// Encode one frame (length word included) into `out`.
pub fn encode_frame(
    message: &Message,
    day_epoch_unix_ns: u64,
    itch_sent: u64,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    out.clear();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    out[4..12].copy_from_slice(&day_epoch_unix_ns.to_be_bytes());
    out[12..20].copy_from_slice(&itch_sent.to_be_bytes());
    message
        .write_to_vec(out)
        .map_err(|e| invalid(&format!("cannot encode: {e}")))?;
    let len = u32::try_from(out.len() - 4).map_err(|_| invalid("message too large"))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Refuse what members never send before the decoder sees it: a snapshot (field 9) and
/// protobuf groups (wire types 3 and 4) in `Message` or its entries. A flat walk without
/// recursion or allocation.
fn check_wire(body: &[u8]) -> io::Result<()> {
    walk_fields(body, |field, wire_type, value| {
        if field == 9 {
            return Err(invalid("snapshots are not accepted"));
        }
        if field == 7 && wire_type == 2 {
            walk_fields(value, |_, _, _| Ok(()))?;
        }
        Ok(())
    })
}

/// Call `each(field, wire_type, value)` for every field; `value` is the bytes of a
/// length-delimited field (empty otherwise). Group wire types are an error.
fn walk_fields(
    mut bytes: &[u8],
    mut each: impl FnMut(u32, u8, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let bound = bytes.len() + 1;
    for _ in 0..bound {
        if bytes.is_empty() {
            return Ok(());
        }
        let key = read_varint(&mut bytes)?;
        let wire_type = (key & 7) as u8;
        let field = u32::try_from(key >> 3).map_err(|_| invalid("field number out of range"))?;
        let value: &[u8] = match wire_type {
            0 => {
                read_varint(&mut bytes)?;
                &[]
            }
            1 => take(&mut bytes, 8)?,
            5 => take(&mut bytes, 4)?,
            2 => {
                let len = read_varint(&mut bytes)?;
                let len = usize::try_from(len).map_err(|_| invalid("length out of range"))?;
                take(&mut bytes, len)?
            }
            _ => return Err(invalid("protobuf group or bad wire type")),
        };
        each(field, wire_type, value)?;
    }
    Err(invalid("field walk did not end"))
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> io::Result<&'a [u8]> {
    if bytes.len() < n {
        return Err(invalid("field runs past the message"));
    }
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    Ok(head)
}

fn read_varint(bytes: &mut &[u8]) -> io::Result<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err(invalid("truncated varint"));
        };
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(invalid("varint longer than 10 bytes"))
}

struct Writer {
    peer: u64,
    config: Arc<TransportConfig>,
    stop: Arc<AtomicBool>,
    itch_sent: Arc<AtomicU64>,
    queue: Receiver<(Message, u64)>,
}

impl Writer {
    fn run(self) {
        let address = self.config.members[self.peer as usize - 1];
        let mut pause = Duration::from_millis(20);
        let mut logged_down = false;
        let mut frame = Vec::with_capacity(64 << 10);
        while !self.stop.load(Ordering::Relaxed) {
            let mut stream = match self.connect(address) {
                Ok(stream) => stream,
                Err(error) => {
                    if !logged_down {
                        tracing::warn!(peer = self.peer, %address, "cluster: cannot reach member: {error}");
                        logged_down = true;
                    }
                    // Messages queued while the member is unreachable are stale: drop them.
                    while self.queue.try_recv().is_ok() {}
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                    continue;
                }
            };
            tracing::info!(peer = self.peer, %address, "cluster: connected to member");
            logged_down = false;
            pause = Duration::from_millis(20);
            if let Err(error) = self.pump(&mut stream, &mut frame) {
                tracing::warn!(peer = self.peer, %address, "cluster: connection to member lost: {error}");
            }
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn connect(&self, address: SocketAddr) -> io::Result<TcpStream> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms.max(1));
        let mut stream = TcpStream::connect_timeout(&address, timeout)?;
        let handshake = Duration::from_millis(self.config.handshake_timeout_ms.max(1));
        stream.set_read_timeout(Some(handshake))?;
        stream.set_write_timeout(Some(handshake))?;
        stream.set_nodelay(true)?;
        client_handshake(&mut stream, &self.config.secret, self.config.id, self.peer)?;
        Ok(stream)
    }

    /// Send queued messages until the connection fails or the transport stops.
    fn pump(&self, stream: &mut TcpStream, frame: &mut Vec<u8>) -> io::Result<()> {
        let mut output = io::BufWriter::with_capacity(256 << 10, stream.try_clone()?);
        while !self.stop.load(Ordering::Relaxed) {
            let (message, epoch) = match self.queue.recv_timeout(STOP_POLL) {
                Ok(queued) => queued,
                Err(channel::RecvTimeoutError::Timeout) => continue,
                Err(channel::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            self.write(&mut output, &message, epoch, frame)?;
            // Batch what is already queued into one flush.
            for _ in 0..self.config.outbound_messages_max {
                let Ok((message, epoch)) = self.queue.try_recv() else {
                    break;
                };
                self.write(&mut output, &message, epoch, frame)?;
            }
            output.flush()?;
        }
        Ok(())
    }

    fn write(
        &self,
        output: &mut impl Write,
        message: &Message,
        epoch: u64,
        frame: &mut Vec<u8>,
    ) -> io::Result<()> {
        // Read as the frame is written: the count only grows, and what it says was sent.
        let itch_sent = self.itch_sent.load(Ordering::Relaxed);
        encode_frame(message, epoch, itch_sent, frame)?;
        if frame.len() - 4 > self.config.frame_bytes_max as usize {
            tracing::error!(
                peer = self.peer,
                bytes = frame.len(),
                "cluster: message larger than frame_bytes_max dropped"
            );
            return Ok(());
        }
        output.write_all(frame)
    }
}

#[cfg(test)]
mod tests;
