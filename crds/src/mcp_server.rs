//! The `MCPServer` custom resource: a remote MCP server a namespace declares once (its
//! streamable HTTP URL, the protocol revision, a bearer token and header values from Secrets
//! marked for the purpose), which Agents are then granted by name with the tools they may call
//! (`spec.capabilities.tools`). In the spirit of kagent's `RemoteMCPServer`.
//!
//! The operator's MCPServer controller lists the server's tools into `status` (see
//! docs/tools.md); the executors get the spec and the credentials by reference, filled in by
//! the kubelet, and are the MCP clients of every call.

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The protocol revisions, with one type across the CRD, the client and `ari run`.
pub use ari_model::McpProtocol;

use crate::SecretKeyRef;

/// The label a Secret must carry (value `"true"`) before it is read as an MCP server's token
/// or header value, set by someone who may write Secrets: the rule of model keys.
pub const CREDENTIALS_LABEL: &str = "ari.dev/tool-credentials";
/// Most tools kept in status (the client refuses a longer list).
pub const MAX_TOOLS: usize = 256;
/// Longest tool description kept in status, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 512;
/// The environment variable holding an Agent's granted MCP servers for its executors (a JSON
/// list of [`ExecutorToolServer`]), written by the operator into the executor pod template.
pub const TOOL_SERVERS_ENV: &str = "ARI_TOOL_SERVERS";

/// A granted server as the operator hands it to the Agent's executors: the MCPServer's spec
/// (which holds only *references* to the credentials) and the environment variables the kubelet
/// fills from the marked Secrets. So the executor needs no RBAC on MCPServers or Secrets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorToolServer {
    /// The MCPServer's name: what the Agent grants and the guest calls.
    pub name: String,
    pub spec: MCPServerSpec,
    /// The variable holding the bearer token; none when the spec names no token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// The variable holding each header's value, in `spec.headers` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_envs: Vec<String>,
}

impl ExecutorToolServer {
    /// The variable that carries the token of the `index`th granted server.
    pub fn token_env_name(index: usize) -> String {
        format!("ARI_TOOL_TOKEN_{index}")
    }

    /// The variable that carries header `header` of the `index`th granted server.
    pub fn header_env_name(index: usize, header: usize) -> String {
        format!("ARI_TOOL_HEADER_{index}_{header}")
    }
}

/// A remote MCP server, declared once per namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "MCPServer",
    plural = "mcpservers",
    namespaced,
    status = "MCPServerStatus",
    shortname = "mcps",
    category = "ari",
    derive = "PartialEq",
    doc = "A remote MCP server a namespace declares once: its streamable HTTP URL, protocol revision and credentials from marked Secrets. Agents are granted it, and the tools they may call, by name.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(name = "Tools", type_ = "integer", json_path = ".status.toolCount"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MCPServerSpec {
    /// The server's streamable HTTP endpoint, such as `https://tools.example/mcp`: http(s), a
    /// host, no user or password.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,
    /// Which revision to speak: `auto` (the default: 2026-07-28's stateless form, else
    /// 2025-11-25), `stateless` (2026-07-28 only) or `session` (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<McpProtocol>,
    /// The Secret key holding a bearer token, sent as `Authorization: Bearer`. The Secret must
    /// be labelled `ari.dev/tool-credentials: "true"`, and is never the attestation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretKeyRef>,
    /// Further headers sent with every request, each value from a marked Secret (an API key
    /// header, a tenant id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub headers: Vec<SecretHeader>,
    /// Longest one tool call may take, in seconds (less when the task's deadline is sooner);
    /// 60 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub call_timeout_seconds: Option<u32>,
}

/// A header whose value comes from a marked Secret.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretHeader {
    /// The header's name (`X-Api-Key`); not one the transport owns (`Authorization`,
    /// `Content-Type`, the `Mcp-*` headers, ...).
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9-]+$"))]
    pub name: String,
    pub value_from: SecretKeyRef,
}

/// What the controller observed of the server.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MCPServerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the server listed its tools to the operator (reasons in [`MCPServerReason`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// How many tools the server lists (the printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 256))]
    pub tool_count: Option<u32>,
    /// The tools the server offers, with what it says of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub tools: Vec<DiscoveredTool>,
}

/// A tool as the server lists it. The hints are the server's word, not a guarantee.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    #[schemars(length(max = 128))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub title: Option<String>,
    /// Its description, cut to 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 520))]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Whether calling it may destroy something (MCP's `destructiveHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// Why an MCPServer is or is not `Ready` (the condition's reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MCPServerReason {
    /// The server listed its tools.
    ToolsListed,
    /// `spec.url` is not an http(s) URL the operator can request.
    InvalidUrl,
    /// The server is at an internal address the operator's settings do not let it reach
    /// (`Ready=Unknown`: executors may still reach it).
    ProbeNotAllowed,
    /// No answer in time, a refused connection, or refused credentials (one reason for all).
    Unreachable,
    /// The tool list is over the client's bounds.
    ToolListTooLarge,
    /// The server answered the list with an error.
    ServerError,
    /// A credentials Secret does not exist, or lacks the key it names.
    CredentialsMissing,
    /// A credentials Secret lacks the `ari.dev/tool-credentials: "true"` label.
    CredentialsNotMarked,
    /// A credential names the attestation key, no Secret name, or a header the transport owns.
    CredentialsForbidden,
}

impl MCPServerReason {
    pub fn as_str(self) -> &'static str {
        match self {
            MCPServerReason::ToolsListed => "ToolsListed",
            MCPServerReason::InvalidUrl => "InvalidURL",
            MCPServerReason::ProbeNotAllowed => "ProbeNotAllowed",
            MCPServerReason::Unreachable => "Unreachable",
            MCPServerReason::ToolListTooLarge => "ToolListTooLarge",
            MCPServerReason::ServerError => "ServerError",
            MCPServerReason::CredentialsMissing => "CredentialsMissing",
            MCPServerReason::CredentialsNotMarked => "CredentialsNotMarked",
            MCPServerReason::CredentialsForbidden => "CredentialsForbidden",
        }
    }
}
