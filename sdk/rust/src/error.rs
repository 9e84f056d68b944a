//! The one error type of the SDK, one case per case of the contract's error variants.

use crate::bindings::ainur::ari::types as wit;
use crate::model::ModelError;
use crate::tools::ToolError;

/// Why an agent or an SDK call failed. The host's typed errors (`error-code`, `storage-error`,
/// `http-error`, `delegation-error`; `model-error` as [`Error::Model`]) arrive as these cases,
/// and what [`crate::Agent::execute`] returns leaves as an `error-code`, so an agent can branch
/// on a refusal instead of parsing a message.
/// New cases come with new host functions, so matches outside the SDK need a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A capability is not granted, or the call is outside the grant (a host not on the
    /// allow-list, a signing key id that is not the granted one). Fails the Task
    /// `CapabilityDenied`.
    #[error("denied: {0}")]
    Denied(String),
    /// A storage write would take the Agent over its quota.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// An argument or the data is not acceptable (an empty key, a bad URL, task input the agent
    /// cannot read).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The agent does not handle this kind of task.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Anything else (a backend or transport failure, an agent's own error); another attempt
    /// may succeed.
    #[error("{0}")]
    Failed(String),
    /// No Agent of that name can take a delegated task (unknown, not ready, or its mode
    /// refuses delegated tasks).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A delegation limit of the grant (depth, children) is reached; the task may go on.
    #[error("limit reached: {0}")]
    LimitReached(String),
    /// What is left of this task's fuel or time cannot fund a child.
    #[error("budget exhausted: {0}")]
    BudgetExhausted(String),
    /// A child task ran and failed with this Task reason.
    #[error("child failed with {reason}: {message}")]
    ChildFailed { reason: String, message: String },
    /// A person rejected a delegation or an HTTP request the grant marks for approval (the
    /// message says who and why); nothing was started or sent, and the agent may go on.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A model call failed; the [`ModelError`] keeps its case and fields (a rate limit's wait,
    /// a provider's status), so `?` loses nothing.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A tools call failed; the [`ToolError`] keeps its case.
    #[error(transparent)]
    Tool(#[from] ToolError),
}

/// An agent's own error message: `Err(format!(..))?` and `Err("..".into())` just work.
impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::Failed(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::Failed(message.to_owned())
    }
}

impl From<wit::ErrorCode> for Error {
    fn from(code: wit::ErrorCode) -> Self {
        match code {
            wit::ErrorCode::Denied(m) => Error::Denied(m),
            wit::ErrorCode::InvalidInput(m) => Error::Invalid(m),
            wit::ErrorCode::Unsupported(m) => Error::Unsupported(m),
            wit::ErrorCode::Failed(m) => Error::Failed(m),
        }
    }
}

impl From<wit::StorageError> for Error {
    fn from(err: wit::StorageError) -> Self {
        match err {
            wit::StorageError::Denied(m) => Error::Denied(m),
            wit::StorageError::QuotaExceeded(m) => Error::QuotaExceeded(m),
            wit::StorageError::InvalidKey(m) => Error::Invalid(m),
            wit::StorageError::Failed(m) => Error::Failed(m),
        }
    }
}

impl From<wit::HttpError> for Error {
    fn from(err: wit::HttpError) -> Self {
        match err {
            wit::HttpError::Denied(m) => Error::Denied(m),
            wit::HttpError::InvalidRequest(m) => Error::Invalid(m),
            wit::HttpError::Failed(m) => Error::Failed(m),
            wit::HttpError::Rejected(m) => Error::Rejected(m),
        }
    }
}

impl From<wit::DelegationError> for Error {
    fn from(err: wit::DelegationError) -> Self {
        match err {
            wit::DelegationError::Denied(m) => Error::Denied(m),
            wit::DelegationError::Unavailable(m) => Error::Unavailable(m),
            wit::DelegationError::LimitReached(m) => Error::LimitReached(m),
            wit::DelegationError::BudgetExhausted(m) => Error::BudgetExhausted(m),
            wit::DelegationError::Failed(f) => Error::ChildFailed {
                reason: f.reason,
                message: f.message,
            },
            wit::DelegationError::InvalidHandle(m) => Error::Invalid(m),
            wit::DelegationError::Rejected(m) => Error::Rejected(m),
        }
    }
}

