//! Wasm components as OCI artifacts: an Agent's module can come from any OCI registry, pinned
//! by digest, with the pull secret users already have for images.
//!
//! - [`Reference`]: `registry/repository[:tag][@sha256:...]`, and whether it is pinned.
//! - [`Credentials`]: from a Kubernetes `.dockerconfigjson` pull secret.
//! - [`Client`]: resolve a tag, pull (verified, size-limited, Wasm layout only), push.
//! - [`NetworkPolicy`]: where a pull may go (hosts, schemes, addresses), as the admin set it.
//! - [`ModuleCache`]: pulled modules on disk by digest, so restarts do not pull again.
//! - [`Error`]: one variant per condition, with [`Error::reason`] for the Agent's status.

mod cache;
mod client;
mod credentials;
mod digest;
mod error;
mod failures;
pub mod layout;
mod policy;
mod reference;
mod transport;

pub use cache::ModuleCache;
pub use client::{
    Client, ClientOptions, DEFAULT_MAX_CONCURRENT_PULLS, DEFAULT_MAX_MODULE_BYTES,
    ENV_ALLOW_INTERNAL, ENV_DELEGATE_HOSTS, ENV_INSECURE_REGISTRIES, ENV_PRIVATE_REGISTRIES,
    MAX_MANIFEST_BYTES, PulledModule, split_list,
};
pub use credentials::Credentials;
pub use digest::sha256_digest;
pub use error::{Error, UNREACHABLE};
pub use failures::{BACKOFF_MAX, BACKOFF_MIN, backoff};
pub use policy::{Endpoint, NetworkPolicy, Refusal, is_internal};
pub use reference::Reference;
pub use transport::{MAX_TOKEN_BYTES, policy_resolver};
