//! Hot standby: the primary streams its journal to standbys, which journal and apply every
//! record as it arrives and take over when the primary is gone (DESIGN.md 6, issue 7).

pub mod primary;
pub mod protocol;
pub mod standby;
