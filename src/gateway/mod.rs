//! Order-entry gateway: SoupBinTCP 4.00 sessions carrying OUCH 4.2 (DESIGN.md 6).
//!
//! Each account has one sequenced OUCH stream (see [`crate::stream`]); a session is a cursor
//! into it, so re-login replays from any number and a slow client only ever costs its own
//! fixed write buffer. Inbound OUCH is checked (type and length) before it is handed to the
//! sequencer; bad bytes close that one connection with a log line.

mod connection;
mod login;

pub use login::{Admitted, decide};

use crate::config::{AccountConfig, GatewayConfig};
use crate::stream::StreamReader;
use crate::types::AccountId;
use crate::wire::ascii::SessionId;
use crate::wire::ouch::Inbound;
use crate::wire::soupbin::{self, Packet};
use connection::{Connection, State};
use mio::net::TcpListener;
use mio::{Interest, Registry, Token};
use std::io;
use std::net::SocketAddr;

const NS_PER_MS: u64 = 1_000_000;
/// Reads per readable event before giving other connections a turn.
const READS_PER_EVENT_MAX: u32 = 16;

/// Where valid inbound OUCH messages go (the sequencer): the bytes as received, to journal,
/// and the decoded message, so nothing decodes twice.
pub trait Intake {
    fn submit(&mut self, account: AccountId, raw: &[u8], message: &Inbound);
    /// May another message be submitted now? When not, the gateway leaves the rest of the
    /// connection's bytes unread until it may (back-pressure).
    fn has_room(&self) -> bool {
        true
    }
}

