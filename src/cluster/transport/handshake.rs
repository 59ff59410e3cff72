//! Making authenticated connections, off the loop's thread: the acceptor (with a short-lived
//! thread per handshake) and one connector per peer. Each hands a connection that passed the
//! handshake to the loop's [`super::Transport`] and wakes it; nothing after the handshake
//! happens here.
//!
//! **Handshake**: [`crate::peer_auth`] with the cluster's labels (`bourse-cluster server`,
//! `bourse-cluster client`) and the members' ids; the server accepts only the ids of another
//! member of this cluster calling this one.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};

use super::{TransportConfig, TransportStats, VERSION};
use crate::guard::{ConnectionSlots, PeerLog, SharedSlots, SlotHold};
use crate::peer_auth::{self, Protocol};

const CLUSTER: Protocol = Protocol::new(
    "cluster",
    VERSION,
    b"bourse-cluster server",
    b"bourse-cluster client",
);
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

/// Client side: prove the server knows the secret, then prove we do.
pub(super) fn client_handshake(
    stream: &mut TcpStream,
    secret: &[u8],
    client_id: u64,
    server_id: u64,
) -> io::Result<()> {
    peer_auth::client(stream, secret, CLUSTER, client_id, server_id)
}

/// Server side: answer the challenge of another member calling this one, check its proof.
/// Returns the client's id.
pub(super) fn server_handshake(
    stream: &mut TcpStream,
    config: &TransportConfig,
) -> io::Result<u64> {
    let members = config.members.len() as u64;
    peer_auth::server(stream, &config.secret, CLUSTER, |client, server| {
        server == config.id && client != 0 && client <= members && client != config.id
    })
}

pub(super) struct Acceptor {
    pub(super) listener: TcpListener,
    pub(super) config: Arc<TransportConfig>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) stats: Arc<TransportStats>,
    pub(super) handoff: HandoffSender,
}

/// Connections being authenticated (whether each comes from a member's address), at most
/// members + [`PENDING_CONNECTIONS_MAX`]: when all are taken a newcomer closes the oldest
/// (from an address that is no member's first), so connections that never finish their
/// handshake cannot keep a member out, as refusing newcomers did: a member sends its hello at
/// once and is through in microseconds.
type SharedPending = SharedSlots<bool>;

impl Acceptor {
    pub(super) fn run(self) {
        let pending: SharedPending = Arc::new(Mutex::new(ConnectionSlots::new(
            self.config.members.len() + PENDING_CONNECTIONS_MAX,
        )));
        // Refusals and failed handshakes: a burst of lines, then about one a second.
        let log = Arc::new(PeerLog::new("cluster"));
        let member_ips: Vec<std::net::IpAddr> =
            self.config.members.iter().map(|m| m.ip()).collect();
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
            let from_member = member_ips.contains(&address.ip());
            let admitted = SlotHold::admit(&pending, &stream, from_member, |list| {
                // The oldest not from a member's address, else the oldest.
                Some(list.iter().position(|c| !c.meta).unwrap_or(0))
            });
            let Some(hold) = admitted else {
                self.stats
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                log.warn(
                    address,
                    format_args!("connection refused: closed handshakes still ending"),
                );
                continue;
            };
            let (config, stats, handoff, log) = (
                self.config.clone(),
                self.stats.clone(),
                self.handoff.clone(),
                log.clone(),
            );
            // The hold frees the slot however the thread ends (or if it never starts).
            let spawned = std::thread::Builder::new()
                .name("cluster-auth".into())
                .spawn(move || {
                    let passed = authenticate_inbound(&stream, &config);
                    // The slot is freed before the hand-over, so the accept loop can never
                    // close a connection the transport already owns.
                    let still_open = hold.end();
                    match passed {
                        Ok(peer) if still_open => {
                            tracing::info!(%address, peer, "cluster: member connected");
                            let _ = handoff.hand_over(Handoff::Inbound {
                                peer,
                                stream,
                                address,
                            });
                        }
                        Ok(_) => {}
                        Err(error) => {
                            stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                            let _ = stream.shutdown(Shutdown::Both);
                            log.warn(address, format_args!("connection refused: {error}"));
                        }
                    }
                });
            match spawned {
                Ok(handle) => handshakes.push(handle),
                Err(e) => {
                    tracing::warn!("cluster: cannot start a handshake thread: {e}");
                }
            }
        }
        for handshake in handshakes {
            let _ = handshake.join();
        }
    }
}

/// The server side of the handshake on an accepted connection: the member's id if it passed.
fn authenticate_inbound(stream: &TcpStream, config: &TransportConfig) -> io::Result<u64> {
    let handshake = Duration::from_millis(config.handshake_timeout_ms.max(1));
    let mut stream = stream.try_clone()?;
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(handshake))?;
    stream.set_write_timeout(Some(handshake))?;
    server_handshake(&mut stream, config)
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
