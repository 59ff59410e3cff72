//! The feed subscriber's engine (binary `bourse-feed`): join the ITCH 5.0 / MoldUDP64 group on
//! a pinned interface, keep sequence continuity (fill gaps from the re-request server, or start
//! from a GLIMPSE snapshot), rebuild every book from the order-by-order messages and check the
//! invariants a healthy feed keeps:
//!
//! - every message number arrives exactly once, in order (after gap filling), and a number
//!   that arrives again (a duplicate packet, a re-request answer, a new leader resending what
//!   its predecessor may not have sent) carries the same message: two different messages
//!   under one sequence number are a violation (two venues publishing one session);
//! - every `E C X D U` names a live order, never executes or cancels more than it has;
//! - every `A F` uses a new order reference and a symbol the directory announced;
//! - no book is ever crossed (best bid < best ask after every message).
//!
//! A violation is reported with the sequence number that caused it.

use bourse::marketdata::receiver::{FeedReceiver, RecvError, request_retransmission};
use bourse::types::{Alpha, Price};
use bourse::wire::ascii::SessionId;
use bourse::wire::glimpse::SnapshotMessage;
use bourse::wire::itch::{self, Body, Decoded};
use bourse::wire::moldudp64::{Packet, PacketKind};
use bourse::wire::soupbin::{self, FrameReader, LoginRequest, Packet as SoupPacket};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Last trades kept per book.
const TRADES_KEPT: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trade {
    pub timestamp: u64,
    pub price: u32,
    pub shares: u32,
    /// Side of the resting order (`B`/`S`); hidden trades report `B` per DESIGN 5.
    pub resting_side: u8,
}

#[derive(Clone, Debug, Default)]
pub struct Book {
    pub symbol: String,
    /// ITCH trading state (`T` trading, `H` halted).
    pub state: u8,
    /// price -> (shares, orders)
    pub bids: BTreeMap<u32, (u64, u32)>,
    pub asks: BTreeMap<u32, (u64, u32)>,
    pub trades: VecDeque<Trade>,
    pub volume: u64,
    pub trade_count: u64,
}

impl Book {
    pub fn best_bid(&self) -> Option<(u32, u64)> {
        self.bids.iter().next_back().map(|(p, (s, _))| (*p, *s))
    }

    pub fn best_ask(&self) -> Option<(u32, u64)> {
        self.asks.iter().next().map(|(p, (s, _))| (*p, *s))
    }

    fn side(&mut self, side: u8) -> &mut BTreeMap<u32, (u64, u32)> {
        if side == b'B' {
            &mut self.bids
        } else {
            &mut self.asks
        }
    }

    fn add(&mut self, side: u8, price: u32, shares: u32) {
        let level = self.side(side).entry(price).or_insert((0, 0));
        level.0 += u64::from(shares);
        level.1 += 1;
    }

    /// Take `shares` off a level; `gone` says the order left it.
    fn reduce(&mut self, side: u8, price: u32, shares: u32, gone: bool) {
        let levels = self.side(side);
        if let Some(level) = levels.get_mut(&price) {
            level.0 -= u64::from(shares);
            if gone {
                level.1 -= 1;
            }
            if level.1 == 0 {
                levels.remove(&price);
            }
        }
    }

    fn trade(&mut self, t: Trade) {
        if self.trades.len() == TRADES_KEPT {
            self.trades.pop_front();
        }
        self.trades.push_back(t);
        self.volume += u64::from(t.shares);
        self.trade_count += 1;
    }

