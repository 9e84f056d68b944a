//! The one rule for Secrets a namespace user's object may name (a signing key, a pull secret,
//! a model's credentials): the kubelet or an executor would hand the Secret over without
//! asking whether the object's author may read it, so only a Secret someone who may write
//! Secrets labelled `<label>: "true"` is used, and never the namespace's attestation key.

use ari_crds::{SecretKeyRef, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether the Secret's metadata carries `label: "true"`.
pub fn is_marked(meta: &ObjectMeta, label: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(label))
        .is_some_and(|v| v == "true")
}

/// Whether `name` may not even be read on a user's behalf: the attestation key, or not an
/// object name (it would go into the request path as it is).
pub fn is_forbidden_name(name: &str) -> bool {
    name == names::ATTESTATION_SECRET || !names::is_object_name(name)
}

/// What a credentials Secret's metadata says of it, under the marked-Secret rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// No Secret is named.
    None,
    /// Named and marked for the purpose (whether the key is in it is checked at first use).
    Marked,
    /// The attestation key, or no Secret name: never read.
    Forbidden,
    Missing,
    NotMarked,
}

/// The credentials `reference` names, as the Secret's metadata (`None`: not found) shows
/// them against `label`.
pub fn credentials(
    reference: Option<&SecretKeyRef>,
    secret: Option<&ObjectMeta>,
    label: &str,
) -> Credentials {
    let Some(reference) = reference else {
        return Credentials::None;
    };
    if is_forbidden_name(&reference.name) {
        return Credentials::Forbidden;
    }
    match secret {
        None => Credentials::Missing,
        Some(meta) if is_marked(meta, label) => Credentials::Marked,
        Some(_) => Credentials::NotMarked,
    }
}

/// The metadata (never the data) of the Secrets `names` in `ns`, each read once; a forbidden
/// name is never read, and a missing Secret is left out (its grant is then unusable). What the
/// model and tool grants check their credentials' marks against.
pub async fn secret_metas(
    client: &kube::Client,
    ns: &str,
    names: &[&str],
) -> Result<Vec<(String, ObjectMeta)>, kube::Error> {
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
    let mut metas: Vec<(String, ObjectMeta)> = Vec::new();
    for &name in names {
        if is_forbidden_name(name) || metas.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(m) = secrets.get_metadata_opt(name).await? {
            metas.push((name.to_owned(), m.metadata));
        }
    }
    Ok(metas)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn only_the_value_true_marks() {
        let meta = |v: Option<&str>| ObjectMeta {
            labels: v.map(|v| BTreeMap::from([("ari.dev/x".to_owned(), v.to_owned())])),
            ..ObjectMeta::default()
        };
        for (value, want) in [
            (Some("true"), true),
            (Some("True"), false),
            (Some("yes"), false),
            (None, false),
        ] {
            assert_eq!(is_marked(&meta(value), "ari.dev/x"), want, "{value:?}");
        }
        assert!(!is_marked(&meta(Some("true")), "ari.dev/y"));
    }

    #[test]
    fn the_attestation_key_and_non_names_are_forbidden() {
        assert!(is_forbidden_name(names::ATTESTATION_SECRET));
        assert!(is_forbidden_name("other-ns/x"));
        assert!(is_forbidden_name(""));
        assert!(!is_forbidden_name("openai-key"));
    }

    #[test]
    fn credentials_from_the_secrets_labels() {
        let reference = |name: &str| SecretKeyRef {
            name: name.into(),
            key: "key".into(),
        };
        let meta = |label: Option<&str>| ObjectMeta {
            labels: label.map(|v| {
                BTreeMap::from([(
                    ari_crds::model_config::CREDENTIALS_LABEL.to_owned(),
                    v.to_owned(),
                )])
            }),
            ..ObjectMeta::default()
        };
        let marked = meta(Some("true"));
        let unmarked = meta(None);
        let other = meta(Some("yes"));
        #[rustfmt::skip]
        let cases: Vec<(&str, Option<SecretKeyRef>, Option<&ObjectMeta>, Credentials)> = vec![
            ("none named",          None,                                    None,            Credentials::None),
            ("marked",              Some(reference("openai")),               Some(&marked),   Credentials::Marked),
            ("unmarked",            Some(reference("openai")),               Some(&unmarked), Credentials::NotMarked),
            ("other value",         Some(reference("openai")),               Some(&other),    Credentials::NotMarked),
            ("missing",             Some(reference("openai")),               None,            Credentials::Missing),
            ("attestation key, even marked", Some(reference(ari_crds::names::ATTESTATION_SECRET)), Some(&marked), Credentials::Forbidden),
            ("not a name",          Some(reference("ns/x")),                 None,            Credentials::Forbidden),
        ];
        for (what, r, m, want) in cases {
            assert_eq!(
                credentials(r.as_ref(), m, ari_crds::model_config::CREDENTIALS_LABEL),
                want,
                "{what}"
            );
        }
    }
}
