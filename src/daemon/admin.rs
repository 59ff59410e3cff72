//! Operator commands over a small, authenticated line protocol on `[admin] listen`.
//!
//! On connect the server sends one line, `bourse-admin challenge NONCE` (32 hex digits, fresh
//! random bytes per connection). The client answers with one line, `auth MAC COMMAND`, where
//! COMMAND is `halt SYMBOL`, `resume SYMBOL`, `end-of-day` or `status`, and MAC is the
//! HMAC-SHA256 (64 hex digits) under the shared secret of `bourse-admin v1\nNONCE\nCOMMAND`.
//! The server reads back `ok ...` or `error ...` and closes. A line without a valid MAC gets
//! `error authentication failed` and nothing happens; the nonce makes a captured line useless
//! on any other connection. Commands that change the market are journaled inputs like any
//! order.
//!
//! The secret is the content of `[admin] secret_file`, by default `<journal.dir>.admin-secret`
//! next to the journal directory; the daemon creates it (32 random bytes, hex, mode 0600) if it
//! does not exist, so `bourse admin --config FILE` works on the daemon's machine with no setup,
//! and only the daemon's user can read it. A plain TCP client gets nothing done.
//!
//! Budget: at most `max_connections` connections, each closed after `request_timeout_ms`
//! without a complete line, on EOF, or after its answer; when every slot is taken a new
//! connection closes the oldest one (they are all unanswered), so idle or slow clients can
//! never keep the operator out. The greeting itself is written by the daemon's event loop:
//! receiving it proves that loop is alive, which is what the standby's fencing probe needs
//! ([`probe`]) without holding the primary's secret.

use crate::config::{AdminConfig, Config};
use crate::guard::{LogGate, NS_PER_MS};
use hmac::{KeyInit, Mac};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest request line, newline included (`auth`, 64 hex digits, the command).
const LINE_BYTES_MAX: usize = 256;
/// Random bytes in a challenge.
const NONCE_BYTES: usize = 16;
/// Bytes of a generated secret.
const SECRET_BYTES: usize = 32;
/// Shortest secret accepted from a file.
const SECRET_BYTES_MIN: usize = 16;
const GREETING: &str = "bourse-admin challenge ";
const MAC_CONTEXT: &str = "bourse-admin v1";
/// At most one log line per this many ms about refused or evicted admin clients.
const LOG_INTERVAL_MS: u64 = 10_000;
/// Why a connection that ended without sending anything was closed (not bad bytes: no line).
const CLOSED_BEFORE_A_REQUEST: &str = "closed before a request";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Halt(String),
    Resume(String),
    EndOfDay,
    Status,
    /// Stop the daemon as SIGTERM does (End of Session to every session).
    Shutdown,
    /// Kill switch: cancel the account's resting orders, in one symbol or all.
    CancelAll {
        account: String,
        symbol: Option<String>,
    },
    Block(String),
    Unblock(String),
}

impl Request {
    pub fn parse(line: &str) -> Result<Request, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["halt", symbol] => Ok(Request::Halt(symbol.to_string())),
            ["resume", symbol] => Ok(Request::Resume(symbol.to_string())),
            ["end-of-day"] => Ok(Request::EndOfDay),
            ["status"] => Ok(Request::Status),
            ["shutdown"] => Ok(Request::Shutdown),
            ["cancel-all", account] => Ok(Request::CancelAll {
                account: account.to_string(),
                symbol: None,
            }),
            ["cancel-all", account, symbol] => Ok(Request::CancelAll {
                account: account.to_string(),
                symbol: Some(symbol.to_string()),
            }),
            ["block", account] => Ok(Request::Block(account.to_string())),
            ["unblock", account] => Ok(Request::Unblock(account.to_string())),
            _ => Err(format!(
                "unknown command {line:?} (halt SYMBOL | resume SYMBOL | end-of-day | status | \
                 shutdown | cancel-all ACCOUNT [SYMBOL] | block ACCOUNT | unblock ACCOUNT)"
            )),
        }
    }

    pub fn line(&self) -> String {
        match self {
            Request::Halt(s) => format!("halt {s}"),
            Request::Resume(s) => format!("resume {s}"),
            Request::EndOfDay => "end-of-day".into(),
            Request::Status => "status".into(),
            Request::Shutdown => "shutdown".into(),
            Request::CancelAll {
                account,
                symbol: None,
            } => format!("cancel-all {account}"),
            Request::CancelAll {
                account,
                symbol: Some(symbol),
            } => format!("cancel-all {account} {symbol}"),
            Request::Block(a) => format!("block {a}"),
            Request::Unblock(a) => format!("unblock {a}"),
        }
    }
}

