//! The `Agent` custom resource: a Wasm component plus what it is granted.

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use ari_model::AgentMode;
pub use ari_model::declaration::{
    ConfigMapKeyRef, Declaration, DeclaredAgent, DeclaredFormat, DeclaredServer, DeclaredTool,
    FormatKind,
};
pub use ari_model::grant::{
    DelegationGrant, EmptyGrant, GrantSet, NetworkGrant, SecretKeyRef, SigningGrant, StorageGrant,
};

use crate::a2a::A2aSpec;
use crate::capability::CapabilityName;
use crate::conditions;

/// Upper bound on any fuel figure (Agent limit or Task budget): about 1e12 Wasm instructions,
/// far beyond any sane task, yet small enough that sums over a task never overflow `u64`.
pub const MAX_FUEL: u64 = 1_000_000_000_000;

/// Defaults applied when `spec.limits` leaves a field out (same values as the executor's).
pub const DEFAULT_FUEL: u64 = 1_000_000_000;
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 30;
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1 << 20;
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 20;
pub use ari_model::limits::DEFAULT_TOKENS;
/// Upper bound on any token figure (Agent ceiling or Task budget).
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
pub const DEFAULT_REPLICAS: i32 = 1;
pub const DEFAULT_CONCURRENCY: u32 = 4;

/// An Agent: a Wasm component, the capabilities it is granted and the executor pool that runs it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "Agent",
    namespaced,
    status = "AgentStatus",
    shortname = "ag",
    category = "ari",
    derive = "PartialEq",
    cel,
    selectable = ".spec.executor.pool",
    doc = "An Agent: a WebAssembly component, the capabilities it is granted and its executor pool.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas"
    ),
    printcolumn(
        name = "Module digest",
        type_ = "string",
        json_path = ".status.moduleDigest"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!has(self.a2a) || !self.a2a.exposed || !has(self.mode) || self.mode != 'subagent'").message("a subagent-mode Agent cannot be exposed over A2A (spec.a2a.exposed)"),
    validation = Rule::new("has(self.declarative) != has(self.module)").message("exactly one of spec.module (a component) and spec.declarative (run by the stock agent component) must be set"),
    validation = Rule::new("!has(self.declarative) || !has(self.config)").message("spec.config is for a component; a declarative Agent's config is its declaration"),
    validation = Rule::new("!has(self.declarative) || has(self.declarative.instructions) != has(self.declarative.instructionsFrom)").message("exactly one of declarative.instructions and declarative.instructionsFrom must be set"),
    validation = Rule::new("!has(self.declarative) || (has(self.capabilities) && has(self.capabilities.models) && self.declarative.model in self.capabilities.models.allowed)").message("declarative.model must be granted in capabilities.models.allowed"),
    validation = Rule::new("!has(self.declarative) || !has(self.declarative.tools) || self.declarative.tools.all(t, has(t.mcpServer) != has(t.agent))").message("each of declarative.tools is exactly one of mcpServer and agent"),
    // Whether each MCP server of declarative.tools is granted is the operator's check
    // (`Declaration::ungranted`, Valid=False naming it) and the executor's: as a rule over both
    // lists it cost the API server 16 times its CEL budget.
    validation = Rule::new("!has(self.declarative) || !has(self.declarative.tools) || self.declarative.tools.all(t, !has(t.agent) || (has(self.capabilities) && has(self.capabilities.delegation) && (t.agent.name in self.capabilities.delegation.agents || '*' in self.capabilities.delegation.agents)))").message("each Agent of declarative.tools must be granted in capabilities.delegation.agents"),
    validation = Rule::new("!has(self.declarative) || !has(self.declarative.subagents) || self.declarative.subagents.all(a, has(self.capabilities) && has(self.capabilities.delegation) && (a.name in self.capabilities.delegation.agents || '*' in self.capabilities.delegation.agents))").message("each of declarative.subagents must be granted in capabilities.delegation.agents"),
    validation = Rule::new("!has(self.declarative) || !has(self.declarative.responseFormat) || (self.declarative.responseFormat.type == 'JsonSchema') == has(self.declarative.responseFormat.schema)").message("declarative.responseFormat.schema is set exactly when its type is JsonSchema"),
)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// Where the component comes from; exactly one source. Absent for a declarative Agent,
    /// which runs the stock agent component the operator pins.
    #[serde(default, skip_serializing_if = "ModuleSource::is_empty")]
    pub module: ModuleSource,
    /// An agent declared instead of coded: its system prompt, model, tools, subagents,
    /// approvals and turn limit, run by the stock agent component under this Agent's grants
    /// and limits. Everything it names must be granted in `capabilities` (it grants nothing);
    /// its canonical bytes are the component's config, so attestations sign its digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declarative: Option<Declaration>,
    /// Capabilities granted to the agent; anything absent is denied.
    #[serde(default)]
    pub capabilities: GrantSet,
    /// Per-task ceilings; a Task may ask for less, never for more.
    #[serde(default)]
    pub limits: Limits,
    /// The executor pool that runs this agent's tasks.
    #[serde(default)]
    pub executor: ExecutorSpec,
    /// Free text for humans and for orchestrating agents choosing a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// How the agent may be used: as a primary agent, as a subagent of another, or both. Where
    /// its Tasks may come from, not who may send them: see `callers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<AgentMode>,
    /// The Agents whose tasks may delegate to this one (`*`, written deliberately: any). Once
    /// set, every other caller is refused (an empty list refuses all); absent, any Agent of the
    /// namespace whose own delegation grant names this one may call it (as before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        inner(regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$"))
    )]
    pub callers: Option<Vec<String>>,
    /// Handed as bytes to the guest's `initialize` before every task, so one module can serve
    /// several Agents configured differently (JSON or YAML as text is the usual form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub config: Option<String>,
    /// Reachable over the Agent2Agent protocol through the gateway, and the card it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aSpec>,
    /// Whether its Tasks keep their host-call trace (`Keep`) or only its digest (`Digest`, the
    /// default), when a Task does not say (its `spec.trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::task::TracePolicy>,
}

