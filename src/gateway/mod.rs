//! Order-entry gateway: SoupBinTCP 4.00 sessions carrying OUCH 4.2 (DESIGN.md 6).
//!
//! Each account has one sequenced OUCH stream (see [`crate::stream`]); a session is a cursor
//! into it, so re-login replays from any number and a slow client only ever costs its own
//! fixed write buffer. Inbound OUCH is checked (type and length) before it is handed to the
//! sequencer; bad bytes close that one connection with a log line.
//!
//! Hostile clients (issue 12; README "Hostile clients" has the rules for operators):
//! - Connections not logged in yet have their own budget (`max_pending_logins`, and
//!   `max_pending_per_source` per source address) and `login_timeout_ms`. At a bound, a new
//!   connection closes the oldest pre-login connection of the source holding the most (its
//!   own source for the per-source bound): idle or half-sent logins can never keep a newcomer
//!   out, and logged-in sessions are never closed to make room.
//! - New connections are accepted a few per turn and read at once (their login is usually
//!   already there), so a broker's login is judged before a flood of newer connections from
//!   the same address could push it out.
//! - Failed logins (`A`) are counted per source ([`crate::guard::BackoffRules`]): a few are
//!   answered at once, then each after a doubling delay up to `login_backoff_max_ms`, and
//!   after `login_lockout_failures` every failure waits the maximum until the source has been
//!   quiet for `login_lockout_ms`. Correct credentials are judged as always and never
//!   delayed, so a broker sharing an address with an attacker still logs in. One log line
//!   per source per 10 s, not per try.

mod connection;
mod login;

pub use login::{Admitted, decide};

use crate::config::{AccountConfig, GatewayConfig};
use crate::guard::{
    BackoffRules, FailureRecord, LineBudget, LogGate, Phase, SourceTable, eviction_victim,
};
use crate::stream::StreamReader;
use crate::types::AccountId;
use crate::wire::ascii::SessionId;
use crate::wire::ouch::Inbound;
use crate::wire::soupbin::{self, Packet};
use connection::{Connection, Received, State};
use mio::net::TcpListener;
use mio::{Interest, Registry, Token};
use std::io;
use std::net::{IpAddr, SocketAddr};

const NS_PER_MS: u64 = 1_000_000;
/// Reads per readable event before giving other connections a turn. Each read takes up to
/// a whole read buffer (64 KiB, ~1,300 orders), so one flooding session sequences at most
/// ~5,000 orders per turn of the loop before the others and the replies get theirs.
const READS_PER_EVENT_MAX: u32 = 4;
/// Connections accepted per turn of the event loop at most; each is read before the next
/// turn accepts more. Small, so a login already waiting in its socket is judged before many
/// newer connections from its address arrive (see `accept`).
const ACCEPTS_PER_TURN_MAX: usize = 4;
/// Write-buffer refills per session per pump: bounds the time one session's backlog (a
/// re-login replaying the day) holds the loop (`PUMP_ROUNDS_MAX` × the write buffer).
const PUMP_ROUNDS_MAX: u32 = 4;
/// Source addresses whose failed logins and evictions are remembered.
const SOURCES_MAX: usize = 1024;
/// At most one log line per source (or per kind of refusal) per this many ms.
const LOG_INTERVAL_MS: u64 = 10_000;
/// How often quiet source records are forgotten.
const SOURCE_SWEEP_INTERVAL_NS: u64 = 1_000_000_000;

/// Where valid inbound OUCH messages go (the sequencer): the bytes as received, to journal,
/// and the decoded message, so nothing decodes twice.
pub trait Intake {
    fn submit(&mut self, account: AccountId, raw: &[u8], message: &Inbound);
    /// May another message be submitted now? When not, the gateway leaves the rest of the
    /// connection's bytes unread until it may (back-pressure).
    fn has_room(&self) -> bool {
        true
    }
    /// A logged-in session of `account` ended other than by Logout Request (DESIGN.md 4a:
    /// the sequencer journals it; the core decides what it cancels).
    fn disconnect(&mut self, account: AccountId);
    /// `message` of `account` is the one after the message about to be submitted (the gateway
    /// has both in its buffer): a hint to warm the cache for it. It may never be submitted
    /// (the connection may close first); the hint changes nothing either way.
    fn prefetch(&self, _account: AccountId, _message: &Inbound) {}
}

