//! MoldUDP64 re-request server (DESIGN.md 5, PROTOCOLS.md 3.2): answers each valid request
//! by unicast to its source with ONE downstream packet holding the messages from the requested
//! sequence number on — at most the requested count, at most `max_payload_bytes`. The client
//! re-requests the rest (Nassau's behaviour; the spec is silent).
//!
//! Ignored, with a debug log line and no answer: datagrams that are not exactly a 20-byte
//! request, other sessions, a count of 0, sequence number 0, and sequence numbers beyond the
//! last published message (nothing to send yet; the client asks again after the next heartbeat).
//!
//! Work per request is bounded by one packet. Runs on its own thread ([`RerequestServer::spawn`])
//! blocked in `recv_from` with a short timeout so that it notices its stop flag promptly.

use super::ServerHandle;
use crate::config::FeedConfig;
use crate::stream::StreamReader;
use crate::wire::ascii::SessionId;
use crate::wire::moldudp64::{PacketBuilder, PushError, Request};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Receive buffer: a request is 20 bytes; anything longer arrives truncated to this and is
/// rejected for its length.
const RECEIVE_BUFFER_BYTES: usize = 64;
/// Pause after an unexpected socket error, so a persistent one cannot make the thread spin.
const ERROR_BACKOFF_MS: u64 = 10;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerequestConfig {
    pub listen: SocketAddr,
    pub session: SessionId,
    /// UDP payload limit of an answer, 20-byte header included.
    pub max_payload_bytes: usize,
}

impl RerequestConfig {
    pub fn from_feed(feed: &FeedConfig) -> Result<RerequestConfig, String> {
        let publisher = super::publisher::PublisherConfig::from_feed(feed)?;
        Ok(RerequestConfig {
            listen: feed.rerequest,
            session: publisher.session,
            max_payload_bytes: publisher.max_payload_bytes,
        })
    }
}

/// Why a datagram got no answer (for logs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    Malformed,
    OtherSession,
    ZeroCount,
    ZeroSequence,
    BeyondEnd {
        published: u64,
    },
    /// A stored message larger than a packet: cannot happen with ITCH (<= 50 bytes).
    MessageTooLarge,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RerequestStats {
    pub requests: u64,
    pub answered: u64,
    pub messages_sent: u64,
    pub ignored: u64,
    pub send_errors: u64,
}

pub struct RerequestServer {
    socket: UdpSocket,
    reader: StreamReader,
    session: SessionId,
    /// One buffer, restarted at each request's sequence number.
    builder: PacketBuilder,
    stats: RerequestStats,
}

impl RerequestServer {
    pub fn bind(config: &RerequestConfig, reader: StreamReader) -> io::Result<RerequestServer> {
        let socket = UdpSocket::bind(config.listen)?;
        socket.set_read_timeout(Some(super::stop_poll()))?;
        Ok(RerequestServer {
            socket,
            reader,
            session: config.session,
            builder: PacketBuilder::new(config.session, 1, config.max_payload_bytes),
            stats: RerequestStats::default(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub fn stats(&self) -> RerequestStats {
        self.stats
    }

    /// The answer to one received datagram: a downstream packet, or why there is none.
    pub fn answer(&mut self, datagram: &[u8]) -> Result<&[u8], Ignored> {
        answer_request(&self.reader, self.session, &mut self.builder, datagram)
    }

    /// Wait (at most the read timeout) for one datagram and answer it.
    fn serve_one(&mut self, buf: &mut [u8; RECEIVE_BUFFER_BYTES]) {
        let (n, from) = match self.socket.recv_from(buf) {
            Ok(received) => received,
            Err(e) if is_timeout(&e) => return,
            Err(e) => {
                tracing::warn!(error = %e, "re-request server receive failed");
                std::thread::sleep(Duration::from_millis(ERROR_BACKOFF_MS));
                return;
            }
        };
        self.stats.requests += 1;
        let packet = match answer_request(&self.reader, self.session, &mut self.builder, &buf[..n])
        {
            Ok(packet) => packet,
            Err(why) => {
                self.stats.ignored += 1;
                tracing::debug!(%from, ?why, "re-request ignored");
                return;
            }
        };
        let count = u16::from_be_bytes([packet[18], packet[19]]);
        match self.socket.send_to(packet, from) {
            Ok(_) => {
                self.stats.answered += 1;
                self.stats.messages_sent += u64::from(count);
            }
            Err(e) => {
                self.stats.send_errors += 1;
                tracing::warn!(%from, error = %e, "re-request answer not sent");
            }
        }
    }

    /// Serve on a thread named `rerequest` until the handle is stopped or dropped.
    pub fn spawn(mut self) -> io::Result<ServerHandle> {
        let local_addr = self.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rerequest".into())
            .spawn(move || {
                tracing::info!(addr = %local_addr, "re-request server listening");
                let mut buf = [0u8; RECEIVE_BUFFER_BYTES];
                while !stop_flag.load(Ordering::Acquire) {
                    self.serve_one(&mut buf);
                }
                tracing::info!(stats = ?self.stats, "re-request server stopped");
            })?;
        Ok(ServerHandle::new(stop, thread, local_addr))
    }
}

/// Build the answer in `builder`: messages from the requested sequence number on, bounded by
/// the requested count, the published end and one packet.
fn answer_request<'b>(
    reader: &StreamReader,
    session: SessionId,
    builder: &'b mut PacketBuilder,
    datagram: &[u8],
) -> Result<&'b [u8], Ignored> {
    let request = Request::decode(datagram).map_err(|_| Ignored::Malformed)?;
    if request.session_id() != session {
        return Err(Ignored::OtherSession);
    }
    if request.count == 0 {
        return Err(Ignored::ZeroCount);
    }
    if request.sequence == 0 {
        return Err(Ignored::ZeroSequence);
    }
    let published = reader.len();
    if request.sequence > published {
        return Err(Ignored::BeyondEnd { published });
    }
    // Both bounds are at most `published`, so no overflow.
    let last = published.min(request.sequence + u64::from(request.count) - 1);
    builder.restart(request.sequence);
    for sequence in request.sequence..=last {
        let message = reader.get(sequence).expect("published");
        match builder.push(message) {
            Ok(pushed) => debug_assert_eq!(pushed, sequence),
            Err(PushError::Full) => break,
            Err(PushError::TooLarge) => return Err(Ignored::MessageTooLarge),
        }
    }
    Ok(builder.finish())
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
