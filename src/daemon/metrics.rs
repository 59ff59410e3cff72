//! Metrics: a Prometheus text endpoint (`[admin] metrics_listen`, off by default) served by
//! its own thread.
//!
//! The engine thread (gateway, sequencer and, compact, the state machine) pays almost
//! nothing: most numbers are *read* by the metrics thread from what exists anyway —
//!
//! - inputs by kind and journal bytes: it tails the day's journal with its own reader;
//! - OUCH and ITCH messages by type, rejects by reason, displayed book depth per symbol: it
//!   reads the released output streams (each message once) and mirrors the displayed book
//!   from the ITCH messages;
//! - sessions, connections, sequence numbers, resting orders: plain relaxed stores by the
//!   engine thread every [`HANDOVER_INTERVAL_NS`] into [`Gauges`];
//! - the latency histograms (receive → journaled → matched → released → written, and the
//!   journal flush): [`Probe`] records into hdrhistograms owned by the engine thread (two
//!   clock reads per input, two per batch); every [`HANDOVER_INTERVAL_NS`] it hands the
//!   filled set to the metrics thread over a bounded channel and takes back an emptied one,
//!   so nothing is locked or allocated on the engine thread. With the endpoint off the
//!   probe is a `None` and every hook one untaken branch.
//!
//! Stages, each measured from *receive* (the event loop saw the socket readable, or the
//! loop turn that produced a timer or admin input): *journaled* — the input is in the
//! journal's mapping (stamped, appended); *matched* — the state machine applied it (compact:
//! its outputs are appended, held; sharded: routed to its shard); *released* — its batch is
//! durable by the configured mode and its replies are visible; *written* — the replies were
//! handed to the sessions' sockets.

use crate::limits;
use crate::stream::StreamReader;
use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use hdrhistogram::Histogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the engine thread hands its histograms over and stores its gauges.
pub const HANDOVER_INTERVAL_NS: u64 = 250_000_000;
/// Largest latency recorded (longer ones count as this).
const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// How long the metrics thread sleeps between catching up on the journal and streams.
const IDLE_POLL: Duration = Duration::from_millis(250);
/// A scrape request must arrive, and its answer be taken, within this long.
const HTTP_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest request head read.
const REQUEST_BYTES_MAX: usize = 8 << 10;
/// Connections waiting to be served (one is served at a time).
const LISTEN_BACKLOG: i32 = 16;
/// Records or messages taken in one catch-up step, so a scrape is answered soon after a
/// restart on a long day too (the rest is taken by the next steps).
const CATCH_UP_STEP_MAX: u64 = 1 << 20;
/// Prometheus histogram bucket bounds, seconds.
const LATENCY_BUCKETS_S: [f64; 22] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Quantiles exported from the hdrhistograms (since start).
const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];
const STAGES: [&str; 4] = ["journaled", "matched", "released", "written"];

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid bounds")
}

/// The engine thread's histograms (one set filled while the other is read).
pub struct Hists {
    /// Receive → each stage, ns, indexed like [`STAGES`].
    stages: [Histogram<u64>; 4],
    /// Duration of each group commit (journal flush), ns.
    flush: Histogram<u64>,
}

impl Hists {
    fn new() -> Box<Hists> {
        Box::new(Hists {
            stages: [histogram(), histogram(), histogram(), histogram()],
            flush: histogram(),
        })
    }

    fn reset(&mut self) {
        self.stages.iter_mut().for_each(Histogram::reset);
        self.flush.reset();
    }
}

/// Numbers the engine thread stores every hand-over for the metrics thread (relaxed: each is
/// a value on its own).
#[derive(Default, Debug)]
pub struct Gauges {
    sessions_logged_in: AtomicU64,
    connections: AtomicU64,
    last_seq: AtomicU64,
    released_seq: AtomicU64,
    resting_orders: AtomicU64,
    order_refs: AtomicU64,
    matches: AtomicU64,
    day_ended: AtomicBool,
}

/// A batch whose replies are not released (or not written) yet.
#[derive(Clone, Copy, Debug)]
struct Batch {
    end_seq: u64,
    received_ns: u64,
    inputs: u64,
}

