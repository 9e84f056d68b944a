//! The namespace's attestation signing key: an Ed25519 key in Secret `ari-attestation-key`.
//!
//! Generated once (create, never overwrite: a concurrent create loses with 409 and re-reads),
//! never logged. Executors get the private key via `secretKeyRef`; the public key goes into
//! every Agent's `status.attestationPublicKey`.

use std::collections::BTreeMap;

use ari_crds::names;
use ed25519_dalek::SigningKey;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

/// Why the key could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("secret {secret} holds no valid {key} (expected 64 hex digits)")]
    Malformed {
        secret: &'static str,
        key: &'static str,
    },
}

/// The public key (hex) of a Secret's private key, if it holds a valid one.
pub fn public_key_hex(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    let raw = data.get(names::ATTESTATION_PRIVATE_KEY)?;
    let text = std::str::from_utf8(&raw.0).ok()?;
    let bytes: [u8; 32] = hex::decode(text.trim()).ok()?.try_into().ok()?;
    Some(hex::encode(
        SigningKey::from_bytes(&bytes).verifying_key().to_bytes(),
    ))
}

/// A fresh Secret holding a new key.
pub fn new_secret(namespace: &str) -> Secret {
    let key = SigningKey::generate(&mut rand_core::OsRng);
    let private = hex::encode(key.to_bytes());
    let public = hex::encode(key.verifying_key().to_bytes());
    Secret {
        metadata: ObjectMeta {
            name: Some(names::ATTESTATION_SECRET.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "ari-operator".to_owned(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (
                names::ATTESTATION_PRIVATE_KEY.to_owned(),
                ByteString(private.into_bytes()),
            ),
            (
                names::ATTESTATION_PUBLIC_KEY.to_owned(),
                ByteString(public.into_bytes()),
            ),
        ])),
        ..Default::default()
    }
}

/// Returns the namespace's public key, creating the Secret on first use.
pub async fn ensure(api: &Api<Secret>, namespace: &str) -> Result<String, KeyError> {
    let malformed = KeyError::Malformed {
        secret: names::ATTESTATION_SECRET,
        key: names::ATTESTATION_PRIVATE_KEY,
    };
    if let Some(existing) = api.get_opt(names::ATTESTATION_SECRET).await? {
        return public_key_hex(&existing).ok_or(malformed);
    }
    let secret = new_secret(namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(created) => public_key_hex(&created).ok_or(malformed),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(names::ATTESTATION_SECRET).await?;
            public_key_hex(&existing).ok_or(malformed)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_secret_public_key_matches_its_private_key() {
        let s = new_secret("ns");
        let derived = public_key_hex(&s);
        let stored = s
            .data
            .as_ref()
            .and_then(|d| d.get(names::ATTESTATION_PUBLIC_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        assert!(derived.is_some());
        assert_eq!(derived, stored);
        assert_ne!(
            public_key_hex(&new_secret("ns")),
            derived,
            "keys must be fresh"
        );
    }
}
