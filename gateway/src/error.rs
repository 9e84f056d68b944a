//! Every way a request can fail, as a JSON-RPC error with its A2A code or an HTTP status.
//! Nothing internal (API server bodies, stacks) reaches a caller: only a short message.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// A2A v1.0 and JSON-RPC 2.0 error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("a bearer token is required")]
    Unauthenticated,
    #[error("the token was not accepted")]
    BadToken,
    #[error("{0}")]
    Forbidden(String),
    #[error("too many requests; slow down")]
    RateLimited,
    #[error("the request body is too large")]
    BodyTooLarge,
    #[error("the request body did not arrive in time")]
    BodyTimeout,
    #[error("too many open streams")]
    TooManyStreams,
    #[error("no exposed agent {0}")]
    AgentNotFound(String),
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("method not found: {0}")]
    MethodNotFound(String),
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("task not found: {0}")]
    TaskNotFound(String),
    #[error("task {0} has ended and cannot be canceled")]
    NotCancelable(String),
    #[error("push notifications are not supported")]
    PushNotSupported,
    #[error("unsupported operation: {0}")]
    Unsupported(String),
    #[error("content type not supported: {0}")]
    ContentType(String),
    /// The API server failed us; the detail goes to the log, not the caller.
    #[error("the cluster did not answer; try again")]
    Kube(#[source] kube::Error),
}

impl Error {
    /// Label of `ari_gateway_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::BadToken => "bad_token",
            Self::Forbidden(_) => "forbidden",
            Self::RateLimited => "rate_limited",
            Self::BodyTooLarge => "body_too_large",
            Self::BodyTimeout => "body_timeout",
            Self::TooManyStreams => "too_many_streams",
            Self::AgentNotFound(_) => "agent_not_found",
            Self::Parse(_) => "parse",
            Self::InvalidRequest(_) => "invalid_request",
            Self::MethodNotFound(_) => "method_not_found",
            Self::InvalidParams(_) => "invalid_params",
            Self::TaskNotFound(_) => "task_not_found",
            Self::NotCancelable(_) => "not_cancelable",
            Self::PushNotSupported => "push_not_supported",
            Self::Unsupported(_) => "unsupported",
            Self::ContentType(_) => "content_type",
            Self::Kube(_) => "kube",
        }
    }

    /// Errors that are answered with an HTTP status rather than inside JSON-RPC: the caller
    /// never got as far as a method.
    pub fn http_status(&self) -> Option<StatusCode> {
        Some(match self {
            Self::Unauthenticated | Self::BadToken => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::RateLimited | Self::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::AgentNotFound(_) => StatusCode::NOT_FOUND,
            _ => return None,
        })
    }

    pub fn rpc_code(&self) -> i64 {
        match self {
            Self::Parse(_) => code::PARSE_ERROR,
            Self::InvalidRequest(_) => code::INVALID_REQUEST,
            Self::MethodNotFound(_) => code::METHOD_NOT_FOUND,
            Self::InvalidParams(_) => code::INVALID_PARAMS,
            Self::TaskNotFound(_) => code::TASK_NOT_FOUND,
            Self::NotCancelable(_) => code::TASK_NOT_CANCELABLE,
            Self::PushNotSupported => code::PUSH_NOT_SUPPORTED,
            Self::Unsupported(_) => code::UNSUPPORTED_OPERATION,
            Self::ContentType(_) => code::CONTENT_TYPE_NOT_SUPPORTED,
            _ => code::INTERNAL,
        }
    }

    /// The JSON-RPC error object.
    pub fn rpc_error(&self) -> Value {
        json!({"code": self.rpc_code(), "message": self.to_string()})
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Self::Kube(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
