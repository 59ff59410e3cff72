//! Operator commands over a small line protocol on `[admin] listen`.
//!
//! A client sends one line (`halt SYMBOL`, `resume SYMBOL`, `end-of-day`, `status`) and reads
//! one line back (`ok ...` or `error ...`), then the server closes. Commands that change the
//! market are journaled inputs like any order.

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Longest request line, newline included.
const LINE_BYTES_MAX: usize = 256;
/// Admin connections open at once.
const CONNECTIONS_MAX: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Halt(String),
    Resume(String),
    EndOfDay,
    Status,
    /// Stop the daemon as SIGTERM does (End of Session to every session).
    Shutdown,
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
            _ => Err(format!(
                "unknown command {line:?} (halt SYMBOL | resume SYMBOL | end-of-day | status | shutdown)"
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
        }
    }
}

struct Conn {
    stream: TcpStream,
    buf: [u8; LINE_BYTES_MAX],
    len: usize,
}

pub struct AdminServer {
    listener: TcpListener,
    token_base: usize,
    conns: Vec<Option<Conn>>,
}

impl AdminServer {
    pub fn bind(
        addr: SocketAddr,
        registry: &Registry,
        token_base: usize,
    ) -> io::Result<AdminServer> {
        let mut listener = TcpListener::bind(addr)?;
        registry.register(&mut listener, Token(token_base), Interest::READABLE)?;
        Ok(AdminServer {
            listener,
            token_base,
            conns: (0..CONNECTIONS_MAX).map(|_| None).collect(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn owns(&self, token: Token) -> bool {
        (self.token_base..=self.token_base + CONNECTIONS_MAX).contains(&token.0)
    }

    /// Handle an event; returns a complete request and the connection to answer.
    pub fn on_event(
        &mut self,
        token: Token,
        registry: &Registry,
    ) -> Option<(usize, Result<Request, String>)> {
        if token.0 == self.token_base {
            self.accept(registry);
            return None;
        }
        let index = token.0 - self.token_base - 1;
        let conn = self.conns[index].as_mut()?;
        loop {
            if conn.len == LINE_BYTES_MAX {
                return Some((index, Err("request line too long".into())));
            }
            match conn.stream.read(&mut conn.buf[conn.len..]) {
                Ok(0) => break,
                Ok(n) => conn.len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
            if let Some(end) = conn.buf[..conn.len].iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&conn.buf[..end]).trim().to_string();
                return Some((index, Request::parse(&line)));
            }
        }
        None
    }

    fn accept(&mut self, registry: &Registry) {
        for _ in 0..CONNECTIONS_MAX + 1 {
            let Ok((mut stream, peer)) = self.listener.accept() else {
                return;
            };
            let Some(index) = self.conns.iter().position(Option::is_none) else {
                tracing::warn!(%peer, "admin connection refused: too many open");
                continue;
            };
            let token = Token(self.token_base + 1 + index);
            if registry
                .register(&mut stream, token, Interest::READABLE)
                .is_ok()
            {
                self.conns[index] = Some(Conn {
                    stream,
                    buf: [0; LINE_BYTES_MAX],
                    len: 0,
                });
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

/// Client side, for `bourse admin`: send one request, return the answer line.
pub fn send(addr: SocketAddr, request: &Request, timeout: Duration) -> io::Result<String> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(format!("{}\n", request.line()).as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
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
}
