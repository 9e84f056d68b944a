//! `module.image`: resolving an OCI reference to the digest executors will pull.
//!
//! A tag is resolved to the manifest digest it names now and recorded (`status.moduleImage`);
//! executors get only that pinned reference, so a tag moved later never changes what a running
//! pool runs without the operator seeing it first. The module is pulled once per pinned digest
//! to check it is an agent component and to learn its `moduleDigest`; the answer is remembered,
//! while the tag (or pin) is asked of the registry again, with the Agent's own credentials,
//! by a reconcile that finds the last answer older than 5 s. The registry is asked in the
//! background (`lookup.rs`), so no reconcile waits on it.
//!
//! Pull secrets are checked the way signing Secrets are (see `signing.rs`): the kubelet hands
//! the Secret to the executor without asking whether the Agent's author may read it, so only a
//! Secret of type `kubernetes.io/dockerconfigjson` labelled `ari.dev/pull-secret=true` in the
//! Agent's namespace is used. Only the entry for the image's registry is taken from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ari_crds::ModuleSource;
use ari_crds::names;
use ari_oci::{Client, Credentials, ModuleCache, PulledModule, Reference};
use futures::channel::mpsc::UnboundedReceiver;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tokio::sync::Semaphore;

use super::lookup::{Asked, BUSY_PER_NAMESPACE, Key, Lookups, Woken};
use super::module::{ModuleError, check_component};
use crate::config::Settings;

/// The registry operations the operator needs: a seam so reconcile tests need no registry.
pub trait Registry: Send + Sync {
    /// The manifest digest `reference` names now.
    fn resolve<'a>(
        &'a self,
        reference: &'a Reference,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<String, ari_oci::Error>>;
    /// The component `reference` names, verified.
    fn pull<'a>(
        &'a self,
        reference: &'a Reference,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<PulledModule, ari_oci::Error>>;
}

/// The real registry: the client, and the directory pulls stream to. The operator only checks
/// modules, so each is removed from disk once read: a tenant cannot fill the operator's disk,
/// and what is in memory is bounded by the client's pull permits (held by [`PulledModule`]).
pub struct OperatorRegistry {
    client: Client,
    spool: ModuleCache,
}

impl Registry for OperatorRegistry {
    fn resolve<'a>(
        &'a self,
        reference: &'a Reference,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<String, ari_oci::Error>> {
        Box::pin(self.client.resolve(reference, credentials))
    }

    fn pull<'a>(
        &'a self,
        reference: &'a Reference,
        credentials: &'a Credentials,
    ) -> BoxFuture<'a, Result<PulledModule, ari_oci::Error>> {
        Box::pin(async move {
            let pulled = self
                .client
                .pull(reference, credentials, &self.spool)
                .await?;
            self.spool.remove(&pulled.layer_digest);
            Ok(pulled)
        })
    }
}

/// The real registry client under the admin's settings (never an Agent's), pulling through
/// `settings.module_cache_dir`.
pub fn registry_client(settings: &Settings) -> Result<OperatorRegistry, ari_oci::Error> {
    Ok(OperatorRegistry {
        client: Client::new(settings.registry.clone())?,
        spool: ModuleCache::new(&settings.module_cache_dir)?,
    })
}

/// What an image resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// `registry/repository@sha256:...`: what executors pull.
    pub pinned: String,
    /// `sha256:<hex>` of the component bytes (the Wasm layer).
    pub module_digest: String,
    /// The pull secret with credentials for the image's registry, handed to the executors.
    pub pull_secret: Option<String>,
}

/// Most pinned references whose component check is remembered.
const MAX_VERIFIED: usize = 256;

/// Resolves images: reads the Agent's pull secrets, and asks [`Lookups`] for what the
/// registry answered, which never waits on the registry.
pub struct ImageResolver {
    lookups: Lookups,
}

impl ImageResolver {
    pub fn new(registry: Arc<dyn Registry>, timeout: Duration) -> Self {
        ImageResolver {
            lookups: Lookups::new(Finder::new(registry, timeout)),
        }
    }

