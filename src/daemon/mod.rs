//! `bourse run`: one thread does gateway I/O and sequencing (the journal), journal first, with
//! a group commit at the end of each batch of ready inputs; the state machine runs behind it —
//! inline on this thread in the compact layout, on shard and output threads in the sharded one
//! (`crate::engine`). Either way each batch's outputs are released once it is durable
//! ([`output`]), and this loop then sends the replies. The re-request and snapshot servers run
//! on their own threads.

pub mod admin;
mod member;
pub mod metrics;
pub mod node;
pub mod output;
mod ports;

use crate::config::{Config, WaitStrategy};
use crate::exchange::{Admin, Outcome};
use crate::gateway::Gateway;
use crate::marketdata::ServerHandle;
use crate::marketdata::glimpse::{GlimpseConfig, GlimpseServer, SnapshotDesk, snapshot_channel};
use crate::marketdata::rerequest::{RerequestConfig, RerequestServer};
use crate::sequencer::SystemClock;
use crate::types::Locate;
use crate::wire::ascii::SessionId;
use admin::{AdminServer, Request};
use mio::{Events, Poll, Token};
use node::Node;
use output::FeedOut;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const GATEWAY_TOKENS: usize = 0;
const ADMIN_TOKENS: usize = 1 << 20;
const WAKER_TOKEN: Token = Token(1 << 21);
/// A cluster member's transport (its own poll of the member connections).
const TRANSPORT_TOKEN: Token = Token((1 << 21) + 1);
/// Heartbeats and timeouts are checked this often.
const TIMER_INTERVAL_NS: u64 = 10_000_000;
/// Sleep in `park` mode while the loop waits on another thread (ring room, the journal's
/// next segment, a release) or an admin connection is open.
const PARK_TIMEOUT: Duration = Duration::from_millis(5);
/// Longest sleep in `park` mode when nothing is pending: bounds how late a stop signal is
/// noticed (the market-data servers' stop poll is as long). Timers wake the loop on time.
const IDLE_PARK_MAX: Duration = Duration::from_millis(100);
/// How often a batch waiting for its release (a standby's confirmation) looks again.
const AWAIT_RELEASE_POLL: Duration = Duration::from_micros(50);

/// Where the running daemon listens (ports resolved when the config says 0).
#[derive(Clone, Debug)]
pub struct Listening {
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub rerequest: SocketAddr,
    pub snapshot: SocketAddr,
    pub replication: SocketAddr,
    pub feed: SocketAddr,
    /// The metrics endpoint, when `[admin] metrics_listen` is set.
    pub metrics: Option<SocketAddr>,
}

impl std::fmt::Display for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "listening gateway={} admin={} rerequest={} snapshot={} replication={} feed={}",
            self.gateway, self.admin, self.rerequest, self.snapshot, self.replication, self.feed
        )?;
        match self.metrics {
            Some(metrics) => write!(f, " metrics={metrics}"),
            None => Ok(()),
        }
    }
}

pub struct Daemon<F: FeedOut> {
    poll: Poll,
    node: Node<SystemClock, F>,
    /// None while a cluster member does not lead (`member`).
    gateway: Option<Gateway>,
    admin: AdminServer,
    /// Answers GLIMPSE snapshot requests between inputs.
    desk: SnapshotDesk,
    /// Re-request and GLIMPSE server threads; stopped when the daemon is dropped.
    servers: Vec<ServerHandle>,
    config: Config,
    started: Instant,
    stop: Arc<AtomicBool>,
    day_end_handled: bool,
    metrics: Option<SocketAddr>,
    /// The metrics endpoint's thread, held for its life (kept apart from `servers`, which a
    /// cluster member replaces as it starts and stops leading); dropping it stops the thread.
    _metrics_server: Option<ServerHandle>,
    /// A cluster member's raft side (`[cluster]` with several members).
    member: Option<member::Member<F>>,
    /// When the loop last ran the gateway's and admin's timers.
    last_timer_ns: u64,
    /// The last poll returned no event (it timed out): the venue is idle.
    idle: bool,
}

