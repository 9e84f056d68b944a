//! `ari run --declaration FILE`: a declarative Agent run locally by the stock component, with
//! the config the cluster's executors would hand it.

use std::path::Path;

use anyhow::{Context, bail};
use ari_runtime::capability::Grants;
use ari_runtime::model::Declaration;
use serde::Deserialize;

/// The declaration in `path`: an Agent manifest's `spec.declarative` (YAML or JSON, several
/// documents to a file) with an `instructionsFrom` ConfigMap looked up among the file's
/// ConfigMaps, or a bare declaration. Returns it resolved.
pub fn load(path: &Path) -> anyhow::Result<Declaration> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --declaration {}", path.display()))?;
    let mut declared = None;
    let mut maps = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc)
            .with_context(|| format!("--declaration {}: not YAML", path.display()))?;
        match value.get("kind").and_then(serde_yaml::Value::as_str) {
            Some("Agent") => {
                let spec = value
                    .get("spec")
                    .and_then(|s| s.get("declarative"))
                    .cloned()
                    .context("--declaration: the Agent has no spec.declarative")?;
                declared = Some(serde_yaml::from_value::<Declaration>(spec)?);
            }
            Some("ConfigMap") => maps.push(value),
            Some(_) => {}
            None if value.get("model").is_some() => {
                declared = Some(serde_yaml::from_value::<Declaration>(value)?);
            }
            None => {}
        }
    }
    let Some(d) = declared else {
        bail!(
            "--declaration {}: no Agent with spec.declarative and no declaration in it",
            path.display()
        );
    };
    let text = match &d.instructions_from {
        None => None,
        Some(r) => {
            let map = maps
                .iter()
                .find(|m| {
                    m.get("metadata")
                        .and_then(|m| m.get("name"))
                        .and_then(serde_yaml::Value::as_str)
                        == Some(r.name.as_str())
                })
                .with_context(|| {
                    format!(
                        "--declaration: instructionsFrom names ConfigMap {}, which the file does not hold",
                        r.name
                    )
                })?;
            let text = map
                .get("data")
                .and_then(|d| d.get(r.key.as_str()))
                .and_then(serde_yaml::Value::as_str)
                .with_context(|| {
                    format!(
                        "--declaration: ConfigMap {} has no data key {}",
                        r.name, r.key
                    )
                })?;
            Some(text.to_owned())
        }
    };
    Ok(d.resolved(text)?)
}

/// `grants` as the declaration leaves them: refused when it names anything they do not grant
/// (the cluster's rule), with its approvals added.
pub fn grants(d: &Declaration, grants: Grants) -> anyhow::Result<Grants> {
    let ungranted = d.ungranted(grants.spec());
    if !ungranted.is_empty() {
        bail!(
            "the declaration names what --grant does not grant: {}",
            ungranted.join("; ")
        );
    }
    Ok(
        Grants::load(d.narrow(grants.spec().clone()), grants.key().cloned())?
            .with_models(grants.models().clone())
            .with_tools(grants.tools().clone()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_manifest_gives_its_declaration_with_the_prompt_from_its_config_map() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: prompts}\ndata: {triage: Be terse.}\n---\n\
             apiVersion: ari.dev/v1alpha1\nkind: Agent\nmetadata: {name: triage}\n\
             spec:\n  declarative:\n    model: small\n    instructionsFrom: {name: prompts, key: triage}\n",
        )
        .expect("write");
        let d = load(&path).expect("loads");
        assert_eq!(d.instructions.as_deref(), Some("Be terse."));
        assert_eq!(d.model, "small");
        std::fs::write(
            &path,
            "model: small\ninstructionsFrom: {name: gone, key: k}\n",
        )
        .expect("write");
        let err = load(&path).expect_err("no such ConfigMap");
        assert!(err.to_string().contains("ConfigMap gone"), "{err}");
    }

    #[test]
    fn a_declaration_beyond_the_command_lines_grants_is_refused() {
        let d: Declaration =
            serde_json::from_value(serde_json::json!({"instructions": "x", "model": "small"}))
                .expect("declaration");
        let none = Grants::parse_cli(&[]).expect("no grants");
        let err = grants(&d, none).expect_err("model not granted");
        assert!(err.to_string().contains("model small"), "{err}");
        let granted = Grants::parse_cli(&["models=small".to_owned()]).expect("grant");
        assert!(grants(&d, granted).is_ok());
    }
}
