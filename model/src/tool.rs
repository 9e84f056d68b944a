//! How a tool call came out, as followers of a Task are told (the trace keeps the whole
//! answer or error; this is its one-word summary).

use serde::{Deserialize, Serialize};

/// A tool call's outcome: the server's answer (marked an error by the tool or not), or the
/// WIT `tool-error` case the guest got.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum ToolOutcome {
    /// The tool answered.
    Answered,
    /// The tool answered with `isError`: its own failure, which the guest reads as an answer.
    ToolError,
    Denied,
    NotFound,
    InvalidArguments,
    Unavailable,
    Timeout,
    TooLarge,
    ServerError,
    /// A person rejected the call, which needed approval.
    Rejected,
}
