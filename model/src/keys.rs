//! Ed25519 signing keys in the forms users hand them over: PKCS#8 PEM, 64 hex digits or 32 raw
//! bytes. The operator (checking a signing Secret) and the executor (loading it) accept exactly
//! the same forms because both call [`parse_signing_key`].

use std::path::Path;

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::DecodePrivateKey;

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
