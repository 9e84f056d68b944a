//! Agent reconcile: validate → resolve module → apply RBAC, key, Deployment → status.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::card::{self, Exposed};
use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::names;
use ari_crds::{Agent, AgentStatus, ExecutorPool};
use ari_model::SignedCard;
use ari_model::hosts::HostPattern;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::image::{self, ResolvedImage};
use super::{declarative, deployment, key, models, module, rbac, signing, tools};
use crate::context::Context;
use crate::error::Error;

/// Longest Agent name: it is the value of the `ari.dev/agent` label on executor pods.
const MAX_AGENT_NAME: usize = 63;

/// Whether `s` is a label value (also the name part of a label key): at most 63 characters,
/// alphanumerics with `-`, `_`, `.` inside.
fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && s.starts_with(|c: char| c.is_ascii_alphanumeric())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

/// Whether `s` is a label key: `[prefix/]name`, prefix a DNS subdomain.
fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// Condition type, set when models are granted: whether every granted model reaches the
/// executors (a model that does not answers the guest's calls `unavailable`).
pub const MODELS_AVAILABLE: &str = "ModelsAvailable";
/// Condition type, set when tools are granted: whether every granted MCP server reaches the
/// executors (a server that does not answers the guest's calls `unavailable`).
pub const TOOLS_AVAILABLE: &str = "ToolsAvailable";

/// `Valid=False` reason: the signing grant's Secret may not be used.
pub const SIGNING_REJECTED: &str = "SigningSecretRejected";
/// `Ready=False` reason: the API server refused the executor Deployment.
pub const DEPLOYMENT_REJECTED: &str = "DeploymentRejected";
/// Longest condition message the operator writes.
const MESSAGE_MAX: usize = 1024;

