//! Whether an Agent takes a Task at all, decided before anything runs: its mode, the Task's
//! requirements against the grants, and its fuel and token budgets against the limits.
//!
//! The operator calls [`admit`] to fail a Task early (with an Event); the executor calls it
//! again before it runs a Task it saw first (defence in depth). One rule, one place.

pub use ari_model::TaskOrigin;

use crate::agent::AgentSpec;
use crate::capability::{
    Denied, TokensTooLarge, fuel_within_limit, requirements_within_grants, tokens_within_limit,
};
use crate::task::{Task, TaskReason};

impl Task {
    /// Who asked for this Task: a Task with a parent was delegated (whether the parent is
    /// real is [`crate::delegation::admit_child`]'s question).
    pub fn origin(&self) -> TaskOrigin {
        match self.spec.parent {
            Some(_) => TaskOrigin::Delegation,
            None => TaskOrigin::User,
        }
    }
}

/// Why an Agent does not take a Task: the reason and message its status gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: TaskReason,
    pub message: String,
}

impl From<Denied> for Refusal {
    fn from(denied: Denied) -> Self {
        Refusal {
            reason: TaskReason::CapabilityDenied,
            message: denied.to_string(),
        }
    }
}

impl From<TokensTooLarge> for Refusal {
    fn from(e: TokensTooLarge) -> Self {
        Refusal {
            reason: TaskReason::CapabilityDenied,
            message: e.to_string(),
        }
    }
}

/// Checks, in order, the Agent's mode, the Task's requirements, its fuel budget and its token
/// budget (refused, not clipped, like fuel: a Task that asks for more than it may have is
/// more likely a mistake than a wish for the ceiling).
pub fn admit(task: &Task, agent: &AgentSpec) -> Result<(), Refusal> {
    let mode = agent.mode.unwrap_or_default();
    let origin = task.origin();
    if !mode.accepts(origin) {
        let message = match origin {
            TaskOrigin::User => {
                "the agent's mode is subagent: it takes only Tasks another agent delegates to it"
            }
            TaskOrigin::Delegation => {
                "the agent's mode is primary: it takes only Tasks users create, not delegated ones"
            }
        };
        return Err(Refusal {
            reason: TaskReason::ModeRefused,
            message: message.to_owned(),
        });
    }
    if let Some(req) = &task.spec.requirements {
        requirements_within_grants(req, agent)?;
    }
    fuel_within_limit(task.spec.fuel, agent)?;
    tokens_within_limit(task.spec.tokens, agent)?;
    crate::items::items_allowed(task, agent)?;
    replicas_allowed(task, agent)
}

/// `spec.verification.replicas` > 1 runs the Task N times: refused where a run has effects
/// beyond its own result, which N runs would repeat (docs/verification.md, "Scope in v1").
fn replicas_allowed(task: &Task, agent: &AgentSpec) -> Result<(), Refusal> {
    if task.spec.replicas() <= 1 {
        return Ok(());
    }
    let grants = &agent.capabilities;
    let effect = if task.spec.parent.is_some() {
        Some("a delegated Task (its parent would see one child run N times)")
    } else if grants.storage.is_some() {
        Some("an Agent granted storage (each run would commit its writes)")
    } else if grants.delegation.is_some() {
        Some("an Agent granted delegation (each run would create its children)")
    } else if grants.tools.is_some() {
        Some("an Agent granted tools (each call, and each approval, would happen N times)")
    } else {
        None
    };
    match effect {
        None => Ok(()),
        Some(what) => Err(Refusal {
            reason: TaskReason::CapabilityDenied,
            message: format!(
                "spec.verification.replicas > 1 is not supported for {what}; see \
                 docs/verification.md"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentMode, ConfigMapModule, ModuleSource};
    use crate::task::{AgentRef, TaskSpec};

    fn agent(mode: Option<AgentMode>) -> AgentSpec {
        AgentSpec {
            module: ModuleSource {
                config_map: Some(ConfigMapModule {
                    name: "m".into(),
                    key: "k".into(),
                }),
                ..Default::default()
            },
            capabilities: Default::default(),
            limits: Default::default(),
            executor: Default::default(),
            description: None,
            mode,
            callers: None,
            config: None,
            declarative: None,
            a2a: None,
            trace: None,
        }
    }

    fn task(fuel: Option<u64>) -> Task {
        task_with(fuel, None)
    }

    fn task_with(fuel: Option<u64>, tokens: Option<u64>) -> Task {
        Task::new(
            "t",
            TaskSpec {
                agent_ref: AgentRef { name: "a".into() },
                input: Some("x".into()),
                input_base64: None,
                input_from: None,
                requirements: None,
                deadline_seconds: None,
                fuel,
                tokens,
                seed: None,
                retries: None,
                ttl_seconds_after_finished: None,
                cancelled: None,
                parent: None,
                trace: None,
                approvals: None,
                verification: None,
                continues: None,
                items: None,
            },
        )
    }

    #[test]
    fn replicas_are_refused_where_a_run_has_effects_n_runs_would_repeat() {
        use crate::replicas::Verification;
        let mut t = task(None);
        t.spec.verification = Some(Verification { replicas: 2 });
        assert_eq!(admit(&t, &agent(None)), Ok(()), "no effects: admitted");
        let mut with_storage = agent(None);
        with_storage.capabilities.storage = Some(crate::StorageGrant { max_bytes: 1 });
        let refused = admit(&t, &with_storage).expect_err("storage");
        assert_eq!(refused.reason, TaskReason::CapabilityDenied);
        assert!(refused.message.contains("storage"), "{}", refused.message);
        let mut with_delegation = agent(None);
        with_delegation.capabilities.delegation = Some(Default::default());
        let refused = admit(&t, &with_delegation).expect_err("delegation");
        assert!(
            refused.message.contains("delegation"),
            "{}",
            refused.message
        );
        t.spec.verification = Some(Verification { replicas: 1 });
        assert_eq!(
            admit(&t, &with_storage),
            Ok(()),
            "one replica is a plain run"
        );
    }

    #[test]
    fn a_subagent_refuses_a_task_a_user_created_with_a_reason_that_says_so() {
        let refused = admit(&task(None), &agent(Some(AgentMode::Subagent))).unwrap_err();
        assert_eq!(refused.reason, TaskReason::ModeRefused);
        assert!(refused.message.contains("subagent"), "{}", refused.message);
        assert_eq!(admit(&task(None), &agent(Some(AgentMode::Primary))), Ok(()));
        assert_eq!(admit(&task(None), &agent(None)), Ok(()));
    }

    #[test]
    fn a_fuel_budget_over_the_limit_is_a_capability_denial() {
        let refused = admit(&task(Some(u64::MAX)), &agent(None)).unwrap_err();
        assert_eq!(refused.reason, TaskReason::CapabilityDenied);
    }

    #[test]
    fn a_token_budget_over_the_ceiling_is_a_capability_denial_naming_both_figures() {
        let mut a = agent(None);
        a.limits.tokens = Some(500);
        let refused = admit(&task_with(None, Some(501)), &a).unwrap_err();
        assert_eq!(refused.reason, TaskReason::CapabilityDenied);
        assert!(
            refused.message.contains("501") && refused.message.contains("500"),
            "{}",
            refused.message
        );
        assert_eq!(admit(&task_with(None, Some(500)), &a), Ok(()));
        // Without a ceiling the default one applies.
        let over = crate::agent::DEFAULT_TOKENS + 1;
        assert!(admit(&task_with(None, Some(over)), &agent(None)).is_err());
    }
}
