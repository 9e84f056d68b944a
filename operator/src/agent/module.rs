//! Resolving an Agent's module to its digest.
//!
//! ConfigMap modules are hashed here (and the declared `sha256`, if any, checked); `url`
//! modules are not fetched by the operator: the declared `sha256` is recorded and the executor
//! fetches and verifies the bytes. `image` modules are resolved in `image.rs` and `lookup.rs`.
//!
//! A ConfigMap module is read, hashed and parsed once per version of its ConfigMap
//! ([`Checked`]): thousands of Agents of one module (a pool of 10,000 `echo` Agents) would
//! otherwise each pull the same megabyte-sized object on every reconcile, and hold it while
//! they do.

use std::collections::HashMap;
use std::sync::Mutex;

use ari_crds::ModuleSource;
use ari_crds::agent::module_digest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use sha2::{Digest, Sha256};

/// Why the module could not be resolved (goes to the `ModuleResolved` condition).
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("ConfigMap {0} not found")]
    ConfigMapNotFound(String),
    #[error("ConfigMap {name} has no binaryData key {key}")]
    KeyMissing { name: String, key: String },
    #[error("module digest sha256:{actual} does not match declared sha256 {declared}")]
    DigestMismatch { actual: String, declared: String },
    #[error("ConfigMap {name} has no data key {key}")]
    DataKeyMissing { name: String, key: String },
    #[error("{0}")]
    Declaration(String),
    /// The operator has no stock agent component to run a declarative Agent with.
    #[error("{0}")]
    StockAgentMissing(String),
    #[error("module has no source")]
    NoSource,
    #[error("url modules need sha256")]
    UrlWithoutDigest,
    #[error("{0}")]
    Invalid(String),
    /// `module.image` could not be resolved or pulled; the reason is ari-oci's.
    #[error("{0}")]
    Image(#[from] ari_oci::Error),
    /// A named pull secret may not be used (the message never quotes its contents).
    #[error("{0}")]
    PullSecret(String),
    /// `module.image` is being looked up; the Agent is reconciled again once the registry
    /// has answered.
    #[error("resolving {0}: waiting for the registry's answer")]
    Resolving(String),
    /// The namespace has as many `module.image` lookups running or waiting as it may.
    #[error(
        "this namespace has {0} image lookups running or waiting, the most one namespace may have; this one is asked for again later"
    )]
    LookupsOverBound(usize),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ModuleError {
    /// Condition reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ModuleError::ConfigMapNotFound(_) => "ConfigMapNotFound",
            ModuleError::KeyMissing { .. } | ModuleError::DataKeyMissing { .. } => "KeyMissing",
            ModuleError::Declaration(_) => "InvalidDeclaration",
            ModuleError::StockAgentMissing(_) => "StockAgentMissing",
            ModuleError::DigestMismatch { .. } => "DigestMismatch",
            ModuleError::Invalid(_) => "InvalidModule",
            ModuleError::NoSource | ModuleError::UrlWithoutDigest => "InvalidSource",
            ModuleError::Image(e) => e.reason(),
            ModuleError::PullSecret(_) => "PullSecretRejected",
            ModuleError::Resolving(_) => "ResolvingImage",
            ModuleError::LookupsOverBound(_) => "ImageLookupsOverBound",
            ModuleError::Kube(_) => "ApiError",
        }
    }
}

impl ModuleError {
    /// Whether the registry has not answered yet (`ModuleResolved=Unknown`): nothing is
    /// known to be wrong with the module.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            ModuleError::Resolving(_) | ModuleError::LookupsOverBound(_)
        )
    }
}

/// Digest of the bytes in a ConfigMap, checked against the declared one.
pub fn digest_of(bytes: &[u8], declared: Option<&str>) -> Result<String, ModuleError> {
    let actual = hex::encode(Sha256::digest(bytes));
    match declared {
        Some(d) if !d.eq_ignore_ascii_case(&actual) => Err(ModuleError::DigestMismatch {
            actual,
            declared: d.to_owned(),
        }),
        _ => Ok(module_digest(&actual)),
    }
}

/// ConfigMap modules found good, by where they are and the ConfigMap's `resourceVersion`
/// (which changes with any edit), and the declared digest they were checked against: their
/// digest. Bounded: past [`MAX_CHECKED`] entries it starts again empty.
#[derive(Default)]
pub struct Checked(Mutex<HashMap<CheckedKey, String>>);

/// Namespace, ConfigMap, key, `resourceVersion`, declared `sha256`.
type CheckedKey = (String, String, String, String, Option<String>);

/// Module versions remembered at once: far more than a namespace has modules, and a few
/// hundred bytes each.
const MAX_CHECKED: usize = 4096;

