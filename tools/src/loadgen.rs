//! The load generator's engine (binary `bourse-loadgen`): N SoupBinTCP/OUCH sessions, one per
//! account, driven by a seeded workload.
//!
//! Threads: one **sender** paces the ops (open loop at a target rate, or closed loop with a
//! window of Enter Orders in flight) and writes to every session's socket; one **receiver**
//! reads every socket from one mio poll and records latencies. The main thread only shows
//! progress. Nothing is allocated per order: the ops are generated and the per-order state is
//! sized before the clock starts; each order's timestamps live in flat arrays indexed by the
//! order id, which its token carries (`RRRR` run tag + 10 digits of id).
//!
//! Open loop with coordinated-omission correction: op `i` is *intended* at `t0 + i / rate`;
//! latency is measured from that instant, so a stall of the venue (or of this sender) counts
//! against every order that should have been sent during it. The service time (from the moment
//! the order was queued for writing; the write follows within the batch of at most
//! `MAX_BATCH`) is recorded too, to tell the two apart. Closed loop measures from that moment
//! as well.

use crate::latency::{self, Clock, Pace, Series};
use bourse::client::OuchClient;
use bourse::types::{Alpha, Token};
use bourse::wire::ouch::{Inbound, Outbound, cancel_reason};
use bourse::wire::soupbin::{self, FrameReader, Packet};
use bourse::workload::{self, Op, Spec, Workload};
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token as MioToken};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct Options {
    pub gateway: SocketAddr,
    /// `(username, password)`: one session each.
    pub accounts: Vec<(String, String)>,
    pub symbol: String,
    /// The symbol's tick (workload prices are ticks).
    pub tick: u32,
    pub workload: Workload,
    pub seed: u64,
    /// Resting orders the workload keeps near.
    pub resting: u32,
    /// Open loop: ops per second. Ignored when `window` is set.
    pub rate: u64,
    /// Closed loop: at most this many Enter Orders without their Accepted/Rejected.
    pub window: Option<u32>,
    /// Sending stops after this long (or when the ops run out).
    pub duration: Duration,
    /// After sending: how long to wait for the last answers.
    pub drain: Duration,
    /// Four characters that start every token of this run (tokens are unique per account
    /// and day, so two runs on one day need different tags).
    pub run_tag: [u8; 4],
    pub pace: Pace,
    /// Receiver busy-polls instead of sleeping in epoll.
    pub busy_poll: bool,
}

/// Counters the main thread reads while the run goes.
#[derive(Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub total: AtomicU64,
    pub answered: AtomicU64,
    pub errors: AtomicU64,
}

/// Kinds of latency series, in report order.
pub const SERIES: [&str; 5] = [
    "enter -> Accepted",
    "enter -> Executed",
    "cancel -> Canceled",
    "replace -> Replaced",
    "Accepted (service)",
];
const ACCEPTED: usize = 0;
const EXECUTED: usize = 1;
const CANCELED: usize = 2;
const REPLACED: usize = 3;
const SERVICE: usize = 4;

pub struct Report {
    pub hists: Vec<Histogram<u64>>,
    /// Ops written, by kind (`workload::KIND_NAMES` order).
    pub sent_by_kind: [u64; 6],
    pub sent: u64,
    pub seconds: f64,
    pub rejects: Vec<(u8, u64)>,
    /// Enter Orders that got neither Accepted nor Rejected by the end of the drain.
    pub unanswered: u64,
    /// Replies about orders of earlier runs on the same accounts (executions and cancels of
    /// what they left resting): the venue's business, not this run's errors.
    pub other_runs: u64,
    pub errors: Vec<String>,
    pub interrupted: bool,
    pub open_loop: bool,
    pub target_rate: u64,
    /// Largest lag of the sender behind its schedule (open loop), ns.
    pub max_send_lag_ns: u64,
    /// Closed loop: every generated order was sent before `--duration` was up.
    pub ran_out: bool,
}

