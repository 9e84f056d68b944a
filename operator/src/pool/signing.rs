//! The signing keys a pool's pods carry: one variable per Secret and key its Agents'
//! `signing.secretRef`s name (the union of [`super::grants::Granted`]), sorted, at most
//! [`MAX_POOL_SIGNING_KEYS`].
//!
//! The rule is the dedicated Agent's (`agent/signing.rs`): the kubelet fills a pod's variables
//! from any Secret of its namespace the template names, without asking whether the Agent's
//! author may read it. So only a Secret labelled `ari.dev/signing-key: "true"` (by someone who
//! may write Secrets), never the attestation key, goes into the pool's template; any Agent of
//! the namespace may name any such Secret, as a dedicated one may, and a pool is of one
//! namespace, as a `secretKeyRef` is. Only the Secrets' metadata is read here: whether the key
//! parses is checked by the Agent's own reconcile (`Valid=False/SigningSecretRejected`, as for
//! a dedicated Agent) and by the pod, which fails only that Agent's Tasks.

use std::collections::BTreeSet;

use ari_crds::SecretKeyRef;
use ari_crds::names::LABEL_SIGNING_KEY;
use ari_crds::pool::{MAX_POOL_SIGNING_KEYS, PoolSigningKey};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::marked::{self, Credentials};

/// The pool's signing keys, resolved.
#[derive(Debug, Default, PartialEq)]
pub struct Resolved {
    /// What the pool's pods are handed, by reference.
    pub usable: Vec<PoolSigningKey>,
    /// Named but not handed over: missing, not marked, or the attestation key. The Agents
    /// naming them are refused by their own reconcile too; looked at again soon.
    pub unusable: Vec<(SecretKeyRef, Credentials)>,
    /// Marked, but past [`MAX_POOL_SIGNING_KEYS`]: the Agents naming them wait for a pod
    /// that carries their key (never one signing with another's).
    pub over_bound: Vec<SecretKeyRef>,
    /// A hash of the handed-over Secrets' resourceVersions (see
    /// `names::ANNOTATION_SIGNING_SECRETS`); empty when there are none.
    pub revision: String,
}

/// The pure decision: `granted` against `secret_meta`, the metadata of a Secret of the pool's
/// namespace (`None`: not found).
pub fn resolve<'a>(
    granted: &BTreeSet<SecretKeyRef>,
    secret_meta: impl Fn(&str) -> Option<&'a ObjectMeta>,
) -> Resolved {
    let mut out = Resolved::default();
    let mut versions = Sha256::new();
    let mut seen = BTreeSet::new();
    for r in granted {
        let meta = (!marked::is_forbidden_name(&r.name))
            .then(|| secret_meta(&r.name))
            .flatten();
        match marked::credentials(Some(r), meta, LABEL_SIGNING_KEY) {
            Credentials::Marked if out.usable.len() < MAX_POOL_SIGNING_KEYS => {
                if seen.insert(r.name.as_str()) {
                    let version = meta.and_then(|m| m.resource_version.as_deref());
                    versions.update(format!("{}={};", r.name, version.unwrap_or_default()));
                }
                out.usable.push(PoolSigningKey {
                    secret_ref: r.clone(),
                    key_env: PoolSigningKey::key_env_name(out.usable.len()),
                });
            }
            Credentials::Marked => out.over_bound.push(r.clone()),
            other => out.unusable.push((r.clone(), other)),
        }
    }
    if !out.usable.is_empty() {
        out.revision = hex::encode(&versions.finalize()[..8]);
    }
    out
}

