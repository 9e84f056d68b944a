//! What a ModelConfig's `Ready` condition says, as pure functions of what was observed: the
//! credentials Secret's labels and the probe of the endpoint's model list.
//!
//! The probe is a request the operator makes to a URL a namespace user wrote, so it must not
//! become a port scanner or a reader of internal pages: it goes to internal addresses only
//! when the admin listed the endpoint, and every outcome is a fixed text with at most a
//! status code, never the answer's body. It carries no key: only the executor reads the
//! credentials Secret.

use ari_crds::ModelConfigReason;
use ari_crds::conditions::ConditionStatus;
use ari_llm::{ListError, ModelList};
use ari_model::ModelProvider as Provider;

pub use crate::marked::Credentials;

/// What happened to the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Not sent: the credentials are not usable.
    Skipped,
    /// Not sent: `spec.endpoint` is no URL the probe can request.
    InvalidEndpoint,
    /// Not sent: see [`crate::probe::Target::NotAllowed`].
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
