//! The `storage` grant: a quota on the agent's committed bytes.

use crate::capability::{GrantError, parse_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageGrant {
    /// Quota on committed key + value bytes of the agent's namespace.
    pub max_bytes: u64,
}

impl StorageGrant {
    /// `--grant storage=SIZE` (e.g. `1MiB`, `512KiB`, `4096`).
    pub fn from_cli(value: &str) -> Result<Self, GrantError> {
        let max_bytes = parse_size(value).ok_or_else(|| GrantError::Invalid {
            grant: "storage",
            reason: format!("bad size `{value}` (e.g. 1MiB, 512KiB, 1GiB, 4096)"),
        })?;
        Ok(Self { max_bytes })
    }
}
