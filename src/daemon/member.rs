//! `bourse run` as a member of a cluster (`[cluster]` with several members, issue 11): the
//! same event loop, plus raft (`crate::cluster`).
//!
//! Each turn of the loop, in this order (`src/cluster/node.rs` explains why):
//! 1. **Ticks** — every `[cluster] tick_ms` that passed by CLOCK_BOOTTIME (it keeps counting
//!    while the process is stopped and while the machine sleeps), *first*: a leader that was
//!    paused counts what it missed, so its lease has run out before it looks at anything.
//! 2. **Messages** from the other members are stepped.
//! 3. **Input** (only while this member leads and has applied everything before its term):
//!    the gateway's and admin's inputs are proposed — journaled at once — and applied.
//! 4. **Poll**: raft's messages leave, committed records are applied (a follower's; a new
//!    leader's from before its term), role changes start or stop serving, and a leader that
//!    lost office with inputs past the commit rebuilds its state from the committed records.
//! 5. **Release** up to the release gate (`quorum`: committed, applied, under a lease); the
//!    gateway sends replies only while the gate is open.
//! 6. The journal's msync is requested from a background thread, off the quorum's path.
//!
//! **Serving**: a member binds the order-entry gateway, the re-request and GLIMPSE servers
//! and multicasts only while it leads with its gate open; it stops (sessions get End of
//! Session) as soon as it learns it no longer leads. Its feed continues the MoldUDP64 session
//! after the last ITCH message known to have been multicast — by itself or by any member that
//! said so in a cluster frame — so messages an old leader released but may not have sent are
//! sent again (same numbers, same bytes: the stream is a function of the committed journal).

use super::node::Node;
use super::output::FeedOut;
use super::{
    ADMIN_TOKENS, Daemon, Listening, TRANSPORT_TOKEN, WAKER_TOKEN, admin, ports, progress_bar,
};
use crate::cluster::majority_first::MajorityFirst;
use crate::cluster::node::{ClusterNode, Event, Polled, Role, StepError, tracing_logger};
use crate::cluster::transport::Transport;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::guard::LogGate;
use crate::journal::day_epoch_of;
use crate::marketdata::ServerHandle;
use crate::marketdata::glimpse::{
    GlimpseConfig, GlimpseServer, SnapshotRequester, snapshot_channel,
};
use crate::marketdata::publisher::{PublisherConfig, sender_opens};
use crate::marketdata::rerequest::{RerequestConfig, RerequestServer};
use crate::sequencer::{Clock, SystemClock};
use crate::wire::ascii::SessionId;
use mio::unix::SourceFd;
use mio::{Interest, Poll};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Messages stepped per loop turn at most; more wait for the next turn, which then does not
/// sleep (`Transport::pending`).
const STEPS_PER_TURN_MAX: usize = 4096;
/// A member that could not bind a serving port tries again after this long.
const SERVE_RETRY_NS: u64 = 100_000_000;
const SERVE_LOG_INTERVAL_MS: u64 = 5_000;
/// A leader that cannot bind its serving ports for this long hands the lead to another member
/// (whose ports may be free) rather than keep a cluster that serves nobody.
const HAND_OVER_AFTER_NS: u64 = 2_000_000_000;
/// The background journal sync runs at most this often. A sync per loop turn (10,000 a second
/// at 10k orders/s) took a quarter of a member's CPU for no one's benefit: what `quorum`
/// promises rests on the majority's mappings; the disk catches up within this interval.
const SYNC_INTERVAL: Duration = Duration::from_millis(10);
/// Log lines about refused peer messages: at most one per this many ms.
const STEP_LOG_INTERVAL_MS: u64 = 10_000;