impl<F: FeedOut> Daemon<F> {
    /// Recover the journal and bind every listener. Nothing is accepted before recovery ends.
    /// `make_feed(next_itch_seq)` opens the market-data publisher after recovery.
    pub fn start(
        config: Config,
        make_feed: impl FnOnce(u64) -> Result<F, String>,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, String> {
        // Read before a recovery that may take a while, and once: see `serve`.
        let replication_secret = config.replication_secret()?;
        let bar = progress_bar();
        let node = Node::recover(&config, SystemClock, make_feed, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })?;
        bar.finish_and_clear();
        let r = &node.recovery;
        tracing::info!(
            records = r.records,
            last_seq = r.last_seq,
            segments = r.segments,
            "journal recovered"
        );
        Self::serve(config, node, stop, replication_secret)
    }

    /// Bind every listener around a ready engine (after recovery, or when a standby takes
    /// over) and start the re-request, GLIMPSE and replication servers. `replication_secret`:
    /// [`Config::replication_secret`] as read when the process started (a standby taking over
    /// must not depend on its `secret_file` still being readable).
    pub fn serve(
        config: Config,
        mut node: Node<SystemClock, F>,
        stop: Arc<AtomicBool>,
        replication_secret: Option<Vec<u8>>,
    ) -> Result<Self, String> {
        let poll = Poll::new().map_err(|e| format!("cannot create the event poller: {e}"))?;
        let session = SessionId::new(&node.header.gateway_session).ok_or("bad gateway session")?;
        let gateway = Gateway::bind(
            &config.gateway,
            &config.accounts,
            session,
            poll.registry(),
            GATEWAY_TOKENS,
        )
        .map_err(|e| {
            format!(
                "cannot listen for order entry on {}: {e}",
                config.gateway.listen
            )
        })?;
        let secret_path = admin::secret_path(&config)?;
        let secret = admin::Secret::load_or_create(&secret_path)?;
        let admin = AdminServer::bind(&config.admin, secret, poll.registry(), ADMIN_TOKENS)
            .map_err(|e| format!("cannot listen for admin on {}: {e}", config.admin.listen))?;
        tracing::info!(secret = %secret_path.display(), "admin requests are authenticated with this secret");
        let waker = Arc::new(
            mio::Waker::new(poll.registry(), WAKER_TOKEN)
                .map_err(|e| format!("cannot create the poll waker: {e}"))?,
        );
        let wake: crate::wake::Waker = Arc::new(move || {
            let _ = waker.wake();
        });
        // The sharded layout's output thread wakes the loop when it has released replies.
        // Inline (compact), the release runs on the loop itself, which sends right after: a
        // wake there would only cost a write and an empty turn per batch.
        if node.exchange().is_none() {
            node.set_output_waker(wake.clone());
        }
        let glimpse = GlimpseConfig::from_config(&config)?;
        let (requester, desk) = snapshot_channel(glimpse.max_connections, Some(wake));
        let glimpse = GlimpseServer::spawn(glimpse, requester)
            .map_err(|e| format!("cannot serve GLIMPSE on {}: {e}", config.feed.snapshot))?;
        let rerequest = RerequestConfig::from_feed(&config.feed)?;
        let rerequest = RerequestServer::bind(&rerequest, node.itch_stream().clone())
            .and_then(RerequestServer::spawn)
            .map_err(|e| format!("cannot serve re-requests on {}: {e}", config.feed.rerequest))?;
        if replication_secret.is_none() && !config.replication.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %config.replication.listen,
                "replication port reachable beyond this host without [replication] secret: anyone who connects receives the whole journal"
            );
        }
        let replication = crate::replication::primary::spawn(
            crate::replication::primary::ReplicationConfig {
                listen: config.replication.listen,
                journal_dir: node.journal_dir().to_path_buf(),
                heartbeat_ms: config.replication.heartbeat_ms,
                silence_ms: config
                    .replication
                    .takeover_ms
                    .max(config.replication.heartbeat_ms * 3),
                secret: replication_secret,
            },
            node.confirmed_seq_handle(),
        )
        .map_err(|e| {
            format!(
                "cannot listen for standbys on {}: {e}",
                config.replication.listen
            )
        })?;
        let servers = vec![rerequest, glimpse, replication];
        let metrics_server = match config.admin.metrics_listen {
            Some(listen) => {
                let (probe, server) = metrics::spawn(metrics_sources(&config, &node, listen))
                    .map_err(|e| format!("cannot serve metrics on {listen}: {e}"))?;
                node.probe = probe;
                Some(server)
            }
            None => None,
        };
        let metrics = metrics_server.as_ref().map(ServerHandle::local_addr);
        Ok(Daemon {
            poll,
            node,
            gateway: Some(gateway),
            admin,
            desk,
            servers,
            config,
            started: Instant::now(),
            stop,
            day_end_handled: false,
            metrics,
            _metrics_server: metrics_server,
            member: None,
            last_timer_ns: 0,
            idle: false,
        })
    }

    pub fn listening(&self) -> Listening {
        if let Some(listening) = self.member_listening() {
            return listening;
        }
        Listening {
            gateway: self
                .gateway
                .as_ref()
                .expect("bound")
                .local_addr()
                .expect("bound"),
            admin: self.admin.local_addr().expect("bound"),
            rerequest: self.servers[0].local_addr(),
            snapshot: self.servers[1].local_addr(),
            replication: self.servers[2].local_addr(),
            feed: self.config.feed.group,
            metrics: self.metrics,
        }
    }

    pub fn node(&self) -> &Node<SystemClock, F> {
        &self.node
    }

    pub fn node_mut(&mut self) -> &mut Node<SystemClock, F> {
        &mut self.node
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Run until stopped (signal, `bourse admin shutdown` or fatal error). Returns the fatal
    /// error, if any.
    pub fn run(&mut self) -> Result<(), String> {
        let mut streams = self.node.ouch_streams().to_vec();
        let mut events = Events::with_capacity(1024);
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = self.poll_timeout(&streams);
            let timeout = self.member_timeout(timeout);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                return Err(format!("event poll failed: {e}"));
            }
            self.idle = events.is_empty();
            let now = self.now_ns();
            self.node.probe.receive();
            let first_seq = self.node.last_seq();
            // A cluster member counts the ticks that passed, then hears the other members.
            let transport_signalled = events.iter().any(|e| e.token() == TRANSPORT_TOKEN);
            self.member_before_input(transport_signalled);
            // While the node takes no input (rings nearly full, or batches waiting for their
            // release) the gateway's reads are deferred: back-pressure on the clients.
            let accepting = self.node.ready_for_input();
            if accepting && let Some(gateway) = self.gateway.as_mut() {
                // Disconnects held back while the node had no room go in before any read.
                gateway.report_lost(&mut self.node);
            }
            for event in events.iter() {
                if !accepting
                    && let Some(gateway) = self.gateway.as_mut()
                    && gateway.owns(event.token())
                    && !gateway.is_listener(event.token())
                {
                    gateway.defer(event.token());
                } else {
                    // A closed or failed peer's end is read to the end now (see `service`).
                    let peer_closed = event.is_read_closed() || event.is_error();
                    self.dispatch(event.token(), peer_closed, now, &streams);
                }
            }
            let registry = self.poll.registry();
            if self.node.ready_for_input() {
                if let Some(gateway) = self.gateway.as_mut() {
                    gateway.on_idle(registry, now, &streams, &mut self.node);
                }
                self.node.tick_if_due();
            }
            if let Some(gateway) = self.gateway.as_mut() {
                gateway.report_lost(&mut self.node);
            }
            // A cluster member: raft's messages out, committed records in, role changes.
            if self.member_after_input(now) {
                streams = self.node.ouch_streams().to_vec();
            }
            let all_released = self.node.end_batch();
            let last_seq = self.node.last_seq();
            self.node
                .probe
                .batch(last_seq, last_seq.saturating_sub(first_seq));
            self.node.probe.released(self.node.released_seq());
            // Only released messages are visible in the streams, so a reply never leaves
            // before its input is durable (a cluster's: committed, and sent by the leader
            // only while its lease holds).
            let may_send = self.member_may_send();
            if may_send && let Some(gateway) = self.gateway.as_mut() {
                gateway.pump(&streams, self.poll.registry(), now);
            }
            self.node.probe.written();
            if now.saturating_sub(self.last_timer_ns) >= TIMER_INTERVAL_NS {
                self.last_timer_ns = now;
                let registry = self.poll.registry();
                if let Some(gateway) = self.gateway.as_mut() {
                    gateway.on_timer(registry, now);
                }
                self.admin.on_timer(registry, now);
                self.hand_over_metrics();
            }
            self.node.idle();
            self.after_day_end();
            if all_released && may_send {
                self.answer_snapshots();
            }
            self.member_after_release();
            if let Some(fatal) = self.node.fatal.clone() {
                self.shutdown();
                return Err(fatal);
            }
        }
        self.shutdown();
        Ok(())
    }

    /// The metrics thread's gauges and the latency histograms, every few hundred ms.
    fn hand_over_metrics(&mut self) {
        if !self.node.probe.hand_over_due() {
            return;
        }
        let status = self.node.pipeline_status();
        let values = metrics::GaugeValues {
            sessions_logged_in: self.gateway.as_ref().map_or(0, |g| g.connected_sessions()) as u64,
            connections: self.gateway.as_ref().map_or(0, |g| g.open_connections()) as u64,
            last_seq: self.node.last_seq(),
            released_seq: self.node.released_seq(),
            resting_orders: status.resting,
            order_refs: status.order_refs,
            matches: status.matches,
            day_ended: self.node.day_ended(),
        };
        self.node.probe.hand_over(&values);
    }

    /// GLIMPSE: between two inputs, the book and the next ITCH number agree.
    fn answer_snapshots(&mut self) {
        self.node.answer_snapshots(&self.desk);
    }

    fn poll_timeout(&mut self, streams: &[crate::stream::StreamReader]) -> Duration {
        // A cluster member waiting for its quorum is woken by the transport instead.
        if self.node.awaiting_release() && self.member.is_none() {
            return AWAIT_RELEASE_POLL;
        }
        let pending = self
            .gateway
            .as_ref()
            .is_some_and(Gateway::has_pending_reads);
        if pending && self.node.ready_for_input() {
            return Duration::ZERO;
        }
        match self.config.engine.wait {
            WaitStrategy::Spin => Duration::ZERO,
            WaitStrategy::Yield => {
                std::thread::yield_now();
                Duration::ZERO
            }
            WaitStrategy::Park => self.park_timeout(streams),
        }
    }

    /// `park`: [`PARK_TIMEOUT`] while events come (a busy loop is woken by them anyway, and
    /// pays nothing more per turn), while it waits on another thread or an admin connection
    /// is open. Once a poll found nothing, until this thread's earliest timed work
    /// (heartbeats, timeouts, expiry ticks, the feed's timers), at most [`IDLE_PARK_MAX`]: an
    /// idle venue wakes ~10 times a second instead of every 5 ms.
    fn park_timeout(&mut self, streams: &[crate::stream::StreamReader]) -> Duration {
        if !self.idle
            || self.node.awaiting_release()
            || !self.node.ready_for_input()
            || self.admin.has_timed_work()
        {
            return PARK_TIMEOUT;
        }
        let pumping = self.member_may_send();
        let gateway = self.gateway.as_ref();
        if gateway.is_some_and(|g| g.has_unannounced_work(streams, pumping)) {
            return Duration::ZERO;
        }
        let gateway_ns = gateway.map_or(u64::MAX, Gateway::next_timer_ns);
        let now_ns = self.now_ns();
        // The loop runs the gateway's timers once per interval at most.
        let timers_ns = gateway_ns.max(self.last_timer_ns.saturating_add(TIMER_INTERVAL_NS));
        let wait_ns = timers_ns
            .saturating_sub(now_ns)
            .min(self.node.timers_due_in_ns());
        Duration::from_nanos(wait_ns).min(IDLE_PARK_MAX)
    }

    fn dispatch(
        &mut self,
        token: Token,
        peer_closed: bool,
        now: u64,
        streams: &[crate::stream::StreamReader],
    ) {
        let registry = self.poll.registry();
        if let Some(gateway) = self.gateway.as_mut()
            && gateway.owns(token)
        {
            gateway.on_event(token, peer_closed, registry, now, streams, &mut self.node);
        } else if self.admin.owns(token)
            && let Some((index, request)) = self.admin.on_event(token, registry, now)
        {
            let answer = match request {
                Ok(request) => self.execute(&request),
                Err(e) => format!("error {e}"),
            };
            self.admin.respond(index, self.poll.registry(), &answer);
        }
    }

    fn execute(&mut self, request: &Request) -> String {
        let venue = &self.node.header.venue;
        let locate = |symbol: &str| venue.locate_of(symbol);
        let account = |user: &str| venue.account_of(user);
        let admin = match request {
            Request::Status => return self.status(),
            Request::Shutdown => {
                self.stop.store(true, Ordering::Relaxed);
                return "ok shutdown".into();
            }
            Request::EndOfDay => Admin::EndOfDay,
            Request::Halt(s) | Request::Resume(s) => {
                let Some(Locate(l)) = locate(s) else {
                    return format!("error unknown symbol {s}");
                };
                if matches!(request, Request::Halt(_)) {
                    Admin::Halt(Locate(l))
                } else {
                    Admin::Resume(Locate(l))
                }
            }
            Request::CancelAll { account: a, symbol } => {
                let Some(id) = account(a) else {
                    return format!("error unknown account {a}");
                };
                let symbol = match symbol {
                    None => None,
                    Some(s) => match locate(s) {
                        Some(l) => Some(l),
                        None => return format!("error unknown symbol {s}"),
                    },
                };
                Admin::CancelAll {
                    account: id,
                    symbol,
                }
            }
            Request::Block(a) | Request::Unblock(a) => {
                let Some(id) = account(a) else {
                    return format!("error unknown account {a}");
                };
                if matches!(request, Request::Block(_)) {
                    Admin::Block(id)
                } else {
                    Admin::Unblock(id)
                }
            }
        };
        if let Some(why) = self.member_refusal() {
            return format!("error {why}");
        }
        if let Some(why) = self.node.holding() {
            // An admin input is one more batch, past the bound the node tracks.
            return format!("error busy: {why}; try again");
        }
        match self.node.admin(admin) {
            Some(Outcome::Applied) => format!("ok {}", request.line()),
            Some(Outcome::AdminRefused(why)) => format!("error {why}"),
            Some(Outcome::Ignored(why)) => format!("error {why}"),
            None => "error the venue is stopping".into(),
        }
    }

    fn status(&self) -> String {
        format!(
            "ok {} itch={} sessions={}{}",
            self.node.status(),
            self.node.itch_stream().len(),
            self.gateway.as_ref().map_or(0, Gateway::connected_sessions),
            self.member_status()
        )
    }

    /// After end of day sessions stay open (their orders get `C` rejects) and the feed has
    /// sent its End of Session; SoupBinTCP End of Session waits for shutdown (DESIGN.md 4).
    fn after_day_end(&mut self) {
        if self.node.day_ended() && !self.day_end_handled {
            self.day_end_handled = true;
            tracing::info!("end of day: the market is closed; sessions stay open until shutdown");
        }
    }

    fn shutdown(&mut self) {
        let now = self.now_ns();
        self.node.end_batch();
        // Let the output stage release what is sequenced (sharded: on its thread) before the
        // last pump.
        self.node.drain_outputs(Duration::from_secs(1));
        let streams = self.node.ouch_streams().to_vec();
        let may_send = self.member_may_send();
        if let Some(gateway) = self.gateway.as_mut() {
            if may_send {
                gateway.pump(&streams, self.poll.registry(), now);
            }
            gateway.shutdown(self.poll.registry(), now);
        }
        // The inline output stage multicasts what the last batches released.
        self.node.idle();
        tracing::info!(last_seq = self.node.last_seq(), "bourse stopped");
    }
}

/// What the metrics thread reads: the day's journal, the output streams, the venue's names.
fn metrics_sources<F: FeedOut>(
    config: &Config,
    node: &Node<SystemClock, F>,
    listen: SocketAddr,
) -> metrics::Sources {
    metrics::Sources {
        listen,
        journal_dir: node.journal_dir().to_path_buf(),
        date: crate::days::date_of(node.recovery.day_epoch_unix_ns),
        durability: match config.journal.durability {
            crate::config::DurabilityMode::Async => "async",
            crate::config::DurabilityMode::Flush => "flush",
            crate::config::DurabilityMode::Replicated => "replicated",
            crate::config::DurabilityMode::Quorum => "quorum",
        },
        symbols: node
            .header
            .venue
            .symbols
            .iter()
            .map(|s| s.symbol.clone())
            .collect(),
        ouch: node.ouch_streams().to_vec(),
        itch: node.itch_stream().clone(),
        confirmed_seq: node.confirmed_seq_handle(),
    }
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(0), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "recovering journal {bar:40} {pos}/{len} records ({per_sec}, eta {eta})",
        )
        .expect("template"),
    );
    bar
}

/// Install SIGINT/SIGTERM handlers that set the returned flag.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    Ok(stop)
}
