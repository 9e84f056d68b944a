//! Why a model call failed: the WIT's `model-error`, case for case.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use ari_model::record::MAX_MESSAGE_CHARS;
use ari_model::record::short;

/// A failed model call. Messages are short and never hold the credentials (they are built
/// from provider text through [`crate::Endpoint::redact`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind"
)]
pub enum ModelError {
    /// The Agent is not granted that model.
    #[error("model denied: {message}")]
    Denied { message: String },
    /// The token budget cannot cover the prompt; nothing was sent.
    #[error("token budget exhausted: {message}")]
    BudgetExhausted { message: String },
    /// Still refused after the retries the deadline allowed.
    #[error("rate limited{}: {message}", retry_after_text(*retry_after_millis))]
    RateLimited {
        retry_after_millis: Option<u64>,
        message: String,
    },
    /// Not reached, or no answer in time.
    #[error("model unavailable: {message}")]
    Unavailable { message: String },
    /// Malformed, or rejected by the provider as such.
    #[error("invalid model request: {message}")]
    InvalidRequest { message: String },
    /// Any other provider failure, an unreadable or oversized answer included.
    #[serde(rename = "providerError")]
    #[error("model provider error (HTTP {status}): {message}")]
    Provider { status: u16, message: String },
}

fn retry_after_text(millis: Option<u64>) -> String {
    millis.map_or_else(String::new, |ms| format!(" (retry after {ms} ms)"))
}

/// The case of a [`ModelError`], for metrics and decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Denied,
    BudgetExhausted,
    RateLimited,
    Unavailable,
    InvalidRequest,
    Provider,
}

impl ModelError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ModelError::Denied { .. } => ErrorKind::Denied,
            ModelError::BudgetExhausted { .. } => ErrorKind::BudgetExhausted,
            ModelError::RateLimited { .. } => ErrorKind::RateLimited,
            ModelError::Unavailable { .. } => ErrorKind::Unavailable,
            ModelError::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            ModelError::Provider { .. } => ErrorKind::Provider,
        }
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> ModelError {
        ModelError::Unavailable {
            message: short(&message.into()),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ModelError {
        ModelError::InvalidRequest {
            message: short(&message.into()),
        }
    }

    pub(crate) fn provider(status: u16, message: impl Into<String>) -> ModelError {
        ModelError::Provider {
            status,
            message: short(&message.into()),
        }
    }

    pub(crate) fn rate_limited(retry_after: Option<Duration>, message: impl Into<String>) -> Self {
        ModelError::RateLimited {
            retry_after_millis: retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            message: short(&message.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_short_and_on_one_line() {
        let long = "x".repeat(10_000);
        let ModelError::Provider { message, .. } = ModelError::provider(500, long) else {
            panic!("provider");
        };
        assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert_eq!(short("a\nb\r\tc"), "a b  c");
    }

    #[test]
    fn rate_limits_say_when_to_come_back() {
        let e = ModelError::rate_limited(Some(Duration::from_secs(2)), "slow down");
        assert_eq!(
            e.to_string(),
            "rate limited (retry after 2000 ms): slow down"
        );
        assert_eq!(e.kind(), ErrorKind::RateLimited);
    }
}
