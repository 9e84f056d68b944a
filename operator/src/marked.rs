//! The one rule for Secrets a namespace user's object may name (a signing key, a pull secret,
//! a model's credentials): the kubelet or an executor would hand the Secret over without
//! asking whether the object's author may read it, so only a Secret someone who may write
//! Secrets labelled `<label>: "true"` is used, and never the namespace's attestation key.

use ari_crds::names;
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
}
