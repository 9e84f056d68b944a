//! Worker settings, read from the environment the operator's Deployment sets.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use ed25519_dalek::SigningKey;

use super::livelog::WriteRate;
use super::models::GrantedModels;
use super::secrets::PoolSecrets;
use super::tools::GrantedTools;
use super::{ConfigError, KeyMismatch, WorkerError};
use ari_crds::pool::{GUEST_PRIORITIES_ENV, GuestPriorities};

/// What one executor pod needs to know about itself.
#[derive(Clone)]
pub struct WorkerConfig {
    /// The Agent this pod runs; in a pool pod, the Agent of one hosted worker (see
    /// [`Self::for_pooled`]) and empty for the pod itself.
    pub agent: String,
    /// `ARI_POOL_NAME` / `ARI_HOT_MODULES`: set when this pod serves an `ExecutorPool`.
    pub pool: Option<PoolSettings>,
    pub namespace: String,
    pub pod_name: String,
    /// Tasks run at once in this pod.
    pub concurrency: usize,
    /// `ARI_GUEST_PRIORITIES` (`shares`, the default, or `flat`): whether CPU-bound guests
    /// give way to short Tasks (see [`super::cpu`]).
    pub priorities: GuestPriorities,
    pub metrics_addr: SocketAddr,
    /// Agent storage in Redis when set; else an embedded store under `state_dir`.
    pub redis_url: Option<String>,
    pub state_dir: PathBuf,
    pub cache_dir: Option<PathBuf>,
    pub attestation_key: SigningKey,
    /// Set when `ARI_ATTESTATION_KEY` is not the key whose public half the operator passed in
    /// `ARI_ATTESTATION_PUBLIC_KEY` (the namespace copy was replaced): the worker then stays
    /// not Ready and signs nothing.
    pub attestation_key_mismatch: Option<KeyMismatch>,
    /// The signing grant's key (text as stored in the Secret), when the Agent grants signing.
    pub signing_key: Option<String>,
    /// The variable `signing_key` is read from (named when it is missing).
    pub signing_key_env: String,
    /// In a pool pod, `ARI_SIGNING_KEYS` and the variables it names: every pooled Agent's
    /// key the operator handed over; each hosted worker gets only its own in `signing_key`.
    pub signing_keys: PoolSecrets,
    /// In a pool pod, `ARI_PULL_SECRETS` and the variables it names: every pooled Agent's
    /// pull secret the operator handed over; a hosted worker's holds only its own Agent's
    /// `module.imagePullSecrets`, in their order, and pulls with nothing else.
    pub pull_secrets: PoolSecrets,
    /// How often a running task's `lastHeartbeatTime` is refreshed.
    pub heartbeat: Duration,
    /// How long a Task another executor owns waits before this one may claim it.
    pub steal_after: Duration,
    /// `ARI_MODULE_DIGEST`: the digest the operator validated; a module that hashes otherwise
    /// is refused (see `module::check_pinned`).
    pub module_digest: Option<String>,
    /// `ARI_MODULE_IMAGE`: for `module.image`, the `repo@sha256:...` the operator resolved.
    pub module_image: Option<String>,
    /// `ARI_STOCK_AGENT`: where this image carries the stock agent component that runs
    /// declarative Agents (pinned by `ARI_MODULE_DIGEST` like any module).
    pub stock_agent: PathBuf,
    /// `ARI_DECLARATION_DIGEST`: for a declarative Agent, the digest of the declaration the
    /// operator resolved; one that resolves otherwise here is refused (see `declarative`).
    pub declaration_digest: Option<String>,
    /// `ARI_MODULE_PULL_SECRET`: the pull secret's `.dockerconfigjson` (never printed).
    pub module_pull_secret: Option<String>,
    /// The operator admin's registry network rules (`ARI_INSECURE_REGISTRIES`,
    /// `ARI_REGISTRY_DELEGATE_HOSTS`, `ARI_PRIVATE_REGISTRIES`,
    /// `ARI_REGISTRY_ALLOW_INTERNAL_ADDRESSES`): pulls here follow the operator's.
    pub registry: ari_oci::ClientOptions,
    /// `ARI_LIVE_LOG_WRITES_PER_SECOND` / `ARI_LIVE_LOG_BURST`: live-log writes of the whole
    /// pod (every write rewrites a whole Task object).
    pub live_log_rate: WriteRate,
    /// `ARI_PARKED_MEMORY_BYTES`: memory parked parents may hold at once; when unset, what the
    /// pod's cgroup limit leaves (see `slots::parking_budget`).
    pub parked_memory_bytes: Option<u64>,
    /// `ARI_MODELS` and the `ARI_MODEL_KEY_<n>` variables it names: the granted models the
    /// operator handed over, with their keys (see [`super::models`]).
    pub models: GrantedModels,
    /// `ARI_TOOL_SERVERS` and the `ARI_TOOL_TOKEN_<n>` / `ARI_TOOL_HEADER_<n>_<h>` variables it
    /// names: the granted MCP servers the operator handed over (see [`super::tools`]).
    pub tools: GrantedTools,
}

