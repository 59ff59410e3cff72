//! Not the bench crate's library (that is `src/lib.rs`, see `Cargo.toml`): the root package
//! `bourse` auto-discovers every `benches/*.rs` as one of its own bench targets, so this file
//! must stay free of the peers' dependencies. (`autobenches = false` in the root manifest
//! would retire it.)