/// Semantic checks the schema cannot express; `Err` carries the message for `Valid=False`.
/// Includes what the API server would refuse in the executor Deployment, so such an Agent
/// says why instead of being retried silently.
pub fn validate(agent: &Agent) -> Result<(), String> {
    let name = agent.name_any();
    if name.len() > MAX_AGENT_NAME {
        return Err(format!(
            "Agent name is {} characters; at most {MAX_AGENT_NAME} (it labels the executor pods)",
            name.len()
        ));
    }
    for (k, v) in agent.spec.executor.node_selector.iter().flatten() {
        if !is_label_key(k) || !is_label_value(v) {
            return Err(format!(
                "executor.nodeSelector {k:?}: {v:?} is not a valid label key and value"
            ));
        }
    }
    for t in agent.spec.executor.tolerations.iter().flatten() {
        if let Some(op) = t.operator.as_deref()
            && !["Exists", "Equal"].contains(&op)
        {
            return Err(format!(
                "executor.tolerations operator {op:?}: want Exists or Equal"
            ));
        }
        if let Some(effect) = t.effect.as_deref()
            && !["", "NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect)
        {
            return Err(format!(
                "executor.tolerations effect {effect:?}: want NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
    }
    if let Some(net) = &agent.spec.capabilities.network {
        for h in &net.allowed_hosts {
            HostPattern::parse(h).map_err(|e| format!("network.allowedHosts {h}: {e}"))?;
        }
    }
    if agent.spec.declarative.is_some() {
        // The stock component is the module: `spec.module` must be absent (CEL says so too).
        if !agent.spec.module.is_empty() {
            return Err("spec.module and spec.declarative are exclusive".into());
        }
        return super::declarative::validate(agent);
    }
    if agent.spec.module.source_count() != 1 {
        return Err(
            "exactly one of module.configMap, module.url or module.image must be set".into(),
        );
    }
    if agent.spec.module.image_pull_secrets.is_some() && agent.spec.module.image.is_none() {
        return Err("module.imagePullSecrets is only for module.image".into());
    }
    if agent.spec.module.url.is_some() && agent.spec.module.sha256.is_none() {
        return Err("module.sha256 is required with module.url".into());
    }
    Ok(())
}

/// `Ready` from what was observed: available executors and a resolved module (one the
/// registry has not answered for yet says so).
pub fn ready_condition(
    module: Result<(), &module::ModuleError>,
    available: i32,
) -> (ConditionStatus, &'static str, String) {
    match (module, available) {
        (Err(e), _) if e.is_pending() => (
            ConditionStatus::False,
            e.reason(),
            "module not resolved yet".into(),
        ),
        (Err(_), _) => (
            ConditionStatus::False,
            "ModuleNotResolved",
            "module not resolved".into(),
        ),
        (Ok(()), 0) => (
            ConditionStatus::False,
            "NoExecutorAvailable",
            "waiting for an available executor".into(),
        ),
        (Ok(()), n) => (
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
    let _timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&["agent"])
        .start_timer();
    sync_agent(agent, ctx.clone()).await
}

/// One pass over an Agent: its key, module, RBAC, signing grant and Deployment.
async fn sync_agent(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
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

    let mut valid = validate(&agent).map_err(|m| ("Invalid", m));
    if valid.is_ok()
        && let Some(grant) = &agent.spec.capabilities.signing
    {
        // Never even read the attestation key on an Agent's behalf.
        // Nor a name that is no object name (it would go into the request path as it is).
        let secret = if crate::marked::is_forbidden_name(&grant.secret_ref.name) {
            None
        } else {
            Api::<Secret>::namespaced(client.clone(), &ns)
                .get_opt(&grant.secret_ref.name)
                .await?
        };
        valid = signing::check(grant, secret.as_ref()).map_err(|m| (SIGNING_REJECTED, m));
    }
    let (vs, vr, vm) = match &valid {
        Ok(()) => (ConditionStatus::True, "Valid", String::new()),
        Err((r, m)) => (ConditionStatus::False, *r, m.clone()),
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

    let resolved = if valid.is_ok() {
        match resolve_module(&agent, &ctx, &ns).await {
            Err(module::ModuleError::Kube(e)) => return Err(Error::Kube(e)),
            other => other,
        }
    } else {
        Err(module::ModuleError::NoSource)
    };
    let module = resolved.as_ref().map(|(digest, _, _)| digest.clone());
    let image = resolved
        .as_ref()
        .ok()
        .and_then(|(_, image, _)| image.clone());
    let declaration = resolved.as_ref().ok().and_then(|(_, _, d)| d.clone());
    status.declaration_digest = declaration.clone();
    match &resolved {
        Ok((digest, image, _)) => {
            status.module_digest = Some(digest.clone());
            status.module_image = image.as_ref().map(|i| i.pinned.clone());
            let message = match image {
                Some(i) => format!("{digest} from {}", i.pinned),
                None => digest.clone(),
            };
            conditions::set(
                &mut status.conditions,
                conditions::MODULE_RESOLVED,
                ConditionStatus::True,
                "Resolved",
                message,
                gen_,
                now.clone(),
            );
        }
        Err(e) => {
            let mut message = e.to_string();
            crate::cache::clip(&mut message, MESSAGE_MAX);
            let st = if e.is_pending() {
                ConditionStatus::Unknown
            } else {
                ConditionStatus::False
            };
            conditions::set(
                &mut status.conditions,
                conditions::MODULE_RESOLVED,
                st,
                e.reason(),
                message,
                gen_,
                now.clone(),
            );
        }
    }

    // Namespace-wide pieces: executor identity and the attestation key.
    let key = rbac::executor_prerequisites(&ctx, &ns, names::EXECUTOR_SERVICE_ACCOUNT, rbac::role)
        .await?;
    if key.restored {
        warn!(namespace = %ns, "attestation key Secret was changed; restored it");
        ctx.event(
            agent.as_ref(),
            true,
            "AttestationKeyRestored",
            "RestoreKey",
            format!(
                "Secret {} did not hold this namespace's attestation key; the operator restored it",
                names::ATTESTATION_SECRET
            ),
        )
        .await;
    }
    status.attestation_public_key = Some(key.public_key.clone());
    status.a2a_card = signed_card(
        &Api::<Agent>::namespaced(client.clone(), &ns),
        &agent,
        &status,
        &ctx.settings.gateway_public_url,
        &key,
    )
    .await?;

    // The granted models, with their credentials checked by the marked-Secret rule.
    let granted_models = match &agent.spec.capabilities.models {
        Some(g) if !g.allowed.is_empty() && valid.is_ok() => {
            Some(models::fetch(&agent, &client, &ns).await?)
        }
        _ => None,
    };
    availability(
        &mut status,
        (MODELS_AVAILABLE, "ModelsUnavailable"),
        granted_models.as_ref().map(|r| r.message(&models::KIND)),
        gen_,
        &now,
    );
    // The granted MCP servers, by the same rule.
    let granted_tools = match &agent.spec.capabilities.tools {
        Some(g) if !g.servers.is_empty() && valid.is_ok() => {
            Some(tools::fetch(&agent, &client, &ns).await?)
        }
        _ => None,
    };
    availability(
        &mut status,
        (TOOLS_AVAILABLE, "ToolsUnavailable"),
        granted_tools.as_ref().map(|r| r.message(&tools::KIND)),
        gen_,
        &now,
    );
    let tool_list = granted_tools
        .as_ref()
        .map(|r| r.usable.as_slice())
        .unwrap_or_default();
    let model_list = granted_models
        .as_ref()
        .map(|r| r.usable.as_slice())
        .unwrap_or_default();

    let mut available = 0;
    let mut rejected = None;
    let mut no_pool = None;
    let deps = Api::<Deployment>::namespaced(client.clone(), &ns);
    let dep_name = names::executor_deployment_name(&name);
    if valid.is_err() {
        // No executor may run on a spec the operator refused (e.g. a signing Secret that
        // stopped qualifying): remove one left from an earlier, valid spec.
        match deps.delete(&dep_name, &DeleteParams::background()).await {
            Ok(_) => info!(agent = %name, namespace = %ns, "deleted executors of an invalid Agent"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        status.replicas = Some(0);
        status.ready_replicas = Some(0);
    } else if let (Ok(_), Some(pool)) = (&module, &agent.spec.executor.pool) {
        // Pooled: no Deployment of its own (one left from before it joined goes; looked for
        // only when the spec changed), and the pool's pods are its executors.
        if old.observed_generation != gen_ {
            match deps.delete(&dep_name, &DeleteParams::background()).await {
                Ok(_) => {
                    info!(agent = %name, namespace = %ns, pool = %pool, "deleted the executors of an Agent that joined a pool")
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let found = Api::<ExecutorPool>::namespaced(client.clone(), &ns)
            .get_opt(pool)
            .await?;
        let st = found
            .as_ref()
            .and_then(|p| p.status.clone())
            .unwrap_or_default();
        status.replicas = Some(st.replicas.unwrap_or(0));
        status.ready_replicas = Some(st.ready_replicas.unwrap_or(0));
        let redis = ctx.settings.redis_url.is_some();
        match crate::pool::controller::agent_ready(found.as_ref(), pool, &agent.spec, redis) {
            Ok(n) => available = n,
            Err((reason, message)) => no_pool = Some((reason, message)),
        }
    } else if let Ok(digest) = &module {
        let dep = deployment::build(
            &agent,
            digest,
            image.as_ref(),
            &ctx.settings,
            &key.public_key,
            model_list,
            tool_list,
        );
        let dep = deployment::with_declaration(dep, declaration.as_deref());
        match apply(&deps, &dep_name, &dep).await {
            Ok(applied) => {
                let st = applied.status.unwrap_or_default();
                status.replicas = Some(st.replicas.unwrap_or(0));
                status.ready_replicas = Some(st.ready_replicas.unwrap_or(0));
                available = st.available_replicas.unwrap_or(0);
            }
            // The API server refused the Deployment built from this spec: retrying will not
            // help until the spec changes, so say why.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
                let mut m = format!(
                    "the API server refused the executor Deployment: {}",
                    s.message
                );
                crate::cache::clip(&mut m, MESSAGE_MAX);
                rejected = Some(m);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let (rs, rr, rm) = match (&valid, rejected.clone(), no_pool) {
        (Err((r, m)), _, _) if *r != "Invalid" => (ConditionStatus::False, *r, m.clone()),
        (_, Some(m), _) => (ConditionStatus::False, DEPLOYMENT_REJECTED, m),
        (_, None, Some((r, m))) => (ConditionStatus::False, r, m),
        _ => ready_condition(resolved.as_ref().map(|_| ()), available),
    };
    conditions::set(
        &mut status.conditions,
        conditions::READY,
        rs,
        rr,
        rm,
        gen_,
        now.clone(),
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
    // Re-check an unresolved module (a missing ConfigMap, an image not pushed yet, a registry
    // that is down) with backoff; Deployment changes wake us through `owns`. Secrets are not
    // watched: re-check a refused signing Secret, or a model's unmarked or missing Secret, now
    // and then. A tag is resolved again on every pass, so a moved tag rolls the executors
    // within 5 minutes. ModelConfig and MCPServer changes wake us through watches.
    let models_waiting = granted_models
        .as_ref()
        .is_some_and(|r| !r.unusable.is_empty())
        || granted_tools
            .as_ref()
            .is_some_and(|r| !r.unusable.is_empty());
    Ok(match (&valid, &module) {
        (Err((SIGNING_REJECTED, _)), _) => Action::requeue(Duration::from_secs(30)),
        (Ok(()), Ok(_)) if models_waiting => Action::requeue(Duration::from_secs(30)),
        (Err(_), _) => Action::requeue(Duration::from_secs(300)),
        _ if rejected.is_some() => Action::requeue(Duration::from_secs(300)),
        (Ok(()), Ok(_)) => Action::requeue(Duration::from_secs(300)),
        (Ok(()), Err(_)) => Action::requeue(module_retry(&status, &now)),
    })
}

/// The signature of the exposed Agent's A2A card as the gateway will build it from `status`
/// (the one about to be written), by the key that signs its runs; `None` when not exposed.
/// Deterministic (Ed25519), so an unchanged card does not change the status.
async fn signed_card(
    agents: &Api<Agent>,
    cached: &Agent,
    status: &AgentStatus,
    public_url: &str,
    key: &key::Ensured,
) -> Result<Option<SignedCard>, Error> {
    if !cached.spec.a2a.as_ref().is_some_and(|a| a.exposed) {
        return Ok(None);
    }
    // The cache keeps no card text (`cache::trim_agent`): the Agent as it is now has it.
    let Some(agent) = agents.get_opt(&cached.name_any()).await? else {
        return Ok(None);
    };
    let Some(exposed) = Exposed::with_status(&agent, Some(status)) else {
        return Ok(None);
    };
    Ok(
        match ari_model::card::sign(&card::card(&exposed, public_url), &key.signing) {
            Ok(signed) => Some(signed),
            Err(e) => {
                warn!(agent = %agent.name_any(), error = %e, "cannot sign the A2A card");
                None
            }
        },
    )
}

/// Sets condition `type_` from what a grant resolved to: `True` when `message` is empty,
/// `False` with `reason` and the message otherwise; removes it when nothing of the kind is
/// granted (`None`).
fn availability(
    status: &mut AgentStatus,
    (type_, reason): (&str, &str),
    message: Option<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let Some(mut message) = message else {
        status.conditions.retain(|c| c.type_ != type_);
        return;
    };
    let (st, reason) = if message.is_empty() {
        (ConditionStatus::True, "Resolved")
    } else {
        crate::cache::clip(&mut message, MESSAGE_MAX);
        (ConditionStatus::False, reason)
    };
    conditions::set(
        &mut status.conditions,
        type_,
        st,
        reason,
        message,
        generation,
        now.clone(),
    );
}

/// The module's digest, for `module.image` what the image resolved to, and for a declarative
/// Agent its declaration's digest (its module is the stock agent component).
async fn resolve_module(
    agent: &Agent,
    ctx: &Context,
    ns: &str,
) -> Result<(String, Option<ResolvedImage>, Option<String>), module::ModuleError> {
    let source = &agent.spec.module;
    let config_maps = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    if let Some(d) = &agent.spec.declarative {
        let (_, declaration) = declarative::resolve(d, &config_maps).await?;
        let stock = ctx
            .settings
            .stock_agent
            .clone()
            .map_err(module::ModuleError::StockAgentMissing)?;
        return Ok((stock, None, Some(declaration)));
    }
    if source.image.is_some() {
        let secrets = Api::<Secret>::namespaced(ctx.client.clone(), ns);
        let resolved = ctx.images.resolve(source, &secrets, ns).await?;
        return Ok((resolved.module_digest.clone(), Some(resolved), None));
    }
    let digest = module::resolve(source, (&config_maps, ns), &ctx.modules).await?;
    Ok((digest, None, None))
}

/// Backoff for an unresolved module: from how long `ModuleResolved` has been False.
fn module_retry(status: &AgentStatus, now: &Time) -> Duration {
    let failing_for = conditions::find(&status.conditions, conditions::MODULE_RESOLVED)
        .map(|c| now.0.duration_since(c.last_transition_time.0))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default();
    image::retry_after(failing_for)
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
        .with_label_values(&["agent", err.metric_label()])
        .inc();
    tracing::warn!(error = %err, "agent reconcile failed");
    Action::requeue(Duration::from_secs(10))
}
