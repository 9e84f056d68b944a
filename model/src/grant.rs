//! What an Agent is granted: each capability's grant and the set of them, as a user writes them
//! in the Agent's `spec.capabilities`. The CRDs (`ari-crds`) embed these types, the executor
//! builds its runtime grants from them, and `limitsApplied` records what they resolved to.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::approval::{AgentsApproval, ApprovalRule, HostsApproval};
use crate::capability::CapabilityName;
use crate::hosts::{AllowList, BadEntry};
use crate::limits::{
    DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH, DelegationApplied, LimitsApplied, ModelApplied,
    ToolServerApplied, delegation_allows,
};

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
    /// Language models of the namespace (its ModelConfigs), called through the host, which
    /// holds their credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelsGrant>,
    /// Tools of the namespace's remote MCP servers, called through the host, which holds their
    /// credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsGrant>,
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
            CapabilityName::Models => self.models.is_some(),
            CapabilityName::Tools => self.tools.is_some(),
        }
    }

    /// Whether a call under these grants may wait for a person's decision: any tool call (a
    /// server may mark a tool destructive), or a delegation or request the grant marks.
    pub fn may_ask_approval(&self) -> bool {
        self.tools.is_some()
            || self.network.as_ref().is_some_and(|n| n.approval.is_some())
            || self
                .delegation
                .as_ref()
                .is_some_and(|d| d.approval.is_some())
    }

    /// The names of the granted capabilities, in [`CapabilityName::ALL`] order.
    pub fn names(&self) -> BTreeSet<CapabilityName> {
        CapabilityName::ALL
            .into_iter()
            .filter(|c| self.grants(*c))
            .collect()
    }

    /// Writes the grants' settings into `limitsApplied` (the capability list is the caller's:
    /// the runtime's, which counts a loaded signing key); `depth` is the task's in its tree.
    pub fn record(&self, applied: &mut LimitsApplied, depth: u32) {
        applied.storage_max_bytes = self.storage.map(|g| g.max_bytes);
        applied.allowed_hosts = self
            .network
            .as_ref()
            .map(|n| n.allowed_hosts.clone())
            .unwrap_or_default();
        applied.network_approval = self.network.as_ref().and_then(|n| n.approval.clone());
        applied.delegation = self.delegation.as_ref().map(|g| DelegationApplied {
            agents: g.agents.clone(),
            max_depth: g.depth_limit(),
            max_children: g.children_limit(),
            depth,
            approval: g.approval.clone(),
        });
        // Names only: what each resolved to is the host's to add (it loaded the ModelConfigs).
        applied.models = self
            .models
            .iter()
            .flat_map(|g| &g.allowed)
            .map(|name| ModelApplied {
                name: name.clone(),
                endpoint: None,
            })
            .collect();
        // Servers and tools only: the URL each name resolved to is the host's to add.
        applied.tools = self
            .tools
            .iter()
            .flat_map(|g| &g.servers)
            .map(|s| ToolServerApplied {
                name: s.name.clone(),
                tools: s.tools.clone(),
                url: None,
                approval: s.approval.clone(),
            })
            .collect();
    }

    /// The grants a run was held to, read back from its signed `limitsApplied` (a replay runs
    /// under them). `signing` stays absent: a replay is handed the key, not a Secret's name.
    pub fn replayed(applied: &LimitsApplied) -> Self {
        let has = |name: CapabilityName| applied.capabilities.contains(&name);
        let flag = |name: CapabilityName| has(name).then_some(EmptyGrant {});
        Self {
            storage: has(CapabilityName::Storage).then(|| StorageGrant {
                max_bytes: applied.storage_max_bytes.unwrap_or(u64::MAX),
            }),
            network: has(CapabilityName::Network).then(|| NetworkGrant {
                allowed_hosts: applied.allowed_hosts.clone(),
                approval: applied.network_approval.clone(),
            }),
            randomness: flag(CapabilityName::Randomness),
            signing: None,
            time_access: flag(CapabilityName::TimeAccess),
            delegation: applied.delegation.as_ref().map(|d| DelegationGrant {
                approval: d.approval.clone(),
                ..DelegationGrant::new(d.agents.clone(), d.max_depth, d.max_children)
            }),
            models: has(CapabilityName::Models).then(|| ModelsGrant {
                allowed: applied.models.iter().map(|m| m.name.clone()).collect(),
            }),
            tools: has(CapabilityName::Tools).then(|| ToolsGrant {
                servers: applied
                    .tools
                    .iter()
                    .map(|s| ToolServerGrant {
                        name: s.name.clone(),
                        tools: s.tools.clone(),
                        approval: s.approval.clone(),
                    })
                    .collect(),
            }),
        }
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
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.approval) || self.approval.hosts.all(h, h in self.allowedHosts)",
        "message": "network.approval.hosts must be entries of network.allowedHosts"
    }]))
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkGrant {
    /// Spin-style origins `scheme://host[:port]`; `*` allowed as the leftmost label only.
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 64), inner(length(min = 1, max = 512)))
    )]
    pub allowed_hosts: Vec<String>,
    /// Which hosts' requests wait for a person's decision before the host sends them
    /// (docs/capabilities.md, *network*). Absent: none wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<HostsApproval>,
}

