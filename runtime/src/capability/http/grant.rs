//! The `network` grant: the hosts an agent may reach.

use super::allowlist::AllowList;
use crate::capability::GrantError;

/// Allowed `scheme://host[:port]` entries; only constructible validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkGrant {
    pub allowed_hosts: Vec<String>,
    list: AllowList,
}

impl NetworkGrant {
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
