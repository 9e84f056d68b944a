//! A pool pod's signing keys: those of its Agents' `signing.secretRef`s the operator handed
//! over (`ARI_SIGNING_KEYS`, each key in the `ARI_SIGNING_KEY_<n>` variable it names). A
//! hosted Agent's worker gets the key of its own `secretRef` only
//! (`WorkerConfig::for_pooled`), so it signs with no neighbour's key; an Agent whose pair this
//! pod was not handed (its Deployment predates the grant) is not hosted here.

use ari_crds::SecretKeyRef;
use ari_crds::pool::{PoolSigningKey, SIGNING_KEYS_ENV};

use super::ConfigError;

/// The keys of a pool pod, by the Secret and key they came from.
#[derive(Clone, Default)]
pub struct PoolSigningKeys {
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
#[derive(Debug, PartialEq, Eq)]
pub struct KeyFor<'a> {
    pub var: &'a str,
    pub text: Option<&'a str>,
}

impl std::fmt::Debug for PoolSigningKeys {
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

impl PoolSigningKeys {
    /// Reads `ARI_SIGNING_KEYS` and the key variables it names through `get`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let Some(list) = get(SIGNING_KEYS_ENV) else {
            return Ok(Self::default());
        };
        let declared: Vec<PoolSigningKey> =
            serde_json::from_str(&list).map_err(|e| ConfigError::Invalid {
                var: SIGNING_KEYS_ENV,
                // The list holds no key; the parser's message says where it went wrong.
                value: e.to_string(),
                want: "a JSON list of signing keys, as the operator writes it",
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

    /// Whether this pod may host `agent` as far as signing goes: it grants no signing, or
    /// this pod was handed the key its `secretRef` names.
    pub fn carries(&self, agent: &ari_crds::AgentSpec) -> bool {
        agent
            .capabilities
            .signing
            .as_ref()
            .is_none_or(|g| self.key_for(&g.secret_ref).is_some())
    }
}
