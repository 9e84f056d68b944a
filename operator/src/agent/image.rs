//! `module.image`: resolving an OCI reference to the digest executors will pull.
//!
//! A tag is resolved to the manifest digest it names now and recorded (`status.moduleImage`);
//! executors get only that pinned reference, so a tag moved later never changes what a running
//! pool runs without the operator seeing it first. The module is pulled once per pinned digest
//! to check it is an agent component and to learn its `moduleDigest`; the answer is remembered,
//! while the tag (or pin) is asked of the registry, with the Agent's own credentials, on every
//! reconcile.
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
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::module::{ModuleError, check_component, digest_of};
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

/// Resolves images with one registry client and a bounded time per registry call.
pub struct ImageResolver {
    registry: Arc<dyn Registry>,
    timeout: Duration,
    /// Pinned reference → module digest of a component already pulled and checked. Content
    /// behind a digest never changes, so the answer never goes stale.
    verified: Mutex<HashMap<String, String>>,
}

impl ImageResolver {
    pub fn new(registry: Arc<dyn Registry>, timeout: Duration) -> Self {
        ImageResolver {
            registry,
            timeout,
            verified: Mutex::default(),
        }
    }

    /// Resolves `source.image`, using the pull secrets `source` names from `secrets` (the
    /// Agent's namespace).
    pub async fn resolve(
        &self,
        source: &ModuleSource,
        secrets: &Api<Secret>,
    ) -> Result<ResolvedImage, ModuleError> {
        let image = source.image.as_deref().ok_or(ModuleError::NoSource)?;
        let reference = Reference::parse(image)?;
        let (pull_secret, credentials) = credentials_for(source, &reference, secrets).await?;
        let what = reference.to_string();
        let digest = self
            .bounded(&what, self.registry.resolve(&reference, &credentials))
            .await?;
        let pinned = reference.pinned_to(&digest)?;
        let pinned_text = pinned.to_string();
        let known = self
            .verified
            .lock()
            .ok()
            .and_then(|v| v.get(&pinned_text).cloned());
        let module_digest = match known {
            Some(d) => d,
            None => {
                let pulled = self
                    .bounded(&what, self.registry.pull(&pinned, &credentials))
                    .await?;
                let module_digest = digest_of(&pulled.bytes, None)?;
                check_component(&pulled.bytes).map_err(ModuleError::Invalid)?;
                if let Ok(mut v) = self.verified.lock() {
                    if v.len() >= MAX_VERIFIED {
                        v.clear();
                    }
                    v.insert(pinned_text.clone(), module_digest.clone());
                }
                module_digest
            }
        };
        // A declared sha256 is checked against the bytes the pin names, as for ConfigMaps.
        if let Some(declared) = source.declared_sha256() {
            let actual = module_digest.trim_start_matches("sha256:");
            if !declared.eq_ignore_ascii_case(actual) {
                return Err(ModuleError::DigestMismatch {
                    actual: actual.to_owned(),
                    declared: declared.to_owned(),
                });
            }
        }
        Ok(ResolvedImage {
            pinned: pinned_text,
            module_digest,
            pull_secret,
        })
    }

    /// `call`, or `RegistryUnavailable` once [`Self::timeout`] has passed: a registry that
    /// accepts connections and never answers must not hold a reconcile. The time spent
    /// waiting for a pull permit counts.
    async fn bounded<T>(
        &self,
        what: &str,
        call: BoxFuture<'_, Result<T, ari_oci::Error>>,
    ) -> Result<T, ModuleError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(ModuleError::from),
            // The same text as a refused connection: a status must not tell a silent
            // (filtered) port from a closed one.
            Err(_) => Err(ModuleError::Image(ari_oci::Error::unreachable(what))),
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
