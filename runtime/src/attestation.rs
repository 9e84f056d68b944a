//! Attestations as the runtime signs them. The format, its canonical encoding and verification
//! belong to the model (`ari_model::attestation`), shared with the CRDs and `ari verify`; the key
//! forms to `ari_model::keys`. Here: the tests that guest signatures and attestation signatures
//! can never stand in for each other, which need the runtime's crypto capability.

pub use ari_model::attestation::*;
pub use ari_model::keys::*;

#[cfg(test)]
mod tests {
    use ari_model::{CapabilityName, LimitsApplied, ResourcesUsed};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use ed25519_dalek::SigningKey;

    use super::*;
    use crate::capability::LoadedSigningKey;
    use crate::capability::crypto::CryptoCapability;

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
