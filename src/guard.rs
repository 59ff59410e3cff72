//! Defences against hostile clients (issue 12), the pure parts: a token bucket, address
//! allowlists, a bounded table of per-source state, the failed-login backoff and a log gate.
//!
//! Nothing here reads a clock or touches a socket: every function takes the time (ns on the
//! caller's clock) as an argument, so each rule is tested exactly. The servers that use them:
//! the gateway (pre-login budgets, failed logins), GLIMPSE (the same), the re-request server
//! (allowlist, request rate, bytes out per byte in).

use hashbrown::HashMap;
use std::net::IpAddr;

pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_S: u64 = 1_000_000_000;

/// A token bucket: `rate_per_s` units per second, at most `capacity` units; starts full.
/// Tokens are kept in units × 10⁹ so that refills are exact integer arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    scaled: u64,
    capacity: u64,
    rate_per_s: u64,
    last_ns: u64,
}

impl TokenBucket {
    /// Largest capacity: keeps `capacity × 10⁹` inside a u64.
    pub const CAPACITY_MAX: u64 = u64::MAX / NS_PER_S;

    pub fn full(capacity: u64, rate_per_s: u64, now_ns: u64) -> TokenBucket {
        assert!(capacity <= Self::CAPACITY_MAX, "bucket capacity {capacity}");
        TokenBucket {
            scaled: capacity * NS_PER_S,
            capacity,
            rate_per_s,
            last_ns: now_ns,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let elapsed_ns = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        let room = self.capacity * NS_PER_S - self.scaled;
        // u128: elapsed × rate overflows u64 after a few hours at high rates.
        let added = (u128::from(elapsed_ns) * u128::from(self.rate_per_s)).min(u128::from(room));
        self.scaled += added as u64;
        debug_assert!(self.scaled <= self.capacity * NS_PER_S);
    }

    /// Whole units available now.
    pub fn available(&mut self, now_ns: u64) -> u64 {
        self.refill(now_ns);
        self.scaled / NS_PER_S
    }

    /// Take `units` if that many are there; otherwise take nothing.
    pub fn try_take(&mut self, units: u64, now_ns: u64) -> bool {
        self.refill(now_ns);
        let Some(want) = units.checked_mul(NS_PER_S) else {
            return false;
        };
        if want > self.scaled {
            return false;
        }
        self.scaled -= want;
        true
    }

    /// Add `units` (up to the capacity).
    pub fn credit(&mut self, units: u64, now_ns: u64) {
        self.refill(now_ns);
        let room = self.capacity * NS_PER_S - self.scaled;
        self.scaled += units.saturating_mul(NS_PER_S).min(room);
    }
}

/// An address block: `10.1.0.0/16`, `127.0.0.1` (one address), `::1/128`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix_len: u8,
}

impl Cidr {
    /// The block of `prefix_len` leading bits of `ip` (host bits cleared).
    pub fn new(ip: IpAddr, prefix_len: u8) -> Result<Cidr, String> {
        let ip = ip.to_canonical();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if prefix_len > max {
            return Err(format!("prefix /{prefix_len} is longer than {max} bits"));
        }
        Ok(Cidr {
            network: mask(ip, prefix_len),
            prefix_len,
        })
    }

    pub fn parse(text: &str) -> Result<Cidr, String> {
        let bad = |why: &str| format!("{text:?} is not an address block ({why})");
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| bad("bad address"))?;
        let ip = ip.to_canonical();
        let prefix_len = match prefix {
            Some(p) => p.parse::<u8>().map_err(|_| bad("bad prefix length"))?,
            None if ip.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(ip, prefix_len).map_err(|e| bad(&e))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix_len) == self.network
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

fn mask(ip: IpAddr, prefix_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V4((bits & keep).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V6((bits & keep).into())
        }
    }
}

/// The sources a server answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    blocks: Vec<Cidr>,
}

impl Allowlist {
    pub fn new(blocks: Vec<Cidr>) -> Allowlist {
        Allowlist { blocks }
    }

    pub fn parse(texts: &[String]) -> Result<Allowlist, String> {
        texts
            .iter()
            .map(|t| Cidr::parse(t))
            .collect::<Result<Vec<_>, _>>()
            .map(Allowlist::new)
    }

    /// `127.0.0.0/8` and `::1/128`.
    pub fn loopback() -> Allowlist {
        Allowlist::new(vec![
            Cidr::parse("127.0.0.0/8").expect("literal"),
            Cidr::parse("::1/128").expect("literal"),
        ])
    }

    pub fn push(&mut self, block: Cidr) {
        if !self.blocks.contains(&block) {
            self.blocks.push(block);
        }
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(ip))
    }

    pub fn blocks(&self) -> &[Cidr] {
        &self.blocks
    }
}