    /// Resolves `source.image` for an Agent of `namespace`, using the pull secrets `source`
    /// names from `secrets` (that namespace's). Until the registry has answered, `Resolving`
    /// (the Agent is woken when it has) or `LookupsOverBound`.
    pub async fn resolve(
        &self,
        source: &ModuleSource,
        secrets: &Api<Secret>,
        namespace: &str,
    ) -> Result<ResolvedImage, ModuleError> {
        let image = source.image.as_deref().ok_or(ModuleError::NoSource)?;
        let reference = Reference::parse(image)?;
        let (pull_secret, credentials) = credentials_for(source, &reference, secrets).await?;
        let what = reference.to_string();
        let key = Key {
            namespace: namespace.to_owned(),
            reference,
            credentials,
        };
        let found = match self.lookups.ask(key) {
            Asked::Answered(outcome) => outcome?,
            Asked::Pending => return Err(ModuleError::Resolving(what)),
            Asked::OverBound => return Err(ModuleError::LookupsOverBound(BUSY_PER_NAMESPACE)),
        };
        // A declared sha256 is checked against the bytes the pin names, as for ConfigMaps.
        if let Some(declared) = source.declared_sha256() {
            let actual = found.module_digest.trim_start_matches("sha256:");
            if !declared.eq_ignore_ascii_case(actual) {
                return Err(ModuleError::DigestMismatch {
                    actual: actual.to_owned(),
                    declared: declared.to_owned(),
                });
            }
        }
        Ok(ResolvedImage {
            pinned: found.pinned,
            module_digest: found.module_digest,
            pull_secret,
        })
    }

    /// The ends of lookups with a new answer, for the controller (the first call gets them).
    pub fn woken(&self) -> Option<UnboundedReceiver<Woken>> {
        self.lookups.woken()
    }

    /// Waits until no lookup is running or waiting.
    #[cfg(test)]
    pub async fn idle(&self) {
        self.lookups.idle().await;
    }
}

/// What the registry answered for a reference: the pin and the component's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `registry/repository@sha256:...`.
    pub pinned: String,
    /// `sha256:<hex>` of the component bytes.
    pub module_digest: String,
}

/// Why a lookup found no component.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    #[error("{0}")]
    Image(#[from] ari_oci::Error),
    /// The bytes are not an agent component.
    #[error("{0}")]
    Invalid(String),
    /// The lookup ended without an answer (it panicked).
    #[error("the registry lookup failed unexpectedly")]
    Failed,
}

impl LookupError {
    /// Whether `other` says the same: the same reason and message.
    pub fn same(&self, other: &LookupError) -> bool {
        ModuleError::from(self.clone()).reason() == ModuleError::from(other.clone()).reason()
            && self.to_string() == other.to_string()
    }
}

impl From<LookupError> for ModuleError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::Image(e) => ModuleError::Image(e),
            LookupError::Invalid(m) => ModuleError::Invalid(m),
            LookupError::Failed => ModuleError::Image(ari_oci::Error::Other(e.to_string())),
        }
    }
}

/// What a lookup found.
pub type Outcome = Result<Found, LookupError>;

/// What a lookup does: asks the registry for the digest a reference names, and pulls and
/// checks the component once per pinned digest, each registry call bounded in time.
pub struct Finder {
    registry: Arc<dyn Registry>,
    timeout: Duration,
    /// Pinned reference → module digest of a component already pulled and checked. Content
    /// behind a digest never changes, so the answer never goes stale.
    verified: Mutex<HashMap<String, String>>,
}

impl Finder {
    /// Asks `registry`, each call bounded by `timeout`.
    pub fn new(registry: Arc<dyn Registry>, timeout: Duration) -> Self {
        Finder {
            registry,
            timeout,
            verified: Mutex::default(),
        }
    }

