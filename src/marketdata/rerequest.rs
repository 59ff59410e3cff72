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
//!
//! Not a reflection amplifier (issue 12; UDP sources can be spoofed, and an answer can be 70
//! times the request): a datagram is considered only if its source is in the allowlist
//! ([`RerequestLimits::allow`]: `feed.rerequest_allow`, by default loopback and the networks of
//! the feed interface and of the re-request address). Each source then has two token buckets:
//! requests (`requests_per_s`, burst one second's worth) and bytes out, which refills at the
//! allowance `bytes_per_s` (burst four seconds' worth) and gains one byte for every byte the
//! source sent. An answer that does not fit is not sent. So a source gets at most
//! `4 × bytes_per_s + bytes_per_s × t + bytes in` over any `t` seconds: beyond its allowance,
//! at most one byte out per byte in. All sources together share a bucket of 16 allowances,
//! which bounds what many (spoofed) addresses can draw. The allowance is what a subscriber
//! recovering a gap uses; drops are counted and logged once per 10 s.

use super::ServerHandle;
use crate::config::FeedConfig;
use crate::guard::{Allowlist, Cidr, LogGate, SourceTable, TokenBucket};
use crate::stream::StreamReader;
use crate::wire::ascii::SessionId;
use crate::wire::moldudp64::{PacketBuilder, PushError, Request};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Receive buffer: a request is 20 bytes; anything longer arrives truncated to this and is
/// rejected for its length.
const RECEIVE_BUFFER_BYTES: usize = 64;
/// Pause after an unexpected socket error, so a persistent one cannot make the thread spin.
const ERROR_BACKOFF_MS: u64 = 10;
/// Source addresses with their own budgets at once (least recently seen replaced).
const SOURCES_MAX: usize = 1024;
/// A source's byte bucket holds this many seconds of its allowance.
const BYTES_BURST_S: u64 = 4;
/// All sources together: this many sources' allowances.
const TOTAL_SOURCES: u64 = 16;
/// At most one log line per kind of drop per this many ms.
const LOG_INTERVAL_MS: u64 = 10_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerequestConfig {
    pub listen: SocketAddr,
    pub session: SessionId,
    /// UDP payload limit of an answer, 20-byte header included.
    pub max_payload_bytes: usize,
    pub limits: RerequestLimits,
}

/// Who is answered and how much (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerequestLimits {
    pub allow: Allowlist,
    /// Requests answered per second per source (burst: one second's worth).
    pub requests_per_s: u32,
    /// Bytes per second a source may get beyond one byte out per byte in.
    pub bytes_per_s: u32,
}

impl Default for RerequestLimits {
    /// Loopback only, with the config defaults.
    fn default() -> Self {
        let feed = FeedConfig::default();
        RerequestLimits {
            allow: Allowlist::loopback(),
            requests_per_s: feed.rerequest_requests_per_s,
            bytes_per_s: feed.rerequest_bytes_per_s,
        }
    }
}

impl RerequestConfig {
    pub fn from_feed(feed: &FeedConfig) -> Result<RerequestConfig, String> {
        let publisher = super::publisher::PublisherConfig::from_feed(feed)?;
        let allow = match &feed.rerequest_allow {
            Some(blocks) => {
                Allowlist::parse(blocks).map_err(|e| format!("feed.rerequest_allow: {e}"))?
            }
            None => default_allowlist(feed),
        };
        Ok(RerequestConfig {
            listen: feed.rerequest,
            session: publisher.session,
            max_payload_bytes: publisher.max_payload_bytes,
            limits: RerequestLimits {
                allow,
                requests_per_s: feed.rerequest_requests_per_s,
                bytes_per_s: feed.rerequest_bytes_per_s,
            },
        })
    }
}

/// Loopback, plus the network of the feed interface and of the re-request address (where
/// the subscribers are), as the kernel has them configured.
fn default_allowlist(feed: &FeedConfig) -> Allowlist {
    let mut allow = Allowlist::loopback();
    for ip in [IpAddr::V4(feed.interface), feed.rerequest.ip()] {
        if ip.is_unspecified() || ip.is_loopback() {
            continue;
        }
        match interface_network(ip) {
            Some(network) => allow.push(network),
            None => {
                tracing::warn!(%ip, "no interface has this address: re-requests are answered for it alone");
                allow
                    .push(Cidr::new(ip, if ip.is_ipv4() { 32 } else { 128 }).expect("full length"));
            }
        }
    }
    allow
}

