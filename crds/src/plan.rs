//! The `Plan` custom resource: a graph of steps, each run as a Task owned by the Plan, given
//! by hand (`spec.steps`) or proposed by a planner Agent (`spec.planner`) and validated by
//! `ari_plan::validate` before anything runs.

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use ari_plan::{Limits, Step, Violation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TaskReason;
use crate::task::AgentRef;

/// Most violations kept in status (the count says how many there were).
pub const MAX_VIOLATIONS: usize = 64;
/// Most history entries kept in status: enough for every stage of a plan at the step cap;
/// beyond it the oldest step entries go first (`historyDropped` counts them).
pub const MAX_HISTORY: usize = 300;
/// Longest history message.
pub const HISTORY_MESSAGE_MAX: usize = 200;

/// A Plan: steps run as Tasks in dependency order, outputs flowing into later inputs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "Plan",
    namespaced,
    status = "PlanStatus",
    shortname = "pl",
    category = "ari",
    derive = "PartialEq",
    cel,
    doc = "A Plan: a graph of steps, each a Task of an Agent, validated before any runs; given by hand or proposed by a planner Agent.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(name = "Steps", type_ = "string", json_path = ".status.progress"),
    printcolumn(name = "Duration", type_ = "string", json_path = ".status.duration"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.steps) != has(self.planner)").message("exactly one of steps and planner must be set"),
    // Immutable but for `cancelled`, which may be set (once: it cannot be unset).
    validation = Rule::new("self == oldSelf || (has(self.cancelled) && self.cancelled && has(self.steps) == has(oldSelf.steps) && (!has(self.steps) || self.steps == oldSelf.steps) && has(self.planner) == has(oldSelf.planner) && (!has(self.planner) || self.planner == oldSelf.planner) && has(self.limits) == has(oldSelf.limits) && (!has(self.limits) || self.limits == oldSelf.limits) && has(self.allowedAgents) == has(oldSelf.allowedAgents) && (!has(self.allowedAgents) || self.allowedAgents == oldSelf.allowedAgents))").message("Plan spec is immutable except that cancelled may be set to true"),
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    /// The steps, when written by hand. Exactly one of `steps` and `planner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub steps: Option<Vec<Step>>,
    /// A planner Agent whose output is a proposal (see docs/plans.md); validated like `steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<Planner>,
    /// Bounds on the whole plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// The only Agents a step may run on (the validator refuses any other, rule
    /// `agent-not-allowed`). Absent: any Agent of the namespace, so set it whenever a planner
    /// proposes the steps. The planner's own Agent is `planner.agentRef`, not held to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub allowed_agents: Option<Vec<String>>,
    /// Set to `true` to cancel the Plan: no step starts any more, running steps are cancelled.
    /// Set once; it cannot be unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}

/// The planner: an Agent run as a Task (`<plan>-planner`) whose output is a plan proposal.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Planner {
    pub agent_ref: AgentRef,
    /// What to plan for: the planner Task's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65_536))]
    pub input: Option<String>,
    /// Fuel budget of the planner Task; at most its Agent's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub fuel: Option<u64>,
    /// Model-token budget of the planner Task; at most its Agent's `limits.tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000_000_000u64))]
    pub tokens: Option<u64>,
}

/// Where a Plan is.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PlanPhase {
    /// Not looked at yet.
    #[default]
    Pending,
    /// The planner Task runs; nothing else does.
    Planning,
    /// Validated; steps run.
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl PlanPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanPhase::Pending => "Pending",
            PlanPhase::Planning => "Planning",
            PlanPhase::Running => "Running",
            PlanPhase::Succeeded => "Succeeded",
            PlanPhase::Failed => "Failed",
            PlanPhase::Cancelled => "Cancelled",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            PlanPhase::Succeeded | PlanPhase::Failed | PlanPhase::Cancelled
        )
    }
}