impl NetworkGrant {
    /// The entries parsed (see [`crate::hosts`]); the first bad one is the error.
    pub fn allow_list(&self) -> Result<AllowList, BadEntry> {
        AllowList::parse(&self.allowed_hosts)
    }

    /// The hosts whose requests wait for a decision, parsed as the allow-list is (`None`:
    /// none wait); the first bad one is the error.
    pub fn approval_list(&self) -> Result<Option<AllowList>, BadEntry> {
        self.approval
            .as_ref()
            .map(|a| AllowList::parse(&a.hosts))
            .transpose()
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
// Ordered, so a pool's union of them is sorted (its pods' variables follow that order).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub key: String,
}

/// Models grant: which of the namespace's ModelConfigs a task may call, by name. The host
/// resolves each name to its endpoint and credentials; the guest only ever sees the name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelsGrant {
    /// ModelConfig names in the Agent's namespace.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 32),
            inner(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
        )
    )]
    pub allowed: Vec<String>,
}

impl ModelsGrant {
    /// Whether the ModelConfig `name` is granted.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed.iter().any(|m| m == name)
    }
}

/// Tools grant: which of the namespace's MCP servers a task may use, and which of their tools.
/// Deny by default: a server not named, or a tool its entry does not name, is refused before
/// anything is sent. The host resolves each server name to its URL and credentials; the guest
/// only ever sees the names.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolsGrant {
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 32)))]
    pub servers: Vec<ToolServerGrant>,
}

/// One MCP server of a [`ToolsGrant`] and the tools allowed on it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolServerGrant {
    /// The server's name in the Agent's namespace.
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
    )]
    pub name: String,
    /// Tool names as the server lists them; `*` (written deliberately) allows every tool it
    /// offers. Empty allows none.
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 256), inner(length(min = 1, max = 128)))
    )]
    pub tools: Vec<String>,
    /// Which calls wait for a person's decision before the host makes them (docs/tools.md,
    /// *Approvals*). Absent: the calls of tools the server marks destructive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRule>,
}

/// The entry that allows every tool of a server.
pub const ALL_TOOLS: &str = "*";

impl ToolsGrant {
    /// The grant's entry for server `name`.
    pub fn server(&self, name: &str) -> Option<&ToolServerGrant> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// Whether tool `tool` of server `server` is granted.
    pub fn allows(&self, server: &str, tool: &str) -> bool {
        self.server(server).is_some_and(|s| s.allows(tool))
    }
}

impl ToolServerGrant {
    /// Whether `tool` is named (or [`ALL_TOOLS`] was granted).
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool || t == ALL_TOOLS)
    }

    /// Whether a call of `tool` (its `destructiveHint`: `destructive`) waits for a decision.
    pub fn needs_approval(&self, tool: &str, destructive: Option<bool>) -> bool {
        match &self.approval {
            Some(rule) => rule.needs_approval(tool, destructive),
            None => ApprovalRule::default().needs_approval(tool, destructive),
        }
    }
}

