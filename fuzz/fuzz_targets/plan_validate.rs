//! Fuzz target `plan_validate`: see `plan_checks::plan_validate` for the properties.
#![no_main]

#[path = "../plan_checks.rs"]
mod plan_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| plan_checks::plan_validate(data));
