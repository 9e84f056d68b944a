//! Signed attestations: what ran, on what, producing what, signed by the executor.
//!
//! Canonical encoding (what the Ed25519 signature covers): the UTF-8 bytes of the compact JSON
//! object with exactly these keys in this order and no whitespace:
//! `format, moduleSha256, inputSha256, outputSha256, seed, resourcesUsed{fuel, cpuMillis,
//! memoryBytes, storageBytes, networkBytes, wallMillis}, traceSha256, executor, publicKey`.
//! Numbers are unsigned decimal integers; strings are JSON strings escaped as serde_json does
//! (only `"`, `\` and control characters; everything else literal UTF-8). Digests, the seed, the
//! public key and the signature are lowercase hex.

use std::path::Path;

use ed25519_dalek::pkcs8::DecodePrivateKey;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::metering::ResourcesUsed;

/// The `format` value of this version.
pub const FORMAT: &str = "ari.dev/attestation/v1";

/// An executor's signed statement about one task. Goes into `Task.status.attestation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    pub format: String,
    pub module_sha256: String,
    pub input_sha256: String,
    pub output_sha256: String,
    /// The PRNG seed (hex, 32 bytes) the task ran with.
    pub seed: String,
    pub resources_used: ResourcesUsed,
    /// Digest of the recorded host-call trace.
    pub trace_sha256: String,
    /// Who ran it (pod or host name).
    pub executor: String,
    /// Ed25519 verifying key (hex, 32 bytes).
    pub public_key: String,
    /// Ed25519 signature (hex, 64 bytes) over [`Attestation::canonical_bytes`].
    pub signature: String,
}

/// The signed part, in canonical order. Field order here *is* the encoding; do not reorder.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    format: &'a str,
    module_sha256: &'a str,
    input_sha256: &'a str,
    output_sha256: &'a str,
    seed: &'a str,
    resources_used: &'a ResourcesUsed,
    trace_sha256: &'a str,
    executor: &'a str,
    public_key: &'a str,
}

/// What an attestation states, before signing.
#[derive(Debug, Clone)]
pub struct Claims {
    pub module_sha256: String,
    pub input_sha256: String,
    pub output_sha256: String,
    pub seed: [u8; 32],
    pub resources_used: ResourcesUsed,
    pub trace_sha256: [u8; 32],
    pub executor: String,
}

/// Why an attestation does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttestationError {
    #[error("unsupported attestation format {0:?} (expected {FORMAT:?})")]
    Format(String),
    #[error("public key is not a valid Ed25519 key: {0}")]
    PublicKey(String),
    #[error("signature is malformed: {0}")]
    SignatureEncoding(String),
    #[error("signature does not match the attestation contents (tampered or wrong key)")]
    BadSignature,
    #[error("attestation is signed by {actual}, not the trusted key {expected}")]
    UntrustedKey { expected: String, actual: String },
}

impl Attestation {
    /// Signs `claims` with `key`.
    pub fn sign(claims: Claims, key: &SigningKey) -> Self {
        let mut att = Attestation {
            format: FORMAT.to_string(),
            module_sha256: claims.module_sha256,
            input_sha256: claims.input_sha256,
            output_sha256: claims.output_sha256,
            seed: hex::encode(claims.seed),
            resources_used: claims.resources_used,
            trace_sha256: hex::encode(claims.trace_sha256),
            executor: claims.executor,
            public_key: hex::encode(key.verifying_key().as_bytes()),
            signature: String::new(),
        };
        att.signature = hex::encode(key.sign(&att.canonical_bytes()).to_bytes());
        att
    }

    /// The bytes the signature covers (see the module docs).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let body = Body {
            format: &self.format,
            module_sha256: &self.module_sha256,
            input_sha256: &self.input_sha256,
            output_sha256: &self.output_sha256,
            seed: &self.seed,
            resources_used: &self.resources_used,
            trace_sha256: &self.trace_sha256,
            executor: &self.executor,
            public_key: &self.public_key,
        };
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Checks the format and the signature against the embedded public key, and, when
    /// `trusted` is given, that the embedded key is that one.
    pub fn verify_signature(&self, trusted: Option<&VerifyingKey>) -> Result<(), AttestationError> {
        if self.format != FORMAT {
            return Err(AttestationError::Format(self.format.clone()));
        }
        let key = parse_public_key(&self.public_key)?;
        if let Some(trusted) = trusted
            && trusted != &key
        {
            return Err(AttestationError::UntrustedKey {
                expected: hex::encode(trusted.as_bytes()),
                actual: self.public_key.clone(),
            });
        }
        let sig_bytes = hex::decode(&self.signature)
            .map_err(|e| AttestationError::SignatureEncoding(e.to_string()))?;
        let sig = Signature::from_slice(&sig_bytes)
            .map_err(|e| AttestationError::SignatureEncoding(e.to_string()))?;
        key.verify(&self.canonical_bytes(), &sig)
            .map_err(|_| AttestationError::BadSignature)
    }
}

