//! Errors of the capability layer.

/// What a capability-gated host call returns to the guest (as `err(string)`).
///
/// `Denied` is a policy decision (capability not granted, host not allowed,
/// quota exceeded) that the executor reports as `CapabilityDenied`; `Failed`
/// is everything else (I/O, bad input, replay divergence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error("denied: {0}")]
    Denied(String),
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
