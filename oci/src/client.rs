//! Pulling and pushing Wasm components, with every check a caller should not have to remember:
//! the layout, the size limit before download, the layer digest, and the pinned digest; and
//! with the bounds a shared component needs against a hostile registry: every hop under the
//! admin's [`NetworkPolicy`], manifests and token replies capped while they stream, layers
//! streamed to the [`ModuleCache`] (never held whole while downloading), a bounded number of
//! pulls at once, and failures remembered with backoff.
//!
//! Pulls go through `transport` (reqwest, each hop checked); pushes, which only `ari push`
//! makes from a user's machine to the registry they name, go through `oci-client`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest, OciManifest};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::digest::sha256_digest;
use crate::failures::{self, Failures};
use crate::layout::{artifact_for, wasm_layer_of};
use crate::policy::NetworkPolicy;
use crate::transport::{Session, Transport, read_capped};
use crate::{Credentials, Error, ModuleCache, Reference};

/// The default for [`ClientOptions::max_module_bytes`]: far above any agent component, far
/// below what would hurt a node.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;

/// The largest manifest read: real ones are a few KiB.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// The default for [`ClientOptions::max_concurrent_pulls`].
pub const DEFAULT_MAX_CONCURRENT_PULLS: usize = 2;
/// Most manifest reads (resolves) at once: each may hold [`MAX_MANIFEST_BYTES`].
const MAX_CONCURRENT_RESOLVES: usize = 8;
/// The media types a manifest is asked for in (an index is asked for only to refuse it clearly).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";
/// A registry that does not answer within this is down, not slow (pushes).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A stalled transfer fails instead of holding a push forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds the per-credentials client map (see [`Client`]); past it the map starts over.
const MAX_CACHED_CLIENTS: usize = 64;

/// How a [`Client`] reaches registries and what it accepts from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Registries (`host[:port]`, as in references) spoken to over plain HTTP: local and
    /// in-cluster registries without TLS. Every other registry is HTTPS only.
    pub insecure_registries: Vec<String>,
    /// The largest module pulled (or pushed), in bytes. Checked against the manifest before the
    /// layer is downloaded, and again while it streams.
    pub max_module_bytes: u64,
    /// Hosts (`host[:port]`) a registry may redirect to or name as its token realm, https only:
    /// blob CDNs and token services of public registries. Every other hop stays on the
    /// registry's own host and port.
    pub delegate_hosts: Vec<String>,
    /// Registries (`host[:port]`) allowed at internal addresses over https. Insecure registries
    /// are allowed there too.
    pub private_registries: Vec<String>,
    /// Refuse registries at loopback, private, link-local and other internal addresses unless
    /// listed (in `insecure_registries` or `private_registries`).
    pub refuse_internal_addresses: bool,
    /// Most pulls at once: each may hold one module in memory while it is checked.
    pub max_concurrent_pulls: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            insecure_registries: Vec::new(),
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
            delegate_hosts: Vec::new(),
            private_registries: Vec::new(),
            refuse_internal_addresses: true,
            max_concurrent_pulls: DEFAULT_MAX_CONCURRENT_PULLS,
        }
    }
}

/// Environment variables of the network settings, as the operator passes them to executors.
pub const ENV_INSECURE_REGISTRIES: &str = "ARI_INSECURE_REGISTRIES";
pub const ENV_DELEGATE_HOSTS: &str = "ARI_REGISTRY_DELEGATE_HOSTS";
pub const ENV_PRIVATE_REGISTRIES: &str = "ARI_PRIVATE_REGISTRIES";
pub const ENV_ALLOW_INTERNAL: &str = "ARI_REGISTRY_ALLOW_INTERNAL_ADDRESSES";

