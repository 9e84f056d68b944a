//! The Secret keys a pool's pods carry by reference: one variable per signing key (Secret and
//! key) its Agents' `signing.secretRef`s name, and one per pull secret their
//! `module.imagePullSecrets` name (the unions of [`super::grants::Granted`]), each kind sorted
//! and bounded ([`Kind`]).
//!
//! The rule is the dedicated Agent's: the kubelet fills a pod's variables from any Secret of
//! its namespace the template names, without asking whether the Agent's author may read it.
//! So only a Secret labelled `ari.dev/signing-key: "true"` (`agent/signing.rs`), or a
//! `kubernetes.io/dockerconfigjson` Secret labelled `ari.dev/pull-secret: "true"`
//! (`agent/image.rs`, [`check_pull_secret`]), by someone who may write Secrets, and never the
//! attestation key, goes into the pool's template; any Agent of the namespace may name any such
//! Secret, as a dedicated one may, and a pool is of one namespace, as a `secretKeyRef` is. Of
//! signing Secrets only the metadata is read here: whether the key parses is checked by the
//! Agent's own reconcile (`Valid=False/SigningSecretRejected`, as for a dedicated Agent) and by
//! the pod, which fails only that Agent's Tasks. A pull secret is read whole, as the Agent's
//! own reconcile reads it to resolve the image, since its type is not in its metadata.

use std::collections::BTreeSet;

use ari_crds::SecretKeyRef;
use ari_crds::names::LABEL_SIGNING_KEY;
use ari_crds::pool::{MAX_POOL_PULL_SECRETS, MAX_POOL_SIGNING_KEYS, PoolSecretKey};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::agent::image::check_pull_secret;
use crate::marked::{self, Credentials};

/// A kind of Secret key a pool hands its pods.
#[derive(Debug)]
pub struct Kind {
    /// At most this many distinct keys per pool.
    pub bound: usize,
    /// The variable of the `n`th key of the sorted union.
    pub env_name: fn(usize) -> String,
    /// What the keys are, for the pool's Event past the bound.
    pub what: &'static str,
    /// The reason of that Event.
    pub over_bound_reason: &'static str,
}

pub const SIGNING: Kind = Kind {
    bound: MAX_POOL_SIGNING_KEYS,
    env_name: PoolSecretKey::signing_env_name,
    what: "signing key",
    over_bound_reason: "SigningKeysOverBound",
};

pub const PULL: Kind = Kind {
    bound: MAX_POOL_PULL_SECRETS,
    env_name: PoolSecretKey::pull_secret_env_name,
    what: "pull secret",
    over_bound_reason: "PullSecretsOverBound",
};

/// What a named Secret is for its use, and its resourceVersion (for the pool's revision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged<'a> {
    pub credentials: Credentials,
    pub version: Option<&'a str>,
}

/// The pool's Secret keys of one [`Kind`], resolved.
#[derive(Debug, Default, PartialEq)]
pub struct Resolved {
    /// What the pool's pods are handed, by reference.
    pub usable: Vec<PoolSecretKey>,
    /// Named but not handed over: missing, not marked (or, for a pull secret, not of its
    /// type), or the attestation key. The Agents naming them are refused by their own
    /// reconcile too; looked at again soon.
    pub unusable: Vec<(SecretKeyRef, Credentials)>,
    /// Usable, but past the kind's bound: the Agents naming them wait for a pod that carries
    /// them (never one using another's).
    pub over_bound: Vec<SecretKeyRef>,
    /// A hash of the handed-over Secrets' resourceVersions (see
    /// `names::ANNOTATION_SIGNING_SECRETS`); empty when there are none.
    pub revision: String,
}

impl Resolved {
    /// The pool's Event past the bound, when there is one to give.
    pub fn over_bound_note(&self, kind: &Kind) -> Option<String> {
        (!self.over_bound.is_empty()).then(|| {
            format!(
                "{} {}(s) past the pool's bound of {} are not carried: the Agents naming them \
                 wait (move some to another pool)",
                self.over_bound.len(),
                kind.what,
                kind.bound
            )
        })
    }
}