/// The shared admin secret (the bytes of the secret file, surrounding whitespace trimmed).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    pub fn from_bytes(bytes: &[u8]) -> Result<Secret, String> {
        let text = bytes.trim_ascii();
        if text.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "holds {} bytes; at least {SECRET_BYTES_MIN} are needed",
                text.len()
            ));
        }
        Ok(Secret(text.to_vec()))
    }

    /// Read the secret file (client side).
    pub fn load(path: &Path) -> Result<Secret, String> {
        let bytes = std::fs::read(path).map_err(|e| {
            format!(
                "cannot read the admin secret {}: {e} (the daemon creates it at start-up; \
                 is it running with this config, as this user?)",
                path.display()
            )
        })?;
        Secret::from_bytes(&bytes).map_err(|e| format!("admin secret {}: {e}", path.display()))
    }

    /// Daemon side: read the secret file, or create it with a random secret (mode 0600).
    /// Refuses a file that group or others may read.
    pub fn load_or_create(path: &Path) -> Result<Secret, String> {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(path) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(format!(
                        "admin secret {} may be read by others (mode {mode:o}): chmod 600 it",
                        path.display()
                    ));
                }
                Secret::load(path)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Secret::create(path),
            Err(e) => Err(format!("admin secret {}: {e}", path.display())),
        }
    }

    /// Write a new random secret to a private temporary file, then link it into place, so
    /// that nobody ever reads a partial file and an existing secret is never replaced.
    fn create(path: &Path) -> Result<Secret, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            format!(
                "cannot create the admin secret {}: {what}: {e}",
                path.display()
            )
        };
        let mut random = [0u8; SECRET_BYTES];
        getrandom::fill(&mut random).map_err(|e| fail("random bytes", &e))?;
        let text = format!("{}\n", hex(&random));
        let mut tmp_name = path.as_os_str().to_os_string();
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp_name);
        let _ = std::fs::remove_file(&tmp);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail("write", &e));
        }
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                tracing::info!(path = %path.display(), "admin secret created (mode 0600)");
                Secret::from_bytes(text.as_bytes()).map_err(|e| fail("read back", &e))
            }
            // Someone created it meanwhile: theirs stands.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Secret::load(path),
            Err(e) => Err(fail("link", &e)),
        }
    }

    fn mac(&self, nonce: &str, command: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(MAC_CONTEXT.as_bytes());
        mac.update(b"\n");
        mac.update(nonce.as_bytes());
        mac.update(b"\n");
        mac.update(command.as_bytes());
        mac
    }

    /// The `auth` line answering `nonce` for `command`.
    pub fn auth_line(&self, nonce: &str, command: &str) -> String {
        let tag = self.mac(nonce, command).finalize().into_bytes();
        format!("auth {} {command}", hex(&tag))
    }

    /// Does `mac_hex` authenticate `command` for `nonce`? Constant-time comparison.
    fn verify(&self, nonce: &str, command: &str, mac_hex: &str) -> bool {
        let Some(tag) = unhex::<32>(mac_hex) else {
            return false;
        };
        self.mac(nonce, command).verify_slice(&tag).is_ok()
    }
}

