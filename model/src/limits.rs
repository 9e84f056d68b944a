//! The limits and grants a run was really held to.

use serde::{Deserialize, Serialize};

use crate::capability::CapabilityName;

/// The limits and capabilities really enforced for a run: `Task.status.limitsApplied`, signed in
/// the attestation, and everything a replay needs to run under the same bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LimitsApplied {
    pub fuel: u64,
    pub memory_bytes: u64,
    pub timeout_millis: u64,
    pub max_output_bytes: u64,
    pub max_input_bytes: u64,
    /// Granted capabilities, sorted.
    #[serde(default)]
    pub capabilities: Vec<CapabilityName>,
    /// The storage quota, when `storage` is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_max_bytes: Option<u64>,
    /// The network allow-list, when `network` is granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// The delegation grant and where the task sat in its tree, when `delegation` is granted
    /// (a replay refuses the same calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<DelegationApplied>,
}

/// The delegation grant a run was held to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DelegationApplied {
    /// Agents it could call (`*`: any).
    pub agents: Vec<String>,
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub max_depth: u32,
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub max_children: u32,
    /// The task's own depth (a root task is 0).
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub depth: u32,
}

/// Depth of a delegation tree when the grant does not say (the root is depth 0). One figure
/// for the CRD's defaults (`ari-crds`) and the runtime's grant.
pub const DEFAULT_MAX_DEPTH: u32 = 3;
/// Children (awaited or messages) one task may start when the grant does not say.
pub const DEFAULT_MAX_CHILDREN: u32 = 16;

/// Whether a delegation grant listing `granted` Agents lets a task call `agent`: it is named,
/// or `*` was granted. One rule for the runtime's grant and the executor's check of a child.
pub fn delegation_allows(granted: &[String], agent: &str) -> bool {
    granted.iter().any(|a| a == agent || a == "*")
}