impl ClientOptions {
    /// The admin's network settings as environment variables (unset ones left out): what an
    /// executor needs to pull under the same rules as the operator.
    pub fn network_env(&self) -> Vec<(&'static str, String)> {
        let lists = [
            (ENV_INSECURE_REGISTRIES, &self.insecure_registries),
            (ENV_DELEGATE_HOSTS, &self.delegate_hosts),
            (ENV_PRIVATE_REGISTRIES, &self.private_registries),
        ];
        let mut env: Vec<_> = lists
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(name, l)| (name, l.join(",")))
            .collect();
        if !self.refuse_internal_addresses {
            env.push((ENV_ALLOW_INTERNAL, "true".to_string()));
        }
        env
    }

    /// The network settings read back from `get` (an environment lookup); the rest default.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> ClientOptions {
        let list = |name: &str| split_list(get(name).as_deref().unwrap_or_default());
        ClientOptions {
            insecure_registries: list(ENV_INSECURE_REGISTRIES),
            delegate_hosts: list(ENV_DELEGATE_HOSTS),
            private_registries: list(ENV_PRIVATE_REGISTRIES),
            refuse_internal_addresses: get(ENV_ALLOW_INTERNAL).as_deref() != Some("true"),
            ..ClientOptions::default()
        }
    }
}

/// `a, b,,c` → `[a, b, c]`.
pub fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .collect()
}

/// A module as pulled and verified: `bytes` hash to `layer_digest`, the layer of the manifest
/// named `manifest_digest`. It holds one of the client's pull permits until dropped, so the
/// modules in memory are bounded by [`ClientOptions::max_concurrent_pulls`]: drop it before
/// pulling again, or a caller holding that many waits for ever.
pub struct PulledModule {
    /// The manifest's digest: pin the Agent to this (`repo@sha256:...`) to get these bytes again.
    pub manifest_digest: String,
    /// The Wasm layer's digest: the cache key.
    pub layer_digest: String,
    pub bytes: Vec<u8>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl PulledModule {
    /// A module pulled some other way (tests' fake registries): it holds no permit.
    pub fn new(manifest_digest: String, layer_digest: String, bytes: Vec<u8>) -> Self {
        PulledModule {
            manifest_digest,
            layer_digest,
            bytes,
            _permit: None,
        }
    }
}

impl PartialEq for PulledModule {
    fn eq(&self, other: &Self) -> bool {
        (&self.manifest_digest, &self.layer_digest, &self.bytes)
            == (&other.manifest_digest, &other.layer_digest, &other.bytes)
    }
}

impl std::fmt::Debug for PulledModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulledModule")
            .field("manifest_digest", &self.manifest_digest)
            .field("layer_digest", &self.layer_digest)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Pulls and pushes Wasm OCI artifacts. Cheap to clone and share.
///
/// `oci-client` remembers the first credentials it is given for a registry, so one of its
/// clients per (registry, credentials) is kept: two Agents with different pull secrets for the
/// same registry each get their own, and a wrong secret is never masked by a right one.
#[derive(Clone)]
pub struct Client {
    options: Arc<ClientOptions>,
    clients: Arc<Mutex<HashMap<(String, Credentials), oci_client::Client>>>,
    transport: Transport,
    pulls: Arc<Semaphore>,
    resolves: Arc<Semaphore>,
    failures: Arc<Mutex<Failures>>,
}

impl Client {
    /// A client with `options`. Fails only if the TLS setup cannot be built.
    pub fn new(options: ClientOptions) -> Result<Self, Error> {
        // rustls needs a process-wide crypto provider; ring is the one this workspace builds. If
        // another part of the process installed one first, that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = ClientOptions {
            insecure_registries: options
                .insecure_registries
                .iter()
                .map(|r| normalise_registry(r))
                .filter(|r| !r.is_empty())
                .collect(),
            ..options
        };
        let policy = NetworkPolicy::new(
            &options.insecure_registries,
            &options.delegate_hosts,
            &options.private_registries,
            options.refuse_internal_addresses,
        );
        let client = Client {
            transport: Transport::new(Arc::new(policy))?,
            pulls: Arc::new(Semaphore::new(options.max_concurrent_pulls.max(1))),
            resolves: Arc::new(Semaphore::new(MAX_CONCURRENT_RESOLVES)),
            failures: Arc::default(),
            options: Arc::new(options),
            clients: Arc::default(),
        };
        client.build_oci()?;
        Ok(client)
    }

    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// The manifest digest `reference` names now: a tag's current digest, or the pinned digest
    /// once the registry has confirmed it holds it. A failure is answered again, without asking
    /// the registry, until its backoff ends.
    pub async fn resolve(
        &self,
        reference: &Reference,
        credentials: &Credentials,
    ) -> Result<String, Error> {
        let key = ("resolve", reference.to_string(), credentials.clone());
        if let Some(remembered) = self.remembered(&key) {
            return Err(remembered);
        }
        let _permit = self.resolves.acquire().await.map_err(closed)?;
        let result = self.resolve_now(reference, credentials).await;
        self.remember(key, result.as_ref().map(|_| ()));
        result
    }

