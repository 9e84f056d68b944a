//! The key the host loaded for the `signing` grant: the agent's own Ed25519 key (never the
//! attestation key). The model's `SigningGrant` says where it lives; this is the key itself.

use std::path::Path;

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::DecodePrivateKey;

use crate::capability::GrantError;

#[derive(Debug, Clone)]
pub struct LoadedSigningKey {
    pub key: SigningKey,
}

impl LoadedSigningKey {
    pub fn from_key(key: SigningKey) -> Self {
        Self { key }
    }

    /// Parses key material: PKCS#8 PEM, or 64 hex characters (the 32-byte secret).
    pub fn parse_key(text: &str) -> Result<SigningKey, GrantError> {
        let text = text.trim();
        let invalid = |reason: String| GrantError::Invalid {
            grant: "signing",
            reason,
        };
        if text.starts_with("-----BEGIN") {
            return SigningKey::from_pkcs8_pem(text)
                .map_err(|e| invalid(format!("bad PKCS#8 PEM: {e}")));
        }
        let bytes =
            hex::decode(text).map_err(|_| invalid("expected PKCS#8 PEM or 64 hex chars".into()))?;
        let secret: [u8; 32] = bytes
            .try_into()
            .map_err(|_| invalid("a hex key must be exactly 64 hex chars".into()))?;
        Ok(SigningKey::from_bytes(&secret))
    }

    /// Reads a key file (see [`LoadedSigningKey::parse_key`]).
    pub fn from_file(path: &Path) -> Result<Self, GrantError> {
        let text = std::fs::read_to_string(path).map_err(|e| GrantError::Invalid {
            grant: "signing",
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        Ok(Self::from_key(Self::parse_key(&text)?))
    }
}
