//! Capability names: one vocabulary, the Agent CRD's `spec.capabilities` field names, used
//! wherever a user or guest sees a capability (grants, requirements, denials, `limitsApplied`,
//! attestations, the guest's `task-spec.requirements`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares the capabilities, once: the enum, [`CapabilityName::ALL`] and the names. A new
/// capability is one line here (and its grant in [`crate::grant::GrantSet`]); every list of
/// names derives from this one.
macro_rules! capabilities {
    ($($variant:ident = $name:literal),+ $(,)?) => {
        /// A capability, named as its field in `spec.capabilities`.
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(rename_all = "camelCase")]
        pub enum CapabilityName {
            $($variant),+
        }

        impl CapabilityName {
            /// Every capability, in declaration order (the order of `spec.capabilities`).
            pub const ALL: [CapabilityName; [$($name),+].len()] = [$(CapabilityName::$variant),+];

            /// The camelCase name used in YAML, in status and by guests.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(CapabilityName::$variant => $name),+
                }
            }
        }
    };
}

capabilities! {
    Storage = "storage",
    Network = "network",
    Randomness = "randomness",
    Signing = "signing",
    TimeAccess = "timeAccess",
    Delegation = "delegation",
    Models = "models",
    Tools = "tools",
}

impl fmt::Display for CapabilityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`CapabilityName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability {0:?} (known: {known})", known = known_names())]
pub struct UnknownCapability(pub String);

/// The names of [`CapabilityName::ALL`], comma-separated, for error messages.
fn known_names() -> String {
    CapabilityName::ALL.map(CapabilityName::as_str).join(", ")
}

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
    fn an_unknown_name_is_told_every_known_one() {
        let err = "teleport".parse::<CapabilityName>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown capability \"teleport\" (known: storage, network, randomness, signing, \
             timeAccess, delegation, models, tools)"
        );
    }

    #[test]
    fn only_the_crd_spelling_parses() {
        assert!("time".parse::<CapabilityName>().is_err());
        assert!("TimeAccess".parse::<CapabilityName>().is_err());
        assert_eq!("timeAccess".parse(), Ok(CapabilityName::TimeAccess));
    }
}