/// Where the admin secret of `config` lives: `[admin] secret_file`, or the journal directory's
/// path with `.admin-secret` appended (beside it: the journal directory holds only segments).
pub fn secret_path(config: &Config) -> Result<PathBuf, String> {
    if let Some(path) = &config.admin.secret_file {
        return Ok(path.clone());
    }
    let dir = &config.journal.dir;
    let Some(name) = dir.file_name() else {
        return Err(format!(
            "journal.dir {:?} has no name to derive the admin secret file from: set admin.secret_file",
            dir.display()
        ));
    };
    let mut file = name.to_os_string();
    file.push(".admin-secret");
    Ok(dir.with_file_name(file))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Split `auth MAC COMMAND` and check the MAC; the command, parsed, if it holds.
fn authenticate(secret: &Secret, nonce: &str, line: &str) -> Result<Request, String> {
    let failed = || "authentication failed".to_string();
    let rest = line.strip_prefix("auth ").ok_or_else(failed)?;
    let (mac_hex, command) = rest.split_once(' ').ok_or_else(failed)?;
    let command = command.trim();
    if !secret.verify(nonce, command, mac_hex) {
        return Err(failed());
    }
    Request::parse(command)
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    buf: [u8; LINE_BYTES_MAX],
    len: usize,
    opened_ns: u64,
    nonce: String,
}

pub struct AdminServer {
    listener: TcpListener,
    token_base: usize,
    conns: Vec<Option<Conn>>,
    secret: Secret,
    request_timeout_ms: u64,
    /// Refused requests and evictions: logged at most once per `LOG_INTERVAL_MS`.
    refused_log: LogGate,
    evicted_log: LogGate,
    /// The last accept loop stopped before the listener said "would block" (its bound, or an
    /// error such as no free descriptor): connections may wait in the backlog, and mio is
    /// edge-triggered, so the timer accepts again. Otherwise the timer leaves the listener
    /// alone (it used to try every 10 ms: ~100 failed `accept4` calls a second, idle or not).
    backlog_maybe_left: bool,
}

impl AdminServer {
    pub fn bind(
        config: &AdminConfig,
        secret: Secret,
        registry: &Registry,
        token_base: usize,
    ) -> io::Result<AdminServer> {
        let mut listener = crate::guard::listen(config.listen, crate::guard::LISTEN_BACKLOG)?;
        registry.register(&mut listener, Token(token_base), Interest::READABLE)?;
        let slots = config.max_connections.max(1) as usize;
        Ok(AdminServer {
            listener,
            token_base,
            conns: (0..slots).map(|_| None).collect(),
            secret,
            request_timeout_ms: config.request_timeout_ms,
            refused_log: LogGate::default(),
            evicted_log: LogGate::default(),
            backlog_maybe_left: false,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn owns(&self, token: Token) -> bool {
        (self.token_base..=self.token_base + self.conns.len()).contains(&token.0)
    }

    /// Handle an event; returns an authenticated request (or why the line is refused) and
    /// the connection to answer.
    pub fn on_event(
        &mut self,
        token: Token,
        registry: &Registry,
        now_ns: u64,
    ) -> Option<(usize, Result<Request, String>)> {
        if token.0 == self.token_base {
            self.accept(registry, now_ns);
            return None;
        }
        let index = token.0 - self.token_base - 1;
        let line = match self.read_line(index)? {
            Ok(line) => line,
            Err(why) => {
                // Bad bytes get a line (DESIGN.md 7), rate-limited like refusals; a client
                // that just goes away does not.
                if why != CLOSED_BEFORE_A_REQUEST
                    && let Some(conn) = &self.conns[index]
                    && let Some(suppressed) = self.refused_log.pass(now_ns, LOG_INTERVAL_MS)
                {
                    tracing::warn!(peer = %conn.peer, suppressed, "admin connection closed: {why}");
                }
                self.close(index, registry, why);
                return None;
            }
        };
        let conn = self.conns[index].as_ref()?;
        let result = authenticate(&self.secret, &conn.nonce, &line);
        if let Err(why) = &result
            && let Some(suppressed) = self.refused_log.pass(now_ns, LOG_INTERVAL_MS)
        {
            tracing::warn!(peer = %conn.peer, suppressed, "admin request refused: {why}");
        }
        Some((index, result))
    }

    /// Read what the connection has. `None`: no complete line yet; `Some(Err)`: close it.
    fn read_line(&mut self, index: usize) -> Option<Result<String, &'static str>> {
        let conn = self.conns.get_mut(index)?.as_mut()?;
        // Bounded: each read fills the buffer further or ends the loop.
        for _ in 0..=LINE_BYTES_MAX {
            if let Some(end) = conn.buf[..conn.len].iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&conn.buf[..end]).trim().to_string();
                return Some(Ok(line));
            }
            if conn.len == LINE_BYTES_MAX {
                return Some(Err("request line too long"));
            }
            match conn.stream.read(&mut conn.buf[conn.len..]) {
                Ok(0) => return Some(Err(CLOSED_BEFORE_A_REQUEST)),
                Ok(n) => conn.len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(Err("read failed")),
            }
        }
        None
    }

    fn accept(&mut self, registry: &Registry, now_ns: u64) {
        // Bounded by the backlog we are willing to serve per event; mio is edge-triggered,
        // so stopping early would strand connections: the bound is generous, and the timer
        // comes back for what is left.
        self.backlog_maybe_left = true;
        for _ in 0..4 * self.conns.len() + 16 {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) => {
                    self.backlog_maybe_left = e.kind() != io::ErrorKind::WouldBlock;
                    return;
                }
            };
            let index = self.free_slot(registry, now_ns);
            let mut nonce = [0u8; NONCE_BYTES];
            if let Err(e) = getrandom::fill(&mut nonce) {
                tracing::error!(%peer, "admin connection closed: no random bytes: {e}");
                continue;
            }
            let mut conn = Conn {
                stream,
                peer,
                buf: [0; LINE_BYTES_MAX],
                len: 0,
                opened_ns: now_ns,
                nonce: hex(&nonce),
            };
            // A few dozen bytes into an empty socket buffer: one write.
            let greeting = format!("{GREETING}{}\n", conn.nonce);
            if conn.stream.write_all(greeting.as_bytes()).is_err() {
                continue;
            }
            let token = Token(self.token_base + 1 + index);
            if registry
                .register(&mut conn.stream, token, Interest::READABLE)
                .is_ok()
            {
                self.conns[index] = Some(conn);
            }
        }
    }

    /// A free slot; when there is none, the oldest connection is closed to make one.
    fn free_slot(&mut self, registry: &Registry, now_ns: u64) -> usize {
        if let Some(index) = self.conns.iter().position(Option::is_none) {
            return index;
        }
        let oldest = (0..self.conns.len())
            .min_by_key(|&i| self.conns[i].as_ref().map_or(0, |c| c.opened_ns))
            .expect("at least one slot");
        if let Some(suppressed) = self.evicted_log.pass(now_ns, LOG_INTERVAL_MS) {
            tracing::warn!(
                slots = self.conns.len(),
                suppressed,
                "admin connections all taken: closing the oldest for a new one"
            );
        }
        if let Some(conn) = &self.conns[oldest] {
            // A reset: nothing is owed, and no TIME_WAIT is left behind.
            let _ = socket2::SockRef::from(&conn.stream).set_linger(Some(Duration::ZERO));
        }
        self.close(oldest, registry, "evicted for a newer connection");
        oldest
    }

    fn close(&mut self, index: usize, registry: &Registry, why: &str) {
        if let Some(mut conn) = self.conns[index].take() {
            tracing::debug!(peer = %conn.peer, "admin connection closed: {why}");
            let _ = registry.deregister(&mut conn.stream);
        }
    }

    /// An open connection (its request timeout runs) or a backlog left to accept: work for
    /// [`AdminServer::on_timer`] that no socket event announces.
    pub fn has_timed_work(&self) -> bool {
        self.backlog_maybe_left || self.conns.iter().any(Option::is_some)
    }

    /// Close connections that have not sent their request in time, and accept what the
    /// last event's bounded accept loop left in the backlog.
    pub fn on_timer(&mut self, registry: &Registry, now_ns: u64) {
        if self.backlog_maybe_left {
            self.accept(registry, now_ns);
        }
        let timeout_ns = self.request_timeout_ms.saturating_mul(NS_PER_MS);
        for index in 0..self.conns.len() {
            let late = self.conns[index]
                .as_ref()
                .is_some_and(|c| now_ns.saturating_sub(c.opened_ns) >= timeout_ns);
            if late {
                self.close(index, registry, "no request in time");
            }
        }
    }

    /// Send the one-line answer and close.
    pub fn respond(&mut self, index: usize, registry: &Registry, answer: &str) {
        let Some(mut conn) = self.conns[index].take() else {
            return;
        };
        // The answer is a few dozen bytes: it fits an empty socket buffer in one write.
        let _ = conn.stream.write_all(format!("{answer}\n").as_bytes());
        let _ = registry.deregister(&mut conn.stream);
    }
}

