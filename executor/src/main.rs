//! `ari`: run, verify and inspect agent components.
fn main() {}
