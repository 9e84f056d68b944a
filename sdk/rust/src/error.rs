//! The one error type of the SDK.

/// Why an SDK call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The host refused or failed the call (capability not granted, quota reached,
    /// host not allowed, ...). The message is the host's.
    #[error("host error: {0}")]
    Host(String),
    /// Data handed to or returned by a call did not have the expected shape.
    #[error("invalid data: {0}")]
    Invalid(String),
}

/// Lets `?` turn an SDK error into the `String` error of [`crate::Agent::execute`].
impl From<Error> for String {
    fn from(err: Error) -> Self {
        err.to_string()
    }
}
