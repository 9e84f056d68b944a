//! Agent reconcile: validate → resolve module → apply RBAC, key, Deployment → status.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::hosts::HostPattern;
use ari_crds::names;
use ari_crds::{Agent, AgentStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use super::{deployment, key, module, rbac};
use crate::context::Context;

/// Reconcile failures (retried with backoff by the error policy).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("attestation key: {0}")]
    Key(#[from] key::KeyError),
    #[error("object has no namespace")]
    NoNamespace,
}

/// Semantic checks the schema cannot express; `Err` carries the message for `Valid=False`.
pub fn validate(agent: &Agent) -> Result<(), String> {
    if let Some(net) = &agent.spec.capabilities.network {
        for h in &net.allowed_hosts {
            HostPattern::parse(h).map_err(|e| format!("network.allowedHosts {h}: {e}"))?;
        }
    }
    if agent.spec.module.config_map.is_some() == agent.spec.module.url.is_some() {
        return Err("exactly one of module.configMap or module.url must be set".into());
    }
    if agent.spec.module.url.is_some() && agent.spec.module.sha256.is_none() {
        return Err("module.sha256 is required with module.url".into());
    }
    Ok(())
}

/// `Ready` from what was observed: available executors and a resolved module.
pub fn ready_condition(module_ok: bool, available: i32) -> (ConditionStatus, &'static str, String) {
    match (module_ok, available) {
        (false, _) => (
            ConditionStatus::False,
            "ModuleNotResolved",
            "module not resolved".into(),
        ),
        (true, 0) => (
            ConditionStatus::False,
            "NoExecutorAvailable",
            "waiting for an available executor".into(),
        ),
        (true, n) => (
            ConditionStatus::True,
            "ExecutorsAvailable",
            format!("{n} executor(s) available"),
        ),
    }
}

async fn apply<K>(api: &Api<K>, name: &str, obj: &K) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let pp = PatchParams::apply(names::OPERATOR_FIELD_MANAGER).force();
    api.patch(name, &pp, &Patch::Apply(obj)).await
}

/// Reconciles one Agent.
pub async fn reconcile(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.with_label_values(&["agent"]).inc();
    let ns = agent.namespace().ok_or(Error::NoNamespace)?;
    let name = agent.name_any();
    let client = ctx.client.clone();
    let now = Time(Timestamp::now());
    let gen_ = agent.metadata.generation;
    let old = agent.status.clone().unwrap_or_default();
    let mut status = AgentStatus {
        observed_generation: gen_,
        ..old.clone()
    };

    let valid = validate(&agent);
    let (vs, vr, vm) = match &valid {
        Ok(()) => (ConditionStatus::True, "Valid", String::new()),
        Err(m) => (ConditionStatus::False, "Invalid", m.clone()),
    };
    conditions::set(
        &mut status.conditions,
        conditions::VALID,
        vs,
        vr,
        vm,
        gen_,
        now.clone(),
    );

    let module = if valid.is_ok() {
        match module::resolve(
            &agent.spec.module,
            &Api::<ConfigMap>::namespaced(client.clone(), &ns),
        )
        .await
        {
            Err(module::ModuleError::Kube(e)) => return Err(Error::Kube(e)),
            other => other,
        }
    } else {
        Err(module::ModuleError::NoSource)
    };
    match &module {
        Ok(digest) => {
            status.module_digest = Some(digest.clone());
            conditions::set(
                &mut status.conditions,
                conditions::MODULE_RESOLVED,
                ConditionStatus::True,
                "Resolved",
                digest.clone(),
                gen_,
                now.clone(),
            );
        }
        Err(e) => {
            conditions::set(
                &mut status.conditions,
                conditions::MODULE_RESOLVED,
                ConditionStatus::False,
                e.reason(),
                e.to_string(),
                gen_,
                now.clone(),
            );
        }
    }

    // Namespace-wide pieces: executor identity and the attestation key.
    let sa = names::EXECUTOR_SERVICE_ACCOUNT;
    apply(
        &Api::<ServiceAccount>::namespaced(client.clone(), &ns),
        sa,
        &rbac::service_account(&ns),
    )
    .await?;
    apply(
        &Api::<Role>::namespaced(client.clone(), &ns),
        sa,
        &rbac::role(&ns),
    )
    .await?;
    apply(
        &Api::<RoleBinding>::namespaced(client.clone(), &ns),
        sa,
        &rbac::role_binding(&ns),
    )
    .await?;
    status.attestation_public_key =
        Some(key::ensure(&Api::<Secret>::namespaced(client.clone(), &ns), &ns).await?);

    let mut available = 0;
    if let Ok(digest) = &module {
        let dep = deployment::build(&agent, digest, &ctx.settings);
        let deps = Api::<Deployment>::namespaced(client.clone(), &ns);
        let dep_name = names::executor_deployment_name(&name);
        let applied = apply(&deps, &dep_name, &dep).await?;
        let st = applied.status.unwrap_or_default();
        status.replicas = Some(st.replicas.unwrap_or(0));
        status.ready_replicas = Some(st.ready_replicas.unwrap_or(0));
        available = st.available_replicas.unwrap_or(0);
    }
    let (rs, rr, rm) = ready_condition(module.is_ok(), available);
    conditions::set(
        &mut status.conditions,
        conditions::READY,
        rs,
        rr,
        rm,
        gen_,
        now,
    );

    if status != old {
        let agents = Api::<Agent>::namespaced(client, &ns);
        let patch = serde_json::json!({ "status": status });
        agents
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        publish_changes(&ctx, &agent, &old, &status).await;
        info!(agent = %name, namespace = %ns, ready = ?rs, "agent status updated");
    }
    // Re-check a missing ConfigMap periodically; Deployment changes wake us through `owns`.
    Ok(match module {
        Ok(_) => Action::requeue(Duration::from_secs(300)),
        Err(_) => Action::requeue(Duration::from_secs(15)),
    })
}

/// One Event per condition whose status or reason changed.
async fn publish_changes(ctx: &Context, agent: &Agent, old: &AgentStatus, new: &AgentStatus) {
    for c in &new.conditions {
        let before = conditions::find(&old.conditions, &c.type_);
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        let note = format!("{}={}: {}", c.type_, c.status, c.message);
        ctx.event(
            agent,
            c.status == "False",
            &c.reason,
            &format!("Set{}", c.type_),
            note,
        )
        .await;
    }
}

/// Backoff on errors.
pub fn error_policy(_agent: Arc<Agent>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors
        .with_label_values(&["agent"])
        .inc();
    tracing::warn!(error = %err, "agent reconcile failed");
    Action::requeue(Duration::from_secs(10))
}
