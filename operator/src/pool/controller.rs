//! ExecutorPool reconcile: the pool ServiceAccount and Role, the namespace's attestation key,
//! the pool's Deployment (with the models, MCP servers, signing keys and pull secrets its
//! Agents are granted or name, see [`super::grants`] and [`super::secrets`]) → `Ready`,
//! replicas and how many Agents name the pool.
//!
//! A pooled Agent's own reconcile takes its readiness from the pool's status (see
//! [`agent_ready`]); the Agent controller watches pools for that.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::{Agent, ExecutorPool, ExecutorPoolStatus, names};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::{grants, secrets};
use crate::agent::{deployment, models, rbac, tools};
use crate::context::Context;
use crate::error::Error;

/// What the pool reconcile reads besides the pool.
pub struct PoolContext {
    pub base: Arc<Context>,
    /// The operator's Agent cache: each pool's Agents, counted, and what they are granted.
    pub agents: Store<Agent>,
}

/// How often a pool's Agent count, and its signing and pull Secrets' versions (an edited key
/// rolls the pool), are refreshed when nothing else changes.
const RECOUNT: Duration = Duration::from_secs(60);
/// How soon a granted model, server, signing key or pull secret whose Secret is missing or
/// unmarked is
/// looked at again (Secrets are not watched), as for a dedicated Agent.
const RECHECK_CREDENTIALS: Duration = Duration::from_secs(30);

/// Reconciles one ExecutorPool.
pub async fn reconcile(pool: Arc<ExecutorPool>, ctx: Arc<PoolContext>) -> Result<Action, Error> {
    let base = &ctx.base;
    base.metrics.reconciles.with_label_values(&["pool"]).inc();
    let _timer = base
        .metrics
        .reconcile_duration
        .with_label_values(&["pool"])
        .start_timer();
    let ns = pool.namespace().ok_or(Error::NoNamespace)?;
    let name = pool.name_any();
    let client = base.client.clone();

    let key = rbac::executor_prerequisites(base, &ns, names::POOL_SERVICE_ACCOUNT, rbac::pool_role)
        .await?;
    let granted = grants::union(&ctx.agents.state(), &ns, &name);
    let models = models::fetch_names(&granted.models(), &client, &ns).await?;
    let tools = tools::fetch_names(&granted.tools(), &client, &ns).await?;
    let keys = secrets::fetch_signing(&granted.signing, &client, &ns).await?;
    let pulls = secrets::fetch_pull(&granted.pull_secrets, &client, &ns).await?;
    for (kind, resolved) in [(&secrets::SIGNING, &keys), (&secrets::PULL, &pulls)] {
        if let Some(note) = resolved.over_bound_note(kind) {
            tracing::warn!(pool = %name, namespace = %ns, "{note}");
            base.event(
                pool.as_ref(),
                true,
                kind.over_bound_reason,
                "Reconcile",
                note,
            )
            .await;
        }
    }
    let dep = deployment::build_pool(
        &pool,
        &base.settings,
        &key.public_key,
        &models.usable,
        &tools.usable,
        &keys,
        &pulls,
    );
    let applied = Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch(
            &names::pool_deployment_name(&name),
            &PatchParams::apply(names::OPERATOR_FIELD_MANAGER).force(),
            &Patch::Apply(&dep),
        )
        .await?;
    let st = applied.status.unwrap_or_default();
    let old = pool.status.clone().unwrap_or_default();
    let available = st.available_replicas.unwrap_or(0);
    let mut status = ExecutorPoolStatus {
        observed_generation: pool.metadata.generation,
        replicas: Some(st.replicas.unwrap_or(0)),
        ready_replicas: Some(st.ready_replicas.unwrap_or(0)),
        available_replicas: Some(available),
        agents: Some(count_agents(&ctx.agents, &ns, &name)),
        ..old.clone()
    };
    let (s, reason, message) = ready(available);
    conditions::set(
        &mut status.conditions,
        conditions::READY,
        s,
        reason,
        message,
        pool.metadata.generation,
        Time(Timestamp::now()),
    );
    if status != old {
        Api::<ExecutorPool>::namespaced(client, &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await?;
    }
    let waiting = !models.unusable.is_empty()
        || !tools.unusable.is_empty()
        || !keys.unusable.is_empty()
        || !pulls.unusable.is_empty();
    Ok(Action::requeue(if waiting {
        RECHECK_CREDENTIALS
    } else {
        RECOUNT
    }))
}

/// The pool's `Ready` from its available pods.
fn ready(available: i32) -> (ConditionStatus, &'static str, String) {
    if available > 0 {
        (
            ConditionStatus::True,
            "ExecutorsAvailable",
            format!("{available} pool executor(s) available"),
        )
    } else {
        (
            ConditionStatus::False,
            "NoExecutorAvailable",
            "waiting for an available pool executor".into(),
        )
    }
}

/// Agents of `namespace` naming pool `name`.
fn count_agents(agents: &Store<Agent>, namespace: &str, name: &str) -> i32 {
    let n = grants::pooled(&agents.state(), namespace, name).count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How many pods of the pool a pooled Agent can count on: the pool's available replicas, or
/// why none (the Agent's `Ready=False` reason and message). `redis` is whether the operator
/// runs with a Redis URL, which every pool pod then shares: without one, each pod's store
/// would be its own, so no pod hosts an Agent granted storage.
pub fn agent_ready(
    pool: Option<&ExecutorPool>,
    name: &str,
    agent: &ari_crds::AgentSpec,
    redis: bool,
) -> Result<i32, (&'static str, String)> {
    if agent.capabilities.storage.is_some() && !redis {
        return Err((
            POOL_STORAGE_NEEDS_REDIS,
            format!(
                "capabilities.storage in ExecutorPool {name} needs the operator's Redis (its \
                 pods would each keep a store of their own): set the operator's Redis URL \
                 (--redis-url or ARI_REDIS_URL, chart redis.url), or remove spec.executor.pool to give the \
                 Agent an executor of its own"
            ),
        ));
    }
    let Some(pool) = pool else {
        return Err((
            "PoolNotFound",
            format!("ExecutorPool {name} does not exist in this namespace"),
        ));
    };
    Ok(pool
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0))
}

/// What of a pool its Agents' status reads: their replica counts and [`agent_ready`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    replicas: Option<i32>,
    ready: Option<i32>,
    available: Option<i32>,
}