/// What a cluster member keeps beside the node (which owns the raft node and the journal).
pub(super) struct Member<F: FeedOut> {
    transport: Transport,
    make_feed: Box<dyn Fn(u64) -> Result<F, String>>,
    /// The feed's socket settings, to try them while not serving ([`sender_opens`]).
    publisher: PublisherConfig,
    polled: Polled,
    id: u64,
    /// CLOCK_BOOTTIME at start, the tick length, and the ticks given to raft so far.
    started_boot_ns: u64,
    tick_ns: u64,
    ticks_done: u64,
    /// Highest ITCH message known multicast by any member (this one included).
    known_sent: u64,
    syncer: Syncer,
    listening: Listening,
    /// The gateway and servers are bound and the feed open.
    serving: bool,
    last_serve_attempt_ns: u64,
    rerequest: RerequestConfig,
    glimpse: GlimpseConfig,
    requester: SnapshotRequester,
    step_log: LogGate,
    /// A leader that cannot bind its serving ports retries every [`SERVE_RETRY_NS`]: a line
    /// at the first failure, then one every [`SERVE_LOG_INTERVAL_MS`] counting the rest.
    serve_log: LogGate,
    /// Since when (boot ns of the loop's clock) this leader has failed to bind its serving
    /// ports; 0: not failing. After [`HAND_OVER_AFTER_NS`] it hands the lead over.
    serve_failing_since_ns: u64,
    /// A leader's appends: at once to the followers a majority needs, the others' held.
    majority_first: MajorityFirst,
    /// Scratch for the followers' progress (no allocation per turn).
    followers: Vec<(u64, u64)>,
    /// When this member last checked its serving ports (boot ns of the loop's clock; 0:
    /// never). Whether one was taken is its election priority (`ClusterNode::can_serve`).
    ports_checked_ns: u64,
    /// Threads stopping this member's own servers (after it stopped leading): until they
    /// end, the ports they hold are no other process's, so they are not checked.
    servers_stopping: Vec<std::thread::JoinHandle<()>>,
}

