//! ExecutorPool reconcile: the pool ServiceAccount and Role, the namespace's attestation key,
//! the pool's Deployment → `Ready`, replicas and how many Agents name the pool.
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
use kube::runtime::reflector::Store;

use crate::agent::{deployment, rbac};
use crate::context::Context;
use crate::error::Error;

/// What the pool reconcile reads besides the pool.
pub struct PoolContext {
    pub base: Arc<Context>,
    /// The operator's Agent cache, to count each pool's Agents.
    pub agents: Store<Agent>,
}

/// How often a pool's Agent count is refreshed when nothing else changes.
const RECOUNT: Duration = Duration::from_secs(60);

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
    let dep = deployment::build_pool(&pool, &base.settings, &key.public_key);
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
    Ok(Action::requeue(RECOUNT))
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
    let n = agents
        .state()
        .iter()
        .filter(|a| {
            a.metadata.namespace.as_deref() == Some(namespace)
                && a.spec.executor.pool.as_deref() == Some(name)
        })
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How many pods of the pool a pooled Agent can count on: the pool's available replicas, or
/// why none (the Agent's `Ready=False` reason and message).
pub fn agent_ready(pool: Option<&ExecutorPool>, name: &str) -> Result<i32, (&'static str, String)> {
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

    #[test]
    fn a_pooled_agent_is_ready_only_with_an_existing_pool_that_has_available_pods() {
        assert!(
            matches!(agent_ready(None, "shared"), Err(("PoolNotFound", m)) if m.contains("shared"))
        );
        let mut pool = ExecutorPool::new("shared", Default::default());
        assert_eq!(agent_ready(Some(&pool), "shared"), Ok(0));
        pool.status = Some(ExecutorPoolStatus {
            available_replicas: Some(2),
            ..Default::default()
        });
        assert_eq!(agent_ready(Some(&pool), "shared"), Ok(2));
        assert_eq!(ready(0).0, ConditionStatus::False);
        assert_eq!(ready(2).0, ConditionStatus::True);
    }

    #[test]
    fn a_pooled_agent_stored_with_a_grant_no_pool_can_hold_apart_is_invalid() {
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
        let err = validate(&agent(serde_json::json!({"storage": {"maxBytes": 1024}})))
            .expect_err("storage in a pool");
        assert!(err.contains("remove spec.executor.pool"), "{err}");
    }
}
