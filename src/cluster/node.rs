//! One cluster member, driven by the daemon loop from its one thread (raft-rs's `RawNode` over
//! [`JournalStorage`]). Nothing here reads a clock or does network I/O: time enters as
//! [`ClusterNode::tick`] calls, messages as [`ClusterNode::step`] calls, and everything to do
//! comes out of [`ClusterNode::poll`].
//!
//! # How a loop drives it
//!
//! ```text
//! loop {
//!     for each tick due by the monotonic clock:  node.tick()      // ALL of them, first
//!     for each message from the transport:       node.step(m, epoch)
//!     if leader and ready:  seq = node.propose(timestamp, kind, payload)?  // then apply it
//!     node.poll(&mut out)?   // send out.messages; apply out.apply (follower); out.events
//!     node.write_commit_hint()?  // after the messages left (off the quorum's path)
//!     if let Some(seq) = node.release_gate() { release replies and ITCH up to seq }
//!     node.flush()?          // msync, after the messages left (off the quorum's path)
//! }
//! ```
//!
//! # Commit
//!
//! A record is committed once a quorum holds it in its journal *mapping*: a follower
//! acknowledges an append after writing it to the mapping (kernel-owned pages: it survives the
//! member's process) and msyncs afterwards ([`ClusterNode::flush`]), off the leader's path;
//! the leader counts itself once its own record is in its mapping.
//!
//! # Fencing: who may release
//!
//! [`ClusterNode::release_gate`] opens only on the leader of the current term that holds a
//! **lease**. Every heartbeat interval the leader issues a raft ReadIndex whose context is its
//! tick count at that moment; raft confirms it once a quorum answered the heartbeat carrying
//! it. Each follower that answered reset its election timer on receipt, which is after the
//! send, and with `check_quorum` a follower refuses to vote for anyone else until
//! `election_ticks` of its own ticks pass (raft-rs's in-lease rule). A new leader needs a
//! quorum of votes, which includes one of those followers, so no other leader can exist before
//! `sent + election_ticks` ticks. The lease lasts `election_ticks - 3` ticks from the send
//! (one tick of granularity at each end and one of margin for clock-rate drift). Because the
//! lease is anchored at the tick the confirmation was *sent*, a confirmation that arrives late
//! (a leader paused for seconds) opens nothing. The daemon must call `tick` for every tick
//! its monotonic clock says has passed *before* consulting the gate: a paused leader that
//! resumes first counts the ticks it missed, finds its lease expired, and releases nothing until
//! a quorum confirms it again — which a deposed leader never gets. Restarted members refuse
//! vote requests for `election_ticks` after start (they forgot which leader they heard), so a
//! quick restart cannot shorten a lease either.
//!
//! One election skips the in-lease rule: raft's leader transfer, in which the leader tells a
//! member to campaign at once (`MsgTimeoutNow`) and voters grant it regardless of their lease.
//! Only [`ClusterNode::hand_over_lead`] starts one (a leader that cannot serve), and it closes
//! that leader's gate for the rest of its term before the first message leaves, whether or
//! not the transfer completes; a `MsgTimeoutNow` of an earlier term is dropped by raft.

use std::collections::VecDeque;

use bytes::Bytes;
use raft::eraftpb::{Entry, Message, MessageType};
use raft::{RawNode, ReadOnlyOption, StateRole};

use super::storage::{
    Appended, JournalStorage, StorageFailure, decode_entry_data, encode_entry_data, noop_payload,
};
use crate::journal::JournalConfig;
use crate::sequencer::record::KIND_NOOP;
use crate::types::Timestamp;
use crate::workload::Rng;

/// ReadIndex confirmations in flight at once (a partitioned leader stops issuing new ones).
const LEASE_READS_IN_FLIGHT_MAX: usize = 8;
/// Ticks subtracted from `election_ticks` for the lease: granularity at both ends, drift.
pub const LEASE_MARGIN_TICKS: u64 = 3;
/// A follower campaigns at least this many ticks after `election_ticks`. The others heard the
/// old leader up to a tick later than it did (ticks are not aligned between processes), and
/// raft's in-lease rule makes them ignore a (pre-)vote request until `election_ticks` of their
/// own passed; a candidate drawn within a tick of the base was ignored and the election waited
/// for the next member's timeout (kill -9 trials: takeover p99 685 ms, against 300-400 ms
/// otherwise). Campaigning later never shortens anyone's lease.
pub const CAMPAIGN_MARGIN_TICKS: u64 = 2;
/// Committed entry bytes raft hands out per Ready (the journal records of ~16k inputs).
const COMMITTED_BYTES_PER_READY_MAX: u64 = 1 << 20;
/// One poll stops handing out committed records once it has this many (~50 ms of applying
/// at ~3 µs a record, well inside an election timeout; the Ready that crosses it may add up to
/// `COMMITTED_BYTES_PER_READY_MAX` more) ...
const APPLY_RECORDS_PER_POLL_MAX: usize = 16_384;
/// ... and after this many Readies whatever they hold.
const READIES_PER_POLL_MAX: usize = 64;