/// The component source. Exactly one of `configMap`, `url` and `image`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("(has(self.configMap) ? 1 : 0) + (has(self.url) ? 1 : 0) + (has(self.image) ? 1 : 0) == 1").message("exactly one of module.configMap, module.url or module.image must be set"),
    validation = Rule::new("!has(self.url) || has(self.sha256)").message("module.sha256 is required with module.url"),
    validation = Rule::new("!has(self.imagePullSecrets) || has(self.image)").message("module.imagePullSecrets is only for module.image"),
)]
#[serde(rename_all = "camelCase")]
pub struct ModuleSource {
    /// A ConfigMap in the Agent's namespace holding the component under `binaryData[key]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// An https URL the executor fetches the component from (then verifies `sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("module.url must be https"))]
    pub url: Option<String>,
    /// An OCI artifact in the CNCF Wasm layout (`registry/repository:tag` or
    /// `registry/repository@sha256:...`, as `ari push` prints). A tag is resolved by the
    /// operator to the digest it names then, recorded in `status.moduleImage`; executors pull
    /// only that digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
    /// Secrets of type `kubernetes.io/dockerconfigjson` in the Agent's namespace, labelled
    /// `ari.dev/pull-secret=true`, holding credentials for `image`'s registry. Credentials are
    /// sent only to the registry they name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub image_pull_secrets: Option<Vec<PullSecretRef>>,
    /// Lowercase hex SHA-256 of the component bytes; verified always, recorded in attestations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
}

/// A pull secret by name (same namespace as the Agent).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PullSecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A module stored in a ConfigMap's `binaryData`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapModule {
    /// ConfigMap name (same namespace as the Agent).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in `binaryData`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

impl AgentSpec {
    /// Whether this Agent takes a delegated Task from a parent running on Agent `caller`
    /// (`spec.callers`; absent: any caller).
    pub fn accepts_caller(&self, caller: &str) -> bool {
        self.callers
            .as_ref()
            .is_none_or(|callers| ari_model::limits::delegation_allows(callers, caller))
    }
}

/// Per-task ceilings. Absent fields take the `DEFAULT_*` values.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Fuel per task (about one unit per Wasm instruction plus host-call charges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub fuel: Option<u64>,
    /// Linear memory per task instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// Wall-clock time per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400))]
    pub timeout_seconds: Option<u32>,
    /// Largest output a task may return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_bytes: Option<u64>,
    /// Largest input a task may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_input_bytes: Option<u64>,
    /// Model tokens (input and output together) per task, when models or delegation are
    /// granted (children draw theirs from their parent's); a Task's `spec.tokens` may only
    /// lower it. Checked before each call (see docs/models.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000_000_000u64))]
    pub tokens: Option<u64>,
}

