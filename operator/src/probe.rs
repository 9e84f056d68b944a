//! What the operator's probes of user-written URLs share (ModelConfig endpoints, MCPServer
//! URLs): where a probe may go, as a pure function of the admin's list and the addresses the
//! name resolves to, and when the next probe runs.
//!
//! A probe is a request the operator makes to a URL a namespace user wrote, so it must not
//! become a port scanner or a reader of internal pages: it goes to internal addresses only when
//! the admin listed the endpoint, and every outcome it reports is a fixed text with at most a
//! status code, never the answer's body.

use std::net::IpAddr;
use std::time::Duration;

use ari_crds::conditions::ConditionStatus;
use ari_oci::{Endpoint, is_internal};
use tokio::time::Instant;
use url::Url;

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
