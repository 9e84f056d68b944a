//! The `Task` custom resource: one input for one Agent, and its result.

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use ari_model::{
    Approval, Attestation, CallKind, CallSubject, Cost, Decision, DelegationApplied, Ending,
    Estimate, LimitsApplied, ModelCalls, ResourcesUsed, TaskIdentity, TaskPhase, TaskReason,
    TokenUsage,
};

use crate::a2a::LiveLog;
use crate::capability::TaskRequirements;
use crate::delegation::{ChildStatus, ParentRef};
use crate::items::ItemsStatus;
pub use crate::replicas::{MAX_REPLICAS, ReplicaRecord, Verification};

/// Most retries after executor loss a Task may ask for.
pub const MAX_RETRIES: u32 = 10;
/// Most entries of `status.models`: as many models as an Agent may be granted.
pub const MAX_LISTED_MODELS: usize = 32;
/// Output up to this many bytes goes inline into status; larger output goes to a ConfigMap.
pub const INLINE_OUTPUT_MAX_BYTES: usize = 4096;

/// A Task: an input for an Agent; its status carries the output, usage and attestation.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "Task",
    namespaced,
    status = "TaskStatus",
    shortname = "tk",
    category = "ari",
    derive = "PartialEq",
    cel,
    selectable = ".spec.agentRef.name",
    doc = "A Task: one input for an Agent; status carries output, resources used and a signed attestation.",
    printcolumn(name = "Agent", type_ = "string", json_path = ".spec.agentRef.name"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(
        name = "Fuel",
        type_ = "integer",
        json_path = ".status.resourcesUsed.fuel"
    ),
    printcolumn(
        name = "Tokens In",
        type_ = "integer",
        json_path = ".status.resourcesUsed.inputTokens"
    ),
    printcolumn(
        name = "Tokens Out",
        type_ = "integer",
        json_path = ".status.resourcesUsed.outputTokens"
    ),
    printcolumn(name = "Duration", type_ = "string", json_path = ".status.duration"),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Verified\")].status",
        priority = "1"
    ),
    printcolumn(
        name = "Parent",
        type_ = "string",
        json_path = ".spec.parent.name",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    // Immutable but for `cancelled`, which may be set (once: it cannot be unset), and
    // `approvals`, which only grows (an entry once written stays as written).
    validation = Rule::new("self == oldSelf || (((has(self.cancelled) && self.cancelled) || (has(self.cancelled) == has(oldSelf.cancelled) && (!has(self.cancelled) || self.cancelled == oldSelf.cancelled))) && (!has(oldSelf.approvals) || (has(self.approvals) && self.approvals.size() >= oldSelf.approvals.size() && oldSelf.approvals.all(a, self.approvals.exists(b, b == a)))) && self.agentRef == oldSelf.agentRef && has(self.input) == has(oldSelf.input) && (!has(self.input) || self.input == oldSelf.input) && has(self.inputBase64) == has(oldSelf.inputBase64) && (!has(self.inputBase64) || self.inputBase64 == oldSelf.inputBase64) && has(self.inputFrom) == has(oldSelf.inputFrom) && (!has(self.inputFrom) || self.inputFrom == oldSelf.inputFrom) && has(self.requirements) == has(oldSelf.requirements) && (!has(self.requirements) || self.requirements == oldSelf.requirements) && has(self.deadlineSeconds) == has(oldSelf.deadlineSeconds) && (!has(self.deadlineSeconds) || self.deadlineSeconds == oldSelf.deadlineSeconds) && has(self.fuel) == has(oldSelf.fuel) && (!has(self.fuel) || self.fuel == oldSelf.fuel) && has(self.tokens) == has(oldSelf.tokens) && (!has(self.tokens) || self.tokens == oldSelf.tokens) && has(self.seed) == has(oldSelf.seed) && (!has(self.seed) || self.seed == oldSelf.seed) && has(self.retries) == has(oldSelf.retries) && (!has(self.retries) || self.retries == oldSelf.retries) && has(self.ttlSecondsAfterFinished) == has(oldSelf.ttlSecondsAfterFinished) && (!has(self.ttlSecondsAfterFinished) || self.ttlSecondsAfterFinished == oldSelf.ttlSecondsAfterFinished) && has(self.parent) == has(oldSelf.parent) && (!has(self.parent) || self.parent == oldSelf.parent) && has(self.continues) == has(oldSelf.continues) && (!has(self.continues) || self.continues == oldSelf.continues) && has(self.trace) == has(oldSelf.trace) && (!has(self.trace) || self.trace == oldSelf.trace) && has(self.verification) == has(oldSelf.verification) && (!has(self.verification) || self.verification == oldSelf.verification) && has(self.items) == has(oldSelf.items) && (!has(self.items) || self.items == oldSelf.items))").message("Task spec is immutable except that cancelled may be set to true and approvals may be added to"),
    validation = Rule::new("(has(self.input) ? 1 : 0) + (has(self.inputBase64) ? 1 : 0) + (has(self.inputFrom) ? 1 : 0) + (has(self.items) ? 1 : 0) == 1").message("exactly one of input, inputBase64, inputFrom, items must be set"),
    validation = Rule::new("!has(self.items) || (!has(self.continues) && !has(self.verification))").message("a Task of items cannot continue a conversation or be verified by replicas (docs/items.md)"),
)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// The Agent (same namespace) that runs this Task.
    pub agent_ref: AgentRef,
    /// UTF-8 input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1_048_576))]
    pub input: Option<String>,
    /// Binary input, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1_398_104), extend("format" = "byte"))]
    pub input_base64: Option<String>,
    /// Input from a ConfigMap or Secret key (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_from: Option<InputFrom>,
    /// Capabilities the Task needs; beyond the Agent's grants it fails with `CapabilityDenied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<TaskRequirements>,
    /// Seconds after creation by which the Task must finish (`DeadlineExceeded` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub deadline_seconds: Option<u32>,
    /// Fuel budget; at most the Agent's `limits.fuel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub fuel: Option<u64>,
    /// Model token budget (input and output together); at most the Agent's `limits.tokens`.
    /// 0 allows no model call (a child whose parent had no tokens to spare gets 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000_000_000u64))]
    pub tokens: Option<u64>,
    /// 32-byte PRNG seed as 64 hex digits; generated and recorded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{64}$"))]
    pub seed: Option<String>,
    /// Re-runs after executor loss (never after a guest trap). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub retries: Option<u32>,
    /// Delete the Task this many seconds after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub ttl_seconds_after_finished: Option<u32>,
    /// Set to `true` to cancel the Task: a Pending one never runs, a Running one is stopped
    /// within a second. Either ends `Cancelled` with no output. Set once; it cannot be unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
    /// The Task that delegated this one. Written only by an executor when a guest delegates;
    /// a user who sets it is refused (see docs/delegation.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// The Task this one replies to: the previous turn of a conversation, which ended asking
    /// for input (`Succeeded`, reason `InputRequired`, its output the question). This Task's
    /// input is the reply; its guest reads the earlier turns (`interface conversation`).
    /// Same Agent and same A2A caller as that turn, or the Task ends `ConversationRefused`
    /// (docs/conversations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub continues: Option<String>,
    /// `Keep`: the host-call trace is kept beside the Task (a ConfigMap it owns), so the run
    /// can be replayed from the cluster (`kubectl ari verify`); `Digest` (the default): only
    /// its digest, which the attestation signs. The Agent's `spec.trace` when absent. A kept
    /// trace holds what the guest saw (HTTP answers, model answers, tool results, never a
    /// credential): whoever may read the namespace's ConfigMaps may read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TracePolicy>,
    /// Decisions about calls that wait for approval (`status.pendingApproval` names the call).
    /// Only grows; each entry's `approver` must be the user who writes it (the chart's
    /// admission policy checks). `kubectl ari approve|reject task/NAME` writes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["call"]))]
    pub approvals: Option<Vec<Approval>>,
    /// Run the Task on `replicas` executors and compare the runs (docs/verification.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    /// Many UTF-8 inputs instead of one: each runs as its own instance, in turn, with the
    /// Task's limits; the output is the results document, a line per item with its output
    /// and signed attestation (docs/items.md). One claim and one final write for all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), inner(length(max = 4096)))]
    pub items: Option<Vec<String>>,
}