/// Limits with the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveLimits {
    pub fuel: u64,
    pub memory_bytes: u64,
    pub timeout_seconds: u32,
    pub max_output_bytes: u64,
    pub max_input_bytes: u64,
    pub tokens: u64,
}

impl Limits {
    /// The ceilings the executor enforces: declared values, else the defaults.
    pub fn effective(&self) -> EffectiveLimits {
        EffectiveLimits {
            fuel: self.fuel.unwrap_or(DEFAULT_FUEL),
            memory_bytes: self.memory_bytes.unwrap_or(DEFAULT_MEMORY_BYTES),
            timeout_seconds: self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
            max_output_bytes: self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
            max_input_bytes: self.max_input_bytes.unwrap_or(DEFAULT_MAX_INPUT_BYTES),
            tokens: self.tokens.unwrap_or(DEFAULT_TOKENS),
        }
    }
}

/// The Agent's executors: its own Deployment, or a share of a namespace's `ExecutorPool`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("!has(self.pool) || (!has(self.replicas) && !has(self.resources) && !has(self.nodeSelector) && !has(self.tolerations))").message("a pooled Agent runs in its pool's pods: set replicas, resources, nodeSelector and tolerations on the ExecutorPool"),
)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorSpec {
    /// The `ExecutorPool` of this namespace whose pods run this Agent's Tasks, instead of a
    /// Deployment of its own. `concurrency` then caps the Agent's share of each pool pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$"))]
    pub pool: Option<String>,
    /// Executor pods (default 1). Forced to 1 when storage is granted without Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Tasks run at once per pod (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub concurrency: Option<u32>,
    /// Container resources of each executor pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

/// Observed state of an Agent, written by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Valid`, `ModuleResolved`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// For a declarative Agent: `sha256:<hex>` of its declaration's canonical bytes (the
    /// system prompt resolved), the config its Tasks' attestations sign as `configSha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declaration_digest: Option<String>,
    /// `sha256:<hex>` of the component (declared for `url`, computed for `configMap` and
    /// `image`; the stock agent component's for a declarative Agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_digest: Option<String>,
    /// For `module.image`: the `registry/repository@sha256:...` the executors run, i.e. the
    /// tag as the operator last resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub ready_replicas: Option<i32>,
    /// Hex Ed25519 public key that verifies this namespace's task attestations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation_public_key: Option<String>,
    /// For an exposed Agent: the operator's signature of its A2A card (by the attestation key)
    /// and the digest of the card it covers; the gateway serves it on that card only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_card: Option<ari_model::SignedCard>,
}

impl AgentSpec {
    /// The names of the granted capabilities, in a stable order.
    pub fn grant_names(&self) -> BTreeSet<CapabilityName> {
        self.capabilities.names()
    }

    /// Executor pods wanted, before the single-replica rule for embedded storage.
    pub fn replicas(&self) -> i32 {
        self.executor.replicas.unwrap_or(DEFAULT_REPLICAS)
    }

    /// Tasks at once per executor pod.
    pub fn concurrency(&self) -> u32 {
        self.executor.concurrency.unwrap_or(DEFAULT_CONCURRENCY)
    }
}

impl ModuleSource {
    /// The declared lowercase hex SHA-256, if any.
    pub fn declared_sha256(&self) -> Option<&str> {
        self.sha256.as_deref()
    }

    /// Whether no field is set (a declarative Agent's `module`).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// How many of `configMap`, `url` and `image` are set (valid specs have exactly one).
    pub fn source_count(&self) -> usize {
        [
            self.config_map.is_some(),
            self.url.is_some(),
            self.image.is_some(),
        ]
        .into_iter()
        .filter(|s| *s)
        .count()
    }

    /// The names in `imagePullSecrets`, in order.
    pub fn pull_secret_names(&self) -> impl Iterator<Item = &str> {
        self.image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
    }
}

impl Agent {
    /// Whether the operator reports the Agent `Ready`.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY))
    }
}

/// `sha256:<hex>`, the form of `status.moduleDigest`.
pub fn module_digest(sha256_hex: &str) -> String {
    format!("sha256:{sha256_hex}")
}
