//! Container environment as the kubelet builds it: envFrom, then env in order with `$(VAR)`
//! expansion, fieldRef, secretKeyRef and configMapKeyRef.

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

/// Values a fieldRef can read that the API object does not hold yet.
pub(crate) struct PodFacts<'a> {
    pub(crate) pod: &'a Pod,
    pub(crate) pod_ip: String,
    pub(crate) node_name: &'a str,
}

/// Fetches Secrets and ConfigMaps once per pod start.
pub(crate) struct Lookup {
    client: Client,
    ns: String,
    secrets: HashMap<String, Option<Secret>>,
    config_maps: HashMap<String, Option<ConfigMap>>,
}

impl Lookup {
    pub(crate) fn new(client: Client, ns: &str) -> Lookup {
        Lookup {
            client,
            ns: ns.to_string(),
            secrets: HashMap::new(),
            config_maps: HashMap::new(),
        }
    }

    /// The Secret's data, decoded; `None` if it does not exist.
    pub(crate) async fn secret(
        &mut self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
            let s = api
                .get_opt(name)
                .await
                .map_err(|e| format!("secret {name}: {e}"))?;
            self.secrets.insert(name.to_string(), s);
        }
        Ok(self.secrets.get(name).and_then(Option::as_ref).map(|s| {
            let mut out: BTreeMap<String, Vec<u8>> = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect();
            for (k, v) in s.string_data.iter().flatten() {
                out.insert(k.clone(), v.clone().into_bytes());
            }
            out
        }))
    }

    /// The ConfigMap's data (binaryData included); `None` if it does not exist.
    pub(crate) async fn config_map(
        &mut self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
            let c = api
                .get_opt(name)
                .await
                .map_err(|e| format!("configmap {name}: {e}"))?;
            self.config_maps.insert(name.to_string(), c);
        }
        Ok(self
            .config_maps
            .get(name)
            .and_then(Option::as_ref)
            .map(|c| {
                let mut out: BTreeMap<String, Vec<u8>> = c
                    .data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                    .collect();
                for (k, v) in c.binary_data.iter().flatten() {
                    out.insert(k.clone(), v.0.clone());
                }
                out
            }))
    }
}

/// Resolves a container's environment, in the kubelet's order. Errors name what is missing.
pub(crate) async fn resolve(
    container: &Container,
    facts: &PodFacts<'_>,
    lookup: &mut Lookup,
) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            match lookup.config_map(&r.name).await? {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(format!("configmap {:?} not found (envFrom)", r.name)),
            }
        } else if let Some(r) = &from.secret_ref {
            match lookup.secret(&r.name).await? {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(format!("secret {:?} not found (envFrom)", r.name)),
            }
        } else {
            continue;
        };
        for (k, v) in data {
            set(
                &mut env,
                format!("{prefix}{k}"),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            let v = if let Some(f) = &from.field_ref {
                Some(field(facts, &f.field_path)?)
            } else if let Some(r) = &from.secret_key_ref {
                match lookup.secret(&r.name).await? {
                    Some(d) => match d.get(&r.key) {
                        Some(v) => Some(String::from_utf8_lossy(v).into_owned()),
                        None if r.optional == Some(true) => None,
                        None => return Err(format!("secret {:?} has no key {:?}", r.name, r.key)),
                    },
                    None if r.optional == Some(true) => None,
                    None => return Err(format!("secret {:?} not found", r.name)),
                }
            } else if let Some(r) = &from.config_map_key_ref {
                match lookup.config_map(&r.name).await? {
                    Some(d) => match d.get(&r.key) {
                        Some(v) => Some(String::from_utf8_lossy(v).into_owned()),
                        None if r.optional == Some(true) => None,
                        None => {
                            return Err(format!("configmap {:?} has no key {:?}", r.name, r.key));
                        }
                    },
                    None if r.optional == Some(true) => None,
                    None => return Err(format!("configmap {:?} not found", r.name)),
                }
            } else {
                return Err(format!(
                    "env {}: only value, fieldRef, secretKeyRef and configMapKeyRef are supported",
                    var.name
                ));
            };
            match v {
                Some(v) => v,
                None => continue,
            }
        } else {
            let known: HashMap<&str, &str> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            expand(var.value.as_deref().unwrap_or_default(), &known)
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

/// The value of a downward-API field path.
pub(crate) fn field(facts: &PodFacts<'_>, path: &str) -> Result<String, String> {
    let meta = &facts.pod.metadata;
    let spec = facts.pod.spec.as_ref();
    let map_key = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => facts.node_name.to_string(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" => facts.pod_ip.clone(),
        "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".into(),
        _ => {
            if let Some(k) = map_key("metadata.labels['") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = map_key("metadata.annotations['") {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(format!(
                    "fieldRef {path:?} is not supported by the e2e node agent"
                ));
            }
        }
    })
}

/// Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes a `$`, and
/// anything else is left as written.
pub(crate) fn expand(input: &str, vars: &HashMap<&str, &str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Rewrites container mount paths inside a string to their host directories, because the
/// process sees the host file system. `mounts` must be sorted longest mount path first.
pub(crate) fn substitute_paths(s: &str, mounts: &[(String, String)]) -> String {
    let boundary_before =
        |c: Option<char>| matches!(c, None | Some('=' | ':' | ',' | ' ' | '"' | '\''));
    let boundary_after =
        |c: Option<char>| matches!(c, None | Some('/' | ':' | ',' | ' ' | '"' | '\''));
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        let prev = s[..i].chars().next_back();
        if boundary_before(prev) {
            for (mount, host) in mounts {
                let m = mount.trim_end_matches('/');
                if !m.is_empty()
                    && s[i..].starts_with(m)
                    && boundary_after(s[i + m.len()..].chars().next())
                {
                    out.push_str(host);
                    i += m.len();
                    continue 'scan;
                }
            }
        }
        let Some(c) = s[i..].chars().next() else {
            break;
        };
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Base64 of raw bytes, for error messages about binary data.
#[allow(dead_code)]
pub(crate) fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let vars = HashMap::from([("A", "x"), ("B", "y")]);
        assert_eq!(expand("$(A)-$(B)", &vars), "x-y");
        assert_eq!(expand("$(C)", &vars), "$(C)");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("a$b $(A", &vars), "a$b $(A");
    }

    #[test]
    fn mount_paths_are_rewritten_on_boundaries_only() {
        let mounts = vec![
            ("/etc/ari/secret".to_string(), "/tmp/p/secret".to_string()),
            ("/etc/ari".to_string(), "/tmp/p/cfg".to_string()),
        ];
        assert_eq!(
            substitute_paths("/etc/ari/secret/key", &mounts),
            "/tmp/p/secret/key"
        );
        assert_eq!(
            substitute_paths("--config=/etc/ari/c.yaml", &mounts),
            "--config=/tmp/p/cfg/c.yaml"
        );
        assert_eq!(substitute_paths("/etc/arix", &mounts), "/etc/arix");
        assert_eq!(substitute_paths("x/etc/ari", &mounts), "x/etc/ari");
        assert_eq!(substitute_paths("a:/etc/ari", &mounts), "a:/tmp/p/cfg");
    }
}
