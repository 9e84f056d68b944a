//! The `ExecutorPool` custom resource: executor pods of one namespace shared by many Agents.
//!
//! A dedicated Agent gets a Deployment of its own; an Agent whose `spec.executor.pool` names an
//! ExecutorPool of its namespace runs in that pool's pods instead, each pod serving every Agent
//! of the pool, its modules compiled once per digest and loaded on a Task's arrival. So a new
//! Agent in a warm pool is Ready without a pod starting, and idle Agents cost a watch entry,
//! not a pod (issue 29; docs/operator.md, "Executor pools").
//!
//! Isolation inside a pod is Wasmtime's: an instance, its memory and its fuel per Task, as
//! before. Granted models, MCP servers, signing keys and pull secrets are the pod's (their
//! credentials reach it by reference, for the union of its Agents' grants, each Secret under
//! the same mark as for a dedicated Agent) and each hosted Agent is handed only its own: its
//! signing key is the one its own `signing.secretRef` names, its image is pulled only with its
//! own `module.imagePullSecrets` ([`PoolSecretKey`]). Storage is shared Redis, scoped per Agent
//! as across a dedicated Agent's replicas, so a pooled Agent granted storage is hosted only
//! when the operator runs with a Redis URL. A pooled Agent may delegate: its pool's pods create
//! its children, bound to the pool (`ParentRef::pool`, the admission policy and
//! [`crate::delegation::pool_binding`]). Metrics of a pool pod's Tasks carry their Agent's
//! name. A declarative Agent pools too, its subagents and Agent tools included: its worker
//! pins the declaration digest the operator resolved for it. So every Agent may join a pool;
//! one that must not share a process with its namespace's other Agents keeps a dedicated
//! executor.

// Clippy reads the repeated `type_ = "string"` of separate `printcolumn(...)` entries as a
// duplicated attribute; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::SecretKeyRef;

/// Pool pods when `spec.replicas` is left out.
pub const DEFAULT_POOL_REPLICAS: i32 = 2;
/// Tasks one pool pod runs at once, over all its Agents, when `spec.concurrency` is left out.
pub const DEFAULT_POOL_CONCURRENCY: u32 = 16;
/// Compiled modules one pool pod holds at once when `spec.hotModules` is left out.
pub const DEFAULT_HOT_MODULES: u32 = 256;

/// The environment variable carrying an executor's [`GuestPriorities`], set by the operator
/// (its `--guest-priorities`) on every executor it builds when not the default.
pub const GUEST_PRIORITIES_ENV: &str = "ARI_GUEST_PRIORITIES";

/// Whether an executor gives its guests' threads CPU priorities: with `Shares` a CPU-bound
/// guest, or one of an Agent over its CPU allowance, gives way to short Tasks (the
/// executor's `worker/cpu.rs`); `Flat` runs every guest at the process's priority, the design
/// before shares, kept to measure one beside the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuestPriorities {
    #[default]
    Shares,
    Flat,
}

impl GuestPriorities {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shares => "shares",
            Self::Flat => "flat",
        }
    }
}

impl std::fmt::Display for GuestPriorities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GuestPriorities {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [Self::Shares, Self::Flat]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a guest priority: want shares or flat"))
    }
}

/// The environment variable listing a pool pod's signing keys (a JSON list of
/// [`PoolSecretKey`]), written by the operator into the pool's pod template.
pub const SIGNING_KEYS_ENV: &str = "ARI_SIGNING_KEYS";

/// Distinct signing keys (Secret and key pairs) one pool carries at most. They all live in
/// each pool pod's environment, and the list of them in one variable, which the kernel caps
/// at 128 KiB: past this bound a pool would not start. Agents naming one pair share it.
pub const MAX_POOL_SIGNING_KEYS: usize = 256;

/// The environment variable listing a pool pod's pull secrets (a JSON list of
/// [`PoolSecretKey`], each key `.dockerconfigjson`), written by the operator.
pub const PULL_SECRETS_ENV: &str = "ARI_PULL_SECRETS";

/// Distinct pull secrets one pool carries at most. Each is a whole docker config (a few KiB,
/// where a signing key is 64 bytes), and a pod's environment together is bounded by the
/// kernel (a quarter of the stack limit, 2 MiB by default): fewer than signing keys.
pub const MAX_POOL_PULL_SECRETS: usize = 64;

/// A Secret key as the operator hands it to a pool's pods: the Secret and key a pooled Agent
/// names (its `signing.secretRef`, or one of its `module.imagePullSecrets`), and the variable
/// the kubelet fills from it. A pod uses for an Agent only the keys the Agent itself names,
/// and hosts no Agent naming one it was not handed (its Deployment predates the Agent's).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PoolSecretKey {
    pub secret_ref: SecretKeyRef,
    pub key_env: String,
}

impl PoolSecretKey {
    /// The variable that carries the `index`th signing key of the pool's sorted union.
    pub fn signing_env_name(index: usize) -> String {
        format!("ARI_SIGNING_KEY_{index}")
    }

    /// The variable that carries the `index`th pull secret of the pool's sorted union.
    pub fn pull_secret_env_name(index: usize) -> String {
        format!("ARI_PULL_SECRET_{index}")
    }
}

/// A pull secret `name` as a pool hands it over: its `.dockerconfigjson`.
pub fn pull_secret_ref(name: &str) -> SecretKeyRef {
    SecretKeyRef {
        name: name.to_owned(),
        key: crate::names::DOCKER_CONFIG_JSON_KEY.to_owned(),
    }
}

/// Executor pods shared by the Agents of a namespace that name this pool.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "ari.dev",
    version = "v1alpha1",
    kind = "ExecutorPool",
    plural = "executorpools",
    namespaced,
    status = "ExecutorPoolStatus",
    shortname = "xpool",
    category = "ari",
    derive = "PartialEq",
    doc = "Executor pods shared by the Agents of its namespace that name it in spec.executor.pool: each pod serves all of them, compiling each module once and loading it when a Task arrives.",
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
    printcolumn(name = "Agents", type_ = "integer", json_path = ".status.agents"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorPoolSpec {
    /// Pool pods (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Tasks one pod runs at once over all its Agents (default 16). Each Agent's own
    /// `spec.executor.concurrency` caps its share, so one busy Agent cannot take them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub concurrency: Option<u32>,
    /// Compiled modules a pod holds in memory at once, busy or idle (default 256; Agents of
    /// one module digest share it). An Agent whose module would pass it waits, its Tasks
    /// queued, first come first served, until an idle Agent's module is let go for it; a
    /// module let go is loaded again from the pod's on-disk artifact cache, by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub hot_modules: Option<u32>,
    /// Container resources of each pool pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

impl ExecutorPoolSpec {
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_POOL_REPLICAS)
    }

    pub fn concurrency(&self) -> u32 {
        self.concurrency.unwrap_or(DEFAULT_POOL_CONCURRENCY)
    }

    pub fn hot_modules(&self) -> u32 {
        self.hot_modules.unwrap_or(DEFAULT_HOT_MODULES)
    }
}

/// Observed state of a pool, written by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: at least one pool pod is available.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub available_replicas: Option<i32>,
    /// Agents of the namespace naming this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub agents: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_priorities_read_back_as_written_and_anything_else_says_what_is_wanted() {
        for p in [GuestPriorities::Shares, GuestPriorities::Flat] {
            assert_eq!(p.as_str().parse(), Ok(p));
        }
        let err = "fair"
            .parse::<GuestPriorities>()
            .expect_err("not a priority");
        assert!(err.contains("want shares or flat"), "{err}");
    }
}