/// A pool pod's own settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    pub name: String,
    /// Compiled modules kept in memory; colder Agents are evicted when idle.
    pub hot_modules: usize,
}

/// A dedicated executor's signing key: its Agent's one `signing.secretRef`.
const SIGNING_KEY_ENV: &str = "ARI_SIGNING_KEY";

/// Where the executor image carries the stock agent component (the operator's image too).
pub const STOCK_AGENT_PATH: &str = "/usr/share/ari/declarative.wasm";

impl std::fmt::Debug for WorkerConfig {
    // Hand-written so the signing key can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("agent", &self.agent)
            .field("pool", &self.pool)
            .field("namespace", &self.namespace)
            .field("pod_name", &self.pod_name)
            .field("concurrency", &self.concurrency)
            .field("priorities", &self.priorities)
            .field("metrics_addr", &self.metrics_addr)
            .field("redis", &self.redis_url.is_some())
            .field("state_dir", &self.state_dir)
            .field("cache_dir", &self.cache_dir)
            .field("heartbeat", &self.heartbeat)
            .field("steal_after", &self.steal_after)
            .field("module_image", &self.module_image)
            .field("stock_agent", &self.stock_agent)
            .field("declaration_digest", &self.declaration_digest)
            .field("module_pull_secret", &self.module_pull_secret.is_some())
            .field("registry", &self.registry)
            .field("live_log_rate", &self.live_log_rate)
            .field("models", &self.models)
            .field("tools", &self.tools)
            .field("signing_key", &self.signing_key.is_some())
            .field("signing_keys", &self.signing_keys)
            .field("pull_secrets", &self.pull_secrets)
            .finish_non_exhaustive()
    }
}

impl WorkerConfig {
    /// Reads `ARI_AGENT_NAME`, `POD_NAME`, `POD_NAMESPACE`, `ARI_ATTESTATION_KEY` (required) and
    /// `ARI_CONCURRENCY`, `ARI_METRICS_ADDR`, `ARI_REDIS_URL`, `ARI_STATE_DIR`, `ARI_CACHE_DIR`,
    /// `ARI_HEARTBEAT_SECONDS`, `ARI_STEAL_AFTER_MS`, `ARI_SIGNING_KEY` (optional).
    pub fn from_env() -> Result<Self, WorkerError> {
        Ok(Self::from_lookup(|k| {
            std::env::var(k).ok().filter(|v| !v.is_empty())
        })?)
    }

