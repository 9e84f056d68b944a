//! Capability names, Task requirements and the check that requirements fit an Agent's grants.
//!
//! Both the operator (before anything runs) and the executor (defence in depth) call
//! [`requirements_within_grants`], so the rule lives once, next to the types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent::AgentSpec;
use ari_model::hosts::{HostPattern, pattern_covers};

pub use ari_model::CapabilityName;

/// What a Task needs from its Agent. Anything beyond the grants fails the Task with
/// `CapabilityDenied` before an instance is created.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskRequirements {
    /// Capabilities the task needs granted (each at most once: there are six).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 6))]
    pub capabilities: Vec<CapabilityName>,
    /// Origins (`scheme://host[:port]`) the task will call; each must be within the network grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 512)))]
    pub hosts: Vec<String>,
    /// Storage the task needs; at most the storage grant's `maxBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub storage_bytes: Option<u64>,
    /// Memory the task needs; at most the Agent's `limits.memoryBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// Signing key id the task needs; must equal the signing grant's `keyId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub signing_key_id: Option<String>,
}

/// Why a Task's requirements do not fit its Agent (goes into `status.message`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("capability {0} is required but not granted to the agent")]
    NotGranted(CapabilityName),
    #[error("host {host} is not within the agent's network.allowedHosts")]
    HostNotAllowed { host: String },
    #[error("required host {host} is not a valid origin: {reason}")]
    BadHost { host: String, reason: String },
    #[error("storageBytes {wanted} exceeds the agent's storage.maxBytes {granted}")]
    StorageTooLarge { wanted: u64, granted: u64 },
    #[error("memoryBytes {wanted} exceeds the agent's limits.memoryBytes {limit}")]
    MemoryTooLarge { wanted: u64, limit: u64 },
    #[error("signing key {wanted} is not the agent's signing.keyId {granted}")]
    SigningKeyMismatch { wanted: String, granted: String },
    #[error("fuel {wanted} exceeds the agent's limits.fuel {limit}")]
    FuelTooLarge { wanted: u64, limit: u64 },
}

/// Checks a Task's requirements against an Agent's grants and limits.
///
/// Needing `hosts`, `storageBytes` or `signingKeyId` implies needing the capability itself.
pub fn requirements_within_grants(req: &TaskRequirements, agent: &AgentSpec) -> Result<(), Denied> {
    let grants = agent.grant_names();
    let mut needed: Vec<CapabilityName> = req.capabilities.clone();
    if !req.hosts.is_empty() {
        needed.push(CapabilityName::Network);
    }
    if req.storage_bytes.is_some() {
        needed.push(CapabilityName::Storage);
    }
    if req.signing_key_id.is_some() {
        needed.push(CapabilityName::Signing);
    }
    if let Some(missing) = needed.into_iter().find(|c| !grants.contains(c)) {
        return Err(Denied::NotGranted(missing));
    }
    let caps = &agent.capabilities;
    if let (Some(wanted), Some(storage)) = (req.storage_bytes, &caps.storage)
        && wanted > storage.max_bytes
    {
        return Err(Denied::StorageTooLarge {
            wanted,
            granted: storage.max_bytes,
        });
    }
    if let (Some(wanted), Some(signing)) = (&req.signing_key_id, &caps.signing)
        && *wanted != signing.key_id
    {
        return Err(Denied::SigningKeyMismatch {
            wanted: wanted.clone(),
            granted: signing.key_id.clone(),
        });
    }
    if let Some(wanted) = req.memory_bytes {
        let limit = agent.limits.effective().memory_bytes;
        if wanted > limit {
            return Err(Denied::MemoryTooLarge { wanted, limit });
        }
    }
    if let Some(network) = &caps.network {
        let grants: Vec<HostPattern> = network
            .allowed_hosts
            .iter()
            .filter_map(|h| HostPattern::parse(h).ok())
            .collect();
        for host in &req.hosts {
            let wanted = HostPattern::parse(host).map_err(|e| Denied::BadHost {
                host: host.clone(),
                reason: e.to_string(),
            })?;
            if !grants.iter().any(|g| pattern_covers(g, &wanted)) {
                return Err(Denied::HostNotAllowed { host: host.clone() });
            }
        }
    }
    Ok(())
}

