//! The ari operator: the Agent controller (executor Deployments, RBAC, attestation keys) and
//! the Task controller (admission, deadlines, executor loss, TTL), behind leader election, with
//! metrics and health endpoints; and the Plan controller (validated graphs of step Tasks). `main.rs` is only the binary's edge.

pub mod agent;
mod cache;
pub mod config;
mod context;
pub mod error;
mod health;
mod leader;
mod marked;
pub mod mcp_server;
mod metrics;
pub mod model_config;
pub mod plan;
pub mod pool;
mod probe;
mod run;
pub mod task;

pub use error::Error;
pub use run::run;

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
use ari_testkit::mock_api as testutil;