    fn crossed(&self) -> Option<(u32, u32)> {
        match (self.best_bid(), self.best_ask()) {
            (Some((b, _)), Some((a, _))) if b >= a => Some((b, a)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Order {
    locate: u16,
    side: u8,
    price: u32,
    shares: u32,
}

/// Every book of the feed, rebuilt from ITCH messages.
#[derive(Default)]
pub struct Books {
    /// By stock locate (index = locate).
    pub books: Vec<Option<Book>>,
    orders: HashMap<u64, Order>,
    /// Last System Event code.
    pub system_event: u8,
    pub last_timestamp: u64,
}

impl Books {
    pub fn book(&self, symbol: &str) -> Option<&Book> {
        self.books.iter().flatten().find(|b| b.symbol == symbol)
    }

    pub fn live_orders(&self) -> usize {
        self.orders.len()
    }

    fn book_mut(&mut self, locate: u16) -> Result<&mut Book, String> {
        self.books
            .get_mut(usize::from(locate))
            .and_then(Option::as_mut)
            .ok_or_else(|| {
                format!("stock locate {locate} was never announced (no Stock Directory)")
            })
    }

    fn take(&mut self, order_ref: u64, shares: u32, what: &str) -> Result<Order, String> {
        let order = self
            .orders
            .get_mut(&order_ref)
            .ok_or_else(|| format!("{what} names unknown order reference {order_ref}"))?;
        if shares > order.shares {
            return Err(format!(
                "{what} of {shares} shares on order {order_ref} which has {} left",
                order.shares
            ));
        }
        order.shares -= shares;
        let o = *order;
        let gone = o.shares == 0;
        if gone {
            self.orders.remove(&order_ref);
        }
        self.book_mut(o.locate)?
            .reduce(o.side, o.price, shares, gone);
        Ok(o)
    }

    fn insert(
        &mut self,
        locate: u16,
        order_ref: u64,
        side: u8,
        price: u32,
        shares: u32,
    ) -> Result<(), String> {
        if side != b'B' && side != b'S' {
            return Err(format!("order {order_ref} has side {:?}", side as char));
        }
        if shares == 0 {
            return Err(format!("order {order_ref} added with 0 shares"));
        }
        if self.orders.contains_key(&order_ref) {
            return Err(format!("order reference {order_ref} added twice"));
        }
        let book = self.book_mut(locate)?;
        book.add(side, price, shares);
        let crossed = book.crossed().map(|(b, a)| {
            format!(
                "{} is crossed: bid {} >= ask {}",
                book.symbol,
                Price(b),
                Price(a)
            )
        });
        self.orders.insert(
            order_ref,
            Order {
                locate,
                side,
                price,
                shares,
            },
        );
        crossed.map_or(Ok(()), Err)
    }

    /// Apply one message; an `Err` is an invariant violation.
    pub fn apply(&mut self, m: &itch::Message) -> Result<(), String> {
        let locate = m.header.locate;
        let ts = m.header.timestamp.0;
        self.last_timestamp = ts;
        match m.body {
            Body::SystemEvent { event } => self.system_event = event,
            Body::StockDirectory(d) => {
                let i = usize::from(locate);
                if self.books.len() <= i {
                    self.books.resize(i + 1, None);
                }
                let book = self.books[i].get_or_insert_with(Book::default);
                book.symbol = d.stock.trimmed().into_owned();
                if book.state == 0 {
                    book.state = b'T';
                }
            }
            Body::TradingAction { state, .. } => self.book_mut(locate)?.state = state,
            Body::AddOrder {
                order_ref,
                side,
                shares,
                price,
                ..
            }
            | Body::AddOrderMpid {
                order_ref,
                side,
                shares,
                price,
                ..
            } => self.insert(locate, order_ref.0, side, price.0, shares.0)?,
            Body::OrderExecuted {
                order_ref, shares, ..
            } => {
                let o = self.take(order_ref.0, shares.0, "Order Executed")?;
                self.book_mut(o.locate)?.trade(Trade {
                    timestamp: ts,
                    price: o.price,
                    shares: shares.0,
                    resting_side: o.side,
                });
            }
            Body::OrderExecutedWithPrice {
                order_ref,
                shares,
                price,
                printable,
                ..
            } => {
                let o = self.take(order_ref.0, shares.0, "Order Executed With Price")?;
                if printable == b'Y' {
                    self.book_mut(o.locate)?.trade(Trade {
                        timestamp: ts,
                        price: price.0,
                        shares: shares.0,
                        resting_side: o.side,
                    });
                }
            }
            Body::OrderCancel { order_ref, shares } => {
                self.take(order_ref.0, shares.0, "Order Cancel")?;
            }
            Body::OrderDelete { order_ref } => {
                let left = self
                    .orders
                    .get(&order_ref.0)
                    .map(|o| o.shares)
                    .ok_or_else(|| {
                        format!("Order Delete names unknown order reference {}", order_ref.0)
                    })?;
                self.take(order_ref.0, left, "Order Delete")?;
            }
            Body::OrderReplace {
                old_ref,
                new_ref,
                shares,
                price,
            } => {
                let left = self
                    .orders
                    .get(&old_ref.0)
                    .map(|o| o.shares)
                    .ok_or_else(|| {
                        format!("Order Replace names unknown order reference {}", old_ref.0)
                    })?;
                let old = self.take(old_ref.0, left, "Order Replace")?;
                self.insert(old.locate, new_ref.0, old.side, price.0, shares.0)?;
            }
            Body::Trade {
                shares,
                price,
                side,
                ..
            } => self.book_mut(locate)?.trade(Trade {
                timestamp: ts,
                price: price.0,
                shares: shares.0,
                resting_side: side,
            }),
            Body::CrossTrade { .. }
            | Body::BrokenTrade { .. }
            | Body::RegSho { .. }
            | Body::ParticipantPosition { .. }
            | Body::Imbalance(_) => {}
        }
        Ok(())
    }
}

/// What the subscriber does.
#[derive(Clone, Debug)]
pub struct FeedOptions {
    pub group: SocketAddrV4,
    /// Interface to join on (pinned; never the default route).
    pub interface: Ipv4Addr,
    /// Re-request servers, tried in turn (a cluster's members: only the leader answers);
    /// none: gaps cannot be filled.
    pub rerequest: Vec<SocketAddr>,
    /// How long one re-request waits for its answer; three tries per gap position.
    pub rerequest_timeout: Duration,
    /// Start from a GLIMPSE snapshot at this address with these credentials.
    pub glimpse: Option<(SocketAddr, String, String)>,
    /// Stop at the first violation.
    pub check: bool,
    /// Stop after this long (None: at End of Session or when stopped).
    pub duration: Option<Duration>,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub packets: u64,
    pub heartbeats: u64,
    pub messages: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub gap_messages: u64,
    pub rerequests: u64,
    pub snapshot_messages: u64,
    /// First sequence number applied from the live stream (1, or the GLIMPSE `G` number).
    pub first_seq: u64,
}

/// A running subscriber.
pub struct Feed {
    pub options: FeedOptions,
    receiver: FeedReceiver,
    pub books: Books,
    /// Next message number to apply.
    pub next_seq: u64,
    pub session: Option<SessionId>,
    pub stats: Stats,
    pub violations: Vec<String>,
    pub ended: bool,
    /// What each live-stream number carried, to tell a duplicate from a conflict.
    seen: Seen,
    /// The re-request server asked first next time (the one that answered last).
    rerequest_at: usize,
    record: Option<Box<dyn Write>>,
    scratch: Vec<u8>,
}

/// A 64-bit hash of every message applied from the live stream, by sequence number: a number
/// seen again must carry the same bytes (8 bytes per message; a day of millions is megabytes).
#[derive(Default)]
pub struct Seen {
    first_seq: u64,
    hashes: Vec<u64>,
}

impl Seen {
    /// Message `seq` (the next one) was applied.
    pub fn note(&mut self, seq: u64, message: &[u8]) {
        if self.hashes.is_empty() {
            self.first_seq = seq;
        }
        assert_eq!(
            seq,
            self.first_seq + self.hashes.len() as u64,
            "noted in order"
        );
        self.hashes.push(hash(message));
    }

    /// Message `seq` arrived again: an error if it differs from the one applied.
    pub fn check(&self, seq: u64, message: &[u8]) -> Result<(), String> {
        let Some(index) = seq.checked_sub(self.first_seq) else {
            return Ok(()); // before the live stream (a snapshot covered it)
        };
        match self.hashes.get(index as usize) {
            Some(&h) if h != hash(message) => Err(format!(
                "message {seq}: two different messages with this MoldUDP64 sequence number"
            )),
            _ => Ok(()),
        }
    }
}

/// FNV-1a, 64 bits: stable and dependency-free (no adversary picks these messages).
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Feed {
    /// Join the group (first: nothing published during a snapshot is missed), then take the
    /// GLIMPSE snapshot if asked.
    pub fn start(options: FeedOptions, record: Option<Box<dyn Write>>) -> Result<Feed, String> {
        let receiver =
            FeedReceiver::join(options.group, options.interface, Duration::from_millis(100))
                .map_err(|e| {
                    format!(
                        "cannot join {} on {}: {e}",
                        options.group, options.interface
                    )
                })?;
        let mut feed = Feed {
            options,
            receiver,
            books: Books::default(),
            next_seq: 1,
            session: None,
            stats: Stats::default(),
            violations: Vec::new(),
            ended: false,
            seen: Seen::default(),
            rerequest_at: 0,
            record,
            scratch: vec![0u8; 2 + itch::MAX_MESSAGE_LEN + 64],
        };
        if let Some((addr, user, password)) = feed.options.glimpse.clone() {
            let (messages, next) =
                glimpse_snapshot(addr, &user, &password, Duration::from_secs(10))?;
            for m in &messages {
                feed.stats.snapshot_messages += 1;
                feed.apply_raw(m, 0)?;
            }
            feed.next_seq = next;
            feed.receiver.set_next_expected(next);
        }
        feed.stats.first_seq = feed.next_seq;
        Ok(feed)
    }

    /// A violation: recorded; in check mode it ends the run.
    fn violation(&mut self, what: String) -> Result<(), String> {
        self.violations.push(what.clone());
        if self.options.check {
            Err(what)
        } else {
            Ok(())
        }
    }

    fn apply_raw(&mut self, bytes: &[u8], seq: u64) -> Result<(), String> {
        if let Some(w) = self.record.as_mut() {
            let n = itch::binary_file::write_raw(&mut self.scratch, bytes);
            w.write_all(&self.scratch[..n])
                .map_err(|e| format!("cannot write the recording: {e}"))?;
        }
        let result = match itch::decode_any(bytes) {
            Ok(Decoded::Message(m)) => self.books.apply(&m),
            Ok(Decoded::Skipped { .. }) => Ok(()),
            Err(e) => Err(format!("undecodable ITCH message: {e}")),
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if seq == 0 => self.violation(format!("snapshot: {e}")),
            Err(e) => self.violation(format!("message {seq}: {e}")),
        }
    }

    /// Apply messages numbered from `first`; those already applied must be the same.
    fn apply_from(&mut self, first: u64, messages: &[Vec<u8>]) -> Result<(), String> {
        for (k, m) in messages.iter().enumerate() {
            let seq = first + k as u64;
            if seq < self.next_seq {
                if let Err(conflict) = self.seen.check(seq, m) {
                    self.violation(conflict)?;
                }
                continue;
            }
            debug_assert_eq!(seq, self.next_seq);
            self.apply_raw(m, seq)?;
            self.seen.note(seq, m);
            self.next_seq += 1;
            self.stats.messages += 1;
        }
        Ok(())
    }

    /// Fill messages `next_seq .. until` from the re-request server.
    fn fill(&mut self, until: u64) -> Result<(), String> {
        let from = self.next_seq;
        self.stats.gaps += 1;
        self.stats.gap_messages += until - from;
        let servers = self.options.rerequest.len();
        let (true, Some(session)) = (servers > 0, self.session) else {
            return self.violation(format!(
                "gap: messages {from}..{} missing and no re-request server to ask",
                until - 1
            ));
        };
        let mut failures = 0;
        // Bounded: each round either advances or counts a failure; three failures per server
        // end it.
        while self.next_seq < until {
            let server = self.options.rerequest[self.rerequest_at % servers];
            let count = (until - self.next_seq).min(u64::from(u16::MAX)) as u16;
            self.stats.rerequests += 1;
            let answer = request_retransmission(
                server,
                session,
                self.next_seq,
                count,
                self.options.rerequest_timeout,
            )
            .map_err(|e| format!("re-request to {server}: {e}"))?;
            let blocks: Vec<Vec<u8>> = match answer.as_deref().map(Packet::decode) {
                Some(Ok(p)) => p.messages().map(|(_, m)| m.to_vec()).collect(),
                _ => Vec::new(),
            };
            if blocks.is_empty() {
                failures += 1;
                // The next server (a cluster's new leader may be another member).
                self.rerequest_at += 1;
                if failures >= 3 * servers {
                    let what = format!(
                        "gap: messages {}..{} missing and the re-request server {server} did not answer",
                        self.next_seq,
                        until - 1
                    );
                    // Outside check mode, skip ahead (the books may now be wrong).
                    self.next_seq = until;
                    return self.violation(what);
                }
                continue;
            }
            let at = self.next_seq;
            let n = blocks.len().min((until - at) as usize);
            self.apply_from(at, &blocks[..n])?;
        }
        Ok(())
    }

    /// Receive and process one datagram (or time out after 100 ms). `Err` ends the run.
    pub fn step(&mut self) -> Result<(), String> {
        let (kind, first, session, blocks) = match self.receiver.recv() {
            Ok(r) => (
                r.packet.kind(),
                r.packet.header.sequence,
                r.packet.header.session_id(),
                r.packet
                    .messages()
                    .map(|(_, m)| m.to_vec())
                    .collect::<Vec<_>>(),
            ),
            Err(RecvError::Timeout) => return Ok(()),
            Err(RecvError::Decode(e)) => {
                return self.violation(format!("bad MoldUDP64 packet: {e}"));
            }
            Err(RecvError::Io(e)) => return Err(format!("feed receive: {e}")),
        };
        self.stats.packets += 1;
        match self.session {
            None => self.session = Some(session),
            Some(s) if s != session => {
                return self.violation(format!(
                    "session changed from {:?} to {:?}",
                    s.to_string(),
                    session.to_string()
                ));
            }
            Some(_) => {}
        }
        // For heartbeats and End of Session, the header number is the sender's next one.
        let next_after = match kind {
            PacketKind::Data => first + blocks.len() as u64,
            _ => first,
        };
        if kind == PacketKind::Data && next_after <= self.next_seq {
            self.stats.duplicates += 1;
            // Seen before: it must say the same.
            return self.apply_from(first, &blocks);
        }
        if first > self.next_seq {
            self.fill(first)?;
        }
        match kind {
            PacketKind::Data => self.apply_from(first, &blocks)?,
            PacketKind::Heartbeat => self.stats.heartbeats += 1,
            PacketKind::EndOfSession => self.ended = true,
        }
        Ok(())
    }

    /// Run until End of Session, the duration, `stop`, or (check mode) a violation; call
    /// `tick` every `interval`.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        interval: Duration,
        mut tick: impl FnMut(&Feed),
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut last_tick = Instant::now();
        let result = loop {
            if self.ended || stop.load(Ordering::Relaxed) {
                break Ok(());
            }
            if self
                .options
                .duration
                .is_some_and(|d| started.elapsed() >= d)
            {
                break Ok(());
            }
            if let Err(e) = self.step() {
                break Err(e);
            }
            if last_tick.elapsed() >= interval {
                last_tick = Instant::now();
                tick(self);
            }
        };
        if let Some(w) = self.record.as_mut() {
            w.flush()
                .map_err(|e| format!("cannot write the recording: {e}"))?;
        }
        result
    }

    /// One line: where the stream is.
    pub fn status_line(&self) -> String {
        format!(
            "session {} next seq {} messages {} packets {} heartbeats {} gaps {} ({} messages, {} re-requests) snapshot {} violations {}",
            self.session
                .map(|s| s.to_string().trim().to_string())
                .unwrap_or_else(|| "?".into()),
            self.next_seq,
            self.stats.messages,
            self.stats.packets,
            self.stats.heartbeats,
            self.stats.gaps,
            self.stats.gap_messages,
            self.stats.rerequests,
            self.stats.snapshot_messages,
            self.violations.len()
        )
    }
}

/// Take a GLIMPSE 5.0 snapshot: the ITCH messages and the first sequence number to apply.
pub fn glimpse_snapshot(
    addr: SocketAddr,
    user: &str,
    password: &str,
    timeout: Duration,
) -> Result<(Vec<Vec<u8>>, u64), String> {
    let fail = |e: io::Error| format!("GLIMPSE {addr}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    let bad = |what: &str| format!("GLIMPSE login: {what} does not fit");
    let login = SoupPacket::LoginRequest(LoginRequest {
        username: Alpha::from_str_padded(user).ok_or_else(|| bad("username"))?,
        password: Alpha::from_str_padded(password).ok_or_else(|| bad("password"))?,
        session: SessionId::BLANK,
        sequence: 1,
        heartbeat_timeout_ms: None,
    });
    let mut buf = [0u8; 128];
    let n = login.encode(&mut buf);
    stream.write_all(&buf[..n]).map_err(fail)?;
    let mut reader = FrameReader::new(soupbin::MAX_PACKET_LEN);
    let mut messages = Vec::new();
    let mut next = None;
    let deadline = Instant::now() + timeout;
    loop {
        while let Some(packet) = reader.next_packet() {
            match packet.map_err(|e| format!("GLIMPSE framing: {e:?}"))? {
                SoupPacket::LoginAccepted { .. }
                | SoupPacket::ServerHeartbeat
                | SoupPacket::Debug(_) => {}
                SoupPacket::LoginRejected { reason } => {
                    return Err(format!("GLIMPSE login rejected {:?}", reason as char));
                }
                SoupPacket::SequencedData(payload) => match SnapshotMessage::decode(payload) {
                    Ok(SnapshotMessage::End(end)) => next = Some(end.sequence),
                    Ok(SnapshotMessage::Itch(_)) => messages.push(payload.to_vec()),
                    Err(e) => return Err(format!("GLIMPSE message undecodable: {e}")),
                },
                SoupPacket::EndOfSession => {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return next
                        .map(|n| (messages, n))
                        .ok_or_else(|| "GLIMPSE ended without End of Snapshot".to_string());
                }
                other => return Err(format!("GLIMPSE sent {:?}", other.kind() as char)),
            }
        }
        if Instant::now() >= deadline {
            return Err("GLIMPSE snapshot timed out".into());
        }
        let n = stream.read(reader.read_space()).map_err(fail)?;
        if n == 0 {
            return Err("GLIMPSE closed before End of Session".into());
        }
        reader.commit(n);
    }
}

/// `hh:mm:ss.nnnnnnnnn` of ns since midnight.
pub fn clock_time(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ns % 1_000_000_000
    )
}

fn quote(level: Option<(u32, u64)>, bid: bool) -> String {
    match level {
        None => "-".into(),
        Some((p, s)) if bid => format!("{s} @ {}", Price(p)),
        Some((p, s)) => format!("{} @ {s}", Price(p)),
    }
}

/// The ticker: every book's best bid/offer and last trade, then the depth and the last trades
/// of `symbol`.
pub fn render(feed: &Feed, symbol: Option<&str>, depth: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bourse-feed {} on {}  {}",
        feed.options.group,
        feed.options.interface,
        clock_time(feed.books.last_timestamp)
    );
    let _ = writeln!(out, "{}", feed.status_line());
    let _ = writeln!(
        out,
        "\n{:<8} {:>22} {:>22} {:>22} {:>10} {:>6} {:>5}",
        "SYMBOL",
        "BID (shares @ price)",
        "ASK (price @ shares)",
        "LAST",
        "VOLUME",
        "TRADES",
        "STATE"
    );
    for book in feed.books.books.iter().flatten() {
        let last = book
            .trades
            .back()
            .map(|t| format!("{} x {}", Price(t.price), t.shares))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<8} {:>22} {:>22} {:>22} {:>10} {:>6} {:>5}",
            book.symbol,
            quote(book.best_bid(), true),
            quote(book.best_ask(), false),
            last,
            book.volume,
            book.trade_count,
            book.state as char
        );
    }
    if let Some(book) = symbol.and_then(|s| feed.books.book(s)) {
        let _ = writeln!(out, "\n{} depth", book.symbol);
        let _ = writeln!(
            out,
            "{:>7} {:>10} {:>12} | {:<12} {:<10} {:<7}",
            "orders", "shares", "bid", "ask", "shares", "orders"
        );
        let bids: Vec<_> = book.bids.iter().rev().take(depth).collect();
        let asks: Vec<_> = book.asks.iter().take(depth).collect();
        for i in 0..bids.len().max(asks.len()) {
            let b = bids
                .get(i)
                .map(|(p, (s, n))| format!("{n:>7} {s:>10} {:>12}", Price(**p).to_string()))
                .unwrap_or_else(|| format!("{:>31}", ""));
            let a = asks
                .get(i)
                .map(|(p, (s, n))| format!("{:<12} {s:<10} {n:<7}", Price(**p).to_string()))
                .unwrap_or_default();
            let _ = writeln!(out, "{b} | {a}");
        }
        let _ = writeln!(out, "\n{} last trades", book.symbol);
        for t in book.trades.iter().rev().take(depth) {
            let _ = writeln!(
                out,
                "{}  {:>8} @ {:<12} resting {}",
                clock_time(t.timestamp),
                t.shares,
                Price(t.price).to_string(),
                if t.resting_side == b'B' { "bid" } else { "ask" }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bourse::types::{MatchNumber, OrderRef, Shares, Symbol, Timestamp};
    use bourse::wire::itch::{Header, Message, StockDirectory};

    fn msg(locate: u16, body: Body) -> Message {
        Message {
            header: Header {
                locate,
                tracking: 0,
                timestamp: Timestamp(34_200_000_000_000),
            },
            body,
        }
    }

    fn directory(symbol: &str) -> Body {
        Body::StockDirectory(StockDirectory {
            stock: Symbol::from_str_padded(symbol).unwrap(),
            market_category: b'Q',
            financial_status: b'N',
            round_lot_size: 100,
            round_lots_only: b'N',
            issue_classification: b'C',
            issue_sub_type: *b"C ",
            authenticity: b'P',
            short_sale_threshold: b'N',
            ipo_flag: b'N',
            luld_tier: b'1',
            etp_flag: b'N',
            etp_leverage: 0,
            inverse: b'N',
        })
    }

    fn add(r: u64, side: u8, shares: u32, price: u32) -> Body {
        Body::AddOrder {
            order_ref: OrderRef(r),
            side,
            shares: Shares(shares),
            stock: Symbol::from_str_padded("AAPL").unwrap(),
            price: Price(price),
        }
    }

    #[test]
    fn books_follow_adds_executions_cancels_and_replaces() {
        let mut b = Books::default();
        b.apply(&msg(1, directory("AAPL"))).unwrap();
        b.apply(&msg(1, add(1, b'B', 300, 1_000_000))).unwrap();
        b.apply(&msg(1, add(2, b'S', 200, 1_010_000))).unwrap();
        b.apply(&msg(1, add(3, b'B', 100, 1_000_000))).unwrap();
        let book = b.book("AAPL").unwrap();
        assert_eq!(book.best_bid(), Some((1_000_000, 400)));
        assert_eq!(book.best_ask(), Some((1_010_000, 200)));
        let exec = Body::OrderExecuted {
            order_ref: OrderRef(1),
            shares: Shares(300),
            match_number: MatchNumber(1),
        };
        b.apply(&msg(1, exec)).unwrap();
        assert_eq!(b.book("AAPL").unwrap().best_bid(), Some((1_000_000, 100)));
        assert_eq!(b.book("AAPL").unwrap().volume, 300);
        let cancel = Body::OrderCancel {
            order_ref: OrderRef(2),
            shares: Shares(50),
        };
        b.apply(&msg(1, cancel)).unwrap();
        let replace = Body::OrderReplace {
            old_ref: OrderRef(2),
            new_ref: OrderRef(4),
            shares: Shares(150),
            price: Price(1_020_000),
        };
        b.apply(&msg(1, replace)).unwrap();
        assert_eq!(b.book("AAPL").unwrap().best_ask(), Some((1_020_000, 150)));
        b.apply(&msg(
            1,
            Body::OrderDelete {
                order_ref: OrderRef(4),
            },
        ))
        .unwrap();
        assert_eq!(b.book("AAPL").unwrap().best_ask(), None);
        assert_eq!(b.live_orders(), 1);
    }

    #[test]
    fn books_report_violations() {
        let mut b = Books::default();
        assert!(
            b.apply(&msg(1, add(1, b'B', 100, 100)))
                .unwrap_err()
                .contains("never announced")
        );
        b.apply(&msg(1, directory("AAPL"))).unwrap();
        b.apply(&msg(1, add(1, b'B', 100, 1_000_000))).unwrap();
        assert!(
            b.apply(&msg(1, add(1, b'B', 100, 900_000)))
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            b.apply(&msg(1, add(2, b'S', 100, 1_000_000)))
                .unwrap_err()
                .contains("crossed")
        );
        let too_much = Body::OrderCancel {
            order_ref: OrderRef(1),
            shares: Shares(101),
        };
        assert!(
            b.apply(&msg(1, too_much))
                .unwrap_err()
                .contains("has 100 left")
        );
        let unknown = Body::OrderDelete {
            order_ref: OrderRef(99),
        };
        assert!(
            b.apply(&msg(1, unknown))
                .unwrap_err()
                .contains("unknown order reference 99")
        );
    }

    #[test]
    fn a_number_seen_again_must_carry_the_same_message() {
        let mut seen = Seen::default();
        seen.note(5, b"first");
        seen.note(6, b"second");
        assert!(seen.check(5, b"first").is_ok());
        assert!(seen.check(4, b"before the live stream").is_ok());
        assert!(seen.check(7, b"not seen yet").is_ok());
        let conflict = seen.check(6, b"other").unwrap_err();
        assert!(
            conflict.contains("message 6: two different messages"),
            "{conflict}"
        );
    }

    #[test]
    fn clock_time_formats() {
        assert_eq!(clock_time(34_200_000_000_123), "09:30:00.000000123");
    }
}