/// Connect and read the greeting: the nonce.
fn open(addr: SocketAddr, timeout: Duration) -> io::Result<(std::net::TcpStream, String)> {
    let stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    let mut greeting = String::new();
    BufReader::new(&stream)
        .take(LINE_BYTES_MAX as u64)
        .read_line(&mut greeting)?;
    let nonce = greeting
        .trim_end()
        .strip_prefix(GREETING)
        .filter(|n| n.len() == 2 * NONCE_BYTES)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a bourse admin port (greeting {greeting:?})"),
            )
        })?;
    Ok((stream, nonce.to_string()))
}

/// Client side, for `bourse admin`: send one authenticated request, return the answer line.
pub fn send(
    addr: SocketAddr,
    secret: &Secret,
    request: &Request,
    timeout: Duration,
) -> io::Result<String> {
    let (mut stream, nonce) = open(addr, timeout)?;
    let line = secret.auth_line(&nonce, &request.line());
    stream.write_all(format!("{line}\n").as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream)
        .take(LINE_BYTES_MAX as u64 * 4)
        .read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

/// Load the secret of `config` and send `request` to its admin address.
pub fn send_with_config(
    config: &Config,
    request: &Request,
    timeout: Duration,
) -> Result<String, String> {
    let secret = Secret::load(&secret_path(config)?)?;
    send(config.admin.listen, &secret, request, timeout).map_err(|e| {
        format!(
            "cannot reach the daemon's admin port {}: {e}",
            config.admin.listen
        )
    })
}

/// Fencing probe (no secret needed): does a bourse daemon's event loop answer on `addr`?
pub fn probe(addr: SocketAddr, timeout: Duration) -> bool {
    open(addr, timeout).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_commands() {
        assert_eq!(
            Request::parse("halt AAPL"),
            Ok(Request::Halt("AAPL".into()))
        );
        assert_eq!(
            Request::parse(" resume  MSFT "),
            Ok(Request::Resume("MSFT".into()))
        );
        assert_eq!(Request::parse("end-of-day"), Ok(Request::EndOfDay));
        assert!(Request::parse("halt").is_err());
        assert!(Request::parse("reboot now").is_err());
        for r in [
            Request::Halt("X".into()),
            Request::EndOfDay,
            Request::Status,
        ] {
            assert_eq!(Request::parse(&r.line()), Ok(r));
        }
    }

    fn secret() -> Secret {
        Secret::from_bytes(b"0123456789abcdef0123456789abcdef\n").unwrap()
    }

    #[test]
    fn only_the_right_mac_for_this_nonce_and_command_authenticates() {
        let s = secret();
        let nonce = "00112233445566778899aabbccddeeff";
        let line = s.auth_line(nonce, "halt AAPL");
        assert_eq!(
            authenticate(&s, nonce, &line),
            Ok(Request::Halt("AAPL".into()))
        );
        // Another nonce (a replay on another connection), command or secret: refused.
        let other_nonce = "ffeeddccbbaa99887766554433221100";
        assert!(authenticate(&s, other_nonce, &line).is_err());
        let swapped = line.replace("halt AAPL", "end-of-day");
        assert!(authenticate(&s, nonce, &swapped).is_err());
        let other = Secret::from_bytes(b"another secret of enough bytes").unwrap();
        assert!(authenticate(&other, nonce, &line).is_err());
        for bad in ["end-of-day", "auth", "auth 00 status", "auth zz status", ""] {
            assert_eq!(
                authenticate(&s, nonce, bad),
                Err("authentication failed".into()),
                "{bad:?}"
            );
        }
        // A valid MAC over a command that does not parse: the parse error.
        let unknown = s.auth_line(nonce, "reboot");
        assert!(
            authenticate(&s, nonce, &unknown)
                .unwrap_err()
                .contains("unknown command")
        );
    }

    /// Greetings each client has received so far (non-blocking reads).
    fn greeted(clients: &mut [std::net::TcpStream]) -> usize {
        let mut count = 0;
        for c in clients.iter_mut() {
            let mut buf = [0u8; 128];
            if matches!(c.read(&mut buf), Ok(n) if n > 0) {
                count += 1;
            }
        }
        count
    }

    /// The event's accept loop is bounded; the timer accepts what it left, and only then: a
    /// drained listener is not polled by the timer (mio reports new connections).
    #[test]
    fn the_timer_accepts_only_what_a_bounded_accept_loop_left() {
        let poll = mio::Poll::new().unwrap();
        let mut config = Config::embedded_default().admin;
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.max_connections = 1; // the accept loop's bound: 4 x 1 + 16 = 20
        let mut server = AdminServer::bind(&config, secret(), poll.registry(), 100).unwrap();
        let addr = server.local_addr().unwrap();
        let mut clients: Vec<_> = (0..30)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        for c in &clients {
            c.set_nonblocking(true).unwrap();
        }
        let settle = || std::thread::sleep(Duration::from_millis(50));
        settle();
        assert!(server.on_event(Token(100), poll.registry(), 0).is_none());
        settle();
        assert_eq!(greeted(&mut clients), 20, "the bound");
        server.on_timer(poll.registry(), 1);
        settle();
        assert_eq!(greeted(&mut clients), 10, "the rest, by the timer");
        let mut late = std::net::TcpStream::connect(addr).unwrap();
        late.set_nonblocking(true).unwrap();
        settle();
        server.on_timer(poll.registry(), 2);
        settle();
        assert_eq!(
            greeted(std::slice::from_mut(&mut late)),
            0,
            "left to its event"
        );
        assert!(server.on_event(Token(100), poll.registry(), 3).is_none());
        settle();
        assert_eq!(greeted(std::slice::from_mut(&mut late)), 1);
    }

    #[test]
    fn secrets_are_long_enough_and_trimmed() {
        assert!(Secret::from_bytes(b"short\n").is_err());
        assert!(Secret::from_bytes(b"   \n").is_err());
        assert_eq!(
            secret(),
            Secret::from_bytes(b"  0123456789abcdef0123456789abcdef").unwrap()
        );
    }

    #[test]
    fn the_daemon_creates_a_private_secret_and_reuses_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.admin-secret");
        let first = Secret::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(first.0.len(), 2 * SECRET_BYTES);
        assert_eq!(
            Secret::load_or_create(&path).unwrap(),
            first,
            "kept across starts"
        );
        assert_eq!(Secret::load(&path).unwrap(), first);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::load_or_create(&path).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        let missing = Secret::load(&dir.path().join("nope")).unwrap_err();
        assert!(
            missing.contains("cannot read the admin secret"),
            "{missing}"
        );
    }

    #[test]
    fn the_secret_path_is_beside_the_journal_unless_configured() {
        let mut c = Config::embedded_default();
        assert_eq!(
            secret_path(&c).unwrap(),
            PathBuf::from("data/journal.admin-secret")
        );
        c.journal.dir = "/var/lib/bourse/journal/".into();
        assert_eq!(
            secret_path(&c).unwrap(),
            PathBuf::from("/var/lib/bourse/journal.admin-secret")
        );
        c.journal.dir = "/".into();
        assert!(secret_path(&c).is_err());
        c.admin.secret_file = Some("/etc/bourse/admin.key".into());
        assert_eq!(
            secret_path(&c).unwrap(),
            PathBuf::from("/etc/bourse/admin.key")
        );
    }
}
