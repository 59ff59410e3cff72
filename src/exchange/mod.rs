//! Exchange state machine (pure).
