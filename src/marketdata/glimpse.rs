//! GLIMPSE 5.0 snapshot server over SoupBinTCP (DESIGN.md 5, PROTOCOLS.md 5).
//!
//! A client logs in with any configured account (credentials case-insensitive; a snapshot login
//! does not count against the gateway's one-connection rule), requested session blank or the feed
//! session. It gets Login Accepted (feed session, sequence 1), then one Sequenced Data packet per
//! message: the ITCH messages of [`Exchange::snapshot`], the end-of-snapshot `G` carrying the
//! first ITCH sequence number to apply, then End of Session `Z`; the server then closes.
//!
//! Login rules, in order: bad username or password → Login Rejected `A`; requested session
//! neither blank nor the feed session → `S`. The requested sequence number should be 1
//! (PROTOCOLS.md 5); any other number is accepted with a debug log line and the whole snapshot
//! is sent from 1 anyway, Login Accepted saying so: every snapshot is a new stream, there is
//! nothing to resume, and this matches SoupBinTCP's rule that Login Accepted carries the actual
//! next number. No Login Request within `login_timeout_ms` → close. Before login only Debug
//! packets are allowed; anything else (or bad bytes) closes the connection.
//!
//! Consistency: the book lives on the engine thread. A connection thread asks for a snapshot
//! over a bounded channel ([`SnapshotRequester`]); the engine answers between two inputs with
//! [`SnapshotDesk::answer_snapshot_requests`], so the messages and the `G` number describe one
//! point of the feed. Snapshots are rare: the answer is an owned `Vec<u8>`, off the hot path.
//!
//! Threads: one accept thread (mio poll with a short timeout, to notice its stop flag) and one
//! short-lived thread per client, at most `max_connections`.
//!
//! Hostile clients (issue 12): a connection that has not logged in is closed after
//! `login_timeout_ms` (default 5 s). When every slot is taken, or a source already has
//! `max_per_source` connections not logged in, a new connection closes the oldest such
//! connection (of the source holding the most, or its own source): idle connections can never
//! make the server refuse a subscriber. Connections sending a snapshot are never closed for
//! room; if every slot is one, the newcomer is closed. One account has at most
//! `max_per_account` snapshots being sent at once (a further login of it is rejected `S`), so
//! a client with credentials that reconnects in a loop leaves the other slots to the rest. A closed connection's thread ends on
//! its own; while as many are still ending as there are slots, new connections wait in the
//! listen backlog rather than being closed (that bounds the threads at twice the slots without
//! ever turning a subscriber away for a burst of idle ones). Failed logins follow the gateway's
//! per-source backoff ([`crate::guard::BackoffRules`]): the same passwords must not be
//! guessable here faster than there.

use super::ServerHandle;
use crate::config::Config;
use crate::exchange::Exchange;
use crate::guard::{
    Admission, BackoffRules, ConnectionSlot, ConnectionSlots, FailureRecord, LineBudget, LogGate,
    Phase, SharedSlots, SlotHold, SourceTable, eviction_victim, lock_slots,
};
use crate::types::Timestamp;
use crate::wire::ascii::SessionId;
use crate::wire::glimpse::{END_OF_SNAPSHOT_LEN, EndOfSnapshot};
use crate::wire::itch;
use crate::wire::soupbin::{self, CLIENT_MAX_PACKET_LEN, FrameReader, LoginRequest, Packet};
use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender, TrySendError};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes handed to one `write` call, so that the stop flag and deadline are looked at often.
const WRITE_CHUNK_BYTES: usize = 64 << 10;
/// After End of Session: how long to wait for the client to close before closing ourselves.
/// Reading until the client's EOF (instead of closing at once) keeps the kernel from answering
/// unread client bytes with a reset that could destroy snapshot data not yet read.
const LINGER_MS: u64 = 1_000;
/// How long past [`LINGER_MS`] a login at its account's share waits for a finished snapshot's
/// connection to end, and how often it looks.
const ACCOUNT_WAIT_MARGIN_MS: u64 = 200;
const ACCOUNT_POLL: Duration = Duration::from_millis(10);
/// Source addresses whose failed logins are remembered.
const SOURCES_MAX: usize = 1024;
/// Poll interval of the accept thread while connections wait for closed ones' threads to end.
const EVICTED_WAIT: Duration = Duration::from_millis(1);
/// At most one log line per kind of refusal (or per source) per this many ms.
const LOG_INTERVAL_MS: u64 = 10_000;

