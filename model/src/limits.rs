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
}