/// A call of the running Task that waits for a person's decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The id a decision names (`spec.approvals[].call`).
    #[schemars(length(max = 64))]
    pub call: String,
    /// What kind of call waits: `Tool` (an MCP tool call), `Delegation` (a child Task on
    /// another Agent) or `Network` (an HTTP request). Absent means `Tool`.
    #[serde(default)]
    pub kind: CallKind,
    /// A tool call's MCP server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub server: String,
    /// A tool call's tool.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 128))]
    pub tool: String,
    /// A delegation's Agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub agent: Option<String>,
    /// A request's method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub method: Option<String>,
    /// A request's URL, without user or password, cut to 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub url: Option<String>,
    /// What the call sends, cut to 256 bytes: a tool's arguments as the guest wrote them, a
    /// child's input, a request's body (as text).
    #[schemars(length(max = 256))]
    pub arguments: String,
    pub since: Time,
}

/// Most bytes of a waiting call's `arguments` a Task's status shows.
pub const PREVIEW_BYTES: usize = 256;
/// Most bytes of a waiting request's URL a Task's status shows.
pub const URL_PREVIEW_BYTES: usize = 512;

impl PendingApproval {
    /// `call` (doing `subject`, sending `arguments`) as a Task's status shows it, each part cut
    /// to its bound on a character boundary.
    pub fn new(call: String, subject: &CallSubject, arguments: &str, since: Time) -> Self {
        let mut pending = Self {
            call,
            kind: subject.kind(),
            server: String::new(),
            tool: String::new(),
            agent: None,
            method: None,
            url: None,
            arguments: cut(arguments, PREVIEW_BYTES),
            since,
        };
        match subject {
            CallSubject::Tool { server, tool } => {
                pending.server = cut(server, 253);
                pending.tool = cut(tool, 128);
            }
            CallSubject::Delegation { agent } => pending.agent = Some(cut(agent, 253)),
            CallSubject::Network { method, url } => {
                pending.method = Some(cut(method, 16));
                pending.url = Some(cut(url, URL_PREVIEW_BYTES));
            }
        }
        pending
    }

