//! What a ModelConfig's `Ready` condition says, as pure functions of what was observed: the
//! credentials Secret's labels and the probe of the endpoint's model list.
//!
//! The probe is a request the operator makes to a URL a namespace user wrote, so it must not
//! become a port scanner or a reader of internal pages: it goes to internal addresses only
//! when the admin listed the endpoint, and every outcome is a fixed text with at most a
//! status code, never the answer's body. It carries no key: only the executor reads the
//! credentials Secret.

use std::net::IpAddr;
use std::time::Duration;

use ari_crds::conditions::ConditionStatus;
use ari_crds::{ModelConfigReason, SecretKeyRef};
use ari_llm::{ListError, ModelList};
use ari_model::ModelProvider as Provider;
use ari_oci::{Endpoint, is_internal};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use url::Url;

use crate::marked;

/// What the credentials Secret's metadata says: the operator reads labels, never the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// `spec.credentials` names none.
    None,
    /// Named, marked for model use (whether the key is in it is checked at first use).
    Marked,
    /// The attestation key, or no Secret name: never read.
    Forbidden,
    Missing,
    NotMarked,
}

/// The credentials as the Secret's metadata (`None`: not found) shows them.
pub fn credentials(reference: Option<&SecretKeyRef>, secret: Option<&ObjectMeta>) -> Credentials {
    let Some(reference) = reference else {
        return Credentials::None;
    };
    if marked::is_forbidden_name(&reference.name) {
        return Credentials::Forbidden;
    }
    match secret {
        None => Credentials::Missing,
        Some(meta) if marked::is_marked(meta, ari_crds::model_config::CREDENTIALS_LABEL) => {
            Credentials::Marked
        }
        Some(_) => Credentials::NotMarked,
    }
}

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

/// `spec.endpoint` as a URL the probe can request: http(s), a host, no user or password.
pub fn endpoint_url(endpoint: &str) -> Option<Url> {
    let url = Url::parse(endpoint).ok()?;
    let ok = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none();
    ok.then_some(url)
}

/// What happened to the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Not sent: the credentials are not usable.
    Skipped,
    /// Not sent: `spec.endpoint` is no URL the probe can request.
    InvalidEndpoint,
    /// Not sent: see [`Target::NotAllowed`].
    NotAllowed,
    Listed(ModelList),
    Failed(ListError),
}

/// The `Ready` condition and the models for status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: ConditionStatus,
    pub reason: ModelConfigReason,
    pub message: String,
    pub models: Vec<String>,
}

fn verdict(status: ConditionStatus, reason: ModelConfigReason, message: String) -> Verdict {
    Verdict {
        status,
        reason,
        message,
        models: Vec::new(),
    }
}

