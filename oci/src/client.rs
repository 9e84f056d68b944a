//! Pulling and pushing Wasm components, with every check a caller should not have to remember:
//! the layout, the size limit before download, the layer digest, and the pinned digest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest, OciManifest};

use crate::digest::{is_sha256, sha256_digest};
use crate::layout::{artifact_for, wasm_layer_of};
use crate::{Credentials, Error, Reference};

/// The default for [`ClientOptions::max_module_bytes`]: far above any agent component, far
/// below what would hurt a node.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;

/// A registry that does not answer within this is down, not slow.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A stalled transfer fails instead of holding a reconcile forever.
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
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            insecure_registries: Vec::new(),
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
        }
    }
}

/// A module as pulled and verified: `bytes` hash to `layer_digest`, the layer of the manifest
/// named `manifest_digest`.
#[derive(Clone, PartialEq, Eq)]
pub struct PulledModule {
    /// The manifest's digest: pin the Agent to this (`repo@sha256:...`) to get these bytes again.
    pub manifest_digest: String,
    /// The Wasm layer's digest: the cache key.
    pub layer_digest: String,
    pub bytes: Vec<u8>,
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
        let client = Client {
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
    /// once the registry has confirmed it holds it.
    pub async fn resolve(
        &self,
        reference: &Reference,
        credentials: &Credentials,
    ) -> Result<String, Error> {
        let oci = self.oci_for(reference, credentials)?;
        let auth = credentials.to_registry_auth();
        let what = reference.to_string();
        let result = oci
            .fetch_manifest_digest(reference.as_oci(), &auth)
            .await
            .map_err(|e| Error::from_registry(&what, e));
        let digest = match result {
            Err(Error::NotFound(message)) => {
                return Err(self
                    .explain_missing_pin(reference, credentials, message)
                    .await);
            }
            other => other?,
        };
        if !is_sha256(&digest) {
            return Err(Error::Other(format!(
                "{what}: registry gave a non-sha256 digest {digest:?}"
            )));
        }
        check_pin(reference, &digest)?;
        Ok(digest)
    }

    /// Pulls the component `reference` names, refusing anything that is not the Wasm layout, a
    /// layer over the size limit (before downloading it), and bytes that do not match their
    /// digests.
    pub async fn pull(
        &self,
        reference: &Reference,
        credentials: &Credentials,
    ) -> Result<PulledModule, Error> {
        let oci = self.oci_for(reference, credentials)?;
        let auth = credentials.to_registry_auth();
        let what = reference.to_string();
        let pulled = oci
            .pull_manifest(reference.as_oci(), &auth)
            .await
            .map_err(|e| Error::from_registry(&what, e));
        let (manifest, manifest_digest) = match pulled {
            Err(Error::NotFound(message)) => {
                return Err(self
                    .explain_missing_pin(reference, credentials, message)
                    .await);
            }
            other => other?,
        };
        check_pin(reference, &manifest_digest)?;
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
        let bytes = download(&oci, reference, layer.descriptor, layer.size, limit).await?;
        let layer_digest = layer.descriptor.digest.clone();
        let actual = sha256_digest(&bytes);
        if actual != layer_digest {
            return Err(Error::DigestMismatch {
                expected: layer_digest,
                actual,
            });
        }
        Ok(PulledModule {
            manifest_digest,
            layer_digest,
            bytes,
        })
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
        let Ok(oci) = self.oci_for(&tagged, credentials) else {
            return Error::NotFound(not_found);
        };
        match oci
            .fetch_manifest_digest(tagged.as_oci(), &credentials.to_registry_auth())
            .await
        {
            Ok(actual) if actual != pinned => Error::DigestMismatch {
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

/// Streams the layer into memory, never holding more than the declared size or the limit.
async fn download(
    oci: &oci_client::Client,
    reference: &Reference,
    descriptor: &OciDescriptor,
    declared: u64,
    limit: u64,
) -> Result<Vec<u8>, Error> {
    let what = format!("{reference} layer {}", descriptor.digest);
    let mut stream = oci
        .pull_blob_stream(reference.as_oci(), descriptor)
        .await
        .map_err(|e| Error::from_registry(&what, e))?;
    // `declared` is at most `limit` here, which bounds the allocation.
    let mut bytes = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::from_stream(&what, e))?;
        let total = bytes.len() as u64 + chunk.len() as u64;
        if total > limit {
            return Err(Error::TooLarge { size: total, limit });
        }
        if total > declared {
            return Err(Error::Other(format!(
                "{what}: the registry sent more than the {declared} bytes the manifest declares"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
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
