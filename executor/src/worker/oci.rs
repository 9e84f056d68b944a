//! `module.image`: pulling the component the operator pinned, through a disk cache.
//!
//! The executor pulls only `ARI_MODULE_IMAGE`, the `repo@sha256:...` the operator resolved and
//! checked, never the Agent's tag, so every pod of a pool runs the same bytes. The bytes are
//! cached by their digest (`ARI_MODULE_DIGEST`) in the pod's cache volume: a restarted container
//! finds them there and pulls nothing. The cache checks the bytes against the digest on every
//! read, and `module::check_pinned` checks them again.

use std::path::Path;

use ari_oci::{Client, Credentials, ModuleCache, Reference};
use tracing::info;

use super::{ModuleError, WorkerConfig, WorkerError};

/// Subdirectory of `ARI_CACHE_DIR` holding pulled components (beside compiled artifacts).
const CACHE_SUBDIR: &str = "oci";

/// The component bytes of the pinned image in `config`.
pub async fn fetch(config: &WorkerConfig) -> Result<Vec<u8>, WorkerError> {
    let image = config
        .module_image
        .as_deref()
        .ok_or(ModuleError::ImageNotSet)?;
    let reference = Reference::parse(image).map_err(oci_error)?;
    if !reference.is_pinned() {
        return Err(ModuleError::ImageNotPinned(image.to_owned()).into());
    }
    let digest = config
        .module_digest
        .as_deref()
        .ok_or(ModuleError::DigestNotSet)?;
    // Without a cache volume (local runs), pulls stream to a directory of the temp dir.
    let cache_dir = config
        .cache_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("ari-executor"));
    let cache = open_cache(&cache_dir).await?;
    {
        let (cache, key) = (cache.clone(), digest.to_owned());
        if let Some(bytes) = blocking(move || Ok(cache.get(&key))).await? {
            info!(image, digest, "module from the local cache; not pulled");
            return Ok(bytes);
        }
    }
    let credentials = credentials(config, reference.registry())?;
    let client = Client::new(config.registry.clone()).map_err(oci_error)?;
    // Streamed into the cache, its digest checked as it streams.
    let pulled = client
        .pull(&reference, &credentials, &cache)
        .await
        .map_err(oci_error)?;
    if pulled.layer_digest != digest {
        return Err(ModuleError::PulledDigest {
            image: image.to_owned(),
            got: pulled.layer_digest,
            want: digest.to_owned(),
        }
        .into());
    }
    info!(image, digest, bytes = pulled.bytes.len(), "module pulled");
    Ok(pulled.bytes)
}

/// The credentials for `registry`: those of a dedicated pod's pull secret, or of the first of a
/// pooled Agent's own pull secrets with an entry for it (the one the operator resolved the
/// image with); anonymous when none has one. Only the entry for this registry is used:
/// credentials go nowhere else.
fn credentials(config: &WorkerConfig, registry: &str) -> Result<Credentials, ModuleError> {
    let dedicated = config
        .module_pull_secret
        .as_deref()
        .map(|json| ("ARI_MODULE_PULL_SECRET", json));
    let pooled = config
        .pull_secrets
        .iter()
        .filter_map(|(r, k)| Some((r.name.as_str(), k.text?)));
    for (from, json) in dedicated.into_iter().chain(pooled) {
        let found =
            Credentials::from_docker_config_json(json.as_bytes(), registry).map_err(|error| {
                ModuleError::PullSecret {
                    from: from.to_owned(),
                    error,
                }
            })?;
        if found != Credentials::Anonymous {
            return Ok(found);
        }
    }
    Ok(Credentials::anonymous())
}

async fn open_cache(dir: &Path) -> Result<ModuleCache, WorkerError> {
    let dir = dir.join(CACHE_SUBDIR);
    blocking(move || ModuleCache::new(dir).map_err(oci_error)).await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorkerError> + Send + 'static,
) -> Result<T, WorkerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ModuleError::CacheThread)?
}

