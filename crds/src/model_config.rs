//! The `ModelConfig` custom resource: a language model a namespace declares once (provider,
//! endpoint, model id, credentials, defaults, limits, prices), which Agents are then granted by
//! name. In the spirit of kagent's `ModelConfig`, except that the key never leaves the
//! executor: only the executor reads the credentials Secret, and only when the Secret is
//! marked for the purpose (see docs/models.md).
//!
//! The operator's ModelConfig controller probes the endpoint and writes `status`; it reads
//! only the credentials Secret's labels (see docs/models.md).

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The model crate's enums, so the CRD, the client and the attestation name a provider and a
/// schema style with one type each.
pub use ari_model::{ModelProvider, SchemaStyle};

use crate::SecretKeyRef;

/// The label a Secret must carry (value `"true"`) before an executor reads it as a model's
/// credentials, set by someone who may write Secrets: the same rule as signing keys.
pub const CREDENTIALS_LABEL: &str = "ari.dev/model-credentials";
/// Most model ids kept in status.
pub const MAX_MODELS: usize = 64;
/// The environment variable holding an Agent's granted models for its executors (a JSON list
/// of [`ExecutorModel`]), written by the operator into the executor pod template.
pub const MODELS_ENV: &str = "ARI_MODELS";

/// A granted model as the operator hands it to the Agent's executors: the ModelConfig's spec
/// (which holds only a *reference* to the credentials) and the name of the environment
/// variable the kubelet fills with the key from the marked Secret. So the executor needs no
/// RBAC on ModelConfigs or Secrets, and the key is in no object but the Secret itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorModel {
    /// The ModelConfig's name: what the Agent grants and the guest asks for.
    pub name: String,
    pub spec: ModelConfigSpec,
    /// The variable holding the key; none when the ModelConfig names no credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
}

impl ExecutorModel {
    /// The variable that carries the key of the `index`th granted model.
    pub fn key_env_name(index: usize) -> String {
        format!("ARI_MODEL_KEY_{index}")
    }
}

/// A model at an endpoint, declared once per namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "ModelConfig",
    namespaced,
    status = "ModelConfigStatus",
    shortname = "mc",
    category = "ari",
    derive = "PartialEq",
    cel,
    doc = "A language model a namespace declares once: provider, endpoint, model id, credentials, defaults, limits and prices. Agents are granted it by name.",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model"),
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
#[x_kube(
    validation = Rule::new("self.provider != 'Anthropic' || !has(self.schemaStyle)").message("schemaStyle applies to the OpenAI wire format only"),
)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfigSpec {
    /// The wire format the endpoint speaks.
    pub provider: ModelProvider,
    /// The API root: `https://api.openai.com/v1`, `http://vllm.models.svc:8000/v1`,
    /// `https://api.anthropic.com`. The executor's network policy must let it reach it. No
    /// user or password in it: credentials go in `credentials`, which only the executor reads.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s@]+$"))]
    pub endpoint: String,
    /// The provider's model id (`gpt-4o-mini`, `claude-sonnet-4-5`, a vLLM served name).
    #[schemars(length(min = 1, max = 256))]
    pub model: String,
    /// The Secret key holding the API key; none for endpoints without one. The Secret must be
    /// labelled `ari.dev/model-credentials: "true"`, and is never the attestation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretKeyRef>,
    /// How a JSON-schema response format is sent (OpenAI wire format only): `JsonSchema`
    /// (OpenAI's, the default) or `JsonObjectSchema` (llama-cpp-python's server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_style: Option<SchemaStyle>,
    /// Values a call gets when the guest sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<ModelDefaults>,
    /// Ceilings on the namespace's use of this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ModelLimits>,
    /// Prices, for the estimated cost in usage reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
}

/// Values a call gets when the guest sets none.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModelDefaults {
    /// `max_tokens` when the guest asks for none (the task's budget may lower it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature, sent (as a 32-bit float) with every call whose guest sets none;
    /// part of the recorded request, so `ari verify` sends the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
}

