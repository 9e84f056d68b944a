//! What an agent is allowed to do, as the runtime holds it: the model's grant set as written
//! (the Agent's `spec.capabilities`) plus what the host loaded for it. Deny by default.

use std::path::Path;

use ari_model::grant::{
    EmptyGrant, GrantSet, ModelsGrant, NetworkGrant, ToolServerGrant, ToolsGrant,
};
use ari_model::hosts::AllowList;
use ari_model::{CapabilityName, UnknownCapability};

use super::crypto::LoadedSigningKey;
use super::{GrantError, LoadedModels, LoadedTools, delegation, storage};

/// The capabilities granted to one agent: its [`GrantSet`], the network entries parsed once
/// and the signing key the host read (from the Secret the Agent's `SigningGrant` names; for the
/// CLI and `ari verify`, from a file). Only constructible checked (see [`Grants::load`]).
#[derive(Debug, Clone, Default)]
pub struct Grants {
    spec: GrantSet,
    hosts: Option<AllowList>,
    /// The network grant's hosts whose requests wait for a decision, parsed once.
    approval_hosts: Option<AllowList>,
    key: Option<LoadedSigningKey>,
    models: LoadedModels,
    tools: LoadedTools,
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
    /// An agent's grants: `spec` as written, `key` the signing key the host loaded for it.
    /// Fails on a network entry the grammar refuses, or when signing is granted but no key
    /// was loaded.
    pub fn load(spec: GrantSet, key: Option<LoadedSigningKey>) -> Result<Self, GrantError> {
        let hosts = spec
            .network
            .as_ref()
            .map(NetworkGrant::allow_list)
            .transpose()
            .map_err(|e| GrantError::Invalid {
                grant: "network",
                reason: e.to_string(),
            })?;
        let approval_hosts = spec
            .network
            .as_ref()
            .map(NetworkGrant::approval_list)
            .transpose()
            .map_err(|e| GrantError::Invalid {
                grant: "network",
                reason: format!("approval.hosts: {e}"),
            })?
            .flatten();
        if spec.signing.is_some() && key.is_none() {
            return Err(GrantError::Invalid {
                grant: "signing",
                reason: "granted, but its key could not be read".into(),
            });
        }
        Ok(Self {
            spec,
            hosts,
            approval_hosts,
            key,
            models: LoadedModels::default(),
            tools: LoadedTools::default(),
        })
    }

    /// These grants with the models the host loaded for them (endpoints and keys). A granted
    /// name with no model loaded stays granted: its calls are `unavailable`.
    pub fn with_models(mut self, models: LoadedModels) -> Self {
        self.models = models;
        self
    }

    /// The models the host loaded.
    pub fn models(&self) -> &LoadedModels {
        &self.models
    }

    /// These grants with the MCP servers the host loaded for them (URLs and credentials). A
    /// granted server with none loaded stays granted: its calls are `unavailable`.
    pub fn with_tools(mut self, tools: LoadedTools) -> Self {
        self.tools = tools;
        self
    }

    /// The MCP servers the host loaded.
    pub fn tools(&self) -> &LoadedTools {
        &self.tools
    }

