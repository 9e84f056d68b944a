//! Declarative Agents (`spec.declarative`): checked against their grants, resolved to the
//! declaration's digest (the system prompt read from its ConfigMap when it lives there) and run
//! by the stock agent component, whose digest the operator pins like any module's.

use ari_crds::Agent;
use ari_crds::agent::module_digest;
use ari_model::Declaration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::module::ModuleError;

/// What the schema's CEL rules cannot say: the declaration's own checks (approvals of
/// declared tools only, a response schema that is JSON) and every tool it names granted.
pub fn validate(agent: &Agent) -> Result<(), String> {
    let Some(d) = &agent.spec.declarative else {
        return Ok(());
    };
    if d.instructions.is_some() == d.instructions_from.is_some() {
        return Err(
            "exactly one of declarative.instructions and declarative.instructionsFrom must be set"
                .into(),
        );
    }
    d.check().map_err(|e| e.to_string())?;
    let ungranted = d.ungranted(&agent.spec.capabilities);
    if !ungranted.is_empty() {
        return Err(format!(
            "the declaration names what this Agent is not granted (a declaration grants nothing): {}",
            ungranted.join("; ")
        ));
    }
    Ok(())
}

/// The declaration with its system prompt in place, and `sha256:<hex>` of its canonical bytes:
/// the config the executors hand the stock component and the attestations sign.
pub async fn resolve(
    d: &Declaration,
    config_maps: &Api<ConfigMap>,
) -> Result<(Declaration, String), ModuleError> {
    let text = match &d.instructions_from {
        None => None,
        Some(r) => {
            if !ari_crds::names::is_object_name(&r.name) {
                return Err(ModuleError::ConfigMapNotFound(r.name.clone()));
            }
            let map = config_maps
                .get_opt(&r.name)
                .await?
                .ok_or_else(|| ModuleError::ConfigMapNotFound(r.name.clone()))?;
            let text = map.data.and_then(|mut d| d.remove(&r.key)).ok_or_else(|| {
                ModuleError::DataKeyMissing {
                    name: r.name.clone(),
                    key: r.key.clone(),
                }
            })?;
            Some(text)
        }
    };
    let resolved = d
        .resolved(text)
        .map_err(|e| ModuleError::Declaration(e.to_string()))?;
    let digest = module_digest(&resolved.sha256());
    Ok((resolved, digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(spec: serde_json::Value) -> Agent {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "triage", "namespace": "n"}, "spec": spec
        }))
        .expect("agent JSON")
    }

    #[test]
    fn a_declaration_beyond_its_grants_is_invalid_and_says_what() {
        let spec = serde_json::json!({
            "declarative": {
                "instructions": "triage", "model": "small",
                "tools": [{"mcpServer": {"name": "tracker", "tools": ["search", "close"]}}]
            },
            "capabilities": {
                "models": {"allowed": ["small"]},
                "tools": {"servers": [{"name": "tracker", "tools": ["search"]}]}
            }
        });
        let err = validate(&agent(spec)).expect_err("close is not granted");
        assert!(
            err.contains("tool close of MCP server tracker: not in capabilities.tools"),
            "{err}"
        );
        let granted = serde_json::json!({
            "declarative": {"instructions": "triage", "model": "small"},
            "capabilities": {"models": {"allowed": ["small"]}}
        });
        assert_eq!(validate(&agent(granted)), Ok(()));
    }
}