/// Delegation grant: which Agents a task may call, how deep and how many.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.approval) || self.approval.agents.all(a, a == '*' || a in self.agents || '*' in self.agents)",
        "message": "delegation.approval.agents must be `*` or Agents of delegation.agents"
    }]))
)]
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
    /// Which Agents' delegations wait for a person's decision before the child Task is
    /// created (docs/capabilities.md, *delegation*). Absent: none wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<AgentsApproval>,
}

impl DelegationGrant {
    /// A grant with both limits written (the CLI's, or a replay's from `limitsApplied`).
    pub fn new(agents: Vec<String>, max_depth: u32, max_children: u32) -> Self {
        Self {
            agents,
            max_depth: Some(max_depth),
            max_children: Some(max_children),
            approval: None,
        }
    }

    /// Whether delegating to `agent` waits for a person's decision.
    pub fn needs_approval(&self, agent: &str) -> bool {
        self.approval
            .as_ref()
            .is_some_and(|a| a.needs_approval(agent))
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
            models: Some(ModelsGrant::default()),
            tools: Some(ToolsGrant::default()),
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
    fn a_recorded_grant_set_reads_back_as_the_same_grants() {
        let spec = GrantSet {
            storage: Some(StorageGrant { max_bytes: 7 }),
            network: Some(NetworkGrant {
                allowed_hosts: vec!["https://example.com".into()],
                approval: Some(HostsApproval {
                    hosts: vec!["https://example.com".into()],
                }),
            }),
            randomness: Some(EmptyGrant {}),
            signing: None,
            time_access: Some(EmptyGrant {}),
            delegation: Some(DelegationGrant {
                approval: Some(AgentsApproval {
                    agents: vec!["a".into()],
                }),
                ..DelegationGrant::new(vec!["a".into()], 2, 5)
            }),
            models: Some(ModelsGrant {
                allowed: vec!["tiny".into()],
            }),
            tools: Some(ToolsGrant {
                servers: vec![ToolServerGrant {
                    name: "search".into(),
                    tools: vec!["lookup".into(), "fetch".into()],
                    approval: None,
                }],
            }),
        };
        let mut applied = LimitsApplied {
            capabilities: spec.names().into_iter().collect(),
            ..LimitsApplied::default()
        };
        spec.record(&mut applied, 1);
        assert_eq!(applied.delegation.as_ref().map(|d| d.depth), Some(1));
        assert_eq!(GrantSet::replayed(&applied), spec);
        // Nothing granted, nothing recorded, nothing read back.
        let mut none = LimitsApplied::default();
        GrantSet::default().record(&mut none, 0);
        assert_eq!(none, LimitsApplied::default());
        assert_eq!(GrantSet::replayed(&none), GrantSet::default());
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
                approval: None,
            };
            assert_eq!((g.depth_limit(), g.children_limit()), want);
        }
        let g = DelegationGrant {
            agents: vec!["a".into()],
            ..Default::default()
        };
        assert!(g.allows("a") && !g.allows("b"));
    }

    #[test]
    fn tools_are_denied_unless_their_server_names_them_or_all() {
        let grant = ToolsGrant {
            servers: vec![
                ToolServerGrant {
                    name: "docs".into(),
                    tools: vec!["search".into()],
                    approval: None,
                },
                ToolServerGrant {
                    name: "any".into(),
                    tools: vec![ALL_TOOLS.into()],
                    approval: None,
                },
                ToolServerGrant {
                    name: "none".into(),
                    tools: vec![],
                    approval: None,
                },
            ],
        };
        #[rustfmt::skip]
        let cases = [
            ("docs", "search", true),
            ("docs", "delete", false),
            ("any", "delete", true),
            ("none", "search", false),
            ("other", "search", false),
            ("docs", "*", false),
        ];
        for (server, tool, want) in cases {
            assert_eq!(grant.allows(server, tool), want, "{server}/{tool}");
        }
    }
}