    /// Parses `--grant` values: `storage=1MiB`, `network=https://host[:port]`
    /// (repeatable), `randomness`, `signing=KEYFILE`, `timeAccess` (or its alias `time`),
    /// `delegation=AGENT[,AGENT...][;maxDepth=N][;maxChildren=N]`, `models=NAME[,NAME...]`
    /// (repeatable; each name's endpoint is the host's to load, see [`Grants::with_models`]),
    /// `tools=SERVER:TOOL[,TOOL...]` (`*` for every tool; repeatable, one server each; each
    /// server is the host's to load, see [`Grants::with_tools`]).
    pub fn parse_cli(args: &[String]) -> Result<Self, GrantError> {
        let mut spec = GrantSet::default();
        let mut key = None;
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
                None => Ok(Some(EmptyGrant {})),
                Some(_) => Err(GrantError::Invalid {
                    grant,
                    reason: "takes no value".into(),
                }),
            };
            match name {
                "storage" => spec.storage = Some(storage::grant_from_cli(need("storage")?)?),
                "network" => hosts.push(need("network")?.to_owned()),
                "randomness" => spec.randomness = flag("randomness")?,
                "signing" => key = Some(LoadedSigningKey::from_file(Path::new(need("signing")?))?),
                "delegation" => {
                    spec.delegation = Some(delegation::grant_from_cli(need("delegation")?)?)
                }
                "timeAccess" | "time" => spec.time_access = flag("timeAccess")?,
                "models" => {
                    let names = need("models")?.split(',').map(str::trim);
                    let grant = spec.models.get_or_insert_with(ModelsGrant::default);
                    grant
                        .allowed
                        .extend(names.filter(|n| !n.is_empty()).map(str::to_owned));
                }
                "tools" => {
                    let grant = spec.tools.get_or_insert_with(ToolsGrant::default);
                    grant.servers.push(tools_from_cli(need("tools")?)?);
                }
                other => return Err(GrantError::Unknown(other.to_owned())),
            }
        }
        if !hosts.is_empty() {
            spec.network = Some(NetworkGrant {
                allowed_hosts: hosts,
                approval: None,
            });
        }
        Self::load(spec, key)
    }

    /// The grant set as written.
    pub fn spec(&self) -> &GrantSet {
        &self.spec
    }

    /// The network allow-list, parsed (`None`: network not granted).
    pub fn hosts(&self) -> Option<&AllowList> {
        self.hosts.as_ref()
    }

    /// The hosts whose requests wait for a person's decision, parsed (`None`: none wait).
    pub fn approval_hosts(&self) -> Option<&AllowList> {
        self.approval_hosts.as_ref()
    }

    /// The signing key the host loaded (`None`: signing not granted).
    pub fn key(&self) -> Option<&LoadedSigningKey> {
        self.key.as_ref()
    }

    /// The granted capabilities, in [`CapabilityName::ALL`] order.
    pub fn names(&self) -> Vec<CapabilityName> {
        CapabilityName::ALL
            .into_iter()
            .filter(|c| self.grants(*c))
            .collect()
    }

    /// Whether `capability` is granted. Signing is granted by its loaded key: a CLI or replay
    /// key comes from a file, with no Secret to name in the grant set.
    pub fn grants(&self, capability: CapabilityName) -> bool {
        match capability {
            CapabilityName::Signing => self.key.is_some(),
            other => self.spec.grants(other),
        }
    }
}

/// `SERVER:TOOL[,TOOL...]`, one server's entry of a tools grant.
fn tools_from_cli(value: &str) -> Result<ToolServerGrant, GrantError> {
    let invalid = |reason: &str| GrantError::Invalid {
        grant: "tools",
        reason: reason.to_owned(),
    };
    let (server, tools) = value
        .split_once(':')
        .ok_or_else(|| invalid("expected tools=SERVER:TOOL[,TOOL...] (`*` for every tool)"))?;
    let tools: Vec<String> = tools
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if server.trim().is_empty() || tools.is_empty() {
        return Err(invalid(
            "a server and at least one tool (or `*`) are needed",
        ));
    }
    Ok(ToolServerGrant {
        name: server.trim().to_owned(),
        tools,
        approval: None,
    })
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
            "models=small,large",
            "models=extra",
            "tools=docs:search,fetch",
            "tools=any:*",
        ]))
        .unwrap();
        assert_eq!(
            g.spec().storage,
            Some(ari_model::StorageGrant { max_bytes: 1 << 20 })
        );
        assert_eq!(g.spec().network.as_ref().unwrap().allowed_hosts.len(), 2);
        assert!(g.hosts().unwrap().check("http://x.svc:8080/").is_ok());
        assert_eq!(g.names(), CapabilityName::ALL.to_vec());
        assert!(g.grants(CapabilityName::TimeAccess));
        assert_eq!(g.key().unwrap().key.to_bytes(), [7u8; 32]);
        let models = g.spec().models.as_ref().expect("models granted");
        assert_eq!(models.allowed, ["small", "large", "extra"]);
        let tools = g.spec().tools.as_ref().expect("tools granted");
        assert!(tools.allows("docs", "fetch") && !tools.allows("docs", "delete"));
        assert!(tools.allows("any", "delete"));
        for bad in ["tools=docs", "tools=docs:", "tools=:x"] {
            assert!(Grants::parse_cli(&args(&[bad])).is_err(), "{bad}");
        }
    }

    #[test]
    fn loading_refuses_a_bad_entry_and_signing_without_its_key() {
        let network = GrantSet {
            network: Some(NetworkGrant {
                allowed_hosts: vec!["example.com".into()],
                approval: None,
            }),
            ..GrantSet::default()
        };
        assert!(Grants::load(network, None).is_err());
        let signing = GrantSet {
            signing: Some(ari_model::grant::SigningGrant {
                key_id: "k".into(),
                secret_ref: ari_model::grant::SecretKeyRef {
                    name: "s".into(),
                    key: "k".into(),
                },
            }),
            ..GrantSet::default()
        };
        assert!(Grants::load(signing.clone(), None).is_err());
        let key = LoadedSigningKey::from_key(ed25519_dalek::SigningKey::from_bytes(&[1; 32]));
        let g = Grants::load(signing, Some(key)).unwrap();
        assert_eq!(g.names(), [CapabilityName::Signing]);
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
