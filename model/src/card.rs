//! Signed A2A agent cards (A2A v1.0, section 8.4): an `AgentCardSignature` is a JWS (RFC 7515)
//! whose payload, detached, is the card's RFC 8785 (JCS) canonical JSON.
//!
//! - Payload: the card without `signatures`, empty strings, arrays and objects removed
//!   (recursively), then JCS ([`canonical`]). The removal is the A2A rule "omit default values"
//!   as the official `a2a-sdk` applies it, so its verifier rebuilds the same bytes. The card
//!   carries no other default-valued field (no `false` or `0` outside the `optional` booleans
//!   of `capabilities`), so nothing else would need removing.
//! - Protected header: `{"alg":"EdDSA","typ":"JOSE","kid":...}`, `kid` the attestation
//!   envelope's `keyid` (hex SHA-256 of the raw public key, [`crate::attestation::keyid`]).
//! - Signature: Ed25519 over `BASE64URL(header) "." BASE64URL(payload)`, base64url, unpadded.
//!
//! Three base64url parts are assembled by hand rather than with a JOSE crate: the one
//! algorithm is Ed25519, already a dependency, and the payload must be our exact canonical
//! bytes (a JOSE library that serialises a claims object itself would sign other bytes).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attestation::{keyid, sha256_hex};

/// The JWS `alg` of a card signature: Ed25519 (RFC 8037).
pub const ALG: &str = "EdDSA";
/// The JWS `typ` A2A recommends.
pub const TYP: &str = "JOSE";
/// The card field that holds signatures, excluded from what they cover.
pub const SIGNATURES: &str = "signatures";

/// An A2A `AgentCardSignature`, as the card's `signatures` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CardSignature {
    /// Base64url JSON of the JWS protected header (`alg`, `typ`, `kid`).
    pub protected: String,
    /// Base64url Ed25519 signature over the JWS signing input.
    pub signature: String,
}

/// A signature together with the card it covers, named by digest: the gateway serves the
/// signature only on a card whose digest is this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SignedCard {
    /// Lowercase hex SHA-256 of the card's canonical JSON (RFC 8785, without `signatures`
    /// and empty values).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[0-9a-f]{64}$")))]
    pub sha256: String,
    pub signature: CardSignature,
}

/// The JWS protected header of a card signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedHeader {
    pub alg: String,
    #[serde(default)]
    pub typ: Option<String>,
    #[serde(default)]
    pub kid: Option<String>,
}

/// Why a card could not be canonicalised or its signatures did not hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CardError {
    #[error("the card is not a JSON object")]
    NotAnObject,
    #[error("the card has no RFC 8785 canonical form: {0}")]
    Canonical(String),
    #[error("the card has no signatures")]
    Unsigned,
    #[error("no signature on the card verifies with key {kid}")]
    NoValidSignature { kid: String },
}

/// The bytes a card signature covers: the card without `signatures` and empty values, in
/// RFC 8785 canonical JSON.
pub fn canonical(card: &Value) -> Result<Vec<u8>, CardError> {
    let Value::Object(fields) = card else {
        return Err(CardError::NotAnObject);
    };
    let mut fields = fields.clone();
    fields.remove(SIGNATURES);
    let pruned = prune(Value::Object(fields)).unwrap_or(Value::Object(Default::default()));
    serde_jcs::to_vec(&pruned).map_err(|e| CardError::Canonical(e.to_string()))
}

/// `value` without empty strings, arrays and objects at any depth; `None` when it is itself
/// empty after that.
fn prune(value: Value) -> Option<Value> {
    match value {
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let kept: Vec<Value> = items.into_iter().filter_map(prune).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(fields) => {
            let kept: serde_json::Map<String, Value> = fields
                .into_iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other),
    }
}

/// Hex SHA-256 of the card's [`canonical`] JSON: what [`SignedCard::sha256`] names.
pub fn sha256(card: &Value) -> Result<String, CardError> {
    Ok(sha256_hex(&canonical(card)?))
}

/// Signs `card` (its `signatures`, if any, are not covered) with `key`. Ed25519 is
/// deterministic: the same card and key give the same signature.
pub fn sign(card: &Value, key: &SigningKey) -> Result<SignedCard, CardError> {
    let payload = canonical(card)?;
    let header = ProtectedHeader {
        alg: ALG.to_owned(),
        typ: Some(TYP.to_owned()),
        kid: Some(keyid(&key.verifying_key())),
    };
    // A struct of strings always serialises.
    let header_json = serde_json::to_vec(&header).unwrap_or_default();
    let protected = B64URL.encode(header_json);
    let signature = key.sign(&signing_input(&protected, &payload));
    Ok(SignedCard {
        sha256: sha256_hex(&payload),
        signature: CardSignature {
            protected,
            signature: B64URL.encode(signature.to_bytes()),
        },
    })
}

/// The JWS signing input: `protected "." BASE64URL(payload)`.
fn signing_input(protected: &str, payload: &[u8]) -> Vec<u8> {
    format!("{protected}.{}", B64URL.encode(payload)).into_bytes()
}

