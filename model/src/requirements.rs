//! What a Task needs from its Agent, and the one rule for whether that fits the Agent's grants.
//!
//! The operator (before anything runs), the executor (defence in depth) and the Plan validator
//! all judge with [`TaskRequirements::within`], so they judge alike.

use serde::{Deserialize, Serialize};

use crate::capability::CapabilityName;
use crate::grant::GrantSet;
use crate::hosts::HostPattern;

/// What a Task needs from its Agent. Anything beyond the grants fails the Task with
/// `CapabilityDenied` before an instance is created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// A misspelt field in a Plan proposal must be refused, not ignored (the API server prunes
// unknown fields of a Task before anyone decodes it; CRD schemas drop the `false`).
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskRequirements {
    /// Capabilities the task needs granted (each at most once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = CapabilityName::ALL.len())))]
    pub capabilities: Vec<CapabilityName>,
    /// Origins (`scheme://host[:port]`) the task will call; each must be within the network grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 64), inner(length(min = 1, max = 512)))
    )]
    pub hosts: Vec<String>,
    /// Storage the task needs; at most the storage grant's `maxBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub storage_bytes: Option<u64>,
    /// Memory the task needs; at most the Agent's `limits.memoryBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub memory_bytes: Option<u64>,
    /// Signing key id the task needs; must equal the signing grant's `keyId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
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

impl TaskRequirements {
    /// The capabilities needed, sorted and once each: those named, and those that `hosts`
    /// (network), `storageBytes` (storage) and `signingKeyId` (signing) imply.
    pub fn needed(&self) -> Vec<CapabilityName> {
        let implied = [
            (!self.hosts.is_empty(), CapabilityName::Network),
            (self.storage_bytes.is_some(), CapabilityName::Storage),
            (self.signing_key_id.is_some(), CapabilityName::Signing),
        ];
        let mut names = self.capabilities.clone();
        names.extend(implied.into_iter().filter_map(|(n, c)| n.then_some(c)));
        names.sort();
        names.dedup();
        names
    }

