//! Cross-module wire tests: round trips, golden vectors, real Nasdaq bytes, independent
//! decoders (itchy, itch5, tshark) and bounded fuzzing.

mod arb;
mod fuzz;
mod golden;
mod independent;
mod real_data;
mod roundtrip;
mod tshark;

/// Directory of the shared fixtures (`shared/` sits beside the clone, here and in CI).
pub fn shared_data(file: &str) -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")).join(file)
}

/// Case count of the fuzz properties: `BOURSE_WIRE_FUZZ_CASES`, default bounded so the whole
/// wire test run stays well under 30 s in debug.
pub fn fuzz_cases() -> u32 {
    std::env::var("BOURSE_WIRE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_096)
}

/// Case count of the round-trip properties (`BOURSE_WIRE_ROUNDTRIP_CASES`, default 512).
pub fn roundtrip_cases() -> u32 {
    std::env::var("BOURSE_WIRE_ROUNDTRIP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}
