//! The step model shared by the `Plan` resource and by planner proposals.
//!
//! The same types are the Plan CRD's `spec.steps` and a proposal's `steps`, so a plan written
//! by hand and one proposed by a planner are validated and run by the same code. The schema
//! attributes bound every field; [`crate::validate`] checks the same bounds again, because a
//! proposal comes from a guest's output and never went through the API server's schema.

use ari_model::TaskRequirements;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Hard cap on steps in one plan, whatever `limits.maxSteps` says: the Plan's status holds
/// one entry per step and must stay small.
pub const MAX_STEPS: u32 = 128;
/// `limits.maxSteps` when the Plan leaves it out.
pub const DEFAULT_MAX_STEPS: u32 = 32;
/// Hard cap on steps running at once.
pub const MAX_PARALLEL: u32 = 64;
/// `limits.maxParallel` when the Plan leaves it out.
pub const DEFAULT_MAX_PARALLEL: u32 = 8;
/// Most re-runs of a failed step.
pub const MAX_RETRY: u32 = 5;
/// Longest literal input of a step (inputs taken from outputs are bounded by the Task's own
/// input limit when the step starts).
pub const MAX_LITERAL_INPUT: usize = 65_536;
/// Upper bound on any fuel figure (as for Agents and Tasks).
pub const MAX_FUEL: u64 = 1_000_000_000_000;
/// Longest deadline, in seconds (a week, as for Tasks).
pub const MAX_DEADLINE_SECONDS: u32 = 604_800;
/// Most `dependsOn`, `inputFrom` and `outputs` entries of one step.
pub const MAX_REFS: usize = 64;
/// Longest step name: a DNS label, so `<plan>-<step>` is a valid Task name.
pub const MAX_STEP_NAME: usize = 63;
/// Longest output field name a step may declare.
pub const MAX_FIELD_NAME: usize = 253;
/// The name of the planner's Task suffix (`<plan>-planner`): no step may take it.
pub const PLANNER_STEP: &str = "planner";

/// An Agent by name, in the Plan's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct AgentRef {
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// One step: an Agent run as a Task, with a literal input or inputs taken from earlier steps.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Unique in the plan; a DNS label. The step's Task is named `<plan>-<step>` (see
    /// docs/plans.md for retries and taken names).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The Agent that runs the step.
    pub agent_ref: AgentRef,
    /// Literal UTF-8 input. At most one of `input` and `inputFrom`; neither means empty input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65_536))]
    pub input: Option<String>,
    /// Input taken from earlier steps' outputs (each one is an implicit dependency). One entry
    /// without `key` passes that output (or field) as it is; several, or any `key`, make a JSON
    /// object of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub input_from: Vec<InputRef>,
    /// Steps that must succeed before this one starts (beside those in `inputFrom`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub depends_on: Vec<String>,
    /// Top-level fields of this step's JSON output that later steps may take with
    /// `inputFrom.field`; a field not declared here cannot be referenced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub outputs: Vec<String>,
    /// Capabilities the step needs; each must be within its Agent's grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<TaskRequirements>,
    /// Fuel budget of the step's Task; at most its Agent's limit. Default: that limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub fuel: Option<u64>,
    /// Model-token budget of the step's Task; at most its Agent's `limits.tokens`. Default:
    /// that limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000_000_000u64))]
    pub tokens: Option<u64>,
    /// Seconds the step's Task may take; at most the plan's deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub deadline_seconds: Option<u32>,
    /// Re-runs of the step after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
}

/// Where a step's input comes from: an earlier step's output, whole or one JSON field.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct InputRef {
    /// The step whose output is taken.
    #[schemars(length(min = 1, max = 63))]
    pub step: String,
    /// A top-level field of that step's JSON output (declared in its `outputs`); absent
    /// means the whole output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub field: Option<String>,
    /// The name the value gets in the JSON object built from several inputs. Default: the
    /// field name, else the step name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

impl InputRef {
    /// The key of this value in a combined input object.
    pub fn key(&self) -> &str {
        self.key
            .as_deref()
            .or(self.field.as_deref())
            .unwrap_or(&self.step)
    }
}

/// How often a failed step is run again (as a new Task, `<plan>-<step>.<attempt>`). Refusals
/// (`CapabilityDenied`, `ModeRefused`) and cancellations are never retried: the same Task
/// would be refused again.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Re-runs after the first attempt; at most 5.
    #[schemars(range(min = 0, max = 5))]
    pub limit: u32,
}