struct ProbeInner {
    epoch: Instant,
    received_ns: u64,
    hists: Box<Hists>,
    full: Sender<Box<Hists>>,
    spare: Receiver<Box<Hists>>,
    /// Batches not released yet, oldest first; then released ones not written yet.
    unreleased: VecDeque<Batch>,
    unwritten: VecDeque<Batch>,
    last_handover_ns: u64,
    gauges: Arc<Gauges>,
}

/// The engine thread's end: latency and flush timings. `Probe::off()` records nothing.
#[derive(Default)]
pub struct Probe(Option<Box<ProbeInner>>);

impl Probe {
    pub fn off() -> Probe {
        Probe(None)
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn now_ns(p: &ProbeInner) -> u64 {
        p.epoch.elapsed().as_nanos() as u64
    }

    /// A loop turn begins: its inputs were received now.
    #[inline]
    pub fn receive(&mut self) {
        if let Some(p) = self.0.as_deref_mut() {
            p.received_ns = Self::now_ns(p);
        }
    }

    /// The input being sequenced is in the journal's mapping.
    #[inline]
    pub fn journaled(&mut self) {
        if let Some(p) = self.0.as_deref_mut() {
            let t = Self::now_ns(p).saturating_sub(p.received_ns);
            p.hists.stages[0].saturating_record(t.max(1));
        }
    }

    /// The input being sequenced is applied (compact) or routed (sharded).
    #[inline]
    pub fn matched(&mut self) {
        if let Some(p) = self.0.as_deref_mut() {
            let t = Self::now_ns(p).saturating_sub(p.received_ns);
            p.hists.stages[1].saturating_record(t.max(1));
        }
    }

    /// A group commit starts; pass the result to [`Self::flushed`].
    #[inline]
    pub fn flush_start(&self) -> u64 {
        self.0.as_deref().map_or(0, Self::now_ns)
    }

    #[inline]
    pub fn flushed(&mut self, started_ns: u64) {
        if let Some(p) = self.0.as_deref_mut() {
            let t = Self::now_ns(p).saturating_sub(started_ns);
            p.hists.flush.saturating_record(t.max(1));
        }
    }

    /// This loop turn sequenced `inputs` inputs, the last one `end_seq`.
    pub fn batch(&mut self, end_seq: u64, inputs: u64) {
        let Some(p) = self.0.as_deref_mut() else {
            return;
        };
        // Bounded by the node's own bound on unreleased batches; a metric never grows past it.
        if inputs > 0 && p.unreleased.len() < p.unreleased.capacity() {
            p.unreleased.push_back(Batch {
                end_seq,
                received_ns: p.received_ns,
                inputs,
            });
        }
    }

    /// Everything through `released_seq` is released.
    pub fn released(&mut self, released_seq: u64) {
        let Some(p) = self.0.as_deref_mut() else {
            return;
        };
        let now = Self::now_ns(p);
        while let Some(b) = p.unreleased.front().copied() {
            if b.end_seq > released_seq {
                break;
            }
            p.unreleased.pop_front();
            let t = now.saturating_sub(b.received_ns).max(1);
            p.hists.stages[2].saturating_record_n(t, b.inputs);
            if p.unwritten.len() < p.unwritten.capacity() {
                p.unwritten.push_back(b);
            }
        }
    }

    /// The released replies were handed to the sockets.
    pub fn written(&mut self) {
        let Some(p) = self.0.as_deref_mut() else {
            return;
        };
        if p.unwritten.is_empty() {
            return;
        }
        let now = Self::now_ns(p);
        while let Some(b) = p.unwritten.pop_front() {
            let t = now.saturating_sub(b.received_ns).max(1);
            p.hists.stages[3].saturating_record_n(t, b.inputs);
        }
    }

    /// Is a hand-over due ([`HANDOVER_INTERVAL_NS`] since the last)?
    pub fn hand_over_due(&self) -> bool {
        self.0.as_deref().is_some_and(|p| {
            Self::now_ns(p).saturating_sub(p.last_handover_ns) >= HANDOVER_INTERVAL_NS
        })
    }

    /// Store the gauges and swap the histograms for the emptied set, if the metrics thread
    /// has given it back (else keep filling these).
    pub fn hand_over(&mut self, values: &GaugeValues) {
        let Some(p) = self.0.as_deref_mut() else {
            return;
        };
        p.last_handover_ns = Self::now_ns(p);
        p.gauges.store(values);
        if let Ok(mut empty) = p.spare.try_recv() {
            std::mem::swap(&mut p.hists, &mut empty);
            match p.full.try_send(empty) {
                Ok(()) => {}
                // Two sets circulate: the channel always has room for the one we hold.
                Err(TrySendError::Full(_)) => unreachable!("one set in flight at most"),
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }
}

/// The engine thread's numbers at a hand-over.
#[derive(Clone, Copy, Debug, Default)]
pub struct GaugeValues {
    pub sessions_logged_in: u64,
    pub connections: u64,
    pub last_seq: u64,
    pub released_seq: u64,
    pub resting_orders: u64,
    pub order_refs: u64,
    pub matches: u64,
    pub day_ended: bool,
}

impl Gauges {
    fn store(&self, v: &GaugeValues) {
        let r = Ordering::Relaxed;
        self.sessions_logged_in.store(v.sessions_logged_in, r);
        self.connections.store(v.connections, r);
        self.last_seq.store(v.last_seq, r);
        self.released_seq.store(v.released_seq, r);
        self.resting_orders.store(v.resting_orders, r);
        self.order_refs.store(v.order_refs, r);
        self.matches.store(v.matches, r);
        self.day_ended.store(v.day_ended, r);
    }
}

/// What the metrics thread reads.
pub struct Sources {
    pub listen: SocketAddr,
    /// The trading day's journal directory and its date.
    pub journal_dir: PathBuf,
    pub date: String,
    pub durability: &'static str,
    pub symbols: Vec<String>,
    pub ouch: Vec<StreamReader>,
    pub itch: StreamReader,
    /// Raised by the replication server as standbys confirm.
    pub confirmed_seq: Arc<AtomicU64>,
}

/// Start the metrics thread; returns the probe the engine thread records with and the
/// server handle.
pub fn spawn(sources: Sources) -> io::Result<(Probe, crate::marketdata::ServerHandle)> {
    let mut listener = crate::guard::listen(sources.listen, LISTEN_BACKLOG)?;
    let local = listener.local_addr()?;
    let poll = mio::Poll::new()?;
    poll.registry()
        .register(&mut listener, mio::Token(0), mio::Interest::READABLE)?;
    let (full_tx, full_rx) = channel::bounded(1);
    let (spare_tx, spare_rx) = channel::bounded(1);
    spare_tx.send(Hists::new()).expect("a new channel has room");
    let gauges = Arc::new(Gauges::default());
    let batches = limits::UNRELEASED_BATCHES_MAX + 1;
    let probe = Probe(Some(Box::new(ProbeInner {
        epoch: Instant::now(),
        received_ns: 0,
        hists: Hists::new(),
        full: full_tx,
        spare: spare_rx,
        unreleased: VecDeque::with_capacity(batches),
        unwritten: VecDeque::with_capacity(batches),
        last_handover_ns: 0,
        gauges: gauges.clone(),
    })));
    let stop = Arc::new(AtomicBool::new(false));
    let mut state = State::new(sources, gauges.clone(), full_rx, spare_tx);
    let stop_flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            tracing::info!(addr = %local, "metrics endpoint listening (GET /metrics)");
            serve(poll, listener, &mut state, &stop_flag);
        })?;
    Ok((
        probe,
        crate::marketdata::ServerHandle::new(stop, thread, local),
    ))
}

fn serve(
    mut poll: mio::Poll,
    listener: mio::net::TcpListener,
    state: &mut State,
    stop: &AtomicBool,
) {
    let mut events = mio::Events::with_capacity(4);
    while !stop.load(Ordering::Acquire) {
        if let Err(e) = poll.poll(&mut events, Some(IDLE_POLL))
            && e.kind() != io::ErrorKind::Interrupted
        {
            tracing::error!(error = %e, "metrics poll failed; the endpoint stops");
            return;
        }
        state.catch_up();
        // Edge-triggered: take every waiting connection (bounded by the small backlog).
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = answer(stream.into(), state) {
                        tracing::debug!(error = %e, "metrics request failed");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    break;
                }
            }
        }
    }
}

