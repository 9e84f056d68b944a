//! A pool pod's Secret keys: the signing keys (`ARI_SIGNING_KEYS`) and pull secrets
//! (`ARI_PULL_SECRETS`) of its Agents the operator handed over, each in the variable its list
//! names (`ARI_SIGNING_KEY_<n>`, `ARI_PULL_SECRET_<n>`). A hosted Agent's worker gets only those
//! its own spec names (`WorkerConfig::for_pooled`), so it signs with no neighbour's key and
//! pulls its image with no neighbour's credentials; an Agent naming one this pod was not
//! handed (its Deployment predates it) is not hosted here.

use ari_crds::SecretKeyRef;
use ari_crds::pool::PoolSecretKey;

use super::ConfigError;

/// Keys of one kind in a pool pod, by the Secret and key they came from.
#[derive(Clone, Default)]
pub struct PoolSecrets {
    keys: Vec<Carried>,
}

/// One key as the pod's environment holds it.
#[derive(Clone)]
struct Carried {
    secret_ref: SecretKeyRef,
    var: String,
    /// The key text; `None` when its variable is empty (the Secret lacks the key).
    text: Option<String>,
}

/// The key `secretRef` names in this pod: the variable it is in and its text.
#[derive(PartialEq, Eq)]
pub struct KeyFor<'a> {
    pub var: &'a str,
    pub text: Option<&'a str>,
}

impl std::fmt::Debug for KeyFor<'_> {
    // Hand-written, as for [`PoolSecrets`]: the variable and whether it is set, never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFor")
            .field("var", &self.var)
            .field("set", &self.text.is_some())
            .finish()
    }
}

impl std::fmt::Debug for PoolSecrets {
    // Hand-written so no key can reach a log line: the pairs and whether each is set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|k| {
                (
                    &k.secret_ref.name,
                    &k.secret_ref.key,
                    &k.var,
                    k.text.is_some(),
                )
            }))
            .finish()
    }
}

impl PoolSecrets {
    /// Reads `list_env` and the key variables it names through `get`.
    pub fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
        list_env: &'static str,
    ) -> Result<Self, ConfigError> {
        let Some(list) = get(list_env) else {
            return Ok(Self::default());
        };
        let declared: Vec<PoolSecretKey> =
            serde_json::from_str(&list).map_err(|e| ConfigError::Invalid {
                var: list_env,
                // The list holds no key; the parser's message says where it went wrong.
                value: e.to_string(),
                want: "a JSON list of Secret keys, as the operator writes it",
            })?;
        let keys = declared
            .into_iter()
            .map(|k| Carried {
                text: get(&k.key_env),
                secret_ref: k.secret_ref,
                var: k.key_env,
            })
            .collect();
        Ok(Self { keys })
    }

    /// The key `secret_ref` names, when this pod was handed it.
    pub fn key_for(&self, secret_ref: &SecretKeyRef) -> Option<KeyFor<'_>> {
        self.keys
            .iter()
            .find(|k| &k.secret_ref == secret_ref)
            .map(|k| KeyFor {
                var: &k.var,
                text: k.text.as_deref(),
            })
    }

    /// Whether this pod was handed every key of `refs`.
    pub fn carries_all<'r>(&self, mut refs: impl Iterator<Item = &'r SecretKeyRef>) -> bool {
        refs.all(|r| self.key_for(r).is_some())
    }

    /// Only the keys of `refs` this pod was handed, in the order of `refs`: one Agent's own.
    pub fn only<'r>(&self, refs: impl Iterator<Item = &'r SecretKeyRef>) -> Self {
        let keys = refs
            .filter_map(|r| self.keys.iter().find(|k| &k.secret_ref == r).cloned())
            .collect();
        Self { keys }
    }

    /// Each key in order: the Secret it came from and where it is.
    pub fn iter(&self) -> impl Iterator<Item = (&SecretKeyRef, KeyFor<'_>)> {
        self.keys.iter().map(|k| {
            (
                &k.secret_ref,
                KeyFor {
                    var: &k.var,
                    text: k.text.as_deref(),
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_text_reaches_a_debug_line() {
        let list = r#"[{"secretRef": {"name": "a-key", "key": "private-key"}, "keyEnv": "ARI_SIGNING_KEY_0"}]"#;
        let get = |var: &str| match var {
            "ARI_SIGNING_KEYS" => Some(list.to_owned()),
            "ARI_SIGNING_KEY_0" => Some("s3cret-key-text".to_owned()),
            _ => None,
        };
        let keys = PoolSecrets::from_lookup(&get, "ARI_SIGNING_KEYS")
            .unwrap_or_else(|e| panic!("keys: {e}"));
        let secret_ref: SecretKeyRef =
            serde_json::from_value(serde_json::json!({"name": "a-key", "key": "private-key"}))
                .unwrap_or_else(|e| panic!("ref: {e}"));
        let found = keys.key_for(&secret_ref);
        assert_eq!(found.as_ref().and_then(|k| k.text), Some("s3cret-key-text"));
        for line in [format!("{keys:?}"), format!("{found:?}")] {
            assert!(!line.contains("s3cret"), "{line}");
            assert!(line.contains("ARI_SIGNING_KEY_0"), "{line}");
        }
    }
}