/// `Ready` from the credentials and the probe. Messages are fixed texts: a status code at
/// most, never what the endpoint sent.
pub fn readiness(creds: Credentials, probe: &Probe, model: &str, provider: Provider) -> Verdict {
    use ConditionStatus::{False, True, Unknown};
    use ModelConfigReason as R;
    let label = ari_crds::model_config::CREDENTIALS_LABEL;
    match creds {
        Credentials::Forbidden => {
            return verdict(
                False,
                R::CredentialsForbidden,
                "spec.credentials names the namespace's attestation key or no Secret name; it is never a model's credentials".into(),
            );
        }
        Credentials::Missing => {
            return verdict(
                False,
                R::CredentialsMissing,
                "the Secret spec.credentials names does not exist in this namespace".into(),
            );
        }
        Credentials::NotMarked => {
            return verdict(
                False,
                R::CredentialsNotMarked,
                format!(
                    "the Secret spec.credentials names is not marked for model use (label it {label}=true)"
                ),
            );
        }
        Credentials::None | Credentials::Marked => {}
    }
    let path = match provider {
        Provider::OpenAI => "models",
        Provider::Anthropic => "v1/models",
    };
    match probe {
        Probe::Skipped => verdict(Unknown, R::Unreachable, "not probed".into()),
        Probe::InvalidEndpoint => verdict(
            False,
            R::InvalidEndpoint,
            "spec.endpoint is not an http(s) URL with a host and without credentials".into(),
        ),
        Probe::NotAllowed => verdict(
            Unknown,
            R::ProbeNotAllowed,
            "the endpoint is at an internal address the operator may not probe (its admin lists such endpoints in modelProbe.internalEndpoints); executors may still reach it".into(),
        ),
        Probe::Listed(list) => {
            let mut message = format!("the endpoint lists {} model(s)", list.ids.len());
            if list.truncated {
                message.push_str(" (more not kept)");
            } else if !list.ids.iter().any(|id| id == model) {
                message.push_str("; spec.model is not among them");
            }
            Verdict {
                status: True,
                reason: R::EndpointAnswered,
                message,
                models: list.ids.clone(),
            }
        }
        Probe::Failed(ListError::Status(code @ (401 | 403))) => match creds {
            Credentials::Marked => verdict(
                True,
                R::EndpointAnswered,
                format!("the endpoint answered HTTP {code} to GET {path} without a key (the operator never reads it); the key is checked at the first call"),
            ),
            _ => verdict(
                False,
                R::Unauthorized,
                format!("the endpoint answered HTTP {code} to GET {path} and spec.credentials names no Secret"),
            ),
        },
        Probe::Failed(ListError::Status(code)) => verdict(
            False,
            R::EndpointError,
            format!("the endpoint answered HTTP {code} to GET {path} (is spec.endpoint the API root?)"),
        ),
        Probe::Failed(e @ ListError::Unreachable) => verdict(False, R::Unreachable, e.to_string()),
        Probe::Failed(e @ (ListError::TooLarge | ListError::NotAModelList)) => {
            verdict(False, R::NotAModelEndpoint, e.to_string())
        }
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
    use std::collections::BTreeMap;

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
    fn credentials_from_the_secrets_labels() {
        let reference = |name: &str| SecretKeyRef {
            name: name.into(),
            key: "key".into(),
        };
        let meta = |label: Option<&str>| ObjectMeta {
            labels: label.map(|v| {
                BTreeMap::from([(
                    ari_crds::model_config::CREDENTIALS_LABEL.to_owned(),
                    v.to_owned(),
                )])
            }),
            ..ObjectMeta::default()
        };
        let marked = meta(Some("true"));
        let unmarked = meta(None);
        let other = meta(Some("yes"));
        #[rustfmt::skip]
        let cases: Vec<(&str, Option<SecretKeyRef>, Option<&ObjectMeta>, Credentials)> = vec![
            ("none named",          None,                                    None,            Credentials::None),
            ("marked",              Some(reference("openai")),               Some(&marked),   Credentials::Marked),
            ("unmarked",            Some(reference("openai")),               Some(&unmarked), Credentials::NotMarked),
            ("other value",         Some(reference("openai")),               Some(&other),    Credentials::NotMarked),
            ("missing",             Some(reference("openai")),               None,            Credentials::Missing),
            ("attestation key, even marked", Some(reference(ari_crds::names::ATTESTATION_SECRET)), Some(&marked), Credentials::Forbidden),
            ("not a name",          Some(reference("ns/x")),                 None,            Credentials::Forbidden),
        ];
        for (what, r, m, want) in cases {
            assert_eq!(credentials(r.as_ref(), m), want, "{what}");
        }
    }

    #[test]
    fn readiness_from_credentials_and_probe() {
        use ConditionStatus::{False, True, Unknown};
        use ModelConfigReason as R;
        let listed = |ids: &[&str], truncated| {
            Probe::Listed(ModelList {
                ids: ids.iter().map(|s| s.to_string()).collect(),
                truncated,
            })
        };
        let failed = Probe::Failed;
        #[rustfmt::skip]
        let cases: Vec<(&str, Credentials, Probe, ConditionStatus, R, &str)> = vec![
            ("lists the model",          Credentials::None,      listed(&["tiny"], false),  True,    R::EndpointAnswered,     "lists 1 model(s)"),
            ("model not listed",         Credentials::None,      listed(&["other"], false), True,    R::EndpointAnswered,     "spec.model is not among them"),
            ("list cut",                 Credentials::None,      listed(&["a"], true),      True,    R::EndpointAnswered,     "more not kept"),
            ("401 with a key configured", Credentials::Marked,   failed(ListError::Status(401)), True, R::EndpointAnswered,   "key is checked at the first call"),
            ("403 without a key",        Credentials::None,      failed(ListError::Status(403)), False, R::Unauthorized,      "names no Secret"),
            ("500",                      Credentials::Marked,    failed(ListError::Status(500)), False, R::EndpointError,     "HTTP 500"),
            ("closed or silent",         Credentials::None,      failed(ListError::Unreachable), False, R::Unreachable,       "could not be reached"),
            ("html page",                Credentials::None,      failed(ListError::NotAModelList), False, R::NotAModelEndpoint, "not a model list"),
            ("huge",                     Credentials::None,      failed(ListError::TooLarge), False, R::NotAModelEndpoint,    "larger than"),
            ("internal, not listed",     Credentials::None,      Probe::NotAllowed,         Unknown, R::ProbeNotAllowed,      "modelProbe.internalEndpoints"),
            ("bad endpoint",             Credentials::None,      Probe::InvalidEndpoint,    False,   R::InvalidEndpoint,      "http(s) URL"),
            ("missing secret first",     Credentials::Missing,   listed(&["tiny"], false),  False,   R::CredentialsMissing,   "does not exist"),
            ("unmarked secret",          Credentials::NotMarked, Probe::Skipped,            False,   R::CredentialsNotMarked, "ari.dev/model-credentials=true"),
            ("attestation key",          Credentials::Forbidden, Probe::Skipped,            False,   R::CredentialsForbidden, "attestation key"),
        ];
        for (what, creds, probe, status, reason, says) in cases {
            let v = readiness(creds, &probe, "tiny", Provider::OpenAI);
            assert_eq!((v.status, v.reason), (status, reason), "{what}");
            assert!(v.message.contains(says), "{what}: {}", v.message);
            assert_eq!(
                v.models.is_empty(),
                !matches!(probe, Probe::Listed(_)) || v.status != True,
                "{what}"
            );
        }
        let anthropic = readiness(
            Credentials::None,
            &failed(ListError::Status(404)),
            "m",
            Provider::Anthropic,
        );
        assert!(
            anthropic.message.contains("GET v1/models"),
            "{}",
            anthropic.message
        );
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