/// Read one request head and answer it; the connection is closed after the answer.
fn answer(mut stream: TcpStream, state: &mut State) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    let mut head = [0u8; REQUEST_BYTES_MAX];
    let mut len = 0;
    while !head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == head.len() {
            return respond(&mut stream, "431 Request Header Fields Too Large", "", "");
        }
        match stream.read(&mut head[len..])? {
            0 => return Ok(()),
            n => len += n,
        }
    }
    let line = head[..len]
        .split(|&b| b == b'\r')
        .next()
        .unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => {
            state.catch_up();
            let body = state.render();
            respond(
                &mut stream,
                "200 OK",
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                &body,
            )
        }
        (Some(b"GET"), _) => respond(&mut stream, "404 Not Found", "text/plain", "GET /metrics\n"),
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", ""),
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// One side of one symbol's displayed book, as the ITCH feed shows it.
#[derive(Default, Clone, Debug)]
struct SideDepth {
    orders: u64,
    /// Orders at each price.
    levels: BTreeMap<u32, u64>,
}

/// A displayed order the feed added and has not removed.
#[derive(Clone, Copy, Debug)]
struct Shown {
    book: usize,
    price: u32,
    shares: u32,
}

/// The metrics thread's state: what it has read so far.
struct State {
    sources: Sources,
    gauges: Arc<Gauges>,
    full: Receiver<Box<Hists>>,
    spare: Sender<Box<Hists>>,
    /// Cumulative since start.
    hists: Box<Hists>,
    journal: Option<crate::journal::JournalReader>,
    journal_failed: bool,
    inputs: BTreeMap<&'static str, u64>,
    journal_bytes: u64,
    /// Next message to read per OUCH stream, and of the ITCH stream.
    ouch_next: Vec<u64>,
    itch_next: u64,
    ouch_types: BTreeMap<u8, u64>,
    rejects: BTreeMap<u8, u64>,
    itch_types: BTreeMap<u8, u64>,
    /// Per symbol (locate - 1) × side (0 buy, 1 sell).
    depth: Vec<SideDepth>,
    shown: HashMap<u64, Shown>,
}

