//! bourse-tools: the programs people around a venue point at it. Each binary in `src/bin`;
//! the logic lives here so that tests can drive it.

pub mod echo;
pub mod feed;
pub mod latency;
pub mod loadgen;
pub mod samples;
pub mod script;
pub mod show;
