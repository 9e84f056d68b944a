//! Fuzz target `allowlist`: see `checks::allowlist` for the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::allowlist(data));
