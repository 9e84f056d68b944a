//! What the operator's probes of user-written URLs share (ModelConfig endpoints, MCPServer
//! URLs): where a probe may go, as a pure function of the admin's list and the addresses the
//! name resolves to, how its verdict reaches the resource's status and Events, and when the
//! next probe runs.
//!
//! A probe is a request the operator makes to a URL a namespace user wrote, so it must not
//! become a port scanner or a reader of internal pages: it goes to internal addresses only when
//! the admin listed the endpoint, and every outcome it reports is a fixed text with at most a
//! status code, never the answer's body.

use std::net::IpAddr;
use std::time::Duration;

use ari_crds::conditions::{self, ConditionStatus};
use ari_oci::{Endpoint, is_internal};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::info;
use url::Url;

use crate::context::Context;
use crate::error::Error;

/// Whether the probe may go to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Listed by the admin, or with at least one public address (the resolver connects to
    /// those only).
    Allowed,
    /// Only internal addresses, or a listed host on a port the admin did not list.
    NotAllowed,
    /// The name resolved to nothing.
    Unresolved,
}

/// Where `url` may be probed: `listed` are the admin's `host:port` entries allowed at internal
/// addresses, `addresses` what its host resolved to.
pub fn target(url: &Url, listed: &[Endpoint], addresses: &[IpAddr]) -> Target {
    let Some(endpoint) = Endpoint::of(url) else {
        return Target::NotAllowed;
    };
    if listed.contains(&endpoint) {
        return Target::Allowed;
    }
    if listed.iter().any(|e| e.host == endpoint.host) {
        return Target::NotAllowed;
    }
    if addresses.is_empty() {
        return Target::Unresolved;
    }
    if addresses.iter().all(|ip| is_internal(*ip)) {
        Target::NotAllowed
    } else {
        Target::Allowed
    }
}

/// A URL a user wrote (`spec.endpoint`, `spec.url`) as one the probe can request: http(s), a host, no user or password.
pub fn endpoint_url(endpoint: &str) -> Option<Url> {
    let url = Url::parse(endpoint).ok()?;
    let ok = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none();
    ok.then_some(url)
}

/// The addresses of `url`'s host (none when it does not resolve by `deadline`). The client's
/// resolver checks them again when it connects, so a name that changes in between gains
/// nothing.
pub async fn resolve(url: &Url, deadline: Instant) -> Vec<IpAddr> {
    let Some(host) = url.host_str() else {
        return Vec::new();
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(0);
    match tokio::time::timeout_at(deadline, tokio::net::lookup_host((host.as_str(), port))).await {
        Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    }
}

/// The next probe: every 5 minutes while Ready, else spaced by how long it has not been
/// (5 s, doubling, at most 5 min), as an unresolved module is.
pub fn requeue(status: ConditionStatus, failing_for: Duration) -> Duration {
    match status {
        ConditionStatus::True => Duration::from_secs(300),
        _ => crate::agent::image::retry_after(failing_for),
    }
}

/// A probed resource's status (a ModelConfig's, an MCPServer's): what [`publish`] needs of it.
pub trait ProbedStatus: Clone + PartialEq + Serialize {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

impl ProbedStatus for ari_crds::ModelConfigStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl ProbedStatus for ari_crds::MCPServerStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// What a probe concluded, for the resource's `Ready` condition.
pub struct Verdict<'a> {
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: &'a str,
}

/// How a kind's status updates are announced: the Event's action and the log line.
pub struct Announce {
    pub action: &'static str,
    pub log: &'static str,
}

/// Sets `Ready` on `status` from `verdict`; writes the status when it differs from `old`, with
/// an Event when the condition's status or reason moved; and says when to probe again.
pub async fn publish<K, S>(
    ctx: &Context,
    obj: &K,
    old: &S,
    mut status: S,
    verdict: Verdict<'_>,
    announce: Announce,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: ProbedStatus,
{
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let name = obj.name_any();
    let generation = obj.meta().generation;
    let now = Time(Timestamp::now());
    conditions::set(
        status.conditions_mut(),
        conditions::READY,
        verdict.status,
        verdict.reason,
        verdict.message.to_owned(),
        generation,
        now.clone(),
    );
    if &status != old {
        Api::<K>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await?;
        let before = conditions::find(old.conditions(), conditions::READY);
        if before.is_none_or(|b| b.status != verdict.status.as_str() || b.reason != verdict.reason)
        {
            ctx.event(
                obj,
                verdict.status != ConditionStatus::True,
                verdict.reason,
                announce.action,
                format!("Ready={}: {}", verdict.status.as_str(), verdict.message),
            )
            .await;
        }
        info!(name = %name, namespace = %ns, reason = verdict.reason, "{}", announce.log);
    }
    let failing_for = conditions::find(status.conditions(), conditions::READY)
        .map(|c| now.0.duration_since(c.last_transition_time.0))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default();
    Ok(Action::requeue(requeue(verdict.status, failing_for)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("url")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn where_the_probe_may_go() {
        let listed = vec![
            Endpoint::parse("127.0.0.1:8000", "http").expect("entry"),
            Endpoint::parse("vllm.models.svc:8000", "http").expect("entry"),
        ];
        #[rustfmt::skip]
        let cases: &[(&str, &str, &[&str], Target)] = &[
            ("listed loopback",              "http://127.0.0.1:8000/v1",         &["127.0.0.1"], Target::Allowed),
            ("listed in-cluster name",       "http://vllm.models.svc:8000/v1",   &["10.0.0.9"],  Target::Allowed),
            ("listed host, other port",      "http://127.0.0.1:22/v1",           &["127.0.0.1"], Target::NotAllowed),
            ("unlisted loopback",            "http://localhost:9000/v1",         &["127.0.0.1", "::1"], Target::NotAllowed),
            ("cloud metadata",               "http://169.254.169.254/latest",    &["169.254.169.254"], Target::NotAllowed),
            ("cluster service",              "http://kube-dns.kube-system:53",   &["10.96.0.10"], Target::NotAllowed),
            ("public",                       "https://api.openai.com/v1",        &["104.18.6.192"], Target::Allowed),
            ("public and internal: resolver keeps the public one", "https://mixed.example/v1", &["10.0.0.1", "104.18.6.192"], Target::Allowed),
            ("does not resolve",             "https://nowhere.example/v1",       &[], Target::Unresolved),
        ];
        for (what, u, addresses, want) in cases {
            let addresses: Vec<IpAddr> = addresses.iter().map(|a| ip(a)).collect();
            assert_eq!(target(&url(u), &listed, &addresses), *want, "{what}");
        }
    }

    #[test]
    fn endpoints_the_probe_can_request() {
        for (e, ok) in [
            ("https://api.openai.com/v1", true),
            ("http://127.0.0.1:8000/v1", true),
            ("file:///etc/passwd", false),
            ("ftp://h/v1", false),
            ("https://user:pw@h/v1", false),
            ("not a url", false),
        ] {
            assert_eq!(endpoint_url(e).is_some(), ok, "{e}");
        }
    }

    #[test]
    fn probes_space_out_while_failing() {
        assert_eq!(
            requeue(ConditionStatus::True, Duration::ZERO),
            Duration::from_secs(300)
        );
        assert_eq!(
            requeue(ConditionStatus::False, Duration::ZERO),
            Duration::from_secs(5)
        );
        assert_eq!(
            requeue(ConditionStatus::Unknown, Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(
            requeue(ConditionStatus::False, Duration::from_secs(9999)),
            Duration::from_secs(300)
        );
    }
}