/// The IPv4 network of the local interface that has address `ip` (getifaddrs).
pub fn interface_network(ip: IpAddr) -> Option<Cidr> {
    let IpAddr::V4(want) = ip.to_canonical() else {
        return None;
    };
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    // Bounded: the kernel's list of interface addresses.
    for _ in 0..65_536 {
        if at.is_null() {
            break;
        }
        // SAFETY: a non-null node of the list getifaddrs returned, alive until freed.
        let node = unsafe { &*at };
        at = node.ifa_next;
        if node.ifa_addr.is_null() || node.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr; for AF_INET it is a sockaddr_in, and so is
        // its netmask.
        let (addr, mask) = unsafe {
            if i32::from((*node.ifa_addr).sa_family) != libc::AF_INET {
                continue;
            }
            (
                *(node.ifa_addr as *const libc::sockaddr_in),
                *(node.ifa_netmask as *const libc::sockaddr_in),
            )
        };
        if Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)) == want {
            let prefix_len = u32::from_be(mask.sin_addr.s_addr).leading_ones() as u8;
            found = Cidr::new(ip, prefix_len).ok();
            break;
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
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
    /// The source is not in the allowlist.
    NotAllowed,
    /// The source asked more often than its request rate.
    RateLimited,
    /// The answer is larger than what the source (or all sources) may get now.
    OverBudget,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RerequestStats {
    pub requests: u64,
    pub answered: u64,
    pub messages_sent: u64,
    pub ignored: u64,
    pub send_errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub not_allowed: u64,
    pub rate_limited: u64,
    pub over_budget: u64,
}

/// One source's budgets.
struct SourceBudget {
    requests: TokenBucket,
    bytes: TokenBucket,
}

/// The allowlist and every budget.
struct Guard {
    limits: RerequestLimits,
    sources: SourceTable<SourceBudget>,
    /// Bytes out of all sources together.
    total: TokenBucket,
}

pub struct RerequestServer {
    socket: UdpSocket,
    reader: StreamReader,
    session: SessionId,
    /// One buffer, restarted at each request's sequence number.
    builder: PacketBuilder,
    stats: RerequestStats,
    guard: Guard,
    started: Instant,
    not_allowed_log: LogGate,
    limited_log: LogGate,
}

impl RerequestServer {
    pub fn bind(config: &RerequestConfig, reader: StreamReader) -> io::Result<RerequestServer> {
        let socket = UdpSocket::bind(config.listen)?;
        socket.set_read_timeout(Some(super::stop_poll()))?;
        let per_source = u64::from(config.limits.bytes_per_s);
        let total_burst =
            (per_source * BYTES_BURST_S * TOTAL_SOURCES).min(TokenBucket::CAPACITY_MAX);
        Ok(RerequestServer {
            socket,
            reader,
            session: config.session,
            builder: PacketBuilder::new(config.session, 1, config.max_payload_bytes),
            stats: RerequestStats::default(),
            guard: Guard {
                limits: config.limits.clone(),
                sources: SourceTable::with_capacity(SOURCES_MAX),
                total: TokenBucket::full(total_burst, per_source * TOTAL_SOURCES, 0),
            },
            started: Instant::now(),
            not_allowed_log: LogGate::default(),
            limited_log: LogGate::default(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub fn stats(&self) -> RerequestStats {
        self.stats
    }

    /// The answer to one received datagram, regardless of its source: a downstream packet,
    /// or why there is none.
    pub fn answer(&mut self, datagram: &[u8]) -> Result<&[u8], Ignored> {
        answer_request(&self.reader, self.session, &mut self.builder, datagram)
    }

    /// The answer to `datagram` from `source` at `now_ns` under the allowlist and the
    /// budgets (module docs); what it returns counts as sent.
    pub fn answer_from(
        &mut self,
        datagram: &[u8],
        source: IpAddr,
        now_ns: u64,
    ) -> Result<&[u8], Ignored> {
        self.guard.admit(source, datagram.len(), now_ns)?;
        let packet = answer_request(&self.reader, self.session, &mut self.builder, datagram)?;
        self.guard.charge(source, packet.len(), now_ns)?;
        Ok(packet)
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
        self.stats.bytes_in += n as u64;
        let now_ns = self.started.elapsed().as_nanos() as u64;
        let source = from.ip();
        let answered = self.guard.admit(source, n, now_ns).and_then(|()| {
            let packet = answer_request(&self.reader, self.session, &mut self.builder, &buf[..n])?;
            self.guard.charge(source, packet.len(), now_ns)?;
            Ok(packet)
        });
        let packet = match answered {
            Ok(packet) => packet,
            Err(why) => {
                self.note_ignored(why, from, now_ns);
                return;
            }
        };
        let count = u16::from_be_bytes([packet[18], packet[19]]);
        let len = packet.len() as u64;
        match self.socket.send_to(packet, from) {
            Ok(_) => {
                self.stats.answered += 1;
                self.stats.messages_sent += u64::from(count);
                self.stats.bytes_out += len;
            }
            Err(e) => {
                self.stats.send_errors += 1;
                tracing::warn!(%from, error = %e, "re-request answer not sent");
            }
        }
    }

    /// Count a datagram left unanswered; refusals are logged at most once per 10 s per kind.
    fn note_ignored(&mut self, why: Ignored, from: SocketAddr, now_ns: u64) {
        self.stats.ignored += 1;
        let gate = match why {
            Ignored::NotAllowed => {
                self.stats.not_allowed += 1;
                &mut self.not_allowed_log
            }
            Ignored::RateLimited | Ignored::OverBudget => {
                if why == Ignored::RateLimited {
                    self.stats.rate_limited += 1;
                } else {
                    self.stats.over_budget += 1;
                }
                &mut self.limited_log
            }
            _ => {
                tracing::debug!(%from, ?why, "re-request ignored");
                return;
            }
        };
        if let Some(suppressed) = gate.pass(now_ns, LOG_INTERVAL_MS) {
            let s = &self.stats;
            tracing::warn!(
                %from,
                ?why,
                suppressed,
                not_allowed = s.not_allowed,
                rate_limited = s.rate_limited,
                over_budget = s.over_budget,
                "re-request not answered"
            );
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

impl Guard {
    /// Before any work: is `source` allowed, and within its request rate? Credits the bytes
    /// it sent (one byte out per byte in).
    fn admit(&mut self, source: IpAddr, bytes_in: usize, now_ns: u64) -> Result<(), Ignored> {
        if !self.limits.allow.allows(source) {
            return Err(Ignored::NotAllowed);
        }
        let limits = &self.limits;
        let budget = self
            .sources
            .entry(source, now_ns, || new_budget(limits, now_ns), |_| true)
            .expect("any entry may make room");
        budget.bytes.credit(bytes_in as u64, now_ns);
        if !budget.requests.try_take(1, now_ns) {
            return Err(Ignored::RateLimited);
        }
        Ok(())
    }

    /// Take `bytes_out` from the source's budget and the total, or refuse (taking nothing).
    fn charge(&mut self, source: IpAddr, bytes_out: usize, now_ns: u64) -> Result<(), Ignored> {
        let len = bytes_out as u64;
        let budget = self.sources.get_mut(source).expect("admitted just before");
        if !budget.bytes.try_take(len, now_ns) {
            return Err(Ignored::OverBudget);
        }
        if !self.total.try_take(len, now_ns) {
            budget.bytes.credit(len, now_ns);
            return Err(Ignored::OverBudget);
        }
        Ok(())
    }
}

fn new_budget(limits: &RerequestLimits, now_ns: u64) -> SourceBudget {
    let requests = u64::from(limits.requests_per_s);
    let bytes = u64::from(limits.bytes_per_s);
    SourceBudget {
        requests: TokenBucket::full(requests, requests, now_ns),
        bytes: TokenBucket::full(bytes * BYTES_BURST_S, bytes, now_ns),
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
