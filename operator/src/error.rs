//! The operator's one error type. Each variant has a metric label, so
//! `ari_operator_reconcile_errors_total{controller,error}` says what kind of failure a
//! controller is retrying without anyone reading logs.

use crate::agent::key::KeyError;

/// Everything a reconcile (or the operator's start-up) can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or could not be reached; retried with backoff.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The namespace's attestation key could not be read or written.
    #[error("attestation key: {0}")]
    Key(#[from] KeyError),
    /// A namespaced kind came without a namespace (a cache bug, not user input).
    #[error("object has no namespace")]
    NoNamespace,
    /// The metrics registry refused a metric (a programming error, at start-up).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The registry client could not be built (its TLS set-up), at start-up.
    #[error("registry client: {0}")]
    Registry(#[from] ari_oci::Error),
    /// The model probe's HTTP client could not be built (its TLS set-up), at start-up.
    #[error("model probe client: {0}")]
    ModelProbe(ari_llm::ModelError),
    /// The MCP server probe's HTTP client could not be built (its TLS set-up), at start-up.
    #[error("tool server probe client: {0}")]
    ToolProbe(ari_mcp::ToolError),
    /// Another replica took the Lease: this one exits so it restarts as a fresh candidate.
    #[error("lost leadership")]
    LostLeadership,
}

impl Error {
    /// Short, stable label for the `error` dimension of the error metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube_api",
            Error::Key(_) => "attestation_key",
            Error::NoNamespace => "no_namespace",
            Error::Metrics(_) => "metrics",
            Error::Registry(_) => "registry",
            Error::ModelProbe(_) => "model_probe",
            Error::ToolProbe(_) => "tool_probe",
            Error::LostLeadership => "lost_leadership",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_error_has_its_own_non_empty_metric_label() {
        let all = [
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Key(KeyError::Malformed {
                secret: "s".into(),
                key: "k",
            }),
            Error::NoNamespace,
            Error::Metrics(prometheus::Error::Msg("m".into())),
            Error::Registry(ari_oci::Error::Other("o".into())),
            Error::ModelProbe(ari_llm::ModelError::Unavailable {
                message: "m".into(),
            }),
            Error::ToolProbe(ari_mcp::ToolError::unavailable("m")),
            Error::LostLeadership,
        ];
        let labels: HashSet<&str> = all.iter().map(Error::metric_label).collect();
        assert_eq!(labels.len(), all.len(), "{labels:?}");
        assert!(labels.iter().all(|l| !l.is_empty() && !l.contains(' ')));
    }
}
