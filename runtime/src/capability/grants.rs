//! What an agent is allowed to do: parsed once, deny by default. Each grant's type and parsing
//! belong to its capability; this module gathers them.

use std::path::Path;

use ari_model::{CapabilityName, UnknownCapability};

use super::crypto::LoadedSigningKey;
use super::delegation::DelegationGrant;
use super::http::AllowedHosts;
use super::storage::StorageGrant;
use super::{GrantError, delegation, storage};

/// The capabilities granted to one agent; `None`/`false` means denied.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub storage: Option<StorageGrant>,
    pub network: Option<AllowedHosts>,
    pub randomness: bool,
    pub signing: Option<LoadedSigningKey>,
    pub time: bool,
    pub delegation: Option<DelegationGrant>,
}

/// Parses `1MiB`, `512KiB`, `1GiB`, `64Ki`, or plain bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Reads a capability name as a user may type it on the command line: the CRD spelling, or
/// `time`, the CLI's shorter spelling of earlier releases, for `timeAccess`.
pub fn parse_cli_name(name: &str) -> Result<CapabilityName, UnknownCapability> {
    match name.trim() {
        "time" => Ok(CapabilityName::TimeAccess),
        other => other.parse(),
    }
}

impl Grants {
    /// Parses `--grant` values: `storage=1MiB`, `network=https://host[:port]`
    /// (repeatable), `randomness`, `signing=KEYFILE`, `timeAccess` (or its alias `time`).
    pub fn parse_cli(args: &[String]) -> Result<Self, GrantError> {
        let mut grants = Grants::default();
        let mut hosts = Vec::new();
        for arg in args {
            let (name, value) = match arg.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (arg.trim(), None),
            };
            let need = |grant: &'static str| {
                value.filter(|v| !v.is_empty()).ok_or(GrantError::Invalid {
                    grant,
                    reason: format!("expected {grant}=VALUE"),
                })
            };
            let flag = |grant: &'static str| match value {
                None => Ok(()),
                Some(_) => Err(GrantError::Invalid {
                    grant,
                    reason: "takes no value".into(),
                }),
            };
            match name {
                "storage" => grants.storage = Some(storage::grant_from_cli(need("storage")?)?),
                "network" => hosts.push(need("network")?.to_owned()),
                "randomness" => {
                    flag("randomness")?;
                    grants.randomness = true;
                }
                "signing" => {
                    grants.signing = Some(LoadedSigningKey::from_file(Path::new(need("signing")?))?)
                }
                "delegation" => {
                    grants.delegation = Some(delegation::grant_from_cli(need("delegation")?)?)
                }
                "timeAccess" | "time" => {
                    flag("timeAccess")?;
                    grants.time = true;
                }
                other => return Err(GrantError::Unknown(other.to_owned())),
            }
        }
        if !hosts.is_empty() {
            grants.network = Some(AllowedHosts::new(hosts)?);
        }
        Ok(grants)
    }

    /// The granted capabilities, in [`CapabilityName::ALL`] order.
    pub fn names(&self) -> Vec<CapabilityName> {
        CapabilityName::ALL
            .into_iter()
            .filter(|c| self.grants(*c))
            .collect()
    }

    /// Whether `capability` is granted.
    pub fn grants(&self, capability: CapabilityName) -> bool {
        match capability {
            CapabilityName::Storage => self.storage.is_some(),
            CapabilityName::Network => self.network.is_some(),
            CapabilityName::Randomness => self.randomness,
            CapabilityName::Signing => self.signing.is_some(),
            CapabilityName::TimeAccess => self.time,
            CapabilityName::Delegation => self.delegation.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn grants_parse_sizes() {
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64Ki"), Some(64 << 10));
        assert_eq!(parse_size("1MB"), None);
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999GiB"), None);
    }

    #[test]
    fn the_cli_reads_crd_names_and_the_time_alias() {
        assert_eq!(parse_cli_name("time"), Ok(CapabilityName::TimeAccess));
        assert_eq!(parse_cli_name(" storage "), Ok(CapabilityName::Storage));
        assert!(parse_cli_name("teleport").is_err());
    }

    #[test]
    fn grants_default_denies_everything() {
        let g = Grants::parse_cli(&[]).unwrap();
        assert!(g.names().is_empty());
        for n in CapabilityName::ALL {
            assert!(!g.grants(n));
        }
    }

    #[test]
    fn grants_parse_cli_all() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key.hex");
        std::fs::write(&key, format!("{}\n", "07".repeat(32))).unwrap();
        let g = Grants::parse_cli(&args(&[
            "storage=1MiB",
            "network=https://api.example.com",
            "network=http://*.svc:8080",
            "randomness",
            &format!("signing={}", key.display()),
            "time",
            "delegation=summarize",
        ]))
        .unwrap();
        assert_eq!(g.storage, Some(StorageGrant { max_bytes: 1 << 20 }));
        let net = g.network.as_ref().unwrap();
        assert_eq!(net.allowed_hosts.len(), 2);
        assert!(net.allow_list().check("http://x.svc:8080/").is_ok());
        assert_eq!(g.names(), CapabilityName::ALL.to_vec());
        assert!(g.grants(CapabilityName::TimeAccess));
        let signing = g.signing.unwrap();
        assert_eq!(signing.key.to_bytes(), [7u8; 32]);
        assert_eq!(signing.key_id.len(), 16);
    }

    #[test]
    fn grants_parse_pem_key() {
        use ed25519_dalek::SigningKey;
        use ed25519_dalek::pkcs8::EncodePrivateKey;
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let pem = key
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .unwrap();
        assert_eq!(
            LoadedSigningKey::parse_key(&pem).unwrap().to_bytes(),
            [9u8; 32]
        );
        assert!(LoadedSigningKey::parse_key("abcd").is_err());
        assert!(LoadedSigningKey::parse_key("-----BEGIN PRIVATE KEY-----\nxx\n").is_err());
    }

    #[test]
    fn grants_reject_bad_cli() {
        for bad in [
            &["teleport"][..],
            &["storage"],
            &["storage=lots"],
            &["network=example.com"],
            &["network="],
            &["randomness=yes"],
            &["time=now"],
            &["signing=/nonexistent/key"],
        ] {
            assert!(Grants::parse_cli(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
