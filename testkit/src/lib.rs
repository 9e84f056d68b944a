//! Test helpers shared by the workspace's crates, as a dev-dependency only: one copy instead of
//! a copy per crate or a source file included across crates with `#[path]`. Each module sits
//! behind the feature of the same name (see `Cargo.toml`), so a user links only what it uses.
//! The modules are used in part by each crate, hence no dead-code lint here: it is a library.

pub mod agents;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp-server")]
pub mod mcp_server;
#[cfg(feature = "kube")]
pub mod mock_api;
#[cfg(feature = "model-server")]
pub mod model_server;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "scripted")]
pub mod scripted;
