//! Wasm components as OCI artifacts: an Agent's module can come from any OCI registry, pinned
//! by digest, with the pull secret users already have for images.
//!
//! - [`Reference`]: `registry/repository[:tag][@sha256:...]`, and whether it is pinned.
//! - [`Credentials`]: from a Kubernetes `.dockerconfigjson` pull secret.
//! - [`Client`]: resolve a tag, pull (verified, size-limited, Wasm layout only), push.
//! - [`ModuleCache`]: pulled modules on disk by digest, so restarts do not pull again.
//! - [`Error`]: one variant per condition, with [`Error::reason`] for the Agent's status.

mod cache;
mod client;
mod credentials;
mod digest;
mod error;
pub mod layout;
mod reference;

pub use cache::ModuleCache;
pub use client::{Client, ClientOptions, DEFAULT_MAX_MODULE_BYTES, PulledModule};
pub use credentials::Credentials;
pub use digest::sha256_digest;
pub use error::Error;
pub use reference::Reference;
