//! Errors of the capability layer.

/// What a capability-gated host call returns; the host maps it onto the WIT error variants.
///
/// `Denied` and `QuotaExceeded` are policy decisions (capability not granted, host not
/// allowed, quota reached) that the executor reports as `CapabilityDenied`; `Invalid` is a
/// guest's malformed argument; `Conflict` and `DeadlineExceeded` are the two failures the
/// runtime acts on (a re-run, an interrupt); `Failed` is everything else (I/O, transport,
/// replay divergence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error("denied: {0}")]
    Denied(String),
    #[error("denied: {0}")]
    QuotaExceeded(String),
    /// A malformed argument (an empty key, a bad URL or header); nothing was done.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The committed storage changed under the task (the key named): the runtime runs the
    /// task again on the new state.
    #[error("storage conflict: `{0}` changed since this task read it")]
    Conflict(String),
    /// The task's deadline passed while the host waited on its behalf: the task ends as the
    /// epoch deadline would have ended it.
    #[error("http: task deadline exceeded")]
    DeadlineExceeded,
    /// A person rejected the call, which needed approval (who, which call, why). Nothing was
    /// sent; not a denial and not a host failure: the guest decides what to do.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The task was cancelled while the host waited on its behalf: the task ends `Cancelled`,
    /// and nothing of the call is recorded.
    #[error("the task was cancelled")]
    Cancelled,
    #[error("{0}")]
    Failed(String),
}

impl CapError {
    pub(crate) fn not_granted(capability: &str) -> Self {
        Self::Denied(format!("capability `{capability}` not granted"))
    }

    /// Whether this is a policy refusal (reported as `CapabilityDenied`).
    pub fn is_denial(&self) -> bool {
        matches!(self, Self::Denied(_) | Self::QuotaExceeded(_))
    }

    /// The refusal's reason, for the task's failure message.
    pub(crate) fn denial_reason(&self) -> Option<&str> {
        match self {
            Self::Denied(reason) | Self::QuotaExceeded(reason) => Some(reason),
            _ => None,
        }
    }
}

/// A malformed `--grant` / capability spec, rejected before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("unknown capability `{0}` (expected one of: {known})", known = known_names())]
    Unknown(String),
    #[error("invalid `{grant}` grant: {reason}")]
    Invalid { grant: &'static str, reason: String },
}

/// Every capability's name, from the one list (`ari_model::CapabilityName::ALL`).
fn known_names() -> String {
    ari_model::CapabilityName::ALL
        .map(ari_model::CapabilityName::as_str)
        .join(", ")
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
