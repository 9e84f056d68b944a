//! Hashing (always), Ed25519 signing with the granted key, verification (always).
//!
//! Guest signatures are domain-separated: `sign(data)` signs
//! [`crate::attestation::GUEST_SIGNATURE_CONTEXT`] ‖ data and `verify` checks the same, so a
//! guest holding any key can never produce an attestation signature (those sign a DSSE PAE).

mod grant;
mod link;
pub use grant::LoadedSigningKey;
pub use link::FUEL;

use ed25519_dalek::{Signature, Signer, VerifyingKey};
use sha2::{Digest, Sha256, Sha384, Sha512};

use ari_model::CapabilityName;

use super::{CapError, Capability, Grants, TaskSetup};
use crate::attestation::guest_signed_message;
use crate::host::HostFunctions;

/// The digests `hash` offers (the WIT `hash-algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    Sha256,
    Sha384,
    Sha512,
}

pub struct CryptoCapability {
    signing: Option<LoadedSigningKey>,
}

impl CryptoCapability {
    pub fn new(signing: Option<LoadedSigningKey>) -> Self {
        Self { signing }
    }

    pub fn hash(&self, algorithm: HashAlgorithm, data: &[u8]) -> Vec<u8> {
        match algorithm {
            HashAlgorithm::Sha256 => Sha256::digest(data).to_vec(),
            HashAlgorithm::Sha384 => Sha384::digest(data).to_vec(),
            HashAlgorithm::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Signs with the Agent's one granted key.
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, CapError> {
        let grant = self
            .signing
            .as_ref()
            .ok_or_else(|| CapError::not_granted("signing"))?;
        Ok(grant
            .key
            .sign(&guest_signed_message(data))
            .to_bytes()
            .to_vec())
    }

    /// Strict Ed25519 verification of a guest signature (context prefix applied); malformed
    /// keys or signatures are simply `false`.
    pub fn verify(&self, pk: &[u8], data: &[u8], sig: &[u8]) -> bool {
        let (Ok(pk), Ok(sig)) = (<[u8; 32]>::try_from(pk), <[u8; 64]>::try_from(sig)) else {
            return false;
        };
        let Ok(key) = VerifyingKey::from_bytes(&pk) else {
            return false;
        };
        key.verify_strict(&guest_signed_message(data), &Signature::from_bytes(&sig))
            .is_ok()
    }

    /// The public key of the granted signing key, if any.
    pub fn public_key(&self) -> Option<[u8; 32]> {
        self.signing
            .as_ref()
            .map(|g| g.key.verifying_key().to_bytes())
    }
}

impl Capability for CryptoCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Signing);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, _task: &mut TaskSetup) -> Self {
        Self::new(grants.key().cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    #[test]
    fn crypto_hash_is_sha256() {
        let c = CryptoCapability::new(None);
        assert_eq!(
            hex::encode(c.hash(HashAlgorithm::Sha256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(c.hash(HashAlgorithm::Sha384, b"abc").len(), 48);
        assert_eq!(
            &hex::encode(c.hash(HashAlgorithm::Sha512, b"abc"))[..16],
            "ddaf35a193617aba"
        );
    }

    #[test]
    fn crypto_sign_needs_grant_and_verifies() {
        assert!(matches!(
            CryptoCapability::new(None).sign(b"x"),
            Err(CapError::Denied(_))
        ));
        let c = CryptoCapability::new(Some(LoadedSigningKey::from_key(SigningKey::from_bytes(
            &[3; 32],
        ))));
        let sig = c.sign(b"hello").unwrap();
        let pk = c.public_key().unwrap();
        assert!(c.verify(&pk, b"hello", &sig));
        assert!(!c.verify(&pk, b"hellO", &sig));
        assert!(!c.verify(&pk, b"hello", &sig[..63]));
        assert!(!c.verify(&pk[..31], b"hello", &sig));
        assert!(!c.verify(&[0u8; 32], b"hello", &sig));
    }

    #[test]
    fn guest_signatures_cover_the_context_prefix_and_not_the_bare_data() {
        use ed25519_dalek::Verifier;
        let key = SigningKey::from_bytes(&[3; 32]);
        let c = CryptoCapability::new(Some(LoadedSigningKey::from_key(key.clone())));
        let sig = Signature::from_slice(&c.sign(b"hello").unwrap()).unwrap();
        let vk = key.verifying_key();
        assert!(vk.verify(b"hello", &sig).is_err());
        let mut prefixed = b"ari.dev/guest-signature/v1\0".to_vec();
        prefixed.extend_from_slice(b"hello");
        assert!(vk.verify_strict(&prefixed, &sig).is_ok());
        // A signature over the bare data (what an attestation key makes) is not a guest one.
        let bare = key.sign(b"hello").to_bytes();
        assert!(!c.verify(&vk.to_bytes(), b"hello", &bare));
    }
}