/// Why a Plan ended (the reason of its `Succeeded` condition).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanReason {
    /// Every step succeeded.
    Completed,
    /// The validator refused the plan; `status.violations` says why. Nothing ran.
    Rejected,
    /// The planner Task did not succeed. Nothing else ran.
    PlannerFailed,
    /// The planner's output is not a proposal (not JSON, or not the schema). Nothing ran.
    InvalidProposal,
    /// A step failed after its retries; its dependants did not run.
    StepFailed,
    /// `limits.deadlineSeconds` passed; running steps were cancelled.
    DeadlineExceeded,
    /// `spec.cancelled`; running steps were cancelled.
    Cancelled,
}

impl PlanReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanReason::Completed => "Completed",
            PlanReason::Rejected => "Rejected",
            PlanReason::PlannerFailed => "PlannerFailed",
            PlanReason::InvalidProposal => "InvalidProposal",
            PlanReason::StepFailed => "StepFailed",
            PlanReason::DeadlineExceeded => "DeadlineExceeded",
            PlanReason::Cancelled => "Cancelled",
        }
    }
}

/// Where one step is.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StepPhase {
    /// Its dependencies have not all succeeded yet (or the parallelism limit holds it).
    #[default]
    Waiting,
    /// Its Task exists and has not finished.
    Running,
    Succeeded,
    /// Its last attempt failed, or it never ran because a dependency failed
    /// (`DependencyFailed`) or its input could not be built (`InputUnavailable`).
    Failed,
    /// The Plan was cancelled or ran out of time before it finished.
    Cancelled,
}

impl StepPhase {
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            StepPhase::Succeeded | StepPhase::Failed | StepPhase::Cancelled
        )
    }
}

/// Observed state of a Plan, written by the operator only.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PlanPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<PlanReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `Validated` (the verdict) and `Succeeded` (metav1.Condition shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Wall time from start to end, e.g. `1.234s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// `succeeded/total` steps, for `kubectl get plans`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Every rule the plan breaks (the first 64; `violationCount` has the total).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub violation_count: Option<u32>,
    /// The planner's Task, when there is a planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner_task: Option<String>,
    /// uid of the planner's Task, recorded when the operator created it: no other Task, whatever
    /// its name, labels or owner references, is taken as the planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner_task_uid: Option<String>,
    /// Hex SHA-256 of the steps that were validated (the planner's output, or `spec.steps` as
    /// JSON): what was judged is what runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal_sha256: Option<String>,
    /// One entry per step, in declaration order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
    /// Fuel the finished steps burned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_used: Option<u64>,
    /// Model tokens the steps spent (their children's included); `limits.tokens` bounds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,
    /// Every stage in order (bounded; see `historyDropped`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
    /// Entries dropped from `history` to keep status small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub history_dropped: Option<u32>,
}

/// One step's state and, once it ran, what proves it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    pub name: String,
    pub phase: StepPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StepReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Task of the latest attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// uid of that Task, recorded when the operator created it: no other Task, whatever its
    /// name, labels or owner references, is taken as the step's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_uid: Option<String>,
    /// Attempts started (1 + retries used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    /// Hex SHA-256 of the Task's signed attestation (`ari plan verify` checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_used: Option<u64>,
    /// Model tokens the Task spent, its children's included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,
}

/// One stage of the run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// 1, 2, 3, … across the Plan's life, gaps only where entries were dropped.
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub seq: u32,
    pub time: Time,
    pub event: HistoryEvent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub message: String,
}

/// A stage of a Plan's run: a `status.history` entry's `event`, and the reason of the Event
/// published with it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryEvent {
    /// The planner's Task was created.
    PlannerStarted,
    /// The steps to validate are known (the message has their digest).
    Proposed,
    /// The validator accepted the steps.
    Validated,
    /// The validator refused them; nothing runs.
    Rejected,
    /// A step's first Task was created.
    StepStarted,
    /// A failed step runs again, as a new Task.
    StepRetried,
    /// A step ended (phase and reason in the message).
    StepFinished,
    /// The Plan was cancelled or ran out of time: no step starts, running ones are cancelled.
    Cancelling,
    /// The Plan ended.
    PlanFinished,
}