    /// The waiting call in words, for a condition's message.
    pub fn describe(&self) -> String {
        let subject = match self.kind {
            CallKind::Tool => CallSubject::Tool {
                server: self.server.clone(),
                tool: self.tool.clone(),
            },
            CallKind::Delegation => CallSubject::Delegation {
                agent: self.agent.clone().unwrap_or_default(),
            },
            CallKind::Network => CallSubject::Network {
                method: self.method.clone().unwrap_or_default(),
                url: self.url.clone().unwrap_or_default(),
            },
        };
        format!("call {} ({subject})", self.call)
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Whether a Task's host-call trace is kept, or only its digest.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TracePolicy {
    /// Only the digest, in the attestation.
    #[default]
    Digest,
    /// The trace too, compressed, in a ConfigMap the Task owns.
    Keep,
}

impl TraceRef {
    /// A trace of `compressed_bytes` that was not kept, and why.
    pub fn not_kept(compressed_bytes: u64, why: String) -> Self {
        Self {
            config_map: None,
            key: None,
            compressed_bytes,
            not_kept: Some(why),
        }
    }
}

/// Where a Task's kept trace is, or why it was not kept.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TraceRef {
    /// The ConfigMap (owned by the Task) holding the trace's JSON, gzip-compressed, under
    /// `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Bytes of the compressed trace.
    pub compressed_bytes: u64,
    /// Why it was not kept: larger than a ConfigMap holds, or the write failed. The run's
    /// result stands either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_kept: Option<String>,
}

impl TaskSpec {
    /// A spec for `agent` with everything else left to defaults; set one input before use.
    pub fn for_agent(agent: impl Into<String>) -> Self {
        Self {
            agent_ref: AgentRef { name: agent.into() },
            input: None,
            input_base64: None,
            input_from: None,
            requirements: None,
            deadline_seconds: None,
            fuel: None,
            tokens: None,
            seed: None,
            retries: None,
            ttl_seconds_after_finished: None,
            cancelled: None,
            parent: None,
            continues: None,
            trace: None,
            approvals: None,
            verification: None,
            items: None,
        }
    }
}

/// Reference to an Agent in the Task's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct AgentRef {
    /// A DNS subdomain, as every Agent name is (it also ends up in request paths).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// Input from a key of a ConfigMap or Secret; exactly one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("has(self.configMapKeyRef) != has(self.secretKeyRef)").message("exactly one of inputFrom.configMapKeyRef or inputFrom.secretKeyRef must be set"))]