pub use crate::wake::Waker;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlimpseConfig {
    pub listen: SocketAddr,
    pub session: SessionId,
    /// `(username, password)` of every configured account.
    pub accounts: Vec<(String, String)>,
    /// Close a connection that has not sent its Login Request after this long.
    pub login_timeout_ms: u64,
    /// Give up (close) if the engine has not answered a snapshot request after this long.
    pub answer_timeout_ms: u64,
    /// Close a client that has not taken the whole snapshot after this long.
    pub write_timeout_ms: u64,
    /// Close a client whose socket has taken nothing for this long (a stalled reader holds
    /// a slot, a thread and its snapshot's bytes: it must not hold them for the whole
    /// `write_timeout_ms`).
    pub stall_timeout_ms: u64,
    /// Snapshot connections served at once.
    pub max_connections: usize,
    /// Connections not logged in yet from one source address, at once.
    pub max_per_source: usize,
    /// Logged-in connections (snapshots being sent) of one account, at once.
    pub max_per_account: usize,
    /// How failed logins from one source are answered.
    pub backoff: BackoffRules,
}

impl GlimpseConfig {
    pub const DEFAULT_ANSWER_TIMEOUT_MS: u64 = 10_000;
    pub const DEFAULT_WRITE_TIMEOUT_MS: u64 = 60_000;

    /// From `[feed]`, `[[accounts]]` and the gateway's failed-login rules.
    pub fn from_config(config: &Config) -> Result<GlimpseConfig, String> {
        let feed = &config.feed;
        let session = SessionId::new(&feed.session)
            .ok_or_else(|| format!("feed.session {:?} is too long", feed.session))?;
        Ok(GlimpseConfig {
            listen: feed.snapshot,
            session,
            accounts: config
                .accounts
                .iter()
                .map(|a| (a.username.clone(), a.password.clone()))
                .collect(),
            login_timeout_ms: feed.snapshot_login_timeout_ms,
            answer_timeout_ms: Self::DEFAULT_ANSWER_TIMEOUT_MS,
            write_timeout_ms: Self::DEFAULT_WRITE_TIMEOUT_MS,
            stall_timeout_ms: feed.snapshot_stall_timeout_ms,
            max_connections: feed.snapshot_max_connections as usize,
            max_per_source: feed.snapshot_max_per_source as usize,
            max_per_account: feed.snapshot_max_per_account as usize,
            backoff: BackoffRules {
                free_failures: BackoffRules::FREE_FAILURES,
                first_delay_ms: BackoffRules::FIRST_DELAY_MS,
                max_delay_ms: config.gateway.login_backoff_max_ms,
                lockout_failures: config.gateway.login_lockout_failures,
                lockout_ms: config.gateway.login_lockout_ms,
            },
        })
    }
}

/// A snapshot as the engine produced it: SoupBinTCP packets ready to write after Login
/// Accepted — one Sequenced Data per ITCH message, the `G` in a Sequenced Data, then `Z`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub packets: Vec<u8>,
    /// ITCH messages in it (the `G` not counted).
    pub messages: u64,
    /// The first ITCH sequence number the client applies after it (the `G` number).
    pub next_itch_sequence: u64,
}

/// Encode the snapshot of `exchange` as it is now, between two inputs. `next_itch_sequence` is
/// the MoldUDP64 number the next ITCH message will get (`FeedPublisher::next_sequence`, equal to
/// the ITCH stream's `len() + 1`); `ts` stamps the messages.
pub fn encode_snapshot(
    exchange: &mut Exchange,
    next_itch_sequence: u64,
    ts: Timestamp,
) -> Snapshot {
    let mut encoder = SnapshotEncoder::new(next_itch_sequence);
    exchange.snapshot(ts, |message| encoder.push(message));
    encoder.finish()
}

/// Builds a [`Snapshot`] from its ITCH messages one by one (the sharded layout gets them
/// from its output stage rather than from one `Exchange`).
pub struct SnapshotEncoder {
    packets: Vec<u8>,
    messages: u64,
    next_itch_sequence: u64,
}

