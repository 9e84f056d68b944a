//! The capability layer: everything a guest can reach outside its sandbox.
//!
//! Deny by default. Each capability is its own module owning all of itself (like Spin's
//! factors): it implements [`Capability`] (what it takes from the grants and the task, what
//! it measured), its checks, metering and recording, its trace events and their replay, and in
//! its `link` module its host functions' linkage, their fuel costs and how its errors reach the
//! guest. Only the `link` modules know about Wasmtime.
//!
//! The one list of capabilities is the `capabilities!` call below: from it come the per-task
//! state ([`TaskCapabilities`]), the host functions the linker adds and the fuel table
//! (`HOSTS`), the usage summary and the trace event union ([`crate::trace::TraceEvent`]).
//! [`TaskCapabilities`] knows no capability by name: the host calls one through
//! `TaskCapabilities::call` (with the trace recorder; a denial is noted) or
//! `TaskCapabilities::get`, and it keeps only what is shared: the recorder and the denials.

pub mod approval;
pub mod clock;
pub mod conversation;
pub mod crypto;
pub mod delegation;
mod error;
mod grants;
pub mod http;
pub(crate) mod io;
pub mod log;
pub mod model;
pub mod random;
pub mod storage;
pub mod tools;

pub use approval::{ApprovalRequest, Approver, Decided, Waited, approvals_of};
pub use crypto::{HashAlgorithm, LoadedSigningKey};
pub use delegation::{DelegationContext, DelegationFailure, DelegationGrant, Settled};
pub use error::{CapError, GrantError};
pub use grants::{Grants, parse_cli_name, parse_size};
pub use http::{HttpLimits, HttpRequest, HttpResponse, allowlist};
pub use io::{Loaded, Named};
pub use log::{LogLevel, LogTap};
pub use model::{LoadedModels, ModelTap};
pub use storage::StorageGrant;
pub use tools::LoadedTools;
pub use tools::ToolTap;

use std::sync::Arc;
use std::time::Instant;

use ari_model::CapabilityName;

use crate::cancel::CancelToken;
use crate::host::HostFunctions;
use crate::trace::{Recorder, Trace};

/// How many denials (and, in the executor, host failures) a task keeps for its failure message.
pub const MAX_NOTED: usize = 16;

/// Live runs talk to storage and the network and record; replays serve the trace.
#[derive(Debug, Clone)]
pub enum Mode {
    Live,
    Replay(Trace),
}

/// What the capabilities measured for one task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapUsage {
    /// Key + value bytes of every accepted `storage-set` (committed or not).
    pub storage_bytes_written: u64,
    /// HTTP bytes both ways, every hop (see `http::request_bytes`).
    pub network_bytes: u64,
    /// Log message bytes kept.
    pub log_bytes: u64,
    /// Fuel the task's children took out of its budget.
    pub children_fuel: u64,
    /// Model tokens the task's children took out of its budget.
    pub children_tokens: u64,
    /// Delegation calls refused by the grant or its limits.
    pub delegations_refused: u32,
    /// Tool calls sent to a server.
    pub tool_calls: u64,
}

/// One capability as a task holds it. Its module owns the rest: its host functions (`HOST`,
/// from its `link` module) and its trace events. Register it in `capabilities!` below.
pub(crate) trait Capability: Sized {
    /// The grant that allows it (`None`: always allowed, like `log` and `hash`). Read by the
    /// test that every grant has its capability in the list.
    #[cfg_attr(not(test), allow(dead_code))]
    const GRANT: Option<CapabilityName>;
    /// Its host functions: their linkage and fuel costs.
    const HOST: HostFunctions;

    /// Its state for one task, from the agent's grants and what the task hands it.
    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self;

    /// The task's deadline, known once its store is set up: nothing may wait past it.
    fn set_deadline(&mut self, _deadline: Instant) {}

    /// Adds what it measured to the task's usage.
    fn add_usage(&self, _usage: &mut CapUsage) {}
}

/// What one task hands its capabilities when they are made (each takes what it needs).
pub struct TaskSetup {
    /// The task's name (its children are named after it).
    pub task: String,
    /// The task's PRNG seed.
    pub seed: [u8; 32],
    /// Start of the logical clock, ns since the Unix epoch.
    pub start_unix_nanos: u64,
    /// The agent's storage (`None` in replay, or when not granted).
    pub storage: Option<Box<dyn storage::StorageBackend>>,
    /// Host calls that block on the outside world return as soon as it fires (see
    /// [`crate::cancel::run_cancellable`]); children are cancelled with it.
    pub cancel: CancelToken,
    /// What runs this task's children, and where it sits in the tree.
    pub delegation: Option<DelegationContext>,
    /// The task's memory limit (a child never gets more).
    pub memory_bytes: u64,
    /// Sees every kept guest log line as it is written (see [`log::LogTap`]).
    pub log_tap: Option<LogTap>,
    /// Sees model text as it is generated (see [`model::ModelTap`]).
    pub model_tap: Option<Arc<dyn model::ModelTap>>,
    /// Sees tool calls as they are made (see [`tools::ToolTap`]).
    pub tool_tap: Option<Arc<dyn tools::ToolTap>>,
    /// Decides calls that need approval (tool calls, delegations, requests; see
    /// [`approval::Approver`]); without one, such calls are rejected.
    pub approver: Option<Arc<dyn approval::Approver>>,
    /// Whether the task replays a trace (capabilities that serve records need to know before
    /// their first call).
    pub replay: bool,
    /// The task's token budget for model calls.
    pub tokens: u64,
    /// The earlier turns of the conversation this task continues (empty: none, or a replay).
    pub history: Vec<ari_model::Turn>,
}