/// A bounded map from source address to per-source state. Sized once; when full, a new
/// source replaces the entry seen least recently among those the caller lets go (so an
/// attacker cycling through addresses can only push out idle entries, and nothing grows).
pub struct SourceTable<V> {
    map: HashMap<IpAddr, (V, u64), foldhash::fast::RandomState>,
    capacity: usize,
}

impl<V> SourceTable<V> {
    pub fn with_capacity(capacity: usize) -> SourceTable<V> {
        assert!(capacity > 0);
        SourceTable {
            // Randomly seeded: the keys are chosen by whoever sends packets.
            map: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get_mut(&mut self, ip: IpAddr) -> Option<&mut V> {
        self.map.get_mut(&ip.to_canonical()).map(|(v, _)| v)
    }

    /// The entry of `ip` (marked seen now), created by `make` if absent. When the table is
    /// full, the least recently seen entry for which `may_go` is true makes room; `None` if
    /// no entry may go.
    pub fn entry(
        &mut self,
        ip: IpAddr,
        now_ns: u64,
        make: impl FnOnce() -> V,
        may_go: impl Fn(&V) -> bool,
    ) -> Option<&mut V> {
        let ip = ip.to_canonical();
        if !self.map.contains_key(&ip) {
            if self.map.len() >= self.capacity {
                let victim = self
                    .map
                    .iter()
                    .filter(|(_, (v, _))| may_go(v))
                    .min_by_key(|(_, (_, seen))| *seen)
                    .map(|(k, _)| *k)?;
                self.map.remove(&victim);
            }
            self.map.insert(ip, (make(), now_ns));
        }
        debug_assert!(self.map.len() <= self.capacity);
        let (value, seen) = self.map.get_mut(&ip).expect("present");
        *seen = now_ns;
        Some(value)
    }

    /// Visit every entry; drop those for which `keep` returns false.
    pub fn retain(&mut self, mut keep: impl FnMut(IpAddr, &mut V) -> bool) {
        self.map.retain(|ip, (v, _)| keep(*ip, v));
    }
}

/// How failed logins from one source are answered: a few at once (typos happen), then each
/// after a delay that doubles up to a maximum, and after many the source is locked out for a
/// while (every failure waits the maximum). A correct password is never delayed by this: it
/// is judged on its own, so a broker sharing an address with an attacker still gets in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffRules {
    /// Failures answered at once.
    pub free_failures: u32,
    /// The delay of the first delayed answer; each further failure doubles it.
    pub first_delay_ms: u64,
    pub max_delay_ms: u64,
    /// From this many remembered failures on, the source is locked out.
    pub lockout_failures: u32,
    /// How long failures are remembered (and a lockout lasts) after the last one.
    pub lockout_ms: u64,
}

impl BackoffRules {
    pub const FREE_FAILURES: u32 = 5;
    pub const FIRST_DELAY_MS: u64 = 100;
}

/// Where a source stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Failures answered at once.
    Free,
    /// Failures answered after a growing delay.
    Backoff,
    /// Every failure answered after the longest delay.
    Lockout,
}

/// A source's remembered failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureRecord {
    pub failures: u32,
    last_failure_ns: u64,
}

/// What to do with one failed login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailurePlan {
    /// Hold the Login Rejected this long.
    pub delay_ms: u64,
    pub phase: Phase,
    /// This failure moved the source into `phase` (worth one log line).
    pub entered: bool,
}

impl BackoffRules {
    fn forget_if_quiet(&self, record: &mut FailureRecord, now_ns: u64) {
        let quiet_ns = now_ns.saturating_sub(record.last_failure_ns);
        if record.failures > 0 && quiet_ns >= self.lockout_ms.saturating_mul(NS_PER_MS) {
            *record = FailureRecord::default();
        }
    }

    fn phase_of(&self, failures: u32) -> Phase {
        if failures >= self.lockout_failures {
            Phase::Lockout
        } else if failures > self.free_failures {
            Phase::Backoff
        } else {
            Phase::Free
        }
    }

    pub fn phase(&self, record: &mut FailureRecord, now_ns: u64) -> Phase {
        self.forget_if_quiet(record, now_ns);
        self.phase_of(record.failures)
    }

    /// Nothing remembered: the record may be dropped.
    pub fn is_forgotten(&self, record: &mut FailureRecord, now_ns: u64) -> bool {
        self.forget_if_quiet(record, now_ns);
        record.failures == 0
    }

    /// Record one failed login at `now_ns` and say how to answer it.
    pub fn on_failure(&self, record: &mut FailureRecord, now_ns: u64) -> FailurePlan {
        self.forget_if_quiet(record, now_ns);
        let before = self.phase_of(record.failures);
        record.failures = record.failures.saturating_add(1);
        record.last_failure_ns = now_ns;
        let phase = self.phase_of(record.failures);
        let delay_ms = match phase {
            Phase::Free => 0,
            Phase::Lockout => self.max_delay_ms,
            Phase::Backoff => {
                let doublings = record.failures - self.free_failures - 1;
                let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
                self.first_delay_ms
                    .saturating_mul(factor)
                    .min(self.max_delay_ms)
            }
        };
        FailurePlan {
            delay_ms,
            phase,
            entered: phase != before,
        }
    }
}