#[serde(rename_all = "camelCase")]
pub struct InputFrom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeyRef>,
}

/// A key of a ConfigMap or Secret in the Task's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct KeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Observed state of a Task, written by the executor (claim, heartbeat, result) and the
/// operator (rejection, deadline, executor loss).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Absent means `Pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<TaskPhase>,
    /// Reason of the `Succeeded` condition once finished (mirrored for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<TaskReason>,
    /// Human-readable detail of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `Succeeded` (metav1.Condition shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pod name of the executor that claimed the Task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// Claims so far (1 on the first run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Refreshed by the executor while the Task runs; a stale heartbeat means a lost executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Human-readable wall time of the run, e.g. `12ms` (see `format_duration_millis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Small UTF-8 output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Small binary output, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
    /// Large output: a ConfigMap owned by the Task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<OutputRef>,
    /// Where the host-call trace is kept (`spec.trace: Keep`), or why it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_ref: Option<TraceRef>,
    /// The call this Running Task waits on a person's decision for (condition
    /// `AwaitingApproval`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<PendingApproval>,
    /// Hex SHA-256 of the output bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_used: Option<ResourcesUsed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_applied: Option<LimitsApplied>,
    /// The agent's own estimate of this Task (its `estimate` export), beside what was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
    /// The Task that delegated this one (`spec.parent.name`), for `kubectl get` and queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// A Task of items: how many ran and how they ended (their results are the output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<ItemsStatus>,
    /// The children this Task delegated to, in the order it started them (at most
    /// 64 listed; `resourcesUsed.childrenFuel` covers them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub children: Vec<ChildStatus>,
    /// The uid of each child Task this Task's executors created, by child index, written as
    /// each is created. A re-run parent adopts a child of the expected name only if its uid is
    /// here: a Task of that name anyone else created is refused, never followed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 1024))]
    pub child_uids: BTreeMap<String, String>,
    /// Delegation calls refused by the grant or its limits (depth, children, Agent not
    /// granted): a guest delegating in a loop shows here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4_294_967_295u32))]
    pub delegations_refused: Option<u32>,
    /// Each model the Task called: its ModelConfig name, the endpoint and model id that
    /// answered, calls and tokens (the totals are in `resourcesUsed`; the attestation signs the
    /// same list). At most 32, as many as an Agent may be granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub models: Vec<ModelCalls>,
    /// One entry per replica run so far, oldest first, when `spec.verification.replicas` > 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub replicas: Vec<ReplicaRecord>,
    /// The newest guest log lines while the Task runs, for A2A streams (only while a gateway
    /// stream follows the Task: the `ari.dev/live-log` lease, set by the gateway alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_log: Option<LiveLog>,
}

/// Where large output lives: `binaryData[key]` of a ConfigMap owned by the Task.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OutputRef {
    pub config_map: String,
    pub key: String,
}

/// Where a Task's input comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InputSource<'a> {
    Inline(&'a str),
    /// Many inputs, each its own run (a Task of items: see [`crate::items`]).
    Items(&'a [String]),
    Base64(&'a str),
    ConfigMap(&'a KeyRef),
    Secret(&'a KeyRef),
}

/// A spec the schema should have refused (e.g. the CRD was not installed with its rules).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("exactly one of input, inputBase64, inputFrom, items must be set (found {0})")]
    NotExactlyOne(usize),
    #[error("exactly one of inputFrom.configMapKeyRef, inputFrom.secretKeyRef must be set")]
    InputFromNotExactlyOne,
}

impl TaskSpec {
    /// The single input source, or why there is not exactly one.
    pub fn input_source(&self) -> Result<InputSource<'_>, InputError> {
        let mut found = Vec::with_capacity(1);
        if let Some(s) = &self.input {
            found.push(InputSource::Inline(s));
        }
        if let Some(s) = &self.input_base64 {
            found.push(InputSource::Base64(s));
        }
        if let Some(items) = &self.items {
            found.push(InputSource::Items(items));
        }
        if let Some(from) = &self.input_from {
            match (&from.config_map_key_ref, &from.secret_key_ref) {
                (Some(c), None) => found.push(InputSource::ConfigMap(c)),
                (None, Some(s)) => found.push(InputSource::Secret(s)),
                _ => return Err(InputError::InputFromNotExactlyOne),
            }
        }
        match found.as_slice() {
            [one] => Ok(*one),
            _ => Err(InputError::NotExactlyOne(found.len())),
        }
    }

    /// Retries allowed after executor loss.
    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(0).min(MAX_RETRIES)
    }
}

impl Task {
    /// The single input source (see [`TaskSpec::input_source`]).
    pub fn input_source(&self) -> Result<InputSource<'_>, InputError> {
        self.spec.input_source()
    }

    /// The phase, `Pending` when no status was written yet.
    pub fn phase(&self) -> TaskPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }

    /// `Succeeded`, `Failed` or `Cancelled`.
    pub fn is_finished(&self) -> bool {
        self.phase().is_finished()
    }

    /// A user asked for it to stop (`spec.cancelled`), or it is being deleted: either way,
    /// whoever runs it stops.
    pub fn is_cancelled(&self) -> bool {
        self.spec.cancelled == Some(true) || self.metadata.deletion_timestamp.is_some()
    }

    /// Claims so far.
    pub fn attempts(&self) -> u32 {
        self.status.as_ref().and_then(|s| s.attempts).unwrap_or(0)
    }
}

