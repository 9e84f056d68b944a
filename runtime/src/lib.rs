//! The ari runtime: runs agent components under Wasmtime with every limit metered and every
//! run attested. See `docs/runtime.md` for the rules this crate implements.
//!
//! Nothing here knows Kubernetes: the `ari` binary (`executor/`) maps Agents and Tasks onto
//! these types, and anyone embedding the runtime gets only Wasmtime and the capabilities.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ari_runtime::{Runtime, RuntimeConfig, TaskRequest};
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let agent = runtime.load(&std::fs::read("echo.wasm")?)?;
//! let key = Arc::new(ari_runtime::attestation::generate_signing_key());
//! let outcome = agent.run(TaskRequest::new("t1", b"hello".to_vec(), key));
//! assert!(outcome.succeeded());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attestation;
pub mod bindings;
pub mod cache;
pub mod cancel;
pub mod capability;
pub mod engine;
pub mod failure;
pub mod fuel_costs;
mod host;
pub mod interrupt;
pub mod limits;
pub mod local;
pub mod metering;
pub mod report;
mod runtime;
mod state;
mod task;
pub mod trace;
mod validate;
pub mod verify;
mod wasi;

/// The shared vocabulary (capability names, reasons, usage, limits, attestations).
pub use ari_model as model;
/// The Wasmtime this runtime is built on (its `Engine` and component types appear in our API).
pub use wasmtime;

pub use attestation::Attestation;
pub use cache::LoadSource;
pub use cancel::CancelToken;
pub use capability::Grants;
pub use engine::{AllocatorChoice, AllocatorKind, EngineOptions, PoolConfig};
pub use failure::{Failure, FailureKind};
pub use interrupt::CpuWatch;
pub use limits::{Limits, LimitsApplied};
pub use metering::ResourcesUsed;
pub use report::RunReport;
pub use runtime::{LoadedAgent, Runtime, RuntimeConfig, RuntimeError, RuntimeStats};
pub use task::{CommitGate, TaskOutcome, TaskRequest, default_executor_name};
pub use trace::Trace;
pub use verify::{AgentOf, VerifyError, VerifyOptions, verify_report, verify_tree};
