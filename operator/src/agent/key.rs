//! The namespace's attestation signing key: an Ed25519 key.
//!
//! The source of truth is a Secret in the operator's own namespace
//! (`ari-attestation-key.<namespace>`), which namespace users cannot write. The Secret
//! `ari-attestation-key` in the tenant namespace is only the copy the executor pods consume
//! through `secretKeyRef`; every reconcile re-asserts it, replacing it (and saying so) when it
//! differs. The public key in `status.attestationPublicKey` comes from the source, never from
//! the copy. Generated once (create, never overwrite: a concurrent create loses with 409 and
//! re-reads), never logged.

use std::collections::BTreeMap;

use ari_crds::names;
use ed25519_dalek::SigningKey;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

/// Why the key could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("secret {secret} holds no valid {key} (expected 64 hex digits)")]
    Malformed { secret: String, key: &'static str },
}

/// The namespace's key as the operator knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// Hex public key, from the source of truth.
    pub public_key: String,
    /// The key itself, for signing the namespace's A2A cards (its `Debug` shows only the
    /// public half).
    pub signing: SigningKey,
    /// The tenant copy existed but differed, and was replaced.
    pub restored: bool,
}

/// The private key a Secret holds, if it holds a valid one.
fn signing_key(secret: &Secret) -> Option<SigningKey> {
    let data = secret.data.as_ref()?;
    let raw = data.get(names::ATTESTATION_PRIVATE_KEY)?;
    let text = std::str::from_utf8(&raw.0).ok()?;
    let bytes: [u8; 32] = hex::decode(text.trim()).ok()?.try_into().ok()?;
    Some(SigningKey::from_bytes(&bytes))
}

/// The public key (hex) of a Secret's private key, if it holds a valid one.
pub fn public_key_hex(secret: &Secret) -> Option<String> {
    signing_key(secret).map(|k| hex::encode(k.verifying_key().to_bytes()))
}

/// A fresh source Secret (in `operator_ns`) holding a new key for `namespace`.
pub fn new_secret(operator_ns: &str, namespace: &str) -> Secret {
    let key = SigningKey::generate(&mut rand_core::OsRng);
    let private = hex::encode(key.to_bytes());
    let public = hex::encode(key.verifying_key().to_bytes());
    Secret {
        metadata: ObjectMeta {
            name: Some(names::attestation_source_name(namespace)),
            namespace: Some(operator_ns.to_owned()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "ari-operator".to_owned(),
                ),
                (
                    names::LABEL_ATTESTATION_FOR.to_owned(),
                    namespace.to_owned(),
                ),
            ])),
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

/// The tenant copy of `source`: same key, named for the executor pods.
pub fn tenant_copy(source: &Secret, namespace: &str) -> Secret {
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
        data: source.data.clone(),
        ..Default::default()
    }
}

/// Whether the tenant copy is exactly what the operator would write.
fn is_faithful(copy: &Secret, want: &Secret) -> bool {
    copy.data == want.data && copy.type_.as_deref().unwrap_or("Opaque") == "Opaque"
}

/// The source Secret of `namespace`, created on first use.
async fn source(
    operator: &Api<Secret>,
    operator_ns: &str,
    namespace: &str,
) -> Result<Secret, kube::Error> {
    let name = names::attestation_source_name(namespace);
    if let Some(existing) = operator.get_opt(&name).await? {
        return Ok(existing);
    }
    match operator
        .create(&PostParams::default(), &new_secret(operator_ns, namespace))
        .await
    {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(s)) if s.code == 409 => operator.get(&name).await,
        Err(e) => Err(e),
    }
}

/// Returns the namespace's public key (from the source in the operator's namespace) and
/// re-asserts the tenant copy, replacing it when someone changed it.
pub async fn ensure(
    operator: &Api<Secret>,
    operator_ns: &str,
    tenant: &Api<Secret>,
    namespace: &str,
) -> Result<Ensured, KeyError> {
    let src = source(operator, operator_ns, namespace).await?;
    let signing = signing_key(&src).ok_or_else(|| KeyError::Malformed {
        secret: format!(
            "{operator_ns}/{}",
            names::attestation_source_name(namespace)
        ),
        key: names::ATTESTATION_PRIVATE_KEY,
    })?;
    let public_key = hex::encode(signing.verifying_key().to_bytes());
    let want = tenant_copy(&src, namespace);
    let mut restored = false;
    match tenant.get_opt(names::ATTESTATION_SECRET).await? {
        Some(copy) if is_faithful(&copy, &want) => {}
        existing => {
            if existing.is_some() {
                // Delete and create rather than replace: the planted Secret's type may be
                // immutable and different.
                match tenant
                    .delete(names::ATTESTATION_SECRET, &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                restored = true;
            }
            match tenant.create(&PostParams::default(), &want).await {
                Ok(_) => {}
                // Recreated under our feet: the next reconcile compares again.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Ensured {
        public_key,
        signing,
        restored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_secret_public_key_matches_its_private_key() {
        let s = new_secret("ari-system", "ns");
        let derived = public_key_hex(&s);
        let stored = s
            .data
            .as_ref()
            .and_then(|d| d.get(names::ATTESTATION_PUBLIC_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        assert!(derived.is_some());
        assert_eq!(derived, stored);
        assert_ne!(
            public_key_hex(&new_secret("ari-system", "ns")),
            derived,
            "keys must be fresh"
        );
    }
}