    /// As [`Self::from_env`], from any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |k: &'static str| get(k).ok_or(ConfigError::Missing(k));
        let pool = pool_settings(&get)?;
        // A pool pod serves the Agents naming its pool; any other pod, one Agent.
        let agent = match &pool {
            Some(_) => String::new(),
            None => required("ARI_AGENT_NAME")?,
        };
        let namespace = required("POD_NAMESPACE")?;
        let pod_name = required("POD_NAME")?;
        let key_text = required("ARI_ATTESTATION_KEY")?;
        let attestation_key = ari_runtime::attestation::parse_signing_key(key_text.as_bytes())
            .ok_or(ConfigError::AttestationKey)?;
        let attestation_key_mismatch = get("ARI_ATTESTATION_PUBLIC_KEY").and_then(|want| {
            let have = hex::encode(attestation_key.verifying_key().to_bytes());
            (!want.trim().eq_ignore_ascii_case(&have)).then(|| KeyMismatch {
                have,
                want: want.trim().to_owned(),
            })
        });
        let concurrency = match get("ARI_CONCURRENCY") {
            None => 4,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or(ConfigError::Invalid {
                    var: "ARI_CONCURRENCY",
                    value: v,
                    want: "1..=1024",
                })?,
        };
        let priorities = match get(GUEST_PRIORITIES_ENV) {
            None => GuestPriorities::default(),
            Some(v) => v.parse().map_err(|_| ConfigError::Invalid {
                var: GUEST_PRIORITIES_ENV,
                value: v,
                want: "shares or flat",
            })?,
        };
        let metrics_addr = get("ARI_METRICS_ADDR")
            .unwrap_or_else(|| "0.0.0.0:8080".into())
            .parse::<SocketAddr>()
            .map_err(ConfigError::MetricsAddr)?;
        let heartbeat = match get("ARI_HEARTBEAT_SECONDS") {
            None => Duration::from_secs(10),
            Some(v) => {
                Duration::from_secs(v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    ConfigError::Invalid {
                        var: "ARI_HEARTBEAT_SECONDS",
                        value: v.clone(),
                        want: "whole seconds above 0",
                    }
                })?)
            }
        };
        let steal_after = match get("ARI_STEAL_AFTER_MS") {
            None => Duration::from_millis(250),
            Some(v) => {
                Duration::from_millis(v.parse::<u64>().map_err(|_| ConfigError::Invalid {
                    var: "ARI_STEAL_AFTER_MS",
                    value: v.clone(),
                    want: "whole milliseconds",
                })?)
            }
        };
        let default_rate = WriteRate::default();
        let live_log_rate = WriteRate {
            per_second: positive(
                &get,
                "ARI_LIVE_LOG_WRITES_PER_SECOND",
                default_rate.per_second,
            )?,
            burst: positive(&get, "ARI_LIVE_LOG_BURST", default_rate.burst)?,
        };
        let parked_memory_bytes = get("ARI_PARKED_MEMORY_BYTES")
            .map(|v| {
                v.parse::<u64>().map_err(|_| ConfigError::Invalid {
                    var: "ARI_PARKED_MEMORY_BYTES",
                    value: v.clone(),
                    want: "whole bytes",
                })
            })
            .transpose()?;
        Ok(Self {
            agent,
            pool,
            namespace,
            pod_name,
            concurrency,
            priorities,
            metrics_addr,
            redis_url: get("ARI_REDIS_URL"),
            state_dir: get("ARI_STATE_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/lib/ari")),
            cache_dir: get("ARI_CACHE_DIR").map(PathBuf::from),
            attestation_key,
            attestation_key_mismatch,
            signing_key: get(SIGNING_KEY_ENV),
            signing_key_env: SIGNING_KEY_ENV.to_owned(),
            signing_keys: PoolSecrets::from_lookup(&get, ari_crds::pool::SIGNING_KEYS_ENV)?,
            pull_secrets: PoolSecrets::from_lookup(&get, ari_crds::pool::PULL_SECRETS_ENV)?,
            heartbeat,
            steal_after,
            module_digest: get("ARI_MODULE_DIGEST"),
            module_image: get("ARI_MODULE_IMAGE"),
            stock_agent: get("ARI_STOCK_AGENT")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(STOCK_AGENT_PATH)),
            declaration_digest: get("ARI_DECLARATION_DIGEST"),
            module_pull_secret: get("ARI_MODULE_PULL_SECRET"),
            registry: ari_oci::ClientOptions::from_env(&get),
            live_log_rate,
            parked_memory_bytes,
            models: GrantedModels::from_lookup(&get)?,
            tools: GrantedTools::from_lookup(&get)?,
        })
    }
}

/// `ARI_POOL_NAME` and `ARI_HOT_MODULES` (default 256, at most 100,000).
fn pool_settings(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<PoolSettings>, ConfigError> {
    let Some(name) = get("ARI_POOL_NAME") else {
        return Ok(None);
    };
    let hot_modules = match get("ARI_HOT_MODULES") {
        None => usize::try_from(ari_crds::pool::DEFAULT_HOT_MODULES).unwrap_or(usize::MAX),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or(ConfigError::Invalid {
                var: "ARI_HOT_MODULES",
                value: v,
                want: "1..=100000",
            })?,
    };
    Ok(Some(PoolSettings { name, hot_modules }))
}

impl WorkerConfig {
    /// The settings of one Agent hosted by this pool pod: the pod's own, with the Agent's
    /// name, its executor concurrency (its share of the pod), the module and declaration the
    /// operator resolved (`status.moduleDigest`, `status.moduleImage`,
    /// `status.declarationDigest`), and of the pod's models, MCP servers, signing keys and pull
    /// secrets (its Agents' together) only those this Agent's spec grants or names: the key of
    /// its own `signing.secretRef` and its own `module.imagePullSecrets`, never a neighbour's.
    pub fn for_pooled(&self, agent: &ari_crds::Agent, resolved: &Resolved) -> Self {
        let share = usize::try_from(agent.spec.concurrency()).unwrap_or(usize::MAX);
        let own = agent
            .spec
            .capabilities
            .signing
            .as_ref()
            .and_then(|g| self.signing_keys.key_for(&g.secret_ref));
        let pull_secrets = self.pull_secrets.only(own_pull_secrets(&agent.spec).iter());
        Self {
            agent: kube::ResourceExt::name_any(agent),
            concurrency: share.min(self.concurrency),
            attestation_key_mismatch: None,
            signing_key: own.as_ref().and_then(|k| k.text.map(str::to_owned)),
            signing_key_env: own.map_or_else(|| SIGNING_KEY_ENV.to_owned(), |k| k.var.to_owned()),
            signing_keys: PoolSecrets::default(),
            module_digest: Some(resolved.digest.clone()),
            module_image: resolved.image.clone(),
            declaration_digest: resolved.declaration.clone(),
            module_pull_secret: None,
            pull_secrets,
            models: self.models.granted_to(&agent.spec.capabilities),
            tools: self.tools.granted_to(&agent.spec.capabilities),
            ..self.clone()
        }
    }

    /// Whether this pool pod may host `agent`, or why not: it was handed every Secret key the
    /// Agent names (its signing key, its pull secrets; else its Deployment predates them and
    /// the pool is rolling to pods that carry them), and storage, when granted, is the shared
    /// Redis (an embedded store would be this pod's alone).
    pub fn can_host(&self, agent: &ari_crds::AgentSpec) -> Result<(), &'static str> {
        let signing = agent.capabilities.signing.iter().map(|g| &g.secret_ref);
        if !self.signing_keys.carries_all(signing) {
            return Err("this pod was not handed its signing key");
        }
        if !self
            .pull_secrets
            .carries_all(own_pull_secrets(agent).iter())
        {
            return Err("this pod was not handed its pull secrets");
        }
        if agent.capabilities.storage.is_some() && self.redis_url.is_none() {
            return Err("storage in a pool needs the operator's Redis");
        }
        Ok(())
    }
}

