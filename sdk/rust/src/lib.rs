//! Guest SDK for writing [ari](https://example.invalid/ari) agents in Rust.
//!
//! An ari agent is a WebAssembly component that exports the `ainur:ari/agent@2.0.0`
//! interface and may import `ainur:ari/host@2.0.0`, `ainur:ari/model@2.0.0` and `ainur:ari/tools@2.0.0` (see `wit/`). This crate hides
//! the `wit-bindgen` glue: implement [`Agent`] (only [`Agent::execute`] is required) and
//! call [`export_agent!`] once.
//!
//! ```
//! use ari_sdk::{Agent, Error, Output, Task};
//!
//! struct Echo;
//!
//! impl Agent for Echo {
//!     fn execute(task: Task) -> Result<Output, Error> {
//!         Ok(Output::from(task.input))
//!     }
//! }
//!
//! ari_sdk::export_agent!(Echo);
//! ```
//!
//! Build it as a `cdylib` for `wasm32-wasip2`
//! (`cargo build --release --target wasm32-wasip2`); rustc's linker then emits a component.
//!
//! # Host functions
//!
//! The [`host`] module wraps every host function with plain Rust types:
//!
//! | module | functions | capability |
//! |---|---|---|
//! | [`host::log`] | `trace` `debug` `info` `warn` `error` `log` | always |
//! | [`host::storage`] | `get` `set` `delete`, `get_string` `set_string` `get_u64` `set_u64` | `storage` |
//! | [`host::random`] | `bytes` `u64` `below` | `randomness` |
//! | [`host::crypto`] | `hash` `digest` `hash_hex` `verify` (always), `sign` (`signing`) | see left |
//! | [`host::http`] | `get` `request`, [`host::http::Request`] / [`host::http::Response`] | `network` |
//! | [`host::clock`] | `now` `now_system_time` | `timeAccess` |
//! | [`host::delegation`] | `delegate` `start` / [`host::delegation::Child::wait`] `send_message` | `delegation` |
//! | [`model`] | `chat` `embed` `models`, [`model::ChatRequest`] / [`model::ChatResponse`] | `models` |
//! | [`tools`] | `servers` `list` `call`, [`tools::Tool`] / [`tools::ToolResult`] | `tools` |
//!
//! A capability the agent was not granted makes the call return [`Error::Denied`]; the host
//! never traps for it. Every host error arrives as an [`Error`] case (denied, quota exceeded,
//! invalid, failed; a person's rejection of a delegation or request that needed approval as
//! [`Error::Rejected`]), so `?` works inside [`Agent::execute`] and an agent can match on a
//! refusal; a `String` converts into [`Error::Failed`]. Model calls fail with their own
//! [`model::ModelError`] (a rate limit's wait, a provider's status), which `?` carries as
//! [`Error::Model`]; tools calls with their [`tools::ToolError`], carried as [`Error::Tool`].
//!
//! # Native builds
//!
//! The crate also compiles for the build machine so workspaces can lint and unit-test agent
//! logic natively, but host functions exist only inside the ari executor: calling one from a
//! native binary panics.

mod agent;
pub mod conversation;
mod error;
pub mod hex;
pub mod host;
pub mod model;
pub mod tools;

#[doc(hidden)]
pub mod bindings;

pub use agent::{Agent, Estimate, Output, Task, Usage, config};
pub use error::Error;

/// Items the [`export_agent!`] macro expands to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::agent::Adapter;
}

/// Exports a type implementing [`Agent`] as this component's `ainur:ari/agent@2.0.0`.
///
/// Call it exactly once per component, at module level.
#[macro_export]
macro_rules! export_agent {
    ($agent:ty) => {
        const _: () = {
            type __AriAgentAdapter = $crate::__private::Adapter<$agent>;
            $crate::bindings::__export_ari_agent!(
                __AriAgentAdapter with_types_in $crate::bindings
            );
        };
    };
}
