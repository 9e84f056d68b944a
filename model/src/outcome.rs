//! How a Task ends: its phase, the reason of its `Succeeded` condition, and the failure classes
//! the runtime decides.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Lifecycle phase of a Task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TaskPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    /// Someone cancelled it (`spec.cancelled`, or its parent was cancelled): it was stopped,
    /// or never started, and kept no output.
    Cancelled,
}

impl TaskPhase {
    pub const ALL: [TaskPhase; 5] = [
        TaskPhase::Pending,
        TaskPhase::Running,
        TaskPhase::Succeeded,
        TaskPhase::Failed,
        TaskPhase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskPhase::Pending => "Pending",
            TaskPhase::Running => "Running",
            TaskPhase::Succeeded => "Succeeded",
            TaskPhase::Failed => "Failed",
            TaskPhase::Cancelled => "Cancelled",
        }
    }

    /// `Succeeded`, `Failed` or `Cancelled`: nothing will run any more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskPhase::Succeeded | TaskPhase::Failed | TaskPhase::Cancelled
        )
    }
}

impl fmt::Display for TaskPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure classes the runtime decides. Each is also a [`TaskReason`] of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FailureKind {
    /// The guest failed: a Wasm trap (unreachable, stack overflow, out-of-bounds, memory limit),
    /// a panic or `exit`.
    Trap,
    /// The fuel budget ran out (Wasm instructions plus host-call charges).
    FuelExhausted,
    /// The wall-clock deadline passed (epoch interruption).
    DeadlineExceeded,
    /// The guest used, or the task required, a capability it was not granted, or broke a quota
    /// or an allow-list — even if the guest then recovered and returned `ok`.
    CapabilityDenied,
    /// The host failed: a granted host call failed (backend/network error) and the guest gave up,
    /// storage could not commit, the input was too large, or the executor itself failed.
    HostError,
    /// The bytes are not a loadable `ainur:ari/agent@2.0.0` component.
    InvalidModule,
    /// The output exceeded `maxOutputBytes`.
    OutputTooLarge,
    /// The agent returned an `error-code` from `initialize` or `execute` (or declined the task
    /// in `can-execute`) without a host failure behind it: it ran, and said no.
    AgentError,
    /// Someone cancelled the task (the Task's `spec.cancelled`, its deletion, or its parent's
    /// cancellation): the guest was interrupted and no output is kept.
    Cancelled,
}

impl FailureKind {
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Trap,
        FailureKind::FuelExhausted,
        FailureKind::DeadlineExceeded,
        FailureKind::CapabilityDenied,
        FailureKind::HostError,
        FailureKind::InvalidModule,
        FailureKind::OutputTooLarge,
        FailureKind::AgentError,
        FailureKind::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        TaskReason::from(self).as_str()
    }

    /// The `ari run` exit code for this class (documented in docs/runtime.md and `--help`).
    pub fn exit_code(self) -> u8 {
        match self {
            FailureKind::Trap => 10,
            FailureKind::FuelExhausted => 11,
            FailureKind::DeadlineExceeded => 12,
            FailureKind::CapabilityDenied => 13,
            FailureKind::HostError => 14,
            FailureKind::InvalidModule => 15,
            FailureKind::OutputTooLarge => 16,
            FailureKind::AgentError => 17,
            FailureKind::Cancelled => 18,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure: the class and a message for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// The fixed reasons of a Task's `Succeeded` condition (and `status.reason`): `Completed`, a
/// failure the runtime decided, or one only the operator decides before or after a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TaskReason {
    Completed,
    Trap,
    FuelExhausted,
    DeadlineExceeded,
    CapabilityDenied,
    HostError,
    InvalidModule,
    OutputTooLarge,
    ExecutorLost,
    /// The Agent's `mode` does not take Tasks from where this one came (a user or a parent).
    ModeRefused,
    AgentError,
    Cancelled,
    /// The replicas of `spec.verification` disagreed on ending, output or trace.
    VerificationMismatch,
    /// The turn ended asking for input (a `Succeeded` Task): its output is the question, and
    /// a Task that continues it (`spec.continues`) is the next turn.
    InputRequired,
    /// `spec.continues` names no turn this Task may continue: not found, another Agent's, not
    /// ended asking for input, or another caller's conversation.
    ConversationRefused,
}

impl TaskReason {
    pub const ALL: [TaskReason; 15] = [
        TaskReason::Completed,
        TaskReason::Trap,
        TaskReason::FuelExhausted,
        TaskReason::DeadlineExceeded,
        TaskReason::CapabilityDenied,
        TaskReason::HostError,
        TaskReason::InvalidModule,
        TaskReason::OutputTooLarge,
        TaskReason::ExecutorLost,
        TaskReason::ModeRefused,
        TaskReason::AgentError,
        TaskReason::Cancelled,
        TaskReason::VerificationMismatch,
        TaskReason::InputRequired,
        TaskReason::ConversationRefused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskReason::Completed => "Completed",
            TaskReason::Trap => "Trap",
            TaskReason::FuelExhausted => "FuelExhausted",
            TaskReason::DeadlineExceeded => "DeadlineExceeded",
            TaskReason::CapabilityDenied => "CapabilityDenied",
            TaskReason::HostError => "HostError",
            TaskReason::InvalidModule => "InvalidModule",
            TaskReason::OutputTooLarge => "OutputTooLarge",
            TaskReason::ExecutorLost => "ExecutorLost",
            TaskReason::ModeRefused => "ModeRefused",
            TaskReason::AgentError => "AgentError",
            TaskReason::Cancelled => "Cancelled",
            TaskReason::VerificationMismatch => "VerificationMismatch",
            TaskReason::InputRequired => "InputRequired",
            TaskReason::ConversationRefused => "ConversationRefused",
        }
    }

    /// Parses one of the reason names.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The runtime failure class of this reason, if it is one.
    pub fn failure_kind(self) -> Option<FailureKind> {
        FailureKind::ALL
            .into_iter()
            .find(|k| TaskReason::from(*k) == self)
    }
}

impl fmt::Display for TaskReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<FailureKind> for TaskReason {
    fn from(kind: FailureKind) -> Self {
        match kind {
            FailureKind::Trap => TaskReason::Trap,
            FailureKind::FuelExhausted => TaskReason::FuelExhausted,
            FailureKind::DeadlineExceeded => TaskReason::DeadlineExceeded,
            FailureKind::CapabilityDenied => TaskReason::CapabilityDenied,
            FailureKind::HostError => TaskReason::HostError,
            FailureKind::InvalidModule => TaskReason::InvalidModule,
            FailureKind::OutputTooLarge => TaskReason::OutputTooLarge,
            FailureKind::AgentError => TaskReason::AgentError,
            FailureKind::Cancelled => TaskReason::Cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_kind_is_the_reason_of_the_same_name_and_back() {
        for kind in FailureKind::ALL {
            let reason = TaskReason::from(kind);
            assert_eq!(reason.as_str(), kind.as_str());
            assert_eq!(reason.failure_kind(), Some(kind));
            let json = serde_json::to_string(&kind).expect("serialize");
            assert_eq!(json, serde_json::to_string(&reason).expect("serialize"));
        }
        assert_eq!(TaskReason::Completed.failure_kind(), None);
        assert_eq!(TaskReason::ExecutorLost.failure_kind(), None);
    }

    #[test]
    fn reasons_parse_from_their_names() {
        for reason in TaskReason::ALL {
            assert_eq!(TaskReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(TaskReason::parse("completed"), None);
    }
}
