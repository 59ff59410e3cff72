//! Majority first: a leader sends each append at once only to the followers it needs for a
//! majority — the ones furthest along — and holds the others' appends for at most
//! `[cluster] minority_append_delay_us`, then sends them merged into one.
//!
//! Why: raft sends every append to every follower, so on three members each input woke both
//! followers and both answers woke the leader, for a commit that needs one answer. On a
//! machine with fewer cores than processes the second follower's wake-up competes for the CPU
//! with the one the commit waits for, and its answer wakes the leader once more (BENCHMARKS
//! §10: a two-member cluster answered at 78-81 µs p50 where three took 134-160 µs).
//!
//! Safety does not depend on this: raft tolerates any delay of any message. Liveness does,
//! and is kept by the bound: a held append leaves within the delay whatever happens, and at
//! once when the commit is late (it has stood still for a quarter of the delay while records
//! wait for it), so a prompt follower that is descheduled, paused or gone costs about a
//! quarter of the delay; then the held ones have reached the next follower, its answers put it
//! furthest along, and it becomes prompt ([`MajorityFirst::choose`] runs every turn). Order
//! per destination is kept: any other message to a follower with held appends sends those
//! first.
//!
//! Pure: time comes in as an argument (the daemon's CLOCK_BOOTTIME, the simulation's steps).

use raft::eraftpb::{Message, MessageType};

use super::coalesce::coalesce;

/// Appends held for one follower at most; the next one sends them all (they merge into few).
pub const HELD_MESSAGES_MAX: usize = 1024;

/// The appends held for one follower and since when.
struct Held {
    messages: Vec<Message>,
    since_ns: u64,
}

pub struct MajorityFirst {
    /// 0: every append leaves at once (raft's own behaviour).
    delay_ns: u64,
    /// Entry bytes in one merged append at most (`[cluster] append_bytes_max`).
    append_bytes_max: u64,
    /// Followers a majority needs besides the leader: `members / 2`.
    prompt_max: usize,
    /// Ids of the followers that get appends at once (at most `prompt_max`).
    prompt: Vec<u64>,
    /// By member id - 1.
    held: Vec<Held>,
    /// Scratch for `choose` (no allocation per turn).
    ranked: Vec<(u64, u64)>,
    /// Appends held so far (each counted once, however they were merged).
    held_total: u64,
    /// The commit index last observed, and since when records past it have waited without
    /// it moving (`None`: nothing waits) — how late the prompt followers are.
    commit_seen: u64,
    commit_waiting_since_ns: Option<u64>,
}

impl MajorityFirst {
    /// `held_capacity`: appends that may wait for one follower without its list growing
    /// (raft's in-flight window, `appends_in_flight_max`, bounds them in practice).
    pub fn new(
        members: usize,
        delay_ns: u64,
        append_bytes_max: u64,
        held_capacity: usize,
    ) -> MajorityFirst {
        assert!(members >= 1, "a cluster has a member");
        let held_capacity = held_capacity.clamp(1, HELD_MESSAGES_MAX);
        MajorityFirst {
            delay_ns,
            append_bytes_max,
            prompt_max: members / 2,
            prompt: Vec::with_capacity(members),
            held: (0..members)
                .map(|_| Held {
                    messages: Vec::with_capacity(held_capacity),
                    since_ns: 0,
                })
                .collect(),
            ranked: Vec::with_capacity(members),
            held_total: 0,
            commit_seen: 0,
            commit_waiting_since_ns: None,
        }
    }

    /// Off (delay 0): every message leaves at once, and nothing here need run.
    pub fn enabled(&self) -> bool {
        self.delay_ns > 0
    }

    /// Where raft's log stands, every turn before [`Self::release_due`]: the commit index
    /// and the last index. Records past the commit start the lateness clock, which restarts
    /// whenever the commit moves and stops when nothing waits.
    pub fn observe_commit(&mut self, committed: u64, last: u64, now_ns: u64) {
        let moved = committed != self.commit_seen;
        self.commit_seen = committed;
        self.commit_waiting_since_ns = match self.commit_waiting_since_ns {
            _ if last <= committed => None,
            Some(since) if !moved => Some(since),
            _ => Some(now_ns),
        };
    }

    /// Appends held so far.
    pub fn held_total(&self) -> u64 {
        self.held_total
    }

    /// Pick the prompt followers from `(id, matched)` of every follower (a leader's view of
    /// how far each holds the log; empty when not leading): the furthest along, a present
    /// prompt one kept on a tie, then the lowest id.
    pub fn choose(&mut self, followers: &[(u64, u64)]) {
        self.ranked.clear();
        self.ranked.extend_from_slice(followers);
        let prompt = &self.prompt;
        self.ranked.sort_unstable_by_key(|&(id, matched)| {
            (std::cmp::Reverse(matched), !prompt.contains(&id), id)
        });
        self.prompt.clear();
        let chosen = self.ranked.iter().take(self.prompt_max);
        self.prompt.extend(chosen.map(|&(id, _)| id));
    }

