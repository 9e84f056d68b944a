//! Fuzz target `host_pattern`: see `host_checks::host_pattern` for the properties.
#![no_main]

#[path = "../host_checks.rs"]
mod host_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| host_checks::host_pattern(data));
