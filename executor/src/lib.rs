//! The Wasmtime runtime that runs ari agents.