impl<F: FeedOut> Daemon<F> {
    /// Open this member's journal and raft state, rebuild the state from the committed
    /// records, bind the admin port and the cluster transport; serve nothing until elected.
    pub fn start_member(
        mut config: Config,
        make_feed: impl Fn(u64) -> Result<F, String> + 'static,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, String> {
        let cluster = config
            .cluster
            .clone()
            .expect("a cluster member has [cluster]");
        resolve_serving_ports(&mut config)?;
        let mut clock = SystemClock;
        let now_unix_ns = clock.unix_ns();
        let seed = cluster.id ^ now_unix_ns;
        let state_dir = cluster.state_dir(&config.journal.dir);
        let (raft, recovered) = ClusterNode::open(
            cluster.node_config(seed),
            super::node::journal_config(&config, &config.journal.dir),
            &state_dir,
            day_epoch_of(now_unix_ns),
            &tracing_logger(),
        )?;
        let bar = progress_bar();
        let mut node =
            Node::open_member(&config, clock, raft, recovered.commit_seq, |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
        bar.finish_and_clear();
        tracing::info!(
            member = cluster.id,
            members = cluster.members.len(),
            term = recovered.term,
            commit_seq = recovered.commit_seq,
            last_seq = recovered.last_seq,
            state = %state_dir.display(),
            "cluster member recovered its journal"
        );
        let poll = Poll::new().map_err(|e| format!("cannot create the event poller: {e}"))?;
        let secret_path = admin::secret_path(&config)?;
        let secret = admin::Secret::load_or_create(&secret_path)?;
        let admin = admin::AdminServer::bind(&config.admin, secret, poll.registry(), ADMIN_TOKENS)
            .map_err(|e| format!("cannot listen for admin on {}: {e}", config.admin.listen))?;
        let waker = Arc::new(
            mio::Waker::new(poll.registry(), WAKER_TOKEN)
                .map_err(|e| format!("cannot create the poll waker: {e}"))?,
        );
        let wake: crate::marketdata::glimpse::Waker = Arc::new(move || {
            let _ = waker.wake();
        });
        // A member runs compact: its output stage releases on this thread (no wake needed).
        let listener = std::net::TcpListener::bind(cluster.listen()).map_err(|e| {
            format!(
                "cannot listen for cluster members on {}: {e}",
                cluster.listen()
            )
        })?;
        let cluster_addr = listener.local_addr().map_err(|e| e.to_string())?;
        let transport =
            Transport::spawn(listener, cluster.transport_config(cluster.read_secret()?))
                .map_err(|e| format!("cannot start the cluster transport: {e}"))?;
        // One descriptor for every member connection: the transport's own poll.
        poll.registry()
            .register(
                &mut SourceFd(&transport.as_raw_fd()),
                TRANSPORT_TOKEN,
                Interest::READABLE,
            )
            .map_err(|e| format!("cannot poll the cluster transport: {e}"))?;
        let syncer = Syncer::spawn(config.journal.dir.clone())
            .map_err(|e| format!("cannot start the journal sync thread: {e}"))?;
        let glimpse = GlimpseConfig::from_config(&config)?;
        let (requester, desk) = snapshot_channel(glimpse.max_connections, Some(wake));
        // The metrics endpoint serves on every member (a follower's figures too).
        let metrics_server = match config.admin.metrics_listen {
            Some(listen) => {
                let sources = super::metrics_sources(&config, &node, listen);
                let (probe, server) = super::metrics::spawn(sources)
                    .map_err(|e| format!("cannot serve metrics on {listen}: {e}"))?;
                node.probe = probe;
                Some(server)
            }
            None => None,
        };
        let metrics = metrics_server.as_ref().map(ServerHandle::local_addr);
        let listening = Listening {
            gateway: config.gateway.listen,
            admin: admin.local_addr().map_err(|e| e.to_string())?,
            rerequest: config.feed.rerequest,
            snapshot: config.feed.snapshot,
            replication: cluster_addr,
            feed: config.feed.group,
            metrics,
        };
        let member = Member {
            transport,
            make_feed: Box::new(make_feed),
            publisher: PublisherConfig::from_feed(&config.feed)?,
            polled: Polled::default(),
            id: cluster.id,
            started_boot_ns: boottime_ns(),
            tick_ns: cluster.tick_ms * 1_000_000,
            ticks_done: 0,
            known_sent: 0,
            syncer,
            listening,
            serving: false,
            last_serve_attempt_ns: 0,
            rerequest: RerequestConfig::from_feed(&config.feed)?,
            glimpse,
            requester,
            step_log: LogGate::default(),
            serve_log: LogGate::default(),
            serve_failing_since_ns: 0,
            majority_first: MajorityFirst::new(
                cluster.members.len(),
                cluster.minority_append_delay_us.saturating_mul(1_000),
                cluster.append_bytes_max,
                cluster.appends_in_flight_max,
            ),
            followers: Vec::with_capacity(cluster.members.len()),
            ports_checked_ns: 0,
            servers_stopping: Vec::new(),
        };
        Ok(Daemon {
            poll,
            node,
            gateway: None,
            admin,
            desk,
            servers: Vec::new(),
            config,
            started: Instant::now(),
            stop,
            day_end_handled: false,
            metrics,
            _metrics_server: metrics_server,
            member: Some(member),
            last_timer_ns: 0,
            idle: false,
        })
    }

    /// Where a member listens (its serving ports are bound only while it leads).
    pub(super) fn member_listening(&self) -> Option<Listening> {
        self.member.as_ref().map(|m| m.listening.clone())
    }

    /// Steps 1 and 2: every tick that passed, then the other members' messages.
    pub(super) fn member_before_input(&mut self, transport_signalled: bool) {
        let Some(member) = self.member.as_mut() else {
            return;
        };
        let raft = self.node.cluster_mut().expect("a member's node");
        let due = (boottime_ns().saturating_sub(member.started_boot_ns)) / member.tick_ns;
        // All of them, however many: the lease is counted in ticks (fencing).
        for _ in member.ticks_done..due {
            raft.tick();
        }
        member.ticks_done = member.ticks_done.max(due);
        member.transport.turn(transport_signalled);
        member.known_sent = member
            .known_sent
            .max(member.transport.keepalive_itch_sent());
        for _ in 0..STEPS_PER_TURN_MAX {
            let Some(inbound) = member.transport.take() else {
                break;
            };
            member.known_sent = member.known_sent.max(inbound.itch_sent);
            let from = inbound.from;
            match raft.step(inbound.message, inbound.day_epoch_unix_ns) {
                Ok(()) | Err(StepError::Ignored(_)) => {}
                Err(StepError::Storage(why)) => {
                    self.node
                        .fatal
                        .get_or_insert(format!("cluster storage failed: {why}"));
                    return;
                }
                Err(why) => {
                    let now = member.started_boot_ns + member.ticks_done * member.tick_ns;
                    if let Some(suppressed) = member.step_log.pass(now, STEP_LOG_INTERVAL_MS) {
                        tracing::warn!(from, suppressed, "cluster: message refused: {why:?}");
                    }
                }
            }
        }
    }

    /// Step 4: a new leader journals the start of day if none is committed; then raft's poll:
    /// messages out, committed records in, role changes. Returns whether the node was rebuilt
    /// (its streams are new).
    pub(super) fn member_after_input(&mut self, now_ns: u64) -> bool {
        let Some(member) = self.member.as_mut() else {
            return false;
        };
        if self.node.fatal.is_some() {
            return false;
        }
        let leading = matches!(
            self.node.cluster().map(ClusterNode::role),
            Some(Role::Leader { .. })
        );
        if leading && !self.node.day_started() && self.node.ready_for_input() {
            self.node.propose_start_of_day();
        }
        let raft = self.node.cluster_mut().expect("a member's node");
        if let Err(why) = raft.poll(&mut member.polled) {
            self.node
                .fatal
                .get_or_insert(format!("cluster storage failed: {why}"));
            return false;
        }
        let epoch = raft.day_epoch_unix_ns();
        if member.majority_first.enabled() {
            raft.follower_progress(&mut member.followers);
            let majority_first = &mut member.majority_first;
            majority_first.choose(&member.followers);
            let now_boot_ns = boottime_ns();
            majority_first.observe_commit(raft.committed_seq(), raft.last_seq(), now_boot_ns);
            let transport = &mut member.transport;
            let mut send = |message| {
                transport.send(message, epoch);
            };
            for message in member.polled.messages.drain(..) {
                majority_first.route(message, now_boot_ns, &mut send);
            }
            majority_first.release_due(now_boot_ns, &mut send);
        } else {
            for message in member.polled.messages.drain(..) {
                member.transport.send(message, epoch);
            }
        }
        member.transport.flush();
        if let Err(why) = raft.write_commit_hint() {
            self.node
                .fatal
                .get_or_insert(format!("cluster storage failed: {why}"));
            return false;
        }
        let mut rebuild = false;
        let last_role = member.polled.events.iter().rev().find_map(|e| match e {
            Event::RoleChanged(role) => Some(*role),
            _ => None,
        });
        if let Some(role) = last_role {
            // Only where a poll's changes ended (an election passes through several).
            tracing::info!(member = member.id, ?role, "cluster: role changed");
        }
        for event in &member.polled.events {
            match event {
                Event::RoleChanged(_) => {}
                Event::Truncated { from_seq, records } => tracing::warn!(
                    from_seq,
                    records,
                    "cluster: cut {records} uncommitted records from the journal (journaled by a deposed leader, never committed)"
                ),
                Event::Rebuild { commit_seq } => {
                    tracing::warn!(
                        commit_seq,
                        "cluster: lost the lead with inputs past the commit: rebuilding the state from the committed records"
                    );
                    rebuild = true;
                    // From here to the rebuild the state is stale (the records below are
                    // applied over the cut inputs): no snapshot may be taken of it.
                    self.node.stop_state_snapshots();
                }
            }
        }
        let mut records = std::mem::take(&mut member.polled.apply);
        for record in records.drain(..) {
            let applied = self.node.apply_committed(
                record.seq,
                record.timestamp,
                record.kind,
                &record.payload,
            );
            if let Err(why) = applied {
                self.node.fatal.get_or_insert(why);
                break;
            }
        }
        // The buffer goes back for the next poll (no allocation per turn).
        self.member.as_mut().expect("member").polled.apply = records;
        let role = self.node.cluster().expect("member").role();
        if !matches!(role, Role::Leader { .. }) {
            // A later lead counts its own failures to serve.
            self.member.as_mut().expect("member").serve_failing_since_ns = 0;
        }
        if self.member_serving() && !matches!(role, Role::Leader { .. }) {
            self.stop_serving(now_ns, role);
        }
        if rebuild {
            match self.take_node_for_rebuild() {
                Ok(()) => return true,
                Err(why) => {
                    self.node.fatal.get_or_insert(why);
                    return false;
                }
            }
        }
        if !self.member_serving() && self.may_start_serving(now_ns) {
            self.start_serving(now_ns);
        }
        self.check_serving_ports(now_ns);
        false
    }

    /// A member that does not serve checks its serving ports and its feed now and then, and
    /// stands for election at a lower priority while a port is taken (`ports`) or the feed
    /// cannot open.
    fn check_serving_ports(&mut self, now_ns: u64) {
        let member = self.member.as_mut().expect("member");
        member
            .servers_stopping
            .retain(|stopping| !stopping.is_finished());
        if !member.servers_stopping.is_empty() {
            // Checked as soon as they have ended (the last check is a second old by then).
            return;
        }
        let due = member.ports_checked_ns == 0
            || now_ns.saturating_sub(member.ports_checked_ns) >= ports::CHECK_INTERVAL_NS;
        if member.serving || !due {
            return;
        }
        member.ports_checked_ns = now_ns.max(1);
        let taken = ports::first_taken(&self.config);
        // A trial socket (no datagram sent): a member whose feed cannot open would win
        // elections only to hand the lead on.
        let feed_error = match &taken {
            None => sender_opens(&member.publisher).err(),
            Some(_) => None,
        };
        let id = member.id;
        let could_serve = self.node.cluster().expect("a member's node").can_serve();
        if could_serve {
            if let Some((addr, error)) = &taken {
                tracing::warn!(member = id, %addr, "cluster: cannot bind serving port {addr} ({error}): standing for election below the members that can serve");
            } else if let Some(why) = &feed_error {
                let group = member.publisher.group;
                tracing::warn!(
                    member = id,
                    "cluster: cannot open the multicast feed {group}: {why}: standing for election below the members that can serve"
                );
            }
        } else if taken.is_none() && feed_error.is_none() {
            tracing::info!(
                member = id,
                "cluster: serving ports free and the feed opens again: standing for election as the others do"
            );
        }
        self.set_can_serve(taken.is_none() && feed_error.is_none());
    }

    fn set_can_serve(&mut self, can_serve: bool) {
        let raft = self.node.cluster_mut().expect("a member's node");
        raft.set_can_serve(can_serve);
    }

    fn take_node_for_rebuild(&mut self) -> Result<(), String> {
        let started = Instant::now();
        self.node.rebuild(&self.config)?;
        tracing::warn!(
            last_seq = self.node.last_seq(),
            ms = started.elapsed().as_millis() as u64,
            "cluster: state rebuilt from the committed records; following"
        );
        Ok(())
    }

    fn member_serving(&self) -> bool {
        self.member.as_ref().is_some_and(|m| m.serving)
    }

    /// Lead with the gate open, the day started and everything applied released (so a broker
    /// logging in gets every reply the old leader may have sent).
    fn may_start_serving(&self, now_ns: u64) -> bool {
        let member = self.member.as_ref().expect("member");
        let raft = self.node.cluster().expect("member");
        matches!(raft.role(), Role::Leader { .. })
            && raft.release_gate().is_some()
            && self.node.day_started()
            && !self.node.awaiting_release()
            && self.node.fatal.is_none()
            // Its own servers from an earlier lead still hold the ports until they stop.
            && member.servers_stopping.iter().all(|s| s.is_finished())
            && now_ns.saturating_sub(member.last_serve_attempt_ns) >= SERVE_RETRY_NS
    }

    fn start_serving(&mut self, now_ns: u64) {
        let member = self.member.as_mut().expect("member");
        member.last_serve_attempt_ns = now_ns.max(1);
        let session = SessionId::new(&self.node.header.gateway_session).expect("checked at start");
        let gateway = match Gateway::bind(
            &self.config.gateway,
            &self.config.accounts,
            session,
            self.poll.registry(),
            super::GATEWAY_TOKENS,
        ) {
            Ok(gateway) => gateway,
            Err(e) => {
                if let Some(retries) = member.serve_log.pass(now_ns, SERVE_LOG_INTERVAL_MS) {
                    tracing::error!(listen = %self.config.gateway.listen, retries, "cluster: leading, but cannot listen for order entry yet: {e}");
                }
                self.serve_failed(now_ns);
                return;
            }
        };
        // Bound, and the feed tried, before any thread starts: a port still taken or a feed
        // that cannot open costs no thread to stop (the member retries every SERVE_RETRY_NS).
        let rerequest = match RerequestServer::bind(
            &member.rerequest,
            self.node.itch_stream().clone(),
        ) {
            Ok(server) => server,
            Err(e) => {
                if let Some(retries) = member.serve_log.pass(now_ns, SERVE_LOG_INTERVAL_MS) {
                    tracing::error!(listen = %member.rerequest.listen, retries, "cluster: leading, but cannot bind the re-request server yet: {e}");
                }
                self.serve_failed(now_ns);
                return;
            }
        };
        // A trial socket only: the feed that multicasts opens last, once nothing else can
        // fail (opening it sends what the old leader may not have sent).
        if let Err(why) = sender_opens(&member.publisher) {
            if let Some(retries) = member.serve_log.pass(now_ns, SERVE_LOG_INTERVAL_MS) {
                let group = member.publisher.group;
                tracing::error!(
                    retries,
                    "cluster: leading, but cannot open the feed yet: cannot open the multicast feed {group}: {why}"
                );
            }
            self.serve_failed(now_ns);
            return;
        }
        let glimpse = match GlimpseServer::spawn(member.glimpse.clone(), member.requester.clone()) {
            Ok(server) => server,
            Err(e) => {
                if let Some(retries) = member.serve_log.pass(now_ns, SERVE_LOG_INTERVAL_MS) {
                    tracing::error!(listen = %member.glimpse.listen, retries, "cluster: leading, but cannot bind the GLIMPSE server yet: {e}");
                }
                self.serve_failed(now_ns);
                return;
            }
        };
        let rerequest = match rerequest.spawn() {
            Ok(server) => server,
            Err(e) => {
                let why = format!("cannot start the re-request server: {e}");
                self.serving_not_started(now_ns, vec![glimpse], &why);
                return;
            }
        };
        let servers = vec![rerequest, glimpse];
        let member = self.member.as_mut().expect("member");
        let sent = member.known_sent.max(self.node.itch_sent());
        if let Err(why) = self.node.open_feed_after(sent, &member.make_feed) {
            self.serving_not_started(now_ns, servers, &format!("cannot open the feed: {why}"));
            return;
        }
        let term = match self.node.cluster().expect("member").role() {
            Role::Leader { term } => term,
            _ => 0,
        };
        tracing::info!(
            member = member.id,
            term,
            released_seq = self.node.released_seq(),
            itch_continues_after = sent,
            itch_released = self.node.itch_stream().len(),
            "cluster: leading: serving order entry, re-requests, snapshots and the feed"
        );
        member.serving = true;
        member.serve_failing_since_ns = 0;
        self.gateway = Some(gateway);
        self.servers = servers;
    }

    /// Leading, the servers started but serving could not begin: their threads end off the
    /// loop, like a deposed leader's servers, and the failure counts ([`Self::serve_failed`]).
    fn serving_not_started(&mut self, now_ns: u64, servers: Vec<ServerHandle>, why: &str) {
        tracing::error!("cluster: leading, but {why}");
        let member = self.member.as_mut().expect("member");
        member.servers_stopping.extend(stop_in_background(servers));
        self.serve_failed(now_ns);
    }

    /// A serving port could not be bound or the feed opened: after [`HAND_OVER_AFTER_NS`] of
    /// such failures, hand the lead to the next member (raft's leader transfer; this member
    /// releases nothing more in its term, see [`ClusterNode::hand_over_lead`]).
    fn serve_failed(&mut self, now_ns: u64) {
        // Not re-elected at once once it has handed over: the check after it steps down
        // restores the priority when the ports are free.
        self.set_can_serve(false);
        let member = self.member.as_mut().expect("member");
        if member.serve_failing_since_ns == 0 {
            member.serve_failing_since_ns = now_ns.max(1);
        }
        if now_ns.saturating_sub(member.serve_failing_since_ns) < HAND_OVER_AFTER_NS {
            return;
        }
        member.serve_failing_since_ns = 0;
        let id = member.id;
        let raft = self.node.cluster_mut().expect("a member's node");
        if let Some(to) = raft.hand_over_to_next() {
            tracing::error!(
                member = id,
                to,
                "cluster: leading but unable to serve for {} s: handing the lead to member {to}",
                HAND_OVER_AFTER_NS / 1_000_000_000
            );
        }
    }

    /// No longer leading: End of Session to every session, stop the servers and the feed.
    fn stop_serving(&mut self, now_ns: u64, role: Role) {
        let sessions = self.gateway.as_ref().map_or(0, Gateway::connected_sessions);
        if let Some(mut gateway) = self.gateway.take() {
            gateway.shutdown(self.poll.registry(), now_ns);
        }
        self.node.close_feed();
        let stopping = stop_in_background(std::mem::take(&mut self.servers));
        let member = self.member.as_mut().expect("member");
        member.servers_stopping.extend(stopping);
        member.serving = false;
        tracing::warn!(
            member = member.id,
            ?role,
            sessions,
            released_seq = self.node.released_seq(),
            "cluster: no longer leading: sessions ended (End of Session), feed and servers stopped"
        );
    }

    /// May replies leave now? Only a serving leader whose gate is open (re-checked right
    /// before the write: a leader paused in between has counted its missed ticks since).
    pub(super) fn member_may_send(&self) -> bool {
        let Some(member) = self.member.as_ref() else {
            return true;
        };
        member.serving
            && self
                .node
                .cluster()
                .is_some_and(|raft| raft.release_gate().is_some())
    }

    /// Step 6: tell the others what this member multicast, and have the journal msynced in
    /// the background.
    pub(super) fn member_after_release(&mut self) {
        let Some(member) = self.member.as_mut() else {
            return;
        };
        let sent = self.node.itch_sent();
        member.known_sent = member.known_sent.max(sent);
        member.transport.announce_itch_sent(sent);
        let last = self.node.cluster().map_or(0, ClusterNode::last_seq);
        member.syncer.request(last);
        if let Some(why) = member.syncer.failure() {
            self.node.fatal.get_or_insert(why);
        }
    }

    /// Why this member takes no input now (admin commands), if it does not.
    pub(super) fn member_refusal(&self) -> Option<String> {
        let member = self.member.as_ref()?;
        if self.node.ready_for_input() && member.serving {
            return None;
        }
        let raft = self.node.cluster()?;
        Some(match raft.role() {
            Role::Leader { .. } => "this member leads but is not serving yet: try again".into(),
            Role::Follower {
                leader: Some(leader),
                ..
            } => format!("not the leader: member {leader} leads"),
            _ => "not the leader: an election is under way".into(),
        })
    }

    /// ` role=… term=… commit=… leader=…` for the admin status line.
    pub(super) fn member_status(&self) -> String {
        let (Some(member), Some(raft)) = (self.member.as_ref(), self.node.cluster()) else {
            return String::new();
        };
        let (role, term, leader) = match raft.role() {
            Role::Leader { term } => ("leader", term, Some(member.id)),
            Role::Follower { term, leader } => ("follower", term, leader),
            Role::Candidate { term } => ("candidate", term, None),
        };
        format!(
            " member={} role={role} term={term} commit={} leader={} serving={} journal_last={} synced_seq={} itch_sent={} held_appends={}",
            member.id,
            raft.committed_seq(),
            leader.map_or_else(|| "none".to_string(), |l| l.to_string()),
            if member.serving { "yes" } else { "no" },
            raft.last_seq(),
            member.syncer.synced(),
            member.known_sent,
            member.majority_first.held_total(),
        )
    }

    /// How long the loop may sleep: until the next raft tick at most.
    pub(super) fn member_timeout(&self, timeout: Duration) -> Duration {
        let Some(member) = self.member.as_ref() else {
            return timeout;
        };
        let backlog = self.node.cluster().is_some_and(ClusterNode::has_work);
        if member.transport.pending() || backlog {
            return Duration::ZERO;
        }
        let now_ns = boottime_ns();
        let next_ns = (member.ticks_done + 1) * member.tick_ns;
        let elapsed = now_ns.saturating_sub(member.started_boot_ns);
        let mut timeout = timeout.min(Duration::from_nanos(next_ns.saturating_sub(elapsed)));
        if let Some(due_ns) = member.majority_first.next_due_ns() {
            timeout = timeout.min(Duration::from_nanos(due_ns.saturating_sub(now_ns)));
        }
        timeout
    }
}

/// Server threads take up to a stop-poll interval to end: not on the loop's thread. The
/// thread that waits for them (none if it could not start: then they were stopped here).
fn stop_in_background(servers: Vec<ServerHandle>) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("stop-servers".into())
        .spawn(move || drop(servers))
        .ok()
}