/// The pure decision: `granted` against `judge`, what each named Secret is for the use.
pub fn resolve<'a>(
    kind: &Kind,
    granted: &BTreeSet<SecretKeyRef>,
    judge: impl Fn(&SecretKeyRef) -> Judged<'a>,
) -> Resolved {
    let mut out = Resolved::default();
    let mut versions = Sha256::new();
    let mut seen = BTreeSet::new();
    for r in granted {
        // Never even looked up on an Agent's behalf.
        let judged = if marked::is_forbidden_name(&r.name) {
            Judged {
                credentials: Credentials::Forbidden,
                version: None,
            }
        } else {
            judge(r)
        };
        match judged.credentials {
            Credentials::Marked if out.usable.len() < kind.bound => {
                if seen.insert(r.name.as_str()) {
                    versions.update(format!(
                        "{}={};",
                        r.name,
                        judged.version.unwrap_or_default()
                    ));
                }
                out.usable.push(PoolSecretKey {
                    secret_ref: r.clone(),
                    key_env: (kind.env_name)(out.usable.len()),
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

/// A signing key by its Secret's metadata (`None`: not found) against the signing label.
pub fn signing_key<'a>(r: &SecretKeyRef, meta: Option<&'a ObjectMeta>) -> Judged<'a> {
    Judged {
        credentials: marked::credentials(Some(r), meta, LABEL_SIGNING_KEY),
        version: meta.and_then(|m| m.resource_version.as_deref()),
    }
}

/// A pull secret by the dedicated Agent's rule ([`check_pull_secret`]: marked, of type
/// `kubernetes.io/dockerconfigjson`, holding `.dockerconfigjson`; `None`: not found).
pub fn pull_secret<'a>(r: &SecretKeyRef, secret: Option<&'a Secret>) -> Judged<'a> {
    let credentials = match secret {
        None => Credentials::Missing,
        // Not marked, or marked but no docker config: the kubelet must not hand it over.
        Some(_) => match check_pull_secret(&r.name, secret) {
            Ok(_) => Credentials::Marked,
            Err(_) => Credentials::NotMarked,
        },
    };
    Judged {
        credentials,
        version: secret.and_then(|s| s.metadata.resource_version.as_deref()),
    }
}

/// The signing keys `granted` names in `ns`, against their Secrets' metadata (never their data).
pub async fn fetch_signing(
    granted: &BTreeSet<SecretKeyRef>,
    client: &kube::Client,
    ns: &str,
) -> Result<Resolved, kube::Error> {
    if granted.is_empty() {
        return Ok(Resolved::default());
    }
    let names: Vec<&str> = granted.iter().map(|r| r.name.as_str()).collect();
    let metas = marked::secret_metas(client, ns, &names).await?;
    Ok(resolve(&SIGNING, granted, |r| {
        signing_key(r, metas.iter().find(|(n, _)| *n == r.name).map(|(_, m)| m))
    }))
}

/// The pull secrets `granted` names in `ns`, each read once (a forbidden name never).
pub async fn fetch_pull(
    granted: &BTreeSet<SecretKeyRef>,
    client: &kube::Client,
    ns: &str,
) -> Result<Resolved, kube::Error> {
    let api = kube::Api::<Secret>::namespaced(client.clone(), ns);
    let mut found: Vec<Secret> = Vec::new();
    for r in granted {
        if marked::is_forbidden_name(&r.name) {
            continue;
        }
        if let Some(s) = api.get_opt(&r.name).await? {
            found.push(s);
        }
    }
    Ok(resolve(&PULL, granted, |r| {
        pull_secret(
            r,
            found
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(&r.name)),
        )
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Asserts what `r` found usable, as (Secret, key, variable), and unusable, as (Secret,
    /// why), in order.
    fn assert_resolved(
        r: &Resolved,
        usable: &[(&str, &str, &str)],
        unusable: &[(&str, Credentials)],
    ) {
        let got: Vec<(&str, &str, &str)> = r
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
        assert_eq!(got, usable);
        let got: Vec<(&str, Credentials)> = r
            .unusable
            .iter()
            .map(|(k, c)| (k.name.as_str(), *c))
            .collect();
        assert_eq!(got, unusable);
    }

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

    /// The signing keys of `granted` against `lookup`, the Secrets' metadata by name.
    fn signing<'a>(
        granted: &BTreeSet<SecretKeyRef>,
        lookup: impl Fn(&str) -> Option<&'a ObjectMeta>,
    ) -> Resolved {
        resolve(&SIGNING, granted, |r| signing_key(r, lookup(&r.name)))
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
        let r = signing(&granted, lookup);
        assert_resolved(
            &r,
            &[
                ("a-key", "private-key", "ARI_SIGNING_KEY_0"),
                ("a-key", "second", "ARI_SIGNING_KEY_1"),
                ("b-key", "private-key", "ARI_SIGNING_KEY_2"),
            ],
            &[
                (ari_crds::names::ATTESTATION_SECRET, Credentials::Forbidden),
                ("gone", Credentials::Missing),
                ("ns/x", Credentials::Forbidden),
                ("stolen", Credentials::NotMarked),
            ],
        );
        assert!(r.over_bound.is_empty());
        // A Secret edited (a key put right or rotated) changes the revision: the pool rolls.
        let edited = signing(&granted, |name| match name {
            "a-key" => Some(&other_version),
            n => lookup(n),
        });
        assert_eq!(edited.usable, r.usable);
        assert_ne!(edited.revision, r.revision);
        assert_eq!(signing(&granted, lookup).revision, r.revision);
        assert_eq!(
            resolve(&SIGNING, &BTreeSet::new(), |_| unreachable!()),
            Resolved::default()
        );
    }

    #[test]
    fn a_pool_carries_a_bounded_number_of_signing_keys() {
        let marked = meta(Some("true"), "1");
        let granted: BTreeSet<SecretKeyRef> = (0..MAX_POOL_SIGNING_KEYS + 2)
            .map(|i| key(&format!("key-{i:04}"), "k"))
            .collect();
        let r = signing(&granted, |_| Some(&marked));
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

    /// A pull secret: labelled as `label` says, of `type_`, with a docker config when `config`.
    fn pull(name: &str, label: Option<&str>, type_: &str, version: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.resource_version = Some(version.into());
        s.metadata.labels = label.map(|v| {
            BTreeMap::from([(ari_crds::names::LABEL_PULL_SECRET.to_owned(), v.to_owned())])
        });
        s.type_ = Some(type_.into());
        s.data = Some(BTreeMap::from([(
            ari_crds::names::DOCKER_CONFIG_JSON_KEY.to_owned(),
            k8s_openapi::ByteString(br#"{"auths":{}}"#.to_vec()),
        )]));
        s
    }

    /// The pull secrets named `names` against `secrets`, the namespace's.
    fn pulls(names: &[&str], secrets: &[Secret]) -> Resolved {
        let granted: BTreeSet<SecretKeyRef> = names
            .iter()
            .map(|n| ari_crds::pool::pull_secret_ref(n))
            .collect();
        resolve(&PULL, &granted, |r| {
            pull_secret(
                r,
                secrets
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(&r.name)),
            )
        })
    }

    const DOCKER: &str = "kubernetes.io/dockerconfigjson";

    #[test]
    fn only_marked_docker_config_secrets_reach_a_pool_as_pull_secrets() {
        let secrets = [
            pull("b-reg", Some("true"), DOCKER, "1"),
            pull("a-reg", Some("true"), DOCKER, "1"),
            pull("unmarked", None, DOCKER, "1"),
            pull("opaque", Some("true"), "Opaque", "1"),
            pull(
                ari_crds::names::ATTESTATION_SECRET,
                Some("true"),
                DOCKER,
                "1",
            ),
        ];
        let names = [
            "b-reg",
            "a-reg",
            "unmarked",
            "opaque",
            "gone",
            ari_crds::names::ATTESTATION_SECRET,
        ];
        let r = pulls(&names, &secrets);
        assert_resolved(
            &r,
            &[
                ("a-reg", ".dockerconfigjson", "ARI_PULL_SECRET_0"),
                ("b-reg", ".dockerconfigjson", "ARI_PULL_SECRET_1"),
            ],
            &[
                (ari_crds::names::ATTESTATION_SECRET, Credentials::Forbidden),
                ("gone", Credentials::Missing),
                ("opaque", Credentials::NotMarked),
                ("unmarked", Credentials::NotMarked),
            ],
        );
        // An edited pull secret rolls the pool.
        let mut edited = secrets.clone();
        edited[0].metadata.resource_version = Some("2".into());
        let after = pulls(&names, &edited);
        assert_eq!(after.usable, r.usable);
        assert_ne!(after.revision, r.revision);
    }

    #[test]
    fn a_pool_carries_a_bounded_number_of_pull_secrets_and_says_so() {
        let names: Vec<String> = (0..MAX_POOL_PULL_SECRETS + 1)
            .map(|i| format!("reg-{i:03}"))
            .collect();
        let secrets: Vec<Secret> = names
            .iter()
            .map(|n| pull(n, Some("true"), DOCKER, "1"))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = pulls(&refs, &secrets);
        assert_eq!(r.usable.len(), MAX_POOL_PULL_SECRETS);
        assert_eq!(
            r.over_bound,
            [ari_crds::pool::pull_secret_ref(&format!(
                "reg-{MAX_POOL_PULL_SECRETS:03}"
            ))]
        );
        let note = r.over_bound_note(&PULL).unwrap_or_default();
        assert!(
            note.contains("1 pull secret(s)") && note.contains(&MAX_POOL_PULL_SECRETS.to_string()),
            "{note}"
        );
        assert_eq!(PULL.over_bound_reason, "PullSecretsOverBound");
        assert_eq!(pulls(&refs[..1], &secrets).over_bound_note(&PULL), None);
    }
}