impl Readiness {
    pub fn of(pool: &ExecutorPool) -> Self {
        let s = pool.status.clone().unwrap_or_default();
        Self {
            replicas: s.replicas,
            ready: s.ready_replicas,
            available: s.available_replicas,
        }
    }
}

/// The readiness last seen of each pool. A pool's status also counts its Agents, which
/// changes with every Agent that joins: waking all of a pool's Agents on each status write
/// reconciled every Agent once per Agent applied (10,000 Agents: 575 s to Ready, a spec
/// change's status 94 s late). Only what their status reads wakes them.
#[derive(Default)]
pub struct PoolsSeen(std::collections::HashMap<ObjectRef<ExecutorPool>, Readiness>);

impl PoolsSeen {
    /// The pool whose Agents `event` must wake: one that appeared, went, or whose readiness
    /// changed.
    pub fn wakes(&mut self, event: watcher::Event<ExecutorPool>) -> Option<ExecutorPool> {
        match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                let now = Readiness::of(&p);
                let before = self.0.insert(ObjectRef::from_obj(&p), now);
                (before != Some(now)).then_some(p)
            }
            watcher::Event::Delete(p) => {
                self.0.remove(&ObjectRef::from_obj(&p));
                Some(p)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }
}

/// `Ready=False` reason of a pooled Agent granted storage when the operator has no Redis.
pub const POOL_STORAGE_NEEDS_REDIS: &str = "PoolStorageNeedsRedis";