/// The pull secrets `agent` names, in its order, as a pool hands them over.
fn own_pull_secrets(agent: &ari_crds::AgentSpec) -> Vec<ari_crds::SecretKeyRef> {
    agent
        .module
        .pull_secret_names()
        .map(ari_crds::pool::pull_secret_ref)
        .collect()
}

/// The module of a pooled Agent as the operator resolved it for the Agent's current spec:
/// what its worker is built for, so a change to any of it rebuilds the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub digest: String,
    pub image: Option<String>,
    /// For a declarative Agent, its declaration's digest (`status.declarationDigest`): the
    /// worker refuses a declaration that resolves otherwise, and a ConfigMap edit the
    /// operator has resolved rebuilds it.
    pub declaration: Option<String>,
}

impl Resolved {
    /// From the Agent's status, once the operator has resolved its current generation's
    /// module (and for a declarative Agent its declaration); `None` before then (its Tasks
    /// wait) or when the module did not resolve.
    pub fn of(agent: &ari_crds::Agent) -> Option<Self> {
        let status = agent.status.as_ref()?;
        if status.observed_generation != agent.metadata.generation {
            return None;
        }
        let resolved = ari_crds::conditions::is_true(
            &status.conditions,
            ari_crds::conditions::MODULE_RESOLVED,
        );
        let declaration = match agent.spec.declarative {
            Some(_) => Some(status.declaration_digest.clone()?),
            None => None,
        };
        Some(Self {
            digest: status.module_digest.clone().filter(|_| resolved)?,
            image: status.module_image.clone(),
            declaration,
        })
    }
}

