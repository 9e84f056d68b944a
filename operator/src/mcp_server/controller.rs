//! MCPServer reconcile: credentials Secrets under the marked rule → the server's tool list →
//! `Ready` and `status.tools`.
//!
//! The listing goes to the URL a namespace user wrote, so it follows the probe rules
//! ([`crate::probe`]): internal addresses only when the admin listed them, answers bounded,
//! redirects never followed, fixed texts in status. Credentials are read from Secrets marked
//! `ari.dev/tool-credentials: "true"` only, and go nowhere but into that request.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::conditions::ConditionStatus;
use ari_crds::mcp_server::CREDENTIALS_LABEL;
use ari_crds::{MCPServer, MCPServerStatus, SecretKeyRef};
use ari_mcp::{Client, Credentials as McpCredentials, Limits, Secret as McpSecret, ToolServer};
use ari_oci::NetworkPolicy;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tokio::time::Instant;

use super::decide::{self, Probe};
use crate::context::Context;
use crate::error::Error;
use crate::marked::{self, Credentials};
use crate::probe::{self, Target, resolve};

/// Longest a listing may take, name resolution included.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most listings at once: each holds at most 1 MiB of answer.
pub const MAX_CONCURRENT_PROBES: u16 = 4;
/// Most bytes of a tool list the operator reads.
pub const MAX_LIST_BYTES: usize = 1 << 20;

/// Lists servers' tools under the admin's address rules.
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
            max_result_bytes: MAX_LIST_BYTES,
            max_tools: ari_crds::mcp_server::MAX_TOOLS,
            max_arguments_bytes: 0,
            call_timeout: PROBE_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
        };
        let client = Client::with_resolver(limits, ari_oci::policy_resolver(policy))
            .map_err(Error::ToolProbe)?;
        Ok(Prober { client, listed })
    }

    /// The listing of `server`'s tools, within [`PROBE_TIMEOUT`].
    async fn probe(&self, server: &MCPServer, credentials: McpCredentials) -> Probe {
        let Some(url) = probe::endpoint_url(&server.spec.url) else {
            return Probe::InvalidUrl;
        };
        let deadline = Instant::now() + PROBE_TIMEOUT;
        let addresses = resolve(&url, deadline).await;
        match probe::target(&url, &self.listed, &addresses) {
            Target::NotAllowed => return Probe::NotAllowed,
            Target::Unresolved => {
                return Probe::Failed(ari_mcp::ToolError::unavailable("not resolved"));
            }
            Target::Allowed => {}
        }
        let declared = match ToolServer::new(server.name_any(), url) {
            Ok(s) => s
                .with_protocol(server.spec.protocol.unwrap_or_default())
                .with_credentials(credentials),
            Err(_) => return Probe::InvalidUrl,
        };
        match self.client.list_tools(&declared, deadline).await {
            Ok(tools) => Probe::Listed(tools),
            Err(e) => Probe::Failed(e),
        }
    }
}

/// What the MCPServer controller needs.
pub struct ToolServerContext {
    pub base: Arc<Context>,
    pub prober: Prober,
}

/// Reconciles one MCPServer.
pub async fn reconcile(
    server: Arc<MCPServer>,
    ctx: Arc<ToolServerContext>,
) -> Result<Action, Error> {
    let metrics = &ctx.base.metrics;
    metrics.reconciles.with_label_values(&["mcpserver"]).inc();
    let _timer = metrics
        .reconcile_duration
        .with_label_values(&["mcpserver"])
        .start_timer();
    let ns = server.namespace().ok_or(Error::NoNamespace)?;
    let client = ctx.base.client.clone();

    let (creds, credentials) = read_credentials(&server, &client, &ns).await?;
    let probe = match creds {
        Credentials::None | Credentials::Marked => ctx.prober.probe(&server, credentials).await,
        _ => Probe::Skipped,
    };
    let verdict = decide::readiness(creds, &probe);
    let old = server.status.clone().unwrap_or_default();
    let status = MCPServerStatus {
        observed_generation: server.metadata.generation,
        tool_count: (verdict.status == ConditionStatus::True)
            .then(|| u32::try_from(verdict.tools.len()).unwrap_or(u32::MAX)),
        tools: verdict.tools.clone(),
        ..old.clone()
    };
    probe::publish(
        &ctx.base,
        server.as_ref(),
        &old,
        status,
        probe::Verdict {
            status: verdict.status,
            reason: verdict.reason.as_str(),
            message: &verdict.message,
        },
        probe::Announce {
            action: "ListTools",
            log: "MCP server status updated",
        },
    )
    .await
}

/// The server's credentials under the marked rule, and their values when all are usable.
/// A Secret is fetched only when its name may be read on a user's behalf; its data is used
/// only when it carries the mark.
async fn read_credentials(
    server: &MCPServer,
    client: &kube::Client,
    ns: &str,
) -> Result<(Credentials, McpCredentials), Error> {
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let mut verdicts = Vec::new();
    let mut out = McpCredentials::default();
    if let Some(reference) = &server.spec.token {
        let (verdict, value) = secret_value(&secrets, reference).await?;
        verdicts.push(verdict);
        if let Some(token) = value {
            out = out.with_bearer(token);
        }
    }
    for header in &server.spec.headers {
        let (verdict, value) = secret_value(&secrets, &header.value_from).await?;
        verdicts.push(verdict);
        if let Some(value) = value {
            match out.clone().with_header(&header.name, value) {
                Ok(c) => out = c,
                Err(_) => verdicts.push(Credentials::Forbidden),
            }
        }
    }
    Ok((decide::worst(verdicts), out))
}

/// One credential: its verdict and, when marked and present, its value.
async fn secret_value(
    secrets: &Api<Secret>,
    reference: &SecretKeyRef,
) -> Result<(Credentials, Option<McpSecret>), Error> {
    if marked::is_forbidden_name(&reference.name) {
        return Ok((Credentials::Forbidden, None));
    }
    let secret = secrets.get_opt(&reference.name).await?;
    let verdict = marked::credentials(
        Some(reference),
        secret.as_ref().map(|s| &s.metadata),
        CREDENTIALS_LABEL,
    );
    if verdict != Credentials::Marked {
        return Ok((verdict, None));
    }
    let value = secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(&reference.key))
        .and_then(|v| String::from_utf8(v.0).ok())
        .map(McpSecret::new);
    Ok(match value {
        Some(v) => (Credentials::Marked, Some(v)),
        None => (Credentials::Missing, None),
    })
}

/// Backoff on errors (the API server's, never the MCP server's: those are status).
pub fn error_policy(_s: Arc<MCPServer>, err: &Error, ctx: Arc<ToolServerContext>) -> Action {
    ctx.base
        .metrics
        .reconcile_errors
        .with_label_values(&["mcpserver", err.metric_label()])
        .inc();
    tracing::warn!(error = %err, "MCP server reconcile failed");
    Action::requeue(Duration::from_secs(10))
}
