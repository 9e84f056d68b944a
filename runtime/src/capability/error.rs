//! Errors of the capability layer.

/// What a capability-gated host call returns to the guest (as `err(string)`).
///
/// `Denied` is a policy decision (capability not granted, host not allowed,
/// quota exceeded) that the executor reports as `CapabilityDenied`; `Conflict` and
/// `DeadlineExceeded` are the two failures the runtime acts on (a re-run, an interrupt), so
/// they are variants rather than messages to match; `Failed` is everything else (I/O, bad
/// input, replay divergence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error("denied: {0}")]
    Denied(String),
    /// The committed storage changed under the task (the key named): the runtime runs the
    /// task again on the new state.
    #[error("storage conflict: `{0}` changed since this task read it")]
    Conflict(String),
    /// The task's deadline passed while the host waited on its behalf: the task ends as the
    /// epoch deadline would have ended it.
    #[error("http: task deadline exceeded")]
    DeadlineExceeded,
    #[error("{0}")]
    Failed(String),
}

impl CapError {
    pub(crate) fn not_granted(capability: &str) -> Self {
        Self::Denied(format!("capability `{capability}` not granted"))
    }
}

/// A malformed `--grant` / capability spec, rejected before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("unknown capability `{0}` (expected storage, network, randomness, signing or time)")]
    Unknown(String),
    #[error("invalid `{grant}` grant: {reason}")]
    Invalid { grant: &'static str, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_cut_hop_is_written_in_the_trace_as_replay_reads_it_back() {
        assert_eq!(
            CapError::DeadlineExceeded.to_string(),
            crate::capability::http::DEADLINE_ERROR
        );
    }
}
