//! What the validator knows about the Agents: plain data, filled from the cluster by the
//! operator and from manifests by `ari plan validate`.

use std::collections::BTreeMap;

pub use ari_model::AgentMode;
use ari_model::{GrantSet, TaskRequirements};
use serde::{Deserialize, Serialize};

/// One Agent as the validator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// The operator reports it `Ready` (at least one executor available).
    pub ready: bool,
    pub mode: AgentMode,
    /// What the Agent is granted (`spec.capabilities`).
    pub grants: GrantSet,
    /// Effective `limits.memoryBytes`.
    pub memory_bytes: u64,
    /// Effective `limits.fuel`: a step's default budget and its ceiling.
    pub fuel_limit: u64,
    /// Effective `limits.tokens`: a step's default token budget and its ceiling.
    #[serde(default = "default_tokens")]
    pub tokens_limit: u64,
}

fn default_tokens() -> u64 {
    ari_model::limits::DEFAULT_TOKENS
}

/// Agents by name (one namespace).
pub type Agents = BTreeMap<String, AgentView>;

impl AgentView {
    /// The most model tokens one of its Tasks can spend: its `limits.tokens`, or none for an
    /// Agent granted neither `models` nor `delegation` (nothing it runs can spend a token).
    pub fn token_ceiling(&self) -> u64 {
        if self.grants.models.is_some() || self.grants.delegation.is_some() {
            self.tokens_limit
        } else {
            0
        }
    }

    /// Every way `req` exceeds this Agent's grants, as messages (empty when it fits): the
    /// rule and the words the operator and executor use for a Task.
    pub fn denials(&self, req: &TaskRequirements) -> Vec<String> {
        req.denials(&self.grants, self.memory_bytes)
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ari_model::{CapabilityName, NetworkGrant, StorageGrant};

    /// A Ready agent in mode `all` granted nothing, fuel limit 1,000.
    pub fn plain() -> AgentView {
        AgentView {
            ready: true,
            mode: AgentMode::All,
            grants: GrantSet::default(),
            memory_bytes: 1 << 20,
            fuel_limit: 1_000,
            tokens_limit: 1_000,
        }
    }

    #[test]
    fn only_an_agent_that_may_call_models_or_delegate_can_spend_tokens() {
        let mut a = plain();
        assert_eq!(a.token_ceiling(), 0);
        a.grants.models = Some(ari_model::grant::ModelsGrant {
            allowed: vec!["small".into()],
        });
        assert_eq!(a.token_ceiling(), 1_000);
        a.grants.models = None;
        a.grants.delegation = Some(Default::default());
        assert_eq!(a.token_ceiling(), 1_000);
    }

    #[test]
    fn requirements_within_the_grants_have_no_denial() {
        let mut a = plain();
        a.grants.network = Some(NetworkGrant {
            allowed_hosts: vec!["https://*.example.com".into()],
            approval: None,
        });
        a.grants.storage = Some(StorageGrant { max_bytes: 100 });
        let req = TaskRequirements {
            hosts: vec!["https://api.example.com".into()],
            storage_bytes: Some(100),
            ..Default::default()
        };
        assert!(a.denials(&req).is_empty());
    }

    #[test]
    fn every_excess_is_reported_not_only_the_first() {
        let mut a = plain();
        a.grants.network = Some(NetworkGrant {
            allowed_hosts: vec!["https://a.example".into()],
            approval: None,
        });
        let req = TaskRequirements {
            capabilities: vec![CapabilityName::Randomness],
            hosts: vec!["https://b.example".into(), "b.example".into()],
            storage_bytes: Some(1),
            memory_bytes: Some(2 << 20),
            signing_key_id: None,
        };
        let d = a.denials(&req);
        assert_eq!(d.len(), 5, "{d:#?}");
        assert!(d[0].contains("storage") && d[1].contains("randomness"));
        assert!(d[2].contains("memoryBytes"));
        assert!(d[3].contains("https://b.example is not within"));
        assert!(d[4].contains("not a valid origin"));
    }
}
