//! Fuzz target `attestation`: see `checks::attestation` for the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::attestation(data));
