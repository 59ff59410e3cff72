//! The cluster: N members replicate the journal through raft (TiKV's raft-rs) so that a
//! journal record is *committed* once a quorum holds it, exactly one member leads (sequences,
//! serves brokers, publishes) and a successor is elected when it fails (issue 11).
//!
//! - [`storage`]: raft-rs's `Storage` on our journal (raft index = journal sequence number).
//! - [`state`]: the term runs and raft's hard state, beside the journal.
//! - [`node`]: the member a daemon loop drives from its one thread: `propose`, `tick`, `step`,
//!   `poll`, and the release gate (leader of the current term holding a lease).
//! - [`transport`]: authenticated TCP between members.
//! - [`majority_first`]: a leader's appends go at once to the followers a majority needs, the
//!   others' are held briefly and merged.
//!
//! A venue without a `[cluster]` section, or with a cluster of one member, runs without raft
//! exactly as before: its journal is byte-identical to a single node's.

pub mod coalesce;
pub mod config;
pub mod majority_first;
pub mod node;
pub mod sequencing;
pub mod state;
pub mod storage;
pub mod transport;

#[cfg(test)]
mod loopback_tests;
#[cfg(test)]
mod sim;
