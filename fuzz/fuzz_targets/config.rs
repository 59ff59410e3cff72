//! Config parsing on arbitrary text: `Config::parse` returns a config or a one-line error,
//! never panics (nor aborts on an allocation).
#![no_main]

use bourse::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(error) = Config::parse(text, "fuzz.toml") {
        assert!(!error.to_string().contains('\n'), "{error}");
    }
});
