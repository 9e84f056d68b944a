//! The one error type of the crate, shaped for the operator: each variant is a distinct
//! condition on an Agent, named by [`Error::reason`].

use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};

/// What went wrong pulling or pushing a module. Messages name the reference or registry so a
/// condition's message is enough to act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The repository, tag or digest is not in the registry.
    #[error("not found: {0}")]
    NotFound(String),
    /// The registry refused the credentials, or wanted some and got none.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The registry could not be reached or answered that it is unavailable: worth retrying.
    #[error("registry unavailable: {0}")]
    RegistryUnavailable(String),
    /// Content did not hash to the digest that names it (or a tag no longer points at the pinned
    /// digest): never run it.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch { expected: String, actual: String },
    /// The manifest is not the Wasm OCI artifact layout (one `application/wasm` layer).
    #[error("not a Wasm OCI artifact: {0}")]
    NotAWasmArtifact(String),
    /// The module is larger than the configured limit.
    #[error("module of {size} bytes is over the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// The image reference (or a digest given for the cache) is malformed.
    #[error("invalid image reference: {0}")]
    InvalidReference(String),
    /// A request the operator's registry settings do not allow: another host or port, plain
    /// http, an internal address. The message is a fixed text, never the target.
    #[error("registry not allowed: {0}")]
    NotAllowed(String),
    /// Anything else: a malformed pull secret, a registry that breaks the protocol, local I/O.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The CamelCase reason for a Kubernetes condition, stable across messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "ImageNotFound",
            Error::Unauthorized(_) => "Unauthorized",
            Error::RegistryUnavailable(_) => "RegistryUnavailable",
            Error::DigestMismatch { .. } => "DigestMismatch",
            Error::NotAWasmArtifact(_) => "NotAWasmArtifact",
            Error::TooLarge { .. } => "ModuleTooLarge",
            Error::InvalidReference(_) => "InvalidImageReference",
            Error::NotAllowed(_) => "RegistryNotAllowed",
            Error::Other(_) => "PullFailed",
        }
    }

    /// A registry that could not be reached or gave no HTTP answer. One text for a refused
    /// connection, a timeout, a reset and a service that speaks something else: a status must
    /// not tell open, closed and filtered ports apart.
    pub fn unreachable(what: &str) -> Error {
        Error::RegistryUnavailable(format!("{what}: {UNREACHABLE}"))
    }

    /// An HTTP status the registry answered with: the code and a fixed text, never the body
    /// (which may be an internal service's error page).
    pub(crate) fn from_http_status(what: &str, code: u16) -> Error {
        from_status(code, format!("{what}: the registry answered HTTP {code}"))
    }

    /// Whether trying again later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::RegistryUnavailable(_))
    }

    /// Sorts an `oci-client` error into a variant; `what` (a reference) prefixes the message.
    pub(crate) fn from_registry(what: &str, err: OciDistributionError) -> Error {
        let message = format!("{what}: {}", with_causes(&err));
        match err {
            OciDistributionError::ImageManifestNotFoundError(_) => Error::NotFound(message),
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => Error::Unauthorized(message),
            OciDistributionError::RegistryError { ref envelope, .. } => {
                match envelope.errors.first().map(|e| &e.code) {
                    Some(
                        OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown,
                    ) => Error::NotFound(message),
                    Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                        Error::Unauthorized(message)
                    }
                    Some(OciErrorCode::Toomanyrequests) => Error::RegistryUnavailable(message),
                    _ => Error::Other(message),
                }
            }
            OciDistributionError::ServerError { code, .. } => from_status(code, message),
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => Error::DigestMismatch { expected, actual },
            OciDistributionError::IncompatibleLayerMediaTypeError(_)
            | OciDistributionError::UnsupportedMediaTypeError(_)
            | OciDistributionError::PullNoLayersError
            | OciDistributionError::ImageIndexParsingNoPlatformResolverError => {
                Error::NotAWasmArtifact(message)
            }
            OciDistributionError::RequestError(ref e) => {
                if e.is_connect() || e.is_timeout() {
                    Error::RegistryUnavailable(message)
                } else if let Some(status) = e.status() {
                    from_status(status.as_u16(), message)
                } else {
                    Error::Other(message)
                }
            }
            OciDistributionError::IoError(ref e) => match digest_mismatch_in(e) {
                Some(mismatch) => mismatch,
                None => Error::Other(message),
            },
            _ => Error::Other(message),
        }
    }
}

/// The text of [`Error::unreachable`].
pub const UNREACHABLE: &str = "the registry could not be reached or gave no HTTP answer";

/// The error and its causes on one line: reqwest's own message ("error sending request") does
/// not say that the connection was refused; its sources do.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn from_status(code: u16, message: String) -> Error {
    match code {
        401 | 403 => Error::Unauthorized(message),
        404 => Error::NotFound(message),
        429 | 502 | 503 | 504 => Error::RegistryUnavailable(message),
        _ => Error::Other(message),
    }
}

fn digest_mismatch_in(err: &std::io::Error) -> Option<Error> {
    let inner = err.get_ref()?;
    let found = inner.downcast_ref::<DigestError>().or_else(|| {
        match inner.downcast_ref::<OciDistributionError>() {
            Some(OciDistributionError::DigestError(d)) => Some(d),
            _ => None,
        }
    });
    match found {
        Some(DigestError::VerificationError { expected, actual }) => Some(Error::DigestMismatch {
            expected: expected.clone(),
            actual: actual.clone(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_its_condition_reason() {
        let cases = [
            (Error::NotFound(String::new()), "ImageNotFound"),
            (Error::Unauthorized(String::new()), "Unauthorized"),
            (
                Error::RegistryUnavailable(String::new()),
                "RegistryUnavailable",
            ),
            (
                Error::DigestMismatch {
                    expected: String::new(),
                    actual: String::new(),
                },
                "DigestMismatch",
            ),
            (Error::NotAWasmArtifact(String::new()), "NotAWasmArtifact"),
            (Error::TooLarge { size: 2, limit: 1 }, "ModuleTooLarge"),
            (
                Error::InvalidReference(String::new()),
                "InvalidImageReference",
            ),
            (Error::NotAllowed(String::new()), "RegistryNotAllowed"),
            (Error::Other(String::new()), "PullFailed"),
        ];
        for (err, reason) in cases {
            assert_eq!(err.reason(), reason, "{err:?}");
        }
    }

    #[test]
    fn registry_status_codes_sort_into_conditions() {
        let sorted = |code| {
            Error::from_registry(
                "r",
                OciDistributionError::ServerError {
                    code,
                    url: "u".into(),
                    message: "m".into(),
                },
            )
            .reason()
        };
        assert_eq!(sorted(404), "ImageNotFound");
        assert_eq!(sorted(401), "Unauthorized");
        assert_eq!(sorted(403), "Unauthorized");
        assert_eq!(sorted(503), "RegistryUnavailable");
        assert_eq!(sorted(500), "PullFailed");
    }
}
