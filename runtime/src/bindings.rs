//! Host-side types generated from `wit/ari.wit` (world `ari-agent`).
//!
//! Only the types and the `agent` export are used: the `host` imports are registered by hand in
//! [`crate::host`] so that each call can reach the `Store` and charge fuel.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "ari-agent",
});

/// The `conversation` interface's records.
pub use ainur::ari::conversation;
pub use ainur::ari::host::{HttpHeader, IncomingResponse, LogLevel, OutgoingRequest};
/// The `model` interface's records, which its capability converts.
pub use ainur::ari::model;
/// The `tools` interface's records, which its capability converts.
pub use ainur::ari::tools;
pub use ainur::ari::types::{
    ChildBudget, ChildFailure, DelegationError, ErrorCode, Estimation, HashAlgorithm, HttpError,
    StorageError,
};
pub use exports::ainur::ari::agent::{ExecutionResult, ResourceUsage, TaskSpec};

/// The fully qualified name of the interface every agent must export.
pub const AGENT_EXPORT: &str = "ainur:ari/agent@2.0.0";
/// The fully qualified name of the host interface agents import.
pub const HOST_IMPORT: &str = "ainur:ari/host@2.0.0";
