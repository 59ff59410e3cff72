//! The exchange state machine (pure, single-threaded): `apply(input) -> outputs`.
//!
//! This is the reference path: `bourse replay` runs it over a journal, and the multi-threaded
//! daemon must reproduce its outputs byte for byte. It owns the books, the per-account token
//! tables, validation with its reject codes, the numbering rules of DESIGN.md section 3 and
//! the exact OUCH 4.2 and ITCH 5.0 messages each input produces (section 4 and 5).

mod digest;
mod input;
mod machine;
pub(crate) mod messages;
mod sink;
mod tokens;
pub(crate) mod validate;
pub(crate) mod venue;

pub use digest::StateDigest;
pub use input::{Admin, Command, Input, Outcome};
pub use machine::Exchange;
pub use sink::{Discard, Output, Recorder, Sink};
pub use venue::{AccountDef, Limits, SymbolDef, Venue, VenueError};

#[cfg(test)]
mod tests;
