//! The exchange state machine (pure, no I/O, no threads, no clock): `apply(input) -> outputs`.
//!
//! It owns the books, the per-account token tables, validation with its reject codes, the
//! numbering rules of DESIGN.md section 3 and the exact OUCH 4.2 and ITCH 5.0 messages each
//! input produces (sections 4 and 5). It is written once, as three stages:
//!
//! - [`Front`] (no book): market phase, halts, every account's tokens, the checks that need
//!   no book, routing to the shard of the symbol.
//! - [`Shard`]: the books of its symbols and every outcome that needs a book.
//! - [`Merge`]: order reference and match numbers, message formatting, output order.
//!
//! Composed inline with one shard they are [`Exchange`] (the compact layout, `bourse replay`,
//! benchmarks); with several shards in one thread they are [`Split`] (tests, recovery of a
//! sharded daemon); on threads and rings they are `crate::engine` (the sharded layout).
//! Whatever the shard count and timing, the outputs are byte for byte the same.

mod digest;
pub mod front;
mod input;
mod machine;
pub mod merge;
pub(crate) mod messages;
pub mod msg;
pub mod shard;
mod sink;
mod slots;
mod split;
pub(crate) mod state;
mod tokens;
pub(crate) mod validate;
pub(crate) mod venue;

pub use digest::StateDigest;
pub use front::{Front, FrontLink};
pub use input::{Admin, Command, Input, Outcome};
pub use machine::Exchange;
pub use merge::Merge;
pub use msg::Marker;
pub use shard::{Shard, ShardOut};
pub use sink::{Discard, Output, Recorder, Sink};
pub use split::Split;
pub use state::{LentState, StateError};
pub use venue::{AccountDef, Limits, Stp, SymbolDef, Venue, VenueError};

#[cfg(test)]
mod tests;