/// How a member behaves. Ticks are the daemon's `[cluster] tick_ms` intervals.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This member's id: 1-based position in `members`.
    pub id: u64,
    /// How many members the cluster has (ids 1..=members).
    pub members: u64,
    pub heartbeat_ticks: u64,
    /// Minimum election timeout; each follower draws its timeout in
    /// `election_ticks..election_ticks + election_spread_ticks`.
    pub election_ticks: u64,
    pub election_spread_ticks: u64,
    /// Entry bytes in one append message (at least one entry is always sent).
    pub append_bytes_max: u64,
    /// Appends in flight to one follower.
    pub appends_in_flight_max: usize,
    /// Bytes of uncommitted entries the leader accepts; past it `propose` is refused
    /// (back-pressure).
    pub uncommitted_bytes_max: u64,
    /// Seeds the election-timeout draws (deterministic runs; the daemon passes its id and
    /// start time).
    pub seed: u64,
    /// Testing only: what opens the release gate (see [`Fencing`]).
    #[doc(hidden)]
    pub fencing: Fencing,
    /// Ignore vote requests for `election_ticks` after start (a restarted member forgot which
    /// leader it heard, so it could otherwise help elect another inside that leader's lease).
    /// Only the simulation turns it off, to show it is needed.
    #[doc(hidden)]
    pub quiet_after_start: bool,
}

/// What opens the release gate. Only `Lease` is safe; the others exist so the simulation can
/// show that it catches their failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fencing {
    /// Leader of the current term holding a quorum-confirmed lease; committed records only.
    #[default]
    Lease,
    /// UNSAFE: any node that believes it leads releases committed records (no lease).
    LeaderOnly,
    /// UNSAFE: any node that believes it leads releases what it journaled (no quorum).
    NoQuorum,
    /// UNSAFE: as `Lease`, but a leader that hands the lead over keeps its lease (and its
    /// gate) for the rest of its term.
    LeaseKeptOnHandOver,
}

impl NodeConfig {
    pub fn lease_ticks(&self) -> u64 {
        self.election_ticks - LEASE_MARGIN_TICKS
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.members == 0 || self.id == 0 || self.id > self.members {
            return Err(format!(
                "member id {} is not in 1..={}",
                self.id, self.members
            ));
        }
        if self.heartbeat_ticks == 0 {
            return Err("heartbeat must be at least one tick".into());
        }
        if self.election_ticks < 2 * self.heartbeat_ticks + LEASE_MARGIN_TICKS + 1 {
            return Err(format!(
                "election timeout ({} ticks) must exceed two heartbeats plus {} ticks",
                self.election_ticks,
                LEASE_MARGIN_TICKS + 1
            ));
        }
        if self.election_spread_ticks == 0 {
            return Err("the election timeout spread must be at least one tick".into());
        }
        if self.appends_in_flight_max == 0 {
            return Err("appends in flight must be at least 1".into());
        }
        Ok(())
    }

    fn raft_config(&self, applied: u64) -> raft::Config {
        raft::Config {
            id: self.id,
            election_tick: self.election_ticks as usize,
            heartbeat_tick: self.heartbeat_ticks as usize,
            applied,
            max_size_per_msg: self.append_bytes_max,
            max_inflight_msgs: self.appends_in_flight_max,
            check_quorum: true,
            pre_vote: true,
            min_election_tick: self.election_ticks as usize,
            max_election_tick: (self.election_ticks
                + CAMPAIGN_MARGIN_TICKS
                + self.election_spread_ticks) as usize,
            read_only_option: ReadOnlyOption::Safe,
            // A commit that moves is not broadcast in empty appends of its own: each cost
            // every follower a wake-up and an answer that woke the leader again, per order at
            // 10k orders/s. Followers learn it with the next append or heartbeat.
            skip_bcast_commit: true,
            // raft-rs 0.7's append batching merges entries into an empty append for a later
            // index (`is_continuous_ents` accepts an empty message), producing appends whose
            // entries do not follow their index: the simulation's message check caught it.
            batch_append: false,
            max_uncommitted_size: self.uncommitted_bytes_max,
            max_committed_size_per_ready: COMMITTED_BYTES_PER_READY_MAX,
            ..raft::Config::default()
        }
    }
}

/// A member's role as raft sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader {
        term: u64,
    },
    /// `leader` is the member it follows, when it knows one.
    Follower {
        term: u64,
        leader: Option<u64>,
    },
    /// Campaigning (pre-vote or vote).
    Candidate {
        term: u64,
    },
}

/// A committed record for the state machine, exactly as journaled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedRecord {
    pub seq: u64,
    pub timestamp: Timestamp,
    pub kind: u8,
    pub payload: Bytes,
}

