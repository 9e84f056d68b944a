//! Mapping between the Kubernetes types (`ari-crds`) and the runtime's own types. (Grants need
//! none: the runtime takes the Agent's `GrantSet` as it is, see `Grants::load`.)

use std::time::Duration;

use ari_crds::lifecycle::NotAllowed;
use ari_crds::task::INLINE_OUTPUT_MAX_BYTES;
use ari_crds::{AgentSpec, CapabilityName, Task, TaskPhase, TaskStatus};
use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};

use ari_runtime::{Limits, TaskOutcome};

/// The limits one task runs under: the Agent's ceilings, lowered by the Task's fuel and token
/// budgets and by what is left of its deadline (`elapsed` = time since the Task was created).
/// (A budget above the ceiling was refused by `ari_crds::admit` before; `min` keeps it so.)
pub fn limits(spec: &AgentSpec, task: &Task, elapsed: Duration) -> Limits {
    let agent = spec.limits.effective();
    let fuel = task.spec.fuel.map_or(agent.fuel, |f| f.min(agent.fuel));
    let mut timeout = Duration::from_secs(u64::from(agent.timeout_seconds));
    if let Some(deadline) = task.spec.deadline_seconds {
        let left = Duration::from_secs(u64::from(deadline)).saturating_sub(elapsed);
        timeout = timeout.min(left.max(Duration::from_millis(1)));
    }
    // A child never gets more memory than its parent had.
    let memory_bytes = task
        .spec
        .parent
        .as_ref()
        .and_then(|p| p.memory_bytes)
        .map_or(agent.memory_bytes, |m| m.min(agent.memory_bytes));
    Limits {
        fuel,
        memory_bytes,
        timeout,
        max_output_bytes: agent.max_output_bytes,
        max_input_bytes: agent.max_input_bytes,
        tokens: task
            .spec
            .tokens
            .map_or(agent.tokens, |t| t.min(agent.tokens)),
    }
}

/// The capabilities a task requires: those it names, and those its host, storage and key
/// requirements imply.
pub fn requirements(task: &Task) -> Vec<CapabilityName> {
    task.spec
        .requirements
        .as_ref()
        .map(ari_crds::TaskRequirements::needed)
        .unwrap_or_default()
}

/// The task's seed: `spec.seed` (hex) when given — 32 bytes as is, other lengths hashed to 32 —
/// else `None` so the runtime generates one and records it in the attestation.
pub fn seed(task: &Task) -> Result<Option<[u8; 32]>, String> {
    let Some(text) = task.spec.seed.as_deref() else {
        return Ok(None);
    };
    let bytes = hex::decode(text.trim()).map_err(|e| format!("spec.seed is not hex: {e}"))?;
    if bytes.is_empty() {
        return Err("spec.seed is empty".into());
    }
    Ok(Some(match <[u8; 32]>::try_from(bytes.as_slice()) {
        Ok(exact) => exact,
        Err(_) => Sha256::digest(&bytes).into(),
    }))
}

pub fn now() -> Time {
    Time(Timestamp::now())
}

/// Time since `task` was created: what its deadline has left is measured from there.
pub fn since_created(task: &Task) -> std::time::Duration {
    task.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| {
            let ms = now().0.as_millisecond() - t.0.as_millisecond();
            std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        })
        .unwrap_or_default()
}

/// Where a finished task's output goes.
pub enum OutputPlacement {
    /// Small enough for status: `output` (UTF-8) or `outputBase64`.
    Inline,
    /// Too large for status: a ConfigMap owned by the Task.
    ConfigMap,
}

pub fn placement(output: &[u8]) -> OutputPlacement {
    if output.len() <= INLINE_OUTPUT_MAX_BYTES {
        OutputPlacement::Inline
    } else {
        OutputPlacement::ConfigMap
    }
}

/// Writes a run's outcome into `status` (one final write carries all of it): the ending by the
/// Task state machine's `finish`, then output, usage, limits and attestation. The output goes
/// inline when `output_ref` is `None`; otherwise the caller stored it in that ConfigMap.
pub fn finish_with_outcome(
    status: &mut TaskStatus,
    generation: Option<i64>,
    outcome: &TaskOutcome,
    output_ref: Option<ari_crds::OutputRef>,
) -> Result<(), NotAllowed> {
    match &outcome.failure {
        None if outcome.input_required => status.finish(
            Some(ari_crds::TaskReason::InputRequired),
            "the agent asks for input: its output is the question; a Task that continues this one is the reply",
            generation,
            now(),
        )?,
        None => status.finish(None, "completed", generation, now())?,
        Some(f) => status.finish(Some(f.kind.into()), &f.message, generation, now())?,
    }
    record_outcome(status, outcome, output_ref);
    Ok(())
}