impl Report {
    pub fn achieved_rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.sent as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.len() as u64 + self.unanswered
    }

    pub fn series(&self) -> Vec<Series<'_>> {
        SERIES
            .iter()
            .zip(&self.hists)
            .map(|(name, hist)| Series { name, hist })
            .collect()
    }

    /// The summary printed at the end of a run.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let mode = if self.open_loop {
            format!("open loop, target {} ops/s", self.target_rate)
        } else {
            "closed loop".into()
        };
        // Closed loop an order is due when the window lets it out: no schedule to lag behind.
        let lag = if self.open_loop {
            format!(
                "; max sender lag {:.1} us",
                self.max_send_lag_ns as f64 / 1_000.0
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{}sent {} ops in {:.3} s ({mode}): achieved {:.0} ops/s{lag}\n",
            if self.interrupted {
                "INTERRUPTED: partial report. "
            } else {
                ""
            },
            self.sent,
            self.seconds,
            self.achieved_rate(),
        ));
        if self.ran_out {
            out.push_str("(closed loop: the generated orders ran out before --duration)\n");
        }
        let kinds: Vec<String> = workload::KIND_NAMES
            .iter()
            .zip(self.sent_by_kind)
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        out.push_str(&format!("ops: {}\n", kinds.join(", ")));
        out.push_str(&latency::table(&self.series()));
        let rejects: Vec<String> = self
            .rejects
            .iter()
            .map(|(r, c)| format!("{} x{c}", *r as char))
            .collect();
        out.push_str(&format!(
            "rejected: {}; unanswered enters: {}; errors: {}\n",
            if rejects.is_empty() {
                "none".into()
            } else {
                rejects.join(", ")
            },
            self.unanswered,
            self.errors.len()
        ));
        if self.other_runs > 0 {
            out.push_str(&format!(
                "replies about earlier runs' orders (not errors): {}\n",
                self.other_runs
            ));
        }
        for e in self.errors.iter().take(10) {
            out.push_str(&format!("  error: {e}\n"));
        }
        out
    }
}

const NOT_SENT: u64 = 0;
/// Per-order kind (receiver side), by id.
const KIND_NONE: u8 = 0;
const KIND_ENTER: u8 = 1;
const KIND_REPLACE: u8 = 2;

/// Per-order timestamps shared by the two threads, indexed by order id. A stored time is
/// `ns + 1` so that 0 means "not sent".
struct Slots {
    intended: Vec<AtomicU64>,
    written: Vec<AtomicU64>,
    cancel_intended: Vec<AtomicU64>,
    kind: Vec<u8>,
}

impl Slots {
    fn new(ops: &[Op], ids: usize) -> Slots {
        let zeros = || {
            (0..ids)
                .map(|_| AtomicU64::new(NOT_SENT))
                .collect::<Vec<_>>()
        };
        let mut kind = vec![KIND_NONE; ids];
        for op in ops {
            match *op {
                Op::Limit { id, .. } | Op::Ioc { id, .. } | Op::Market { id, .. } => {
                    kind[id as usize] = KIND_ENTER
                }
                Op::Replace { new_id, .. } => kind[new_id as usize] = KIND_REPLACE,
                _ => {}
            }
        }
        Slots {
            intended: zeros(),
            written: zeros(),
            cancel_intended: zeros(),
            kind,
        }
    }
}

/// The token of order `id` in run `tag`.
pub fn token(tag: [u8; 4], id: u32) -> Token {
    let mut b = [b'0'; 14];
    b[..4].copy_from_slice(&tag);
    let mut v = id;
    for d in b[4..].iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    Alpha(b)
}

/// The order id of a token of run `tag`, `None` for any other token.
pub fn id_of(tag: [u8; 4], t: &Token) -> Option<u32> {
    if t.0[..4] != tag {
        return None;
    }
    let mut v: u64 = 0;
    for &d in &t.0[4..] {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(d - b'0');
    }
    u32::try_from(v).ok()
}

/// A run tag from the wall clock: base-36 of the second of the day, so runs on one day differ.
pub fn default_run_tag() -> [u8; 4] {
    run_tag_at(unix_now().as_secs())
}

/// The time since the Unix epoch (zero if the clock is before it).
pub fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// The run tag of second `secs`: four base-36 digits, repeating every ~19 days.
pub fn run_tag_at(secs: u64) -> [u8; 4] {
    let mut v = secs % (36u64.pow(4));
    let mut tag = [b'0'; 4];
    for b in tag.iter_mut().rev() {
        let d = (v % 36) as u8;
        *b = if d < 10 { b'0' + d } else { b'A' + d - 10 };
        v /= 36;
    }
    tag
}

