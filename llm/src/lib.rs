//! The host side of ari's model capability, with no Kubernetes and no Wasmtime in it.
//!
//! - [`types`]: provider-neutral chat and embedding requests and answers, mirroring
//!   `interface model` of `wit/model.wit`.
//! - [`Client`]: the OpenAI chat-completions and Anthropic messages wire formats over one HTTP
//!   client; answers read under a size bound, 429 and 5xx retried within the deadline.
//! - [`budget`]: the token budget as pure decisions: clip before, charge after.
//! - [`record`]: each call's request and outcome as a bounded record, and the replayer that
//!   serves them back without a model.
//! - [`rate`]: a ModelConfig's requests and tokens per minute, per model per process.
//! - [`Session`]: all of it for one task.
//!
//! Credentials are an [`ApiKey`], which never prints and is cut out of every message a
//! provider sends back.

pub mod anthropic;
pub mod budget;
mod client;
mod endpoint;
mod error;
pub mod openai;
mod probe;
pub mod rate;
pub mod record;
mod session;
mod stream;
mod transport;
pub mod types;

pub use client::{Answer, Client};
pub use endpoint::{ApiKey, Endpoint, EndpointId, ModelProvider, REDACTED, SchemaStyle};
pub use error::{ErrorKind, MAX_MESSAGE_CHARS, ModelError};
pub use probe::{ListError, ModelList, parse_model_list};
pub use session::{CallError, Model, Session, Source};
pub use transport::{Limits, Next, RetryPolicy, backoff, next_step, retry_after, retryable};