    /// The pin and component digest `key` names now; a pull waits for one of `pulls` (its
    /// namespace's), outside the registry's time bound.
    pub async fn find(&self, key: &Key, pulls: &Semaphore) -> Outcome {
        let what = key.reference.to_string();
        let digest = self
            .bounded(
                &what,
                self.registry.resolve(&key.reference, &key.credentials),
            )
            .await?;
        let pinned = key.reference.pinned_to(&digest)?;
        let pinned_text = pinned.to_string();
        let known = self
            .verified
            .lock()
            .ok()
            .and_then(|v| v.get(&pinned_text).cloned());
        if let Some(module_digest) = known {
            return Ok(Found {
                pinned: pinned_text,
                module_digest,
            });
        }
        let _pull = pulls.acquire().await;
        let pulled = self
            .bounded(&what, self.registry.pull(&pinned, &key.credentials))
            .await?;
        check_component(&pulled.bytes).map_err(LookupError::Invalid)?;
        let module_digest = ari_oci::sha256_digest(&pulled.bytes);
        if let Ok(mut v) = self.verified.lock() {
            if v.len() >= MAX_VERIFIED {
                v.clear();
            }
            v.insert(pinned_text.clone(), module_digest.clone());
        }
        Ok(Found {
            pinned: pinned_text,
            module_digest,
        })
    }

    /// `call`, or `RegistryUnavailable` once [`Self::timeout`] has passed: a registry that
    /// accepts connections and never answers must not hold a lookup's place for ever. The
    /// time spent waiting for the client's pull permit counts.
    async fn bounded<T>(
        &self,
        what: &str,
        call: BoxFuture<'_, Result<T, ari_oci::Error>>,
    ) -> Result<T, LookupError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(LookupError::Image),
            // The same text as a refused connection: a status must not tell a silent
            // (filtered) port from a closed one.
            Err(_) => Err(LookupError::Image(ari_oci::Error::unreachable(what))),
        }
    }
}

/// The first pull secret with an entry for the image's registry, and its credentials; every
/// secret named is checked, so a bad one is reported even when another would do. Anonymous
/// when none has an entry (public images).
async fn credentials_for(
    source: &ModuleSource,
    reference: &Reference,
    secrets: &Api<Secret>,
) -> Result<(Option<String>, Credentials), ModuleError> {
    let mut chosen = None;
    for name in source.pull_secret_names() {
        // A name that is no object name would be put into the request path as it is
        // (`other-ns/x` reads as a subresource): refuse it before any request.
        if !names::is_object_name(name) {
            return Err(ModuleError::PullSecret(format!(
                "imagePullSecrets names {name:?}, which is not a Secret name (a DNS subdomain in the Agent's namespace)"
            )));
        }
        let secret = secrets.get_opt(name).await?;
        let config = check_pull_secret(name, secret.as_ref()).map_err(ModuleError::PullSecret)?;
        let credentials = Credentials::from_docker_config_json(&config, reference.registry())
            .map_err(|e| ModuleError::PullSecret(format!("pull secret {name}: {e}")))?;
        if chosen.is_none() && credentials != Credentials::Anonymous {
            chosen = Some((name.to_owned(), credentials));
        }
    }
    Ok(match chosen {
        Some((name, credentials)) => (Some(name), credentials),
        None => (None, Credentials::Anonymous),
    })
}

/// The `.dockerconfigjson` bytes of a Secret an Agent may use as a pull secret, or why not
/// (the message of `ModuleResolved=False`; it never quotes the Secret's contents).
pub fn check_pull_secret(name: &str, secret: Option<&Secret>) -> Result<Vec<u8>, String> {
    if name == names::ATTESTATION_SECRET {
        return Err(format!(
            "imagePullSecrets names {name}, the namespace's attestation key, which is no pull secret"
        ));
    }
    let Some(secret) = secret else {
        return Err(format!(
            "pull secret {name} not found in the Agent's namespace"
        ));
    };
    if !crate::marked::is_marked(&secret.metadata, names::LABEL_PULL_SECRET) {
        return Err(format!(
            "pull secret {name} is not marked for Agents' use (label it {}=true)",
            names::LABEL_PULL_SECRET
        ));
    }
    if secret.type_.as_deref() != Some(names::DOCKER_CONFIG_JSON_TYPE) {
        return Err(format!(
            "pull secret {name} is of type {:?}, not {}",
            secret.type_.as_deref().unwrap_or("Opaque"),
            names::DOCKER_CONFIG_JSON_TYPE
        ));
    }
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(names::DOCKER_CONFIG_JSON_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| {
            format!(
                "pull secret {name} has no {} key",
                names::DOCKER_CONFIG_JSON_KEY
            )
        })
}