/// What a run leaves in status beside its ending: output, usage, limits and attestation.
pub fn record_outcome(
    status: &mut TaskStatus,
    outcome: &TaskOutcome,
    output_ref: Option<ari_crds::OutputRef>,
) {
    record_usage(status, outcome);
    status.output = None;
    status.output_base64 = None;
    status.output_ref = None;
    match output_ref {
        Some(r) => status.output_ref = Some(r),
        None if outcome.output.is_empty() => {}
        None => match std::str::from_utf8(&outcome.output) {
            Ok(text) => status.output = Some(text.to_string()),
            Err(_) => {
                status.output_base64 =
                    Some(base64::engine::general_purpose::STANDARD.encode(&outcome.output));
            }
        },
    }
    status.output_sha256 = Some(outcome.output_sha256.clone());
    status.estimate = outcome.estimate;
    status.children = children(outcome);
    status.delegations_refused = Some(outcome.delegations_refused).filter(|n| *n > 0);
    status.models = outcome
        .models
        .iter()
        .take(ari_crds::task::MAX_LISTED_MODELS)
        .cloned()
        .collect();
}

/// The run's cost and signed evidence, kept even when its output is not shown (a verified
/// Task whose replicas disagreed).
pub fn record_usage(status: &mut TaskStatus, outcome: &TaskOutcome) {
    status.duration = Some(ari_crds::format_duration_millis(
        outcome.resources_used.wall_millis,
    ));
    // The runtime's values are the status types themselves (ari-model): nothing to convert.
    status.resources_used = Some(outcome.resources_used);
    status.limits_applied = Some(outcome.limits_applied.clone());
    status.attestation = Some(outcome.attestation.clone());
}

