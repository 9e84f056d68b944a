//! Pod volumes as directories under the pod's own directory, plus the service-account
//! kubeconfig. Containers share the host file system, so their mount paths are rewritten to
//! these directories (see `env::substitute_paths`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};

use super::env::{Lookup, PodFacts, field};

/// A token file the node agent keeps fresh.
#[derive(Clone, Debug)]
pub(crate) struct TokenFile {
    pub(crate) path: PathBuf,
    pub(crate) audiences: Vec<String>,
    pub(crate) expiration_seconds: i64,
}

/// Host directories of the pod's volumes and the token files to refresh.
#[derive(Debug, Default)]
pub(crate) struct Materialized {
    pub(crate) volumes: HashMap<String, PathBuf>,
    pub(crate) tokens: Vec<TokenFile>,
}

/// Writes every volume of the pod into `dir/volumes/<name>`. Fails (to be retried) when a
/// referenced Secret or ConfigMap is missing, like the kubelet does.
pub(crate) async fn materialize(
    client: &Client,
    facts: &PodFacts<'_>,
    lookup: &mut Lookup,
    dir: &Path,
) -> Result<Materialized, String> {
    let mut out = Materialized::default();
    let spec = facts.pod.spec.as_ref().ok_or("pod has no spec")?;
    for vol in spec.volumes.iter().flatten() {
        let target = dir.join("volumes").join(&vol.name);
        if let Some(hp) = &vol.host_path {
            out.volumes
                .insert(vol.name.clone(), PathBuf::from(&hp.path));
            continue;
        }
        mkdir(&target)?;
        if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            match lookup.secret(&name).await? {
                Some(data) => write_items(&target, &data, s.items.as_deref())?,
                None if s.optional == Some(true) => {}
                None => return Err(format!("volume {}: secret {name:?} not found", vol.name)),
            }
        } else if let Some(c) = &vol.config_map {
            match lookup.config_map(&c.name).await? {
                Some(data) => write_items(&target, &data, c.items.as_deref())?,
                None if c.optional == Some(true) => {}
                None => {
                    return Err(format!(
                        "volume {}: configmap {:?} not found",
                        vol.name, c.name
                    ));
                }
            }
        } else if vol.empty_dir.is_some() {
        } else if let Some(p) = &vol.projected {
            for src in p.sources.iter().flatten() {
                if let Some(t) = &src.service_account_token {
                    let tf = TokenFile {
                        path: target.join(&t.path),
                        audiences: t.audience.iter().cloned().collect(),
                        expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                    };
                    write_token(client, facts.pod, &tf).await?;
                    out.tokens.push(tf);
                } else if let Some(c) = &src.config_map {
                    match lookup.config_map(&c.name).await? {
                        Some(data) => write_items(&target, &data, c.items.as_deref())?,
                        None if c.optional == Some(true) => {}
                        None => {
                            return Err(format!(
                                "volume {}: configmap {:?} not found",
                                vol.name, c.name
                            ));
                        }
                    }
                } else if let Some(s) = &src.secret {
                    match lookup.secret(&s.name).await? {
                        Some(data) => write_items(&target, &data, s.items.as_deref())?,
                        None if s.optional == Some(true) => {}
                        None => {
                            return Err(format!(
                                "volume {}: secret {:?} not found",
                                vol.name, s.name
                            ));
                        }
                    }
                } else if let Some(d) = &src.downward_api {
                    write_downward(&target, facts, d.items.as_deref())?;
                }
            }
        } else if let Some(d) = &vol.downward_api {
            write_downward(&target, facts, d.items.as_deref())?;
        } else {
            return Err(format!(
                "volume {}: only secret, configMap, emptyDir, projected, downwardAPI and hostPath are supported",
                vol.name
            ));
        }
        out.volumes.insert(vol.name.clone(), target);
    }
    Ok(out)
}

/// `(mountPath, host path)` for a container, longest mount path first so nested mounts win.
pub(crate) fn mounts_for(
    container: &Container,
    volumes: &HashMap<String, PathBuf>,
) -> Result<Vec<(String, String)>, String> {
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let host = volumes
            .get(&m.name)
            .ok_or_else(|| format!("volumeMount {} names no volume", m.name))?;
        let host = match m.sub_path.as_deref() {
            Some(sub) if !sub.is_empty() => host.join(sub),
            _ => host.clone(),
        };
        mounts.push((m.mount_path.clone(), host.to_string_lossy().into_owned()));
    }
    mounts.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
    Ok(mounts)
}

/// Requests a token for the pod's ServiceAccount, bound to the pod, and writes it to `tf.path`.
pub(crate) async fn write_token(client: &Client, pod: &Pod, tf: &TokenFile) -> Result<(), String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: tf.audiences.clone(),
            expiration_seconds: Some(tf.expiration_seconds.max(600)),
            bound_object_ref: Some(BoundObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let resp = api
        .create_token_request(&sa, &PostParams::default(), &req)
        .await
        .map_err(|e| format!("token for serviceaccount {ns}/{sa}: {e}"))?;
    let token = resp
        .status
        .map(|s| s.token)
        .ok_or_else(|| format!("token for serviceaccount {ns}/{sa}: empty response"))?;
    if let Some(parent) = tf.path.parent() {
        mkdir(parent)?;
    }
    write_file(&tf.path, token.as_bytes())
}

fn write_items(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
) -> Result<(), String> {
    match items {
        Some(items) => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => write_file(&dir.join(&it.path), v)?,
                    None => return Err(format!("key {:?} not found", it.key)),
                }
            }
        }
        None => {
            for (k, v) in data {
                write_file(&dir.join(k), v)?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    dir: &Path,
    facts: &PodFacts<'_>,
    items: Option<&[k8s_openapi::api::core::v1::DownwardAPIVolumeFile]>,
) -> Result<(), String> {
    for it in items.into_iter().flatten() {
        if let Some(f) = &it.field_ref {
            write_file(&dir.join(&it.path), field(facts, &f.field_path)?.as_bytes())?;
        }
    }
    Ok(())
}

fn write_file(path: &Path, content: &[u8]) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    std::fs::write(path, content).map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) fn mkdir(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))
}
