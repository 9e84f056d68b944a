//! Guest SDK for writing ari agents in Rust.
