//! Where the state machine's outputs go: typed OUCH messages per account and ITCH messages,
//! in the order they are produced.

use super::msg::Marker;
use crate::types::AccountId;
use crate::wire::{itch, ouch};

pub trait Sink {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound);
    fn itch(&mut self, message: &itch::Message);
    /// The messages of GLIMPSE snapshot `id` in order; `None` ends it.
    fn snapshot(&mut self, _id: u64, _message: Option<&itch::Message>) {}
    /// A point between inputs in the output sequence (batch boundaries, releases).
    fn marker(&mut self, _marker: Marker) {}
}

/// One output, for sinks that record them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Output {
    Ouch(AccountId, ouch::Outbound),
    Itch(itch::Message),
}

/// Records every output in order (tests, replay tools). Allocates: not for the hot path.
#[derive(Default, Debug)]
pub struct Recorder {
    pub outputs: Vec<Output>,
}

impl Recorder {
    pub fn take(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }
}

impl Sink for Recorder {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        self.outputs.push(Output::Ouch(account, *message));
    }
    fn itch(&mut self, message: &itch::Message) {
        self.outputs.push(Output::Itch(*message));
    }
}

/// Discards everything (benchmarks of the core alone).
#[derive(Default, Debug)]
pub struct Discard {
    pub ouch_count: u64,
    pub itch_count: u64,
}

impl Sink for Discard {
    fn ouch(&mut self, _: AccountId, _: &ouch::Outbound) {
        self.ouch_count += 1;
    }
    fn itch(&mut self, _: &itch::Message) {
        self.itch_count += 1;
    }
}
