//! The `network` grant as the host holds it: the entries of the model's `NetworkGrant`, parsed
//! once (a grant is the model's word; this is what the host loaded from it).

use super::allowlist::AllowList;
use crate::capability::GrantError;

/// Allowed `scheme://host[:port]` entries; only constructible validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    pub allowed_hosts: Vec<String>,
    list: AllowList,
}

impl AllowedHosts {
    /// Validates every entry (see `allowlist`), so a typo fails up front.
    pub fn new(allowed_hosts: Vec<String>) -> Result<Self, GrantError> {
        let list = AllowList::parse(&allowed_hosts).map_err(|e| GrantError::Invalid {
            grant: "network",
            reason: e.to_string(),
        })?;
        Ok(Self {
            allowed_hosts,
            list,
        })
    }

    pub fn allow_list(&self) -> &AllowList {
        &self.list
    }
}