/// Something the loop must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    RoleChanged(Role),
    /// Records `from_seq..from_seq + records` were cut from the journal (never committed).
    Truncated {
        from_seq: u64,
        records: u64,
    },
    /// This member stopped leading with records applied past the commit index: its state must
    /// be rebuilt from journal records `1..=commit_seq` (what follows may be cut); the next
    /// records to apply come in `apply` as they commit.
    Rebuild {
        commit_seq: u64,
    },
}

/// What `poll` hands the loop. Reuse one across calls: `poll` clears it first.
#[derive(Default, Debug)]
pub struct Polled {
    /// Send each to `message.to`.
    pub messages: Vec<Message>,
    /// Records to apply, in order (a follower's, or a new leader's from before its term).
    pub apply: Vec<CommittedRecord>,
    pub events: Vec<Event>,
    /// The commit index after this poll.
    pub committed_seq: u64,
}

impl Polled {
    fn clear(&mut self) {
        self.messages.clear();
        self.apply.clear();
        self.events.clear();
    }
}

/// Why a proposal was refused.
#[derive(Debug)]
pub enum ProposeError {
    NotLeader,
    /// Leading, but records from before this term are not applied yet (wait for `apply`).
    CatchingUp,
    /// raft refused it (too many uncommitted bytes): push back.
    Dropped,
    Storage(StorageFailure),
}

impl std::fmt::Display for ProposeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposeError::NotLeader => f.write_str("not the leader"),
            ProposeError::CatchingUp => f.write_str("the new leader is still applying"),
            ProposeError::Dropped => f.write_str("too many uncommitted records"),
            ProposeError::Storage(e) => write!(f, "{e}"),
        }
    }
}

/// Why a message from a peer was not stepped (the caller logs it, rate-limited).
#[derive(Debug, PartialEq, Eq)]
pub enum StepError {
    /// Malformed or not for us: the transport should drop the connection.
    Invalid(&'static str),
    /// The sender's journal is of another day.
    OtherDay {
        ours: u64,
        theirs: u64,
    },
    /// Fine but ignored (a vote request during the restart quiet period, a stale response).
    Ignored(&'static str),
    Storage(String),
}

/// What a member found on disk when it opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Records the state machine may apply at once (replay `1..=commit_seq`); the rest come
    /// through `poll` as they commit.
    pub commit_seq: u64,
    pub last_seq: u64,
    /// 0 when this member has no journal yet.
    pub day_epoch_unix_ns: u64,
    pub term: u64,
}

/// raft election priorities (see [`ClusterNode::set_can_serve`]): a voter refuses a candidate
/// of lower priority unless the candidate's log is newer than its own.
pub const PRIORITY_CAN_SERVE: i64 = 0;
pub const PRIORITY_CANNOT_SERVE: i64 = -1;

pub struct ClusterNode {
    raw: RawNode<JournalStorage>,
    config: NodeConfig,
    rng: Rng,
    /// The lease clock: every tick the loop counted, none skipped.
    ticks: u64,
    /// The gate may open while `ticks < lease_until_tick` in `lease_term`.
    lease_until_tick: u64,
    lease_term: u64,
    /// Contexts (ticks) of ReadIndex requests in flight.
    lease_reads: VecDeque<u64>,
    last_lease_read_tick: u64,
    /// Vote requests are ignored until this tick (a restarted member forgot its leader).
    quiet_until_tick: u64,
    applied_seq: u64,
    committed_seq: u64,
    role: Role,
    pending_events: Vec<Event>,
    /// Day epoch a first leader gives a new journal.
    day_epoch_for_new: u64,
    commit_unwritten: bool,
    commit_written_tick: u64,
    /// The term in which this member, leading, handed the lead over ([`Self::hand_over_lead`]);
    /// 0: never. In that term it releases and proposes nothing more.
    handed_over_term: u64,
    /// The member the lead was last handed to (the next try goes to the one after it).
    handed_over_to: u64,
}

impl ClusterNode {
    /// Open this member's journal and state. `day_epoch_for_new` is the day epoch a journal
    /// started by this member as the cluster's first leader gets (midnight UTC today).
    pub fn open(
        config: NodeConfig,
        journal: JournalConfig,
        state_dir: &std::path::Path,
        day_epoch_for_new: u64,
        logger: &slog::Logger,
    ) -> Result<(ClusterNode, Recovered), String> {
        config.validate()?;
        let voters: Vec<u64> = (1..=config.members).collect();
        let storage = JournalStorage::open(journal, state_dir, config.id, &voters)
            .map_err(|e| e.to_string())?;
        let hard = storage.hard();
        let recovered = Recovered {
            commit_seq: hard.commit,
            last_seq: storage.last_index(),
            day_epoch_unix_ns: storage.day_epoch_unix_ns(),
            term: hard.term,
        };
        let raft_config = config.raft_config(hard.commit);
        raft_config.validate().map_err(|e| e.to_string())?;
        let raw = RawNode::new(&raft_config, storage, logger).map_err(|e| e.to_string())?;
        let mut node = ClusterNode {
            raw,
            rng: Rng::new(config.seed ^ config.id.rotate_left(32)),
            ticks: 0,
            lease_until_tick: 0,
            lease_term: 0,
            handed_over_term: 0,
            handed_over_to: 0,
            lease_reads: VecDeque::with_capacity(LEASE_READS_IN_FLIGHT_MAX),
            last_lease_read_tick: 0,
            quiet_until_tick: if config.quiet_after_start {
                config.election_ticks
            } else {
                0
            },
            applied_seq: hard.commit,
            committed_seq: hard.commit,
            role: Role::Follower {
                term: hard.term,
                leader: None,
            },
            pending_events: Vec::new(),
            day_epoch_for_new,
            commit_unwritten: false,
            commit_written_tick: u64::MAX,
            config,
        };
        node.draw_election_timeout();
        Ok((node, recovered))
    }

