//! Tools of remote MCP servers (capability `tools`): the servers this Agent is granted, the
//! tools it may call on each, and calls with JSON arguments. The host is the MCP client: it
//! holds the servers' credentials, bounds every answer and records it, so a replay needs no
//! server; the guest only names a server and a tool.
//!
//! ```no_run
//! use ari_sdk::tools;
//!
//! # fn main() -> Result<(), ari_sdk::Error> {
//! for server in tools::servers() {
//!     for tool in tools::list(&server)? {
//!         let careful = tool.hints.destructive == Some(true);
//!         println!("{server}/{} (destructive: {careful})", tool.name);
//!     }
//! }
//! let answer = tools::call("docs", "search", r#"{"query":"fuel"}"#)?;
//! println!("{}", answer.text);
//! # Ok(())
//! # }
//! ```
//!
//! Every call fails with a [`ToolError`] case, never a trap; `?` turns it into
//! [`crate::Error::Tool`] inside [`crate::Agent::execute`].

use crate::bindings::ainur::ari::tools as wit;

/// What a server says a tool does: hints, not guarantees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

/// A tool this Agent may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// JSON Schema of the arguments object, as JSON text.
    pub input_schema: String,
    pub hints: ToolHints,
}

/// What a tool call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The text blocks of the answer, joined by newlines.
    pub text: String,
    /// Every content block (MCP's), as a JSON array.
    pub content: String,
    /// The tool's structured output, as JSON text.
    pub structured: Option<String>,
    /// The tool failed in its own terms; [`ToolResult::text`] says why.
    pub is_error: bool,
}

/// Why a tools call failed, one case per case of the WIT's `tool-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The server or tool is not granted; the task ends `CapabilityDenied`.
    #[error("tool denied: {0}")]
    Denied(String),
    /// The server offers no such tool.
    #[error("tool not found: {0}")]
    NotFound(String),
    /// The arguments are not a JSON object, too large, or refused by the server.
    #[error("invalid tool arguments: {0}")]
    InvalidArguments(String),
    /// The server is not configured, not reachable, or refused the host's credentials.
    #[error("tool server unavailable: {0}")]
    Unavailable(String),
    /// No answer within the call's time limit.
    #[error("tool call timed out: {0}")]
    Timeout(String),
    /// The answer is over the host's size bound.
    #[error("tool answer too large: {0}")]
    TooLarge(String),
    /// The server answered with an error.
    #[error("tool server error: {0}")]
    ServerError(String),
    /// A person rejected the call, which needed approval; nothing was sent.
    #[error("tool call rejected: {0}")]
    Rejected(String),
}

impl ToolError {
    /// The case as the WIT spells it, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Denied(_) => "denied",
            ToolError::NotFound(_) => "not-found",
            ToolError::InvalidArguments(_) => "invalid-arguments",
            ToolError::Unavailable(_) => "unavailable",
            ToolError::Timeout(_) => "timeout",
            ToolError::TooLarge(_) => "too-large",
            ToolError::ServerError(_) => "server-error",
            ToolError::Rejected(_) => "rejected",
        }
    }
}

/// The servers this Agent is granted.
pub fn servers() -> Vec<String> {
    wit::servers()
}

/// The tools of `server` this Agent may call.
pub fn list(server: &str) -> Result<Vec<Tool>, ToolError> {
    Ok(wit::list_tools(server)?
        .into_iter()
        .map(Tool::from)
        .collect())
}

/// Calls `tool` of `server` with `arguments`, a JSON object as text (`""` or `"{}"` for none).
pub fn call(server: &str, tool: &str, arguments: &str) -> Result<ToolResult, ToolError> {
    let r = wit::call_tool(server, tool, arguments)?;
    Ok(ToolResult {
        text: r.text,
        content: r.content,
        structured: r.structured,
        is_error: r.is_error,
    })
}

impl From<wit::ToolInfo> for Tool {
    fn from(t: wit::ToolInfo) -> Self {
        Tool {
            name: t.name,
            title: t.title,
            description: t.description,
            input_schema: t.input_schema,
            hints: ToolHints {
                read_only: t.hints.read_only,
                destructive: t.hints.destructive,
                idempotent: t.hints.idempotent,
                open_world: t.hints.open_world,
            },
        }
    }
}

impl From<wit::ToolError> for ToolError {
    fn from(e: wit::ToolError) -> Self {
        match e {
            wit::ToolError::Denied(m) => ToolError::Denied(m),
            wit::ToolError::NotFound(m) => ToolError::NotFound(m),
            wit::ToolError::InvalidArguments(m) => ToolError::InvalidArguments(m),
            wit::ToolError::Unavailable(m) => ToolError::Unavailable(m),
            wit::ToolError::Timeout(m) => ToolError::Timeout(m),
            wit::ToolError::TooLarge(m) => ToolError::TooLarge(m),
            wit::ToolError::ServerError(m) => ToolError::ServerError(m),
            wit::ToolError::Rejected(m) => ToolError::Rejected(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wit_case_keeps_its_meaning() {
        let cases = [
            (wit::ToolError::Denied("d".into()), "denied"),
            (wit::ToolError::NotFound("n".into()), "not-found"),
            (
                wit::ToolError::InvalidArguments("i".into()),
                "invalid-arguments",
            ),
            (wit::ToolError::Unavailable("u".into()), "unavailable"),
            (wit::ToolError::Timeout("t".into()), "timeout"),
            (wit::ToolError::TooLarge("l".into()), "too-large"),
            (wit::ToolError::ServerError("s".into()), "server-error"),
            (wit::ToolError::Rejected("r".into()), "rejected"),
        ];
        for (wit_error, kind) in cases {
            assert_eq!(ToolError::from(wit_error).kind(), kind);
        }
    }
}
