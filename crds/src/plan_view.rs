//! The bridge between the cluster's types and `ari_plan`'s plain data: an Agent as the
//! validator sees it, step Task names and labels. The operator and `ari plan validate` both
//! go through here, so they judge alike.

use ari_plan::{AgentView, Agents};

use crate::agent::Agent;

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
    let limits = spec.limits.effective();
    AgentView {
        ready: agent.is_ready(),
        mode: spec.mode.unwrap_or_default(),
        grants: spec.capabilities.clone(),
        memory_bytes: limits.memory_bytes,
        fuel_limit: limits.fuel,
        tokens_limit: limits.tokens,
    }
}

/// The views of Agents by name.
pub fn agent_views<'a>(agents: impl IntoIterator<Item = &'a Agent>) -> Agents {
    agents
        .into_iter()
        .filter_map(|a| Some((a.metadata.name.clone()?, agent_view(a))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CapabilityName;
    use crate::agent::AgentMode;

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
        assert_eq!(v.mode, AgentMode::Subagent);
        assert_eq!(
            v.grants.names().into_iter().collect::<Vec<_>>(),
            [CapabilityName::Storage, CapabilityName::Network]
        );
        assert_eq!(v.fuel_limit, 77);
        assert_eq!(v.grants.storage.map(|s| s.max_bytes), Some(10));
        assert_eq!(agent_views([&a]).len(), 1);
    }

    #[test]
    fn the_planner_task_is_named_after_the_plan() {
        assert_eq!(planner_task_name("p"), "p-planner");
    }
}