impl TaskSetup {
    /// A setup with no storage, no delegation context, no tap and a token never cancelled.
    pub fn new(seed: [u8; 32], start_unix_nanos: u64) -> Self {
        Self {
            task: String::new(),
            seed,
            start_unix_nanos,
            storage: None,
            cancel: CancelToken::new(),
            delegation: None,
            memory_bytes: 0,
            log_tap: None,
            model_tap: None,
            tool_tap: None,
            approver: None,
            replay: false,
            tokens: 0,
            history: Vec::new(),
        }
    }
}

/// [`TaskCapabilities`] holds a `C`: it hands it out with the trace recorder.
pub(crate) trait Holds<C> {
    fn split(&mut self) -> (&mut C, &mut Recorder);
}

/// Declares the capabilities, once: each line is a capability's field in [`TaskCapabilities`]
/// and its type (implementing [`Capability`]), then, for a capability that records, the
/// variant of [`crate::trace::TraceEvent`] its events are and their type.
macro_rules! capabilities {
    ($($field:ident: $ty:ty $(=> $event:ident($event_ty:ty))?),+ $(,)?) => {
        /// All capabilities of one task. Create one per task; never share between tasks.
        pub struct TaskCapabilities {
            $($field: $ty,)+
            recorder: Recorder,
            denials: Vec<String>,
        }

        impl TaskCapabilities {
            /// Every capability's state for one task.
            pub fn new(grants: &Grants, mut task: TaskSetup, mode: Mode) -> Self {
                let recorder = match mode {
                    Mode::Live => Recorder::live(),
                    Mode::Replay(trace) => Recorder::replay(trace),
                };
                Self {
                    $($field: <$ty as Capability>::for_task(grants, &mut task),)+
                    recorder,
                    denials: Vec::new(),
                }
            }

            /// The task's deadline: host calls that block (HTTP) never wait past it, and
            /// children never get more time than is left.
            pub fn set_deadline(&mut self, deadline: Instant) {
                $(Capability::set_deadline(&mut self.$field, deadline);)+
            }

            /// What every capability measured.
            pub fn usage(&self) -> CapUsage {
                let mut usage = CapUsage::default();
                $(self.$field.add_usage(&mut usage);)+
                usage
            }
        }

        $(
            impl Holds<$ty> for TaskCapabilities {
                fn split(&mut self) -> (&mut $ty, &mut Recorder) {
                    (&mut self.$field, &mut self.recorder)
                }
            }
        )+

        /// Every capability's host functions: what the linker adds, and the fuel table.
        pub(crate) const HOSTS: &[HostFunctions] = &[$(<$ty as Capability>::HOST),+];

        /// Every capability's grant, in declaration order.
        #[cfg(test)]
        pub(crate) const GRANTS: &[Option<CapabilityName>] = &[$(<$ty as Capability>::GRANT),+];

        crate::trace::trace_events! { $($($event($event_ty),)?)+ }
    };
}

capabilities! {
    log: log::LogCapability,
    storage: storage::TaskStorage => Storage(storage::StorageEvent),
    random: random::RandomCapability => Random(random::RandomEvent),
    crypto: crypto::CryptoCapability,
    http: http::HttpCapability => Http(http::HttpEvent),
    clock: clock::ClockCapability => Clock(clock::ClockEvent),
    delegation: delegation::TaskDelegation => Delegation(delegation::DelegationEvent),
    model: model::ModelCapability => Model(model::ModelEvent),
    tools: tools::ToolsCapability => Tools(tools::ToolEvent),
    conversation: conversation::ConversationCapability => Conversation(conversation::ConversationEvent),
}

impl TaskCapabilities {
    /// One call of capability `C`, with the trace recorder. A denial it returns is noted, so
    /// the executor can classify the task as `CapabilityDenied`.
    pub(crate) fn call<C, T>(
        &mut self,
        call: impl FnOnce(&mut C, &mut Recorder) -> Result<T, CapError>,
    ) -> Result<T, CapError>
    where
        Self: Holds<C>,
    {
        let (capability, recorder) = self.split();
        let result = call(capability, recorder);
        if let Some(reason) = result.as_ref().err().and_then(CapError::denial_reason) {
            self.note_denial(reason.to_owned());
        }
        result
    }

    /// One call of capability `C` with the trace recorder, for calls whose errors are not
    /// [`CapError`]s (they note their own denials).
    pub(crate) fn with<C, T>(&mut self, call: impl FnOnce(&mut C, &mut Recorder) -> T) -> T
    where
        Self: Holds<C>,
    {
        let (capability, recorder) = self.split();
        call(capability, recorder)
    }

    /// Capability `C`'s state, for what needs no recorder (and notes no denial).
    pub(crate) fn get<C>(&mut self) -> &mut C
    where
        Self: Holds<C>,
    {
        self.split().0
    }

    /// Notes a denial. Only the first [`MAX_NOTED`] are kept: a guest looping on a refused
    /// call must not grow host memory.
    pub(crate) fn note_denial(&mut self, reason: String) {
        if self.denials.len() < MAX_NOTED {
            self.denials.push(reason);
        }
    }

    /// The first denials, in order (capability missing, host not allowed, quota); at most
    /// [`MAX_NOTED`].
    pub fn denials(&self) -> &[String] {
        &self.denials
    }

    /// Whether the trace hit its ceiling (the host then traps the guest).
    pub fn trace_overflowed(&self) -> bool {
        self.recorder.overflowed()
    }

    /// Recorded events not consumed by a replay (0 when faithful, or live).
    pub fn replay_remaining(&self) -> usize {
        self.recorder.remaining()
    }

    /// The trace recorded so far (in replay: the events consumed).
    pub fn take_trace(&mut self) -> Trace {
        self.recorder.take()
    }
}

#[cfg(test)]
mod tests;