/// At most one log line per `interval` for a noisy source of events; the events in between
/// are counted and reported with the next line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogGate {
    last_line_ns: Option<u64>,
    suppressed: u64,
}

impl LogGate {
    /// Call once per event. `Some(n)`: log now, mentioning `n` earlier events not logged.
    pub fn pass(&mut self, now_ns: u64, interval_ms: u64) -> Option<u64> {
        let due = match self.last_line_ns {
            None => true,
            Some(t) => now_ns.saturating_sub(t) >= interval_ms.saturating_mul(NS_PER_MS),
        };
        if !due {
            self.suppressed += 1;
            return None;
        }
        self.last_line_ns = Some(now_ns);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// Events counted but not yet logged.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

/// Log lines for events anyone can cause (a connection closed before login): each event its
/// line while they are few (up to `burst` at once, one more each `refill_ms`), so an
/// operator sees every one of a handful; under a flood about one line per `refill_ms`,
/// counting the events in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineBudget {
    burst: u32,
    refill_ms: u64,
    lines_left: u32,
    last_refill_ns: u64,
    suppressed: u64,
}

impl LineBudget {
    pub const fn new(burst: u32, refill_ms: u64) -> LineBudget {
        LineBudget {
            burst,
            refill_ms,
            lines_left: burst,
            last_refill_ns: 0,
            suppressed: 0,
        }
    }

    /// Every server's budget for lines about its peers' connections (bad bytes, refusals,
    /// drops): 32 at once, then one a second.
    pub const fn for_peer_events() -> LineBudget {
        LineBudget::new(32, 1_000)
    }

