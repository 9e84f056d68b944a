//! Capability names, Task requirements and the check that requirements fit an Agent's grants:
//! the model's (`ari_model`), applied to an `AgentSpec` (its grants and its limits in effect).
//!
//! Both the operator (before anything runs) and the executor (defence in depth) call
//! [`requirements_within_grants`], so the rule lives once.

pub use ari_model::{CapabilityName, Denied, TaskRequirements};

use crate::agent::AgentSpec;

/// Checks a Task's requirements against an Agent's grants and limits (see
/// [`TaskRequirements::within`]).
pub fn requirements_within_grants(req: &TaskRequirements, agent: &AgentSpec) -> Result<(), Denied> {
    req.within(&agent.capabilities, agent.limits.effective().memory_bytes)
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

/// A Task's token budget above its Agent's `limits.tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("tokens {wanted} exceeds the agent's limits.tokens {limit}")]
pub struct TokensTooLarge {
    pub wanted: u64,
    pub limit: u64,
}

/// Checks a Task's token budget against the Agent's ceiling (the budget may only lower it);
/// the tokens the Task runs with.
pub fn tokens_within_limit(
    task_tokens: Option<u64>,
    agent: &AgentSpec,
) -> Result<u64, TokensTooLarge> {
    let limit = agent.limits.effective().tokens;
    match task_tokens {
        Some(wanted) if wanted > limit => Err(TokensTooLarge { wanted, limit }),
        Some(wanted) => Ok(wanted),
        None => Ok(limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{ConfigMapModule, GrantSet, Limits, ModuleSource, StorageGrant};

    fn agent(caps: GrantSet) -> AgentSpec {
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
            declarative: None,
            a2a: None,
            trace: None,
        }
    }

    #[test]
    fn an_agents_grants_and_memory_limit_bound_its_tasks() {
        let a = agent(GrantSet {
            storage: Some(StorageGrant { max_bytes: 100 }),
            ..Default::default()
        });
        let need = |r: TaskRequirements| requirements_within_grants(&r, &a);
        assert_eq!(
            need(TaskRequirements {
                storage_bytes: Some(100),
                memory_bytes: Some(1 << 20),
                ..Default::default()
            }),
            Ok(())
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
        // Without `limits.memoryBytes` the default is the limit.
        let mut unlimited = a.clone();
        unlimited.limits.memory_bytes = None;
        assert_eq!(
            requirements_within_grants(
                &TaskRequirements {
                    memory_bytes: Some(crate::agent::DEFAULT_MEMORY_BYTES + 1),
                    ..Default::default()
                },
                &unlimited
            ),
            Err(Denied::MemoryTooLarge {
                wanted: crate::agent::DEFAULT_MEMORY_BYTES + 1,
                limit: crate::agent::DEFAULT_MEMORY_BYTES
            })
        );
    }

    #[test]
    fn fuel_budget_may_only_lower_the_limit() {
        let a = agent(GrantSet::default());
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