/// What the gateway remembers about one source address.
#[derive(Default)]
struct SourceRecord {
    failures: FailureRecord,
    /// Failed logins and evicted connections since this source's last log line.
    failed: u64,
    evicted: u64,
    log: LogGate,
}

pub struct Gateway {
    listener: TcpListener,
    token_base: usize,
    conns: Vec<Option<Connection>>,
    /// Write and read buffers of closed connections, reused: nothing is allocated per
    /// connection.
    buffers: Vec<connection::Buffers>,
    sources: SourceTable<SourceRecord>,
    rules: BackoffRules,
    /// The last accept turn stopped at its bound: the backlog may hold more.
    accept_again: bool,
    /// Scratch space for choosing a connection to evict (capacity: every slot).
    candidates: Vec<crate::guard::Candidate>,
    /// Connections refused outright (every slot logged in).
    refused_log: LogGate,
    /// Connections closed before login (bad bytes, a refused login, a timeout): DESIGN.md 7
    /// wants a line for bad bytes; anyone can cause these, so a flood gets about one a second.
    closed_before_login_log: LineBudget,
    last_sweep_ns: u64,
    /// Connection index of each account's logged-in session.
    live: Vec<Option<usize>>,
    /// Accounts whose session was lost (not logged out) and not yet reported to the intake,
    /// in order, each at most once (`lost_flag`).
    lost: Vec<AccountId>,
    lost_flag: Vec<bool>,
    /// The daemon is stopping: sessions it closes are not lost ones.
    stopping: bool,
    accounts: Vec<AccountConfig>,
    session: SessionId,
    cfg: GatewayConfig,
    /// Connections that must be visited again (read budget used up).
    read_again: Vec<usize>,
}

