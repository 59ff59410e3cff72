//! A blocking SoupBinTCP 4.00 / OUCH 4.2 client: what the tools, the load generator and the
//! end-to-end tests use to talk to the gateway like a broker would.

use crate::types::Alpha;
use crate::wire::ascii::SessionId;
use crate::wire::ouch::{Inbound, Outbound};
use crate::wire::soupbin::{self, FrameReader, LoginRequest, Packet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// What the server sent, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A sequenced OUCH message with its SoupBinTCP sequence number.
    Sequenced(u64, Outbound),
    /// A sequenced payload that is not valid outbound OUCH (reported, never dropped).
    Undecodable(u64, Vec<u8>),
    Heartbeat,
    EndOfSession,
    /// The server closed the connection.
    Closed,
}

pub struct OuchClient {
    stream: TcpStream,
    reader: FrameReader,
    /// Sequence number of the next sequenced packet.
    pub next_seq: u64,
    pub session: SessionId,
    last_send: Instant,
}

#[derive(Debug)]
pub enum LoginError {
    Io(io::Error),
    Rejected(u8),
    Protocol(String),
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginError::Io(e) => write!(f, "{e}"),
            LoginError::Rejected(r) => write!(f, "login rejected {:?}", *r as char),
            LoginError::Protocol(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for LoginError {}

impl From<io::Error> for LoginError {
    fn from(e: io::Error) -> Self {
        LoginError::Io(e)
    }
}

impl OuchClient {
    /// Connect and log in; `session` blank means the current session, `sequence` is the next
    /// sequence number wanted (0 = only new messages).
    pub fn login(
        addr: SocketAddr,
        username: &str,
        password: &str,
        session: &str,
        sequence: u64,
        timeout: Duration,
    ) -> Result<OuchClient, LoginError> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        OuchClient::login_on(stream, username, password, session, sequence, timeout)
    }

    /// Log in on a connection already made (`login` without the connect): for callers that
    /// give the TCP handshake its own budget, e.g. one that allows a SYN retransmission.
    pub fn login_on(
        stream: TcpStream,
        username: &str,
        password: &str,
        session: &str,
        sequence: u64,
        timeout: Duration,
    ) -> Result<OuchClient, LoginError> {
        stream.set_nodelay(true)?;
        let mut client = OuchClient {
            stream,
            reader: FrameReader::new(soupbin::MAX_PACKET_LEN),
            next_seq: 0,
            session: SessionId::BLANK,
            last_send: Instant::now(),
        };
        let bad = |what: &str| LoginError::Protocol(format!("{what} is not valid in a login"));
        let request = LoginRequest {
            username: Alpha::from_str_padded(username).ok_or_else(|| bad("username"))?,
            password: Alpha::from_str_padded(password).ok_or_else(|| bad("password"))?,
            session: SessionId::new(session).ok_or_else(|| bad("session"))?,
            sequence,
            heartbeat_timeout_ms: None,
        };
        client.send_packet(&Packet::LoginRequest(request))?;
        client.await_login(timeout)?;
        Ok(client)
    }

    fn await_login(&mut self, timeout: Duration) -> Result<(), LoginError> {
        self.stream.set_read_timeout(Some(timeout))?;
        loop {
            if let Some(packet) = self.reader.next_packet() {
                return match packet.map_err(|e| LoginError::Protocol(e.to_string()))? {
                    Packet::LoginAccepted { session, sequence } => {
                        self.session = session;
                        self.next_seq = sequence;
                        Ok(())
                    }
                    Packet::LoginRejected { reason } => Err(LoginError::Rejected(reason)),
                    Packet::Debug(_) => continue,
                    other => Err(LoginError::Protocol(format!(
                        "unexpected {:?} before login",
                        other.kind() as char
                    ))),
                };
            }
            let space = self.reader.read_space();
            let n = self.stream.read(space)?;
            if n == 0 {
                return Err(LoginError::Protocol(
                    "connection closed during login".into(),
                ));
            }
            self.reader.commit(n);
        }
    }

    /// Give up the client after login: the socket and the frame reader, which may already
    /// hold bytes received after Login Accepted. For tools that drive many sessions from one
    /// event loop (the load generator); `next_seq` and `session` stay readable before this.
    pub fn into_parts(self) -> (TcpStream, FrameReader) {
        (self.stream, self.reader)
    }

    pub fn send_packet(&mut self, packet: &Packet<'_>) -> io::Result<()> {
        let mut buf = [0u8; 128];
        let n = packet.encode(&mut buf);
        self.stream.write_all(&buf[..n])?;
        self.last_send = Instant::now();
        Ok(())
    }

    /// Send one OUCH message in an Unsequenced Data packet.
    pub fn send(&mut self, message: &Inbound) -> io::Result<()> {
        let mut payload = [0u8; 64];
        let n = message.encode(&mut payload);
        self.send_raw(&payload[..n])
    }

    /// Send arbitrary bytes as an Unsequenced Data payload (tests of bad input).
    pub fn send_raw(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut buf = vec![0u8; soupbin::HEADER_LEN + payload.len()];
        buf[soupbin::HEADER_LEN..].copy_from_slice(payload);
        soupbin::write_header(&mut buf, soupbin::kind::UNSEQUENCED_DATA, payload.len());
        self.stream.write_all(&buf)?;
        self.last_send = Instant::now();
        Ok(())
    }

    /// Raw bytes on the socket (tests of framing errors, bursts of framed messages).
    pub fn send_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// One OUCH message framed as an Unsequenced Data packet (to send many at once).
    pub fn frame(message: &Inbound) -> Vec<u8> {
        let mut payload = [0u8; 64];
        let n = message.encode(&mut payload);
        let mut buf = vec![0u8; soupbin::HEADER_LEN + n];
        buf[soupbin::HEADER_LEN..].copy_from_slice(&payload[..n]);
        soupbin::write_header(&mut buf, soupbin::kind::UNSEQUENCED_DATA, n);
        buf
    }

    /// Another handle on the socket (a writer thread beside the reader).
    pub fn try_clone_stream(&self) -> io::Result<TcpStream> {
        self.stream.try_clone()
    }

    /// Client heartbeat if nothing was sent for a second (keeps the session alive).
    pub fn heartbeat_if_due(&mut self) -> io::Result<()> {
        if self.last_send.elapsed() >= Duration::from_secs(1) {
            self.send_packet(&Packet::ClientHeartbeat)?;
        }
        Ok(())
    }

    pub fn logout(&mut self) -> io::Result<()> {
        self.send_packet(&Packet::LogoutRequest)
    }

    /// The next thing the server sends, waiting at most `timeout`; `None` on timeout.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<Received>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(packet) = self.reader.next_packet() {
                let packet = packet
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let received = match packet {
                    Packet::SequencedData(payload) => {
                        let seq = self.next_seq;
                        self.next_seq += 1;
                        match Outbound::decode(payload) {
                            Ok(m) => Received::Sequenced(seq, m),
                            Err(_) => Received::Undecodable(seq, payload.to_vec()),
                        }
                    }
                    Packet::ServerHeartbeat => Received::Heartbeat,
                    Packet::EndOfSession => Received::EndOfSession,
                    Packet::Debug(_) | Packet::UnsequencedData(_) => continue,
                    other => {
                        let m = format!("unexpected packet {:?}", other.kind() as char);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, m));
                    }
                };
                return Ok(Some(received));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.stream.set_read_timeout(Some(deadline - now))?;
            let space = self.reader.read_space();
            match self.stream.read(space) {
                Ok(0) => return Ok(Some(Received::Closed)),
                Ok(n) => self.reader.commit(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Ok(Some(Received::Closed));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Receive sequenced messages until `count` arrived or `timeout` passed (heartbeats skipped).
    pub fn recv_messages(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> io::Result<Vec<(u64, Outbound)>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.recv(left)? {
                Some(Received::Sequenced(seq, m)) => out.push((seq, m)),
                Some(Received::Heartbeat) => {}
                Some(Received::Undecodable(seq, bytes)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("message {seq} undecodable: {bytes:?}"),
                    ));
                }
                Some(Received::EndOfSession) | Some(Received::Closed) | None => break,
            }
        }
        Ok(out)
    }
}