impl State {
    fn new(
        sources: Sources,
        gauges: Arc<Gauges>,
        full: Receiver<Box<Hists>>,
        spare: Sender<Box<Hists>>,
    ) -> State {
        let accounts = sources.ouch.len();
        let books = sources.symbols.len() * 2;
        State {
            sources,
            gauges,
            full,
            spare,
            hists: Hists::new(),
            journal: None,
            journal_failed: false,
            inputs: BTreeMap::new(),
            journal_bytes: 0,
            ouch_next: vec![1; accounts],
            itch_next: 1,
            ouch_types: BTreeMap::new(),
            rejects: BTreeMap::new(),
            itch_types: BTreeMap::new(),
            depth: vec![SideDepth::default(); books],
            shown: HashMap::new(),
        }
    }

    fn catch_up(&mut self) {
        if let Ok(mut filled) = self.full.try_recv() {
            for (all, new) in self.hists.stages.iter_mut().zip(&filled.stages) {
                let _ = all.add(new);
            }
            let _ = self.hists.flush.add(&filled.flush);
            filled.reset();
            let _ = self.spare.try_send(filled);
        }
        self.read_journal();
        for account in 0..self.sources.ouch.len() {
            self.read_ouch(account);
        }
        self.read_itch();
    }

    fn read_journal(&mut self) {
        if self.journal_failed {
            return;
        }
        if self.journal.is_none() {
            match crate::journal::JournalReader::open(&self.sources.journal_dir, 1) {
                Ok(reader) => self.journal = Some(reader),
                Err(crate::journal::JournalError::EmptyJournal { .. }) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: cannot read the journal; no input counts");
                    self.journal_failed = true;
                    return;
                }
            }
        }
        let reader = self.journal.as_mut().expect("opened above");
        for _ in 0..CATCH_UP_STEP_MAX {
            let record = match reader.next() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: journal read failed; input counts stop");
                    self.journal_failed = true;
                    break;
                }
            };
            let kind = crate::sequencer::record::kind_name(record.kind).unwrap_or("other");
            *self.inputs.entry(kind).or_default() += 1;
            self.journal_bytes +=
                crate::journal::record::record_span_bytes(record.payload.len() as u64);
        }
    }

    fn read_ouch(&mut self, account: usize) {
        let stream = &self.sources.ouch[account];
        let end = stream
            .len()
            .min(self.ouch_next[account] + CATCH_UP_STEP_MAX);
        for seq in self.ouch_next[account]..=end {
            let Some(m) = stream.get(seq) else { break };
            *self.ouch_types.entry(m[0]).or_default() += 1;
            // Rejected: type, timestamp (8), token (14), reason.
            if m[0] == crate::wire::ouch::kind::REJECTED && m.len() > 23 {
                *self.rejects.entry(m[23]).or_default() += 1;
            }
            self.ouch_next[account] = seq + 1;
        }
    }

    fn read_itch(&mut self) {
        let stream = self.sources.itch.clone();
        let end = stream.len().min(self.itch_next + CATCH_UP_STEP_MAX);
        for seq in self.itch_next..=end {
            let Some(m) = stream.get(seq) else { break };
            *self.itch_types.entry(m[0]).or_default() += 1;
            if let Ok(message) = crate::wire::itch::Message::decode(m) {
                self.mirror(&message);
            }
            self.itch_next = seq + 1;
        }
    }

    /// Follow the displayed book: adds, executions, cancels, deletes, replaces.
    fn mirror(&mut self, m: &crate::wire::itch::Message) {
        use crate::wire::itch::Body;
        let books = self.depth.len();
        let book = |locate: u16, side: u8| -> Option<usize> {
            let symbol = (locate as usize).checked_sub(1)?;
            (symbol * 2 < books).then_some(symbol * 2 + usize::from(side == b'S'))
        };
        match m.body {
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
            } => {
                if let Some(book) = book(m.header.locate, side) {
                    self.add(order_ref.0, book, price.0, shares.0);
                }
            }
            Body::OrderExecuted {
                order_ref, shares, ..
            }
            | Body::OrderExecutedWithPrice {
                order_ref, shares, ..
            }
            | Body::OrderCancel { order_ref, shares } => self.reduce(order_ref.0, shares.0),
            Body::OrderDelete { order_ref } => self.remove(order_ref.0),
            Body::OrderReplace {
                old_ref,
                new_ref,
                shares,
                price,
            } => {
                if let Some(old) = self.shown.get(&old_ref.0).copied() {
                    self.remove(old_ref.0);
                    self.add(new_ref.0, old.book, price.0, shares.0);
                }
            }
            _ => {}
        }
    }

    fn add(&mut self, order_ref: u64, book: usize, price: u32, shares: u32) {
        let depth = &mut self.depth[book];
        depth.orders += 1;
        *depth.levels.entry(price).or_default() += 1;
        self.shown.insert(
            order_ref,
            Shown {
                book,
                price,
                shares,
            },
        );
    }

    fn reduce(&mut self, order_ref: u64, shares: u32) {
        let Some(order) = self.shown.get_mut(&order_ref) else {
            return;
        };
        order.shares = order.shares.saturating_sub(shares);
        if order.shares == 0 {
            self.remove(order_ref);
        }
    }

    fn remove(&mut self, order_ref: u64) {
        let Some(order) = self.shown.remove(&order_ref) else {
            return;
        };
        let depth = &mut self.depth[order.book];
        depth.orders -= 1;
        let at = depth
            .levels
            .get_mut(&order.price)
            .expect("a shown order's level");
        *at -= 1;
        if *at == 0 {
            depth.levels.remove(&order.price);
        }
    }

    /// The exposition, Prometheus text format 0.0.4.
    fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.view()));
        let mut body = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)
            .expect("writing to a String");
        body
    }

    fn view(&self) -> View {
        let g = &self.gauges;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let last_seq = load(&g.last_seq);
        let letter = |(k, v): (&u8, &u64)| ((*k as char).to_string(), *v);
        let mut depth = Vec::with_capacity(self.depth.len());
        for (i, d) in self.depth.iter().enumerate() {
            let symbol = self.sources.symbols[i / 2].clone();
            let side = if i % 2 == 0 { "buy" } else { "sell" };
            depth.push((symbol, side, d.orders, d.levels.len() as u64));
        }
        View {
            date: self.sources.date.clone(),
            durability: self.sources.durability,
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            journal_bytes: self.journal_bytes,
            ouch_types: self.ouch_types.iter().map(letter).collect(),
            rejects: self.rejects.iter().map(letter).collect(),
            itch_types: self.itch_types.iter().map(letter).collect(),
            depth,
            sessions_logged_in: load(&g.sessions_logged_in),
            connections: load(&g.connections),
            last_seq,
            released_seq: load(&g.released_seq),
            resting_orders: load(&g.resting_orders),
            order_refs: load(&g.order_refs),
            matches: load(&g.matches),
            day_ended: g.day_ended.load(Ordering::Relaxed),
            unconfirmed: last_seq
                .saturating_sub(self.sources.confirmed_seq.load(Ordering::Acquire)),
            stages: STAGES
                .iter()
                .zip(&self.hists.stages)
                .map(|(s, h)| (s.to_string(), HistView::of(h)))
                .collect(),
            flush: HistView::of(&self.hists.flush),
        }
    }
}