    /// Call once per event. `Some(n)`: log now, mentioning `n` earlier events not logged.
    pub fn pass(&mut self, now_ns: u64) -> Option<u64> {
        let step_ns = self.refill_ms.saturating_mul(NS_PER_MS).max(1);
        let earned = now_ns.saturating_sub(self.last_refill_ns) / step_ns;
        if earned > 0 {
            let lines = u64::from(self.lines_left).saturating_add(earned);
            self.lines_left = lines.min(u64::from(self.burst)) as u32;
            self.last_refill_ns = now_ns;
        }
        if self.lines_left == 0 {
            self.suppressed += 1;
            return None;
        }
        self.lines_left -= 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// The connections a server's threads are serving, at most `max`, for servers that give each
/// connection a thread and make room for a newcomer by closing an older one (the replication
/// port's followers, a cluster member's handshakes, GLIMPSE clients). A closed connection's
/// thread ends on its own; while as many are still ending as there are slots, nothing more is
/// closed for room, which bounds the threads at twice `max`.
pub struct ConnectionSlots<M> {
    list: Vec<ConnectionSlot<M>>,
    max: usize,
    next_id: u64,
    closed_running: usize,
}

/// One connection in [`ConnectionSlots`]: its id, what its server knows of it, and a handle
/// on its socket (to close it from the accepting thread).
pub struct ConnectionSlot<M> {
    pub id: u64,
    pub meta: M,
    stream: std::net::TcpStream,
}

impl<M> ConnectionSlot<M> {
    /// The server's handle on the connection's socket.
    pub fn stream(&self) -> &std::net::TcpStream {
        &self.stream
    }
}

/// What [`ConnectionSlots::admit_with`]'s caller decides about a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Give it a free slot.
    Take,
    /// Close the connection at this index first (to make room, or to keep a budget).
    CloseFor(usize),
    /// Close the newcomer, for this reason.
    Refuse(&'static str),
}

impl<M> ConnectionSlots<M> {
    pub fn new(max: usize) -> ConnectionSlots<M> {
        assert!(max > 0);
        ConnectionSlots {
            list: Vec::with_capacity(max),
            max,
            next_id: 0,
            closed_running: 0,
        }
    }

    /// A slot for `stream`. When all are taken, `victim` picks the one to close (slots are in
    /// the order they were taken, oldest first); `None` from it, or too many closed threads
    /// still ending, refuses the newcomer (`None`).
    pub fn admit(
        &mut self,
        stream: &std::net::TcpStream,
        meta: M,
        victim: impl FnOnce(&[ConnectionSlot<M>]) -> Option<usize>,
    ) -> Option<u64> {
        let decide = |list: &[ConnectionSlot<M>], full: bool| match full {
            false => Admission::Take,
            true => victim(list).map_or(
                Admission::Refuse("no connection to close"),
                Admission::CloseFor,
            ),
        };
        self.admit_with(stream, meta, decide).ok()
    }

    /// [`Self::admit`] for servers with more rules than "close one when all are taken" (a
    /// per-source budget): `decide` sees the slots (oldest first) and whether all are taken,
    /// and may close one even when they are not. The newcomer is refused (with the reason)
    /// when `decide` says so, when no slot is free after its choice, or when a connection
    /// would have to be closed while as many closed ones' threads are still ending as there
    /// are slots.
    pub fn admit_with(
        &mut self,
        stream: &std::net::TcpStream,
        meta: M,
        decide: impl FnOnce(&[ConnectionSlot<M>], bool) -> Admission,
    ) -> Result<u64, &'static str> {
        let full = self.list.len() >= self.max;
        match decide(&self.list, full) {
            Admission::Take => {}
            Admission::Refuse(why) => return Err(why),
            Admission::CloseFor(_) if self.closed_running >= self.max => {
                return Err("closed connections are still ending");
            }
            Admission::CloseFor(index) => {
                let closed = self.list.remove(index);
                // Its thread sees EOF or an error at once and ends; a reset leaves no
                // TIME_WAIT.
                let _ = socket2::SockRef::from(&closed.stream)
                    .set_linger(Some(std::time::Duration::ZERO));
                let _ = closed.stream.shutdown(std::net::Shutdown::Both);
                self.closed_running += 1;
            }
        }
        if self.list.len() >= self.max {
            return Err("every slot is taken");
        }
        let stream = stream.try_clone().map_err(|_| "cannot clone the socket")?;
        let id = self.next_id;
        self.next_id += 1;
        self.list.push(ConnectionSlot { id, meta, stream });
        debug_assert!(self.list.len() <= self.max);
        Ok(id)
    }

    /// The connections being served, oldest first.
    pub fn list(&self) -> &[ConnectionSlot<M>] {
        &self.list
    }

    /// Closed connections whose threads have not ended yet.
    pub fn closed_running(&self) -> usize {
        self.closed_running
    }

    /// What the server knows of connection `id`; `None` once it was closed for room.
    pub fn meta_mut(&mut self, id: u64) -> Option<&mut M> {
        self.list
            .iter_mut()
            .find(|c| c.id == id)
            .map(|c| &mut c.meta)
    }

    /// Connection `id`'s thread is done with it: free its slot (or, if it was closed for
    /// room, its thread's count). Whether it was still open (not closed for room).
    pub fn ended(&mut self, id: u64) -> bool {
        match self.list.iter().position(|c| c.id == id) {
            Some(index) => {
                self.list.remove(index);
                true
            }
            None => {
                assert!(self.closed_running > 0, "a closed connection was counted");
                self.closed_running -= 1;
                false
            }
        }
    }
}

/// [`ConnectionSlots`] shared by a server's accepting thread and its connections' threads.
pub type SharedSlots<M> = std::sync::Arc<std::sync::Mutex<ConnectionSlots<M>>>;

/// Lock `slots`, poisoned or not: every method leaves its list and count consistent before
/// anything in it can panic.
pub fn lock_slots<M>(slots: &SharedSlots<M>) -> std::sync::MutexGuard<'_, ConnectionSlots<M>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection thread's hold on its slot in [`SharedSlots`]. [`SlotHold::end`] frees it, and
/// so does dropping the hold, which a thread that panics does as it unwinds: a failed thread
/// never keeps its slot, or its place in the count of closed threads still ending, for good
/// (after `max` such failures every newcomer would be refused).
pub struct SlotHold<M> {
    slots: SharedSlots<M>,
    id: u64,
    ended: bool,
}

impl<M> SlotHold<M> {
    /// [`ConnectionSlots::admit`] on the shared table; the hold goes to the connection's thread.
    pub fn admit(
        slots: &SharedSlots<M>,
        stream: &std::net::TcpStream,
        meta: M,
        victim: impl FnOnce(&[ConnectionSlot<M>]) -> Option<usize>,
    ) -> Option<SlotHold<M>> {
        let id = lock_slots(slots).admit(stream, meta, victim)?;
        Some(SlotHold::of(slots, id))
    }

    /// [`ConnectionSlots::admit_with`] on the shared table; the hold goes to the connection's
    /// thread.
    pub fn admit_with(
        slots: &SharedSlots<M>,
        stream: &std::net::TcpStream,
        meta: M,
        decide: impl FnOnce(&[ConnectionSlot<M>], bool) -> Admission,
    ) -> Result<SlotHold<M>, &'static str> {
        let id = lock_slots(slots).admit_with(stream, meta, decide)?;
        Ok(SlotHold::of(slots, id))
    }

    fn of(slots: &SharedSlots<M>, id: u64) -> SlotHold<M> {
        SlotHold {
            slots: slots.clone(),
            id,
            ended: false,
        }
    }

    /// The connection's id in its table.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// `change` applied to what the server knows of this connection; `None` (and not applied)
    /// once it was closed for room.
    pub fn update<R>(&self, change: impl FnOnce(&mut M) -> R) -> Option<R> {
        lock_slots(&self.slots).meta_mut(self.id).map(change)
    }