/// Adds `signed`'s signature to `card` when it covers this very card, and says whether it
/// did. A signature made for another card (the Agent changed and was not signed again yet)
/// is left off: the card goes out unsigned rather than with a signature that fails.
pub fn attach(card: &mut Value, signed: &SignedCard) -> bool {
    if sha256(card).ok().as_deref() != Some(signed.sha256.as_str()) {
        return false;
    }
    let Value::Object(fields) = card else {
        return false;
    };
    let entry = serde_json::to_value(&signed.signature).unwrap_or(Value::Null);
    fields.insert(SIGNATURES.to_owned(), Value::Array(vec![entry]));
    true
}

/// The protected header a signature carries, if it decodes.
pub fn protected_header(sig: &CardSignature) -> Option<ProtectedHeader> {
    let bytes = B64URL.decode(sig.protected.as_bytes()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Checks that at least one of the card's signatures is an EdDSA signature by `key` over the
/// card as it is: what any A2A client that trusts `key` checks.
pub fn verify(card: &Value, key: &VerifyingKey) -> Result<(), CardError> {
    let signatures: Vec<CardSignature> = card
        .get(SIGNATURES)
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    if signatures.is_empty() {
        return Err(CardError::Unsigned);
    }
    let payload = canonical(card)?;
    let kid = keyid(key);
    let holds = |sig: &CardSignature| -> Option<()> {
        let header = protected_header(sig)?;
        // The algorithm is fixed, never taken from the header (no algorithm confusion).
        if header.alg != ALG || header.kid.as_deref().is_some_and(|k| k != kid) {
            return None;
        }
        let raw: [u8; 64] = B64URL
            .decode(sig.signature.as_bytes())
            .ok()?
            .try_into()
            .ok()?;
        key.verify_strict(
            &signing_input(&sig.protected, &payload),
            &Signature::from_bytes(&raw),
        )
        .ok()
    };
    if signatures.iter().any(|s| holds(s).is_some()) {
        Ok(())
    } else {
        Err(CardError::NoValidSignature { kid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card() -> Value {
        json!({
            "name": "wordcount",
            "description": "Counts words",
            "version": "0.0.0+generation.1",
            "capabilities": {"streaming": true, "pushNotifications": false},
            "securityRequirements": [{"schemes": {"kubernetes": {"list": []}}}],
            "skills": [{"id": "count", "name": "Count", "description": "", "tags": ["text"], "examples": []}],
        })
    }

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7; 32])
    }

    #[test]
    fn the_payload_is_jcs_without_signatures_or_empty_values() {
        let mut c = card();
        c[SIGNATURES] = json!([{"protected": "x", "signature": "y"}]);
        let text = String::from_utf8(canonical(&c).expect("canonical")).expect("utf-8");
        assert_eq!(
            text,
            r#"{"capabilities":{"pushNotifications":false,"streaming":true},"description":"Counts words","name":"wordcount","skills":[{"id":"count","name":"Count","tags":["text"]}],"version":"0.0.0+generation.1"}"#
        );
        assert_eq!(canonical(&json!([1])), Err(CardError::NotAnObject));
    }

    #[test]
    fn a_signed_card_verifies_and_its_header_names_the_key() {
        let k = key();
        let signed = sign(&card(), &k).expect("signed");
        assert_eq!(sign(&card(), &k), Ok(signed.clone()), "deterministic");
        let header = protected_header(&signed.signature).expect("header");
        assert_eq!(header.alg, "EdDSA");
        assert_eq!(header.typ.as_deref(), Some("JOSE"));
        assert_eq!(header.kid, Some(keyid(&k.verifying_key())));
        let mut c = card();
        assert!(attach(&mut c, &signed));
        assert_eq!(verify(&c, &k.verifying_key()), Ok(()));
    }

    #[test]
    fn a_changed_card_or_another_key_does_not_verify() {
        let k = key();
        let signed = sign(&card(), &k).expect("signed");
        let mut c = card();
        assert!(attach(&mut c, &signed));
        let mut tampered = c.clone();
        tampered["description"] = json!("Counts words, and sends them elsewhere");
        assert!(matches!(
            verify(&tampered, &k.verifying_key()),
            Err(CardError::NoValidSignature { .. })
        ));
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        assert!(matches!(
            verify(&c, &other),
            Err(CardError::NoValidSignature { .. })
        ));
        assert_eq!(
            verify(&card(), &k.verifying_key()),
            Err(CardError::Unsigned)
        );
    }

    #[test]
    fn a_signature_for_another_card_is_not_attached() {
        let signed = sign(&card(), &key()).expect("signed");
        let mut changed = card();
        changed["version"] = json!("0.0.0+generation.2");
        assert!(!attach(&mut changed, &signed));
        assert!(changed.get(SIGNATURES).is_none());
    }

    #[test]
    fn a_header_naming_another_algorithm_is_refused() {
        let k = key();
        let mut signed = sign(&card(), &k).expect("signed");
        let header = json!({"alg": "HS256", "typ": "JOSE", "kid": keyid(&k.verifying_key())});
        signed.signature.protected = B64URL.encode(header.to_string());
        // A valid Ed25519 signature over that header: only the algorithm is wrong.
        let payload = canonical(&card()).expect("canonical");
        let sig = k.sign(&signing_input(&signed.signature.protected, &payload));
        signed.signature.signature = B64URL.encode(sig.to_bytes());
        let mut c = card();
        assert!(attach(&mut c, &signed));
        assert!(verify(&c, &k.verifying_key()).is_err());
    }
}