    pub fn is_prompt(&self, id: u64) -> bool {
        self.prompt.contains(&id)
    }

    /// Send `message` now or hold it: only appends to followers outside the prompt ones wait.
    pub fn route(&mut self, message: Message, now_ns: u64, send: &mut impl FnMut(Message)) {
        let to = message.to;
        let Some(index) = (to as usize)
            .checked_sub(1)
            .filter(|&i| i < self.held.len())
        else {
            send(message);
            return;
        };
        let holds = self.delay_ns > 0
            && message.get_msg_type() == MessageType::MsgAppend
            && !self.is_prompt(to);
        if !holds {
            // Whatever waited for this follower goes first: its order is kept.
            self.release(index, send);
            send(message);
            return;
        }
        let held = &mut self.held[index];
        if held.messages.is_empty() {
            held.since_ns = now_ns;
        }
        held.messages.push(message);
        self.held_total += 1;
        if held.messages.len() >= HELD_MESSAGES_MAX {
            self.release(index, send);
        }
    }

    /// A quarter of the delay: how long the commit may stand still, with records waiting for
    /// it, before the prompt followers count as late.
    fn stall_ns(&self) -> u64 {
        (self.delay_ns / 4).max(1)
    }

    /// Send what has waited its delay, and everything held once the commit is late: records
    /// have waited (see [`Self::observe_commit`]) a quarter of the delay without the commit
    /// moving — the prompt followers are descheduled, paused or gone, and the held ones may
    /// answer first. Merged: consecutive appends become one message of at most
    /// `append_bytes_max` entry bytes.
    pub fn release_due(&mut self, now_ns: u64, send: &mut impl FnMut(Message)) {
        let stall_ns = self.stall_ns();
        let late = self
            .commit_waiting_since_ns
            .is_some_and(|t| now_ns.saturating_sub(t) >= stall_ns);
        for index in 0..self.held.len() {
            let held = &mut self.held[index];
            let due = late || now_ns.saturating_sub(held.since_ns) >= self.delay_ns;
            if !held.messages.is_empty() && due {
                self.release(index, send);
            }
        }
    }

    fn release(&mut self, index: usize, send: &mut impl FnMut(Message)) {
        let held = &mut self.held[index];
        if held.messages.is_empty() {
            return;
        }
        coalesce(&mut held.messages, self.append_bytes_max);
        for message in held.messages.drain(..) {
            send(message);
        }
    }