impl Gateway {
    /// Bind the listener and register it with `Token(token_base)`; connections use the
    /// `max_connections` tokens after it.
    pub fn bind(
        cfg: &GatewayConfig,
        accounts: &[AccountConfig],
        session: SessionId,
        registry: &Registry,
        token_base: usize,
    ) -> io::Result<Gateway> {
        let mut listener = crate::guard::listen(cfg.listen, crate::guard::LISTEN_BACKLOG)?;
        registry.register(&mut listener, Token(token_base), Interest::READABLE)?;
        let max = cfg.max_connections as usize;
        let buffers = (0..max)
            .map(|_| {
                (
                    vec![0u8; connection::WRITE_BUFFER_BYTES].into_boxed_slice(),
                    vec![0u8; connection::READ_BUFFER_BYTES].into_boxed_slice(),
                )
            })
            .collect();
        Ok(Gateway {
            listener,
            token_base,
            conns: (0..max).map(|_| None).collect(),
            buffers,
            sources: SourceTable::with_capacity(SOURCES_MAX),
            rules: BackoffRules {
                free_failures: BackoffRules::FREE_FAILURES,
                first_delay_ms: BackoffRules::FIRST_DELAY_MS,
                max_delay_ms: cfg.login_backoff_max_ms,
                lockout_failures: cfg.login_lockout_failures,
                lockout_ms: cfg.login_lockout_ms,
            },
            accept_again: false,
            candidates: Vec::with_capacity(max),
            refused_log: LogGate::default(),
            closed_before_login_log: LineBudget::for_peer_events(),
            last_sweep_ns: 0,
            live: vec![None; accounts.len()],
            lost: Vec::with_capacity(accounts.len()),
            lost_flag: vec![false; accounts.len()],
            stopping: false,
            accounts: accounts.to_vec(),
            session,
            cfg: cfg.clone(),
            read_again: Vec::with_capacity(max),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Tokens this gateway owns: `token_base ..= token_base + max_connections`.
    pub fn owns(&self, token: Token) -> bool {
        (self.token_base..=self.token_base + self.conns.len()).contains(&token.0)
    }

    pub fn connected_sessions(&self) -> usize {
        self.live.iter().filter(|c| c.is_some()).count()
    }

    /// TCP connections open, logged in or not.
    pub fn open_connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// A readiness event of `token`; `peer_closed`: the event said the peer closed or the
    /// socket failed.
    pub fn on_event<I: Intake>(
        &mut self,
        token: Token,
        peer_closed: bool,
        registry: &Registry,
        now_ns: u64,
        streams: &[StreamReader],
        intake: &mut I,
    ) {
        if token.0 == self.token_base {
            self.accept(registry, now_ns);
            return;
        }
        let index = token.0 - self.token_base - 1;
        self.service(index, peer_closed, registry, now_ns, streams, intake);
    }

    /// Serve connections whose read budget ran out on their last event, and those just
    /// accepted; then accept more if the last turn stopped at its bound.
    pub fn on_idle<I: Intake>(
        &mut self,
        registry: &Registry,
        now_ns: u64,
        streams: &[StreamReader],
        intake: &mut I,
    ) {
        if self.accept_again {
            self.accept(registry, now_ns);
        }
        let pending = self.read_again.len();
        for _ in 0..pending {
            let index = self.read_again.remove(0);
            // Its event (if any) was set aside: read until the socket says WouldBlock.
            self.service(index, true, registry, now_ns, streams, intake);
        }
    }

    pub fn is_listener(&self, token: Token) -> bool {
        token.0 == self.token_base
    }

    /// Serve this connection's event later (input is paused); accepts happen now.
    pub fn defer(&mut self, token: Token) {
        if token.0 == self.token_base {
            return;
        }
        let index = token.0 - self.token_base - 1;
        if !self.read_again.contains(&index) {
            self.read_again.push(index);
        }
    }

    pub fn has_pending_reads(&self) -> bool {
        !self.read_again.is_empty() || self.accept_again
    }

    /// Accept up to a few connections; each is read in this turn's `on_idle` (or at once by
    /// its readable event), before the next turn accepts more. While input is paused
    /// (replicated mode) `on_idle` does not run, so nothing new is read and the kernel's
    /// backlog holds the rest.
    fn accept(&mut self, registry: &Registry, now_ns: u64) {
        let per_turn =
            (self.cfg.max_pending_per_source as usize / 2).clamp(1, ACCEPTS_PER_TURN_MAX);
        self.accept_again = false;
        for _ in 0..per_turn {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("gateway accept failed: {e}");
                    return;
                }
            };
            let Some(index) = self.make_room(peer.ip(), registry, now_ns) else {
                if let Some(suppressed) = self.refused_log.pass(now_ns, LOG_INTERVAL_MS) {
                    tracing::warn!(%peer, suppressed, "gateway connection refused: every one of {} connections is logged in", self.conns.len());
                }
                continue;
            };
            let _ = stream.set_nodelay(true);
            let token = Token(self.token_base + 1 + index);
            if let Err(e) =
                registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            {
                tracing::warn!(%peer, "gateway cannot register connection: {e}");
                continue;
            }
            tracing::debug!(%peer, "gateway connection opened");
            let buffers = self.buffers.pop().expect("buffers per free slot");
            self.conns[index] = Some(Connection::new(stream, peer, now_ns, buffers));
            if !self.read_again.contains(&index) {
                self.read_again.push(index);
            }
        }
        self.accept_again = true;
    }

    /// A free slot for a new connection from `source`, closing a pre-login connection if a
    /// budget is full (see the module docs). `None`: every slot holds a logged-in session.
    fn make_room(&mut self, source: IpAddr, registry: &Registry, now_ns: u64) -> Option<usize> {
        // One pass: the pre-login candidates (into scratch space sized at start-up) and the
        // first free slot.
        let candidates = &mut self.candidates;
        candidates.clear();
        let mut free = None;
        for (i, slot) in self.conns.iter().enumerate() {
            match slot {
                None => free = free.or(Some(i)),
                Some(c) if c.is_pre_login() => candidates.push((i, c.peer.ip(), c.opened_ns)),
                Some(_) => {}
            }
        }
        let from_source = candidates.iter().filter(|c| c.1 == source).count();
        let victim = if from_source >= self.cfg.max_pending_per_source as usize {
            eviction_victim(candidates, Some(source))
        } else if candidates.len() >= self.cfg.max_pending_logins as usize || free.is_none() {
            eviction_victim(candidates, None)
        } else {
            None
        };
        if let Some(index) = victim {
            self.evict(index, registry, now_ns);
            return Some(index);
        }
        free
    }

    fn evict(&mut self, index: usize, registry: &Registry, now_ns: u64) {
        let Some(conn) = self.conns[index].take() else {
            return;
        };
        assert!(conn.is_pre_login(), "logged-in sessions are never evicted");
        let ip = conn.peer.ip();
        if let Some(record) = self.source(ip, now_ns) {
            record.evicted += 1;
        }
        let what = "pre-login connections over budget: closing the oldest";
        self.report(ip, now_ns, what, false);
        abort_on_close(&conn);
        self.settle(
            index,
            conn,
            Some("evicted for a newer connection".into()),
            registry,
            now_ns,
        );
    }

    /// The record of `source`, created if needed (`None` only if the table is full of
    /// sources that are all in backoff: then nothing is recorded for a new one).
    fn source(&mut self, source: IpAddr, now_ns: u64) -> Option<&mut SourceRecord> {
        let rules = self.rules;
        self.sources
            .entry(source, now_ns, SourceRecord::default, |r| {
                let mut failures = r.failures;
                rules.is_forgotten(&mut failures, now_ns)
            })
    }

    /// One log line about `source` at most every `LOG_INTERVAL_MS` (or now, when `force`:
    /// the source changed phase), with what happened since.
    fn report(&mut self, source: IpAddr, now_ns: u64, what: &str, force: bool) {
        let rules = self.rules;
        let Some(record) = self.sources.get_mut(source) else {
            return;
        };
        let interval_ms = if force { 0 } else { LOG_INTERVAL_MS };
        if record.log.pass(now_ns, interval_ms).is_none() {
            return;
        }
        let phase = rules.phase(&mut record.failures, now_ns);
        tracing::warn!(
            %source,
            failed_logins = std::mem::take(&mut record.failed),
            evicted = std::mem::take(&mut record.evicted),
            remembered_failures = record.failures.failures,
            ?phase,
            "gateway: {what}"
        );
    }

    /// Forget sources that have been quiet long enough; report the counts of those that
    /// went quiet with events not yet logged.
    fn sweep_sources(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.last_sweep_ns) < SOURCE_SWEEP_INTERVAL_NS {
            return;
        }
        self.last_sweep_ns = now_ns;
        let rules = self.rules;
        self.sources.retain(|source, r| {
            let unlogged = r.failed + r.evicted;
            if unlogged > 0 && r.log.pass(now_ns, LOG_INTERVAL_MS).is_some() {
                tracing::warn!(%source, failed_logins = r.failed, evicted = r.evicted, "gateway: since the last line about this source");
                r.failed = 0;
                r.evicted = 0;
            }
            !rules.is_forgotten(&mut r.failures, now_ns) || r.failed + r.evicted > 0
        });
    }