/// Ceilings on the namespace's use of the model.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModelLimits {
    /// The most output tokens one call may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub max_output_tokens: Option<u32>,
    /// Calls (chat and embeddings) per minute, for the whole namespace: shared out evenly
    /// among the executor pods of every Agent granted this model (each enforces its share,
    /// rounded down, before the call, and follows Agents as they come and go). A call that
    /// would wait past its task's deadline is refused `rate-limited`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub requests_per_minute: Option<u32>,
    /// Input and output tokens per minute, for the whole namespace, shared out like
    /// `requestsPerMinute`: a call reserves its prompt's estimate and is charged what the
    /// provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub tokens_per_minute: Option<u64>,
    /// Bytes of prompt counted as one token when the budget estimates a prompt before the
    /// call. 1 (the default) never underestimates a byte-level tokenizer; more admits longer
    /// prompts at the risk of a budget overspent by the last call's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub bytes_per_token: Option<u32>,
}

/// Prices per million tokens, as decimal strings (no floating point in money): usage reports
/// (the Task's `status.models`, the attestation, A2A usage events) then carry an exact
/// estimated cost per model.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Prices {
    /// ISO 4217 code, `USD` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: Option<String>,
    /// Per million input tokens (those served from cache excepted when
    /// `cachedInputPerMillion` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), regex(pattern = r"^[0-9]{1,9}(\.[0-9]{1,9})?$"))]
    pub input_per_million: Option<String>,
    /// Per million input tokens served from the provider's prompt cache (default: the input
    /// price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), regex(pattern = r"^[0-9]{1,9}(\.[0-9]{1,9})?$"))]
    pub cached_input_per_million: Option<String>,
    /// Per million output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), regex(pattern = r"^[0-9]{1,9}(\.[0-9]{1,9})?$"))]
    pub output_per_million: Option<String>,
}

/// What the controller observed of the endpoint.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the endpoint answered the operator's probe, a request for its model list sent
    /// without the key (reasons in [`ModelConfigReason`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// The model ids the endpoint offers (its model list, at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 256)))]
    pub models: Vec<String>,
}

/// Why a ModelConfig is or is not `Ready` (the condition's reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelConfigReason {
    /// The endpoint answered (its model list, or a 401/403 to the probe's request without a
    /// key when credentials are configured: the key itself is checked at first use).
    EndpointAnswered,
    /// The endpoint is not an http(s) URL the operator can request.
    InvalidEndpoint,
    /// The endpoint is at an internal address the operator's settings do not let it probe
    /// (`Ready=Unknown`: executors may still reach it).
    ProbeNotAllowed,
    /// No HTTP answer: refused, silent, timed out or not resolved (one reason for all).
    Unreachable,
    /// An HTTP answer other than 2xx, 401 and 403 (its status code only).
    EndpointError,
    /// A 2xx answer that is not a model list.
    NotAModelEndpoint,
    /// The endpoint wants a key (401 or 403) and `spec.credentials` names none.
    Unauthorized,
    /// The credentials Secret does not exist.
    CredentialsMissing,
    /// The Secret lacks the `ari.dev/model-credentials: "true"` label.
    CredentialsNotMarked,
    /// `spec.credentials` names the attestation key or no Secret name at all.
    CredentialsForbidden,
}

impl ModelConfigReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelConfigReason::EndpointAnswered => "EndpointAnswered",
            ModelConfigReason::InvalidEndpoint => "InvalidEndpoint",
            ModelConfigReason::ProbeNotAllowed => "ProbeNotAllowed",
            ModelConfigReason::Unreachable => "Unreachable",
            ModelConfigReason::EndpointError => "EndpointError",
            ModelConfigReason::NotAModelEndpoint => "NotAModelEndpoint",
            ModelConfigReason::Unauthorized => "Unauthorized",
            ModelConfigReason::CredentialsMissing => "CredentialsMissing",
            ModelConfigReason::CredentialsNotMarked => "CredentialsNotMarked",
            ModelConfigReason::CredentialsForbidden => "CredentialsForbidden",
        }
    }
}
