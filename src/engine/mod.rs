//! The sharded layout's core (DESIGN.md section 1): the exchange state machine split into a
//! *front* on the sequencer's side, *shards* that own the books of their symbols, and a
//! *merge* that puts the results back in journal-sequence order, assigns the day's order
//! reference and match numbers and formats the OUCH and ITCH messages. Whatever the shard
//! count and timing, the outputs are byte for byte those of `exchange::Exchange::apply`.
//!
//! Who owns what:
//! - [`front::Front`]: market phase, halted flags, every account's used tokens and the symbol
//!   each routes to, all validation that needs no book, the rejects it decides.
//! - [`shard::Shard`]: the books of symbols `s` with `s % shards == index`, live orders by
//!   (account, token), every outcome that needs a book. Orders are named by pool slot.
//! - [`merge::Merge`]: order reference and match numbers, the slot → reference table per
//!   symbol, message formatting, the output order across shards.
//!
//! [`pipeline::Pipeline`] runs the three parts in one thread (tests, benchmarks);
//! [`threaded`] runs them on threads connected by rings.

pub mod front;
pub mod merge;
pub mod msg;
pub mod pipeline;
pub mod shard;
pub mod threaded;

pub use pipeline::Pipeline;