pub fn error_policy(_p: Arc<ExecutorPool>, err: &Error, ctx: Arc<PoolContext>) -> Action {
    ctx.base
        .metrics
        .reconcile_errors
        .with_label_values(&["pool", err.metric_label()])
        .inc();
    tracing::warn!(error = %err, "executor pool reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts the (Secret, variable) pairs the list variable `var` of a pod template's `env`
    /// names, in order.
    fn assert_listed(env: &[k8s_openapi::api::core::v1::EnvVar], var: &str, want: &[(&str, &str)]) {
        let listed: Vec<ari_crds::pool::PoolSecretKey> = env
            .iter()
            .find(|e| e.name == var)
            .and_then(|e| serde_json::from_str(e.value.as_deref()?).ok())
            .unwrap_or_default();
        let listed: Vec<(&str, &str)> = listed
            .iter()
            .map(|k| (k.secret_ref.name.as_str(), k.key_env.as_str()))
            .collect();
        assert_eq!(listed, want, "{var}");
    }

    fn pool_with(agents: i32, available: Option<i32>) -> ExecutorPool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "ExecutorPool",
            "metadata": {"name": "shared", "namespace": "n"},
            "spec": {},
            "status": {"agents": agents, "replicas": 2, "readyReplicas": available,
                       "availableReplicas": available}
        }))
        .unwrap_or_else(|e| panic!("pool: {e}"))
    }

    #[test]
    fn a_pools_agents_are_woken_when_its_readiness_changes_not_when_it_counts_them() {
        use watcher::Event::*;
        let mut seen = PoolsSeen::default();
        let woke = |seen: &mut PoolsSeen, e| seen.wakes(e).is_some();
        // (event, wakes its Agents)
        let table = [
            (Init, false),
            (InitApply(pool_with(1, None)), true),
            (InitDone, false),
            (Apply(pool_with(2, None)), false),
            (Apply(pool_with(3, Some(1))), true),
            (Apply(pool_with(3_000, Some(1))), false),
            (Apply(pool_with(3_001, Some(2))), true),
            (Delete(pool_with(3_001, Some(2))), true),
            (Apply(pool_with(3_001, Some(2))), true),
        ];
        for (i, (event, want)) in table.into_iter().enumerate() {
            assert_eq!(woke(&mut seen, event), want, "row {i}");
        }
    }

    #[test]
    fn a_pooled_agent_is_ready_only_with_an_existing_pool_that_has_available_pods() {
        let plain = pooled("echo", serde_json::json!({})).spec.clone();
        assert!(
            matches!(agent_ready(None, "shared", &plain, false), Err(("PoolNotFound", m)) if m.contains("shared"))
        );
        let mut pool = ExecutorPool::new("shared", Default::default());
        assert_eq!(agent_ready(Some(&pool), "shared", &plain, false), Ok(0));
        pool.status = Some(ExecutorPoolStatus {
            available_replicas: Some(2),
            ..Default::default()
        });
        assert_eq!(agent_ready(Some(&pool), "shared", &plain, false), Ok(2));
        assert_eq!(ready(0).0, ConditionStatus::False);
        assert_eq!(ready(2).0, ConditionStatus::True);
    }

    #[test]
    fn a_pooled_agent_granted_storage_is_ready_only_when_the_pool_shares_redis() {
        let mut pool = ExecutorPool::new("shared", Default::default());
        pool.status = Some(ExecutorPoolStatus {
            available_replicas: Some(2),
            ..Default::default()
        });
        let storing = pooled(
            "counter",
            serde_json::json!({"storage": {"maxBytes": 1024}}),
        );
        let (reason, message) = agent_ready(Some(&pool), "shared", &storing.spec, false)
            .expect_err("storage without Redis in a pool");
        assert_eq!(reason, POOL_STORAGE_NEEDS_REDIS);
        assert!(
            message.contains("Redis URL") && message.contains("remove spec.executor.pool"),
            "{message}"
        );
        // Said before a missing pool: a pool appearing would not make it Ready.
        assert_eq!(
            agent_ready(None, "shared", &storing.spec, false).map_err(|(r, _)| r),
            Err(POOL_STORAGE_NEEDS_REDIS)
        );
        assert_eq!(
            agent_ready(Some(&pool), "shared", &storing.spec, true),
            Ok(2)
        );
        let plain = pooled("echo", serde_json::json!({}));
        assert_eq!(
            agent_ready(Some(&pool), "shared", &plain.spec, false),
            Ok(2)
        );
    }

    fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn pooled(name: &str, caps: serde_json::Value) -> Arc<Agent> {
        Arc::new(from_json(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "n"},
            "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                     "executor": {"pool": "shared"}, "capabilities": caps}
        })))
    }

    /// The pool Deployment's variables for `agents`, against the namespace's ModelConfigs
    /// `small` (keyed), `large` (open) and `unused` (keyed), MCPServer `docs` (a token) and
    /// its Secrets, all marked but `unmarked-key`.
    fn pool_env(agents: &[Arc<Agent>]) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
        pool_pods(agents)
            .spec
            .and_then(|p| p.containers.into_iter().next())
            .and_then(|c| c.env)
            .unwrap_or_default()
    }

    fn pool_pods(agents: &[Arc<Agent>]) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        let config = |name: &str, secret: Option<&str>| -> ari_crds::ModelConfig {
            let mut spec = serde_json::json!({
                "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": name});
            if let Some(s) = secret {
                spec["credentials"] = serde_json::json!({"name": s, "key": "apiKey"});
            }
            from_json(
                serde_json::json!({"apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfig",
                "metadata": {"name": name, "namespace": "n"}, "spec": spec}),
            )
        };
        let configs = [
            config("small", Some("small-key")),
            config("large", None),
            config("unused", Some("unused-key")),
        ];
        let server: ari_crds::MCPServer = from_json(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": "docs", "namespace": "n"},
            "spec": {"url": "http://tools:8000/mcp", "token": {"name": "docs-token", "key": "t"}}
        }));
        let marked = |label: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            labels: Some([(label.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        };
        let (model_mark, tool_mark, signing_mark, unmarked) = (
            marked(ari_crds::model_config::CREDENTIALS_LABEL),
            marked(ari_crds::mcp_server::CREDENTIALS_LABEL),
            marked(ari_crds::names::LABEL_SIGNING_KEY),
            marked("other"),
        );
        let granted = grants::union(agents, "n", "shared");
        let models = models::resolve(&granted.models(), &configs, |_| Some(&model_mark));
        let tools = tools::resolve(&granted.tools(), &[server], |_| Some(&tool_mark));
        let keys = secrets::resolve(&secrets::SIGNING, &granted.signing, |r| {
            secrets::signing_key(
                r,
                Some(match r.name.as_str() {
                    "unmarked-key" => &unmarked,
                    _ => &signing_mark,
                }),
            )
        });
        let registries = pull_secrets();
        let pulls = secrets::resolve(&secrets::PULL, &granted.pull_secrets, |r| {
            secrets::pull_secret(
                r,
                registries
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(&r.name)),
            )
        });
        let pool = ExecutorPool::new("shared", Default::default());
        let settings = crate::config::Settings::default();
        let dep = deployment::build_pool(
            &pool,
            &settings,
            "pk",
            &models.usable,
            &tools.usable,
            &keys,
            &pulls,
        );
        dep.spec.map(|s| s.template).unwrap_or_default()
    }

    /// The namespace's docker config Secrets: `a-reg` and `b-reg` marked for Agents' use,
    /// `loose-reg` not, `opaque-reg` marked but of type Opaque.
    fn pull_secrets() -> Vec<k8s_openapi::api::core::v1::Secret> {
        let secret = |name: &str, marked: bool, type_: &str| {
            from_json(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "n", "resourceVersion": "1",
                             "labels": if marked {
                                 serde_json::json!({ari_crds::names::LABEL_PULL_SECRET: "true"})
                             } else {
                                 serde_json::json!({})
                             }},
                "type": type_,
                // `{"auths":{}}`
                "data": {".dockerconfigjson": "eyJhdXRocyI6e319"}
            }))
        };
        let docker = ari_crds::names::DOCKER_CONFIG_JSON_TYPE;
        vec![
            secret("a-reg", true, docker),
            secret("b-reg", true, docker),
            secret("loose-reg", false, docker),
            secret("opaque-reg", true, "Opaque"),
        ]
    }

    /// A pooled Agent of `module.image` pulling with the Secrets `secrets`.
    fn pulling(name: &str, secrets: &[&str]) -> Arc<Agent> {
        let names: Vec<serde_json::Value> = secrets
            .iter()
            .map(|s| serde_json::json!({"name": s}))
            .collect();
        Arc::new(from_json(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "n"},
            "spec": {"module": {"image": "r.example/echo:v1", "imagePullSecrets": names},
                     "executor": {"pool": "shared"}}
        })))
    }

    #[test]
    fn a_pool_pod_carries_each_marked_pull_secret_of_its_agents_once_by_reference() {
        let agents = [
            pulling("b", &["b-reg"]),
            pulling("a", &["a-reg"]),
            // Two Agents naming one Secret share its variable.
            pulling("a2", &["a-reg", "b-reg"]),
            // Neither a Secret not marked for Agents nor one that is no docker config.
            pulling("thief", &["loose-reg", "opaque-reg"]),
            pooled("plain", serde_json::json!({})),
        ];
        let env = pool_env(&agents);
        let carried: Vec<(String, String, String, Option<bool>)> = env
            .iter()
            .filter_map(|e| {
                let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((e.name.clone(), r.name.clone(), r.key.clone(), r.optional))
            })
            .filter(|(var, ..)| var.starts_with("ARI_PULL_SECRET"))
            .collect();
        let want = |var: &str, secret: &str| {
            (
                var.to_owned(),
                secret.to_owned(),
                ".dockerconfigjson".to_owned(),
                Some(true),
            )
        };
        assert_eq!(
            carried,
            [
                want("ARI_PULL_SECRET_0", "a-reg"),
                want("ARI_PULL_SECRET_1", "b-reg")
            ]
        );
        assert_listed(
            &env,
            ari_crds::pool::PULL_SECRETS_ENV,
            &[
                ("a-reg", "ARI_PULL_SECRET_0"),
                ("b-reg", "ARI_PULL_SECRET_1"),
            ],
        );
        let template = serde_json::to_string(&pool_pods(&agents)).unwrap_or_default();
        for never in ["loose-reg", "opaque-reg", "ARI_MODULE_PULL_SECRET"] {
            assert!(!template.contains(never), "{never} in the pool's pods");
        }
        let annotations = pool_pods(&agents).metadata.and_then(|m| m.annotations);
        assert!(
            annotations.is_some_and(|a| a.contains_key(ari_crds::names::ANNOTATION_PULL_SECRETS)),
            "an edited pull secret would not roll the pool"
        );
        let mut reversed = agents.to_vec();
        reversed.reverse();
        assert_eq!(
            env,
            pool_env(&reversed),
            "the Agents' order changes nothing"
        );
        assert!(
            !pool_env(&agents[4..])
                .iter()
                .any(|e| e.name.starts_with("ARI_PULL_SECRET")),
            "a pool of Agents that pull with no secret carries none"
        );
    }

    fn signing(secret: &str) -> serde_json::Value {
        serde_json::json!({"signing": {"keyId": "k", "secretRef": {"name": secret, "key": "private-key"}}})
    }

    #[test]
    fn a_pool_pod_carries_each_marked_signing_key_of_its_agents_once_by_reference() {
        let agents = [
            pooled("b", signing("b-key")),
            pooled("a", signing("a-key")),
            // Two Agents naming one key share its variable.
            pooled("a2", signing("a-key")),
            // A Secret not marked for signing use never reaches the pod.
            pooled("thief", signing("unmarked-key")),
            pooled("plain", serde_json::json!({})),
        ];
        let env = pool_env(&agents);
        let keys: Vec<(String, String, Option<bool>)> = env
            .iter()
            .filter(|e| e.name.starts_with("ARI_SIGNING_KEY_"))
            .filter_map(|e| {
                let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((e.name.clone(), r.name.clone(), r.optional))
            })
            .collect();
        // Optional: a key missing from its Secret fails its Agents' Tasks, not the pod.
        assert_eq!(
            keys,
            [
                (
                    "ARI_SIGNING_KEY_0".to_owned(),
                    "a-key".to_owned(),
                    Some(true)
                ),
                (
                    "ARI_SIGNING_KEY_1".to_owned(),
                    "b-key".to_owned(),
                    Some(true)
                ),
            ]
        );
        assert_listed(
            &env,
            ari_crds::pool::SIGNING_KEYS_ENV,
            &[
                ("a-key", "ARI_SIGNING_KEY_0"),
                ("b-key", "ARI_SIGNING_KEY_1"),
            ],
        );
        assert!(
            !env.iter().any(|e| e.name == "ARI_SIGNING_KEY"),
            "no Agent's key is the pod's one key"
        );
        let mut reversed = agents.to_vec();
        reversed.reverse();
        assert_eq!(
            env,
            pool_env(&reversed),
            "the Agents' order changes nothing"
        );
        let revision = |agents: &[Arc<Agent>]| {
            pool_pods(agents)
                .metadata
                .and_then(|m| m.annotations)
                .and_then(|a| a.get(ari_crds::names::ANNOTATION_SIGNING_SECRETS).cloned())
        };
        assert!(
            revision(&agents).is_some(),
            "an edited key would not roll the pool"
        );
        let plain = [pooled("plain", serde_json::json!({}))];
        assert!(
            !pool_env(&plain)
                .iter()
                .any(|e| e.name.starts_with("ARI_SIGNING_KEY")),
            "a pool of Agents that sign nothing carries no signing key"
        );
        assert_eq!(revision(&plain), None);
    }

    #[test]
    fn a_pool_pod_carries_the_union_of_its_agents_grants_by_reference_in_a_stable_order() {
        let a = pooled("a", serde_json::json!({"models": {"allowed": ["small"]}}));
        let b = pooled(
            "b",
            serde_json::json!({"models": {"allowed": ["large", "small"]},
                               "tools": {"servers": [{"name": "docs", "tools": ["*"]}]}}),
        );
        let env = pool_env(&[a.clone(), b.clone()]);
        let value = |n: &str| {
            env.iter()
                .find(|e| e.name == n)
                .and_then(|e| e.value.clone())
        };
        let listed = |var: &str| -> Vec<String> {
            let list: Vec<serde_json::Value> =
                serde_json::from_str(&value(var).unwrap_or_default()).unwrap_or_default();
            list.iter()
                .filter_map(|m| m["name"].as_str().map(str::to_owned))
                .collect()
        };
        assert_eq!(
            listed(ari_crds::model_config::MODELS_ENV),
            ["large", "small"]
        );
        assert_eq!(listed(ari_crds::mcp_server::TOOL_SERVERS_ENV), ["docs"]);
        let secrets: Vec<(String, String)> = env
            .iter()
            .filter_map(|e| {
                let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((e.name.clone(), r.name.clone()))
            })
            .filter(|(var, _)| var != "ARI_ATTESTATION_KEY")
            .collect();
        // No key of a model no pooled Agent is granted; nothing but a reference to the others.
        assert_eq!(
            secrets,
            [
                ("ARI_MODEL_KEY_1".to_owned(), "small-key".to_owned()),
                ("ARI_TOOL_TOKEN_0".to_owned(), "docs-token".to_owned()),
            ]
        );
        assert_eq!(env, pool_env(&[b, a]), "the Agents' order changes nothing");
        assert!(
            !pool_env(&[])
                .iter()
                .any(|e| e.name.starts_with("ARI_MODEL") || e.name.starts_with("ARI_TOOL")),
            "a pool of Agents granted nothing carries no model or tool"
        );
    }

    #[test]
    fn a_pooled_agent_may_be_granted_signing_storage_and_delegation() {
        let agent = |caps: serde_json::Value| -> Agent {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": "a", "namespace": "n"},
                "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                         "executor": {"pool": "shared"}, "capabilities": caps}
            }))
            .unwrap_or_else(|e| panic!("agent: {e}"))
        };
        let validate = crate::agent::controller::validate;
        assert_eq!(validate(&agent(serde_json::json!({}))), Ok(()));
        assert_eq!(validate(&agent(signing("k"))), Ok(()), "signing in a pool");
        assert_eq!(
            validate(&agent(serde_json::json!({"storage": {"maxBytes": 1024}}))),
            Ok(()),
            "storage in a pool"
        );
        assert_eq!(
            validate(&agent(serde_json::json!({"delegation": {"agents": ["b"]}}))),
            Ok(()),
            "delegation in a pool"
        );
    }
}
