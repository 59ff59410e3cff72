//! Inputs of the state machine: what the sequencer journals, already decoded.

use crate::types::{AccountId, Locate, Timestamp};
use crate::wire::ouch::Inbound;

/// Operator commands, journaled like any other input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Admin {
    Halt(Locate),
    Resume(Locate),
    EndOfDay,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Command {
    /// The first input of every journal: opens the day.
    StartOfDay,
    /// One OUCH message from a logged-in account, exactly as received.
    Ouch {
        account: AccountId,
        message: Inbound,
    },
    Admin(Admin),
    /// Time passes: expire orders whose time in force has run out by the timestamp.
    Tick,
}

/// One sequenced input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Input {
    /// Journal sequence number (gapless from 1).
    pub seq: u64,
    /// The sequencer's stamp: ns since midnight UTC of the journal's day.
    pub timestamp: Timestamp,
    pub command: Command,
}

/// What applying one input did, for the caller's bookkeeping (outputs go to the sink).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    Applied,
    /// Silently ignored by the rules (duplicate token, unknown cancel, Modify, ...).
    Ignored(&'static str),
    /// An admin command that could not be carried out; nothing was output.
    AdminRefused(&'static str),
}
