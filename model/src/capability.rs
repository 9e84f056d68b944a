//! Capability names: one vocabulary, the Agent CRD's `spec.capabilities` field names, used
//! wherever a user or guest sees a capability (grants, requirements, denials, `limitsApplied`,
//! attestations, the guest's `task-spec.requirements`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A capability, named as its field in `spec.capabilities`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum CapabilityName {
    Storage,
    Network,
    Randomness,
    Signing,
    TimeAccess,
    Delegation,
}

impl CapabilityName {
    pub const ALL: [CapabilityName; 6] = [
        CapabilityName::Storage,
        CapabilityName::Network,
        CapabilityName::Randomness,
        CapabilityName::Signing,
        CapabilityName::TimeAccess,
        CapabilityName::Delegation,
    ];

    /// The camelCase name used in YAML, in status and by guests.
    pub fn as_str(self) -> &'static str {
        match self {
            CapabilityName::Storage => "storage",
            CapabilityName::Network => "network",
            CapabilityName::Randomness => "randomness",
            CapabilityName::Signing => "signing",
            CapabilityName::TimeAccess => "timeAccess",
            CapabilityName::Delegation => "delegation",
        }
    }
}

impl fmt::Display for CapabilityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`CapabilityName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown capability {0:?} (known: storage, network, randomness, signing, timeAccess, delegation)"
)]
pub struct UnknownCapability(pub String);

impl FromStr for CapabilityName {
    type Err = UnknownCapability;

    /// Exactly the CRD spelling; aliases are the business of the CLI that accepts them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_through_text_and_json() {
        for cap in CapabilityName::ALL {
            assert_eq!(cap.as_str().parse::<CapabilityName>(), Ok(cap));
            let json = serde_json::to_string(&cap).expect("serialize");
            assert_eq!(json, format!("\"{}\"", cap.as_str()));
        }
    }

    #[test]
    fn only_the_crd_spelling_parses() {
        assert!("time".parse::<CapabilityName>().is_err());
        assert!("TimeAccess".parse::<CapabilityName>().is_err());
        assert_eq!("timeAccess".parse(), Ok(CapabilityName::TimeAccess));
    }
}