/// A histogram in Prometheus terms (seconds).
#[derive(Clone, Debug)]
struct HistView {
    sum_s: f64,
    count: u64,
    /// (upper bound, count in this bucket alone), the last bound +Inf: the encoder sums them
    /// into Prometheus' cumulative `le` buckets itself.
    buckets: Vec<(f64, u64)>,
    quantiles: Vec<(f64, f64)>,
}

impl HistView {
    fn of(h: &Histogram<u64>) -> HistView {
        let sum_ns = h.iter_recorded().fold(0.0, |sum, v| {
            sum + v.value_iterated_to() as f64 * v.count_at_value() as f64
        });
        // Cumulative counts (monotone: each range contains the one before), then differences:
        // adjacent ranges of an hdrhistogram may share a sub-bucket, so counting each range
        // on its own could count a value twice.
        let mut below = 0u64;
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_S
            .iter()
            .map(|&b| {
                let cumulative = h.count_between(0, (b * 1e9) as u64).min(h.len());
                let alone = cumulative.saturating_sub(below);
                below = below.max(cumulative);
                (b, alone)
            })
            .collect();
        buckets.push((f64::INFINITY, h.len() - below));
        let quantiles = QUANTILES
            .iter()
            .map(|&q| {
                let v = if h.is_empty() {
                    0.0
                } else {
                    h.value_at_quantile(q) as f64 / 1e9
                };
                (q, v)
            })
            .collect();
        HistView {
            sum_s: sum_ns / 1e9,
            count: h.len(),
            buckets,
            quantiles,
        }
    }
}

