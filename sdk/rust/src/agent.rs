//! The [`Agent`] trait and the plain Rust types it works with, plus the adapter that maps
//! them onto the generated `ainur:ari/agent` bindings.

use std::marker::PhantomData;

use crate::bindings::ainur::ari::types as wit_types;
use crate::bindings::exports::ainur::ari::agent as wit;
use crate::error::Error;

/// One unit of work, as the executor hands it to the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Task {
    /// The executor's id for this task (the Task resource's name in a cluster).
    pub id: String,
    /// The task's input bytes.
    pub input: Vec<u8>,
    /// Capability names the task asked for (`storage`, `network`, `randomness`, `signing`,
    /// `timeAccess`).
    pub requirements: Vec<String>,
    /// Wall-clock budget the executor enforces; zero means the agent's default.
    pub deadline_seconds: u64,
}

impl Task {
    /// The input as UTF-8 text.
    pub fn input_str(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.input)
            .map_err(|e| Error::Invalid(format!("input is not UTF-8: {e}")))
    }

    /// Whether the task listed `capability` among its requirements.
    pub fn requires(&self, capability: &str) -> bool {
        self.requirements.iter().any(|r| r == capability)
    }
}

/// What an agent believes it used or will use; the executor measures for itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub storage_bytes: u64,
    pub network_bytes: u64,
}

/// What an agent expects a task to need, in the units the executor limits (recorded in the
/// Task's status beside what was measured; never enforced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    pub fuel: u64,
    pub duration_millis: u64,
    pub memory_bytes: u64,
}

/// The result of a successful [`Agent::execute`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The output bytes written to the task's status.
    pub data: Vec<u8>,
    /// The agent's own usage claim (informational).
    pub usage: Usage,
    /// An optional agent-supplied claim; the executor signs its own attestation separately.
    pub attestation: Option<Vec<u8>>,
}

impl Output {
    /// An output carrying `data` and nothing else.
    pub fn new(data: impl Into<Vec<u8>>) -> Self {
        Self {
            data: data.into(),
            ..Self::default()
        }
    }

    /// Attaches a usage claim.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Attaches an agent-supplied attestation claim.
    pub fn with_attestation(mut self, attestation: impl Into<Vec<u8>>) -> Self {
        self.attestation = Some(attestation.into());
        self
    }
}

impl From<Vec<u8>> for Output {
    fn from(data: Vec<u8>) -> Self {
        Self::new(data)
    }
}

impl From<&[u8]> for Output {
    fn from(data: &[u8]) -> Self {
        Self::new(data)
    }
}

impl From<String> for Output {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

impl From<&str> for Output {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

/// An ari agent. Implement [`Agent::execute`]; the other methods have sensible defaults.
///
/// The methods take no `self`: the executor creates a fresh instance per task, so per-task
/// state lives in locals and persistent state goes through [`crate::host::storage`].
pub trait Agent {
    /// Called once per instance with the agent's configuration bytes, before any task.
    fn initialize(_config: Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Whether this agent is willing to run `task`. Defaults to yes.
    fn can_execute(_task: &Task) -> bool {
        true
    }

    /// The agent's estimate of what `task` will need. Defaults to no estimate.
    fn estimate(_task: &Task) -> Result<Estimate, Error> {
        Err(Error::Unsupported("this agent gives no estimate".into()))
    }

    /// Runs the task. An `Err` fails the task (`AgentError`, or `CapabilityDenied` for
    /// [`Error::Denied`]) with the message; a plain `String` converts into [`Error::Failed`].
    fn execute(task: Task) -> Result<Output, Error>;
}

/// Bridges an [`Agent`] to the generated `Guest` trait; named by [`crate::export_agent!`].
#[doc(hidden)]
pub struct Adapter<A>(PhantomData<A>);

/// The configuration `initialize` was given (see [`config`]).
static CONFIG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// The Agent's configuration (`spec.config` in a cluster, `ari run --config` locally), as
/// handed to `initialize`; empty before it or when none was set. One module can so serve
/// several Agents configured differently.
pub fn config() -> &'static [u8] {
    CONFIG.get().map_or(&[], Vec::as_slice)
}

impl<A: Agent> wit::Guest for Adapter<A> {
    fn initialize(config: Vec<u8>) -> Result<(), wit_types::ErrorCode> {
        let _ = CONFIG.set(config.clone());
        A::initialize(config).map_err(Into::into)
    }

