//! The state machine on threads: the caller's thread runs the front (in the daemon: the
//! gateway / sequencer thread), one thread per shard, one output thread running the merge
//! and the output stage. Front → shard, front → merge and shard → merge are bounded
//! `disruptor` rings read with event pollers (so this module owns the threads, their wait
//! strategy and pinning); shard → front verdicts go over small bounded crossbeam channels
//! (rare, and the front blocks on them only when a later input touches a pending token).
//!
//! Nothing downstream of the front ever waits for the front: the output thread merges and
//! appends as soon as events arrive; what may leave is decided by release markers the front
//! sends in sequence order (`crate::exchange::Marker`). So a full ring only ever waits for a
//! consumer that is making progress, and the front checks ring room before it takes an input
//! ([`Sharded::room_for_input`]) so it ends a batch early instead of blocking.
//!
//! A thread that panics stops the process (one log line, exit code 70), as the Disruptor's
//! fatal exception handler does: a venue that journals but cannot answer must not stay up.
//!
//! Wait strategies: `spin` busy-polls, `yield` polls and yields the core, `park` polls a
//! little then sleeps until a producer rings the consumer's bell (or a short timeout), so an
//! idle pipeline costs no CPU.

use crate::config::WaitStrategy;
use crate::exchange::front::{Front, FrontLink};
use crate::exchange::merge::{EventSource, Merge};
use crate::exchange::msg::{AccountRisk, Marker, Plan, RiskBoard, ShardCmd, ShardEvent, Verdict};
use crate::exchange::shard::{Shard, ShardOut};
use crate::exchange::{Input, LentState, Outcome, Sink, Venue};
use crate::types::Timestamp;
use crossbeam::channel::{self, Receiver, Sender};
use disruptor::{
    BusySpin, EventPoller, Polling, Producer, SingleConsumerBarrier, SingleProducer,
    SingleProducerBarrier,
};
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

/// Longest sleep of a parked thread without a bell (bounds how late a missed wake is seen).
const PARK_MAX: Duration = Duration::from_millis(50);
/// Longest sleep of an idle output thread: its timers wake it when due
/// ([`OutputStage::timers_due_in_ns`]), producers ring its bell, a stop rings it too.
const IDLE_PARK_MAX: Duration = Duration::from_millis(100);
/// A producer facing a full ring re-checks this often in `park` mode.
const FULL_RING_PARK: Duration = Duration::from_micros(50);
/// The front waiting for the shards' positions (an account with limits) re-checks this often.
const RISK_WAIT: Duration = Duration::from_micros(20);
/// Ring slots the front keeps free for what an input may need: a command per shard and its
/// plan, plus the markers and a snapshot that can follow it.
pub const RING_RESERVE_SLOTS: u64 = 8;
/// Exit code of a process whose pipeline thread failed (EX_SOFTWARE).
pub const THREAD_FAILURE_EXIT_CODE: i32 = 70;

/// How the sharded pipeline is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardedConfig {
    pub shards: usize,
    pub wait: WaitStrategy,
    /// Slots of every ring (a power of two).
    pub ring_slots: usize,
    /// Pin the shard and output threads when the machine has more cores than threads.
    pub pin_cores: bool,
}

impl ShardedConfig {
    /// The ring size actually used (a power of two, at least 64).
    pub fn slots(&self) -> usize {
        self.ring_slots.max(64).next_power_of_two()
    }
}