/// Everything a scrape shows, copied out of the state.
#[derive(Clone, Debug)]
struct View {
    date: String,
    durability: &'static str,
    inputs: Vec<(String, u64)>,
    journal_bytes: u64,
    ouch_types: Vec<(String, u64)>,
    rejects: Vec<(String, u64)>,
    itch_types: Vec<(String, u64)>,
    /// (symbol, side, orders, levels).
    depth: Vec<(String, &'static str, u64, u64)>,
    sessions_logged_in: u64,
    connections: u64,
    last_seq: u64,
    released_seq: u64,
    resting_orders: u64,
    order_refs: u64,
    matches: u64,
    day_ended: bool,
    unconfirmed: u64,
    stages: Vec<(String, HistView)>,
    flush: HistView,
}

type Fmt = Result<(), std::fmt::Error>;
type NoExemplar = Option<&'static Exemplar<NoLabelSet, u64>>;

fn counter_family(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(String, u64)],
) -> Fmt {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in values {
        let labels = [(label, value.as_str())];
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, u64, u64>(n, None as NoExemplar)?;
    }
    Ok(())
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Fmt {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

fn histograms(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: Option<&'static str>,
    values: &[(String, HistView)],
) -> Fmt {
    let mut m = e.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (value, h) in values {
        match label {
            Some(label) => {
                let labels = [(label, value.as_str())];
                m.encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None)?
            }
            None => m.encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None)?,
        }
    }
    Ok(())
}