    fn can_execute(task: wit::TaskSpec) -> bool {
        A::can_execute(&task.into())
    }

    fn estimate(task: wit::TaskSpec) -> Result<wit_types::Estimation, wit_types::ErrorCode> {
        A::estimate(&task.into())
            .map(|e| wit_types::Estimation {
                fuel: e.fuel,
                duration_millis: e.duration_millis,
                memory_bytes: e.memory_bytes,
            })
            .map_err(Into::into)
    }

    fn execute(task: wit::TaskSpec) -> Result<wit::ExecutionResult, wit_types::ErrorCode> {
        A::execute(task.into()).map(Into::into).map_err(Into::into)
    }
}

impl From<wit::TaskSpec> for Task {
    fn from(t: wit::TaskSpec) -> Self {
        Self {
            id: t.id,
            input: t.input,
            requirements: t.requirements,
            deadline_seconds: t.deadline_seconds,
        }
    }
}

impl From<Usage> for wit::ResourceUsage {
    fn from(u: Usage) -> Self {
        Self {
            cpu_millis: u.cpu_millis,
            memory_bytes: u.memory_bytes,
            storage_bytes: u.storage_bytes,
            network_bytes: u.network_bytes,
        }
    }
}

impl From<Output> for wit::ExecutionResult {
    fn from(o: Output) -> Self {
        Self {
            output: o.data,
            resources_used: o.usage.into(),
            attestation: o.attestation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;

    impl Agent for Upper {
        fn execute(task: Task) -> Result<Output, Error> {
            Ok(Output::from(task.input_str()?.to_uppercase()))
        }
    }

    fn spec(input: &[u8]) -> wit::TaskSpec {
        wit::TaskSpec {
            id: "t1".into(),
            input: input.to_vec(),
            requirements: vec!["storage".into()],
            deadline_seconds: 7,
        }
    }

    #[test]
    fn adapter_maps_task_and_output() {
        use wit::Guest;
        let result = Adapter::<Upper>::execute(spec(b"hi")).map(|r| r.output);
        assert_eq!(result, Ok(b"HI".to_vec()));
        assert!(Adapter::<Upper>::can_execute(spec(b"")));
        assert!(matches!(
            Adapter::<Upper>::estimate(spec(b"")),
            Err(wit_types::ErrorCode::Unsupported(_))
        ));
        assert_eq!(Adapter::<Upper>::initialize(vec![]), Ok(()));
    }

    #[test]
    fn invalid_utf8_input_is_an_invalid_input_error() {
        use wit::Guest;
        let err = Adapter::<Upper>::execute(spec(&[0xff, 0xfe])).map(|r| r.output);
        assert!(
            matches!(err, Err(wit_types::ErrorCode::InvalidInput(ref m)) if m.contains("not UTF-8")),
            "{err:?}"
        );
    }

    #[test]
    fn task_conversion_keeps_every_field() {
        let task = Task::from(spec(b"x"));
        assert_eq!(task.id, "t1");
        assert_eq!(task.deadline_seconds, 7);
        assert!(task.requires("storage"));
        assert!(!task.requires("network"));
    }

    #[test]
    fn output_builders_fill_the_result() {
        let usage = Usage {
            cpu_millis: 1,
            memory_bytes: 2,
            storage_bytes: 3,
            network_bytes: 4,
        };
        let r: wit::ExecutionResult = Output::from("o")
            .with_usage(usage)
            .with_attestation(b"a".to_vec())
            .into();
        assert_eq!(r.output, b"o");
        assert_eq!(r.resources_used.network_bytes, 4);
        assert_eq!(r.attestation.as_deref(), Some(&b"a"[..]));
    }
}
