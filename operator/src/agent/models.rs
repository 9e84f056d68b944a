//! The models an Agent is granted, resolved for its executors: each granted name's
//! ModelConfig in the Agent's own namespace, and its credentials Secret by reference only.
//!
//! The operator hands executors what they need in the pod template (see
//! [`super::deployment`]): the ModelConfig specs as JSON in `ARI_MODELS`, and each key as an
//! environment variable the kubelet fills from the Secret. So the executor's ServiceAccount
//! needs no access to ModelConfigs or Secrets, and the operator never reads a key (it fetches
//! the Secret's metadata alone, to check the mark). A ModelConfig is looked up in the Agent's
//! namespace only, and a `secretKeyRef` names a Secret of the pod's namespace: a namespace user
//! cannot reach another namespace's model or key.

use ari_crds::model_config::{CREDENTIALS_LABEL, ExecutorModel};
use ari_crds::{Agent, ModelConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Client, ResourceExt};

use super::granted::{self, Fetched, Kind, Unusable};
use crate::marked;

/// The models an Agent is granted, resolved.
pub type Resolved = granted::Resolved<ExecutorModel>;

/// How condition messages name models.
pub const KIND: Kind = Kind {
    noun: "model",
    kind: "ModelConfig",
    label: CREDENTIALS_LABEL,
};

/// The pure decision: `granted` names against the namespace's ModelConfigs, with
/// `secret_meta` answering for a credentials Secret's metadata (`None`: not found).
pub fn resolve<'a>(
    granted: &[String],
    configs: &[ModelConfig],
    secret_meta: impl Fn(&str) -> Option<&'a ObjectMeta>,
) -> Resolved {
    let mut out = Resolved::default();
    for name in granted {
        if out.usable.iter().any(|m| &m.name == name) {
            continue;
        }
        let Some(mc) = configs.iter().find(|c| &c.name_any() == name) else {
            out.unusable.push((name.clone(), Unusable::NotFound));
            continue;
        };
        let reference = mc.spec.credentials.as_ref();
        let meta = reference
            .filter(|r| !crate::marked::is_forbidden_name(&r.name))
            .and_then(|r| secret_meta(&r.name));
        let creds = marked::credentials(reference, meta, CREDENTIALS_LABEL);
        if let Some(why) = Unusable::of(creds) {
            out.unusable.push((name.clone(), why));
            continue;
        }
        let key_env = reference.map(|_| ExecutorModel::key_env_name(out.usable.len()));
        out.usable.push(ExecutorModel {
            name: name.clone(),
            spec: mc.spec.clone(),
            key_env,
        });
    }
    out
}

/// The models `agent` is granted, read from the API (see [`fetch_names`]).
pub async fn fetch(agent: &Agent, client: &Client, ns: &str) -> Result<Resolved, kube::Error> {
    match &agent.spec.capabilities.models {
        Some(grant) => fetch_names(&grant.allowed, client, ns).await,
        None => Ok(Resolved::default()),
    }
}

/// The ModelConfigs `granted` names in `ns`, read from the API: the namespace's ModelConfigs
/// (one list) and the metadata of the credentials Secrets they name (never their data).
pub async fn fetch_names(
    granted: &[String],
    client: &Client,
    ns: &str,
) -> Result<Resolved, kube::Error> {
    if granted.is_empty() {
        return Ok(Resolved::default());
    }
    let secrets: fn(&ModelConfig) -> Vec<&str> =
        |c| c.spec.credentials.iter().map(|r| r.name.as_str()).collect();
    let fetched = Fetched::read(granted, client, ns, secrets).await?;
    Ok(resolve(granted, &fetched.items, |name| {
        fetched.secret_meta(name)
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn config(name: &str, secret: Option<&str>) -> ModelConfig {
        let mut spec = serde_json::json!({
            "provider": "OpenAI", "endpoint": "http://m.example:8000/v1", "model": "tiny"
        });
        if let Some(s) = secret {
            spec["credentials"] = serde_json::json!({"name": s, "key": "apiKey"});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfig",
            "metadata": {"name": name, "namespace": "n"}, "spec": spec
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn meta(label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: label.map(|v| {
                BTreeMap::from([(
                    ari_crds::model_config::CREDENTIALS_LABEL.to_owned(),
                    v.to_owned(),
                )])
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_models_with_marked_or_no_credentials_reach_the_executors() {
        let marked = meta(Some("true"));
        let unmarked = meta(None);
        let configs = [
            config("open", None),
            config("keyed", Some("marked")),
            config("stolen", Some("unmarked")),
            config("gone", Some("absent")),
            config("attest", Some(ari_crds::names::ATTESTATION_SECRET)),
        ];
        let granted: Vec<String> = ["open", "keyed", "stolen", "gone", "attest", "nowhere"]
            .map(String::from)
            .to_vec();
        let r = resolve(&granted, &configs, |name| match name {
            "marked" => Some(&marked),
            "unmarked" => Some(&unmarked),
            // The attestation key is never even looked up: were it, it would look marked.
            n if n == ari_crds::names::ATTESTATION_SECRET => Some(&marked),
            _ => None,
        });
        let usable: Vec<_> = r
            .usable
            .iter()
            .map(|m| (m.name.as_str(), m.key_env.as_deref()))
            .collect();
        assert_eq!(usable, [("open", None), ("keyed", Some("ARI_MODEL_KEY_1"))]);
        assert_eq!(
            r.unusable,
            [
                ("stolen".to_owned(), Unusable::CredentialsNotMarked),
                ("gone".to_owned(), Unusable::CredentialsMissing),
                ("attest".to_owned(), Unusable::CredentialsForbidden),
                ("nowhere".to_owned(), Unusable::NotFound),
            ]
        );
        assert!(
            r.message(&KIND)
                .contains("model stolen: its credentials Secret is not labelled")
        );
    }

    #[test]
    fn a_name_granted_twice_is_handed_over_once() {
        let r = resolve(
            &["open".to_owned(), "open".to_owned()],
            &[config("open", None)],
            |_| None,
        );
        assert_eq!(r.usable.len(), 1);
        assert!(r.unusable.is_empty());
    }
}