/// `12ms`, `1.234s`, `2m3s`: the `status.duration` format.
pub fn format_duration_millis(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{:03}s", ms / 1_000, ms % 1_000),
        _ => {
            let secs = ms / 1_000;
            if secs < 3_600 {
                format!("{}m{}s", secs / 60, secs % 60)
            } else {
                format!("{}h{}m", secs / 3_600, (secs % 3_600) / 60)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TaskSpec {
        TaskSpec::for_agent("echo")
    }

    #[test]
    fn input_source_returns_the_single_source() {
        let s = TaskSpec {
            input: Some("hi".into()),
            ..spec()
        };
        assert_eq!(s.input_source(), Ok(InputSource::Inline("hi")));
        let r = KeyRef {
            name: "c".into(),
            key: "k".into(),
        };
        let s = TaskSpec {
            input_from: Some(InputFrom {
                config_map_key_ref: Some(r.clone()),
                secret_key_ref: None,
            }),
            ..spec()
        };
        assert_eq!(s.input_source(), Ok(InputSource::ConfigMap(&r)));
    }

    #[test]
    fn input_source_rejects_zero_or_many() {
        assert_eq!(spec().input_source(), Err(InputError::NotExactlyOne(0)));
        let s = TaskSpec {
            input: Some("a".into()),
            input_base64: Some("YQ==".into()),
            ..spec()
        };
        assert_eq!(s.input_source(), Err(InputError::NotExactlyOne(2)));
        let s = TaskSpec {
            input_from: Some(InputFrom::default()),
            ..spec()
        };
        assert_eq!(s.input_source(), Err(InputError::InputFromNotExactlyOne));
    }

    #[test]
    fn phase_defaults_to_pending_and_finished_means_terminal() {
        let mut t = Task::new(
            "t",
            TaskSpec {
                input: Some("x".into()),
                ..spec()
            },
        );
        assert_eq!(t.phase(), TaskPhase::Pending);
        assert!(t.is_claimable() && !t.is_finished());
        for (phase, finished) in [
            (TaskPhase::Running, false),
            (TaskPhase::Succeeded, true),
            (TaskPhase::Failed, true),
            (TaskPhase::Cancelled, true),
        ] {
            t.status = Some(TaskStatus {
                phase: Some(phase),
                ..Default::default()
            });
            assert_eq!(t.is_finished(), finished, "{phase:?}");
            assert!(!t.is_claimable());
        }
    }

    #[test]
    fn reasons_round_trip_through_their_names() {
        for r in TaskReason::ALL {
            assert_eq!(TaskReason::parse(r.as_str()), Some(r));
            assert_eq!(
                serde_json::to_value(r).ok(),
                Some(serde_json::Value::from(r.as_str()))
            );
        }
        assert_eq!(TaskReason::parse("Nope"), None);
    }

    #[test]
    fn durations_format_compactly() {
        assert_eq!(format_duration_millis(12), "12ms");
        assert_eq!(format_duration_millis(1_234), "1.234s");
        assert_eq!(format_duration_millis(123_000), "2m3s");
        assert_eq!(format_duration_millis(3_723_000), "1h2m");
    }
}