/// `key` as a number from 1 to 1000, or `default` when unset.
fn positive(
    get: &impl Fn(&str) -> Option<String>,
    key: &'static str,
    default: NonZeroU32,
) -> Result<NonZeroU32, ConfigError> {
    match get(key) {
        None => Ok(default),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .and_then(NonZeroU32::new)
            .ok_or(ConfigError::Invalid {
                var: key,
                value: v,
                want: "1..=1000",
            }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const KEY: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    /// A pool pod holding `small` (keyed, rate-limited) and `open`, and MCP servers `docs`
    /// (a token) and `search`, as the union of its Agents' grants.
    fn pool_pod() -> WorkerConfig {
        let models = serde_json::json!([
            {"name": "small", "keyEnv": "ARI_MODEL_KEY_0", "spec": {
                "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": "tiny",
                "credentials": {"name": "k", "key": "apiKey"},
                "limits": {"requestsPerMinute": 60}}},
            {"name": "open", "spec": {
                "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": "open"}}
        ])
        .to_string();
        let tools = serde_json::json!([
            {"name": "docs", "spec": {"url": "http://127.0.0.1:9/mcp",
              "token": {"name": "t", "key": "token"}}, "tokenEnv": "ARI_TOOL_TOKEN_0"},
            {"name": "search", "spec": {"url": "http://127.0.0.1:9/search"}}
        ])
        .to_string();
        WorkerConfig::from_lookup(env(&[
            ("ARI_POOL_NAME", "shared"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", KEY),
            ("ARI_MODELS", &models),
            ("ARI_MODEL_KEY_0", "sk-pool-test"),
            (ari_crds::mcp_server::TOOL_SERVERS_ENV, &tools),
            ("ARI_TOOL_TOKEN_0", "docs-token"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn pooled(name: &str, caps: serde_json::Value) -> ari_crds::Agent {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                     "executor": {"pool": "shared"}, "capabilities": caps}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_pooled_agents_worker_gets_only_the_models_and_servers_its_own_spec_grants() {
        let pod = pool_pod();
        let resolved = Resolved {
            digest: "sha256:00".into(),
            image: None,
            declaration: None,
        };
        let names = |c: &WorkerConfig| -> (Vec<String>, Vec<String>) {
            (
                c.models.models.iter().map(|m| m.name.clone()).collect(),
                c.tools.servers.iter().map(|s| s.name.clone()).collect(),
            )
        };
        let ask = pooled(
            "ask",
            serde_json::json!({"models": {"allowed": ["small"]},
                               "tools": {"servers": [{"name": "docs", "tools": ["*"]}]}}),
        );
        let open = pooled("open", serde_json::json!({"models": {"allowed": ["open"]}}));
        let plain = pooled("plain", serde_json::json!({}));
        let (small, docs) = (vec!["small".to_owned()], vec!["docs".to_owned()]);
        assert_eq!(names(&pod.for_pooled(&ask, &resolved)), (small, docs));
        assert_eq!(
            names(&pod.for_pooled(&open, &resolved)),
            (vec!["open".to_owned()], vec![])
        );
        assert_eq!(names(&pod.for_pooled(&plain, &resolved)), (vec![], vec![]));

        // The Agent's models keep the pod's one limiter per model.
        let (models, _shares) = pod.models.limited(1);
        let client = crate::worker::model_client().unwrap_or_else(|e| panic!("{e}"));
        let pod_models = crate::worker::PodModels { client, models };
        let handed = pod_models.granted(&pod.for_pooled(&ask, &resolved).models);
        let (mine, pods) = (handed.get("small"), pod_models.models.first());
        let limiter = |m: Option<&ari_llm::Model>| m.and_then(|m| m.rate.clone());
        assert!(matches!(
            (limiter(mine), limiter(pods)),
            (Some(a), Some(b)) if Arc::ptr_eq(&a, &b)
        ));
        assert!(handed.get("open").is_none());
    }

    #[test]
    fn a_pooled_agents_worker_gets_the_key_of_its_own_secret_ref_and_no_neighbours() {
        const OTHER: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
        let keys = serde_json::json!([
            {"secretRef": {"name": "a-key", "key": "private-key"}, "keyEnv": "ARI_SIGNING_KEY_0"},
            {"secretRef": {"name": "b-key", "key": "private-key"}, "keyEnv": "ARI_SIGNING_KEY_1"},
            {"secretRef": {"name": "empty", "key": "private-key"}, "keyEnv": "ARI_SIGNING_KEY_2"}
        ])
        .to_string();
        let pod = WorkerConfig::from_lookup(env(&[
            ("ARI_POOL_NAME", "shared"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", KEY),
            (ari_crds::pool::SIGNING_KEYS_ENV, &keys),
            ("ARI_SIGNING_KEY_0", KEY),
            ("ARI_SIGNING_KEY_1", OTHER),
            // The pod's own variable is no pooled Agent's key.
            ("ARI_SIGNING_KEY", "not-for-agents"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let resolved = Resolved {
            digest: "sha256:00".into(),
            image: None,
            declaration: None,
        };
        let signer = |name: &str, secret: &str| {
            pooled(
                name,
                serde_json::json!({"signing": {"keyId": name,
                    "secretRef": {"name": secret, "key": "private-key"}}}),
            )
        };
        let key_of = |agent: &ari_crds::Agent| {
            let c = pod.for_pooled(agent, &resolved);
            (
                c.signing_key,
                c.signing_key_env,
                c.signing_keys
                    .key_for(&ari_crds::SecretKeyRef {
                        name: "b-key".into(),
                        key: "private-key".into(),
                    })
                    .is_some(),
            )
        };
        let (a, b) = (signer("a", "a-key"), signer("b", "b-key"));
        assert_eq!(
            key_of(&a),
            (Some(KEY.to_owned()), "ARI_SIGNING_KEY_0".to_owned(), false)
        );
        assert_eq!(
            key_of(&b),
            (
                Some(OTHER.to_owned()),
                "ARI_SIGNING_KEY_1".to_owned(),
                false
            )
        );
        // Listed but empty: the worker names the variable in its error.
        let empty = signer("e", "empty");
        assert_eq!(
            key_of(&empty),
            (None, "ARI_SIGNING_KEY_2".to_owned(), false)
        );
        assert_eq!(pod.can_host(&empty.spec), Ok(()));
        // A pair this pod was not handed: not hosted here, and no key in any case.
        let newer = signer("n", "new-key");
        assert!(pod.can_host(&newer.spec).is_err());
        assert_eq!(key_of(&newer).0, None);
        let plain = pooled("plain", serde_json::json!({}));
        assert_eq!(pod.can_host(&plain.spec), Ok(()));
        assert_eq!(
            key_of(&plain).0,
            None,
            "an Agent that signs nothing got a key"
        );
        // No key reaches a log line.
        let shown = format!("{pod:?}");
        assert!(!shown.contains(KEY) && !shown.contains(OTHER), "{shown}");
        assert!(shown.contains("b-key"), "{shown}");
    }

    #[test]
    fn a_pooled_agents_worker_gets_only_its_own_pull_secrets_and_none_is_printed() {
        let config = |user: &str| {
            serde_json::json!({"auths": {"r.example": {"username": user,
                                                       "password": format!("{user}-password")}}})
            .to_string()
        };
        let (a, b) = (config("a"), config("b"));
        let list = serde_json::json!([
            {"secretRef": {"name": "a-reg", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_0"},
            {"secretRef": {"name": "b-reg", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_1"},
            {"secretRef": {"name": "empty", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_2"}
        ])
        .to_string();
        let pod = WorkerConfig::from_lookup(env(&[
            ("ARI_POOL_NAME", "shared"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", KEY),
            (ari_crds::pool::PULL_SECRETS_ENV, &list),
            ("ARI_PULL_SECRET_0", &a),
            ("ARI_PULL_SECRET_1", &b),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let resolved = Resolved {
            digest: "sha256:00".into(),
            image: Some("r.example/echo@sha256:00".into()),
            declaration: None,
        };
        let puller = |name: &str, secrets: &[&str]| -> ari_crds::Agent {
            let names: Vec<serde_json::Value> = secrets
                .iter()
                .map(|s| serde_json::json!({"name": s}))
                .collect();
            serde_json::from_value(serde_json::json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"module": {"image": "r.example/echo:v1", "imagePullSecrets": names},
                         "executor": {"pool": "shared"}}
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let own = |agent: &ari_crds::Agent| -> Vec<(String, Option<String>)> {
            let c = pod.for_pooled(agent, &resolved);
            assert_eq!(c.module_pull_secret, None, "the pod's one pull secret");
            c.pull_secrets
                .iter()
                .map(|(r, k)| (r.name.clone(), k.text.map(str::to_owned)))
                .collect()
        };
        // Each its own, in its own order; never a neighbour's.
        assert_eq!(
            own(&puller("a", &["a-reg"])),
            [("a-reg".to_owned(), Some(a.clone()))]
        );
        assert_eq!(
            own(&puller("b", &["b-reg", "a-reg"])),
            [
                ("b-reg".to_owned(), Some(b.clone())),
                ("a-reg".to_owned(), Some(a.clone()))
            ]
        );
        assert_eq!(own(&puller("plain", &[])), []);
        assert_eq!(own(&pooled("configmap", serde_json::json!({}))), []);
        // Listed but empty: hosted, and its worker names the variable in its error.
        let empty = puller("e", &["empty"]);
        assert_eq!(pod.can_host(&empty.spec), Ok(()));
        assert_eq!(own(&empty), [("empty".to_owned(), None)]);
        // A Secret this pod was not handed: not hosted here.
        assert!(
            pod.can_host(&puller("n", &["a-reg", "new-reg"]).spec)
                .is_err()
        );
        // No docker config reaches a log line, the pod's or a worker's.
        for shown in [
            format!("{pod:?}"),
            format!("{:?}", pod.for_pooled(&puller("a", &["a-reg"]), &resolved)),
        ] {
            assert!(
                !shown.contains("password") && !shown.contains("auths"),
                "{shown}"
            );
            assert!(shown.contains("a-reg"), "{shown}");
        }
    }

    #[test]
    fn a_pool_pod_hosts_an_agent_granted_storage_only_with_the_shared_redis() {
        let storing = pooled(
            "counter",
            serde_json::json!({"storage": {"maxBytes": 1024}}),
        );
        let pod = pool_pod();
        assert!(pod.can_host(&storing.spec).is_err(), "an embedded store");
        assert_eq!(
            pod.can_host(&pooled("p", serde_json::json!({})).spec),
            Ok(())
        );
        let shared = WorkerConfig {
            redis_url: Some("redis://127.0.0.1:6379".into()),
            ..pool_pod()
        };
        assert_eq!(shared.can_host(&storing.spec), Ok(()));
        let resolved = Resolved {
            digest: "sha256:00".into(),
            image: None,
            declaration: None,
        };
        assert_eq!(
            shared.for_pooled(&storing, &resolved).redis_url.as_deref(),
            Some("redis://127.0.0.1:6379"),
            "the worker's store is not the shared one"
        );
    }

    /// A pooled declarative Agent at `generation` whose status the operator wrote for
    /// `observed`, with its declaration's digest when it resolved.
    fn declared(generation: i64, observed: i64, declaration: Option<&str>) -> ari_crds::Agent {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "triage", "namespace": "ns", "generation": generation},
            "spec": {"declarative": {"instructions": "triage", "model": "small"},
                     "capabilities": {"models": {"allowed": ["small"]}},
                     "executor": {"pool": "shared"}},
            "status": {"observedGeneration": observed, "moduleDigest": "sha256:57",
                       "declarationDigest": declaration,
                       "conditions": [{"type": "ModuleResolved", "status": "True",
                                       "reason": "Resolved", "message": "",
                                       "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_pooled_declarative_agent_pins_the_declaration_resolved_for_its_current_generation() {
        let pod = pool_pod();
        let current = declared(2, 2, Some("sha256:d2"));
        let resolved = Resolved::of(&current).unwrap_or_else(|| panic!("resolved"));
        let config = pod.for_pooled(&current, &resolved);
        assert_eq!(config.declaration_digest.as_deref(), Some("sha256:d2"));
        assert_eq!(config.module_digest.as_deref(), Some("sha256:57"));
        assert_eq!(
            Resolved::of(&declared(3, 2, Some("sha256:d2"))),
            None,
            "a digest resolved for an older spec was used"
        );
        assert_eq!(
            Resolved::of(&declared(2, 2, None)),
            None,
            "a declarative Agent started without its declaration's digest"
        );
    }

    #[test]
    fn reads_the_module_digest_the_operator_validated() {
        let c = WorkerConfig::from_lookup(env(&[
            ("ARI_AGENT_NAME", "echo"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "echo-executor-1"),
            ("ARI_ATTESTATION_KEY", KEY),
            ("ARI_MODULE_DIGEST", "sha256:abc"),
        ]))
        .expect("valid config");
        assert_eq!(c.module_digest.as_deref(), Some("sha256:abc"));
    }

    #[test]
    fn reads_the_pinned_image_and_never_prints_the_pull_secret() {
        let c = WorkerConfig::from_lookup(env(&[
            ("ARI_AGENT_NAME", "echo"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", KEY),
            ("ARI_MODULE_IMAGE", "127.0.0.1:5000/echo@sha256:abc"),
            (
                "ARI_MODULE_PULL_SECRET",
                r#"{"auths":{"r":{"auth":"c2VjcmV0"}}}"#,
            ),
            ("ARI_INSECURE_REGISTRIES", "127.0.0.1:5000, ,localhost:5001"),
        ]))
        .expect("valid config");
        assert_eq!(
            c.module_image.as_deref(),
            Some("127.0.0.1:5000/echo@sha256:abc")
        );
        assert_eq!(
            c.registry.insecure_registries,
            ["127.0.0.1:5000", "localhost:5001"]
        );
        assert!(c.registry.refuse_internal_addresses);
        assert!(c.module_pull_secret.is_some());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("c2VjcmV0") && !shown.contains("auths"),
            "{shown}"
        );
    }

    #[test]
    fn reads_required_and_defaults() {
        let c = WorkerConfig::from_lookup(env(&[
            ("ARI_AGENT_NAME", "echo"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "echo-executor-1"),
            ("ARI_ATTESTATION_KEY", KEY),
        ]))
        .expect("valid config");
        assert_eq!(c.agent, "echo");
        assert_eq!(c.concurrency, 4);
        assert_eq!(c.heartbeat, Duration::from_secs(10));
        assert_eq!(c.steal_after, Duration::from_millis(250));
        assert!(c.signing_key.is_none());
        assert!(c.module_digest.is_none());
        assert!(
            !format!("{c:?}").contains(KEY),
            "the key must never be printed"
        );
    }

    #[test]
    fn rejects_missing_and_bad_values() {
        let err = WorkerConfig::from_lookup(env(&[("ARI_AGENT_NAME", "echo")]))
            .expect_err("namespace missing");
        assert!(err.to_string().contains("POD_NAMESPACE"), "{err}");
        let err = WorkerConfig::from_lookup(env(&[
            ("ARI_AGENT_NAME", "echo"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", "nope"),
        ]))
        .expect_err("bad key");
        assert!(err.to_string().contains("ARI_ATTESTATION_KEY"), "{err}");
        let err = WorkerConfig::from_lookup(env(&[
            ("ARI_AGENT_NAME", "echo"),
            ("POD_NAMESPACE", "ns"),
            ("POD_NAME", "p"),
            ("ARI_ATTESTATION_KEY", KEY),
            ("ARI_CONCURRENCY", "0"),
        ]))
        .expect_err("zero concurrency");
        assert!(err.to_string().contains("ARI_CONCURRENCY"), "{err}");
    }

    #[test]
    fn a_key_that_is_not_the_published_one_is_flagged_not_used() {
        let with = |public: &str| {
            WorkerConfig::from_lookup(env(&[
                ("ARI_AGENT_NAME", "echo"),
                ("POD_NAMESPACE", "ns"),
                ("POD_NAME", "p"),
                ("ARI_ATTESTATION_KEY", KEY),
                ("ARI_ATTESTATION_PUBLIC_KEY", public),
            ]))
            .expect("valid config")
        };
        // RFC 8032 test 1: KEY's public key.
        let ok = with("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        assert!(ok.attestation_key_mismatch.is_none());
        let planted = with(&"ab".repeat(32));
        let why = planted
            .attestation_key_mismatch
            .map(|m| ConfigError::AttestationKeyReplaced(m).to_string())
            .unwrap_or_default();
        assert!(why.contains("refusing to sign"), "{why}");
    }

    /// Each bad environment is its own error, naming the variable and what it wants.
    #[test]
    fn each_bad_variable_is_its_own_error_saying_what_to_fix() {
        type Check = fn(&ConfigError) -> bool;
        type Env = &'static [(&'static str, &'static str)];
        // (the variables changed, the error expected, what its message says)
        let table: Vec<(Env, Check, &str)> = vec![
            (
                &[("POD_NAMESPACE", "")],
                |e| matches!(e, ConfigError::Missing("POD_NAMESPACE")),
                "POD_NAMESPACE is not set",
            ),
            (
                &[("ARI_ATTESTATION_KEY", "nope")],
                |e| matches!(e, ConfigError::AttestationKey),
                "64 hex digits or PKCS#8 PEM",
            ),
            (
                &[("ARI_CONCURRENCY", "0")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_CONCURRENCY",
                            ..
                        }
                    )
                },
                "ARI_CONCURRENCY=0: want 1..=1024",
            ),
            (
                &[("ARI_CONCURRENCY", "many")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_CONCURRENCY",
                            ..
                        }
                    )
                },
                "ARI_CONCURRENCY=many",
            ),
            (
                &[("ARI_METRICS_ADDR", "port 80")],
                |e| matches!(e, ConfigError::MetricsAddr(_)),
                "ARI_METRICS_ADDR",
            ),
            (
                &[("ARI_HEARTBEAT_SECONDS", "0")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_HEARTBEAT_SECONDS",
                            ..
                        }
                    )
                },
                "ARI_HEARTBEAT_SECONDS=0: want whole seconds above 0",
            ),
            (
                &[("ARI_STEAL_AFTER_MS", "-1")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_STEAL_AFTER_MS",
                            ..
                        }
                    )
                },
                "ARI_STEAL_AFTER_MS=-1",
            ),
            (
                &[("ARI_LIVE_LOG_BURST", "1001")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_LIVE_LOG_BURST",
                            ..
                        }
                    )
                },
                "ARI_LIVE_LOG_BURST=1001: want 1..=1000",
            ),
            (
                &[("ARI_LIVE_LOG_WRITES_PER_SECOND", "0")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_LIVE_LOG_WRITES_PER_SECOND",
                            ..
                        }
                    )
                },
                "want 1..=1000",
            ),
            (
                &[("ARI_PARKED_MEMORY_BYTES", "1GiB")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_PARKED_MEMORY_BYTES",
                            ..
                        }
                    )
                },
                "ARI_PARKED_MEMORY_BYTES=1GiB",
            ),
            (
                &[("ARI_GUEST_PRIORITIES", "fair")],
                |e| {
                    matches!(
                        e,
                        ConfigError::Invalid {
                            var: "ARI_GUEST_PRIORITIES",
                            ..
                        }
                    )
                },
                "ARI_GUEST_PRIORITIES=fair: want shares or flat",
            ),
        ];
        for (bad, check, says) in table {
            let good = [
                ("ARI_AGENT_NAME", "echo"),
                ("POD_NAMESPACE", "ns"),
                ("POD_NAME", "p"),
                ("ARI_ATTESTATION_KEY", KEY),
            ];
            let vars: Vec<(&str, &str)> = good
                .iter()
                .filter(|(k, _)| !bad.iter().any(|(b, _)| b == k))
                .chain(bad.iter().filter(|(_, v)| !v.is_empty()))
                .copied()
                .collect();
            let err = WorkerConfig::from_lookup(env(&vars)).expect_err("a bad environment");
            assert!(check(&err), "{bad:?}: {err:?}");
            assert!(err.to_string().contains(says), "{bad:?}: {err}");
        }
    }
}