    /// Checks these requirements against an Agent's grants and its memory limit (the
    /// `limits.memoryBytes` in effect); the first misfit is the error.
    pub fn within(&self, grants: &GrantSet, memory_limit: u64) -> Result<(), Denied> {
        match self.denials(grants, memory_limit).into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Every way these requirements exceed the grants, in [`Self::within`]'s order: each
    /// capability not granted, then storage, signing key, memory and each host. The Plan
    /// validator lists them all; the operator and executor stop at the first.
    pub fn denials(&self, grants: &GrantSet, memory_limit: u64) -> Vec<Denied> {
        let mut out: Vec<Denied> = self
            .needed()
            .into_iter()
            .filter(|c| !grants.grants(*c))
            .map(Denied::NotGranted)
            .collect();
        if let (Some(wanted), Some(storage)) = (self.storage_bytes, &grants.storage)
            && wanted > storage.max_bytes
        {
            out.push(Denied::StorageTooLarge {
                wanted,
                granted: storage.max_bytes,
            });
        }
        if let (Some(wanted), Some(signing)) = (&self.signing_key_id, &grants.signing)
            && *wanted != signing.key_id
        {
            out.push(Denied::SigningKeyMismatch {
                wanted: wanted.clone(),
                granted: signing.key_id.clone(),
            });
        }
        if let Some(wanted) = self.memory_bytes
            && wanted > memory_limit
        {
            out.push(Denied::MemoryTooLarge {
                wanted,
                limit: memory_limit,
            });
        }
        if let Some(network) = &grants.network {
            out.extend(self.host_denials(&network.allowed_hosts));
        }
        out
    }

    /// Each required host that is no origin or that no entry of `allowed` covers.
    fn host_denials(&self, allowed: &[String]) -> Vec<Denied> {
        let granted: Vec<HostPattern> = allowed
            .iter()
            .filter_map(|h| HostPattern::parse(h).ok())
            .collect();
        self.hosts
            .iter()
            .filter_map(|host| match HostPattern::parse(host) {
                Err(e) => Some(Denied::BadHost {
                    host: host.clone(),
                    reason: e.to_string(),
                }),
                Ok(wanted) if !granted.iter().any(|g| g.covers(&wanted)) => {
                    Some(Denied::HostNotAllowed { host: host.clone() })
                }
                Ok(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::{DelegationGrant, EmptyGrant, NetworkGrant, StorageGrant};

    const MEMORY: u64 = 1 << 20;

    fn granted() -> GrantSet {
        GrantSet {
            storage: Some(StorageGrant { max_bytes: 100 }),
            network: Some(NetworkGrant {
                allowed_hosts: vec!["https://*.example.com".into()],
                approval: None,
            }),
            randomness: Some(EmptyGrant {}),
            ..Default::default()
        }
    }

    #[test]
    fn hosts_storage_and_keys_imply_their_capability() {
        // (requirements, needed)
        let table = [
            (TaskRequirements::default(), vec![]),
            (
                TaskRequirements {
                    hosts: vec!["https://a.example".into()],
                    ..Default::default()
                },
                vec![CapabilityName::Network],
            ),
            (
                TaskRequirements {
                    capabilities: vec![CapabilityName::Storage, CapabilityName::Randomness],
                    storage_bytes: Some(1),
                    signing_key_id: Some("k".into()),
                    ..Default::default()
                },
                vec![
                    CapabilityName::Storage,
                    CapabilityName::Randomness,
                    CapabilityName::Signing,
                ],
            ),
            (
                TaskRequirements {
                    memory_bytes: Some(1),
                    ..Default::default()
                },
                vec![],
            ),
        ];
        for (req, want) in table {
            assert_eq!(req.needed(), want, "{req:?}");
        }
    }

    #[test]
    fn requirements_within_grants_are_admitted() {
        let req = TaskRequirements {
            capabilities: vec![CapabilityName::Randomness],
            hosts: vec!["https://api.example.com".into()],
            storage_bytes: Some(100),
            memory_bytes: Some(MEMORY),
            signing_key_id: None,
        };
        assert_eq!(req.within(&granted(), MEMORY), Ok(()));
        assert_eq!(
            TaskRequirements::default().within(&GrantSet::default(), MEMORY),
            Ok(())
        );
        let delegation = TaskRequirements {
            capabilities: vec![CapabilityName::Delegation],
            ..Default::default()
        };
        let mut grants = granted();
        assert_eq!(
            delegation.within(&grants, MEMORY),
            Err(Denied::NotGranted(CapabilityName::Delegation))
        );
        grants.delegation = Some(DelegationGrant {
            agents: vec!["wordcount".into()],
            ..Default::default()
        });
        assert_eq!(delegation.within(&grants, MEMORY), Ok(()));
    }

    #[test]
    fn requirements_beyond_grants_are_denied() {
        let need = |r: TaskRequirements| r.within(&granted(), MEMORY);
        let table = [
            (
                TaskRequirements {
                    capabilities: vec![CapabilityName::TimeAccess],
                    ..Default::default()
                },
                Denied::NotGranted(CapabilityName::TimeAccess),
            ),
            (
                TaskRequirements {
                    signing_key_id: Some("k".into()),
                    ..Default::default()
                },
                Denied::NotGranted(CapabilityName::Signing),
            ),
            (
                TaskRequirements {
                    hosts: vec!["https://example.org".into()],
                    ..Default::default()
                },
                Denied::HostNotAllowed {
                    host: "https://example.org".into(),
                },
            ),
            (
                TaskRequirements {
                    storage_bytes: Some(101),
                    ..Default::default()
                },
                Denied::StorageTooLarge {
                    wanted: 101,
                    granted: 100,
                },
            ),
            (
                TaskRequirements {
                    memory_bytes: Some(MEMORY + 1),
                    ..Default::default()
                },
                Denied::MemoryTooLarge {
                    wanted: MEMORY + 1,
                    limit: MEMORY,
                },
            ),
        ];
        for (req, want) in table {
            assert_eq!(need(req.clone()), Err(want), "{req:?}");
        }
        assert!(matches!(
            need(TaskRequirements {
                hosts: vec!["example.org".into()],
                ..Default::default()
            }),
            Err(Denied::BadHost { .. })
        ));
        // Hosts without any network grant are denied by name, not by host.
        assert_eq!(
            TaskRequirements {
                hosts: vec!["https://api.example.com".into()],
                ..Default::default()
            }
            .within(&GrantSet::default(), MEMORY),
            Err(Denied::NotGranted(CapabilityName::Network))
        );
    }

    #[test]
    fn denials_list_every_misfit_not_only_the_first() {
        let mut grants = granted();
        grants.network = Some(NetworkGrant {
            allowed_hosts: vec!["https://a.example".into()],
            approval: None,
        });
        let req = TaskRequirements {
            capabilities: vec![CapabilityName::TimeAccess],
            hosts: vec!["https://b.example".into(), "b.example".into()],
            storage_bytes: Some(101),
            memory_bytes: Some(MEMORY + 1),
            signing_key_id: None,
        };
        let d = req.denials(&grants, MEMORY);
        assert_eq!(d.len(), 5, "{d:#?}");
        assert_eq!(d[0], Denied::NotGranted(CapabilityName::TimeAccess));
        assert!(matches!(d[1], Denied::StorageTooLarge { .. }));
        assert!(matches!(d[2], Denied::MemoryTooLarge { .. }));
        assert!(matches!(&d[3], Denied::HostNotAllowed { host } if host == "https://b.example"));
        assert!(matches!(d[4], Denied::BadHost { .. }));
        assert_eq!(req.within(&grants, MEMORY), Err(d[0].clone()));
    }
}