/// A parent's `status.children`: the first [`ari_crds::delegation::MAX_LISTED_CHILDREN`] it
/// started, with how each ended.
pub fn children(outcome: &TaskOutcome) -> Vec<ari_crds::ChildStatus> {
    outcome
        .children
        .iter()
        .take(ari_crds::delegation::MAX_LISTED_CHILDREN)
        .map(|c| {
            let phase = match c.reason.as_deref() {
                None => TaskPhase::Running,
                Some("Completed" | "InputRequired") => TaskPhase::Succeeded,
                Some("Cancelled") => TaskPhase::Cancelled,
                Some(_) => TaskPhase::Failed,
            };
            ari_crds::ChildStatus {
                name: (!c.task.is_empty()).then(|| c.task.clone()),
                agent: c.agent.clone(),
                phase,
                reason: c.reason.clone(),
                fuel: c.fuel,
                message: c.message,
                attestation_sha256: (!c.attestation_sha256.is_empty())
                    .then(|| c.attestation_sha256.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::{AgentRef, EmptyGrant, GrantSet, ModuleSource, StorageGrant, TaskSpec};
    use ed25519_dalek::SigningKey;

    fn agent() -> AgentSpec {
        AgentSpec {
            module: ModuleSource::default(),
            capabilities: GrantSet {
                storage: Some(StorageGrant { max_bytes: 1024 }),
                randomness: Some(EmptyGrant {}),
                ..GrantSet::default()
            },
            limits: Default::default(),
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

    fn task(fuel: Option<u64>, deadline: Option<u32>, seed: Option<&str>) -> Task {
        Task::new(
            "t",
            TaskSpec {
                agent_ref: AgentRef { name: "a".into() },
                input: Some("x".into()),
                fuel,
                tokens: None,
                deadline_seconds: deadline,
                seed: seed.map(str::to_string),
                input_base64: None,
                input_from: None,
                requirements: None,
                retries: None,
                ttl_seconds_after_finished: None,
                parent: None,
                cancelled: None,
                trace: None,
                approvals: None,
                verification: None,
                continues: None,
                items: None,
            },
        )
    }

    #[test]
    fn task_fuel_and_deadline_only_lower_the_limits() {
        let spec = agent();
        let l = limits(&spec, &task(Some(10), None, None), Duration::ZERO);
        assert_eq!(l.fuel, 10);
        let l = limits(&spec, &task(Some(u64::MAX), None, None), Duration::ZERO);
        assert_eq!(l.fuel, spec.limits.effective().fuel);
        let l = limits(&spec, &task(None, Some(5), None), Duration::from_secs(2));
        assert_eq!(l.timeout, Duration::from_secs(3));
        let l = limits(&spec, &task(None, Some(5), None), Duration::from_secs(9));
        assert_eq!(l.timeout, Duration::from_millis(1));
    }

    #[test]
    fn a_tasks_token_budget_only_lowers_the_agents_ceiling() {
        let mut spec = agent();
        let with_tokens = |tokens| {
            let mut t = task(None, None, None);
            t.spec.tokens = tokens;
            t
        };
        // No ceiling declared: the default one, which the runtime's default matches.
        let l = limits(&spec, &with_tokens(None), Duration::ZERO);
        assert_eq!(l.tokens, ari_crds::agent::DEFAULT_TOKENS);
        assert_eq!(
            ari_crds::agent::DEFAULT_TOKENS,
            ari_runtime::limits::DEFAULT_TOKENS
        );
        spec.limits.tokens = Some(500);
        assert_eq!(
            limits(&spec, &with_tokens(Some(20)), Duration::ZERO).tokens,
            20
        );
        assert_eq!(
            limits(&spec, &with_tokens(None), Duration::ZERO).tokens,
            500
        );
        assert_eq!(
            limits(&spec, &with_tokens(Some(501)), Duration::ZERO).tokens,
            500
        );
    }

    #[test]
    fn seeds_parse_or_hash() {
        assert_eq!(seed(&task(None, None, None)), Ok(None));
        let exact = "11".repeat(32);
        assert_eq!(seed(&task(None, None, Some(&exact))), Ok(Some([0x11; 32])));
        let short = seed(&task(None, None, Some("abcd"))).expect("short seed");
        assert!(short.is_some());
        assert!(seed(&task(None, None, Some("zz"))).is_err());
    }

    #[test]
    fn every_limit_the_models_and_the_attestation_reach_the_status_unchanged_and_still_verify() {
        use ari_runtime::attestation::{Attestation, Claims, TaskIdentity};
        let key = SigningKey::from_bytes(&[3; 32]);
        let calls = ari_crds::ModelCalls {
            name: "small".into(),
            endpoint: "http://m:8000/v1".into(),
            model: "tiny".into(),
            usage: ari_crds::TokenUsage {
                calls: 1,
                input_tokens: 12,
                output_tokens: 5,
                cached_input_tokens: 0,
            },
            estimated_cost: Some(ari_crds::Cost {
                amount: "0.0000042".into(),
                currency: "EUR".into(),
            }),
        };
        let limits = ari_runtime::LimitsApplied {
            fuel: 10,
            memory_bytes: 20,
            timeout_millis: 30,
            max_output_bytes: 40,
            max_input_bytes: 50,
            capabilities: vec![CapabilityName::Network, CapabilityName::Storage],
            storage_max_bytes: Some(60),
            allowed_hosts: vec!["https://example.com".into()],
            network_approval: None,
            delegation: Some(ari_crds::DelegationApplied {
                agents: vec!["summarize".into()],
                max_depth: 2,
                max_children: 3,
                depth: 1,
                approval: None,
            }),
            models: vec![ari_runtime::model::ModelApplied {
                name: "small".into(),
                endpoint: None,
            }],
            tokens: Some(70),
            tools: vec![ari_runtime::model::ToolServerApplied {
                name: "docs".into(),
                tools: vec!["search".into()],
                url: Some("https://tools.example/mcp".into()),
                approval: None,
            }],
        };
        let attestation = Attestation::sign(
            Claims {
                task: TaskIdentity {
                    namespace: "ns".into(),
                    name: "t".into(),
                    uid: "u".into(),
                },
                module_sha256: "ab".repeat(32),
                input_sha256: "cd".repeat(32),
                config_sha256: "ef".repeat(32),
                requirements: vec![CapabilityName::Storage],
                seed: [1; 32],
                limits_applied: limits.clone(),
                failure: None,
                output_sha256: "ef".repeat(32),
                resources_used: ari_runtime::ResourcesUsed::default(),
                models: vec![calls.clone()],
                children: Vec::new(),
                approvals: Vec::new(),
                input_required: false,
                conversation: None,
                trace_sha256: [2; 32],
                executor: "pod".into(),
            },
            &key,
        );
        let outcome = TaskOutcome {
            task_id: "t".into(),
            output: Vec::new(),
            output_sha256: "ef".repeat(32),
            resources_used: ari_runtime::ResourcesUsed::default(),
            limits_applied: limits,
            attestation,
            failure: None,
            estimate: Some(ari_crds::Estimate {
                fuel: 7,
                duration_millis: 1,
                memory_bytes: 2,
            }),
            trace: ari_runtime::Trace::default(),
            logs: Vec::new(),
            children: Vec::new(),
            delegations_refused: 0,
            models: vec![calls.clone()],
            input_required: false,
            output_not_kept: false,
            storage_conflict: false,
        };
        let mut status = TaskStatus::default();
        status.claim("pod", None, now()).expect("claim");
        finish_with_outcome(&mut status, None, &outcome, None).expect("finish a running task");
        assert_eq!(
            status.limits_applied.as_ref(),
            Some(&outcome.limits_applied)
        );
        assert_eq!(status.estimate, outcome.estimate);
        assert_eq!(status.models, [calls]);
        let back = status.attestation.expect("set");
        assert_eq!(back, outcome.attestation);
        assert!(back.verify(Some(&key.verifying_key())).is_ok());
    }
}