/// The message of `op` with this run's tokens, made from the op's ids (the workload's own
/// tokens are its ids in decimal; parsing them back cost the sender ~6% of its CPU).
fn tagged(op: &Op, message: Inbound, tag: [u8; 4]) -> Inbound {
    match (message, *op) {
        (
            Inbound::Enter(mut o),
            Op::Limit { id, .. } | Op::Ioc { id, .. } | Op::Market { id, .. },
        ) => {
            o.token = token(tag, id);
            Inbound::Enter(o)
        }
        (Inbound::Cancel(mut c), Op::Cancel { id, .. } | Op::Reduce { id, .. }) => {
            c.token = token(tag, id);
            Inbound::Cancel(c)
        }
        (Inbound::Replace(mut r), Op::Replace { id, new_id, .. }) => {
            r.existing = token(tag, id);
            r.replacement = token(tag, new_id);
            Inbound::Replace(r)
        }
        (message, op) => unreachable!("workload::to_message made {message:?} of {op:?}"),
    }
}

/// Closed loop: ops generated per second of the run (more than this machine's venue takes).
const CLOSED_LOOP_OPS_PER_SEC: u64 = 1_500_000;
/// Ops of any run, at most (~50 bytes each with their timestamps: ~1.5 GB).
const OPS_MAX: u64 = 30_000_000;

/// Generate the ops of a run: `rate x duration` (open loop) or `CLOSED_LOOP_OPS_PER_SEC x
/// duration` (closed loop), at most `OPS_MAX`.
pub fn generate(options: &Options) -> workload::Stream {
    let secs = options.duration.as_secs().max(1);
    let wanted = match options.window {
        None => options.rate.saturating_mul(secs),
        Some(_) => CLOSED_LOOP_OPS_PER_SEC.saturating_mul(secs),
    };
    let mut spec = Spec::standard(options.workload, options.seed);
    spec.ops = wanted.clamp(1, OPS_MAX) as u32;
    spec.target_resting = options.resting.max(1);
    workload::generate(spec)
}

struct Session {
    stream: TcpStream,
    out: Vec<u8>,
    last_write: Instant,
}

/// Log every account in; their sockets go non-blocking (shared by the two threads).
fn connect(options: &Options) -> Result<(Vec<Session>, Vec<ReadSide>), String> {
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    for (user, password) in &options.accounts {
        let client = OuchClient::login(
            options.gateway,
            user,
            password,
            "",
            0,
            Duration::from_secs(5),
        )
        .map_err(|e| format!("login {user} at {}: {e}", options.gateway))?;
        let (stream, reader) = client.into_parts();
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("non-blocking socket: {e}"))?;
        let read = stream
            .try_clone()
            .map_err(|e| format!("clone socket: {e}"))?;
        senders.push(Session {
            stream,
            out: Vec::with_capacity(1 << 20),
            last_write: Instant::now(),
        });
        readers.push((read, reader));
    }
    Ok((senders, readers))
}

/// Outbound bytes queued for one session before the sender waits for the socket.
const MAX_QUEUED: usize = 256 << 10;
/// Ops appended without a flush when the sender is behind schedule.
const MAX_BATCH: usize = 64;

