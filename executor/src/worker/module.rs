//! Fetching the Agent's component and checking it against the digest the Agent declares.

use ari_crds::{Agent, ModuleSource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use super::WorkerError;
use crate::attestation::sha256_hex;

/// Largest component the worker accepts (a ConfigMap tops out at 1 MiB; URLs may be larger).
pub const MAX_MODULE_BYTES: u64 = 256 << 20;

/// The component bytes of `agent`, verified against `spec.module.sha256` when one is declared.
pub async fn fetch(client: &Client, agent: &Agent) -> Result<Vec<u8>, WorkerError> {
    let ns = agent
        .metadata
        .namespace
        .as_deref()
        .ok_or_else(|| WorkerError::Module("Agent has no namespace".into()))?;
    let source = &agent.spec.module;
    let bytes = match (&source.config_map, &source.url) {
        (Some(cm), None) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let map = api.get(&cm.name).await?;
            map.binary_data
                .and_then(|mut d| d.remove(&cm.key))
                .map(|b| b.0)
                .ok_or_else(|| {
                    WorkerError::Module(format!(
                        "ConfigMap {}/{} has no binaryData key {:?}",
                        ns, cm.name, cm.key
                    ))
                })?
        }
        (None, Some(url)) => fetch_url(url.clone()).await?,
        _ => {
            return Err(WorkerError::Module(
                "exactly one of module.configMap and module.url must be set".into(),
            ));
        }
    };
    check_digest(source, &bytes)?;
    Ok(bytes)
}

/// Compares the bytes with the declared digest (`<hex>` or `sha256:<hex>`).
pub fn check_digest(source: &ModuleSource, bytes: &[u8]) -> Result<(), WorkerError> {
    let Some(declared) = source.sha256.as_deref() else {
        return Ok(());
    };
    let want = declared
        .strip_prefix("sha256:")
        .unwrap_or(declared)
        .to_ascii_lowercase();
    let got = sha256_hex(bytes);
    if want != got {
        return Err(WorkerError::Module(format!(
            "module digest mismatch: spec.module.sha256 is {want}, the fetched bytes hash to {got}"
        )));
    }
    Ok(())
}

async fn fetch_url(url: String) -> Result<Vec<u8>, WorkerError> {
    if !url.starts_with("https://") {
        return Err(WorkerError::Module(format!(
            "module url must be https: {url}"
        )));
    }
    tokio::task::spawn_blocking(move || {
        let mut response = ureq::get(&url)
            .call()
            .map_err(|e| WorkerError::Module(format!("GET {url}: {e}")))?;
        response
            .body_mut()
            .with_config()
            .limit(MAX_MODULE_BYTES)
            .read_to_vec()
            .map_err(|e| WorkerError::Module(format!("reading {url}: {e}")))
    })
    .await
    .map_err(|e| WorkerError::Module(format!("module download task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(sha: Option<&str>) -> ModuleSource {
        ModuleSource {
            sha256: sha.map(str::to_string),
            ..ModuleSource::default()
        }
    }

    #[test]
    fn digest_check_accepts_both_spellings_and_rejects_others() {
        let hex = sha256_hex(b"abc");
        assert!(check_digest(&source(None), b"abc").is_ok());
        assert!(check_digest(&source(Some(&hex)), b"abc").is_ok());
        assert!(check_digest(&source(Some(&format!("sha256:{hex}"))), b"abc").is_ok());
        let err = check_digest(&source(Some(&hex)), b"abd").expect_err("mismatch");
        assert!(err.to_string().contains("digest mismatch"), "{err}");
    }
}