    pub fn id(&self) -> u64 {
        self.config.id
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether this member could serve if elected (its serving ports are free: see
    /// `daemon::ports`). One that cannot stands for election at a lower raft priority, so the
    /// members that can win the elections among themselves; safety is untouched (a refused
    /// vote never is).
    pub fn set_can_serve(&mut self, can_serve: bool) {
        let priority = if can_serve {
            PRIORITY_CAN_SERVE
        } else {
            PRIORITY_CANNOT_SERVE
        };
        self.raw.raft.set_priority(priority);
    }

    /// What [`Self::set_can_serve`] last said (raft's own priority field keeps it).
    pub fn can_serve(&self) -> bool {
        self.raw.raft.priority == PRIORITY_CAN_SERVE
    }

    /// raft-rs answers a pre-vote it refuses with its own term, and at term 0 that answer is a
    /// fatal error there (it panics: "term should be set"). Before priorities a member at term
    /// 0 never refused one (its log is empty, so every candidate's is up to date); a candidate
    /// of lower priority is refused, so such a pre-vote goes unanswered instead: the same for
    /// the candidate as a refusal (it gets no vote from this member).
    fn refusal_at_term_0(&self, message: &Message) -> bool {
        let raft = &self.raw.raft;
        message.get_msg_type() == MessageType::MsgRequestPreVote
            && raft.term == 0
            && message.priority < raft.priority
            && message.index <= raft.raft_log.last_index()
    }

    /// Highest record a quorum holds (as of the last `poll`).
    pub fn committed_seq(&self) -> u64 {
        self.committed_seq
    }

    /// Highest record the state machine has been handed (proposals included).
    pub fn applied_seq(&self) -> u64 {
        self.applied_seq
    }

    pub fn last_seq(&self) -> u64 {
        self.raw.store().last_index()
    }

    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// 0 until the journal exists.
    pub fn day_epoch_unix_ns(&self) -> u64 {
        self.raw.store().day_epoch_unix_ns()
    }

    pub fn storage(&self) -> &JournalStorage {
        self.raw.store()
    }

    /// Whether `propose` would be accepted now (leading, and every earlier record applied).
    pub fn can_propose(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
            && self.raw.raft.term != self.handed_over_term
            // raft drops proposals while it transfers the lead.
            && self.raw.raft.lead_transferee.is_none()
            && self.applied_seq == self.raw.raft.raft_log.last_index()
    }

    /// Whether a proposal of up to `bytes` would be accepted now: `can_propose`, and raft's
    /// uncommitted bound leaves room for it (the gateway reads no input otherwise, so an input
    /// read from a socket is never dropped).
    pub fn room_for_proposal(&self, bytes: u64) -> bool {
        let uncommitted = self.raw.raft.uncommitted_size() as u64;
        // raft takes any entry when nothing is uncommitted.
        self.can_propose()
            && (uncommitted == 0 || uncommitted + bytes <= self.config.uncommitted_bytes_max)
    }

    /// Journal one input as the leader and return its sequence number; the caller applies it
    /// at once and releases its outputs when [`Self::release_gate`] reaches it.
    pub fn propose(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, ProposeError> {
        assert!(kind != KIND_NOOP);
        if self.raw.raft.state != StateRole::Leader
            || self.raw.raft.term == self.handed_over_term
            || self.raw.raft.lead_transferee.is_some()
        {
            return Err(ProposeError::NotLeader);
        }
        if self.applied_seq != self.raw.raft.raft_log.last_index() {
            return Err(ProposeError::CatchingUp);
        }
        let data = encode_entry_data(timestamp, kind, payload);
        match self.raw.propose(Vec::new(), data) {
            Ok(()) => {}
            Err(raft::Error::ProposalDropped) => return Err(ProposeError::Dropped),
            Err(other) => {
                return Err(ProposeError::Storage(StorageFailure::Inconsistent(
                    other.to_string(),
                )));
            }
        }
        let log = &self.raw.raft.raft_log;
        let entry = log.unstable.entries.last().expect("just proposed");
        let (index, term, entry_data) = (entry.index, entry.term, entry.data.clone());
        assert!(index == log.last_index());
        self.raw
            .mut_store()
            .append_proposal(index, term, timestamp, kind, payload, entry_data)
            .map_err(ProposeError::Storage)?;
        self.applied_seq = index;
        Ok(index)
    }

    /// Leading but unable to serve (its ports are taken): give the lead to member `to` (raft's
    /// leader transfer: `to` is brought up to date, then told to campaign at once). Whether
    /// or not the transfer completes, this member releases and proposes nothing more in this
    /// term: the transferee's election is forced (voters do not wait out this leader's
    /// lease), so the lease no longer proves that no other leader exists. False if this
    /// member does not lead or `to` is not another member.
    pub fn hand_over_lead(&mut self, to: u64) -> bool {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || to == 0 || to > self.config.members {
            return false;
        }
        if to == self.config.id {
            return false;
        }
        if self.config.fencing != Fencing::LeaseKeptOnHandOver {
            self.handed_over_term = raft.term;
            self.lease_until_tick = 0;
        }
        self.handed_over_to = to;
        self.raw.transfer_leader(to);
        self.after_raft();
        true
    }

    /// [`Self::hand_over_lead`] to the member after this one (by id, wrapping); which one it
    /// was, or `None` if this member does not lead.
    pub fn hand_over_to_next(&mut self) -> Option<u64> {
        let to = self.member_after(self.config.id);
        self.hand_over_lead(to).then_some(to)
    }

    /// The member after `id` by id, wrapping, skipping this one (there are at least two).
    fn member_after(&self, id: u64) -> u64 {
        let next = id % self.config.members + 1;
        if next == self.config.id {
            next % self.config.members + 1
        } else {
            next
        }
    }

    /// A hand-over raft gave up on (the transferee did not win within an election timeout:
    /// it was down or cut off) leaves a leader that may not serve in its term: try the next
    /// member, so that some member leads and serves once the faults are gone.
    fn retry_hand_over(&mut self) {
        let raft = &self.raw.raft;
        let stalled = raft.state == StateRole::Leader
            && raft.term == self.handed_over_term
            && raft.lead_transferee.is_none();
        if !stalled {
            return;
        }
        let to = self.member_after(self.handed_over_to);
        self.handed_over_to = to;
        self.raw.transfer_leader(to);
    }

    /// Campaign now, as if the election timer fired (the simulation's directed scenarios).
    #[cfg(test)]
    pub(crate) fn campaign_now(&mut self) {
        let _ = self.raw.campaign();
        self.after_raft();
    }

    /// One tick of the loop's clock. Call it for every tick that passed, before anything else.
    pub fn tick(&mut self) {
        self.ticks += 1;
        self.raw.tick();
        self.retry_hand_over();
        self.after_raft();
        self.maybe_confirm_lease();
    }

    /// Step a message from a peer. `sender_day_epoch` is the sender's journal day (0: none yet).
    pub fn step(&mut self, message: Message, sender_day_epoch: u64) -> Result<(), StepError> {
        check_message(&message, self.config.id, self.config.members)?;
        let ours = self.day_epoch_unix_ns();
        if sender_day_epoch != 0 && ours != 0 && sender_day_epoch != ours {
            return Err(StepError::OtherDay {
                ours,
                theirs: sender_day_epoch,
            });
        }
        let kind = message.get_msg_type();
        if self.ticks < self.quiet_until_tick
            && matches!(
                kind,
                MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
            )
        {
            return Err(StepError::Ignored(
                "vote request during the restart quiet period",
            ));
        }
        if kind == MessageType::MsgAppend && !message.entries.is_empty() && ours == 0 {
            if sender_day_epoch == 0 {
                return Err(StepError::Invalid(
                    "entries from a member without a journal",
                ));
            }
            self.raw
                .mut_store()
                .ensure_journal(sender_day_epoch)
                .map_err(|e| StepError::Storage(e.to_string()))?;
        }
        if self.refusal_at_term_0(&message) {
            return Err(StepError::Ignored(
                "pre-vote of a member that cannot serve, at term 0",
            ));
        }
        let result = self.raw.step(message);
        self.after_raft();
        match result {
            Ok(()) => Ok(()),
            Err(raft::Error::StepPeerNotFound) => Err(StepError::Ignored("unknown peer")),
            Err(raft::Error::StepLocalMsg) => Err(StepError::Invalid("local message type")),
            Err(other) => Err(StepError::Storage(other.to_string())),
        }
    }

    /// Everything to do now: persist (journal, hard state), then hand out messages to send,
    /// records to apply and events. Sends must happen after this returns (followers answer
    /// only once a record is in their journal).
    pub fn poll(&mut self, out: &mut Polled) -> Result<(), StorageFailure> {
        out.clear();
        // A record raft needed to send could not be read (damaged): this member stops; the
        // others hold the record.
        if let Some(why) = self.raw.store().take_read_failure() {
            return Err(StorageFailure::Inconsistent(format!(
                "a journal record raft needs cannot be read: {why}"
            )));
        }
        out.events.append(&mut self.pending_events);
        // Bounded: a member with a backlog (it was starved of CPU, or is catching up) applies
        // it over several turns, stepping messages and counting ticks in between, instead of
        // one turn long enough for its election timer to fire at the next. The rest stays
        // ready ([`Self::has_work`]: the loop does not sleep).
        for _ in 0..READIES_PER_POLL_MAX {
            if !self.raw.has_ready() || out.apply.len() >= APPLY_RECORDS_PER_POLL_MAX {
                break;
            }
            self.handle_ready(out)?;
        }
        super::coalesce::coalesce(&mut out.messages, self.config.append_bytes_max);
        self.committed_seq = self.raw.raft.raft_log.committed;
        assert!(self.committed_seq <= self.last_seq());
        self.raw.mut_store().note_commit(self.committed_seq);
        self.commit_unwritten |= self.raw.store().hard().commit != self.committed_seq;
        out.events.append(&mut self.pending_events);
        out.committed_seq = self.committed_seq;
        Ok(())
    }

    fn handle_ready(&mut self, out: &mut Polled) -> Result<(), StorageFailure> {
        let mut ready = self.raw.ready();
        out.messages.append(&mut ready.take_messages());
        if !ready.snapshot().is_empty() {
            return Err(StorageFailure::Inconsistent(
                "a snapshot arrived; members never send one".into(),
            ));
        }
        if !ready.entries().is_empty() {
            if self.raw.store().day_epoch_unix_ns() == 0 {
                // The first leader of a new cluster starts the journal.
                let epoch = self.day_epoch_for_new;
                self.raw.mut_store().ensure_journal(epoch)?;
            }
            let appended = self.raw.mut_store().append_entries(ready.entries())?;
            self.note_truncation(appended);
        }
        if let Some(hard) = ready.hs() {
            let stored = self.raw.store().hard();
            if hard.term != stored.term || hard.vote != stored.vote {
                let hard = hard.clone();
                self.raw.mut_store().set_hard_state(&hard, true)?;
            } else {
                // Only the commit index moved (every turn under load): raft needs it durable
                // only as a hint, so it is written at most once per tick, after the turn's
                // messages left ([`Self::write_commit_hint`]).
                self.commit_unwritten = true;
            }
        }
        for read in ready.take_read_states() {
            self.confirm_lease(&read.request_ctx);
        }
        let committed = ready.take_committed_entries();
        self.take_committed(committed, out)?;
        out.messages.append(&mut ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        out.messages.append(&mut light.take_messages());
        let committed = light.take_committed_entries();
        self.take_committed(committed, out)?;
        self.raw.advance_apply();
        self.after_raft();
        Ok(())
    }

    fn note_truncation(&mut self, appended: Appended) {
        if appended.truncated_records == 0 {
            return;
        }
        assert!(
            appended.truncated_from > self.committed_seq,
            "a committed record was cut"
        );
        self.pending_events.push(Event::Truncated {
            from_seq: appended.truncated_from,
            records: appended.truncated_records,
        });
        if self.applied_seq >= appended.truncated_from {
            // Only a deposed leader applies past the commit index, and it was told to rebuild.
            self.applied_seq = appended.truncated_from - 1;
        }
    }

    fn take_committed(
        &mut self,
        entries: Vec<Entry>,
        out: &mut Polled,
    ) -> Result<(), StorageFailure> {
        for entry in entries {
            if entry.index <= self.applied_seq {
                continue;
            }
            assert!(
                entry.index == self.applied_seq + 1,
                "committed records arrive in order"
            );
            let record = if entry.data.is_empty() {
                CommittedRecord {
                    seq: entry.index,
                    timestamp: self.raw.store().record_timestamp(entry.index)?,
                    kind: KIND_NOOP,
                    payload: Bytes::copy_from_slice(&noop_payload(entry.term)),
                }
            } else {
                let Some((timestamp, kind, payload)) = decode_entry_data(&entry.data) else {
                    return Err(StorageFailure::Inconsistent(format!(
                        "committed entry {} is malformed",
                        entry.index
                    )));
                };
                CommittedRecord {
                    seq: entry.index,
                    timestamp,
                    kind,
                    payload,
                }
            };
            out.apply.push(record);
            self.applied_seq = entry.index;
        }
        Ok(())
    }

    /// A leader's view of every follower: `(id, highest record raft knows it holds)` into
    /// `out` (cleared; left empty when not leading). What [`super::majority_first`] ranks.
    pub fn follower_progress(&self, out: &mut Vec<(u64, u64)>) {
        out.clear();
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            return;
        }
        let followers = raft.prs().iter().filter(|&(&id, _)| id != raft.id);
        out.extend(followers.map(|(&id, progress)| (id, progress.matched)));
    }

    /// raft has more to hand out (a backlog left by a bounded [`Self::poll`]): poll again
    /// without sleeping.
    pub fn has_work(&self) -> bool {
        self.raw.has_ready()
    }

    /// Whether (and up to which record) this member may release replies, ITCH messages and
    /// serve brokers now. Call it after counting every tick that passed.
    pub fn release_gate(&self) -> Option<u64> {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || raft.term == self.handed_over_term {
            return None;
        }
        match self.config.fencing {
            Fencing::Lease | Fencing::LeaseKeptOnHandOver => {
                let leased = raft.term == self.lease_term && self.ticks < self.lease_until_tick;
                leased.then_some(self.committed_seq.min(self.applied_seq))
            }
            Fencing::LeaderOnly => Some(self.committed_seq.min(self.applied_seq)),
            Fencing::NoQuorum => Some(self.applied_seq),
        }
    }

    /// Group commit of this member's journal (msync in `flush` durability); call after the
    /// messages of the last `poll` were handed to the transport.
    pub fn flush(&mut self) -> Result<(), StorageFailure> {
        self.raw.mut_store().flush()?;
        Ok(())
    }

    /// Every heartbeat interval, the leader asks a quorum to confirm it (ReadIndex) with the
    /// current tick as context; the answer extends the lease (see the module docs).
    fn maybe_confirm_lease(&mut self) {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || !raft.commit_to_current_term() {
            return;
        }
        let due = self.ticks >= self.last_lease_read_tick + self.config.heartbeat_ticks;
        if !due || self.lease_reads.len() >= LEASE_READS_IN_FLIGHT_MAX {
            return;
        }
        self.last_lease_read_tick = self.ticks;
        self.lease_reads.push_back(self.ticks);
        self.raw.read_index(self.ticks.to_be_bytes().to_vec());
    }

    fn confirm_lease(&mut self, context: &[u8]) {
        let Ok(sent_tick) = <[u8; 8]>::try_from(context).map(u64::from_be_bytes) else {
            return;
        };
        while self.lease_reads.front().is_some_and(|&t| t <= sent_tick) {
            self.lease_reads.pop_front();
        }
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            return;
        }
        let until = sent_tick + self.config.lease_ticks();
        if self.lease_term != raft.term {
            self.lease_term = raft.term;
            self.lease_until_tick = until;
        } else {
            self.lease_until_tick = self.lease_until_tick.max(until);
        }
    }

    /// After any call into raft: notice role and term changes.
    fn after_raft(&mut self) {
        let raft = &self.raw.raft;
        let role = match raft.state {
            StateRole::Leader => Role::Leader { term: raft.term },
            StateRole::Follower => Role::Follower {
                term: raft.term,
                leader: (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id),
            },
            StateRole::Candidate | StateRole::PreCandidate => Role::Candidate { term: raft.term },
        };
        if role == self.role {
            return;
        }
        let was_leader = matches!(self.role, Role::Leader { .. });
        let changed_shape = std::mem::discriminant(&role) != std::mem::discriminant(&self.role)
            || term_of(role) != term_of(self.role);
        self.role = role;
        if !changed_shape {
            // Only the known leader changed: no reset happened inside raft.
            self.pending_events.push(Event::RoleChanged(role));
            return;
        }
        self.draw_election_timeout();
        self.retry_pre_vote_soon();
        self.lease_until_tick = 0;
        self.lease_reads.clear();
        self.last_lease_read_tick = 0;
        if was_leader {
            let commit = self.raw.raft.raft_log.committed;
            tracing::warn!(
                term = term_of(role),
                commit,
                applied = self.applied_seq,
                "cluster: stepped down"
            );
            if self.applied_seq > commit {
                self.pending_events
                    .push(Event::Rebuild { commit_seq: commit });
                self.applied_seq = commit;
            }
        }
        if let Role::Leader { term } = role {
            tracing::info!(term, last_seq = self.last_seq(), "cluster: elected leader");
        }
        self.pending_events.push(Event::RoleChanged(role));
    }

    /// A member that just started a pre-vote asks again after a heartbeat interval instead of
    /// a whole election timeout. Its first request finds the other followers still in their
    /// lease when they heard the old leader's last message later than it did (their
    /// connection carried more of it: a follower catching up), and they ignore it; raft would
    /// only try again after another randomized timeout (kill -9 trials: about one takeover in
    /// six took 600-700 ms instead of 300-400). A pre-vote changes no term and no vote, and a
    /// voter in its lease still refuses it, so asking sooner never shortens a lease.
    fn retry_pre_vote_soon(&mut self) {
        let raft = &mut self.raw.raft;
        if raft.state == StateRole::PreCandidate {
            let retry = self.config.heartbeat_ticks as usize;
            raft.election_elapsed = raft.randomized_election_timeout().saturating_sub(retry);
        }
    }

    /// raft-rs draws election timeouts from the thread's RNG; draw ours from the seeded one
    /// after every reset so runs are deterministic.
    fn draw_election_timeout(&mut self) {
        let low = self.config.election_ticks + CAMPAIGN_MARGIN_TICKS;
        let timeout = self
            .rng
            .range(low, low + self.config.election_spread_ticks - 1);
        self.raw
            .raft
            .set_randomized_election_timeout(timeout as usize);
    }

    /// The hard state last written to its file: term, vote and the commit index (a
    /// restart's hint).
    #[cfg(test)]
    pub(crate) fn stored_hard(&self) -> super::state::Hard {
        self.raw.store().hard()
    }

    /// Write a commit index that only advanced in memory, at most once per tick (no sync: it
    /// is a restart hint). Call it once the messages of the last [`Self::poll`] were handed
    /// to the transport: a follower's answer to an append, and so the leader's commit, does
    /// not wait for this file write (a 64-byte `pwrite`, which `perf trace` showed between a
    /// follower's read of an append and its answer once per 10-ms tick).
    pub fn write_commit_hint(&mut self) -> Result<(), StorageFailure> {
        if !self.commit_unwritten || self.commit_written_tick == self.ticks {
            return Ok(());
        }
        self.commit_unwritten = false;
        self.commit_written_tick = self.ticks;
        let hard = self.raw.raft.hard_state();
        let stored = self.raw.store().hard();
        let sync = hard.term != stored.term || hard.vote != stored.vote;
        self.raw.mut_store().set_hard_state(&hard, sync)
    }
}

fn term_of(role: Role) -> u64 {
    match role {
        Role::Leader { term } | Role::Follower { term, .. } | Role::Candidate { term } => term,
    }
}

/// Sanity checks on a peer's message before raft sees it (raft-rs trusts its input and may
/// panic on nonsense, e.g. non-contiguous entries).
fn check_message(message: &Message, self_id: u64, members: u64) -> Result<(), StepError> {
    if message.to != self_id {
        return Err(StepError::Invalid("addressed to another member"));
    }
    if message.from == 0 || message.from > members || message.from == self_id {
        return Err(StepError::Invalid("from an unknown member"));
    }
    match message.get_msg_type() {
        MessageType::MsgHup
        | MessageType::MsgBeat
        | MessageType::MsgUnreachable
        | MessageType::MsgSnapStatus
        | MessageType::MsgCheckQuorum
        | MessageType::MsgPropose
        | MessageType::MsgReadIndex
        | MessageType::MsgReadIndexResp
        | MessageType::MsgTransferLeader
        | MessageType::MsgSnapshot => {
            return Err(StepError::Invalid("message type members never send"));
        }
        _ => {}
    }
    if message.term == 0 {
        return Err(StepError::Invalid("term 0"));
    }
    // Members send only these two (a refusal for priority at term 0 is a panic in raft-rs:
    // see `ClusterNode::refusal_at_term_0`).
    let priority_known = matches!(message.priority, PRIORITY_CANNOT_SERVE | PRIORITY_CAN_SERVE);
    if !priority_known || message.deprecated_priority != 0 {
        return Err(StepError::Invalid("election priority members never use"));
    }
    if message.get_msg_type() != MessageType::MsgAppend && !message.entries.is_empty() {
        return Err(StepError::Invalid("entries outside an append"));
    }
    let mut previous_term = message.log_term;
    for (expected, entry) in (message.index + 1..).zip(message.entries.iter()) {
        if entry.index != expected
            || entry.term < previous_term
            || entry.term > message.term
            || entry.get_entry_type() != raft::eraftpb::EntryType::EntryNormal
            || !entry.context.is_empty()
        {
            return Err(StepError::Invalid("entries out of order"));
        }
        if !entry.data.is_empty() && decode_entry_data(&entry.data).is_none() {
            return Err(StepError::Invalid("malformed entry data"));
        }
        previous_term = entry.term;
    }
    Ok(())
}

/// raft-rs logs through slog: forward to tracing (raft's info is our debug; the node logs the
/// state changes that matter itself).
pub struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        _values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        let message = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{message}")
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{message}"),
            slog::Level::Info | slog::Level::Debug => tracing::debug!(target: "raft", "{message}"),
            slog::Level::Trace => tracing::trace!(target: "raft", "{message}"),
        }
        Ok(())
    }
}

/// The logger a daemon's node uses.
pub fn tracing_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

/// A logger that drops everything (simulation).
pub fn silent_logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}