impl Collector for View {
    fn encode(&self, mut e: DescriptorEncoder) -> Fmt {
        {
            let mut m = e.encode_descriptor(
                "bourse_trading_day",
                "the trading day this process serves (its journal's UTC date) and its durability mode",
                None,
                MetricType::Gauge,
            )?;
            let labels = [
                ("date", self.date.as_str()),
                ("durability", self.durability),
            ];
            m.encode_family(&labels)?.encode_gauge(&1i64)?;
        }
        gauge(
            &mut e,
            "bourse_day_ended",
            "1 once the day's end of day is released",
            u64::from(self.day_ended),
        )?;
        counter_family(
            &mut e,
            "bourse_inputs",
            "journaled inputs of the trading day, by kind (read from the journal)",
            "kind",
            &self.inputs,
        )?;
        gauge(
            &mut e,
            "bourse_journal_bytes",
            "bytes of records in the trading day's journal",
            self.journal_bytes,
        )?;
        gauge(
            &mut e,
            "bourse_journal_last_seq",
            "last journal sequence number",
            self.last_seq,
        )?;
        gauge(
            &mut e,
            "bourse_released_seq",
            "last input whose outputs are released",
            self.released_seq,
        )?;
        gauge(
            &mut e,
            "bourse_replication_unconfirmed_records",
            "journaled records no standby has confirmed yet (meaningful with a standby)",
            self.unconfirmed,
        )?;
        histograms(
            &mut e,
            "bourse_journal_flush",
            "duration of each group commit (journal flush)",
            None,
            &[(String::new(), self.flush.clone())],
        )?;
        counter_family(
            &mut e,
            "bourse_ouch_messages",
            "OUCH messages released to the accounts' streams, by type",
            "type",
            &self.ouch_types,
        )?;
        counter_family(
            &mut e,
            "bourse_ouch_rejects",
            "OUCH Rejected messages, by reason",
            "reason",
            &self.rejects,
        )?;
        counter_family(
            &mut e,
            "bourse_itch_messages",
            "ITCH messages released to the feed, by type",
            "type",
            &self.itch_types,
        )?;
        gauge(
            &mut e,
            "bourse_sessions_logged_in",
            "order-entry sessions logged in",
            self.sessions_logged_in,
        )?;
        gauge(
            &mut e,
            "bourse_gateway_connections",
            "order-entry TCP connections open (logged in or not)",
            self.connections,
        )?;
        gauge(
            &mut e,
            "bourse_resting_orders",
            "resting orders of every symbol, hidden ones included",
            self.resting_orders,
        )?;
        gauge(
            &mut e,
            "bourse_order_refs",
            "order reference numbers handed out today",
            self.order_refs,
        )?;
        gauge(
            &mut e,
            "bourse_matches",
            "match numbers handed out today",
            self.matches,
        )?;
        for (name, help, pick) in [
            (
                "bourse_book_orders",
                "displayed resting orders per symbol and side (as the ITCH feed shows them)",
                2usize,
            ),
            (
                "bourse_book_levels",
                "displayed price levels per symbol and side (as the ITCH feed shows them)",
                3,
            ),
        ] {
            let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (symbol, side, orders, levels) in &self.depth {
                let value = if pick == 2 { *orders } else { *levels } as i64;
                let labels = [("symbol", symbol.as_str()), ("side", *side)];
                m.encode_family(&labels)?.encode_gauge(&value)?;
            }
        }
        histograms(
            &mut e,
            "bourse_latency",
            "time from receiving an input to each stage (journaled, matched, released, written)",
            Some("stage"),
            &self.stages,
        )?;
        let mut m = e.encode_descriptor(
            "bourse_latency_quantile",
            "latency quantiles since start from the daemon's hdrhistograms, by stage",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (stage, h) in &self.stages {
            for (q, v) in &h.quantiles {
                let q = q.to_string();
                let labels = [("stage", stage.as_str()), ("quantile", q.as_str())];
                m.encode_family(&labels)?.encode_gauge(v)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Alpha, MatchNumber, OrderRef, Price, Shares, Timestamp};
    use crate::wire::itch::{Body, Header, Message};

    fn state() -> State {
        let (_, itch) = crate::stream::stream(1024, 16).unwrap();
        let (full_tx, full) = channel::bounded(1);
        let (spare, _spare_rx) = channel::bounded(1);
        drop(full_tx);
        let sources = Sources {
            listen: "127.0.0.1:0".parse().unwrap(),
            journal_dir: PathBuf::from("/nonexistent"),
            date: "2026-12-01".into(),
            durability: "flush",
            symbols: vec!["AAPL".into(), "MSFT".into()],
            ouch: Vec::new(),
            itch,
            confirmed_seq: Arc::new(AtomicU64::new(0)),
        };
        State::new(sources, Arc::new(Gauges::default()), full, spare)
    }

    fn at(locate: u16, body: Body) -> Message {
        Message {
            header: Header {
                locate,
                tracking: 0,
                timestamp: Timestamp(1),
            },
            body,
        }
    }

    fn add(order_ref: u64, side: u8, shares: u32, price: u32) -> Body {
        Body::AddOrder {
            order_ref: OrderRef(order_ref),
            side,
            shares: Shares(shares),
            stock: Alpha::from_str_padded("MSFT").unwrap(),
            price: Price(price),
        }
    }

    /// (orders, levels) of MSFT's side.
    fn depth(s: &State, side: usize) -> (u64, usize) {
        let d = &s.depth[2 + side];
        (d.orders, d.levels.len())
    }

    #[test]
    fn the_displayed_book_follows_adds_executions_cancels_replaces_and_deletes() {
        let mut s = state();
        for (r, price) in [(1, 100), (2, 100), (3, 99)] {
            s.mirror(&at(2, add(r, b'B', 100, price)));
        }
        s.mirror(&at(2, add(4, b'S', 50, 101)));
        assert_eq!((depth(&s, 0), depth(&s, 1)), ((3, 2), (1, 1)));
        assert_eq!(s.depth[0].orders, 0, "AAPL untouched");
        // A partial execution keeps the order; the rest of it removes it.
        let exec = |r, n| Body::OrderExecuted {
            order_ref: OrderRef(r),
            shares: Shares(n),
            match_number: MatchNumber(1),
        };
        s.mirror(&at(2, exec(4, 20)));
        assert_eq!(depth(&s, 1), (1, 1));
        s.mirror(&at(2, exec(4, 30)));
        assert_eq!(depth(&s, 1), (0, 0));
        // Replace moves an order to its new price (and reference); cancel of all and delete
        // remove.
        s.mirror(&at(
            2,
            Body::OrderReplace {
                old_ref: OrderRef(3),
                new_ref: OrderRef(5),
                shares: Shares(100),
                price: Price(100),
            },
        ));
        assert_eq!(depth(&s, 0), (3, 1));
        s.mirror(&at(
            2,
            Body::OrderCancel {
                order_ref: OrderRef(5),
                shares: Shares(100),
            },
        ));
        s.mirror(&at(
            2,
            Body::OrderDelete {
                order_ref: OrderRef(1),
            },
        ));
        assert_eq!(depth(&s, 0), (1, 1));
        // A reference the feed never added changes nothing.
        s.mirror(&at(
            2,
            Body::OrderDelete {
                order_ref: OrderRef(99),
            },
        ));
        assert_eq!(depth(&s, 0), (1, 1));
        assert_eq!(s.shown.len(), 1);
    }

    #[test]
    fn histograms_become_cumulative_buckets_in_seconds() {
        let mut h = histogram();
        h.saturating_record_n(2_000, 3); // 2 µs
        h.saturating_record(3_000_000); // 3 ms
        let v = HistView::of(&h);
        assert_eq!(v.count, 4);
        let alone = |bound: f64| v.buckets.iter().find(|b| b.0 == bound).unwrap().1;
        assert_eq!(
            (alone(1e-6), alone(2.5e-6), alone(2.5e-3), alone(5e-3)),
            (0, 3, 0, 1)
        );
        assert_eq!(alone(f64::INFINITY), 0);
        assert_eq!(v.buckets.iter().map(|b| b.1).sum::<u64>(), v.count);
        let mut slow = histogram();
        slow.saturating_record(30_000_000_000); // 30 s: beyond the last bound
        assert_eq!(
            HistView::of(&slow).buckets.last(),
            Some(&(f64::INFINITY, 1))
        );
        assert!((v.sum_s - 0.003006).abs() < 1e-5, "{}", v.sum_s);
        let empty = HistView::of(&histogram());
        assert_eq!((empty.count, empty.sum_s), (0, 0.0));
    }
}