/// What an agent's error becomes on the wire. A quota refusal is a denial there: the contract's
/// `error-code` has no quota case of its own.
impl From<Error> for wit::ErrorCode {
    fn from(err: Error) -> Self {
        match err {
            Error::Denied(m) | Error::QuotaExceeded(m) => wit::ErrorCode::Denied(m),
            Error::Invalid(m) => wit::ErrorCode::InvalidInput(m),
            Error::Unsupported(m) => wit::ErrorCode::Unsupported(m),
            Error::Failed(m)
            | Error::Unavailable(m)
            | Error::LimitReached(m)
            | Error::BudgetExhausted(m) => wit::ErrorCode::Failed(m),
            // Not a denial: a person said no, and the agent chose to stop.
            rejected @ Error::Rejected(_) => wit::ErrorCode::Failed(rejected.to_string()),
            child @ Error::ChildFailed { .. } => wit::ErrorCode::Failed(child.to_string()),
            // A model denial is a denial (the task ends `CapabilityDenied` either way) and a
            // request the provider refused as malformed is invalid input; the rest failed.
            Error::Model(ModelError::Denied(m)) => wit::ErrorCode::Denied(m),
            Error::Model(ModelError::InvalidRequest(m)) => wit::ErrorCode::InvalidInput(m),
            model @ Error::Model(_) => wit::ErrorCode::Failed(model.to_string()),
            // Likewise for tools: a denial is a denial, refused arguments are invalid input.
            Error::Tool(ToolError::Denied(m)) => wit::ErrorCode::Denied(m),
            Error::Tool(ToolError::InvalidArguments(m)) => wit::ErrorCode::InvalidInput(m),
            tool @ Error::Tool(_) => wit::ErrorCode::Failed(tool.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_error_case_keeps_its_meaning_through_the_sdk() {
        let denied = Error::from(wit::StorageError::Denied("d".into()));
        assert_eq!(denied, Error::Denied("d".into()));
        let quota = Error::from(wit::StorageError::QuotaExceeded("q".into()));
        assert_eq!(quota, Error::QuotaExceeded("q".into()));
        assert_eq!(
            Error::from(wit::HttpError::InvalidRequest("u".into())),
            Error::Invalid("u".into())
        );
        assert_eq!(
            Error::from(wit::ErrorCode::Unsupported("x".into())),
            Error::Unsupported("x".into())
        );
        assert_eq!(
            Error::from(wit::HttpError::Rejected("ana: no".into())),
            Error::Rejected("ana: no".into())
        );
        assert_eq!(
            Error::from(wit::DelegationError::Rejected("ana: no".into())),
            Error::Rejected("ana: no".into())
        );
    }

    #[test]
    fn a_rejection_leaves_execute_as_a_failure_that_still_says_who_rejected() {
        let code: wit::ErrorCode =
            Error::Rejected("ana rejected call 0-1: not today".into()).into();
        assert_eq!(
            code,
            wit::ErrorCode::Failed("rejected: ana rejected call 0-1: not today".into())
        );
    }

    #[test]
    fn an_agent_error_leaves_as_the_matching_error_code() {
        let code: wit::ErrorCode = Error::Invalid("bad".into()).into();
        assert_eq!(code, wit::ErrorCode::InvalidInput("bad".into()));
        let code: wit::ErrorCode = Error::from("plain message").into();
        assert_eq!(code, wit::ErrorCode::Failed("plain message".into()));
        let code: wit::ErrorCode = Error::QuotaExceeded("q".into()).into();
        assert_eq!(code, wit::ErrorCode::Denied("q".into()));
    }

    #[test]
    fn a_model_error_passed_on_with_question_mark_leaves_as_its_meaning() {
        fn call(e: ModelError) -> Result<(), Error> {
            Err(e)?
        }
        let denied: wit::ErrorCode = call(ModelError::Denied("m".into()))
            .expect_err("an error")
            .into();
        assert_eq!(denied, wit::ErrorCode::Denied("m".into()));
        let invalid: wit::ErrorCode = call(ModelError::InvalidRequest("bad".into()))
            .expect_err("an error")
            .into();
        assert_eq!(invalid, wit::ErrorCode::InvalidInput("bad".into()));
        let provider = call(ModelError::Provider {
            status: 500,
            message: "boom".into(),
        })
        .expect_err("an error");
        assert!(matches!(
            provider,
            Error::Model(ModelError::Provider { status: 500, .. })
        ));
        let code: wit::ErrorCode = provider.into();
        assert_eq!(
            code,
            wit::ErrorCode::Failed("model provider error (HTTP 500): boom".into())
        );
    }
}