impl Checked {
    fn get(&self, key: &CheckedKey) -> Option<String> {
        self.0.lock().ok()?.get(key).cloned()
    }

    fn put(&self, key: CheckedKey, digest: &str) {
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= MAX_CHECKED {
                m.clear();
            }
            m.insert(key, digest.to_owned());
        }
    }
}

/// `sha256:<hex>` of the module. A ConfigMap's version already checked is answered from
/// `checked` after a metadata-only read.
pub async fn resolve(
    source: &ModuleSource,
    (config_maps, ns): (&Api<ConfigMap>, &str),
    checked: &Checked,
) -> Result<String, ModuleError> {
    match (&source.config_map, &source.url) {
        (Some(cm), _) => {
            // A name that is no object name would go into the request path as it is.
            if !ari_crds::names::is_object_name(&cm.name) {
                return Err(ModuleError::ConfigMapNotFound(cm.name.clone()));
            }
            let declared = source.declared_sha256().map(str::to_ascii_lowercase);
            let key = |version: Option<&String>| {
                (
                    ns.to_owned(),
                    cm.name.clone(),
                    cm.key.clone(),
                    version.cloned().unwrap_or_default(),
                    declared.clone(),
                )
            };
            let meta = config_maps
                .get_metadata_opt(&cm.name)
                .await?
                .ok_or_else(|| ModuleError::ConfigMapNotFound(cm.name.clone()))?;
            if let Some(digest) = checked.get(&key(meta.metadata.resource_version.as_ref())) {
                return Ok(digest);
            }
            let map = config_maps
                .get_opt(&cm.name)
                .await?
                .ok_or_else(|| ModuleError::ConfigMapNotFound(cm.name.clone()))?;
            let bytes = map
                .binary_data
                .as_ref()
                .and_then(|d| d.get(&cm.key))
                .ok_or_else(|| ModuleError::KeyMissing {
                    name: cm.name.clone(),
                    key: cm.key.clone(),
                })?;
            let digest = digest_of(&bytes.0, source.declared_sha256())?;
            check_component(&bytes.0).map_err(ModuleError::Invalid)?;
            if map.metadata.resource_version.is_some() {
                checked.put(key(map.metadata.resource_version.as_ref()), &digest);
            }
            Ok(digest)
        }
        (None, Some(_)) => source
            .declared_sha256()
            .map(|s| module_digest(&s.to_ascii_lowercase()))
            .ok_or(ModuleError::UrlWithoutDigest),
        (None, None) => Err(ModuleError::NoSource),
    }
}

/// The agent interface a component must export (any 2.x version).
const AGENT_EXPORT: &str = "ainur:ari/agent@2.";

/// Structural check of a module's bytes: a component (not a core module, not garbage) that
/// exports the agent interface. Catching these here marks the Agent `InvalidModule` instead of
/// rolling out executors that could never load it and would crash-loop.
pub fn check_component(bytes: &[u8]) -> Result<(), String> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut depth = 0usize;
    let mut exports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("not a WebAssembly component: {e}"))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding == Encoding::Module {
                    return Err(
                        "module is a core wasm module, not a component; build for wasm32-wasip2"
                            .into(),
                    );
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(|e| format!("not a WebAssembly component: {e}"))?;
                    exports.push(export.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    if exports.iter().any(|e| e.starts_with(AGENT_EXPORT)) {
        Ok(())
    } else {
        Err(format!(
            "component does not export ainur:ari/agent@2.0.0 (it exports: [{}])",
            exports.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_checks_the_declared_sha256() {
        let sha_abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            digest_of(b"abc", None).ok(),
            Some(format!("sha256:{sha_abc}"))
        );
        assert!(digest_of(b"abc", Some(sha_abc)).is_ok());
        assert!(matches!(
            digest_of(b"abd", Some(sha_abc)),
            Err(ModuleError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn component_check_refuses_garbage_core_modules_and_non_agents() {
        let garbage = check_component(b"MZ\x90\0 this is not wasm").expect_err("garbage");
        assert!(garbage.contains("not a WebAssembly component"), "{garbage}");
        let core = check_component(b"\0asm\x01\0\0\0").expect_err("core module");
        assert!(core.contains("core wasm module"), "{core}");
        let empty = check_component(b"\0asm\x0d\0\x01\0").expect_err("empty component");
        assert!(empty.contains("does not export ainur:ari/agent"), "{empty}");
        let truncated = check_component(b"\0asm\x0d\0\x01\0\x07\x10").expect_err("truncated");
        assert!(
            truncated.contains("not a WebAssembly component"),
            "{truncated}"
        );
    }

    #[test]
    fn component_check_accepts_the_example_agents() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/agents");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return; // agents not built (scripts/build-agents.sh); the e2e suite covers this
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).expect("read agent");
            check_component(&bytes).unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        }
    }
}