impl SnapshotEncoder {
    pub fn new(next_itch_sequence: u64) -> Self {
        assert!(next_itch_sequence >= 1);
        SnapshotEncoder {
            packets: Vec::new(),
            messages: 0,
            next_itch_sequence,
        }
    }

    pub fn push(&mut self, message: &itch::Message) {
        let mut scratch = [0u8; soupbin::HEADER_LEN + itch::MAX_MESSAGE_LEN];
        let n = soupbin::write_data(&mut scratch, soupbin::kind::SEQUENCED_DATA, |payload| {
            message.encode(payload)
        });
        self.packets.extend_from_slice(&scratch[..n]);
        self.messages += 1;
    }

    pub fn finish(mut self) -> Snapshot {
        let mut end = [0u8; soupbin::HEADER_LEN + END_OF_SNAPSHOT_LEN];
        let n = soupbin::write_data(&mut end, soupbin::kind::SEQUENCED_DATA, |payload| {
            EndOfSnapshot {
                sequence: self.next_itch_sequence,
            }
            .encode(payload)
        });
        self.packets.extend_from_slice(&end[..n]);
        let mut z = [0u8; soupbin::HEADER_LEN];
        let n = Packet::EndOfSession.encode(&mut z);
        self.packets.extend_from_slice(&z[..n]);
        Snapshot {
            packets: self.packets,
            messages: self.messages,
            next_itch_sequence: self.next_itch_sequence,
        }
    }
}

/// A snapshot request taken off the desk, to be answered later (possibly on another thread).
pub struct PendingSnapshot {
    reply: Sender<Snapshot>,
}

impl PendingSnapshot {
    /// Send the answer; false if the connection gave up meanwhile.
    pub fn answer(self, snapshot: Snapshot) -> bool {
        self.reply.try_send(snapshot).is_ok()
    }
}

struct SnapshotRequest {
    /// Capacity 1, one answer: the engine's send never blocks.
    reply: Sender<Snapshot>,
}

/// The engine's end of the snapshot channel.
pub struct SnapshotDesk {
    requests: Receiver<SnapshotRequest>,
    /// The channel's capacity: the most requests answered in one call.
    max_per_call: usize,
}

/// The GLIMPSE server's end of the snapshot channel.
#[derive(Clone)]
pub struct SnapshotRequester {
    requests: Sender<SnapshotRequest>,
    waker: Option<Waker>,
}

/// A channel of at most `capacity` pending snapshot requests (use the GLIMPSE
/// `max_connections`: each connection has at most one outstanding).
pub fn snapshot_channel(
    capacity: usize,
    waker: Option<Waker>,
) -> (SnapshotRequester, SnapshotDesk) {
    assert!(capacity > 0);
    let (requests, receiver) = channel::bounded(capacity);
    (
        SnapshotRequester { requests, waker },
        SnapshotDesk {
            requests: receiver,
            max_per_call: capacity,
        },
    )
}

impl SnapshotDesk {
    /// Engine loop, each iteration between two inputs: answer pending snapshot requests
    /// without blocking. Cheap when none is pending (one channel poll). Returns how many were
    /// answered. Arguments as for [`encode_snapshot`].
    pub fn answer_snapshot_requests(
        &self,
        exchange: &mut Exchange,
        next_itch_sequence: u64,
        ts: Timestamp,
    ) -> usize {
        let mut snapshot: Option<Snapshot> = None;
        let mut answered = 0;
        // Bounded: a request that arrives during this call waits for the next one.
        for _ in 0..self.max_per_call {
            let Ok(request) = self.requests.try_recv() else {
                break;
            };
            // Several requests in one call see the same point: encode once.
            let answer = snapshot
                .get_or_insert_with(|| encode_snapshot(exchange, next_itch_sequence, ts))
                .clone();
            // The connection may have given up (timeout, stop): nothing to do then.
            if request.reply.try_send(answer).is_ok() {
                answered += 1;
            }
        }
        answered
    }
}

impl SnapshotDesk {
    /// Take pending requests without answering them (at most the channel's capacity per
    /// call); `take(request)` answers each later with [`PendingSnapshot::answer`].
    pub fn take_snapshot_requests(&self, mut take: impl FnMut(PendingSnapshot)) -> usize {
        let mut taken = 0;
        for _ in 0..self.max_per_call {
            let Ok(request) = self.requests.try_recv() else {
                break;
            };
            take(PendingSnapshot {
                reply: request.reply,
            });
            taken += 1;
        }
        taken
    }
}