impl Step {
    /// Re-runs allowed after a failure.
    pub fn retry_limit(&self) -> u32 {
        self.retry.as_ref().map_or(0, |r| r.limit)
    }

    /// Every step this one waits for: `dependsOn` then `inputFrom`, each name once.
    pub fn dependencies(&self) -> Vec<&str> {
        let mut deps: Vec<&str> = Vec::new();
        let named = self.depends_on.iter().map(String::as_str);
        for d in named.chain(self.input_from.iter().map(|r| r.step.as_str())) {
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        deps
    }
}

/// Bounds on a whole plan.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Most steps (default 32, at most 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 128))]
    pub max_steps: Option<u32>,
    /// Most steps running at once (default 8, at most 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_parallel: Option<u32>,
    /// Most fuel all steps may burn together, retries included, counting each step at its
    /// budget (its `fuel`, else its Agent's limit). Absent: no total bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub fuel: Option<u64>,
    /// Most model tokens all steps may spend together, retries included, counting each step at
    /// its budget (its `tokens`, else its Agent's `limits.tokens`). Absent: no total bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub tokens: Option<u64>,
    /// Seconds from the Plan's creation by which every step must be done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub deadline_seconds: Option<u32>,
}

impl Limits {
    pub fn max_steps(&self) -> u32 {
        self.max_steps.unwrap_or(DEFAULT_MAX_STEPS)
    }

    pub fn max_parallel(&self) -> u32 {
        self.max_parallel.unwrap_or(DEFAULT_MAX_PARALLEL)
    }

    /// The tighter of two sets of limits, field by field (a proposal may only lower a Plan's).
    pub fn tightest(&self, other: &Limits) -> Limits {
        fn min<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        Limits {
            max_steps: min(self.max_steps, other.max_steps),
            max_parallel: min(self.max_parallel, other.max_parallel),
            fuel: min(self.fuel, other.fuel),
            tokens: min(self.tokens, other.tokens),
            deadline_seconds: min(self.deadline_seconds, other.deadline_seconds),
        }
    }
}

/// What a planner Agent outputs: a plan for the operator to validate, never to trust.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "ari plan proposal")]
pub struct Proposal {
    /// The steps, in the order they are listed in status.
    pub steps: Vec<Step>,
    /// Limits the planner asks for; each may only lower the Plan's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Free text for humans (why this plan); recorded, never acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub summary: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_list_depends_on_then_inputs_each_once() {
        let s = Step {
            name: "c".into(),
            depends_on: vec!["a".into(), "b".into()],
            input_from: vec![
                InputRef {
                    step: "b".into(),
                    ..Default::default()
                },
                InputRef {
                    step: "d".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(s.dependencies(), ["a", "b", "d"]);
    }

    #[test]
    fn an_input_key_defaults_to_the_field_then_the_step() {
        let mut r = InputRef {
            step: "count".into(),
            ..Default::default()
        };
        assert_eq!(r.key(), "count");
        r.field = Some("words".into());
        assert_eq!(r.key(), "words");
        r.key = Some("n".into());
        assert_eq!(r.key(), "n");
    }

    #[test]
    fn a_proposal_may_only_lower_the_plan_limits() {
        let plan = Limits {
            max_steps: Some(10),
            max_parallel: None,
            fuel: Some(100),
            tokens: Some(1_000),
            deadline_seconds: Some(60),
        };
        let asked = Limits {
            max_steps: Some(20),
            max_parallel: Some(2),
            fuel: Some(50),
            tokens: Some(5_000),
            deadline_seconds: None,
        };
        let t = plan.tightest(&asked);
        assert_eq!(
            (t.max_steps, t.max_parallel, t.fuel, t.deadline_seconds),
            (Some(10), Some(2), Some(50), Some(60))
        );
        assert_eq!(t.tokens, Some(1_000));
    }

    #[test]
    fn unknown_fields_in_a_proposal_are_refused_not_ignored() {
        let typo = r#"{"steps":[{"name":"a","agentRef":{"name":"echo"},"dependOn":["b"]}]}"#;
        let err = serde_json::from_str::<Proposal>(typo)
            .map(|_| ())
            .unwrap_err();
        assert!(err.to_string().contains("dependOn"), "{err}");
    }
}
