//! Resolving an Agent's module to its digest.
//!
//! ConfigMap modules are hashed here (and the declared `sha256`, if any, checked); `url`
//! modules are not fetched by the operator: the declared `sha256` is recorded and the executor
//! fetches and verifies the bytes.

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
    #[error("module has no source")]
    NoSource,
    #[error("url modules need sha256")]
    UrlWithoutDigest,
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ModuleError {
    /// Condition reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ModuleError::ConfigMapNotFound(_) => "ConfigMapNotFound",
            ModuleError::KeyMissing { .. } => "KeyMissing",
            ModuleError::DigestMismatch { .. } => "DigestMismatch",
            ModuleError::NoSource | ModuleError::UrlWithoutDigest => "InvalidSource",
            ModuleError::Kube(_) => "ApiError",
        }
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

/// `sha256:<hex>` of the module.
pub async fn resolve(
    source: &ModuleSource,
    config_maps: &Api<ConfigMap>,
) -> Result<String, ModuleError> {
    match (&source.config_map, &source.url) {
        (Some(cm), _) => {
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
            digest_of(&bytes.0, source.declared_sha256())
        }
        (None, Some(_)) => source
            .declared_sha256()
            .map(|s| module_digest(&s.to_ascii_lowercase()))
            .ok_or(ModuleError::UrlWithoutDigest),
        (None, None) => Err(ModuleError::NoSource),
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
}
