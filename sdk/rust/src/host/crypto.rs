//! Hashing and Ed25519 signatures done by the host, so agents carry no crypto code.

use super::wit;
use crate::Error;

/// SHA-256 of `data` (always available).
pub fn hash(data: &[u8]) -> Vec<u8> {
    wit::hash(data)
}

/// SHA-256 of `data` as lower-case hex.
pub fn hash_hex(data: &[u8]) -> String {
    crate::hex::encode(&hash(data))
}

/// Ed25519 signature of `data` with the agent's granted key (capability `signing`).
pub fn sign(data: &[u8]) -> Result<Vec<u8>, Error> {
    wit::sign(data).map_err(Error::Host)
}

/// Whether `signature` is a valid Ed25519 signature of `data` by `public_key` (always available).
pub fn verify(data: &[u8], signature: &[u8], public_key: &[u8]) -> bool {
    wit::verify(data, signature, public_key)
}
