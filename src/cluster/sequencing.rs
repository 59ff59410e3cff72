//! A cluster member as the sequencer's log: the leader's `append` is a raft proposal (journaled
//! at once, committed once a quorum has it), and outputs leave by the release gate.

use super::node::{ClusterNode, ProposeError, Role};
use crate::sequencer::{Sequencing, SequencingError};
use crate::types::Timestamp;

/// Room kept under raft's uncommitted bound for the largest proposal the venue makes (an OUCH
/// input is under 100 bytes; a start of day carries the venue definition).
const PROPOSAL_BYTES_MAX: u64 = 1 << 20;

impl Sequencing for ClusterNode {
    fn append(
        &mut self,
        timestamp: Timestamp,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64, SequencingError> {
        self.propose(timestamp, kind, payload).map_err(|e| match e {
            ProposeError::NotLeader => SequencingError::Refused("this member does not lead"),
            ProposeError::CatchingUp => {
                SequencingError::Refused("the new leader is still applying earlier records")
            }
            ProposeError::Dropped => SequencingError::Refused("too many uncommitted records"),
            ProposeError::Storage(e) => SequencingError::Failed(e.to_string()),
        })
    }

    /// The journal's group commit: a store in `quorum` mode (the daemon msyncs in the
    /// background).
    fn flush(&mut self) -> Result<(), String> {
        ClusterNode::flush(self).map_err(|e| e.to_string())
    }

    /// The leader: up to the release gate (committed, applied, under its lease); none without
    /// a lease. Anyone else releases what it applied (committed records) into its own streams,
    /// which serve nobody until it leads.
    fn releasable(&self) -> Option<u64> {
        match self.role() {
            Role::Leader { .. } => self.release_gate(),
            Role::Follower { .. } | Role::Candidate { .. } => {
                Some(self.committed_seq().min(self.applied_seq()))
            }
        }
    }

    /// The last record handed to the state machine (proposals and committed records).
    fn last_seq(&self) -> u64 {
        self.applied_seq()
    }

    fn day_epoch_unix_ns(&self) -> u64 {
        ClusterNode::day_epoch_unix_ns(self)
    }

    fn last_timestamp(&self) -> Timestamp {
        let last = ClusterNode::last_seq(self);
        self.storage()
            .record_timestamp(last)
            .unwrap_or(Timestamp(0))
    }

    fn accepts_input(&self) -> bool {
        self.room_for_proposal(PROPOSAL_BYTES_MAX)
    }

    fn cluster(&self) -> Option<&ClusterNode> {
        Some(self)
    }

    fn cluster_mut(&mut self) -> Option<&mut ClusterNode> {
        Some(self)
    }
}