impl SnapshotRequester {
    /// Ask the engine for a snapshot and wait until `deadline` (or `stop`) for it.
    fn request(&self, deadline: Instant, stop: &AtomicBool) -> Result<Snapshot, &'static str> {
        let (reply, answer) = channel::bounded(1);
        match self.requests.try_send(SnapshotRequest { reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err("engine snapshot queue full"),
            Err(TrySendError::Disconnected(_)) => return Err("engine gone"),
        }
        if let Some(wake) = &self.waker {
            wake();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("engine did not answer in time");
            }
            if stop.load(Ordering::Acquire) {
                return Err("server stopping");
            }
            match answer.recv_timeout(left.min(super::stop_poll())) {
                Ok(snapshot) => return Ok(snapshot),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err("engine dropped the request"),
            }
        }
    }
}

/// What every thread of one server shares.
struct Shared {
    config: GlimpseConfig,
    requester: SnapshotRequester,
    stop: Arc<AtomicBool>,
    started: Instant,
    /// The connections being served (`max_connections`); a closed one's thread frees its
    /// slot as it ends, however it ends ([`SlotHold`]).
    slots: SharedSlots<Client>,
    records: Mutex<Records>,
}

/// What the server knows of a connection it serves.
struct Client {
    source: IpAddr,
    opened_ns: u64,
    /// Logged in (the index of its account in the config): its snapshot is being sent;
    /// never closed to make room.
    account: Option<usize>,
    /// Its snapshot is written whole; the thread waits (at most [`LINGER_MS`]) for the
    /// client to close. It still counts against its account's share and is not closed for
    /// room (a reset could destroy data the client has not read yet); a login of the same
    /// account at its share waits for it to end rather than being refused.
    sent: bool,
}

/// Failed logins by source, and the gates of the log lines clients can cause.
struct Records {
    failures: SourceTable<FailureRecord>,
    refused_log: LogGate,
    /// Connections closed on an error (bad bytes, a refused login, a failed write): a line
    /// each while they are few (DESIGN.md 7), about one a second under a flood.
    closed_log: LineBudget,
    evicted_log: LogGate,
}

impl Shared {
    fn new(config: GlimpseConfig, requester: SnapshotRequester, stop: Arc<AtomicBool>) -> Shared {
        let records = Records {
            failures: SourceTable::with_capacity(SOURCES_MAX),
            refused_log: LogGate::default(),
            closed_log: LineBudget::for_peer_events(),
            evicted_log: LogGate::default(),
        };
        Shared {
            slots: Arc::new(Mutex::new(ConnectionSlots::new(config.max_connections))),
            config,
            requester,
            stop,
            started: Instant::now(),
            records: Mutex::new(records),
        }
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        // A poisoned lock means a client thread panicked; the records stay consistent.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }
}

pub struct GlimpseServer;

impl GlimpseServer {
    /// Bind `config.listen` and serve on a thread named `glimpse` until the handle is stopped.
    pub fn spawn(config: GlimpseConfig, requester: SnapshotRequester) -> io::Result<ServerHandle> {
        assert!(config.max_connections > 0 && config.max_per_source > 0);
        assert!(config.max_per_account > 0);
        let mut listener = crate::guard::listen(config.listen, crate::guard::LISTEN_BACKLOG)?;
        let local_addr = listener.local_addr()?;
        let poll = mio::Poll::new()?;
        poll.registry()
            .register(&mut listener, mio::Token(0), mio::Interest::READABLE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::new(config, requester, stop.clone()));
        let thread = std::thread::Builder::new()
            .name("glimpse".into())
            .spawn(move || accept_loop(poll, listener, shared))?;
        Ok(ServerHandle::new(stop, thread, local_addr))
    }
}

fn accept_loop(mut poll: mio::Poll, listener: mio::net::TcpListener, shared: Arc<Shared>) {
    tracing::info!(addr = ?listener.local_addr().ok(), "GLIMPSE snapshot server listening");
    let mut events = mio::Events::with_capacity(8);
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    let mut deferred = false;
    // An accept that failed (e.g. out of descriptors) may have left connections in the
    // backlog, which raises no new event: look again after the next poll.
    let mut failed = false;
    while !shared.stop.load(Ordering::Acquire) {
        let timeout = if deferred {
            EVICTED_WAIT
        } else {
            super::stop_poll()
        };
        if let Err(e) = poll.poll(&mut events, Some(timeout))
            && e.kind() != io::ErrorKind::Interrupted
        {
            tracing::error!(error = %e, "GLIMPSE poll failed; server stops");
            break;
        }
        // mio is edge-triggered: accept until WouldBlock. Bounded by the kernel's backlog;
        // each connection is served, makes room by closing an older one, or is closed. While
        // the threads of closed connections are still finishing, the rest wait in the backlog
        // (push-back): `deferred` makes the next poll short so they are taken a moment later.
        if events.is_empty() && !deferred && !failed {
            // The stop poll's timeout: nothing new in the backlog (no accept call).
            continue;
        }
        (deferred, failed) = (false, false);
        loop {
            if !threads_free(&shared) {
                deferred = true;
                break;
            }
            match listener.accept() {
                Ok((stream, peer)) => {
                    connections.retain(|c| !c.is_finished());
                    admit(stream.into(), peer, &shared, &mut connections);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "GLIMPSE accept failed");
                    failed = true;
                    break;
                }
            }
        }
    }
    for connection in connections {
        let _ = connection.join();
    }
    tracing::info!("GLIMPSE snapshot server stopped");
}