/// The signing keys `granted` names in `ns`, against their Secrets' metadata (never their data).
pub async fn fetch(
    granted: &BTreeSet<SecretKeyRef>,
    client: &kube::Client,
    ns: &str,
) -> Result<Resolved, kube::Error> {
    if granted.is_empty() {
        return Ok(Resolved::default());
    }
    let names: Vec<&str> = granted.iter().map(|r| r.name.as_str()).collect();
    let metas = marked::secret_metas(client, ns, &names).await?;
    Ok(resolve(granted, |name| {
        metas.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn key(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: key.into(),
        }
    }

    fn meta(label: Option<&str>, version: &str) -> ObjectMeta {
        ObjectMeta {
            labels: label.map(|v| BTreeMap::from([(LABEL_SIGNING_KEY.to_owned(), v.to_owned())])),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_marked_signing_secrets_reach_a_pool_each_pair_once_in_a_stable_order() {
        let (marked, other_version, unmarked) = (
            meta(Some("true"), "1"),
            meta(Some("true"), "2"),
            meta(None, "1"),
        );
        let granted: BTreeSet<SecretKeyRef> = [
            key("b-key", "private-key"),
            key("a-key", "private-key"),
            key("a-key", "second"),
            key("stolen", "private-key"),
            key("gone", "private-key"),
            key(ari_crds::names::ATTESTATION_SECRET, "private-key"),
            key("ns/x", "k"),
        ]
        .into();
        let lookup = |name: &str| match name {
            "a-key" | "b-key" => Some(&marked),
            "stolen" => Some(&unmarked),
            // Never even looked up: were it, it would look marked.
            n if n == ari_crds::names::ATTESTATION_SECRET => Some(&marked),
            _ => None,
        };
        let r = resolve(&granted, lookup);
        let usable: Vec<(&str, &str, &str)> = r
            .usable
            .iter()
            .map(|k| {
                (
                    k.secret_ref.name.as_str(),
                    k.secret_ref.key.as_str(),
                    k.key_env.as_str(),
                )
            })
            .collect();
        assert_eq!(
            usable,
            [
                ("a-key", "private-key", "ARI_SIGNING_KEY_0"),
                ("a-key", "second", "ARI_SIGNING_KEY_1"),
                ("b-key", "private-key", "ARI_SIGNING_KEY_2"),
            ]
        );
        let unusable: Vec<(&str, Credentials)> = r
            .unusable
            .iter()
            .map(|(k, c)| (k.name.as_str(), *c))
            .collect();
        assert_eq!(
            unusable,
            [
                (ari_crds::names::ATTESTATION_SECRET, Credentials::Forbidden),
                ("gone", Credentials::Missing),
                ("ns/x", Credentials::Forbidden),
                ("stolen", Credentials::NotMarked),
            ]
        );
        assert!(r.over_bound.is_empty());
        // A Secret edited (a key put right or rotated) changes the revision: the pool rolls.
        let edited = resolve(&granted, |name| match name {
            "a-key" => Some(&other_version),
            n => lookup(n),
        });
        assert_eq!(edited.usable, r.usable);
        assert_ne!(edited.revision, r.revision);
        assert_eq!(resolve(&granted, lookup).revision, r.revision);
        assert_eq!(resolve(&BTreeSet::new(), lookup), Resolved::default());
    }

    #[test]
    fn a_pool_carries_a_bounded_number_of_signing_keys() {
        let marked = meta(Some("true"), "1");
        let granted: BTreeSet<SecretKeyRef> = (0..MAX_POOL_SIGNING_KEYS + 2)
            .map(|i| key(&format!("key-{i:04}"), "k"))
            .collect();
        let r = resolve(&granted, |_| Some(&marked));
        assert_eq!(r.usable.len(), MAX_POOL_SIGNING_KEYS);
        let last = MAX_POOL_SIGNING_KEYS - 1;
        assert_eq!(
            r.usable.last().map(|k| k.key_env.clone()),
            Some(format!("ARI_SIGNING_KEY_{last}"))
        );
        assert_eq!(
            r.over_bound,
            [
                key(&format!("key-{:04}", MAX_POOL_SIGNING_KEYS), "k"),
                key(&format!("key-{:04}", MAX_POOL_SIGNING_KEYS + 1), "k"),
            ]
        );
    }
}