/// Parses a hex Ed25519 public key.
pub fn parse_public_key(hex_key: &str) -> Result<VerifyingKey, AttestationError> {
    let bytes =
        hex::decode(hex_key.trim()).map_err(|e| AttestationError::PublicKey(e.to_string()))?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| AttestationError::PublicKey("expected 32 bytes".into()))?;
    VerifyingKey::from_bytes(&arr).map_err(|e| AttestationError::PublicKey(e.to_string()))
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Why a signing key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("key file {path} is not a PKCS#8 PEM Ed25519 key, 64 hex digits or 32 raw bytes")]
    Format { path: String },
}

/// Loads an Ed25519 signing key: PKCS#8 PEM, 32 bytes as 64 hex digits, or 32 raw bytes.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_signing_key(&bytes).ok_or_else(|| KeyError::Format {
        path: path.display().to_string(),
    })
}

/// Parses the formats of [`load_signing_key`].
pub fn parse_signing_key(bytes: &[u8]) -> Option<SigningKey> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        let text = text.trim();
        if text.starts_with("-----BEGIN") {
            return SigningKey::from_pkcs8_pem(text).ok();
        }
        if let Ok(raw) = hex::decode(text)
            && let Ok(arr) = <[u8; 32]>::try_from(raw.as_slice())
        {
            return Some(SigningKey::from_bytes(&arr));
        }
    }
    <[u8; 32]>::try_from(bytes)
        .ok()
        .map(|arr| SigningKey::from_bytes(&arr))
}

/// A fresh key from the OS RNG (for `ari run` without `--key`).
pub fn generate_signing_key() -> SigningKey {
    SigningKey::generate(&mut rand_core::OsRng)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            module_sha256: sha256_hex(b"module"),
            input_sha256: sha256_hex(b"in"),
            output_sha256: sha256_hex(b"out"),
            seed: [7; 32],
            resources_used: ResourcesUsed {
                fuel: 42,
                ..Default::default()
            },
            trace_sha256: [1; 32],
            executor: "test \"pod\"".into(),
        }
    }

    #[test]
    fn signed_attestation_verifies_and_tampering_fails() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        assert_eq!(att.verify_signature(None), Ok(()));
        assert_eq!(att.verify_signature(Some(&key.verifying_key())), Ok(()));

        let mut tampered = att.clone();
        tampered.output_sha256 = sha256_hex(b"other");
        assert_eq!(
            tampered.verify_signature(None),
            Err(AttestationError::BadSignature)
        );

        let mut fuel = att.clone();
        fuel.resources_used.fuel += 1;
        assert_eq!(
            fuel.verify_signature(None),
            Err(AttestationError::BadSignature)
        );

        let other = SigningKey::from_bytes(&[4; 32]);
        assert!(matches!(
            att.verify_signature(Some(&other.verifying_key())),
            Err(AttestationError::UntrustedKey { .. })
        ));
    }

    #[test]
    fn canonical_encoding_has_fixed_order_and_no_whitespace() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        let text = String::from_utf8(att.canonical_bytes()).expect("utf8");
        assert!(text.starts_with("{\"format\":\"ari.dev/attestation/v1\",\"moduleSha256\":"));
        assert!(text.contains("\"resourcesUsed\":{\"fuel\":42,\"cpuMillis\":0,"));
        assert!(text.ends_with(&format!("\"publicKey\":\"{}\"}}", att.public_key)));
        assert!(!text.contains("signature"));
        assert!(!text.contains(": "));
    }

    #[test]
    fn keys_parse_from_hex_raw_and_pem() {
        use ed25519_dalek::pkcs8::EncodePrivateKey;
        let key = SigningKey::from_bytes(&[9; 32]);
        let hex_form = hex::encode(key.to_bytes());
        assert_eq!(
            parse_signing_key(hex_form.as_bytes()).map(|k| k.to_bytes()),
            Some(key.to_bytes())
        );
        assert_eq!(
            parse_signing_key(&key.to_bytes()).map(|k| k.to_bytes()),
            Some(key.to_bytes())
        );
        let pem = key
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .expect("pem");
        assert_eq!(
            parse_signing_key(pem.as_bytes()).map(|k| k.to_bytes()),
            Some(key.to_bytes())
        );
        assert!(parse_signing_key(b"nonsense").is_none());
    }
}
