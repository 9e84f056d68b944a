//! ModelConfig reconcile: credentials Secret's labels → probe of the model list → `Ready`.
//!
//! The operator never reads the credentials Secret's data (only its metadata, to check the
//! mark) and probes without a key: only the executor holds model keys. A 401 to the keyless
//! probe still proves the endpoint answers; the key is checked at the first call.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::{ModelConfig, ModelConfigStatus};
use ari_llm::{Client, Endpoint, Limits, RetryPolicy};
use ari_oci::NetworkPolicy;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tokio::time::Instant;

use super::decide::{self, Credentials, Probe};
use crate::context::Context;
use crate::error::Error;
use crate::probe::{self, Target, resolve};

/// Most bytes of a model list read (a few hundred models fit).
pub const MAX_LIST_BYTES: usize = 256 << 10;
/// Longest a probe may take, name resolution included.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most probes at once: with [`MAX_LIST_BYTES`], bounds what probes hold in memory.
pub const MAX_CONCURRENT_PROBES: u16 = 4;

/// Probes endpoints under the admin's address rules.
pub struct Prober {
    client: Client,
    /// `host:port` entries the admin allows at internal addresses.
    listed: Vec<ari_oci::Endpoint>,
}

impl Prober {
    /// A prober that may reach internal addresses only at `internal_endpoints` (`host:port`).
    pub fn new(internal_endpoints: &[String]) -> Result<Prober, Error> {
        let policy = Arc::new(NetworkPolicy::new(&[], &[], internal_endpoints, true));
        let listed = policy.private_registries.clone();
        let limits = Limits {
            max_response_bytes: MAX_LIST_BYTES,
            max_request_bytes: 0,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: PROBE_TIMEOUT,
        };
        let retry = RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        };
        let client = Client::with_resolver(limits, retry, ari_oci::policy_resolver(policy))
            .map_err(Error::ModelProbe)?;
        Ok(Prober { client, listed })
    }

    /// The probe of `mc`'s endpoint, within [`PROBE_TIMEOUT`].
    async fn probe(&self, mc: &ModelConfig) -> Probe {
        let Some(url) = probe::endpoint_url(&mc.spec.endpoint) else {
            return Probe::InvalidEndpoint;
        };
        let deadline = Instant::now() + PROBE_TIMEOUT;
        let addresses = resolve(&url, deadline).await;
        match probe::target(&url, &self.listed, &addresses) {
            Target::NotAllowed => return Probe::NotAllowed,
            Target::Unresolved => return Probe::Failed(ari_llm::ListError::Unreachable),
            Target::Allowed => {}
        }
        let endpoint = Endpoint::new(mc.spec.provider, url, mc.spec.model.clone());
        match self
            .client
            .list_models(
                &endpoint,
                MAX_LIST_BYTES,
                ari_crds::model_config::MAX_MODELS,
                256,
                deadline,
            )
            .await
        {
            Ok(list) => Probe::Listed(list),
            Err(e) => Probe::Failed(e),
        }
    }
}

/// What the ModelConfig controller needs.
pub struct ModelContext {
    pub base: Arc<Context>,
    pub prober: Prober,
}

/// Reconciles one ModelConfig.
pub async fn reconcile(mc: Arc<ModelConfig>, ctx: Arc<ModelContext>) -> Result<Action, Error> {
    let metrics = &ctx.base.metrics;
    metrics.reconciles.with_label_values(&["modelconfig"]).inc();
    let _timer = metrics
        .reconcile_duration
        .with_label_values(&["modelconfig"])
        .start_timer();
    let ns = mc.namespace().ok_or(Error::NoNamespace)?;
    let client = ctx.base.client.clone();

    let creds = credentials(&mc, &client, &ns).await?;
    let probe = match creds {
        Credentials::None | Credentials::Marked => ctx.prober.probe(&mc).await,
        _ => Probe::Skipped,
    };
    let verdict = decide::readiness(creds, &probe, &mc.spec.model, mc.spec.provider);
    let old = mc.status.clone().unwrap_or_default();
    let status = ModelConfigStatus {
        observed_generation: mc.metadata.generation,
        models: verdict.models.clone(),
        ..old.clone()
    };
    probe::publish(
        &ctx.base,
        mc.as_ref(),
        &old,
        status,
        probe::Verdict {
            status: verdict.status,
            reason: verdict.reason.as_str(),
            message: &verdict.message,
        },
        probe::Announce {
            action: "Probe",
            log: "model config status updated",
        },
    )
    .await
}

/// The credentials Secret as its metadata shows it; its data is never fetched.
async fn credentials(
    mc: &ModelConfig,
    client: &kube::Client,
    ns: &str,
) -> Result<Credentials, Error> {
    let reference = mc.spec.credentials.as_ref();
    let meta = match reference {
        Some(r) if !crate::marked::is_forbidden_name(&r.name) => {
            Api::<Secret>::namespaced(client.clone(), ns)
                .get_metadata_opt(&r.name)
                .await?
                .map(|m| m.metadata)
        }
        _ => None,
    };
    Ok(crate::marked::credentials(
        reference,
        meta.as_ref(),
        ari_crds::model_config::CREDENTIALS_LABEL,
    ))
}

/// Backoff on errors (the API server's, never the endpoint's: those are status).
pub fn error_policy(_mc: Arc<ModelConfig>, err: &Error, ctx: Arc<ModelContext>) -> Action {
    ctx.base
        .metrics
        .reconcile_errors
        .with_label_values(&["modelconfig", err.metric_label()])
        .inc();
    tracing::warn!(error = %err, "model config reconcile failed");
    Action::requeue(Duration::from_secs(10))
}