    /// Flush, read and frame one connection. `drain`: read until the socket says WouldBlock
    /// even after a short read.
    fn service<I: Intake>(
        &mut self,
        index: usize,
        drain: bool,
        registry: &Registry,
        now_ns: u64,
        streams: &[StreamReader],
        intake: &mut I,
    ) {
        let Some(mut conn) = self.conns[index].take() else {
            return;
        };
        let mut reason = None;
        if let Err(e) = conn.flush(now_ns) {
            reason = Some(format!("write failed: {e}"));
        }
        // A connection whose rejection is held is not read (its answer is decided).
        let readable =
            |conn: &Connection| !conn.closing && !matches!(conn.state, State::Rejecting { .. });
        // Packets framed earlier and left unread while the sequencer had no room go first:
        // no new socket event may come for them (the poller is edge-triggered).
        if reason.is_none() && readable(&conn) {
            reason = self.drain_packets(&mut conn, index, streams, intake, now_ns);
        }
        let mut reads = 0;
        while reason.is_none() && readable(&conn) {
            if reads == READS_PER_EVENT_MAX || !intake.has_room() {
                if !self.read_again.contains(&index) {
                    self.read_again.push(index);
                }
                break;
            }
            reads += 1;
            match conn.receive(now_ns) {
                Ok(Received::Bytes { short }) => {
                    reason = self.drain_packets(&mut conn, index, streams, intake, now_ns);
                    // A short read emptied the socket: anything that arrives after it raises
                    // a new edge-triggered event, so the `read` that would only say
                    // WouldBlock is skipped (one syscall per event, as tokio does on epoll).
                    // Not when the event said the peer closed: its end-of-file raises no
                    // further event, so it must be read now.
                    if short && !drain {
                        break;
                    }
                }
                Ok(Received::NoSpace) => {
                    reason = self.drain_packets(&mut conn, index, streams, intake, now_ns)
                }
                Ok(Received::Closed) => reason = Some("peer closed the connection".into()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => reason = Some(format!("read failed: {e}")),
            }
        }
        if let Err(e) = conn.flush(now_ns) {
            reason.get_or_insert(format!("write failed: {e}"));
        }
        self.settle(index, conn, reason, registry, now_ns);
    }

    /// Put a connection back, or close it (with a log line) if it is done.
    fn settle(
        &mut self,
        index: usize,
        mut conn: Connection,
        reason: Option<String>,
        registry: &Registry,
        now_ns: u64,
    ) {
        let done = reason.is_some() || (conn.closing && conn.pending_bytes() == 0);
        if !done {
            self.conns[index] = Some(conn);
            return;
        }
        let why = reason.unwrap_or_else(|| "session ended".into());
        if let State::LoggedIn { session, .. } = conn.state {
            let account = session.account;
            self.live[account.0 as usize] = None;
            if !conn.logged_out && !self.stopping && !self.lost_flag[account.0 as usize] {
                self.lost_flag[account.0 as usize] = true;
                self.lost.push(account);
            }
            tracing::info!(peer = %conn.peer, account = session.account.0, "gateway session closed: {why}");
        } else if let Some(unlogged) = self.closed_before_login_log.pass(now_ns) {
            tracing::info!(peer = %conn.peer, closed_before_login_not_logged = unlogged, "gateway connection closed before login: {why}");
        } else {
            tracing::debug!(peer = %conn.peer, "gateway connection closed before login: {why}");
        }
        let _ = registry.deregister(&mut conn.stream);
        self.buffers.push(conn.take_buffers());
        debug_assert!(self.buffers.len() <= self.conns.len());
    }

    /// Handle every complete packet; Some(reason) closes the connection.
    fn drain_packets<I: Intake>(
        &mut self,
        conn: &mut Connection,
        index: usize,
        streams: &[StreamReader],
        intake: &mut I,
        now_ns: u64,
    ) -> Option<String> {
        // Bounded by the framing buffer: each packet consumes at least 3 bytes of it.
        for _ in 0..conn.reader.capacity() / 3 + 2 {
            if matches!(conn.state, State::LoggedIn { .. }) && !intake.has_room() {
                // Leave the rest framed but unread; this connection is served again later.
                if !self.read_again.contains(&index) {
                    self.read_again.push(index);
                }
                return None;
            }
            if let State::LoggedIn { session, .. } = &conn.state {
                // The message after this one is already here: its token lookups' cache lines
                // load while this one is sequenced (decoded twice, for the hint only).
                let next = conn.reader.following_unsequenced();
                if let Some(Ok(message)) = next.map(Inbound::decode) {
                    intake.prefetch(session.account, &message);
                }
            }
            let packet = match conn.reader.next_packet()? {
                Ok(p) => p,
                Err(e) => return Some(format!("bad bytes: {e}")),
            };
            let login = match (&conn.state, packet) {
                (_, Packet::Debug(_)) => None,
                (State::AwaitingLogin, Packet::LoginRequest(request)) => Some(request),
                (State::AwaitingLogin, other) => {
                    return Some(format!("packet {:?} before login", other.kind() as char));
                }
                (State::LoggedIn { session, .. }, Packet::UnsequencedData(payload)) => {
                    match Inbound::decode(payload) {
                        Ok(message) => intake.submit(session.account, payload, &message),
                        Err(e) => return Some(format!("bad OUCH message: {e}")),
                    }
                    None
                }
                (State::LoggedIn { .. }, Packet::ClientHeartbeat) => None,
                (State::LoggedIn { .. }, Packet::LogoutRequest) => {
                    conn.logged_out = true;
                    return Some("logout".into());
                }
                // Its answer is on the way; whatever else it sent is ignored.
                (State::Rejecting { .. }, _) => return None,
                (State::LoggedIn { .. }, other) => {
                    return Some(format!(
                        "unexpected packet {:?} after login",
                        other.kind() as char
                    ));
                }
            };
            if let Some(request) = login {
                // A lost session's disconnect goes in before anything a new login sends.
                self.report_lost(intake);
                self.login(conn, index, &request, streams, now_ns);
                if conn.closing || matches!(conn.state, State::Rejecting { .. }) {
                    return None;
                }
            }
        }
        None
    }

    fn login(
        &mut self,
        conn: &mut Connection,
        index: usize,
        request: &soupbin::LoginRequest,
        streams: &[StreamReader],
        now_ns: u64,
    ) {
        let live = &self.live;
        let decision = decide(
            request,
            &self.accounts,
            self.session,
            |a| streams[a.0 as usize].len(),
            |a| live[a.0 as usize].is_some(),
        );
        match decision {
            Ok(admitted) => {
                self.live[admitted.account.0 as usize] = Some(index);
                conn.state = State::LoggedIn {
                    session: admitted,
                    next_seq: admitted.next_seq,
                    caught_up: false,
                };
                let accepted = Packet::LoginAccepted {
                    session: self.session,
                    sequence: admitted.next_seq,
                };
                conn.queue(accepted.encoded_len(), |buf| accepted.encode(buf));
                tracing::info!(peer = %conn.peer, account = admitted.account.0, next_seq = admitted.next_seq, "gateway login accepted");
            }
            Err(reason) if reason == soupbin::reject_reason::NOT_AUTHORIZED => {
                self.login_failed(conn, reason, now_ns);
            }
            Err(reason) => {
                reject_now(conn, reason);
                tracing::info!(peer = %conn.peer, reason = %(reason as char), "gateway login rejected");
            }
        }
    }

    /// Wrong credentials: answer now, or later if the source has failed too often.
    fn login_failed(&mut self, conn: &mut Connection, reason: u8, now_ns: u64) {
        let ip = conn.peer.ip();
        let rules = self.rules;
        let plan = self.source(ip, now_ns).map(|record| {
            record.failed += 1;
            rules.on_failure(&mut record.failures, now_ns)
        });
        // No record (the table is full of sources in backoff): treat as locked out.
        let (delay_ms, phase, entered) = match plan {
            Some(p) => (p.delay_ms, p.phase, p.entered),
            None => (rules.max_delay_ms, Phase::Lockout, false),
        };
        if delay_ms == 0 {
            reject_now(conn, reason);
        } else {
            conn.state = State::Rejecting {
                reason,
                due_ns: now_ns.saturating_add(delay_ms.saturating_mul(NS_PER_MS)),
            };
        }
        let what = match phase {
            Phase::Free => {
                tracing::info!(peer = %conn.peer, reason = %(reason as char), "gateway login rejected");
                return;
            }
            Phase::Backoff if entered => "failed logins: answering each after a growing delay",
            Phase::Lockout if entered => {
                "failed logins: locked out, every failure waits the longest delay"
            }
            _ => "failed logins",
        };
        self.report(ip, now_ns, what, entered);
    }

    /// Send every released sequenced message to its session (call after the journal flush,
    /// so a reply never leaves before its input is durable). Disconnects slow readers.
    pub fn pump(&mut self, streams: &[StreamReader], registry: &Registry, now_ns: u64) {
        // Only logged-in sessions get replies, and in a small batch most have nothing new:
        // look before moving a connection out of its slot (moving every slot of the table
        // on every turn was most of the loop's instructions at 2,000 inputs/s).
        assert_eq!(streams.len(), self.live.len(), "one stream per account");
        for (account, stream) in streams.iter().enumerate() {
            let Some(index) = self.live[account] else {
                continue;
            };
            let conn = self.conns[index].as_ref().expect("a live session's slot");
            if conn.pending_bytes() == 0 && !conn.has_unsent(stream) {
                continue;
            }
            let mut conn = self.conns[index].take().expect("a live session's slot");
            let State::LoggedIn { session, .. } = conn.state else {
                unreachable!("live sessions are logged in")
            };
            assert_eq!(session.account.0 as usize, account);
            let mut reason = None;
            // One write per session per batch; a batch whose replies exceed the write
            // buffer refills it while the socket takes everything, instead of waiting
            // for the next turn of the loop (no event comes for a still-writable socket).
            for _ in 0..PUMP_ROUNDS_MAX {
                conn.fill_from(stream);
                if let Err(e) = conn.flush(now_ns) {
                    reason = Some(format!("write failed: {e}"));
                    break;
                }
                if conn.pending_bytes() > 0 || !conn.has_unsent(stream) {
                    break;
                }
            }
            reason = reason.or_else(|| self.check_lag(&conn, stream));
            self.settle(index, conn, reason, registry, now_ns);
        }
    }

    /// A live (caught-up) session that falls further behind than its buffer bound is cut.
    fn check_lag(&self, conn: &Connection, stream: &StreamReader) -> Option<String> {
        let State::LoggedIn {
            next_seq,
            caught_up: true,
            ..
        } = conn.state
        else {
            return None;
        };
        let behind = conn.pending_bytes() as u64 + stream.bytes_from(next_seq);
        (behind > u64::from(self.cfg.outbound_buffer_bytes))
            .then(|| format!("slow reader: {behind} bytes behind"))
    }

    /// Heartbeats and timeouts (DESIGN.md 6), delayed login rejections, forgetting sources.
    pub fn on_timer(&mut self, registry: &Registry, now_ns: u64) {
        self.sweep_sources(now_ns);
        for index in 0..self.conns.len() {
            let Some(mut conn) = self.conns[index].take() else {
                continue;
            };
            let reason = self.timer_check(&mut conn, now_ns);
            self.settle(index, conn, reason, registry, now_ns);
        }
    }

    /// Every deadline tested here is also in [`Gateway::next_timer_ns`] (keep them in step:
    /// a parked loop wakes for no other).
    fn timer_check(&self, conn: &mut Connection, now_ns: u64) -> Option<String> {
        let cfg = &self.cfg;
        let since = |t: u64| now_ns.saturating_sub(t) / NS_PER_MS;
        match conn.state {
            State::AwaitingLogin if since(conn.opened_ns) >= cfg.login_timeout_ms => {
                abort_on_close(conn);
                return Some("no login request in time".into());
            }
            State::AwaitingLogin => return None,
            State::Rejecting { reason, due_ns } => {
                if now_ns >= due_ns && !conn.closing {
                    reject_now(conn, reason);
                    if let Err(e) = conn.flush(now_ns) {
                        return Some(format!("write failed: {e}"));
                    }
                }
                return None;
            }
            State::LoggedIn { .. } if since(conn.last_recv_ns) >= cfg.client_timeout_ms => {
                return Some("client silent for too long".into());
            }
            State::LoggedIn { .. } => {}
        }
        if conn.pending_bytes() > 0 && since(conn.last_progress_ns) >= cfg.client_timeout_ms {
            return Some("client stopped reading".into());
        }
        if conn.pending_bytes() == 0 && since(conn.last_send_ns) >= cfg.heartbeat_ms {
            let heartbeat = Packet::ServerHeartbeat;
            conn.queue(heartbeat.encoded_len(), |buf| heartbeat.encode(buf));
            if let Err(e) = conn.flush(now_ns) {
                return Some(format!("write failed: {e}"));
            }
        }
        None
    }

    /// Work that no socket event announces: deferred reads or accepts, or released replies
    /// a session has not been sent while the loop sends replies (`pumping`; a pump stops
    /// after a bounded number of rounds, and a still-writable socket raises no event).
    pub fn has_unannounced_work(&self, streams: &[StreamReader], pumping: bool) -> bool {
        if self.has_pending_reads() {
            return true;
        }
        pumping
            && self.live.iter().zip(streams).any(|(index, stream)| {
                index.is_some_and(|i| {
                    let conn = self.conns[i].as_ref().expect("a live session's slot");
                    conn.pending_bytes() == 0 && conn.has_unsent(stream)
                })
            })
    }

    /// When [`Gateway::on_timer`] next has work: the earliest heartbeat or timeout of any
    /// connection, by the same tests as `timer_check`'s (`u64::MAX`: none). The event loop
    /// sleeps no longer than that when nothing else is pending.
    pub fn next_timer_ns(&self) -> u64 {
        let cfg = &self.cfg;
        let after_ms = |t: u64, ms: u64| t.saturating_add(ms.saturating_mul(NS_PER_MS));
        let mut next_ns = u64::MAX;
        for conn in self.conns.iter().flatten() {
            let due_ns = match conn.state {
                State::AwaitingLogin => after_ms(conn.opened_ns, cfg.login_timeout_ms),
                State::Rejecting { due_ns, .. } if !conn.closing => due_ns,
                State::Rejecting { .. } => u64::MAX,
                State::LoggedIn { .. } => {
                    let quiet_ns = if conn.pending_bytes() > 0 {
                        after_ms(conn.last_progress_ns, cfg.client_timeout_ms)
                    } else {
                        after_ms(conn.last_send_ns, cfg.heartbeat_ms)
                    };
                    quiet_ns.min(after_ms(conn.last_recv_ns, cfg.client_timeout_ms))
                }
            };
            next_ns = next_ns.min(due_ns);
        }
        next_ns
    }

    /// Hand the lost sessions' accounts to the intake, in the order they were lost. Each is
    /// an input: while the intake has no room (batches wait for their release) they wait
    /// here, at most one per account, and go in first once it has.
    pub fn report_lost<I: Intake>(&mut self, intake: &mut I) {
        if self.lost.is_empty() || !intake.has_room() {
            return;
        }
        for account in self.lost.drain(..) {
            self.lost_flag[account.0 as usize] = false;
            intake.disconnect(account);
        }
    }

    /// Clean shutdown: End of Session to every logged-in session, best-effort flush, close.
    /// The venue stopping is not a lost connection: nothing is canceled for it.
    pub fn shutdown(&mut self, registry: &Registry, now_ns: u64) {
        self.stopping = true;
        for index in 0..self.conns.len() {
            let Some(mut conn) = self.conns[index].take() else {
                continue;
            };
            match conn.state {
                State::LoggedIn { .. } => {
                    let end = Packet::EndOfSession;
                    conn.queue(end.encoded_len(), |buf| end.encode(buf));
                }
                State::Rejecting { reason, .. } if !conn.closing => reject_now(&mut conn, reason),
                _ => {}
            }
            let _ = conn.flush(now_ns);
            self.settle(index, conn, Some("shutdown".into()), registry, now_ns);
        }
    }
}

/// Queue Login Rejected and close once it is written.
fn reject_now(conn: &mut Connection, reason: u8) {
    let rejected = Packet::LoginRejected { reason };
    conn.queue(rejected.encoded_len(), |buf| rejected.encode(buf));
    conn.closing = true;
}

/// Close with a reset rather than a FIN: nothing is owed to a connection that never logged
/// in, and a reset leaves no TIME_WAIT behind. Under a connection flood the server closes
/// thousands of these; with TIME_WAITs, a new connection that reuses a port number has its
/// SYN dropped and waits a second for the retransmission (seen on loopback).
fn abort_on_close(conn: &Connection) {
    let _ = socket2::SockRef::from(&conn.stream).set_linger(Some(std::time::Duration::ZERO));
}
