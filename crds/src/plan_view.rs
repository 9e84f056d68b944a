//! The bridge between the cluster's types and `ari_plan`'s plain data: an Agent as the
//! validator sees it, the host grammar the executor enforces, step Task names and labels.
//! The operator and `ari plan validate` both go through here, so they judge alike.

use ari_plan::{AgentMode as PlanMode, AgentView, Agents, HostCheck, Requirements};

use crate::agent::{Agent, AgentMode};

use crate::capability::TaskRequirements;
use ari_model::hosts::{HostPattern, pattern_covers};

/// Label on every Task of a Plan: the Plan's uid (a name may be too long for a label).
pub const LABEL_PLAN_UID: &str = "ari.dev/plan-uid";
/// Label on every Task of a Plan: the step (or `planner`).
pub const LABEL_PLAN_STEP: &str = "ari.dev/plan-step";

pub use ari_plan::names::{step_task_name, taken_name};

/// The planner's Task.
pub fn planner_task_name(plan: &str) -> String {
    format!("{plan}-{}", ari_plan::PLANNER_STEP)
}

/// An Agent as the validator sees it. `ready` is the operator's `Ready` condition.
pub fn agent_view(agent: &Agent) -> AgentView {
    let spec = &agent.spec;
    let caps = &spec.capabilities;
    let limits = spec.limits.effective();
    AgentView {
        ready: agent.is_ready(),
        mode: match spec.mode.unwrap_or_default() {
            AgentMode::Primary => PlanMode::Primary,
            AgentMode::Subagent => PlanMode::Subagent,
            AgentMode::All => PlanMode::All,
        },
        grants: spec.grant_names(),
        allowed_hosts: caps
            .network
            .as_ref()
            .map(|n| n.allowed_hosts.clone())
            .unwrap_or_default(),
        storage_max_bytes: caps.storage.as_ref().map(|s| s.max_bytes),
        signing_key_id: caps.signing.as_ref().map(|s| s.key_id.clone()),
        memory_bytes: limits.memory_bytes,
        fuel_limit: limits.fuel,
    }
}

/// The views of Agents by name.
pub fn agent_views<'a>(agents: impl IntoIterator<Item = &'a Agent>) -> Agents {
    agents
        .into_iter()
        .filter_map(|a| Some((a.metadata.name.clone()?, agent_view(a))))
        .collect()
}

/// The allow-list grammar of `network.allowedHosts`, as the executor enforces it.
pub struct CrdHosts;

impl HostCheck for CrdHosts {
    fn covers(&self, allowed: &[String], wanted: &str) -> Result<bool, String> {
        let wanted = HostPattern::parse(wanted).map_err(|e| e.to_string())?;
        Ok(allowed
            .iter()
            .filter_map(|a| HostPattern::parse(a).ok())
            .any(|g| pattern_covers(&g, &wanted)))
    }
}

/// A step's requirements as its Task's.
pub fn task_requirements(r: &Requirements) -> TaskRequirements {
    TaskRequirements {
        capabilities: r.capabilities.clone(),
        hosts: r.hosts.clone(),
        storage_bytes: r.storage_bytes,
        memory_bytes: r.memory_bytes,
        signing_key_id: r.signing_key_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CapabilityName;

    fn agent(json: serde_json::Value) -> Agent {
        serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_agent_view_carries_grants_limits_mode_and_readiness() {
        let a = agent(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "fetch"},
            "spec": {"module": {"configMap": {"name": "m", "key": "k"}}, "mode": "subagent",
                     "capabilities": {"network": {"allowedHosts": ["https://*.example.com"]},
                                      "storage": {"maxBytes": 10}},
                     "limits": {"fuel": 77}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }));
        let v = agent_view(&a);
        assert!(v.ready);
        assert_eq!(v.mode, PlanMode::Subagent);
        assert_eq!(
            v.grants.into_iter().collect::<Vec<_>>(),
            [CapabilityName::Storage, CapabilityName::Network]
        );
        assert_eq!((v.fuel_limit, v.storage_max_bytes), (77, Some(10)));
        assert_eq!(agent_views([&a]).len(), 1);
    }

    #[test]
    fn hosts_are_judged_by_the_executor_grammar() {
        let allowed = vec!["https://*.Example.com".to_owned()];
        assert_eq!(
            CrdHosts.covers(&allowed, "https://api.example.com:443"),
            Ok(true)
        );
        assert_eq!(CrdHosts.covers(&allowed, "https://example.com"), Ok(false));
        assert!(CrdHosts.covers(&allowed, "example.com").is_err());
    }

    #[test]
    fn the_planner_task_is_named_after_the_plan() {
        assert_eq!(planner_task_name("p"), "p-planner");
    }
}