/// May the accept thread take another connection? Not while as many closed connections'
/// threads are still finishing as there are slots: that bounds the client threads at twice
/// `max_connections`. Such threads end within moments (their socket is shut down), or after a
/// failed login's backoff delay at most. Refusing the newcomer instead would let a burst of
/// idle connections shut out the subscriber that follows them.
fn threads_free(shared: &Shared) -> bool {
    lock_slots(&shared.slots).closed_running() < shared.config.max_connections
}

/// Find room for a connection from `source` (closing an older pre-login one if a bound is
/// reached) and register it: its hold on the slot, or `None` if it must be closed.
fn take_slot(shared: &Shared, stream: &TcpStream, source: IpAddr) -> Option<SlotHold<Client>> {
    let config = &shared.config;
    let now_ns = shared.now_ns();
    let mut evicted = None;
    let decide = |list: &[ConnectionSlot<Client>], full: bool| {
        let pre_login = list
            .iter()
            .enumerate()
            .filter(|(_, c)| c.meta.account.is_none());
        let from_source = pre_login
            .clone()
            .filter(|(_, c)| c.meta.source == source)
            .count();
        let over_source = from_source >= config.max_per_source;
        if !over_source && !full {
            return Admission::Take;
        }
        // Only when one must be closed: a connection whose client has already written (its
        // login, as an honest client does at once) is about to be judged by its thread, so
        // it is not a candidate (a peek each, not paid on an ordinary accept).
        let mut candidates: Vec<crate::guard::Candidate> = pre_login
            .filter(|(_, c)| !has_written(c.stream()))
            .map(|(i, c)| (i, c.meta.source, c.meta.opened_ns))
            .collect();
        match eviction_victim(&mut candidates, over_source.then_some(source)) {
            Some(index) => {
                evicted = Some(list[index].meta.source);
                Admission::CloseFor(index)
            }
            None if over_source => {
                Admission::Refuse("its address's connections are all logging in")
            }
            None => Admission::Refuse("every slot is sending a snapshot"),
        }
    };
    let client = Client {
        source,
        opened_ns: now_ns,
        account: None,
        sent: false,
    };
    let admitted = SlotHold::admit_with(&shared.slots, stream, client, decide);
    let mut records = shared.records();
    // The accept thread waits for `threads_free`, so a chosen connection is always closed.
    if let Some(evicted) = evicted
        && let Some(suppressed) = records.evicted_log.pass(now_ns, LOG_INTERVAL_MS)
    {
        tracing::warn!(source = %evicted, suppressed, "GLIMPSE connections not logged in over budget: closing the oldest");
    }
    match admitted {
        Ok(hold) => Some(hold),
        Err(why) => {
            if let Some(suppressed) = records.refused_log.pass(now_ns, LOG_INTERVAL_MS) {
                tracing::warn!(%source, suppressed, "GLIMPSE connection closed at once: {why}");
            }
            None
        }
    }
}