/// The output stage on the output thread: the sink of every OUCH and ITCH message, of the
/// markers and snapshots, plus a hook for its timers.
pub trait OutputStage: Sink + Send + 'static {
    /// Nothing more to merge right now: send partial packets, run timers.
    fn idle(&mut self) {}

    /// Nanoseconds until `idle` has timer work to do (`u64::MAX`: none pending): how long
    /// a caller that runs this stage on its own thread may sleep without new input.
    fn timers_due_in_ns(&self) -> u64 {
        u64::MAX
    }

    /// Messages appended so far per stream (ITCH first, then every account's OUCH), for a
    /// state snapshot's stream positions ([`Sharded::save_state`]); empty when it keeps none.
    fn stream_counts(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// One side of a stage lent between threads for a state snapshot: the stage's thread sends
/// what it owns and waits until it comes back (`ShardCmd::Lend`, `Plan::Lend`), so each stage
/// keeps exactly one owner at every moment.
struct Loan<Out, Back> {
    out: Sender<Out>,
    back: Receiver<Back>,
}

/// The front's side of a [`Loan`].
struct Lender<Out, Back> {
    lent: Receiver<Out>,
    give_back: Sender<Back>,
}

fn loan<Out, Back>() -> (Loan<Out, Back>, Lender<Out, Back>) {
    let (out, lent) = channel::bounded(1);
    let (give_back, back) = channel::bounded(1);
    (Loan { out, back }, Lender { lent, give_back })
}

impl<Out, Back> Loan<Out, Back> {
    /// Hand `stage` over and wait for it back. The front sends a lend only when it is about
    /// to wait for it, and gives it back before its next input. `None`: the front is gone
    /// (it failed while it held the stage, and is stopping): the thread ends.
    fn lend(&self, stage: Out) -> Option<Back> {
        self.out.send(stage).ok()?;
        self.back.recv().ok()
    }
}

/// Counters the pipeline publishes for status lines and the tick decision.
#[derive(Default, Debug)]
pub struct Stats {
    /// Last input whose outputs are all produced.
    pub merged_seq: AtomicU64,
    pub order_refs: AtomicU64,
    pub matches: AtomicU64,
    /// Per shard: resting orders and orders that can expire, after its last command.
    pub resting: Vec<AtomicU64>,
    pub expiring: Vec<AtomicU64>,
}

/// A consumer's doorbell: producers ring it after publishing; a parked consumer wakes.
#[derive(Default)]
struct Bell {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

impl Bell {
    fn ring(&self) {
        // Pairs with the fence in `Waiter::until`: either the consumer sees our publication
        // on its re-check, or we see it sleeping and unpark it.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }
}

#[derive(Clone)]
struct Waiter {
    strategy: WaitStrategy,
    bell: Arc<Bell>,
}

impl Waiter {
    /// Call `attempt` until it gives something, waiting by the strategy in between.
    fn until<T>(&self, mut attempt: impl FnMut() -> Option<T>) -> T {
        let mut tries = 0u32;
        loop {
            if let Some(x) = attempt() {
                return x;
            }
            tries = tries.saturating_add(1);
            match self.strategy {
                WaitStrategy::Spin => std::hint::spin_loop(),
                WaitStrategy::Yield => thread::yield_now(),
                WaitStrategy::Park if tries < 64 => std::hint::spin_loop(),
                WaitStrategy::Park if tries < 72 => thread::yield_now(),
                WaitStrategy::Park => {
                    self.bell.sleeping.store(true, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                    if let Some(x) = attempt() {
                        self.bell.sleeping.store(false, Ordering::Relaxed);
                        return x;
                    }
                    thread::park_timeout(PARK_MAX);
                    self.bell.sleeping.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    /// One wait of an idle consumer, parked for `max` at most so that it runs its timers on
    /// time. `ready` re-checks for work after the bell is armed.
    fn pause(&self, max: Duration, mut ready: impl FnMut() -> bool) {
        match self.strategy {
            WaitStrategy::Spin => std::hint::spin_loop(),
            WaitStrategy::Yield => thread::yield_now(),
            WaitStrategy::Park => {
                self.bell.sleeping.store(true, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if !ready() {
                    thread::park_timeout(max);
                }
                self.bell.sleeping.store(false, Ordering::Relaxed);
            }
        }
    }

    /// One wait of a producer in front of a full ring.
    fn full_ring(strategy: WaitStrategy) {
        match strategy {
            WaitStrategy::Spin => std::hint::spin_loop(),
            WaitStrategy::Yield => thread::yield_now(),
            WaitStrategy::Park => thread::park_timeout(FULL_RING_PARK),
        }
    }
}

type Tx<T> = SingleProducer<T, SingleConsumerBarrier>;
type Rx<T> = EventPoller<T, SingleProducerBarrier>;

fn ring<T: Copy + Send + Sync + 'static>(slots: usize, empty: T) -> (Tx<T>, Rx<T>) {
    let (poller, builder) =
        disruptor::build_single_producer(slots, move || empty, BusySpin).new_event_poller();
    (builder.build(), poller)
}

/// A ring's producer with the count of what it published and what its consumer took, so
/// the producer knows the room left without trying.
struct Lane<T> {
    tx: Tx<T>,
    published: u64,
    consumed: Arc<AtomicU64>,
    slots: u64,
}

impl<T: Copy> Lane<T> {
    fn free_slots(&self) -> u64 {
        self.slots - (self.published - self.consumed.load(Ordering::Acquire))
    }

    /// Publish one value, waiting by the strategy while the ring is full; then ring `bell`.
    fn publish(&mut self, value: T, strategy: WaitStrategy, bell: &Bell) {
        loop {
            match self.tx.try_publish(|slot| *slot = value) {
                Ok(_) => break,
                Err(_) => {
                    bell.ring();
                    Waiter::full_ring(strategy);
                }
            }
        }
        self.published += 1;
        bell.ring();
    }
}

/// Move everything available from `rx` into `buffer` and count it as consumed; false once
/// the producer is gone and everything was read.
fn drain<T: Copy>(rx: &mut Rx<T>, buffer: &mut VecDeque<T>, consumed: &AtomicU64) -> bool {
    match rx.poll() {
        Ok(mut guard) => {
            let mut n = 0u64;
            for item in &mut guard {
                buffer.push_back(*item);
                n += 1;
            }
            drop(guard);
            consumed.fetch_add(n, Ordering::Release);
            true
        }
        Err(Polling::NoEvents) => true,
        Err(Polling::Shutdown) => false,
    }
}

/// The front's end of the rings.
struct RingLink {
    strategy: WaitStrategy,
    to_shards: Vec<Lane<ShardCmd>>,
    /// Per shard: the last input it was sent a command for, and its position board.
    sent_seq: Vec<u64>,
    boards: Vec<Arc<RiskBoard>>,
    shard_bells: Vec<Arc<Bell>>,
    plans: Lane<Plan>,
    merge_bell: Arc<Bell>,
    verdicts: Vec<Receiver<Verdict>>,
}

impl FrontLink for RingLink {
    fn to_merge(&mut self, plan: &Plan) {
        self.plans.publish(*plan, self.strategy, &self.merge_bell);
    }

    fn to_shard(&mut self, shard: usize, cmd: &ShardCmd) {
        let bell = &self.shard_bells[shard];
        self.to_shards[shard].publish(*cmd, self.strategy, bell);
        if let Some(seq) = cmd.seq() {
            self.sent_seq[shard] = seq;
        }
    }

    fn verdict(&mut self, shard: usize) -> Verdict {
        let rx = &self.verdicts[shard];
        match self.strategy {
            WaitStrategy::Park => rx.recv().expect("shard thread alive"),
            _ => loop {
                match rx.try_recv() {
                    Ok(v) => return v,
                    Err(channel::TryRecvError::Empty) => {
                        if self.strategy == WaitStrategy::Yield {
                            thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    Err(channel::TryRecvError::Disconnected) => panic!("shard thread gone"),
                }
            },
        }
    }

    fn try_verdict(&mut self, shard: usize) -> Option<Verdict> {
        self.verdicts[shard].try_recv().ok()
    }

    /// Waits until every shard has done the commands sent to it (only for accounts with
    /// limits; a shard publishes its progress after each command).
    fn risk(&mut self, account: u16) -> AccountRisk {
        let mut total = AccountRisk::default();
        for (k, board) in self.boards.iter().enumerate() {
            let mut tries = 0u32;
            while board.processed_seq.load(Ordering::Acquire) < self.sent_seq[k] {
                tries += 1;
                match (self.strategy, tries < 64) {
                    (WaitStrategy::Spin, _) | (_, true) => std::hint::spin_loop(),
                    (WaitStrategy::Yield, false) => thread::yield_now(),
                    (WaitStrategy::Park, false) => thread::sleep(RISK_WAIT),
                }
            }
            total = total.plus(board.get(account));
        }
        total
    }
}

/// A shard thread's end: events to the merge, verdicts to the front.
struct ShardLink {
    strategy: WaitStrategy,
    events: Lane<ShardEvent>,
    merge_bell: Arc<Bell>,
    verdicts: Sender<Verdict>,
}

impl ShardOut for ShardLink {
    fn event(&mut self, event: &ShardEvent) {
        loop {
            match self.events.tx.try_publish(|slot| *slot = *event) {
                Ok(_) => break,
                Err(_) => {
                    self.merge_bell.ring();
                    Waiter::full_ring(self.strategy);
                }
            }
        }
        self.events.published += 1;
        if *event == ShardEvent::Done {
            self.merge_bell.ring();
        }
    }

    fn verdict(&mut self, verdict: Verdict) {
        // Never blocks: the channel holds more than the Replaces that can be in flight
        // (`limits::shard_in_flight_max`). A full channel would hang the shard, the merge
        // waiting for its events and the front waiting for its ring or a lent stage: fail
        // loudly instead (a pipeline thread's panic stops the process).
        match self.verdicts.try_send(verdict) {
            Ok(()) => {}
            Err(channel::TrySendError::Full(_)) => panic!("a shard's verdict channel is full"),
            Err(channel::TrySendError::Disconnected(_)) => panic!("front gone"),
        }
    }
}

/// The merge thread's sources.
struct MergeSources {
    waiter: Waiter,
    plans: Rx<Plan>,
    plans_consumed: Arc<AtomicU64>,
    plan_buffer: VecDeque<Plan>,
    events: Vec<Rx<ShardEvent>>,
    events_consumed: Vec<Arc<AtomicU64>>,
    event_buffers: Vec<VecDeque<ShardEvent>>,
}

impl EventSource for MergeSources {
    fn next_event(&mut self, shard: usize) -> ShardEvent {
        if let Some(e) = self.event_buffers[shard].pop_front() {
            return e;
        }
        let (rx, buffer) = (&mut self.events[shard], &mut self.event_buffers[shard]);
        let consumed = &self.events_consumed[shard];
        self.waiter.until(|| {
            let alive = drain(rx, buffer, consumed);
            let next = buffer.pop_front();
            assert!(next.is_some() || alive, "shard {shard} stopped mid-input");
            next
        })
    }
}

/// Run `body` as a pipeline thread: a panic is fatal to the process.
fn guarded<T>(name: &str, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(x) => x,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(
                thread = name,
                "pipeline thread failed: {what}; stopping the venue (exit {THREAD_FAILURE_EXIT_CODE})"
            );
            std::process::exit(THREAD_FAILURE_EXIT_CODE);
        }
    }
}

/// A test hook: `BOURSE_FAILPOINT=shard-panic-at-seq:N` makes shard 0 panic on the command
/// of input N. Read only in debug builds (the tests run the debug binary); release builds
/// have no failpoints.
fn shard_panic_seq() -> Option<u64> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let spec = std::env::var("BOURSE_FAILPOINT").ok()?;
    spec.strip_prefix("shard-panic-at-seq:")?.parse().ok()
}

/// The running pipeline, driven from the caller's thread.
pub struct Sharded<O: OutputStage> {
    front: Front,
    link: Option<RingLink>,
    shard_threads: Vec<JoinHandle<()>>,
    merge_thread: Option<JoinHandle<O>>,
    stats: Arc<Stats>,
    shard_lenders: Vec<Lender<Shard, Shard>>,
    merge_lender: Lender<(Merge, Vec<u64>), Merge>,
}

impl<O: OutputStage> Sharded<O> {
    /// The front's cache hint for a message about to be sequenced (see `Front::prefetch`).
    #[inline]
    pub fn prefetch_message(
        &self,
        account: crate::types::AccountId,
        message: &crate::wire::ouch::Inbound,
    ) {
        self.front.prefetch_message(account, message);
    }

    pub fn start(venue: &Venue, config: &ShardedConfig, output: O) -> Result<Self, String> {
        let n = config.shards.max(1);
        let in_flight = crate::limits::shard_in_flight_max(config.slots());
        let front = Front::new(venue, n, in_flight).map_err(|e| e.to_string())?;
        let merge = Merge::new(venue, n).map_err(|e| e.to_string())?;
        let shards = (0..n)
            .map(|k| Shard::new(venue, k, n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        Self::from_parts(front, shards, merge, config, output)
    }

    /// Start the threads from stages with state (e.g. rebuilt by replaying the journal
    /// through a `Split`); `config.shards` is taken from the stages.
    pub fn from_parts(
        front: Front,
        shards: Vec<Shard>,
        merge: Merge,
        config: &ShardedConfig,
        output: O,
    ) -> Result<Self, String> {
        let n = shards.len();
        assert_eq!(front.shards(), n, "front and shards agree on the split");
        assert_eq!(
            front.pending(),
            0,
            "threads start with every verdict settled"
        );
        let slots = config.slots();
        let in_flight = crate::limits::shard_in_flight_max(slots);
        assert!(
            front.awaited_max() > in_flight,
            "the front awaits every verdict a shard can owe"
        );
        let strategy = config.wait;
        let stats = Arc::new(Stats {
            resting: (0..n).map(|_| AtomicU64::new(0)).collect(),
            expiring: (0..n).map(|_| AtomicU64::new(0)).collect(),
            ..Stats::default()
        });
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        // Threads: the caller's (front), the merge, the shards. Pin only with a core each.
        let pin = config.pin_cores && cores.len() > n + 2;
        let merge_bell = Arc::new(Bell::default());
        let plans = lane(slots, Plan::EMPTY);
        let panic_seq = shard_panic_seq();
        let boards: Vec<Arc<RiskBoard>> = shards.iter().map(|s| s.risk().clone()).collect();
        let sent_seq = boards
            .iter()
            .map(|b| b.processed_seq.load(Ordering::Acquire))
            .collect();
        let mut to_shards = Vec::with_capacity(n);
        let mut shard_bells = Vec::with_capacity(n);
        let mut verdict_rxs = Vec::with_capacity(n);
        let mut event_rxs = Vec::with_capacity(n);
        let mut shard_threads = Vec::with_capacity(n);
        let mut shard_lenders = Vec::with_capacity(n);
        for (k, mut shard) in shards.into_iter().enumerate() {
            stats.resting[k].store(shard.resting_orders(), Ordering::Relaxed);
            stats.expiring[k].store(shard.expiring_orders(), Ordering::Relaxed);
            let (cmd_lane, mut cmd_rx, cmd_consumed) = lane(slots, ShardCmd::EMPTY);
            let (event_lane, event_rx, event_consumed) = lane(slots, ShardEvent::EMPTY);
            // Holds every verdict the shard can owe (`shard_in_flight_max`): never full.
            let (verdict_tx, verdict_rx) = channel::bounded(in_flight + 1);
            let bell = Arc::new(Bell::default());
            let waiter = Waiter {
                strategy,
                bell: bell.clone(),
            };
            let mut out = ShardLink {
                strategy,
                events: event_lane,
                merge_bell: merge_bell.clone(),
                verdicts: verdict_tx,
            };
            let stats = stats.clone();
            let (shard_loan, lender) = loan::<Shard, Shard>();
            shard_lenders.push(lender);
            let core = pin.then(|| cores[2 + k]);
            let name = format!("bourse-shard-{k}");
            let handle = thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    guarded(&name, || {
                        if let Some(core) = core {
                            core_affinity::set_for_current(core);
                        }
                        let _ = waiter.bell.thread.set(thread::current());
                        let mut buffer = VecDeque::with_capacity(slots);
                        'run: loop {
                            waiter.until(|| {
                                let alive = drain(&mut cmd_rx, &mut buffer, &cmd_consumed);
                                (!buffer.is_empty() || !alive).then_some(())
                            });
                            if buffer.is_empty() {
                                break; // the front is gone
                            }
                            while let Some(cmd) = buffer.pop_front() {
                                if k == 0 && panic_seq.is_some() && cmd.seq() == panic_seq {
                                    panic!("failpoint shard-panic-at-seq");
                                }
                                if matches!(cmd, ShardCmd::Lend) {
                                    let Some(back) = shard_loan.lend(shard) else {
                                        break 'run;
                                    };
                                    shard = back;
                                    continue;
                                }
                                if !shard.apply(&cmd, &mut out) {
                                    break 'run;
                                }
                            }
                            stats.resting[k].store(shard.resting_orders(), Ordering::Relaxed);
                            stats.expiring[k].store(shard.expiring_orders(), Ordering::Relaxed);
                        }
                    })
                })
                .map_err(|e| format!("cannot start shard thread {k}: {e}"))?;
            to_shards.push(cmd_lane);
            shard_bells.push(bell);
            verdict_rxs.push(verdict_rx);
            event_rxs.push((event_rx, event_consumed));
            shard_threads.push(handle);
        }
        let (plans_lane, plans_rx, plans_consumed) = plans;
        let (events, events_consumed) = event_rxs.into_iter().unzip();
        let sources = MergeSources {
            waiter: Waiter {
                strategy,
                bell: merge_bell.clone(),
            },
            plans: plans_rx,
            plans_consumed,
            plan_buffer: VecDeque::with_capacity(slots),
            event_buffers: (0..n).map(|_| VecDeque::with_capacity(slots)).collect(),
            events,
            events_consumed,
        };
        let core = pin.then(|| cores[1]);
        stats
            .order_refs
            .store(merge.order_refs_used(), Ordering::Relaxed);
        stats.matches.store(merge.matches_used(), Ordering::Relaxed);
        stats.merged_seq.store(merge.last_seq(), Ordering::Relaxed);
        let merge_stats = stats.clone();
        let (merge_loan, merge_lender) = loan();
        let merge_thread = thread::Builder::new()
            .name("bourse-output".into())
            .spawn(move || {
                guarded("bourse-output", || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                    run_merge(merge, sources, output, &merge_stats, &merge_loan)
                })
            })
            .map_err(|e| format!("cannot start the output thread: {e}"))?;
        if pin {
            core_affinity::set_for_current(cores[0]);
        }
        Ok(Sharded {
            front,
            link: Some(RingLink {
                strategy,
                to_shards,
                sent_seq,
                boards,
                shard_bells,
                plans: plans_lane,
                merge_bell,
                verdicts: verdict_rxs,
            }),
            shard_threads,
            merge_thread: Some(merge_thread),
            stats,
            shard_lenders,
            merge_lender,
        })
    }

    /// Sequence one input into the pipeline (its outputs follow on the output thread).
    pub fn apply(&mut self, input: &Input) -> Outcome {
        let link = self.link.as_mut().expect("running");
        self.front.apply(input, link)
    }

    /// Is there room in every ring for one more input (and the markers after it)? When not,
    /// the caller ends its batch and reads no input until there is.
    pub fn room_for_input(&self) -> bool {
        let Some(link) = &self.link else {
            return false;
        };
        link.plans.free_slots() >= RING_RESERVE_SLOTS
            && link
                .to_shards
                .iter()
                .all(|l| l.free_slots() >= RING_RESERVE_SLOTS)
    }

    /// A point between inputs for the output stage, in order.
    pub fn marker(&mut self, marker: Marker) {
        let link = self.link.as_mut().expect("running");
        self.front.marker(marker, link);
    }

    /// Ask for a GLIMPSE snapshot at this point between inputs (answered on the output
    /// thread through the output stage's `Sink::snapshot`).
    pub fn snapshot(&mut self, ts: Timestamp, id: u64) {
        let link = self.link.as_mut().expect("running");
        self.front.snapshot(ts, id, link);
    }

    /// Encode the state after every input sequenced so far into `out` (a state snapshot: the
    /// state a compact venue has at the same point, which either layout restores; the token
    /// tables' slot arrays may lie differently) and return the output stage's stream counts
    /// there. The stages are lent to this thread: every shard and the output thread
    /// finish what was sent before, hand their stage over and wait, so this pauses the
    /// pipeline for its drain and the encoding of the counters and books (as the compact
    /// layout pauses its one thread; the output thread runs no feed timers meanwhile
    /// either). The token tables' slot arrays are lent into `out`, not copied (read later
    /// by the snapshot's writer: `crate::exchange::state::save_lending`).
    pub fn save_state(&mut self, out: &mut LentState) -> std::io::Result<Vec<u64>> {
        let link = self.link.as_mut().expect("running");
        self.front.lend(link);
        let shards: Vec<Shard> = self
            .shard_lenders
            .iter()
            .map(|l| l.lent.recv().expect("a shard thread lends its shard"))
            .collect();
        let (merge, counts) = self
            .merge_lender
            .lent
            .recv()
            .expect("the output thread lends the merge");
        // Every verdict of a command before the lend was sent before the shard was lent.
        self.front.settle_all(link);
        let saved = crate::exchange::state::save_lending(&self.front, &shards, &merge, out);
        for (shard, lender) in shards.into_iter().zip(&self.shard_lenders) {
            lender
                .give_back
                .send(shard)
                .expect("the shard thread waits");
        }
        self.merge_lender
            .give_back
            .send(merge)
            .expect("the output thread waits");
        saved.map(|()| counts)
    }

    /// Wake the output thread.
    pub fn wake_output(&self) {
        if let Some(link) = &self.link {
            link.merge_bell.ring();
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Orders that can expire, as the shards last reported (ticks are journaled, so a stale
    /// count only delays or adds a harmless tick).
    pub fn expiring_orders(&self) -> u64 {
        self.stats
            .expiring
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    pub fn resting_orders(&self) -> u64 {
        self.stats
            .resting
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    pub fn last_seq(&self) -> u64 {
        self.front.last_seq()
    }

    /// Let every stage finish its work, stop the threads, and hand back the output stage.
    pub fn finish(mut self) -> O {
        self.stop().expect("output thread result")
    }

    fn stop(&mut self) -> Option<O> {
        let mut link = self.link.take()?;
        // A save that failed while it held the stages leaves their threads waiting for them:
        // without their lenders they end instead (no stage is ever lent past a save).
        self.shard_lenders.clear();
        self.merge_lender = loan().1;
        self.front.stop(&mut link);
        let RingLink {
            plans, merge_bell, ..
        } = link;
        drop(plans); // the output thread ends after the last plan
        merge_bell.ring();
        for t in self.shard_threads.drain(..) {
            let _ = t.join();
        }
        self.merge_thread.take()?.join().ok()
    }
}

impl<O: OutputStage> Drop for Sharded<O> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A ring with its producer lane and the consumer's counter.
fn lane<T: Copy + Send + Sync + 'static>(
    slots: usize,
    empty: T,
) -> (Lane<T>, Rx<T>, Arc<AtomicU64>) {
    let (tx, rx) = ring(slots, empty);
    let consumed = Arc::new(AtomicU64::new(0));
    let lane = Lane {
        tx,
        published: 0,
        consumed: consumed.clone(),
        slots: slots as u64,
    };
    (lane, rx, consumed)
}

fn run_merge<O: OutputStage>(
    mut merge: Merge,
    mut src: MergeSources,
    mut out: O,
    stats: &Stats,
    lend: &Loan<(Merge, Vec<u64>), Merge>,
) -> O {
    let _ = src.waiter.bell.thread.set(thread::current());
    loop {
        let Some(plan) = src.plan_buffer.pop_front() else {
            let alive = drain(&mut src.plans, &mut src.plan_buffer, &src.plans_consumed);
            if !src.plan_buffer.is_empty() {
                continue;
            }
            out.idle();
            if !alive {
                return out;
            }
            let (rx, buffer, consumed) =
                (&mut src.plans, &mut src.plan_buffer, &src.plans_consumed);
            let max = Duration::from_nanos(out.timers_due_in_ns()).min(IDLE_PARK_MAX);
            src.waiter
                .pause(max, || !drain(rx, buffer, consumed) || !buffer.is_empty());
            continue;
        };
        if matches!(plan, Plan::Lend) {
            // Every plan before it is merged: the counts are the snapshot's positions.
            let counts = out.stream_counts();
            let Some(back) = lend.lend((merge, counts)) else {
                return out;
            };
            merge = back;
            continue;
        }
        merge.process(&plan, &mut src, &mut out);
        if plan.input_seq().is_some() {
            stats.merged_seq.store(merge.last_seq(), Ordering::Release);
            stats
                .order_refs
                .store(merge.order_refs_used(), Ordering::Relaxed);
            stats.matches.store(merge.matches_used(), Ordering::Relaxed);
        }
    }
}
