//! The limits and grants a run was really held to.

use serde::{Deserialize, Serialize};

use crate::capability::CapabilityName;
use crate::price::Prices;

/// A task's model-token budget when nothing sets one (an Agent's `limits.tokens`, a Plan step's
/// `tokens`): enough for a few turns of a small model, far from what a runaway loop could spend.
pub const DEFAULT_TOKENS: u64 = 100_000;

/// The limits and capabilities really enforced for a run: `Task.status.limitsApplied`, signed in
/// the attestation, and everything a replay needs to run under the same bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LimitsApplied {
    pub fuel: u64,
    pub memory_bytes: u64,
    pub timeout_millis: u64,
    pub max_output_bytes: u64,
    pub max_input_bytes: u64,
    /// Granted capabilities, sorted.
    #[serde(default)]
    pub capabilities: Vec<CapabilityName>,
    /// The storage quota, when `storage` is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_max_bytes: Option<u64>,
    /// The network allow-list, when `network` is granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// The hosts whose requests waited for a person's decision, when the network grant names
    /// any (a replay reads the same decisions from the trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_approval: Option<crate::approval::HostsApproval>,
    /// The delegation grant and where the task sat in its tree, when `delegation` is granted
    /// (a replay refuses the same calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<DelegationApplied>,
    /// The ModelConfigs granted, when `models` is granted: each name, and what it resolved to
    /// when the run started (a replay asks the same questions of the record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelApplied>,
    /// The task's token budget (input and output tokens of every model call, its children's
    /// included), when `models` or `delegation` is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The MCP servers granted, when `tools` is granted: each name, its tools, and the URL it
    /// resolved to when the run started (a replay checks each record against it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolServerApplied>,
}

/// Which revision of MCP's streamable HTTP transport to speak: `auto` (the default:
/// 2026-07-28's stateless form, else 2025-11-25), `stateless` (2026-07-28 only) or `session`
/// (2025-11-25 only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum McpProtocol {
    /// Ask with `server/discover` (2026-07-28, stateless); a server that does not know it is
    /// spoken to with the 2025-11-25 `initialize` handshake and its session.
    #[default]
    Auto,
    /// 2026-07-28 only: no handshake, no session, every request self-contained.
    Stateless,
    /// 2025-11-25 only: `initialize`, then requests within its `Mcp-Session-Id`.
    Session,
}

/// A granted MCP server as a run was held to it. Never its credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolServerApplied {
    /// The server's name in the namespace.
    pub name: String,
    /// The tools granted on it (`*`: all).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Its URL without user, password or query; absent when the namespace has no such server
    /// (its calls were `unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Which calls waited for a person's decision (absent: those of tools marked destructive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::approval::ApprovalRule>,
}

/// A granted model as a run was held to it: the ModelConfig's name and, when it was found,
/// where it pointed and the limits its calls were decided by. Never its credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelApplied {
    /// The ModelConfig's name.
    pub name: String,
    /// What the name resolved to; absent when the namespace has no such ModelConfig (its calls
    /// were `unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<ModelEndpoint>,
}

/// Where a model is served and how its calls are bounded: everything about a ModelConfig
/// that decides a call, without its credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelEndpoint {
    pub provider: ModelProvider,
    /// The API root, without user or password.
    pub url: String,
    /// The provider's model id.
    pub model: String,
    /// `max_tokens` of a call whose guest set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub default_max_tokens: Option<u32>,
    /// The most output tokens one call may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub max_output_tokens: Option<u32>,
    /// Prompt bytes counted as one token by the budget's estimate.
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub bytes_per_token: u32,
    /// The temperature sent when the guest sets none, as the decimal text of the 32-bit float
    /// sent (Rust's shortest round-trip form, so a replay parses back the same bits; the
    /// signed body holds no floating-point number). Absent when the ModelConfig sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 32)))]
    pub default_temperature: Option<String>,
    /// The prices the usage's estimated cost was computed with; absent when none are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
}

/// The wire format a model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ModelProvider {
    /// OpenAI chat completions, also spoken by Azure OpenAI, vLLM, Ollama, llama.cpp's server
    /// and LiteLLM.
    OpenAI,
    /// Anthropic messages.
    Anthropic,
}

/// How a JSON-schema response format is sent (OpenAI wire format only): `JsonSchema`
/// (OpenAI's, the default) or `JsonObjectSchema` (llama-cpp-python's server).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SchemaStyle {
    /// OpenAI's `{"type": "json_schema", "json_schema": {name, schema, strict}}`: OpenAI,
    /// Azure OpenAI, vLLM, Ollama, llama.cpp's own server, LiteLLM.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": ...}`: llama-cpp-python's server, which refuses the
    /// other (0.3.36 answers HTTP 500) but constrains its answer to this schema.
    JsonObjectSchema,
}

/// The delegation grant a run was held to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DelegationApplied {
    /// Agents it could call (`*`: any).
    pub agents: Vec<String>,
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub max_depth: u32,
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub max_children: u32,
    /// The task's own depth (a root task is 0).
    #[cfg_attr(feature = "schema", schemars(range(max = 4_294_967_295u32)))]
    pub depth: u32,
    /// Which Agents' delegations waited for a person's decision (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::approval::AgentsApproval>,
}

/// Depth of a delegation tree when the grant does not say (the root is depth 0). One figure
/// for the CRD's defaults (`ari-crds`) and the runtime's grant.
pub const DEFAULT_MAX_DEPTH: u32 = 3;
/// Children (awaited or messages) one task may start when the grant does not say.
pub const DEFAULT_MAX_CHILDREN: u32 = 16;

/// Whether a delegation grant listing `granted` Agents lets a task call `agent`: it is named,
/// or `*` was granted. One rule for the runtime's grant and the executor's check of a child.
pub fn delegation_allows(granted: &[String], agent: &str) -> bool {
    granted.iter().any(|a| a == agent || a == "*")
}
