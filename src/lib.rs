//! bourse: an exchange matching engine daemon.
//!
//! The venue is a pure function of its journal (DESIGN.md section 1): the sequencer stamps
//! every input, and everything after it — books, OUCH replies, ITCH market data — is computed by
//! the deterministic core in [`book`] and [`exchange`], identically in the daemon, in offline
//! replay, in benchmarks and in tests.

pub mod book;
pub mod client;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod days;
pub mod engine;
pub mod exchange;
pub mod gateway;
pub mod guard;
pub mod journal;
pub mod limits;
pub mod marketdata;
pub(crate) mod memory;
pub mod peer_auth;
pub mod replay;
pub mod replication;
pub mod sequencer;
pub mod snapshot;
pub mod stream;
pub mod types;
pub mod wake;
pub mod wire;
pub mod workload;
