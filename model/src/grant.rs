//! What an Agent is granted: each capability's grant and the set of them, as a user writes them
//! in the Agent's `spec.capabilities`. The CRDs (`ari-crds`) embed these types, the executor
//! builds its runtime grants from them, and `limitsApplied` records what they resolved to.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::capability::CapabilityName;
use crate::hosts::{AllowList, BadEntry};
use crate::limits::{DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH, delegation_allows};

/// No delegation grant can raise the depth past this: every level holds a waiting parent.
pub const MAX_DEPTH_CEILING: u32 = 16;
/// No delegation grant can raise one task's children past this.
pub const MAX_CHILDREN_CEILING: u32 = 1024;

/// Capabilities granted to the agent. Deny by default: an absent field is not granted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GrantSet {
    /// Key-value storage, transactional per task, with a quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageGrant>,
    /// Outbound HTTP to an allow-list of origins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkGrant>,
    /// Random bytes (from the task's seeded PRNG, so runs replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomness: Option<EmptyGrant>,
    /// Signing with a key held in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<SigningGrant>,
    /// Access to the task's logical clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_access: Option<EmptyGrant>,
    /// Running tasks on other Agents of the namespace, out of the task's own budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<DelegationGrant>,
}

impl GrantSet {
    /// Whether `capability` is granted.
    pub fn grants(&self, capability: CapabilityName) -> bool {
        match capability {
            CapabilityName::Storage => self.storage.is_some(),
            CapabilityName::Network => self.network.is_some(),
            CapabilityName::Randomness => self.randomness.is_some(),
            CapabilityName::Signing => self.signing.is_some(),
            CapabilityName::TimeAccess => self.time_access.is_some(),
            CapabilityName::Delegation => self.delegation.is_some(),
        }
    }

    /// The names of the granted capabilities, in [`CapabilityName::ALL`] order.
    pub fn names(&self) -> BTreeSet<CapabilityName> {
        CapabilityName::ALL
            .into_iter()
            .filter(|c| self.grants(*c))
            .collect()
    }
}

/// A capability with no settings; its presence is the grant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmptyGrant {}

/// Storage grant.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StorageGrant {
    /// Quota on committed bytes (keys plus values).
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub max_bytes: u64,
}

/// Network grant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkGrant {
    /// Spin-style origins `scheme://host[:port]`; `*` allowed as the leftmost label only.
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 64), inner(length(min = 1, max = 512)))
    )]
    pub allowed_hosts: Vec<String>,
}

impl NetworkGrant {
    /// The entries parsed (see [`crate::hosts`]); the first bad one is the error.
    pub fn allow_list(&self) -> Result<AllowList, BadEntry> {
        AllowList::parse(&self.allowed_hosts)
    }
}

/// Signing grant: the key the guest may sign with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SigningGrant {
    /// The key's name: a Task that needs this key names it in `requirements.signingKeyId`
    /// (the guest's `sign` always uses the Agent's one key).
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub key_id: String,
    /// Secret (same namespace) and key holding the signing key.
    pub secret_ref: SecretKeyRef,
}

/// A key in a Secret of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub key: String,
}

/// Delegation grant: which Agents a task may call, how deep and how many.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DelegationGrant {
    /// Agent names in the same namespace; `*` (written deliberately) allows any.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 64),
            inner(regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$"))
        )
    )]
    pub agents: Vec<String>,
    /// How deep a delegation tree under a root task may grow (the root is 0). Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_DEPTH_CEILING)))]
    pub max_depth: Option<u32>,
    /// Children (messages included) one task may start. Default 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_CHILDREN_CEILING)))]
    pub max_children: Option<u32>,
}

impl DelegationGrant {
    /// A grant with both limits written (the CLI's, or a replay's from `limitsApplied`).
    pub fn new(agents: Vec<String>, max_depth: u32, max_children: u32) -> Self {
        Self {
            agents,
            max_depth: Some(max_depth),
            max_children: Some(max_children),
        }
    }

    /// Whether `agent` is named (or `*` was granted).
    pub fn allows(&self, agent: &str) -> bool {
        delegation_allows(&self.agents, agent)
    }

    /// The deepest level a child may sit at: the grant's, else the default, at most the ceiling.
    pub fn depth_limit(&self) -> u32 {
        self.max_depth
            .unwrap_or(DEFAULT_MAX_DEPTH)
            .min(MAX_DEPTH_CEILING)
    }

    /// Children one task may start: the grant's, else the default, at most the ceiling.
    pub fn children_limit(&self) -> u32 {
        self.max_children
            .unwrap_or(DEFAULT_MAX_CHILDREN)
            .min(MAX_CHILDREN_CEILING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_has_a_grant_and_names_list_only_those_present() {
        let all = GrantSet {
            storage: Some(StorageGrant { max_bytes: 1 }),
            network: Some(NetworkGrant::default()),
            randomness: Some(EmptyGrant {}),
            signing: Some(SigningGrant {
                key_id: "k".into(),
                secret_ref: SecretKeyRef {
                    name: "s".into(),
                    key: "k".into(),
                },
            }),
            time_access: Some(EmptyGrant {}),
            delegation: Some(DelegationGrant::default()),
        };
        assert_eq!(all.names(), CapabilityName::ALL.into_iter().collect());
        // Every capability's grant is its field, spelled as its name.
        let json = serde_json::to_value(&all).expect("serialize");
        for name in CapabilityName::ALL {
            assert!(
                json.get(name.as_str()).is_some(),
                "{name} has no grant field"
            );
        }
        assert!(GrantSet::default().names().is_empty());
        let some = GrantSet {
            randomness: Some(EmptyGrant {}),
            storage: Some(StorageGrant { max_bytes: 1 }),
            ..Default::default()
        };
        assert_eq!(
            some.names().into_iter().collect::<Vec<_>>(),
            [CapabilityName::Storage, CapabilityName::Randomness]
        );
    }

    #[test]
    fn delegation_limits_default_and_are_clamped() {
        // (maxDepth, maxChildren) written -> (depth limit, children limit)
        let table = [
            ((None, None), (DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN)),
            ((Some(2), Some(4)), (2, 4)),
            (
                (Some(999), Some(99_999)),
                (MAX_DEPTH_CEILING, MAX_CHILDREN_CEILING),
            ),
        ];
        for ((max_depth, max_children), want) in table {
            let g = DelegationGrant {
                agents: vec!["a".into()],
                max_depth,
                max_children,
            };
            assert_eq!((g.depth_limit(), g.children_limit()), want);
        }
        let g = DelegationGrant {
            agents: vec!["a".into()],
            ..Default::default()
        };
        assert!(g.allows("a") && !g.allows("b"));
    }
}