/// Has the client sent bytes its connection's thread has not read yet? (A peek that never
/// waits; an error counts as no.)
pub(super) fn has_written(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
    matches!(
        socket2::SockRef::from(stream).recv_with_flags(&mut byte, flags),
        Ok(n) if n > 0
    )
}

/// Why a connection with good credentials is not served.
enum NotServed {
    /// Closed to make room for a newer connection before its login was read.
    Evicted,
    /// Its account already has `max_per_account` snapshots being sent.
    AccountBusy,
}

/// Mark the connection `hold` logged in as `account`. At the account's share, while some of
/// its connections have sent their snapshot and only wait for their client to close (at
/// most [`LINGER_MS`]), wait for them: a client that takes its next snapshot as soon as the
/// last one arrived is not refused for the one it has just finished, and one account still
/// never holds more than its share of the slots.
fn mark_logged_in(
    shared: &Shared,
    hold: &SlotHold<Client>,
    account: usize,
) -> Result<(), NotServed> {
    let deadline = Instant::now() + Duration::from_millis(LINGER_MS + ACCOUNT_WAIT_MARGIN_MS);
    // Bounded by the deadline; a look every ACCOUNT_POLL.
    loop {
        let mut slots = lock_slots(&shared.slots);
        let (busy, finishing) = slots
            .list()
            .iter()
            .filter(|c| c.meta.account == Some(account))
            .fold((0, 0), |(busy, finishing), c| {
                (busy + 1, finishing + usize::from(c.meta.sent))
            });
        let client = slots.meta_mut(hold.id()).ok_or(NotServed::Evicted)?;
        if busy < shared.config.max_per_account {
            client.account = Some(account);
            return Ok(());
        }
        drop(slots);
        if finishing == 0 || Instant::now() >= deadline || shared.stop.load(Ordering::Acquire) {
            return Err(NotServed::AccountBusy);
        }
        std::thread::sleep(ACCOUNT_POLL);
    }
}

fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    connections: &mut Vec<JoinHandle<()>>,
) {
    let Some(hold) = take_slot(shared, &stream, peer.ip()) else {
        return;
    };
    let thread_shared = shared.clone();
    // The closure owns the hold: the slot is freed when the thread ends, however it ends, or
    // when the closure is dropped unrun.
    let spawned = std::thread::Builder::new()
        .name("glimpse-client".into())
        .spawn(move || {
            if let Err(why) = serve_client(stream, peer, &thread_shared, &hold) {
                let now_ns = thread_shared.now_ns();
                let line = thread_shared.records().closed_log.pass(now_ns);
                match line {
                    Some(unlogged) => {
                        tracing::info!(%peer, closed_not_logged = unlogged, "GLIMPSE connection closed: {why}")
                    }
                    None => tracing::debug!(%peer, "GLIMPSE connection closed: {why}"),
                }
            }
        });
    match spawned {
        Ok(handle) => connections.push(handle),
        Err(e) => {
            tracing::error!(%peer, error = %e, "GLIMPSE client thread not started; closing");
        }
    }
}

