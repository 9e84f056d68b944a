//! Attestations as the runtime signs them. The format, its canonical encoding and verification
//! belong to the model (`ari_model::attestation`), shared with the CRDs and `ari verify`; the key
//! forms to `ari_model::keys`. Here: the tests that guest signatures and attestation signatures
//! can never stand in for each other, which need the runtime's crypto capability.

pub use ari_model::attestation::*;
pub use ari_model::keys::*;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use ed25519_dalek::SigningKey;

/// Signs a run's `claims` with `key` (see [`ed25519_sign`]).
pub fn sign_run(claims: Claims, key: &SigningKey) -> Attestation {
    Attestation::sign_with(claims, &key.verifying_key(), |message| {
        ed25519_sign(key, message)
    })
}

/// The Ed25519 signature of `message` under `key`, through AWS-LC: the same bytes
/// ed25519-dalek gives (Ed25519 is deterministic) in about 56 % of its time, whose fixed-base
/// multiplication runs on portable field arithmetic where AWS-LC's runs on s2n-bignum's
/// assembly. The signature was two thirds of an `echo` Task's instructions (BENCHMARKS.md).
/// A key AWS-LC does not take signs through ed25519-dalek, as before.
pub fn ed25519_sign(key: &SigningKey, message: &[u8]) -> [u8; 64] {
    use ed25519_dalek::Signer as _;
    let Some(pair) = key_pair(key) else {
        return key.sign(message).to_bytes();
    };
    let mut sig = [0u8; 64];
    sig.copy_from_slice(pair.sign(message).as_ref());
    sig
}

/// Keys turned into AWS-LC key pairs at most: an executor signs with its attestation key
/// (one per namespace), so a handful are in use; past this the cache starts again.
const KEY_PAIRS: usize = 64;

/// `key` as an AWS-LC key pair, made once per key (making one costs a public-key
/// derivation, about half a signature) and checked to have `key`'s public key.
fn key_pair(key: &SigningKey) -> Option<Arc<Ed25519KeyPair>> {
    static PAIRS: OnceLock<Mutex<HashMap<[u8; 32], Arc<Ed25519KeyPair>>>> = OnceLock::new();
    let public = key.verifying_key().to_bytes();
    let mut pairs = PAIRS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(pair) = pairs.get(&public) {
        return Some(pair.clone());
    }
    let pair = Ed25519KeyPair::from_seed_unchecked(key.as_bytes()).ok()?;
    if pair.public_key().as_ref() != public {
        return None;
    }
    if pairs.len() >= KEY_PAIRS {
        pairs.clear();
    }
    let pair = Arc::new(pair);
    pairs.insert(public, pair.clone());
    Some(pair)
}

#[cfg(test)]
mod tests {
    use ari_model::{CapabilityName, LimitsApplied, ResourcesUsed};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use ed25519_dalek::SigningKey;

    use super::*;
    use crate::capability::LoadedSigningKey;
    use crate::capability::crypto::CryptoCapability;

    #[test]
    fn a_run_signed_through_aws_lc_is_byte_for_byte_the_one_ed25519_dalek_signs() {
        for seed in [
            [0u8; 32],
            [7; 32],
            [0xff; 32],
            *b"ari attestation key, 32 bytes!!!",
        ] {
            let key = SigningKey::from_bytes(&seed);
            let fast = sign_run(claims(), &key);
            assert_eq!(fast, Attestation::sign(claims(), &key), "seed {seed:?}");
            assert!(fast.verify(Some(&key.verifying_key())).is_ok());
            // The cached pair signs the next run the same way.
            assert_eq!(sign_run(claims(), &key), fast);
        }
    }

    fn claims() -> Claims {
        Claims {
            task: TaskIdentity {
                namespace: "team-a".into(),
                name: "t1".into(),
                uid: "0000-1111".into(),
            },
            module_sha256: sha256_hex(b"module"),
            input_sha256: sha256_hex(b"in"),
            config_sha256: sha256_hex(b""),
            requirements: vec![CapabilityName::Signing],
            seed: [7; 32],
            limits_applied: LimitsApplied {
                fuel: 1000,
                capabilities: vec![CapabilityName::Signing],
                ..LimitsApplied::default()
            },
            failure: None,
            output_sha256: sha256_hex(b"out"),
            resources_used: ResourcesUsed::default(),
            models: Vec::new(),
            children: Vec::new(),
            approvals: Vec::new(),
            input_required: false,
            conversation: None,
            trace_sha256: [1; 32],
            executor: "pod".into(),
        }
    }

    #[test]
    fn a_guest_signature_over_an_attestation_body_is_not_an_attestation_signature() {
        // The attack: the guest holds the attestation key and signs whatever bytes it likes.
        let key = SigningKey::from_bytes(&[3; 32]);
        let guest = CryptoCapability::new(Some(LoadedSigningKey::from_key(key.clone())));
        let att = Attestation::sign(claims(), &key);
        let payload = att.payload_bytes().expect("base64");
        for message in [payload.clone(), pae(PAYLOAD_TYPE, &payload)] {
            let mut forged = att.clone();
            forged.signatures[0].sig = STANDARD.encode(guest.sign(&message).expect("granted"));
            assert_eq!(
                forged.verify(Some(&key.verifying_key())),
                Err(AttestationError::BadSignature)
            );
        }
    }

    #[test]
    fn an_attestation_signature_does_not_verify_as_a_guest_signature() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        let sig = STANDARD.decode(&att.signatures[0].sig).expect("base64");
        let guest = CryptoCapability::new(None);
        let pk = key.verifying_key().to_bytes();
        let payload = att.payload_bytes().expect("base64");
        assert!(!guest.verify(&pae(PAYLOAD_TYPE, &payload), &sig, &pk));
        assert!(!guest.verify(&payload, &sig, &pk));
    }
}