    /// When held appends are next due, if any is held (the loop sleeps no longer): the oldest
    /// one's delay, or the commit's lateness.
    pub fn next_due_ns(&self) -> Option<u64> {
        let late_at = self
            .commit_waiting_since_ns
            .map_or(u64::MAX, |t| t.saturating_add(self.stall_ns()));
        self.held
            .iter()
            .filter(|held| !held.messages.is_empty())
            .map(|held| held.since_ns.saturating_add(self.delay_ns).min(late_at))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::Entry;

    fn append(to: u64, index: u64, entries: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = to;
        m.from = 1;
        m.term = 2;
        m.log_term = 2;
        m.index = index;
        m.commit = index;
        for i in 0..entries {
            m.entries.push(Entry {
                term: 2,
                index: index + 1 + i,
                data: vec![7u8; 20].into(),
                ..Default::default()
            });
        }
        m
    }

    fn heartbeat(to: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.to = to;
        m.from = 1;
        m
    }

    fn sent_to(sent: &[Message]) -> Vec<(u64, MessageType, usize)> {
        sent.iter()
            .map(|m| (m.to, m.get_msg_type(), m.entries.len()))
            .collect()
    }

    #[test]
    fn the_follower_furthest_along_gets_appends_at_once_the_other_within_the_delay() {
        let mut mf = MajorityFirst::new(3, 1_000, 1 << 20, 64);
        mf.choose(&[(2, 10), (3, 12)]);
        assert!(mf.is_prompt(3) && !mf.is_prompt(2));
        let mut sent = Vec::new();
        for (i, at) in [(12u64, 100u64), (13, 400), (14, 700)] {
            mf.route(append(3, i, 1), at, &mut |m| sent.push(m));
            mf.route(append(2, i, 1), at, &mut |m| sent.push(m));
        }
        assert_eq!(mf.next_due_ns(), Some(1_100));
        mf.release_due(1_099, &mut |m| sent.push(m));
        assert_eq!(sent_to(&sent), vec![(3, MessageType::MsgAppend, 1); 3]);
        mf.release_due(1_100, &mut |m| sent.push(m));
        // The three held appends continue each other: one message with all three entries.
        assert_eq!(sent.len(), 4);
        assert_eq!(sent_to(&sent[3..]), vec![(2, MessageType::MsgAppend, 3)]);
        assert_eq!(sent[3].index, 12);
        assert_eq!(mf.next_due_ns(), None);
    }

    #[test]
    fn a_late_commit_releases_what_is_held_before_the_delay() {
        let mut mf = MajorityFirst::new(3, 1_000, 1 << 20, 64);
        mf.choose(&[(2, 10), (3, 12)]);
        let mut sent = Vec::new();
        mf.route(append(3, 12, 1), 100, &mut |m| sent.push(m));
        mf.route(append(2, 12, 1), 100, &mut |m| sent.push(m));
        // Nothing waits for the commit: only the delay counts.
        mf.observe_commit(12, 12, 100);
        assert_eq!(mf.next_due_ns(), Some(1_100));
        // Record 13 waits from 100 on: late at 100 + 1_000 / 4, unless the commit moves.
        mf.observe_commit(12, 13, 100);
        assert_eq!(mf.next_due_ns(), Some(350));
        mf.observe_commit(12, 13, 300);
        mf.release_due(349, &mut |m| sent.push(m));
        assert_eq!(sent.len(), 1, "the prompt follower's only");
        mf.observe_commit(13, 14, 340);
        mf.release_due(500, &mut |m| sent.push(m));
        assert_eq!(sent.len(), 1, "the commit moved at 340: late at 590");
        mf.release_due(590, &mut |m| sent.push(m));
        assert_eq!(sent_to(&sent[1..]), vec![(2, MessageType::MsgAppend, 1)]);
    }

    #[test]
    fn another_message_to_a_held_follower_sends_the_held_appends_first() {
        let mut mf = MajorityFirst::new(3, 1_000, 1 << 20, 64);
        mf.choose(&[(2, 5), (3, 9)]);
        let mut sent = Vec::new();
        let mut send = |m: Message| sent.push(m);
        mf.route(append(2, 9, 2), 0, &mut send);
        mf.route(heartbeat(2), 10, &mut send);
        assert_eq!(
            sent_to(&sent),
            vec![
                (2, MessageType::MsgAppend, 2),
                (2, MessageType::MsgHeartbeat, 0)
            ]
        );
        assert_eq!(mf.next_due_ns(), None);
    }

    #[test]
    fn a_held_follower_that_overtakes_becomes_prompt_ties_keep_the_prompt_one() {
        let mut mf = MajorityFirst::new(3, 1_000, 1 << 20, 64);
        mf.choose(&[(2, 7), (3, 7)]);
        assert!(mf.is_prompt(2), "a tie goes to the lowest id first");
        mf.choose(&[(2, 7), (3, 7)]);
        assert!(mf.is_prompt(2));
        // Member 3 got the held appends and answered; member 2 stopped answering.
        mf.choose(&[(2, 7), (3, 9)]);
        assert!(mf.is_prompt(3) && !mf.is_prompt(2));
        mf.choose(&[(2, 9), (3, 9)]);
        assert!(mf.is_prompt(3), "the prompt one keeps its place on a tie");
    }

    #[test]
    fn five_members_have_two_prompt_followers_and_no_delay_holds_nothing() {
        let mut mf = MajorityFirst::new(5, 1_000, 1 << 20, 64);
        mf.choose(&[(2, 3), (3, 8), (4, 8), (5, 1)]);
        assert!(mf.is_prompt(3) && mf.is_prompt(4) && !mf.is_prompt(2) && !mf.is_prompt(5));
        let mut off = MajorityFirst::new(3, 0, 1 << 20, 64);
        off.choose(&[(2, 1), (3, 9)]);
        let mut sent = Vec::new();
        off.route(append(2, 1, 1), 0, &mut |m| sent.push(m));
        assert_eq!(sent.len(), 1);
        assert_eq!(off.next_due_ns(), None);
    }

    #[test]
    fn held_appends_are_bounded() {
        let mut mf = MajorityFirst::new(3, u64::MAX, 1 << 20, 64);
        mf.choose(&[(2, 0), (3, 1)]);
        let mut sent = Vec::new();
        for i in 0..HELD_MESSAGES_MAX as u64 {
            mf.route(append(2, i, 1), 0, &mut |m| sent.push(m));
        }
        assert!(!sent.is_empty(), "the bound sent them");
        assert_eq!(mf.next_due_ns(), None);
    }
}