/// One client from accept to close. `Err` says why it ended early (for the log).
fn serve_client(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    hold: &SlotHold<Client>,
) -> Result<(), String> {
    let io_err = |what: &str| {
        let what = what.to_string();
        move |e: io::Error| format!("{what}: {e}")
    };
    // Accepted from a non-blocking listener; this thread uses blocking calls with timeouts.
    stream.set_nonblocking(false).map_err(io_err("socket"))?;
    stream.set_nodelay(true).map_err(io_err("socket"))?;
    let config = &shared.config;
    let login_deadline = Instant::now() + Duration::from_millis(config.login_timeout_ms);
    let login = read_login(&mut stream, login_deadline, &shared.stop)?;
    let account = match check_login(&login, config) {
        Ok(account) => account,
        Err(reason) => {
            if reason == soupbin::reject_reason::NOT_AUTHORIZED {
                hold_failure(shared, peer.ip());
            } else {
                tracing::info!(%peer, reason = %(reason as char), "GLIMPSE login rejected");
            }
            return reject_login(&mut stream, reason, shared);
        }
    };
    match mark_logged_in(shared, hold, account) {
        Ok(()) => {}
        Err(NotServed::Evicted) => return Err("closed for a newer connection".into()),
        Err(NotServed::AccountBusy) => {
            // Closing with `S` (not `A`): the credentials are good, and a failed login's
            // backoff would slow the account's own snapshots that are under way.
            let _ = reject_login(
                &mut stream,
                soupbin::reject_reason::SESSION_NOT_AVAILABLE,
                shared,
            );
            return Err(format!(
                "its account already has {} snapshots being sent (feed.snapshot_max_per_account)",
                config.max_per_account
            ));
        }
    }
    if login.sequence != 1 {
        tracing::debug!(
            requested = login.sequence,
            "GLIMPSE login asked for a sequence other than 1; sending the whole snapshot"
        );
    }
    let mut accepted = [0u8; soupbin::HEADER_LEN + soupbin::payload_len::LOGIN_ACCEPTED];
    let n = Packet::LoginAccepted {
        session: config.session,
        sequence: 1,
    }
    .encode(&mut accepted);
    send(&mut stream, &accepted[..n], config, &shared.stop)?;
    let answer_deadline = Instant::now() + Duration::from_millis(config.answer_timeout_ms);
    let snapshot = shared.requester.request(answer_deadline, &shared.stop)?;
    send(&mut stream, &snapshot.packets, config, &shared.stop)?;
    hold.update(|client| client.sent = true);
    tracing::info!(
        %peer,
        messages = snapshot.messages,
        next_itch_sequence = snapshot.next_itch_sequence,
        "GLIMPSE snapshot sent"
    );
    linger_close(&mut stream);
    Ok(())
}

/// A failed login: record it against the source and wait as the backoff says (the slot
/// stays a pre-login one meanwhile, so a flood of these makes room like idle ones).
fn hold_failure(shared: &Shared, source: IpAddr) {
    let rules = shared.config.backoff;
    let now_ns = shared.now_ns();
    let plan = {
        let mut records = shared.records();
        let record = records
            .failures
            .entry(source, now_ns, FailureRecord::default, |r| {
                let mut r = *r;
                rules.is_forgotten(&mut r, now_ns)
            });
        match record {
            Some(record) => rules.on_failure(record, now_ns),
            None => crate::guard::FailurePlan {
                delay_ms: rules.max_delay_ms,
                phase: Phase::Lockout,
                entered: false,
            },
        }
    };
    match plan.phase {
        Phase::Free => tracing::info!(%source, "GLIMPSE login rejected: bad credentials"),
        _ if plan.entered => {
            tracing::warn!(%source, phase = ?plan.phase, "GLIMPSE failed logins: answering each after a delay")
        }
        _ => {}
    }
    let until = Instant::now() + Duration::from_millis(plan.delay_ms);
    // Bounded by the delay; looks at the stop flag every poll interval.
    while !shared.stop.load(Ordering::Acquire) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(super::stop_poll()));
    }
}

