//! Hashing and Ed25519 signatures done by the host, so agents carry no crypto code.

use super::wit;
use crate::Error;

pub use crate::bindings::ainur::ari::types::HashAlgorithm;

/// SHA-256 of `data` (always available).
pub fn hash(data: &[u8]) -> Vec<u8> {
    wit::hash(HashAlgorithm::Sha256, data)
}

/// `data`'s digest under `algorithm` (SHA-256, SHA-384 or SHA-512; always available).
pub fn digest(algorithm: HashAlgorithm, data: &[u8]) -> Vec<u8> {
    wit::hash(algorithm, data)
}

/// SHA-256 of `data` as lower-case hex.
pub fn hash_hex(data: &[u8]) -> String {
    crate::hex::encode(&hash(data))
}

/// Ed25519 signature of `data` with the Agent's granted key (capability `signing`).
pub fn sign(data: &[u8]) -> Result<Vec<u8>, Error> {
    wit::sign(data).map_err(Error::from)
}

/// Whether `signature` is a valid Ed25519 signature of `data` by `public_key` (always available).
pub fn verify(public_key: &[u8], data: &[u8], signature: &[u8]) -> bool {
    wit::verify(public_key, data, signature)
}