    /// The thread is done with the connection: [`ConnectionSlots::ended`].
    pub fn end(mut self) -> bool {
        self.ended = true;
        lock_slots(&self.slots).ended(self.id)
    }
}

impl<M> Drop for SlotHold<M> {
    fn drop(&mut self) {
        if !self.ended {
            lock_slots(&self.slots).ended(self.id);
        }
    }
}

/// Warnings anyone who can reach a server's port can cause (a refused or dropped connection,
/// a failed handshake), shared by its threads: each its line while they are few, then about
/// one a second counting the rest ([`LineBudget::for_peer_events`]; the hostile audit logged
/// 3,000 lines from 3,000 connect-and-close tries).
pub struct PeerLog {
    budget: std::sync::Mutex<LineBudget>,
    started: std::time::Instant,
    /// The server, first word of every line (`replication`, `cluster`).
    server: &'static str,
}

impl PeerLog {
    pub fn new(server: &'static str) -> PeerLog {
        PeerLog {
            budget: std::sync::Mutex::new(LineBudget::for_peer_events()),
            started: std::time::Instant::now(),
            server,
        }
    }

    pub fn warn(&self, peer: std::net::SocketAddr, what: std::fmt::Arguments<'_>) {
        let now_ns = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let pass = self
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pass(now_ns);
        if let Some(not_logged) = pass {
            tracing::warn!(%peer, not_logged, "{}: {what}", self.server);
        }
    }
}

/// A pre-login connection that may be closed to make room: (its index, source, opened_ns).
pub type Candidate = (usize, IpAddr, u64);

/// Among `candidates`, the one to close to make room: the oldest of the source holding the
/// most (so one noisy source cannot push out others), or, with `only`, the oldest of that
/// source. Ties go to the older connection. Sorts `candidates` (the caller's scratch space):
/// O(n log n), no allocation.
pub fn eviction_victim(candidates: &mut [Candidate], only: Option<IpAddr>) -> Option<usize> {
    if let Some(source) = only {
        return candidates
            .iter()
            .filter(|c| c.1 == source)
            .min_by_key(|c| (c.2, c.0))
            .map(|c| c.0);
    }
    candidates.sort_unstable_by_key(|c| (c.1, c.2, c.0));
    // (run length, oldest of the run) of the best run so far.
    let mut best: Option<(usize, Candidate)> = None;
    let mut start = 0;
    while start < candidates.len() {
        let source = candidates[start].1;
        let len = candidates[start..]
            .iter()
            .take_while(|c| c.1 == source)
            .count();
        let oldest = candidates[start];
        let better = match best {
            None => true,
            Some((best_len, best_oldest)) => {
                len > best_len
                    || (len == best_len && (oldest.2, oldest.0) < (best_oldest.2, best_oldest.0))
            }
        };
        if better {
            best = Some((len, oldest));
        }
        start += len;
    }
    best.map(|(_, c)| c.0)
}

/// A TCP listener with a backlog of `backlog` (the kernel caps it at `somaxconn`), for mio.
/// mio's own bind uses 128, which a burst of a few hundred connects overflows: the kernel
/// then drops SYNs and those clients wait a second for their retransmission.
pub fn listen(addr: std::net::SocketAddr, backlog: i32) -> std::io::Result<mio::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(mio::net::TcpListener::from_std(socket.into()))
}