/// Read until a Login Request arrives; only Debug packets may come before it.
fn read_login(
    stream: &mut TcpStream,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<LoginRequest, String> {
    let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
    loop {
        while let Some(packet) = reader.next_packet() {
            match packet {
                Ok(Packet::LoginRequest(login)) => return Ok(login),
                Ok(Packet::Debug(_)) => {}
                Ok(other) => return Err(format!("packet {:?} before login", other.kind() as char)),
                Err(e) => return Err(format!("bad bytes before login: {e}")),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no login in time".into());
        }
        if stop.load(Ordering::Acquire) {
            return Err("server stopping".into());
        }
        stream
            .set_read_timeout(Some(left.min(super::stop_poll())))
            .map_err(|e| format!("socket: {e}"))?;
        match stream.read(reader.read_space()) {
            Ok(0) => return Err("closed before login".into()),
            Ok(n) => reader.commit(n),
            Err(e) if super::rerequest::is_timeout(&e) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// `Ok` or the Login Rejected reason. Credentials first, so a bad password always gets `A`.
/// The index of the login's account in the config, or the reason to reject it.
fn check_login(login: &LoginRequest, config: &GlimpseConfig) -> Result<usize, u8> {
    let account = config
        .accounts
        .iter()
        .position(|(user, password)| login.username_eq(user) && login.password_eq(password))
        .ok_or(soupbin::reject_reason::NOT_AUTHORIZED)?;
    if !login.session.is_blank() && login.session != config.session {
        return Err(soupbin::reject_reason::SESSION_NOT_AVAILABLE);
    }
    Ok(account)
}

/// Send Login Rejected with `reason` and close; always `Err` (why, for the log).
fn reject_login(stream: &mut TcpStream, reason: u8, shared: &Shared) -> Result<(), String> {
    let mut buf = [0u8; soupbin::HEADER_LEN + 1];
    let n = Packet::LoginRejected { reason }.encode(&mut buf);
    send(stream, &buf[..n], &shared.config, &shared.stop)?;
    linger_close(stream);
    Err(format!("login rejected {:?}", reason as char))
}

/// [`write_until`] within the config's limits: the whole of `bytes` within
/// `write_timeout_ms`, no pause longer than `stall_timeout_ms`.
fn send(
    stream: &mut TcpStream,
    bytes: &[u8],
    config: &GlimpseConfig,
    stop: &AtomicBool,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(config.write_timeout_ms);
    let stall = Duration::from_millis(config.stall_timeout_ms);
    write_until(stream, bytes, deadline, stall, stop).map_err(|e| format!("write: {e}"))
}

/// Write all of `bytes` by `deadline`, in chunks so that `stop` is noticed; give up when the
/// socket has taken nothing for `stall` (a client that stopped reading).
pub(super) fn write_until(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
    stall: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut at = 0;
    let mut progressed = Instant::now();
    while at < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stop.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client too slow or server stopping",
            ));
        }
        let stall_left = stall.saturating_sub(progressed.elapsed());
        if stall_left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("client took nothing for {} ms", stall.as_millis()),
            ));
        }
        stream.set_write_timeout(Some(left.min(stall_left).min(super::stop_poll())))?;
        let end = bytes.len().min(at + WRITE_CHUNK_BYTES);
        match stream.write(&bytes[at..end]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                at += n;
                progressed = Instant::now();
            }
            Err(e) if super::rerequest::is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Half-close, then wait (bounded) for the client's EOF, discarding what it sends.
fn linger_close(stream: &mut TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(LINGER_MS);
    let mut sink = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if super::rerequest::is_timeout(&e) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Alpha;

    fn config() -> GlimpseConfig {
        let mut config = GlimpseConfig::from_config(&Config::embedded_default()).unwrap();
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.accounts = vec![("BRKR01".into(), "secret".into())];
        config
    }

    fn login(user: &[u8; 6], password: &[u8; 10], session: &str) -> LoginRequest {
        LoginRequest {
            username: Alpha(*user),
            password: Alpha(*password),
            session: SessionId::new(session).unwrap(),
            sequence: 1,
            heartbeat_timeout_ms: None,
        }
    }

    #[test]
    fn a_client_thread_that_panics_gives_its_slot_back() {
        let (requester, _desk) = snapshot_channel(1, None);
        let mut one_slot = config();
        one_slot.max_connections = 1;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::new(one_slot, requester, stop));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        for round in 0..3 {
            let _client = TcpStream::connect(addr).unwrap();
            let (server_side, peer) = listener.accept().unwrap();
            let hold = take_slot(&shared, &server_side, peer.ip()).expect("a free slot");
            let thread = std::thread::spawn(move || {
                let _hold = hold;
                panic!("a bug while serving a client");
            });
            assert!(thread.join().is_err());
            let slots = lock_slots(&shared.slots);
            assert!(
                slots.list().is_empty(),
                "round {round}: the slot is still held"
            );
            assert_eq!(
                slots.closed_running(),
                0,
                "round {round}: nothing was closed for room"
            );
        }
    }

    #[test]
    fn login_checks_credentials_before_the_session() {
        let c = config();
        assert_eq!(check_login(&login(b"brkr01", b"SECRET    ", ""), &c), Ok(0));
        assert_eq!(
            check_login(&login(b"BRKR01", b"secret    ", "BOURSE0001"), &c),
            Ok(0)
        );
        assert_eq!(
            check_login(&login(b"BRKR01", b"secret    ", "OTHER"), &c),
            Err(b'S')
        );
        assert_eq!(
            check_login(&login(b"BRKR01", b"wrong     ", "OTHER"), &c),
            Err(b'A')
        );
        assert_eq!(
            check_login(&login(b"NOBODY", b"secret    ", ""), &c),
            Err(b'A')
        );
    }
}