/// Port 0 in a serving address is resolved once at start (a member binds it only while it
/// leads, and must come back on the same port); clusters should name fixed ports.
fn resolve_serving_ports(config: &mut Config) -> Result<(), String> {
    let resolve_tcp = |addr: SocketAddr| -> Result<SocketAddr, String> {
        if addr.port() != 0 {
            return Ok(addr);
        }
        let probe = std::net::TcpListener::bind(addr).map_err(|e| format!("{addr}: {e}"))?;
        probe.local_addr().map_err(|e| e.to_string())
    };
    config.gateway.listen = resolve_tcp(config.gateway.listen)?;
    config.feed.snapshot = resolve_tcp(config.feed.snapshot)?;
    if config.feed.rerequest.port() == 0 {
        let probe = std::net::UdpSocket::bind(config.feed.rerequest)
            .map_err(|e| format!("{}: {e}", config.feed.rerequest))?;
        config.feed.rerequest = probe.local_addr().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// CLOCK_BOOTTIME in ns: monotonic, and counting while the process is stopped and while the
/// machine is suspended (CLOCK_MONOTONIC, Rust's `Instant`, stops during a suspension, which
/// would stretch a leader's lease over it).
fn boottime_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct we pass.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    assert_eq!(status, 0, "CLOCK_BOOTTIME is available on Linux");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The journal's msync off the loop's thread (`quorum` durability): the loop asks for "up to
/// record N" after each turn; the thread fdatasyncs the segment files written since its last
/// sync (a shared mapping's dirty pages are the file's page cache), at most once per
/// [`SYNC_INTERVAL`], and reports what it covered.
struct Syncer {
    requested: Arc<AtomicU64>,
    synced: Arc<AtomicU64>,
    failed: Arc<std::sync::Mutex<Option<String>>>,
    doorbell: crossbeam::channel::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    fn spawn(dir: PathBuf) -> std::io::Result<Syncer> {
        let requested = Arc::new(AtomicU64::new(0));
        let synced = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(std::sync::Mutex::new(None));
        let (doorbell, rings) = crossbeam::channel::bounded(1);
        let (want, done, failure) = (requested.clone(), synced.clone(), failed.clone());
        let thread = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || {
                let mut first_segment = 1;
                let mut last_sync: Option<Instant> = None;
                // Ends when the loop drops the doorbell.
                while rings.recv().is_ok() {
                    // At most one sync per interval: what is asked meanwhile joins the next.
                    if let Some(last) = last_sync {
                        std::thread::sleep(SYNC_INTERVAL.saturating_sub(last.elapsed()));
                    }
                    last_sync = Some(Instant::now());
                    let seq = want.load(Ordering::Acquire);
                    if seq <= done.load(Ordering::Relaxed) {
                        continue;
                    }
                    match sync_segments(&dir, &mut first_segment) {
                        Ok(()) => done.store(seq, Ordering::Release),
                        Err(why) => {
                            tracing::error!("journal: background sync failed: {why}");
                            failure.lock().expect("not poisoned").get_or_insert(why);
                            return;
                        }
                    }
                }
                // A last sync of everything when the member stops.
                let _ = sync_segments(&dir, &mut first_segment);
            })?;
        Ok(Syncer {
            requested,
            synced,
            failed,
            doorbell,
            thread: Some(thread),
        })
    }

    /// Make records through `seq` durable soon.
    fn request(&self, seq: u64) {
        if self.requested.fetch_max(seq, Ordering::AcqRel) < seq {
            let _ = self.doorbell.try_send(());
        }
    }

    /// The last record the background sync covered.
    fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    fn failure(&self) -> Option<String> {
        self.failed.lock().expect("not poisoned").clone()
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let (doorbell, _) = crossbeam::channel::bounded(1);
        drop(std::mem::replace(&mut self.doorbell, doorbell));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// fdatasync every segment from `first_segment` on; afterwards only the last one (and any
/// later) needs it again.
fn sync_segments(dir: &std::path::Path, first_segment: &mut u64) -> Result<(), String> {
    let segments = crate::journal::segment::list_segments(dir).map_err(|e| e.to_string())?;
    if let Some(&(newest, _)) = segments.last()
        && newest < *first_segment
    {
        // A truncation removed later segments; writing goes on in this one.
        *first_segment = newest;
    }
    let from = *first_segment;
    for (index, path) in segments.iter().filter(|(i, _)| *i >= from) {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        file.sync_data()
            .map_err(|e| format!("fdatasync {}: {e}", path.display()))?;
        *first_segment = (*first_segment).max(*index);
    }
    Ok(())
}
