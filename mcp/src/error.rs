//! Why a tools call failed: the WIT's `tool-error`, case for case.

use serde::{Deserialize, Serialize};

pub use ari_model::record::MAX_MESSAGE_CHARS;
use ari_model::record::short;

/// A failed tools call. Messages are short, on one line, and never hold the server's
/// credentials (everything a server sends is redacted before it becomes one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind"
)]
pub enum ToolError {
    /// The server or the tool is not granted; nothing was sent.
    #[error("tool denied: {message}")]
    Denied { message: String },
    /// The server does not offer that tool.
    #[error("tool not found: {message}")]
    NotFound { message: String },
    /// The arguments are not a JSON object, too large, or the server rejected them.
    #[error("invalid tool arguments: {message}")]
    InvalidArguments { message: String },
    /// The server could not be reached, refused the credentials, or is not configured.
    #[error("tool server unavailable: {message}")]
    Unavailable { message: String },
    /// No answer within the call's time.
    #[error("tool call timed out: {message}")]
    Timeout { message: String },
    /// The answer (or the tool list) is over the host's bound.
    #[error("tool answer too large: {message}")]
    TooLarge { message: String },
    /// The server answered with an error.
    #[error("tool server error: {message}")]
    ServerError { message: String },
    /// A person rejected the call, which needed approval; nothing was sent.
    #[error("tool call rejected: {message}")]
    Rejected { message: String },
}

impl ToolError {
    /// The case, as followers of a Task are told it.
    pub fn outcome(&self) -> ari_model::ToolOutcome {
        use ari_model::ToolOutcome as O;
        match self {
            ToolError::Denied { .. } => O::Denied,
            ToolError::NotFound { .. } => O::NotFound,
            ToolError::InvalidArguments { .. } => O::InvalidArguments,
            ToolError::Unavailable { .. } => O::Unavailable,
            ToolError::Timeout { .. } => O::Timeout,
            ToolError::TooLarge { .. } => O::TooLarge,
            ToolError::ServerError { .. } => O::ServerError,
            ToolError::Rejected { .. } => O::Rejected,
        }
    }

    pub fn denied(message: impl Into<String>) -> ToolError {
        ToolError::Denied {
            message: short(&message.into()),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ToolError {
        ToolError::NotFound {
            message: short(&message.into()),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments {
            message: short(&message.into()),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> ToolError {
        ToolError::Unavailable {
            message: short(&message.into()),
        }
    }

    pub fn timeout(message: impl Into<String>) -> ToolError {
        ToolError::Timeout {
            message: short(&message.into()),
        }
    }

    pub fn too_large(message: impl Into<String>) -> ToolError {
        ToolError::TooLarge {
            message: short(&message.into()),
        }
    }

    pub fn server(message: impl Into<String>) -> ToolError {
        ToolError::ServerError {
            message: short(&message.into()),
        }
    }

    pub fn rejected(message: impl Into<String>) -> ToolError {
        ToolError::Rejected {
            message: short(&message.into()),
        }
    }

    /// The message, without the case's prefix.
    pub fn message(&self) -> &str {
        match self {
            ToolError::Denied { message }
            | ToolError::NotFound { message }
            | ToolError::InvalidArguments { message }
            | ToolError::Unavailable { message }
            | ToolError::Timeout { message }
            | ToolError::TooLarge { message }
            | ToolError::ServerError { message }
            | ToolError::Rejected { message } => message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_short_on_one_line_and_round_trip_as_json() {
        let e = ToolError::server(format!("a\nb{}", "x".repeat(10_000)));
        assert_eq!(e.message().chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(e.message().starts_with("a b"));
        let json = serde_json::to_string(&ToolError::too_large("big")).expect("json");
        assert_eq!(json, r#"{"kind":"tooLarge","message":"big"}"#);
        let back: ToolError = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, ToolError::too_large("big"));
    }
}