/// When to try a failed module again: as long as it has been failing (so retries double in
/// spacing), at least 5 s apart and at most 5 min.
pub fn retry_after(failing_for: Duration) -> Duration {
    failing_for.clamp(RETRY_MIN, RETRY_MAX)
}

const RETRY_MIN: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use k8s_openapi::ByteString;

    fn secret(label: Option<&str>, type_: Option<&str>, config: Option<&str>) -> Secret {
        let mut s = Secret::default();
        s.metadata.labels =
            label.map(|v| BTreeMap::from([(names::LABEL_PULL_SECRET.to_owned(), v.to_owned())]));
        s.type_ = type_.map(str::to_owned);
        s.data = config.map(|c| {
            BTreeMap::from([(
                names::DOCKER_CONFIG_JSON_KEY.to_owned(),
                ByteString(c.as_bytes().to_vec()),
            )])
        });
        s
    }

    const TYPE: Option<&str> = Some("kubernetes.io/dockerconfigjson");
    const CONFIG: &str = r#"{"auths":{"r.example":{"username":"u","password":"hunter2"}}}"#;

    #[test]
    fn a_marked_dockerconfigjson_secret_is_accepted() {
        let got = check_pull_secret("reg", Some(&secret(Some("true"), TYPE, Some(CONFIG))));
        assert_eq!(got.as_deref(), Ok(CONFIG.as_bytes()));
    }

    #[test]
    fn an_unmarked_secret_is_refused_with_a_hint_and_without_its_contents() {
        let err = check_pull_secret("reg", Some(&secret(None, TYPE, Some(CONFIG))))
            .expect_err("unmarked");
        assert!(err.contains("ari.dev/pull-secret=true"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let wrong = check_pull_secret("reg", Some(&secret(Some("yes"), TYPE, Some(CONFIG))));
        assert!(wrong.is_err());
    }

    #[test]
    fn a_secret_of_another_type_or_without_the_key_is_refused() {
        let opaque = check_pull_secret("reg", Some(&secret(Some("true"), None, Some(CONFIG))))
            .expect_err("opaque");
        assert!(
            opaque.contains("not kubernetes.io/dockerconfigjson"),
            "{opaque}"
        );
        let empty =
            check_pull_secret("reg", Some(&secret(Some("true"), TYPE, None))).expect_err("empty");
        assert!(empty.contains(".dockerconfigjson"), "{empty}");
    }

    #[test]
    fn a_missing_secret_and_the_attestation_key_are_refused() {
        let missing = check_pull_secret("reg", None).expect_err("missing");
        assert!(missing.contains("not found"), "{missing}");
        let att = check_pull_secret(
            names::ATTESTATION_SECRET,
            Some(&secret(Some("true"), TYPE, Some(CONFIG))),
        )
        .expect_err("attestation key");
        assert!(att.contains("attestation key"), "{att}");
    }

    #[test]
    fn retries_space_out_with_the_time_spent_failing_within_bounds() {
        assert_eq!(retry_after(Duration::ZERO), Duration::from_secs(5));
        assert_eq!(
            retry_after(Duration::from_secs(40)),
            Duration::from_secs(40)
        );
        assert_eq!(
            retry_after(Duration::from_secs(4000)),
            Duration::from_secs(300)
        );
    }
}