/// The error with its condition reason first, so the log line says what kind of failure it is.
fn oci_error(e: ari_oci::Error) -> WorkerError {
    ModuleError::Registry(e).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    fn config(image: Option<&str>, digest: Option<&str>, cache: Option<&Path>) -> WorkerConfig {
        let cache = cache.map(|p| p.display().to_string());
        WorkerConfig::from_lookup(|k| match k {
            "ARI_AGENT_NAME" => Some("echo".into()),
            "POD_NAMESPACE" => Some("ns".into()),
            "POD_NAME" => Some("p".into()),
            "ARI_ATTESTATION_KEY" => Some(KEY.into()),
            "ARI_MODULE_IMAGE" => image.map(str::to_owned),
            "ARI_MODULE_DIGEST" => digest.map(str::to_owned),
            "ARI_CACHE_DIR" => cache.clone(),
            _ => None,
        })
        .expect("valid config")
    }

    #[test]
    fn a_pooled_worker_pulls_with_the_first_of_its_own_secrets_for_the_registry_and_no_other() {
        let auths = |registry: &str, user: &str| {
            serde_json::json!({"auths": {registry: {"username": user, "password": "p"}}})
                .to_string()
        };
        let (a, b) = (auths("a.example", "a"), auths("b.example", "b"));
        let list = serde_json::json!([
            {"secretRef": {"name": "a-reg", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_0"},
            {"secretRef": {"name": "b-reg", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_1"},
            {"secretRef": {"name": "junk", "key": ".dockerconfigjson"}, "keyEnv": "ARI_PULL_SECRET_2"}
        ])
        .to_string();
        let pod = WorkerConfig::from_lookup(|k| match k {
            "ARI_POOL_NAME" => Some("shared".into()),
            "POD_NAMESPACE" => Some("ns".into()),
            "POD_NAME" => Some("p".into()),
            "ARI_ATTESTATION_KEY" => Some(KEY.into()),
            "ARI_PULL_SECRETS" => Some(list.clone()),
            "ARI_PULL_SECRET_0" => Some(a.clone()),
            "ARI_PULL_SECRET_1" => Some(b.clone()),
            "ARI_PULL_SECRET_2" => Some("not json".into()),
            _ => None,
        })
        .expect("valid config");
        let worker = |secrets: &[&str]| {
            let names: Vec<serde_json::Value> = secrets
                .iter()
                .map(|s| serde_json::json!({"name": s}))
                .collect();
            let agent: ari_crds::Agent = serde_json::from_value(serde_json::json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": "x", "namespace": "ns"},
                "spec": {"module": {"image": "a.example/echo:v1", "imagePullSecrets": names},
                         "executor": {"pool": "shared"}}
            }))
            .expect("agent");
            let resolved = super::super::config::Resolved {
                digest: "sha256:00".into(),
                image: Some("a.example/echo@sha256:00".into()),
                declaration: None,
            };
            pod.for_pooled(&agent, &resolved)
        };
        let user = |c: Result<Credentials, ModuleError>| match c {
            Ok(Credentials::Basic { username, .. }) => Some(username),
            Ok(_) => None,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            user(credentials(&worker(&["a-reg"]), "a.example")),
            Some("a".into())
        );
        assert_eq!(
            user(credentials(&worker(&["b-reg", "a-reg"]), "b.example")),
            Some("b".into())
        );
        // Its own secret has no entry for the registry: anonymous, never the neighbour's.
        assert_eq!(user(credentials(&worker(&["b-reg"]), "a.example")), None);
        assert_eq!(user(credentials(&worker(&[]), "a.example")), None);
        let err = credentials(&worker(&["junk"]), "a.example").expect_err("no docker config");
        assert!(err.to_string().starts_with("junk: "), "{err}");
    }

    #[tokio::test]
    async fn a_tag_is_never_pulled_by_an_executor() {
        let err = fetch(&config(Some("127.0.0.1:1/echo:v1"), Some("sha256:x"), None))
            .await
            .expect_err("tag");
        assert!(err.to_string().contains("not pinned"), "{err}");
        let err = fetch(&config(None, None, None))
            .await
            .expect_err("no image");
        assert!(err.to_string().contains("ARI_MODULE_IMAGE"), "{err}");
    }

    #[tokio::test]
    async fn a_cached_module_is_used_without_contacting_the_registry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = b"\0asm component bytes".to_vec();
        let digest = ari_oci::sha256_digest(&bytes);
        ModuleCache::new(dir.path().join(CACHE_SUBDIR))
            .expect("cache")
            .put(&digest, &bytes)
            .expect("put");
        // Port 1 on loopback: nothing listens, so any pull would fail.
        let image = format!("127.0.0.1:1/echo@sha256:{}", "e".repeat(64));
        let got = fetch(&config(Some(&image), Some(&digest), Some(dir.path())))
            .await
            .expect("from the cache");
        assert_eq!(got, bytes);
    }

    #[tokio::test]
    async fn an_unreachable_registry_is_a_module_error_naming_its_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = format!("127.0.0.1:1/echo@sha256:{}", "e".repeat(64));
        let digest = format!("sha256:{}", "f".repeat(64));
        let mut c = config(Some(&image), Some(&digest), Some(dir.path()));
        c.registry.insecure_registries = vec!["127.0.0.1:1".into()];
        let err = fetch(&c).await.expect_err("nothing listens on port 1");
        assert!(err.to_string().contains("RegistryUnavailable"), "{err}");
    }
}
