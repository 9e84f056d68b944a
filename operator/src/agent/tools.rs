//! The MCP servers an Agent is granted, resolved for its executors: each granted name's
//! MCPServer in the Agent's own namespace, and its credentials Secrets by reference only.
//!
//! As for models ([`super::models`]), the executors get the MCPServer specs as JSON in
//! `ARI_TOOL_SERVERS` and each credential as an environment variable the kubelet fills from
//! the Secret, so the executor's ServiceAccount needs no access to MCPServers or Secrets. An
//! MCPServer is looked up in the Agent's namespace only, and a `secretKeyRef` names a Secret of
//! the pod's namespace: a namespace user cannot reach another namespace's server or token.

use ari_crds::mcp_server::{CREDENTIALS_LABEL, ExecutorToolServer};
use ari_crds::{Agent, MCPServer, SecretKeyRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Client, ResourceExt};

use super::granted::{self, Fetched, Kind, Unusable};
use crate::marked;

/// The tool servers an Agent is granted, resolved.
pub type Resolved = granted::Resolved<ExecutorToolServer>;

/// How condition messages name tool servers.
pub const KIND: Kind = Kind {
    noun: "tool server",
    kind: "MCPServer",
    label: CREDENTIALS_LABEL,
};

/// Every Secret reference of `server`: its token, then each header's value.
fn references(server: &MCPServer) -> impl Iterator<Item = &SecretKeyRef> {
    server
        .spec
        .token
        .iter()
        .chain(server.spec.headers.iter().map(|h| &h.value_from))
}

/// The pure decision: `granted` names against the namespace's MCPServers, with `secret_meta`
/// answering for a credentials Secret's metadata (`None`: not found).
pub fn resolve<'a>(
    granted: &[String],
    servers: &[MCPServer],
    secret_meta: impl Fn(&str) -> Option<&'a ObjectMeta>,
) -> Resolved {
    let mut out = Resolved::default();
    for name in granted {
        if out.usable.iter().any(|s| &s.name == name) {
            continue;
        }
        let Some(server) = servers.iter().find(|s| &s.name_any() == name) else {
            out.unusable.push((name.clone(), Unusable::NotFound));
            continue;
        };
        let verdicts = references(server).map(|r| {
            let meta = (!marked::is_forbidden_name(&r.name))
                .then(|| secret_meta(&r.name))
                .flatten();
            marked::credentials(Some(r), meta, CREDENTIALS_LABEL)
        });
        if let Some(why) = Unusable::of(crate::mcp_server::decide::worst(verdicts)) {
            out.unusable.push((name.clone(), why));
            continue;
        }
        let index = out.usable.len();
        out.usable.push(ExecutorToolServer {
            name: name.clone(),
            spec: server.spec.clone(),
            token_env: server
                .spec
                .token
                .as_ref()
                .map(|_| ExecutorToolServer::token_env_name(index)),
            header_envs: (0..server.spec.headers.len())
                .map(|h| ExecutorToolServer::header_env_name(index, h))
                .collect(),
        });
    }
    out
}

/// The servers `agent` is granted, read from the API (see [`fetch_names`]).
pub async fn fetch(agent: &Agent, client: &Client, ns: &str) -> Result<Resolved, kube::Error> {
    let granted: Vec<String> = agent
        .spec
        .capabilities
        .tools
        .iter()
        .flat_map(|g| g.servers.iter().map(|s| s.name.clone()))
        .collect();
    fetch_names(&granted, client, ns).await
}

/// The MCPServers `granted` names in `ns`, read from the API: the namespace's MCPServers (one
/// list) and the metadata of the credentials Secrets they name (never their data).
pub async fn fetch_names(
    granted: &[String],
    client: &Client,
    ns: &str,
) -> Result<Resolved, kube::Error> {
    if granted.is_empty() {
        return Ok(Resolved::default());
    }
    let secrets: fn(&MCPServer) -> Vec<&str> = |s| references(s).map(|r| r.name.as_str()).collect();
    let fetched = Fetched::read(granted, client, ns, secrets).await?;
    Ok(resolve(granted, &fetched.items, |name| {
        fetched.secret_meta(name)
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn server(name: &str, token: Option<&str>, header: Option<&str>) -> MCPServer {
        let mut spec = serde_json::json!({"url": "http://tools.example:8000/mcp"});
        if let Some(s) = token {
            spec["token"] = serde_json::json!({"name": s, "key": "token"});
        }
        if let Some(s) = header {
            spec["headers"] =
                serde_json::json!([{"name": "X-Api-Key", "valueFrom": {"name": s, "key": "k"}}]);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name, "namespace": "n"}, "spec": spec
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn meta(label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: label.map(|v| BTreeMap::from([(CREDENTIALS_LABEL.to_owned(), v.to_owned())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_servers_whose_every_credential_is_marked_reach_the_executors() {
        let marked = meta(Some("true"));
        let unmarked = meta(None);
        let model_marked = ObjectMeta {
            labels: Some(BTreeMap::from([(
                ari_crds::model_config::CREDENTIALS_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        let servers = [
            server("open", None, None),
            server("keyed", Some("marked"), Some("marked")),
            server("half", Some("marked"), Some("unmarked")),
            server("model-key", Some("model-marked"), None),
            server("gone", Some("absent"), None),
            server("attest", None, Some(ari_crds::names::ATTESTATION_SECRET)),
        ];
        let granted: Vec<String> = [
            "open",
            "keyed",
            "half",
            "model-key",
            "gone",
            "attest",
            "nowhere",
        ]
        .map(String::from)
        .to_vec();
        let r = resolve(&granted, &servers, |name| match name {
            "marked" => Some(&marked),
            "unmarked" => Some(&unmarked),
            "model-marked" => Some(&model_marked),
            // The attestation key is never even looked up: were it, it would look marked.
            n if n == ari_crds::names::ATTESTATION_SECRET => Some(&marked),
            _ => None,
        });
        let usable: Vec<_> = r
            .usable
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.token_env.as_deref(),
                    s.header_envs.clone(),
                )
            })
            .collect();
        assert_eq!(
            usable,
            [
                ("open", None, vec![]),
                (
                    "keyed",
                    Some("ARI_TOOL_TOKEN_1"),
                    vec!["ARI_TOOL_HEADER_1_0".to_owned()]
                ),
            ]
        );
        assert_eq!(
            r.unusable,
            [
                ("half".to_owned(), Unusable::CredentialsNotMarked),
                // A Secret marked for model keys is not marked for tools.
                ("model-key".to_owned(), Unusable::CredentialsNotMarked),
                ("gone".to_owned(), Unusable::CredentialsMissing),
                ("attest".to_owned(), Unusable::CredentialsForbidden),
                ("nowhere".to_owned(), Unusable::NotFound),
            ]
        );
        assert!(
            r.message(&KIND)
                .contains("tool server half: its credentials Secret is not labelled ari.dev/tool-credentials=true"),
            "{}",
            r.message(&KIND)
        );
    }
}
