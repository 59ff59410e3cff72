//! Inputs of the state machine: what the sequencer journals, already decoded.

use crate::types::{AccountId, Locate, Timestamp};
use crate::wire::ouch::Inbound;

/// Operator commands, journaled like any other input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Admin {
    Halt(Locate),
    Resume(Locate),
    EndOfDay,
    /// Kill switch: cancel the account's resting orders (reason `S`), in one symbol or all.
    CancelAll {
        account: AccountId,
        symbol: Option<Locate>,
    },
    /// From now on the account's Enter and Replace are rejected `a`; cancels still work.
    Block(AccountId),
    Unblock(AccountId),
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
    /// A logged-in session of the account lost its connection other than by Logout Request:
    /// with `cancel_on_disconnect` its resting orders are canceled (reason `Z`).
    Disconnect {
        account: AccountId,
    },
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
