//! The host side of ari's tools capability, with no Kubernetes and no Wasmtime in it.
//!
//! - [`ToolServer`]: a remote MCP server as a namespace declares it: its URL, the protocol
//!   revision to speak and its credentials (a bearer token and header values, each a
//!   [`Secret`] that never prints and is cut out of everything the server sends back).
//! - [`Client`]: the MCP client over streamable HTTP (`rmcp`): tools listed and called with
//!   every answer bounded in size, every call bounded in time, redirects never followed.
//! - [`record`]: each exchange (the request as sent, without credentials, and its whole
//!   outcome) as a [`record::CallRecord`], and the [`record::Replayer`] that serves them back
//!   without the server and fails on the first request that differs.
//! - [`Session`]: all of it for one task.

mod client;
mod error;
pub mod record;
mod server;
mod session;
mod types;

pub use ari_model::secret::{REDACTED, Secret};

/// The log directive every binary that links this crate adds to its filter, whatever else the
/// filter says: `rmcp` logs what a server sent (an error response's body, the server's own
/// description of itself), and a server is chosen by a namespace user and may echo the token it
/// was sent. ari's own logs and statuses say what happened in fixed texts instead.
pub const SILENCE_SDK_LOGS: &str = "rmcp=off";
pub use client::{Client, Limits};
pub use error::{MAX_MESSAGE_CHARS, ToolError};
pub use server::{BadServer, Credentials, Protocol, ServerId, ToolServer};
pub use session::{CallError, Session, Source};
pub use types::{Arguments, ToolHints, ToolInfo, ToolResult};
