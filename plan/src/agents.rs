//! What the validator knows about the Agents: plain data, filled from the cluster by the
//! operator and from manifests by `ari plan validate`.

use std::collections::{BTreeMap, BTreeSet};

use ari_model::CapabilityName;
use serde::{Deserialize, Serialize};

use crate::model::Requirements;

/// How an Agent may be used (the Agent's `spec.mode`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum AgentMode {
    Primary,
    /// Only Tasks another agent delegates to it: never a plan step or planner, which are
    /// Tasks created for the Plan's author.
    Subagent,
    #[default]
    All,
}

/// One Agent as the validator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// The operator reports it `Ready` (at least one executor available).
    pub ready: bool,
    pub mode: AgentMode,
    /// Granted capability names.
    pub grants: BTreeSet<CapabilityName>,
    /// `network.allowedHosts`.
    pub allowed_hosts: Vec<String>,
    /// `storage.maxBytes`.
    pub storage_max_bytes: Option<u64>,
    /// `signing.keyId`.
    pub signing_key_id: Option<String>,
    /// Effective `limits.memoryBytes`.
    pub memory_bytes: u64,
    /// Effective `limits.fuel`: a step's default budget and its ceiling.
    pub fuel_limit: u64,
}

/// Agents by name (one namespace).
pub type Agents = BTreeMap<String, AgentView>;

/// Whether an allow-list covers an origin. The operator and the CLI pass the CRD crate's
/// grammar (normalised origins, wildcards), so both judge hosts as the executor enforces them.
pub trait HostCheck {
    /// `Ok(true)` when one of `allowed` covers `wanted`; `Err` when `wanted` is not an origin.
    fn covers(&self, allowed: &[String], wanted: &str) -> Result<bool, String>;
}

/// A plain comparison for tests and fuzzing: case-insensitive equality, or a `*.` entry
/// covering any deeper name with the same scheme and suffix.
pub struct SimpleHosts;

impl HostCheck for SimpleHosts {
    fn covers(&self, allowed: &[String], wanted: &str) -> Result<bool, String> {
        let wanted = wanted.to_ascii_lowercase();
        let Some((scheme, host)) = wanted.split_once("://") else {
            return Err("missing scheme (expected scheme://host[:port])".into());
        };
        Ok(allowed.iter().any(|a| {
            let a = a.to_ascii_lowercase();
            match a.split_once("://") {
                Some((s, h)) if s == scheme => match h.strip_prefix("*.") {
                    Some(suffix) => host.ends_with(&format!(".{suffix}")),
                    None => h == host,
                },
                _ => false,
            }
        }))
    }
}

impl AgentView {
    /// Every way `req` exceeds this Agent's grants, as messages (empty when it fits).
    pub fn denials(&self, req: &Requirements, hosts: &dyn HostCheck) -> Vec<String> {
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
        let mut out = Vec::new();
        let mut named = BTreeSet::new();
        for c in needed {
            if !self.grants.contains(&c) && named.insert(c) {
                out.push(format!(
                    "capability {c} is required but not granted to the agent"
                ));
            }
        }
        if let (Some(wanted), Some(granted)) = (req.storage_bytes, self.storage_max_bytes)
            && wanted > granted
        {
            out.push(format!(
                "storageBytes {wanted} exceeds the agent's storage.maxBytes {granted}"
            ));
        }
        if let (Some(wanted), Some(granted)) = (&req.signing_key_id, &self.signing_key_id)
            && wanted != granted
        {
            out.push(format!(
                "signing key {wanted} is not the agent's signing.keyId {granted}"
            ));
        }
        if let Some(wanted) = req.memory_bytes
            && wanted > self.memory_bytes
        {
            out.push(format!(
                "memoryBytes {wanted} exceeds the agent's limits.memoryBytes {}",
                self.memory_bytes
            ));
        }
        if self.grants.contains(&CapabilityName::Network) {
            for host in &req.hosts {
                match hosts.covers(&self.allowed_hosts, host) {
                    Ok(true) => {}
                    Ok(false) => out.push(format!(
                        "host {host} is not within the agent's network.allowedHosts"
                    )),
                    Err(reason) => out.push(format!(
                        "required host {host} is not a valid origin: {reason}"
                    )),
                }
            }
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A Ready agent in mode `all` granted nothing, fuel limit 1,000.
    pub fn plain() -> AgentView {
        AgentView {
            ready: true,
            mode: AgentMode::All,
            grants: BTreeSet::new(),
            allowed_hosts: Vec::new(),
            storage_max_bytes: None,
            signing_key_id: None,
            memory_bytes: 1 << 20,
            fuel_limit: 1_000,
        }
    }

    #[test]
    fn requirements_within_the_grants_have_no_denial() {
        let mut a = plain();
        a.grants = [CapabilityName::Network, CapabilityName::Storage].into();
        a.allowed_hosts = vec!["https://*.example.com".into()];
        a.storage_max_bytes = Some(100);
        let req = Requirements {
            hosts: vec!["https://api.example.com".into()],
            storage_bytes: Some(100),
            ..Default::default()
        };
        assert!(a.denials(&req, &SimpleHosts).is_empty());
    }

    #[test]
    fn every_excess_is_reported_not_only_the_first() {
        let mut a = plain();
        a.grants = [CapabilityName::Network].into();
        a.allowed_hosts = vec!["https://a.example".into()];
        let req = Requirements {
            capabilities: vec![CapabilityName::Randomness],
            hosts: vec!["https://b.example".into(), "b.example".into()],
            storage_bytes: Some(1),
            memory_bytes: Some(2 << 20),
            signing_key_id: None,
        };
        let d = a.denials(&req, &SimpleHosts);
        assert_eq!(d.len(), 5, "{d:#?}");
        assert!(d[0].contains("randomness") && d[1].contains("storage"));
        assert!(d[2].contains("memoryBytes"));
        assert!(d[3].contains("https://b.example is not within"));
        assert!(d[4].contains("not a valid origin"));
    }
}
