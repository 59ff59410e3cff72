//! Making authenticated connections, off the loop's thread: the acceptor (with a short-lived
//! thread per handshake) and one connector per peer. Each hands a connection that passed the
//! handshake to the loop's [`super::Transport`] and wakes it; nothing after the handshake
//! happens here.
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

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{TransportConfig, TransportStats, VERSION, invalid};

type HmacSha256 = Hmac<Sha256>;

pub(super) const CLIENT_MAGIC: &[u8; 4] = b"BRSC";
pub(super) const SERVER_MAGIC: &[u8; 4] = b"BRSS";
pub(super) const NONCE_BYTES: usize = 32;
pub(super) const MAC_BYTES: usize = 32;
pub(super) const HELLO_BYTES: usize = 4 + 2 + 8 + 8 + NONCE_BYTES;
pub(super) const CHALLENGE_BYTES: usize = 4 + NONCE_BYTES + MAC_BYTES;
/// Connections being authenticated at once, beyond one per member.
const PENDING_CONNECTIONS_MAX: usize = 8;
/// How often blocked threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
const RECONNECT_PAUSE_MIN: Duration = Duration::from_millis(20);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// An authenticated connection for the loop.
pub(super) enum Handoff {
    /// Ours to member `peer`: we write frames on it.
    Outbound { peer: u64, stream: TcpStream },
    /// Member `peer`'s to us: we read its frames.
    Inbound {
        peer: u64,
        stream: TcpStream,
        address: SocketAddr,
    },
}

/// How a thread gives the loop a connection: queue it, then wake the loop's poll.
#[derive(Clone)]
pub(super) struct HandoffSender {
    pub(super) queue: Sender<Handoff>,
    pub(super) waker: Arc<mio::Waker>,
}

impl HandoffSender {
    /// Whether the loop got it (the queue holds a few per member; a full one means the loop
    /// is not taking them, and the connection is closed).
    fn hand_over(&self, handoff: Handoff) -> bool {
        if self.queue.try_send(handoff).is_ok() {
            let _ = self.waker.wake();
            return true;
        }
        false
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

/// Client side: prove the server knows the secret, then prove we do.
pub(super) fn client_handshake(
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
pub(super) fn server_handshake(
    stream: &mut TcpStream,
    config: &TransportConfig,
) -> io::Result<u64> {
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

pub(super) struct Acceptor {
    pub(super) listener: TcpListener,
    pub(super) config: Arc<TransportConfig>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) stats: Arc<TransportStats>,
    pub(super) handoff: HandoffSender,
}

impl Acceptor {
    pub(super) fn run(self) {
        let pending = Arc::new(AtomicUsize::new(0));
        let pending_max = self.config.members.len() + PENDING_CONNECTIONS_MAX;
        let mut handshakes: Vec<JoinHandle<()>> = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            handshakes.retain(|h| !h.is_finished());
            let (stream, address) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        tracing::warn!("cluster: accept failed: {e}");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if pending.load(Ordering::Relaxed) >= pending_max {
                self.stats
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%address, "cluster: connection refused, {pending_max} already being authenticated");
                continue;
            }
            pending.fetch_add(1, Ordering::Relaxed);
            let (config, stats, handoff) = (
                self.config.clone(),
                self.stats.clone(),
                self.handoff.clone(),
            );
            let pending = pending.clone();
            let spawned = std::thread::Builder::new()
                .name("cluster-auth".into())
                .spawn(move || {
                    if let Some(peer) =
                        authenticate_inbound(stream.try_clone(), &config, &stats, address)
                    {
                        let _ = handoff.hand_over(Handoff::Inbound {
                            peer,
                            stream,
                            address,
                        });
                    }
                    pending.fetch_sub(1, Ordering::Relaxed);
                });
            match spawned {
                Ok(handle) => handshakes.push(handle),
                Err(e) => tracing::warn!("cluster: cannot start a handshake thread: {e}"),
            }
        }
        for handshake in handshakes {
            let _ = handshake.join();
        }
    }
}

/// The server side of the handshake on an accepted connection; the member's id if it passed
/// (a refused connection is shut down here, with one log line).
fn authenticate_inbound(
    stream: io::Result<TcpStream>,
    config: &TransportConfig,
    stats: &TransportStats,
    address: SocketAddr,
) -> Option<u64> {
    let handshake = Duration::from_millis(config.handshake_timeout_ms.max(1));
    let mut stream = stream.ok()?;
    let passed = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(handshake)))
        .and_then(|()| stream.set_write_timeout(Some(handshake)))
        .and_then(|()| server_handshake(&mut stream, config));
    match passed {
        Ok(peer) => {
            tracing::info!(%address, peer, "cluster: member connected");
            Some(peer)
        }
        Err(error) => {
            stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%address, "cluster: connection refused: {error}");
            let _ = stream.shutdown(Shutdown::Both);
            None
        }
    }
}

/// Keeps one authenticated connection to `peer` in the loop's hands: connects (backing off
/// while the member is down), hands the connection over, and waits until the loop says it was
/// lost (`lost`) to connect again.
pub(super) struct Connector {
    pub(super) peer: u64,
    pub(super) config: Arc<TransportConfig>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) lost: Receiver<()>,
    pub(super) handoff: HandoffSender,
}

impl Connector {
    pub(super) fn run(self) {
        let address = self.config.members[self.peer as usize - 1];
        let mut pause = RECONNECT_PAUSE_MIN;
        let mut logged_down = false;
        while !self.stop.load(Ordering::Relaxed) {
            match self.connect(address) {
                Ok(stream) => {
                    tracing::info!(peer = self.peer, %address, "cluster: connected to member");
                    logged_down = false;
                    pause = RECONNECT_PAUSE_MIN;
                    let handed = self.handoff.hand_over(Handoff::Outbound {
                        peer: self.peer,
                        stream,
                    });
                    // Not taken: connect again after a pause, as after a failure.
                    if !handed {
                        std::thread::sleep(pause);
                        continue;
                    }
                    if !self.wait_until_lost() {
                        return;
                    }
                }
                Err(error) => {
                    if !logged_down {
                        tracing::warn!(peer = self.peer, %address, "cluster: cannot reach member: {error}");
                        logged_down = true;
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                }
            }
        }
    }

    /// Whether the loop reported the connection lost (false: the transport stops).
    fn wait_until_lost(&self) -> bool {
        while !self.stop.load(Ordering::Relaxed) {
            match self.lost.recv_timeout(STOP_POLL) {
                Ok(()) => return true,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
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
}
