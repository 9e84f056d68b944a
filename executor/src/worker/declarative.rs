//! A declarative Agent's config: its declaration with the system prompt in place, as canonical
//! bytes for the stock component's `initialize` (and the attestation's `configSha256`).

use ari_crds::Agent;
use ari_runtime::model::sha256_hex;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use super::{ModuleError, WorkerConfig, WorkerError};

/// The bytes every task of `agent` hands its guest's `initialize`: `spec.config`, or for a
/// declarative Agent the resolved declaration, refused unless it hashes to the digest the
/// operator resolved (`ARI_DECLARATION_DIGEST`) and stays within the Agent's grants.
pub async fn config(
    client: &Client,
    agent: &Agent,
    config: &WorkerConfig,
) -> Result<Vec<u8>, WorkerError> {
    let Some(d) = &agent.spec.declarative else {
        return Ok(agent.spec.config.clone().unwrap_or_default().into_bytes());
    };
    let ungranted = d.ungranted(&agent.spec.capabilities);
    if !ungranted.is_empty() {
        return Err(ModuleError::Declaration(format!(
            "the declaration names what the Agent is not granted: {}",
            ungranted.join("; ")
        ))
        .into());
    }
    let text = match &d.instructions_from {
        None => None,
        Some(r) => {
            if !ari_crds::names::is_object_name(&r.name) {
                return Err(ModuleError::Declaration(format!(
                    "declarative.instructionsFrom.name {:?} is no object name",
                    r.name
                ))
                .into());
            }
            let ns = &config.namespace;
            let map = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get(&r.name)
                .await?;
            let text = map.data.and_then(|mut m| m.remove(&r.key)).ok_or_else(|| {
                ModuleError::Declaration(format!(
                    "ConfigMap {ns}/{} has no data key {:?} (declarative.instructionsFrom)",
                    r.name, r.key
                ))
            })?;
            Some(text)
        }
    };
    let resolved = d
        .resolved(text)
        .map_err(|e| ModuleError::Declaration(e.to_string()))?;
    let bytes = resolved.canonical_bytes();
    check_pinned(config.declaration_digest.as_deref(), &bytes)?;
    Ok(bytes)
}

/// Compares the declaration's bytes with the digest the operator resolved, when it gave one.
pub fn check_pinned(pinned: Option<&str>, bytes: &[u8]) -> Result<(), ModuleError> {
    let Some(pinned) = pinned else {
        return Ok(());
    };
    let want = pinned
        .trim()
        .trim_start_matches("sha256:")
        .to_ascii_lowercase();
    let got = sha256_hex(bytes);
    if want != got {
        return Err(ModuleError::Declaration(format!(
            "the declaration resolves to sha256:{got}, not the sha256:{want} the operator resolved (ARI_DECLARATION_DIGEST); was its instructions ConfigMap edited? Waiting for the operator to roll the executors"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_is_run_only_when_it_hashes_to_the_operators_digest() {
        let bytes = br#"{"instructions":"x","model":"m"}"#;
        let digest = format!("sha256:{}", sha256_hex(bytes));
        assert!(check_pinned(Some(&digest), bytes).is_ok());
        assert!(check_pinned(None, bytes).is_ok());
        let err = check_pinned(Some(&digest), br#"{"instructions":"y","model":"m"}"#)
            .expect_err("edited prompt");
        assert!(err.to_string().contains("ARI_DECLARATION_DIGEST"), "{err}");
    }
}