    async fn resolve_now(
        &self,
        reference: &Reference,
        credentials: &Credentials,
    ) -> Result<String, Error> {
        let mut session = self.transport.session(reference, credentials)?;
        match manifest(&mut session, reference).await {
            Err(Error::NotFound(message)) => Err(self
                .explain_missing_pin(reference, credentials, message)
                .await),
            Err(e) => Err(e),
            Ok((_, digest)) => {
                check_pin(reference, &digest)?;
                Ok(digest)
            }
        }
    }

    /// Pulls the component `reference` names into `cache` (streamed, its digest checked as it
    /// streams) and returns it, refusing anything that is not the Wasm layout, a layer over the
    /// size limit (before downloading it), and bytes that do not match their digests. A layer
    /// already in `cache` is not downloaded; a failure is answered again, without asking the
    /// registry, until its backoff ends.
    pub async fn pull(
        &self,
        reference: &Reference,
        credentials: &Credentials,
        cache: &ModuleCache,
    ) -> Result<PulledModule, Error> {
        let key = ("pull", reference.to_string(), credentials.clone());
        if let Some(remembered) = self.remembered(&key) {
            return Err(remembered);
        }
        let permit = self.pulls.clone().acquire_owned().await.map_err(closed)?;
        let result = self.pull_now(reference, credentials, cache).await;
        self.remember(key, result.as_ref().map(|_| ()));
        let mut module = result?;
        module._permit = Some(permit);
        Ok(module)
    }

    async fn pull_now(
        &self,
        reference: &Reference,
        credentials: &Credentials,
        cache: &ModuleCache,
    ) -> Result<PulledModule, Error> {
        let mut session = self.transport.session(reference, credentials)?;
        let what = reference.to_string();
        let (body, manifest_digest) = match manifest(&mut session, reference).await {
            Err(Error::NotFound(message)) => {
                return Err(self
                    .explain_missing_pin(reference, credentials, message)
                    .await);
            }
            other => other?,
        };
        check_pin(reference, &manifest_digest)?;
        let manifest: OciManifest = serde_json::from_slice(&body).map_err(|_| {
            Error::NotAWasmArtifact(format!("{what}: the manifest is not an OCI image manifest"))
        })?;
        let manifest = match manifest {
            OciManifest::Image(manifest) => manifest,
            OciManifest::ImageIndex(_) => {
                return Err(Error::NotAWasmArtifact(format!(
                    "{what}: an image index (multi-platform image), not a Wasm artifact manifest"
                )));
            }
        };
        let layer = wasm_layer_of(&manifest).map_err(|e| with_context(&what, e))?;
        let limit = self.options.max_module_bytes;
        if layer.size > limit {
            return Err(Error::TooLarge {
                size: layer.size,
                limit,
            });
        }
        let layer_digest = layer.descriptor.digest.clone();
        if read_cached(cache, &layer_digest).await?.is_none() {
            download(&mut session, cache, &layer_digest, layer.size, limit).await?;
        }
        // A cache entry removed or corrupted between the download and this read is a miss.
        let bytes = read_cached(cache, &layer_digest)
            .await?
            .ok_or_else(|| Error::Other(format!("{what}: the module cache lost {layer_digest}")))?;
        Ok(PulledModule::new(manifest_digest, layer_digest, bytes))
    }

