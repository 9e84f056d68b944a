//! Agent and Task custom resources of ari (group `ari.dev`, version `v1alpha1`).
//!
//! The types are the contract between the operator and the executor; the CRD YAML in this
//! crate's directory is generated from them (`cargo run -p ari-crds --bin crdgen`).

pub mod a2a;
pub mod admission;
pub mod agent;
pub mod capability;
pub mod card;
pub mod conditions;
pub mod conversation;
pub mod decode;
pub mod delegation;
pub mod items;
pub mod lifecycle;
pub mod mcp_server;
pub mod model_config;
pub mod names;
pub mod plan;
pub mod plan_view;
pub mod pool;
pub mod replicas;
pub mod task;
pub mod verify;

pub use a2a::{
    A2aSkill, A2aSpec, LiveLog, LiveText, LiveToolEvent, LiveTools, LiveUsage, MediaType, ShortText,
};
pub use admission::{Refusal, TaskOrigin, admit};
pub use agent::{
    Agent, AgentMode, AgentSpec, AgentStatus, ConfigMapModule, DelegationGrant, EffectiveLimits,
    EmptyGrant, ExecutorSpec, GrantSet, Limits, ModuleSource, NetworkGrant, PullSecretRef,
    SecretKeyRef, SigningGrant, StorageGrant,
};
pub use ari_model::ToolOutcome;
/// Adding a decision to a Task's `spec.approvals`: the one rule every writer follows.
pub use ari_model::{NotAdded, add_decision};
pub use capability::{
    CapabilityName, Denied, TaskRequirements, TokensTooLarge, fuel_within_limit,
    requirements_within_grants, tokens_within_limit,
};
pub use delegation::{ChildStatus, ParentRef, admit_child, pool_binding};
pub use mcp_server::{
    DiscoveredTool, MCPServer, MCPServerReason, MCPServerSpec, MCPServerStatus, SecretHeader,
};
pub use model_config::{
    ModelConfig, ModelConfigReason, ModelConfigSpec, ModelConfigStatus, ModelDefaults, ModelLimits,
    Prices,
};
pub use plan::{
    HistoryEntry, HistoryEvent, Plan, PlanPhase, PlanReason, PlanSpec, PlanStatus, PlanStepReason,
    Planner, StepPhase, StepReason, StepStatus,
};
pub use pool::{ExecutorPool, ExecutorPoolSpec, ExecutorPoolStatus};
pub use replicas::{MAX_REPLICAS, ReplicaRecord, Verdict, Verification, may_run_next, verdict};
pub use task::{
    AgentRef, Approval, Attestation, CallKind, CallSubject, Cost, Decision, DelegationApplied,
    Ending, Estimate, InputError, InputFrom, InputSource, KeyRef, LimitsApplied, ModelCalls,
    OutputRef, PendingApproval, ResourcesUsed, Task, TaskIdentity, TaskPhase, TaskReason, TaskSpec,
    TaskStatus, TokenUsage, TracePolicy, TraceRef, format_duration_millis,
};

use kube::CustomResourceExt;

/// The CRD YAML for `Agent`, as checked in at `crds/ari.dev_agents.yaml`.
pub fn agent_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&Agent::crd())
}

/// The CRD YAML for `Task`, as checked in at `crds/ari.dev_tasks.yaml`.
pub fn task_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&Task::crd())
}

/// The CRD YAML for `Plan`, as checked in at `crds/ari.dev_plans.yaml`.
pub fn plan_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&Plan::crd())
}

/// The CRD YAML for `ModelConfig`, as checked in at `crds/ari.dev_modelconfigs.yaml`.
pub fn model_config_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&ModelConfig::crd())
}

/// The CRD YAML for `ExecutorPool`, as checked in at `crds/ari.dev_executorpools.yaml`.
pub fn executor_pool_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&ExecutorPool::crd())
}

/// The CRD YAML for `MCPServer`, as checked in at `crds/ari.dev_mcpservers.yaml`.
pub fn mcp_server_crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&MCPServer::crd())
}