/// The backlog of every TCP listener facing clients: Linux's default `somaxconn` (4096),
/// so a connect flood must outrun the accept loop by that many before a broker's SYN is
/// dropped (and waits a second for its retransmission).
pub const LISTEN_BACKLOG: i32 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NS_PER_S;
    const MS: u64 = NS_PER_MS;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn bucket_refills_at_its_rate_up_to_its_capacity() {
        let mut b = TokenBucket::full(100, 10, 0);
        assert!(b.try_take(100, 0));
        assert!(!b.try_take(1, 0), "empty");
        assert_eq!(b.available(S / 2), 5);
        assert!(!b.try_take(6, S / 2), "a failed take takes nothing");
        assert!(b.try_take(5, S / 2));
        assert_eq!(b.available(100 * S), 100, "capped at the capacity");
        // A clock that goes back is ignored rather than minting tokens.
        assert_eq!(b.available(S), 100);
        assert!(b.try_take(100, S));
        assert_eq!(
            b.available(S + 100 * MS),
            0,
            "time is counted from the latest seen"
        );
        assert_eq!(b.available(100 * S + 100 * MS), 1);
    }

    #[test]
    fn bucket_credit_adds_up_to_the_capacity() {
        let mut b = TokenBucket::full(1_000, 0, 0);
        assert!(b.try_take(1_000, 0));
        b.credit(20, 0);
        assert_eq!(b.available(10 * S), 20, "rate 0: only credits");
        b.credit(u64::MAX, 0);
        assert_eq!(b.available(0), 1_000);
        assert!(!b.try_take(u64::MAX, 0));
    }

    #[test]
    fn bucket_never_gives_more_than_capacity_plus_rate_times_time() {
        // Draining as fast as possible for 10 s at 1 ms steps: out <= capacity + rate * t.
        let mut b = TokenBucket::full(5_000, 1_000, 0);
        let mut out = 0;
        for step in 0..=10_000u64 {
            while b.try_take(7, step * MS) {
                out += 7;
            }
        }
        assert!(out <= 5_000 + 10 * 1_000, "{out}");
        assert!(out >= 5_000 + 10 * 1_000 - 7, "{out}");
    }

    #[test]
    fn cidr_parse_and_contains() {
        let net = Cidr::parse("10.1.2.3/16").unwrap();
        assert_eq!(net.to_string(), "10.1.0.0/16", "host bits cleared");
        assert!(net.contains(ip("10.1.255.1")));
        assert!(!net.contains(ip("10.2.0.1")));
        assert!(net.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped IPv6");
        assert!(!net.contains(ip("::1")));
        let host = Cidr::parse("127.0.0.1").unwrap();
        assert_eq!(host.to_string(), "127.0.0.1/32");
        assert!(!host.contains(ip("127.0.0.2")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(!Cidr::parse("0.0.0.0/0").unwrap().contains(ip("::2")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/",
            "1.2.3.4/-1",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allowlist_allows_what_it_lists() {
        let mut list = Allowlist::loopback();
        assert!(list.allows(ip("127.0.0.1")) && list.allows(ip("127.9.9.9")));
        assert!(list.allows(ip("::1")));
        assert!(!list.allows(ip("10.0.0.1")));
        list.push(Cidr::parse("10.0.0.0/24").unwrap());
        list.push(Cidr::parse("10.0.0.0/24").unwrap());
        assert_eq!(list.blocks().len(), 3);
        assert!(list.allows(ip("10.0.0.200")));
        assert!(Allowlist::parse(&["10.0.0.0/8".into(), "nope".into()]).is_err());
        assert!(!Allowlist::parse(&[]).unwrap().allows(ip("127.0.0.1")));
    }

    #[test]
    fn source_table_is_bounded_and_evicts_the_least_recent_that_may_go() {
        let mut t: SourceTable<u32> = SourceTable::with_capacity(2);
        *t.entry(ip("10.0.0.1"), 1, || 0, |_| true).unwrap() += 1;
        *t.entry(ip("10.0.0.2"), 2, || 0, |_| true).unwrap() += 1;
        // Seen again: now the most recent.
        *t.entry(ip("10.0.0.1"), 3, || 0, |_| true).unwrap() += 1;
        assert_eq!(t.entry(ip("10.0.0.3"), 4, || 7, |_| true), Some(&mut 7));
        assert_eq!(t.len(), 2);
        assert!(t.get_mut(ip("10.0.0.2")).is_none(), "least recent went");
        assert_eq!(t.get_mut(ip("::ffff:10.0.0.1")), Some(&mut 2));
        // Nothing may go: no room, and the table is unchanged.
        assert_eq!(t.entry(ip("10.0.0.4"), 5, || 0, |_| false), None);
        assert_eq!(t.len(), 2);
        t.retain(|_, v| *v == 7);
        assert_eq!(t.len(), 1);
    }

    fn rules() -> BackoffRules {
        BackoffRules {
            free_failures: 3,
            first_delay_ms: 100,
            max_delay_ms: 1_000,
            lockout_failures: 10,
            lockout_ms: 60_000,
        }
    }

    #[test]
    fn failures_are_free_then_doubling_then_locked_out() {
        let r = rules();
        let mut rec = FailureRecord::default();
        let plans: Vec<(u64, Phase, bool)> = (0..12)
            .map(|i| {
                let p = r.on_failure(&mut rec, i * MS);
                (p.delay_ms, p.phase, p.entered)
            })
            .collect();
        use Phase::*;
        assert_eq!(
            plans,
            [
                (0, Free, false),
                (0, Free, false),
                (0, Free, false),
                (100, Backoff, true),
                (200, Backoff, false),
                (400, Backoff, false),
                (800, Backoff, false),
                (1_000, Backoff, false),
                (1_000, Backoff, false),
                (1_000, Lockout, true),
                (1_000, Lockout, false),
                (1_000, Lockout, false),
            ]
        );
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_lockout_period() {
        let r = rules();
        let mut rec = FailureRecord::default();
        for i in 0..20 {
            r.on_failure(&mut rec, i * MS);
        }
        assert_eq!(r.phase(&mut rec, 20 * MS), Phase::Lockout);
        // Still locked just before the period ends after the last failure...
        assert_eq!(r.phase(&mut rec, 19 * MS + 59_999 * MS), Phase::Lockout);
        assert!(!r.is_forgotten(&mut rec, 19 * MS + 59_999 * MS));
        // ...and free after it.
        assert!(r.is_forgotten(&mut rec, 19 * MS + 60_000 * MS));
        let p = r.on_failure(&mut rec, 100 * S);
        assert_eq!((p.delay_ms, p.phase), (0, Phase::Free));
    }

    #[test]
    fn a_failure_during_lockout_extends_it() {
        let r = rules();
        let mut rec = FailureRecord::default();
        for i in 0..10 {
            r.on_failure(&mut rec, i * MS);
        }
        r.on_failure(&mut rec, 50 * S);
        assert_eq!(r.phase(&mut rec, 100 * S), Phase::Lockout);
        assert_eq!(r.phase(&mut rec, 110 * S), Phase::Free);
    }

    #[test]
    fn log_gate_passes_one_line_per_interval_and_counts_the_rest() {
        let mut g = LogGate::default();
        assert_eq!(g.pass(0, 10_000), Some(0));
        for i in 1..=500 {
            assert_eq!(g.pass(i * MS, 10_000), None);
        }
        assert_eq!(g.suppressed(), 500);
        assert_eq!(g.pass(10 * S, 10_000), Some(500));
        assert_eq!(g.pass(11 * S, 10_000), None);
    }

    #[test]
    fn line_budget_logs_a_few_events_each_and_a_flood_once_a_second() {
        let mut b = LineBudget::new(3, 1_000);
        assert_eq!([b.pass(0), b.pass(1), b.pass(2)], [Some(0); 3]);
        for i in 1..=1_000 {
            assert_eq!(b.pass(i * MS / 2), None);
        }
        // One line a second under the flood, with the count of what it did not log.
        assert_eq!(b.pass(S), Some(1_000));
        assert_eq!(b.pass(S + MS), None);
        // Quiet for a while: the burst is back, no more.
        assert_eq!(b.pass(100 * S), Some(1));
        assert_eq!([b.pass(100 * S), b.pass(100 * S)], [Some(0); 2]);
        assert_eq!(b.pass(100 * S), None);
    }

    #[test]
    fn eviction_takes_the_oldest_of_the_busiest_source() {
        let a = ip("10.0.0.1");
        let b = ip("10.0.0.2");
        let conns = [(0, a, 50), (1, b, 10), (2, a, 30), (3, b, 5), (4, a, 40)];
        let victim = |only| eviction_victim(&mut conns.clone(), only);
        assert_eq!(victim(None), Some(2), "a holds 3: its oldest");
        assert_eq!(victim(Some(b)), Some(3));
        assert_eq!(victim(Some(ip("10.0.0.9"))), None);
        let mut tie = [(0, a, 9), (1, b, 3)];
        assert_eq!(eviction_victim(&mut tie, None), Some(1));
        assert_eq!(eviction_victim(&mut [], None), None);
        // The same as the obvious quadratic rule on many random tables.
        let mut seed = 7u64;
        for _ in 0..200 {
            let mut table: Vec<Candidate> = (0..40)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let last = (seed >> 60) as u8;
                    (
                        i,
                        IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, last)),
                        (seed >> 20) % 50,
                    )
                })
                .collect();
            let count = |s: IpAddr| table.iter().filter(|c| c.1 == s).count();
            let want = table
                .iter()
                .max_by(|x, y| {
                    count(x.1)
                        .cmp(&count(y.1))
                        .then((y.2, y.0).cmp(&(x.2, x.0)))
                })
                .map(|c| c.0);
            assert_eq!(eviction_victim(&mut table, None), want);
        }
    }

    /// A loopback listener and a way to connect to it: (client side, server side); the
    /// server sides go into the slots.
    fn connector() -> impl Fn() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        move || {
            let client = std::net::TcpStream::connect(addr).unwrap();
            (client, listener.accept().unwrap().0)
        }
    }

    #[test]
    fn connection_slots_close_the_victim_for_a_newcomer_and_bound_the_threads() {
        let connect = connector();
        let mut slots: ConnectionSlots<&str> = ConnectionSlots::new(2);
        let ((mut a_client, a), (_b_client, b)) = (connect(), connect());
        assert_eq!(slots.admit(&a, "a", |_| panic!("room")), Some(0));
        assert_eq!(slots.admit(&b, "b", |_| panic!("room")), Some(1));
        *slots.meta_mut(1).unwrap() = "b greeted";
        // Full: the victim the server picks is closed (its client sees EOF).
        let (_c_client, c) = connect();
        let id = slots.admit(&c, "c", |list| {
            assert_eq!(
                list.iter().map(|s| s.meta).collect::<Vec<_>>(),
                ["a", "b greeted"]
            );
            Some(0)
        });
        assert_eq!(id, Some(2));
        assert!(slots.meta_mut(0).is_none(), "closed for room");
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut a_client, &mut byte).unwrap(), 0);
        // No victim: the newcomer is refused (no id taken) and nothing is closed.
        assert_eq!(slots.admit(&connect().1, "d", |_| None), None);
        // A second closure reaches the bound of closed threads still ending (2): refused.
        assert_eq!(slots.admit(&connect().1, "e", |_| Some(0)), Some(3));
        assert_eq!(slots.admit(&connect().1, "f", |_| Some(0)), None);
        // The closed ones' threads end (ids 0 and 1), then a live one (2): room again.
        assert!(!slots.ended(0), "closed for room");
        assert!(!slots.ended(1), "closed for room");
        assert!(slots.ended(2), "still open");
        assert_eq!(slots.admit(&connect().1, "g", |_| panic!("room")), Some(4));
    }

    #[test]
    fn admission_rules_may_close_before_the_slots_are_full_and_refuse_with_a_reason() {
        let connect = connector();
        let mut slots: ConnectionSlots<&str> = ConnectionSlots::new(3);
        let take = |_: &[ConnectionSlot<&str>], full: bool| {
            assert!(!full);
            Admission::Take
        };
        let (mut a_client, a) = connect();
        assert_eq!(slots.admit_with(&a, "a", take), Ok(0));
        // A budget of the server's own (one "a" at a time): closed with a slot still free.
        let (_a2_client, a2) = connect();
        let close_the_other_a = |list: &[ConnectionSlot<&str>], full: bool| {
            assert!(!full);
            Admission::CloseFor(list.iter().position(|c| c.meta == "a").unwrap())
        };
        assert_eq!(slots.admit_with(&a2, "a", close_the_other_a), Ok(1));
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut a_client, &mut byte).unwrap(), 0);
        assert_eq!((slots.list().len(), slots.closed_running()), (1, 1));
        // A refusal carries the server's reason and takes no id.
        let refuse = |_: &[ConnectionSlot<&str>], _| Admission::Refuse("over budget");
        assert_eq!(
            slots.admit_with(&connect().1, "b", refuse),
            Err("over budget")
        );
        assert_eq!(slots.admit_with(&connect().1, "b", take), Ok(2));
        assert_eq!(slots.admit_with(&connect().1, "c", take), Ok(3));
        // Full and the rule takes anyway: no slot is free.
        let take_anyway = |_: &[ConnectionSlot<&str>], full: bool| {
            assert!(full);
            Admission::Take
        };
        let newcomer = connect().1;
        assert_eq!(
            slots.admit_with(&newcomer, "d", take_anyway),
            Err("every slot is taken")
        );
        // As many closed threads still ending as slots: nothing more is closed.
        let close_first = |_: &[ConnectionSlot<&str>], _| Admission::CloseFor(0);
        assert_eq!(slots.admit_with(&newcomer, "d", close_first), Ok(4));
        assert_eq!(slots.admit_with(&newcomer, "e", close_first), Ok(5));
        assert_eq!(slots.closed_running(), 3);
        assert_eq!(
            slots.admit_with(&newcomer, "f", close_first),
            Err("closed connections are still ending")
        );
        assert_eq!(
            slots.list().iter().map(|c| c.meta).collect::<Vec<_>>(),
            ["c", "d", "e"]
        );
    }

    #[test]
    fn a_connection_thread_that_panics_frees_its_slot() {
        let connector = connector();
        let connect = || connector().1;
        let slots: SharedSlots<bool> =
            std::sync::Arc::new(std::sync::Mutex::new(ConnectionSlots::new(1)));
        // One slot; its connection's thread panics (holding the lock, too) three times over:
        // each time the next newcomer finds the slot free, with no victim to close.
        for round in 0..3 {
            let hold = SlotHold::admit(&slots, &connect(), false, |_| panic!("room"))
                .unwrap_or_else(|| panic!("round {round}: the slot was not freed"));
            let thread = std::thread::spawn(move || {
                hold.update(|greeted| *greeted = true);
                let _held = lock_slots(&hold.slots);
                panic!("a follower's bug");
            });
            assert!(thread.join().is_err());
        }
        // A closed-for-room connection whose thread panics gives back its place among the
        // threads still ending: the bound of 1 would otherwise refuse the next newcomer.
        let first = SlotHold::admit(&slots, &connect(), false, |_| panic!("room")).unwrap();
        let second = SlotHold::admit(&slots, &connect(), false, |_| Some(0)).unwrap();
        assert!(first.update(|_| ()).is_none(), "closed for room");
        std::thread::spawn(move || {
            let _first = first;
            panic!("the closed connection's thread fails");
        })
        .join()
        .unwrap_err();
        assert!(second.end(), "still open");
        let third = SlotHold::admit(&slots, &connect(), false, |_| panic!("room"));
        assert!(third.is_some(), "no place is held by a failed thread");
        let fourth = SlotHold::admit(&slots, &connect(), false, |_| Some(0));
        assert!(fourth.is_some(), "the closed count was given back");
    }
}
