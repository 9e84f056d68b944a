//! The `storage` grant is the model's [`StorageGrant`] (a quota on the agent's committed
//! bytes); this is how the CLI writes one.

pub use ari_model::StorageGrant;

use crate::capability::{GrantError, parse_size};

/// `--grant storage=SIZE` (e.g. `1MiB`, `512KiB`, `4096`).
pub fn grant_from_cli(value: &str) -> Result<StorageGrant, GrantError> {
    let max_bytes = parse_size(value).ok_or_else(|| GrantError::Invalid {
        grant: "storage",
        reason: format!("bad size `{value}` (e.g. 1MiB, 512KiB, 1GiB, 4096)"),
    })?;
    Ok(StorageGrant { max_bytes })
}
