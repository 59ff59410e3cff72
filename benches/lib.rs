//! Bench-only crate: see benches/*.rs.
