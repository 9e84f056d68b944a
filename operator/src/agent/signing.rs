//! The signing grant's Secret, checked before any executor can receive it.
//!
//! The kubelet resolves `secretKeyRef` for the pod without asking whether the Agent's author
//! may read the Secret, so an Agent naming the attestation key (or any other Secret) would
//! turn the stock `signer` agent into an oracle over it. Only a Secret labelled
//! `ari.dev/signing-key: "true"`, other than the attestation key, holding an Ed25519 key the
//! executor can parse, is accepted.

use ari_crds::SigningGrant;
use ari_crds::names;
use ari_model::keys::parse_signing_key;
use k8s_openapi::api::core::v1::Secret;

/// Why the Secret is refused (the message of `Valid=False`), or `Ok`.
pub fn check(grant: &SigningGrant, secret: Option<&Secret>) -> Result<(), String> {
    let (name, key) = (&grant.secret_ref.name, &grant.secret_ref.key);
    if name == names::ATTESTATION_SECRET {
        return Err(format!(
            "signing.secretRef names {name}, the namespace's attestation key, which no Agent may sign with"
        ));
    }
    let Some(secret) = secret else {
        return Err(format!(
            "signing.secretRef: Secret {name} not found in the Agent's namespace"
        ));
    };
    if !crate::marked::is_marked(&secret.metadata, names::LABEL_SIGNING_KEY) {
        return Err(format!(
            "signing.secretRef: Secret {name} is not marked for signing use (label it {}=true)",
            names::LABEL_SIGNING_KEY
        ));
    }
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
        return Err(format!(
            "signing.secretRef: Secret {name} has no key {key:?}"
        ));
    };
    if parse_signing_key(&bytes.0).is_none() {
        return Err(format!(
            "signing.secretRef: Secret {name} key {key:?} is not an Ed25519 key (64 hex digits, PKCS#8 PEM or 32 raw bytes)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use ari_crds::SecretKeyRef;
    use ed25519_dalek::pkcs8::EncodePrivateKey;
    use k8s_openapi::ByteString;

    fn grant(name: &str) -> SigningGrant {
        SigningGrant {
            key_id: "k".into(),
            secret_ref: SecretKeyRef {
                name: name.into(),
                key: "key".into(),
            },
        }
    }

    fn secret(label: Option<&str>, value: &[u8]) -> Secret {
        let mut s = Secret::default();
        s.metadata.labels =
            label.map(|v| BTreeMap::from([(names::LABEL_SIGNING_KEY.to_owned(), v.to_owned())]));
        s.data = Some(BTreeMap::from([(
            "key".to_owned(),
            ByteString(value.to_vec()),
        )]));
        s
    }

    const HEX: &[u8] = b"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    #[test]
    fn the_attestation_key_secret_is_refused_even_when_marked() {
        let err = check(
            &grant(names::ATTESTATION_SECRET),
            Some(&secret(Some("true"), HEX)),
        );
        assert!(err.is_err_and(|e| e.contains("attestation key")));
    }

    #[test]
    fn an_unmarked_or_missing_secret_is_refused_with_a_hint() {
        let unmarked = check(&grant("s"), Some(&secret(None, HEX)));
        assert!(unmarked.is_err_and(|e| e.contains("ari.dev/signing-key=true")));
        let wrong = check(&grant("s"), Some(&secret(Some("yes"), HEX)));
        assert!(wrong.is_err());
        let missing = check(&grant("s"), None);
        assert!(missing.is_err_and(|e| e.contains("not found")));
    }

    #[test]
    fn a_marked_secret_must_hold_a_key_the_executor_parses() {
        let not_key = check(&grant("s"), Some(&secret(Some("true"), b"hello")));
        assert!(not_key.is_err_and(|e| e.contains("not an Ed25519 key")));
        assert_eq!(check(&grant("s"), Some(&secret(Some("true"), HEX))), Ok(()));
        assert_eq!(
            check(&grant("s"), Some(&secret(Some("true"), &[7; 32]))),
            Ok(())
        );
        let pem = ed25519_dalek::SigningKey::from_bytes(&[7; 32])
            .to_pkcs8_pem(Default::default())
            .map(|p| p.as_bytes().to_vec())
            .unwrap_or_default();
        assert_eq!(
            check(&grant("s"), Some(&secret(Some("true"), &pem))),
            Ok(())
        );
    }
}
