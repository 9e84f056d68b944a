//! sha256 content digests in the OCI form `sha256:<64 lowercase hex>`.
//!
//! Everything this crate trusts is named by one of these: a pinned reference, a manifest, a layer,
//! a cache file. Only sha256 is accepted, so one hash function checks all of them.

use sha2::{Digest as _, Sha256};

const PREFIX: &str = "sha256:";

/// The digest of `bytes`, as a registry names them.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("{PREFIX}{}", hex::encode(Sha256::digest(bytes)))
}

/// The hex part of a well-formed `sha256:` digest, or `None`: callers use it as a file name,
/// so anything but 64 lowercase hex digits is refused rather than normalised.
pub fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix(PREFIX)?;
    let well_formed = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    well_formed.then_some(hex)
}

/// Whether `digest` is a well-formed `sha256:` digest.
pub fn is_sha256(digest: &str) -> bool {
    sha256_hex(digest).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_empty_bytes_is_the_well_known_one() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn only_lowercase_sha256_digests_are_well_formed() {
        let good = sha256_digest(b"x");
        assert!(is_sha256(&good));
        assert!(!is_sha256(&good.to_uppercase()));
        assert!(!is_sha256(&good.replace("sha256:", "sha512:")));
        assert!(!is_sha256(&good[..good.len() - 1]));
        assert!(!is_sha256("sha256:../../etc/passwd"));
    }
}