impl Session {
    /// Write what the socket takes now; returns false on a fatal error.
    fn flush(&mut self) -> io::Result<()> {
        let mut done = 0;
        while done < self.out.len() {
            match self.stream.write(&self.out[done..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if done > 0 {
            self.last_write = Instant::now();
        }
        if done == self.out.len() {
            self.out.clear();
        } else {
            self.out.drain(..done);
        }
        Ok(())
    }

    fn push(&mut self, message: &Inbound) {
        let mut packet = [0u8; soupbin::HEADER_LEN + 64];
        let n = message.encode(&mut packet[soupbin::HEADER_LEN..]);
        soupbin::write_header(&mut packet, soupbin::kind::UNSEQUENCED_DATA, n);
        self.out
            .extend_from_slice(&packet[..soupbin::HEADER_LEN + n]);
    }

    fn heartbeat_if_due(&mut self) {
        if self.out.is_empty() && self.last_write.elapsed() >= Duration::from_millis(800) {
            let mut b = [0u8; 8];
            let n = Packet::ClientHeartbeat.encode(&mut b);
            self.out.extend_from_slice(&b[..n]);
        }
    }
}

struct SenderResult {
    sent: u64,
    sent_by_kind: [u64; 6],
    seconds: f64,
    max_lag_ns: u64,
    errors: Vec<String>,
    sessions: Vec<Session>,
}

/// The longest a closed-loop sender waits for its window to open.
const ROOM_WAIT_MAX: Duration = Duration::from_millis(100);
/// A parked sender looks again this often even unwoken (a safety net: the receiver wakes it).
const ROOM_RECHECK: Duration = Duration::from_millis(1);

/// Enters answered (Accepted or Rejected), counted by the receiver, and the sender's wait for
/// its closed-loop window to open.
#[derive(Default)]
struct Answers {
    enters: AtomicU64,
    /// The sender is parked until `enters` reaches this; `0` when it is not waiting.
    wake_at: AtomicU64,
    sender: OnceLock<std::thread::Thread>,
}

impl Answers {
    fn enters(&self) -> u64 {
        self.enters.load(Ordering::SeqCst)
    }

    /// The receiver counts `n` more answers and wakes a sender whose wait they end. SeqCst
    /// pairs with [`Answers::await_room`]: either this sees the sender's `wake_at` or the
    /// sender sees these answers before it parks.
    fn publish(&self, n: u64) {
        let total = self.enters.fetch_add(n, Ordering::SeqCst) + n;
        let wake_at = self.wake_at.load(Ordering::SeqCst);
        if wake_at != 0
            && total >= wake_at
            && let Some(sender) = self.sender.get()
        {
            sender.unpark();
        }
    }

    /// Wait until the window (full at `sent` enters) has room, at most `give_up_after` (an
    /// answer that never comes would otherwise stall the run). Sleeping, the sender waits for
    /// an eighth of the window (at most 256 orders) and is woken by the receiver (it looks
    /// again every `recheck_every` regardless): it polled every 20 µs before, ~50,000
    /// wake-ups a second, a quarter of its CPU.
    fn await_room(
        &self,
        sent: u64,
        window: u32,
        pace: Pace,
        clock: &Clock,
        stop: &AtomicBool,
        (give_up_after, recheck_every): (Duration, Duration),
    ) {
        let window = u64::from(window);
        let give_up = clock.now_ns() + give_up_after.as_nanos() as u64;
        let room_min = match pace {
            Pace::Spin => 1,
            Pace::Sleep => (window / 8).clamp(1, 256),
        };
        let wake_at = sent - window + room_min;
        if pace == Pace::Sleep {
            self.sender.get_or_init(std::thread::current);
            self.wake_at.store(wake_at, Ordering::SeqCst);
        }
        while self.enters() < wake_at && clock.now_ns() < give_up && !stop.load(Ordering::Relaxed) {
            match pace {
                Pace::Spin => std::hint::spin_loop(),
                Pace::Sleep => std::thread::park_timeout(recheck_every),
            }
        }
        self.wake_at.store(0, Ordering::SeqCst);
    }
}

#[allow(clippy::too_many_arguments)]
fn send_loop(
    options: &Options,
    ops: &[Op],
    slots: &Slots,
    mut sessions: Vec<Session>,
    clock: Clock,
    stop: &AtomicBool,
    progress: &Progress,
    answers: &Answers,
) -> SenderResult {
    if options.pace == Pace::Sleep {
        latency::tight_timer_slack();
    }
    let interval_ns = 1_000_000_000f64 / options.rate.max(1) as f64;
    let end_ns = clock.now_ns() + options.duration.as_nanos() as u64;
    let t0 = clock.now_ns();
    let mut errors = Vec::new();
    let mut sent = 0u64;
    let mut enters = 0u64;
    let mut by_kind = [0u64; 6];
    let mut max_lag = 0u64;
    let mut batch = 0usize;
    let mut dirty = vec![false; sessions.len()];
    let n = sessions.len();
    for (i, op) in ops.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let intended = match options.window {
            None => {
                let due = t0 + (i as f64 * interval_ns) as u64;
                if due >= end_ns {
                    break;
                }
                if clock.now_ns() < due {
                    flush_dirty(&mut sessions, &mut dirty, &mut errors);
                    batch = 0;
                    latency::wait_until(&clock, due, options.pace, stop);
                }
                due
            }
            Some(window) => {
                // One clock read per op (each read is ~30 ns, a sixth of the op's own work).
                let mut now = clock.now_ns();
                if now >= end_ns {
                    break;
                }
                if enters - answers.enters() >= u64::from(window) {
                    flush_dirty(&mut sessions, &mut dirty, &mut errors);
                    batch = 0;
                    let limits = (ROOM_WAIT_MAX, ROOM_RECHECK);
                    answers.await_room(enters, window, options.pace, &clock, stop, limits);
                    now = clock.now_ns();
                }
                now
            }
        };
        // Closed loop: the op is due when the window lets it out, so intended = written.
        let now = match options.window {
            None => clock.now_ns(),
            Some(_) => intended,
        };
        max_lag = max_lag.max(now.saturating_sub(intended));
        // Stored as ns + 1: 0 means "not sent".
        match *op {
            Op::Limit { id, .. } | Op::Ioc { id, .. } | Op::Market { id, .. } => {
                slots.intended[id as usize].store(intended + 1, Ordering::Release);
                slots.written[id as usize].store(now + 1, Ordering::Release);
                enters += 1;
            }
            Op::Replace { new_id, .. } => {
                slots.intended[new_id as usize].store(intended + 1, Ordering::Release);
                slots.written[new_id as usize].store(now + 1, Ordering::Release);
            }
            Op::Cancel { id, .. } | Op::Reduce { id, .. } => {
                slots.cancel_intended[id as usize].store(intended + 1, Ordering::Release);
            }
        }
        // Encoded here, not in advance: memory stays at the ops, and encoding allocates nothing.
        let (_, message) = workload::to_message(op, &options.symbol, options.tick);
        let conn = usize::from(op.account()) % n;
        let session = &mut sessions[conn];
        session.push(&tagged(op, message, options.run_tag));
        dirty[conn] = true;
        if session.out.len() > MAX_QUEUED {
            // Back-pressure from the venue: wait for the socket (counted as latency).
            while session.out.len() > MAX_QUEUED / 2 && !stop.load(Ordering::Relaxed) {
                if let Err(e) = session.flush() {
                    errors.push(format!("write: {e}"));
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        sent += 1;
        by_kind[op.kind_index()] += 1;
        batch += 1;
        // Closed loop: what the window lets out leaves in one write (flushed above once the
        // window is full, or here at `MAX_BATCH`), as a client with many orders queued sends
        // them; one write per order made this process the machine's largest CPU user.
        let next_due = t0 + ((i + 1) as f64 * interval_ns) as u64;
        let open_loop_idle = options.window.is_none() && clock.now_ns() < next_due;
        if batch >= MAX_BATCH || open_loop_idle {
            flush_dirty(&mut sessions, &mut dirty, &mut errors);
            batch = 0;
        }
        if i % 256 == 0 {
            progress.sent.store(sent, Ordering::Relaxed);
            for s in sessions.iter_mut() {
                s.heartbeat_if_due();
            }
        }
    }
    flush_dirty(&mut sessions, &mut vec![true; dirty.len()], &mut errors);
    progress.sent.store(sent, Ordering::Relaxed);
    let seconds = (clock.now_ns() - t0) as f64 / 1e9;
    SenderResult {
        sent,
        sent_by_kind: by_kind,
        seconds,
        max_lag_ns: max_lag,
        errors,
        sessions,
    }
}

fn flush_dirty(sessions: &mut [Session], dirty: &mut [bool], errors: &mut Vec<String>) {
    for (s, d) in sessions.iter_mut().zip(dirty.iter_mut()) {
        if *d {
            if let Err(e) = s.flush() {
                errors.push(format!("write: {e}"));
            }
            *d = !s.out.is_empty();
        }
    }
}

/// The receiver thread's state: it alone owns the histograms.
struct Receiver<'a> {
    tag: [u8; 4],
    slots: &'a Slots,
    clock: Clock,
    progress: &'a Progress,
    answers: &'a Answers,
    /// Answers counted since the last [`Receiver::publish_answers`].
    enter_answers_unpublished: u64,
    answered_unpublished: u64,
    hists: Vec<Histogram<u64>>,
    exec_seen: Vec<bool>,
    rejects: [u64; 256],
    errors: Vec<String>,
    /// Replies for tokens of another run's tag (see [`Report::other_runs`]).
    other_runs: u64,
    closed: Vec<bool>,
}

/// One session's read side.
type ReadSide = (TcpStream, FrameReader);

impl Receiver<'_> {
    fn error(&mut self, what: String) {
        self.errors.push(what);
        self.progress.errors.fetch_add(1, Ordering::Relaxed);
    }

    fn run(&mut self, mut readers: Vec<ReadSide>, busy: bool, finish: &AtomicBool) {
        let mut poll = match Poll::new() {
            Ok(p) => p,
            Err(e) => return self.error(format!("poll: {e}")),
        };
        let mut mio_streams: Vec<mio::net::TcpStream> = Vec::new();
        for (i, (stream, _)) in readers.iter().enumerate() {
            let registered = stream.try_clone().and_then(|clone| {
                let mut s = mio::net::TcpStream::from_std(clone);
                poll.registry()
                    .register(&mut s, MioToken(i), Interest::READABLE)
                    .map(|()| s)
            });
            match registered {
                Ok(s) => mio_streams.push(s),
                Err(e) => return self.error(format!("register session {i}: {e}")),
            }
        }
        let mut events = Events::with_capacity(64);
        let timeout = Some(if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(20)
        });
        // Data the login already buffered.
        for (i, reader) in readers.iter_mut().enumerate() {
            self.drain_packets(&mut reader.1, i);
        }
        while !finish.load(Ordering::Acquire) {
            if let Err(e) = poll.poll(&mut events, timeout)
                && e.kind() != io::ErrorKind::Interrupted
            {
                return self.error(format!("poll: {e}"));
            }
            for event in events.iter() {
                let i = event.token().0;
                self.read_session(&mut readers[i], i);
            }
            if busy && events.is_empty() {
                std::hint::spin_loop();
            }
        }
    }

    fn read_session(&mut self, reader: &mut ReadSide, i: usize) {
        loop {
            let space = reader.1.read_space();
            if space.is_empty() {
                self.drain_packets(&mut reader.1, i);
                continue;
            }
            match reader.0.read(space) {
                Ok(0) => {
                    if !self.closed[i] {
                        self.closed[i] = true;
                        self.error(format!("session {i}: connection closed"));
                    }
                    return;
                }
                Ok(n) => {
                    reader.1.commit(n);
                    self.drain_packets(&mut reader.1, i);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if !self.closed[i] {
                        self.closed[i] = true;
                        self.error(format!("session {i}: {e}"));
                    }
                    return;
                }
            }
        }
    }

    /// Every whole packet read so far. They all arrived by `now` (the time of the read that
    /// brought the last of them): one clock read per read, not per packet, or the receiver's
    /// own decoding would count as the venue's latency. The shared counters are published
    /// once at the end (each `fetch_add` is a cache line the sender reads).
    fn drain_packets(&mut self, reader: &mut FrameReader, i: usize) {
        let now = self.clock.now_ns();
        while let Some(packet) = reader.next_packet() {
            match packet {
                Ok(Packet::SequencedData(payload)) => match Outbound::decode(payload) {
                    Ok(m) => self.on_message(&m, now),
                    Err(e) => self.error(format!("session {i}: undecodable OUCH: {e}")),
                },
                Ok(Packet::ServerHeartbeat) | Ok(Packet::Debug(_)) => {}
                Ok(Packet::EndOfSession) => self.error(format!("session {i}: End of Session")),
                Ok(other) => self.error(format!(
                    "session {i}: unexpected packet {:?}",
                    other.kind() as char
                )),
                Err(e) => {
                    self.error(format!("session {i}: framing: {e:?}"));
                    break;
                }
            }
        }
        self.publish_answers();
    }

    fn publish_answers(&mut self) {
        if self.enter_answers_unpublished > 0 {
            self.answers.publish(self.enter_answers_unpublished);
            self.enter_answers_unpublished = 0;
        }
        if self.answered_unpublished > 0 {
            self.progress
                .answered
                .fetch_add(self.answered_unpublished, Ordering::Relaxed);
            self.answered_unpublished = 0;
        }
    }

    /// The order id of a token of this run, or an error counted.
    fn id(&mut self, t: &Token) -> Option<usize> {
        let id = id_of(self.tag, t)
            .map(|id| id as usize)
            .filter(|&id| id < self.slots.kind.len());
        if id.is_none() {
            self.error(format!(
                "reply for a token this run never sent: {}",
                t.trimmed()
            ));
        }
        id
    }

    /// As [`Self::id`], for replies an earlier run's resting order can get (executed by this
    /// run's orders, canceled at its expiry): a load generator token of another tag is
    /// counted apart (`other_runs`), not an error.
    fn id_or_earlier_run(&mut self, t: &Token) -> Option<usize> {
        let tag = [t.0[0], t.0[1], t.0[2], t.0[3]];
        if tag != self.tag && id_of(tag, t).is_some() {
            self.other_runs += 1;
            return None;
        }
        self.id(t)
    }

    fn on_message(&mut self, m: &Outbound, now: u64) {
        let slots = self.slots;
        match m {
            Outbound::Accepted(a) => {
                let Some(i) = self.id(&a.token) else { return };
                if let Some(ns) = since(now, slots.intended[i].load(Ordering::Acquire)) {
                    latency::record(&mut self.hists[ACCEPTED], ns);
                }
                if let Some(ns) = since(now, slots.written[i].load(Ordering::Acquire)) {
                    latency::record(&mut self.hists[SERVICE], ns);
                }
                self.enter_answers_unpublished += 1;
                self.answered_unpublished += 1;
            }
            Outbound::Replaced(r) => {
                let Some(i) = self.id(&r.token) else { return };
                if let Some(ns) = since(now, slots.intended[i].load(Ordering::Acquire)) {
                    latency::record(&mut self.hists[REPLACED], ns);
                }
                self.answered_unpublished += 1;
            }
            Outbound::Executed(e) => {
                let Some(i) = self.id_or_earlier_run(&e.token) else {
                    return;
                };
                // Only the incoming order's first fill measures that order's latency; a
                // resting order executed later by someone else's order does not.
                if e.liquidity == b'R' && !self.exec_seen[i] {
                    self.exec_seen[i] = true;
                    if let Some(ns) = since(now, slots.intended[i].load(Ordering::Acquire)) {
                        latency::record(&mut self.hists[EXECUTED], ns);
                    }
                }
            }
            Outbound::Canceled(c) => {
                let Some(i) = self.id_or_earlier_run(&c.token) else {
                    return;
                };
                if c.reason == cancel_reason::USER {
                    let stored = slots.cancel_intended[i].swap(NOT_SENT, Ordering::AcqRel);
                    if let Some(ns) = since(now, stored) {
                        latency::record(&mut self.hists[CANCELED], ns);
                        self.answered_unpublished += 1;
                    }
                }
            }
            Outbound::Rejected(j) => {
                let Some(i) = self.id(&j.token) else { return };
                self.rejects[usize::from(j.reason)] += 1;
                if slots.kind[i] == KIND_ENTER {
                    self.enter_answers_unpublished += 1;
                }
                self.answered_unpublished += 1;
            }
            _ => {}
        }
    }
}

fn since(now: u64, stored: u64) -> Option<u64> {
    (stored != NOT_SENT).then(|| now.saturating_sub(stored - 1))
}

/// Run the load: log in, send, drain, report. `stop` ends sending early (Ctrl-C): the report
/// then covers what was sent.
pub fn run(
    options: &Options,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Result<Report, String> {
    if options.accounts.is_empty() {
        return Err("no accounts to send from".into());
    }
    let stream = generate(options);
    let ids = stream.stats.ids as usize;
    let slots = Arc::new(Slots::new(&stream.ops, ids));
    let ops = stream.ops;
    let ops_count = ops.len();
    progress.total.store(
        match options.window {
            None => ops
                .len()
                .min((options.rate as f64 * options.duration.as_secs_f64()) as usize)
                as u64,
            Some(_) => ops.len() as u64,
        },
        Ordering::Relaxed,
    );
    let (sessions, readers) = connect(options)?;
    let clock = Clock::new();
    let finish = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Answers::default());
    let receiver = {
        let (slots, finish, progress, answers) = (
            slots.clone(),
            finish.clone(),
            progress.clone(),
            answers.clone(),
        );
        let tag = options.run_tag;
        let busy = options.busy_poll;
        std::thread::Builder::new()
            .name("loadgen-recv".into())
            .spawn(move || {
                let mut receiver = Receiver {
                    tag,
                    slots: &slots,
                    clock,
                    progress: &progress,
                    answers: &answers,
                    enter_answers_unpublished: 0,
                    answered_unpublished: 0,
                    hists: (0..SERIES.len()).map(|_| latency::histogram()).collect(),
                    exec_seen: vec![false; slots.kind.len()],
                    rejects: [0; 256],
                    errors: Vec::new(),
                    other_runs: 0,
                    closed: vec![false; readers.len()],
                };
                receiver.run(readers, busy, &finish);
                let other_runs = receiver.other_runs;
                (
                    receiver.hists,
                    receiver.rejects,
                    receiver.errors,
                    other_runs,
                )
            })
            .map_err(|e| format!("spawn receiver: {e}"))?
    };
    let sender = {
        let (slots, stop, progress, answers) = (
            slots.clone(),
            stop.clone(),
            progress.clone(),
            answers.clone(),
        );
        let options = options.clone();
        std::thread::Builder::new()
            .name("loadgen-send".into())
            .spawn(move || {
                send_loop(
                    &options, &ops, &slots, sessions, clock, &stop, &progress, &answers,
                )
            })
            .map_err(|e| format!("spawn sender: {e}"))?
    };
    let mut sent = sender.join().map_err(|_| "the sender panicked")?;
    let enters: u64 = sent.sent_by_kind[..3].iter().sum();
    // Drain: wait for every Enter's answer (bounded), keeping the sessions alive.
    let deadline = Instant::now() + options.drain;
    while Instant::now() < deadline && answers.enters() < enters {
        for s in sent.sessions.iter_mut() {
            s.heartbeat_if_due();
            let _ = s.flush();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // A little longer for cancels and executions that trail the last Accepted.
    std::thread::sleep(Duration::from_millis(50).min(options.drain));
    finish.store(true, Ordering::Release);
    let (hists, received_rejects, received_errors, other_runs) =
        receiver.join().map_err(|_| "the receiver panicked")?;
    for s in sent.sessions.iter_mut() {
        let mut b = [0u8; 8];
        let n = Packet::LogoutRequest.encode(&mut b);
        s.out.extend_from_slice(&b[..n]);
        let _ = s.flush();
    }
    let mut errors = sent.errors;
    errors.extend(received_errors);
    let rejects = received_rejects
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(r, c)| (r as u8, *c))
        .collect();
    Ok(Report {
        hists,
        sent_by_kind: sent.sent_by_kind,
        sent: sent.sent,
        seconds: sent.seconds,
        rejects,
        unanswered: enters.saturating_sub(answers.enters()),
        other_runs,
        errors,
        interrupted: stop.load(Ordering::Relaxed),
        open_loop: options.window.is_none(),
        target_rate: options.rate,
        max_send_lag_ns: sent.max_lag_ns,
        ran_out: options.window.is_some()
            && !stop.load(Ordering::Relaxed)
            && sent.sent as usize == ops_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_other_runs_are_foreign() {
        let t = token(*b"AB12", 4_294_967_295);
        assert_eq!(&t.0, b"AB124294967295");
        assert_eq!(id_of(*b"AB12", &t), Some(u32::MAX));
        assert_eq!(id_of(*b"AB13", &t), None);
        assert_eq!(id_of(*b"AB12", &token(*b"AB12", 7)), Some(7));
        let tag = default_run_tag();
        assert!(tag.iter().all(|b| b.is_ascii_alphanumeric()));
    }

    #[test]
    fn a_sleeping_sender_waits_for_an_eighth_of_its_window_and_the_receiver_wakes_it() {
        let answers = Arc::new(Answers::default());
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (answers, done) = (answers.clone(), done.clone());
            std::thread::spawn(move || {
                let stop = AtomicBool::new(false);
                let started = Instant::now();
                // 80 enters sent, window 80: full; room for 10 (80 / 8) is wanted.
                // Give-up and re-check both long: only the receiver's wake-up ends the wait
                // in time, and a machine that stalls this thread cannot pass for one.
                let limits = (Duration::from_secs(30), Duration::from_secs(30));
                answers.await_room(80, 80, Pace::Sleep, &Clock::new(), &stop, limits);
                done.store(true, Ordering::SeqCst);
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        answers.publish(9);
        std::thread::sleep(Duration::from_millis(30));
        assert!(!done.load(Ordering::SeqCst), "woke with room for 9 of 10");
        answers.publish(1);
        let waited = waiter.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert!(
            waited < Duration::from_secs(20),
            "gave up instead: {waited:?}"
        );
        assert_eq!(answers.enters(), 10);
        assert_eq!(
            answers.wake_at.load(Ordering::SeqCst),
            0,
            "still marked waiting"
        );
    }
}