    fn remembered(&self, key: &failures::Key) -> Option<Error> {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.current(key, Instant::now()))
    }

    fn remember(&self, key: failures::Key, outcome: Result<(), &Error>) {
        if let Ok(mut f) = self.failures.lock() {
            f.record(key, outcome, Instant::now());
        }
    }

    /// Pushes `bytes` as a component to `reference` (a tag) in the Wasm layout and returns the
    /// manifest digest. The same bytes always give the same digest.
    pub async fn push(
        &self,
        reference: &Reference,
        bytes: Vec<u8>,
        credentials: &Credentials,
    ) -> Result<String, Error> {
        let what = reference.to_string();
        if reference.is_pinned() {
            return Err(Error::InvalidReference(format!(
                "{what}: push to a tag; the digest is what a push returns"
            )));
        }
        if bytes.is_empty() {
            return Err(Error::Other(format!(
                "{what}: refusing to push an empty module"
            )));
        }
        let size = bytes.len() as u64;
        let limit = self.options.max_module_bytes;
        if size > limit {
            return Err(Error::TooLarge { size, limit });
        }
        let oci = self.oci_for(reference, credentials)?;
        let auth = credentials.to_registry_auth();
        oci.store_auth_if_needed(reference.resolve_registry(), &auth)
            .await;

        let (config, layer) = artifact_for(bytes)?;
        let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
        manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
        // The manifest is serialised here, not by oci-client, so the digest returned is the
        // digest of the very bytes sent.
        let body = serde_json::to_vec(&manifest)
            .map_err(|e| Error::Other(format!("{what}: encoding the manifest: {e}")))?;
        let manifest_digest = sha256_digest(&body);

        let registry_error = |e| Error::from_registry(&what, e);
        let layer_digest = layer.sha256_digest();
        oci.push_blob(reference.as_oci(), layer.data, &layer_digest)
            .await
            .map_err(registry_error)?;
        let config_digest = config.sha256_digest();
        oci.push_blob(reference.as_oci(), config.data, &config_digest)
            .await
            .map_err(registry_error)?;
        oci.push_manifest_raw(
            reference.as_oci(),
            body,
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(registry_error)?;
        Ok(manifest_digest)
    }

    /// A pinned digest the registry does not have: if the reference's tag exists, the tag has
    /// moved (or the pin is wrong), which is a digest mismatch the user can act on; otherwise it
    /// is simply not found.
    async fn explain_missing_pin(
        &self,
        reference: &Reference,
        credentials: &Credentials,
        not_found: String,
    ) -> Error {
        let (Some(pinned), Some(tagged)) = (reference.digest(), reference.tag_only()) else {
            return Error::NotFound(not_found);
        };
        let Ok(mut session) = self.transport.session(&tagged, credentials) else {
            return Error::NotFound(not_found);
        };
        match manifest(&mut session, &tagged).await {
            Ok((_, actual)) if actual != pinned => Error::DigestMismatch {
                expected: pinned.to_string(),
                actual,
            },
            _ => Error::NotFound(not_found),
        }
    }

    /// The `oci-client` for this registry and these credentials.
    fn oci_for(
        &self,
        reference: &Reference,
        credentials: &Credentials,
    ) -> Result<oci_client::Client, Error> {
        let key = (
            reference.resolve_registry().to_string(),
            credentials.clone(),
        );
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| Error::Other("OCI client map poisoned by a panic".into()))?;
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        if clients.len() >= MAX_CACHED_CLIENTS {
            clients.clear();
        }
        let client = self.build_oci()?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    fn build_oci(&self) -> Result<oci_client::Client, Error> {
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.options.insecure_registries.clone()),
            // An image index is a multi-platform container image, never a Wasm artifact: no
            // platform is picked from it, pull refuses it.
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        };
        oci_client::Client::try_from(config)
            .map_err(|e| Error::Other(format!("building the registry client: {e}")))
    }
}

/// The manifest `reference` names (its tag or digest), read with a cap, and its digest.
async fn manifest(
    session: &mut Session<'_>,
    reference: &Reference,
) -> Result<(Vec<u8>, String), Error> {
    let name = reference
        .digest()
        .or(reference.tag())
        .unwrap_or("latest")
        .to_string();
    let response = session
        .get(&format!("manifests/{name}"), MANIFEST_ACCEPT)
        .await?;
    let body = read_capped(response, MAX_MANIFEST_BYTES, session.what(), "manifest").await?;
    let digest = sha256_digest(&body);
    Ok((body, digest))
}