/// Checks a Task's fuel budget against the Agent's limit (the budget may only lower it).
pub fn fuel_within_limit(task_fuel: Option<u64>, agent: &AgentSpec) -> Result<u64, Denied> {
    let limit = agent.limits.effective().fuel;
    match task_fuel {
        Some(wanted) if wanted > limit => Err(Denied::FuelTooLarge { wanted, limit }),
        Some(wanted) => Ok(wanted),
        None => Ok(limit),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_task_requiring_delegation_is_admitted_where_delegation_is_granted() {
        let mut spec = granted();
        let req = TaskRequirements {
            capabilities: vec![CapabilityName::Delegation],
            ..Default::default()
        };
        assert_eq!(
            requirements_within_grants(&req, &spec),
            Err(Denied::NotGranted(CapabilityName::Delegation))
        );
        spec.capabilities.delegation = Some(crate::agent::DelegationCapability {
            agents: vec!["wordcount".into()],
            max_depth: None,
            max_children: None,
        });
        assert_eq!(requirements_within_grants(&req, &spec), Ok(()));
    }

    use super::*;
    use crate::agent::{
        Capabilities, ConfigMapModule, EmptyCapability, Limits, ModuleSource, NetworkCapability,
        StorageCapability,
    };

    fn agent(caps: Capabilities) -> AgentSpec {
        AgentSpec {
            module: ModuleSource {
                config_map: Some(ConfigMapModule {
                    name: "m".into(),
                    key: "k".into(),
                }),
                ..Default::default()
            },
            capabilities: caps,
            limits: Limits {
                fuel: Some(1_000),
                memory_bytes: Some(1 << 20),
                ..Default::default()
            },
            executor: Default::default(),
            description: None,
            mode: None,
            callers: None,
            config: None,
            a2a: None,
        }
    }

    fn granted() -> AgentSpec {
        agent(Capabilities {
            storage: Some(StorageCapability { max_bytes: 100 }),
            network: Some(NetworkCapability {
                allowed_hosts: vec!["https://*.example.com".into()],
            }),
            randomness: Some(EmptyCapability {}),
            ..Default::default()
        })
    }

    #[test]
    fn grant_names_lists_only_present_capabilities() {
        let names: Vec<_> = granted().grant_names().into_iter().collect();
        assert_eq!(
            names,
            [
                CapabilityName::Storage,
                CapabilityName::Network,
                CapabilityName::Randomness
            ]
        );
        assert!(agent(Capabilities::default()).grant_names().is_empty());
    }

    #[test]
    fn requirements_within_grants_accepts_what_is_granted() {
        let req = TaskRequirements {
            capabilities: vec![CapabilityName::Randomness],
            hosts: vec!["https://api.example.com".into()],
            storage_bytes: Some(100),
            memory_bytes: Some(1 << 20),
            signing_key_id: None,
        };
        assert_eq!(requirements_within_grants(&req, &granted()), Ok(()));
        assert_eq!(
            requirements_within_grants(
                &TaskRequirements::default(),
                &agent(Capabilities::default())
            ),
            Ok(())
        );
    }

    #[test]
    fn requirements_beyond_grants_are_denied() {
        let a = granted();
        let need = |r: TaskRequirements| requirements_within_grants(&r, &a);
        assert_eq!(
            need(TaskRequirements {
                capabilities: vec![CapabilityName::TimeAccess],
                ..Default::default()
            }),
            Err(Denied::NotGranted(CapabilityName::TimeAccess))
        );
        assert_eq!(
            need(TaskRequirements {
                signing_key_id: Some("k".into()),
                ..Default::default()
            }),
            Err(Denied::NotGranted(CapabilityName::Signing))
        );
        assert_eq!(
            need(TaskRequirements {
                hosts: vec!["https://example.org".into()],
                ..Default::default()
            }),
            Err(Denied::HostNotAllowed {
                host: "https://example.org".into()
            })
        );
        assert!(matches!(
            need(TaskRequirements {
                hosts: vec!["example.org".into()],
                ..Default::default()
            }),
            Err(Denied::BadHost { .. })
        ));
        assert_eq!(
            need(TaskRequirements {
                storage_bytes: Some(101),
                ..Default::default()
            }),
            Err(Denied::StorageTooLarge {
                wanted: 101,
                granted: 100
            })
        );
        assert_eq!(
            need(TaskRequirements {
                memory_bytes: Some((1 << 20) + 1),
                ..Default::default()
            }),
            Err(Denied::MemoryTooLarge {
                wanted: (1 << 20) + 1,
                limit: 1 << 20
            })
        );
        // Hosts without any network grant are denied by name, not by host.
        let none = agent(Capabilities::default());
        assert_eq!(
            requirements_within_grants(
                &TaskRequirements {
                    hosts: vec!["https://api.example.com".into()],
                    ..Default::default()
                },
                &none
            ),
            Err(Denied::NotGranted(CapabilityName::Network))
        );
    }

    #[test]
    fn fuel_budget_may_only_lower_the_limit() {
        let a = granted();
        assert_eq!(fuel_within_limit(None, &a), Ok(1_000));
        assert_eq!(fuel_within_limit(Some(10), &a), Ok(10));
        assert_eq!(
            fuel_within_limit(Some(1_001), &a),
            Err(Denied::FuelTooLarge {
                wanted: 1_001,
                limit: 1_000
            })
        );
    }
}