impl HistoryEvent {
    pub const ALL: [HistoryEvent; 9] = [
        HistoryEvent::PlannerStarted,
        HistoryEvent::Proposed,
        HistoryEvent::Validated,
        HistoryEvent::Rejected,
        HistoryEvent::StepStarted,
        HistoryEvent::StepRetried,
        HistoryEvent::StepFinished,
        HistoryEvent::Cancelling,
        HistoryEvent::PlanFinished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HistoryEvent::PlannerStarted => "PlannerStarted",
            HistoryEvent::Proposed => "Proposed",
            HistoryEvent::Validated => "Validated",
            HistoryEvent::Rejected => "Rejected",
            HistoryEvent::StepStarted => "StepStarted",
            HistoryEvent::StepRetried => "StepRetried",
            HistoryEvent::StepFinished => "StepFinished",
            HistoryEvent::Cancelling => "Cancelling",
            HistoryEvent::PlanFinished => "PlanFinished",
        }
    }
}

impl PartialEq<&str> for HistoryEvent {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for HistoryEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason the Plan gives a step, rather than its Task. (A Plan that is cancelled or runs
/// out of time gives its waiting steps the Task reasons `Cancelled` and `DeadlineExceeded`.)
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanStepReason {
    /// A step it depends on failed, so it never ran.
    DependencyFailed,
    /// Its input could not be built from its dependencies' outputs.
    InputUnavailable,
    /// Its Task was deleted (by hand) before the Plan finished.
    TaskDeleted,
}

impl PlanStepReason {
    pub const ALL: [PlanStepReason; 3] = [
        PlanStepReason::DependencyFailed,
        PlanStepReason::InputUnavailable,
        PlanStepReason::TaskDeleted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PlanStepReason::DependencyFailed => "DependencyFailed",
            PlanStepReason::InputUnavailable => "InputUnavailable",
            PlanStepReason::TaskDeleted => "TaskDeleted",
        }
    }
}

/// Why a step ended: its Task's reason or one of the Plan's own, one string in status (the
/// two sets share no name).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum StepReason {
    Task(TaskReason),
    Plan(PlanStepReason),
}

impl StepReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StepReason::Task(r) => r.as_str(),
            StepReason::Plan(r) => r.as_str(),
        }
    }

    /// Every reason a step can carry.
    pub fn all() -> impl Iterator<Item = StepReason> {
        let task = TaskReason::ALL.into_iter().map(StepReason::Task);
        task.chain(PlanStepReason::ALL.into_iter().map(StepReason::Plan))
    }
}

impl From<TaskReason> for StepReason {
    fn from(r: TaskReason) -> Self {
        StepReason::Task(r)
    }
}

impl From<PlanStepReason> for StepReason {
    fn from(r: PlanStepReason) -> Self {
        StepReason::Plan(r)
    }
}

impl std::fmt::Display for StepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One string enum in the schema (an untagged union would be an `anyOf`, which a structural
/// CRD schema cannot say as simply).
impl JsonSchema for StepReason {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StepReason".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = StepReason::all().map(StepReason::as_str).collect();
        schemars::json_schema!({
            "description": "The Task's reason, or one of the Plan's own (`DependencyFailed`, `InputUnavailable`, `TaskDeleted`).",
            "type": "string",
            "enum": names,
        })
    }
}

impl Plan {
    /// The phase, `Pending` before the operator wrote any.
    pub fn phase(&self) -> PlanPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }

    /// `spec.cancelled`, or being deleted.
    pub fn is_cancelled(&self) -> bool {
        self.spec.cancelled == Some(true) || self.metadata.deletion_timestamp.is_some()
    }
}
