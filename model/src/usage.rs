//! What a run used, measured by the host (never taken from the guest's own claims).

use serde::{Deserialize, Serialize};

/// Resources a run used; `Task.status.resourcesUsed` and part of the attestation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourcesUsed {
    /// Fuel consumed: Wasm instructions plus host-call charges (deterministic).
    pub fuel: u64,
    /// CPU time of the thread that ran the task (instantiate + calls + host work).
    pub cpu_millis: u64,
    /// Peak total linear memory of the instance.
    pub memory_bytes: u64,
    /// Storage bytes written (committed) by the task.
    pub storage_bytes: u64,
    /// HTTP bytes sent plus received.
    pub network_bytes: u64,
    /// Wall-clock time from accepting the task to its outcome.
    pub wall_millis: u64,
    /// The part of `fuel` the task's children (delegated tasks and messages) took out of its
    /// budget; the task's own work is `fuel - childrenFuel`. Absent when it delegated nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub children_fuel: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the agent itself expects a task to need (its `estimate` export), in the units the
/// executor limits. Recorded in `Task.status.estimate` next to what was measured; never
/// enforced, never trusted: a planner may read it, the limits still decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub fuel: u64,
    pub duration_millis: u64,
    pub memory_bytes: u64,
}