/// Streams the layer into `cache`, never past the declared size or the limit; the cache puts it
/// in place only if it hashes to `digest`.
async fn download(
    session: &mut Session<'_>,
    cache: &ModuleCache,
    digest: &str,
    declared: u64,
    limit: u64,
) -> Result<(), Error> {
    let what = format!("{} layer {digest}", session.what());
    let mut response = session.get(&format!("blobs/{digest}"), "*/*").await?;
    let mut incoming = cache.incoming(digest).await?;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| Error::unreachable(&what))?
    {
        let total = incoming.written() + chunk.len() as u64;
        if total > limit {
            return Err(Error::TooLarge { size: total, limit });
        }
        if total > declared {
            return Err(Error::Other(format!(
                "{what}: the registry sent more than the {declared} bytes the manifest declares"
            )));
        }
        incoming.write(&chunk).await?;
    }
    incoming.finish().await
}

/// The cached bytes of `digest`, read (and verified) on a blocking thread.
async fn read_cached(cache: &ModuleCache, digest: &str) -> Result<Option<Vec<u8>>, Error> {
    let (cache, digest) = (cache.clone(), digest.to_string());
    tokio::task::spawn_blocking(move || cache.get(&digest))
        .await
        .map_err(|e| Error::Other(format!("module cache thread failed: {e}")))
}

fn closed(_: tokio::sync::AcquireError) -> Error {
    Error::Other("the registry client is shutting down".into())
}

/// A pinned reference must get exactly the pinned manifest.
fn check_pin(reference: &Reference, manifest_digest: &str) -> Result<(), Error> {
    match reference.digest() {
        Some(pinned) if pinned != manifest_digest => Err(Error::DigestMismatch {
            expected: pinned.to_string(),
            actual: manifest_digest.to_string(),
        }),
        _ => Ok(()),
    }
}

fn with_context(what: &str, err: Error) -> Error {
    match err {
        Error::NotAWasmArtifact(m) => Error::NotAWasmArtifact(format!("{what}: {m}")),
        other => other,
    }
}

/// `http://Host:5000/` → `host:5000`, the form references use.
fn normalise_registry(registry: &str) -> String {
    let r = registry.trim();
    let r = r
        .strip_prefix("http://")
        .or_else(|| r.strip_prefix("https://"))
        .unwrap_or(r);
    r.trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insecure_registries_are_written_as_references_write_them() {
        assert_eq!(
            normalise_registry(" http://Localhost:5000/ "),
            "localhost:5000"
        );
        assert_eq!(normalise_registry("127.0.0.1:5000"), "127.0.0.1:5000");
    }

    #[test]
    fn network_settings_travel_through_the_environment_unchanged() {
        let options = ClientOptions {
            insecure_registries: vec!["127.0.0.1:5000".into(), "r.local".into()],
            delegate_hosts: vec!["auth.docker.io".into()],
            private_registries: vec![],
            refuse_internal_addresses: false,
            ..ClientOptions::default()
        };
        let env = options.network_env();
        assert_eq!(
            env,
            [
                (
                    ENV_INSECURE_REGISTRIES,
                    "127.0.0.1:5000,r.local".to_string()
                ),
                (ENV_DELEGATE_HOSTS, "auth.docker.io".to_string()),
                (ENV_ALLOW_INTERNAL, "true".to_string()),
            ]
        );
        let lookup = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(ClientOptions::from_env(lookup), options);
        // Nothing set: internal addresses refused.
        assert!(ClientOptions::from_env(|_| None).refuse_internal_addresses);
    }

    #[test]
    fn a_pinned_reference_accepts_only_its_digest() {
        let d = sha256_digest(b"m");
        let r = Reference::parse(&format!("127.0.0.1:5000/a@{d}")).expect("parses");
        assert!(check_pin(&r, &d).is_ok());
        let other = sha256_digest(b"n");
        assert_eq!(
            check_pin(&r, &other).map_err(|e| e.reason()),
            Err("DigestMismatch")
        );
        let tagged = Reference::parse("127.0.0.1:5000/a:v1").expect("parses");
        assert!(check_pin(&tagged, &other).is_ok());
    }
}