pub struct Gateway {
    listener: TcpListener,
    token_base: usize,
    conns: Vec<Option<Connection>>,
    /// Connection index of each account's logged-in session.
    live: Vec<Option<usize>>,
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
        let mut listener = TcpListener::bind(cfg.listen)?;
        registry.register(&mut listener, Token(token_base), Interest::READABLE)?;
        let max = cfg.max_connections as usize;
        Ok(Gateway {
            listener,
            token_base,
            conns: (0..max).map(|_| None).collect(),
            live: vec![None; accounts.len()],
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

    pub fn on_event<I: Intake>(
        &mut self,
        token: Token,
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
        self.service(index, registry, now_ns, streams, intake);
    }

    /// Serve connections whose read budget ran out on their last event.
    pub fn on_idle<I: Intake>(
        &mut self,
        registry: &Registry,
        now_ns: u64,
        streams: &[StreamReader],
        intake: &mut I,
    ) {
        let pending = self.read_again.len();
        for _ in 0..pending {
            let index = self.read_again.remove(0);
            self.service(index, registry, now_ns, streams, intake);
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
        !self.read_again.is_empty()
    }

    fn accept(&mut self, registry: &Registry, now_ns: u64) {
        for _ in 0..self.conns.len() + 1 {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("gateway accept failed: {e}");
                    return;
                }
            };
            let Some(index) = self.conns.iter().position(Option::is_none) else {
                tracing::warn!(%peer, "gateway connection refused: {} connections open", self.conns.len());
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
            tracing::info!(%peer, "gateway connection opened");
            self.conns[index] = Some(Connection::new(stream, peer, now_ns));
        }
    }

    fn service<I: Intake>(
        &mut self,
        index: usize,
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
        let mut reads = 0;
        while reason.is_none() && !conn.closing {
            if reads == READS_PER_EVENT_MAX {
                if !self.read_again.contains(&index) {
                    self.read_again.push(index);
                }
                break;
            }
            reads += 1;
            match conn.receive(now_ns) {
                Ok(true) => reason = self.drain_packets(&mut conn, index, streams, intake),
                Ok(false) => reason = Some("peer closed the connection".into()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => reason = Some(format!("read failed: {e}")),
            }
        }
        if let Err(e) = conn.flush(now_ns) {
            reason.get_or_insert(format!("write failed: {e}"));
        }
        self.settle(index, conn, reason, registry);
    }

    /// Put a connection back, or close it (with a log line) if it is done.
    fn settle(
        &mut self,
        index: usize,
        mut conn: Connection,
        reason: Option<String>,
        registry: &Registry,
    ) {
        let done = reason.is_some() || (conn.closing && conn.pending_bytes() == 0);
        if !done {
            self.conns[index] = Some(conn);
            return;
        }
        let why = reason.unwrap_or_else(|| "session ended".into());
        if let State::LoggedIn { session, .. } = conn.state {
            self.live[session.account.0 as usize] = None;
            tracing::info!(peer = %conn.peer, account = session.account.0, "gateway session closed: {why}");
        } else {
            tracing::info!(peer = %conn.peer, "gateway connection closed: {why}");
        }
        let _ = registry.deregister(&mut conn.stream);
    }

    /// Handle every complete packet; Some(reason) closes the connection.
    fn drain_packets<I: Intake>(
        &mut self,
        conn: &mut Connection,
        index: usize,
        streams: &[StreamReader],
        intake: &mut I,
    ) -> Option<String> {
        // Bounded by the framing buffer: each packet consumes at least 3 bytes of it.
        for _ in 0..soupbin::CLIENT_MAX_PACKET_LEN + 2 {
            if matches!(conn.state, State::LoggedIn { .. }) && !intake.has_room() {
                // Leave the rest framed but unread; this connection is served again later.
                if !self.read_again.contains(&index) {
                    self.read_again.push(index);
                }
                return None;
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
                (State::LoggedIn { .. }, Packet::LogoutRequest) => return Some("logout".into()),
                (State::LoggedIn { .. }, other) => {
                    return Some(format!(
                        "unexpected packet {:?} after login",
                        other.kind() as char
                    ));
                }
            };
            if let Some(request) = login {
                self.login(conn, index, &request, streams);
                if conn.closing {
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
            Err(reason) => {
                let rejected = Packet::LoginRejected { reason };
                conn.queue(rejected.encoded_len(), |buf| rejected.encode(buf));
                conn.closing = true;
                tracing::info!(peer = %conn.peer, reason = %(reason as char), "gateway login rejected");
            }
        }
    }

    /// Send every released sequenced message to its session (call after the journal flush,
    /// so a reply never leaves before its input is durable). Disconnects slow readers.
    pub fn pump(&mut self, streams: &[StreamReader], registry: &Registry, now_ns: u64) {
        for index in 0..self.conns.len() {
            let Some(mut conn) = self.conns[index].take() else {
                continue;
            };
            let mut reason = None;
            if let State::LoggedIn { session, .. } = conn.state {
                let stream = &streams[session.account.0 as usize];
                conn.fill_from(stream);
                if let Err(e) = conn.flush(now_ns) {
                    reason = Some(format!("write failed: {e}"));
                }
                reason = reason.or_else(|| self.check_lag(&conn, stream));
            }
            self.settle(index, conn, reason, registry);
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

    /// Heartbeats and timeouts (DESIGN.md 6).
    pub fn on_timer(&mut self, registry: &Registry, now_ns: u64) {
        for index in 0..self.conns.len() {
            let Some(mut conn) = self.conns[index].take() else {
                continue;
            };
            let reason = self.timer_check(&mut conn, now_ns);
            self.settle(index, conn, reason, registry);
        }
    }

    fn timer_check(&self, conn: &mut Connection, now_ns: u64) -> Option<String> {
        let cfg = &self.cfg;
        let since = |t: u64| now_ns.saturating_sub(t) / NS_PER_MS;
        match conn.state {
            State::AwaitingLogin if since(conn.opened_ns) >= cfg.login_timeout_ms => {
                return Some("no login request in time".into());
            }
            State::AwaitingLogin => return None,
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

    /// Clean shutdown: End of Session to every logged-in session, best-effort flush, close.
    pub fn shutdown(&mut self, registry: &Registry, now_ns: u64) {
        for index in 0..self.conns.len() {
            let Some(mut conn) = self.conns[index].take() else {
                continue;
            };
            if matches!(conn.state, State::LoggedIn { .. }) {
                let end = Packet::EndOfSession;
                conn.queue(end.encoded_len(), |buf| end.encode(buf));
            }
            let _ = conn.flush(now_ns);
            self.settle(index, conn, Some("shutdown".into()), registry);
        }
    }
}
