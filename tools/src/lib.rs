//! bourse-tools: the programs people around a venue point at it. Each binary in `src/bin`.

pub mod samples;
pub mod show;
