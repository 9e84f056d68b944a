//! Image references (`registry/repository[:tag][@sha256:digest]`), parsed by `oci-client` and
//! narrowed to what this crate can verify.

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::digest::is_sha256;

/// A validated image reference. A reference without a tag or digest means `:latest`, as with
/// container images; one with `@sha256:` is pinned to exact bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference(oci_client::Reference);

impl Reference {
    /// Parses and validates `s`. Only sha256 digests are accepted, in lowercase: that is the one
    /// hash the pull verifies with, so a pin in any other form could not be checked.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        let inner = oci_client::Reference::try_from(s)
            .map_err(|e| Error::InvalidReference(format!("{s:?}: {e}")))?;
        if let Some(digest) = inner.digest()
            && !is_sha256(digest)
        {
            return Err(Error::InvalidReference(format!(
                "{s:?}: only lowercase sha256 digests are supported, got {digest:?}"
            )));
        }
        Ok(Reference(inner))
    }

    /// Whether the reference names exact content (`@sha256:`): a pinned module can neither change
    /// under a moved tag nor be pulled as anything but those bytes.
    pub fn is_pinned(&self) -> bool {
        self.0.digest().is_some()
    }

    /// The registry as written (`docker.io` for Docker Hub), the key a pull secret is found by.
    pub fn registry(&self) -> &str {
        self.0.registry()
    }

    /// The `host[:port]` requests go to (`index.docker.io` for Docker Hub).
    pub fn resolve_registry(&self) -> &str {
        self.0.resolve_registry()
    }

    pub fn repository(&self) -> &str {
        self.0.repository()
    }

    pub fn tag(&self) -> Option<&str> {
        self.0.tag()
    }

    /// The pinned `sha256:` digest, if any.
    pub fn digest(&self) -> Option<&str> {
        self.0.digest()
    }

    /// The same repository pinned to `digest` (the tag dropped): what to record once a tag has
    /// been resolved, so later pulls get the same bytes.
    pub fn pinned_to(&self, digest: &str) -> Result<Reference, Error> {
        if !is_sha256(digest) {
            return Err(Error::InvalidReference(format!(
                "{digest:?} is not a sha256 digest"
            )));
        }
        Ok(Reference(self.0.clone_with_digest(digest.to_string())))
    }

    /// The same repository and tag, the digest dropped.
    pub(crate) fn tag_only(&self) -> Option<Reference> {
        let tag = self.0.tag()?;
        Some(Reference(oci_client::Reference::with_tag(
            self.0.registry().to_string(),
            self.0.repository().to_string(),
            tag.to_string(),
        )))
    }

    pub(crate) fn as_oci(&self) -> &oci_client::Reference {
        &self.0
    }
}

impl FromStr for Reference {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Reference::parse(s)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn a_reference_with_a_sha256_digest_is_pinned() {
        let r = Reference::parse(&format!("ghcr.io/acme/agent@{DIGEST}")).expect("parses");
        assert!(r.is_pinned());
        assert_eq!(r.digest(), Some(DIGEST));
        assert_eq!(r.tag(), None);
    }

    #[test]
    fn a_tag_and_a_digest_is_pinned_and_keeps_both() {
        let r =
            Reference::parse(&format!("127.0.0.1:5000/agents/clock:v1@{DIGEST}")).expect("parses");
        assert!(r.is_pinned());
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "agents/clock");
        assert_eq!(r.tag(), Some("v1"));
        assert_eq!(
            r.tag_only().map(|t| t.to_string()).as_deref(),
            Some("127.0.0.1:5000/agents/clock:v1")
        );
    }

    #[test]
    fn a_tag_alone_is_not_pinned_and_no_tag_means_latest() {
        let tagged = Reference::parse("ghcr.io/acme/agent:v1").expect("parses");
        assert!(!tagged.is_pinned());
        let bare = Reference::parse("ghcr.io/acme/agent").expect("parses");
        assert!(!bare.is_pinned());
        assert_eq!(bare.tag(), Some("latest"));
    }

    #[test]
    fn docker_hub_short_names_expand_and_resolve_to_the_index() {
        let r = Reference::parse("clock:v1").expect("parses");
        assert_eq!(r.registry(), "docker.io");
        assert_eq!(r.repository(), "library/clock");
        assert_eq!(r.resolve_registry(), "index.docker.io");
    }

    #[test]
    fn malformed_references_are_invalid_image_references() {
        let digest_upper = format!(
            "ghcr.io/acme/agent@{}",
            DIGEST.to_uppercase().replace("SHA256", "sha256")
        );
        let sha512 = format!("ghcr.io/acme/agent@sha512:{}", "a".repeat(128));
        for bad in [
            "",
            "Ghcr.io/Acme/Agent:v1",
            "ghcr.io/acme/agent:",
            "ghcr.io/acme/agent@sha256:abc",
            "ghcr.io/acme agent:v1",
            digest_upper.as_str(),
            sha512.as_str(),
        ] {
            let err = Reference::parse(bad).expect_err(bad);
            assert_eq!(err.reason(), "InvalidImageReference", "{bad}: {err}");
        }
    }

    #[test]
    fn pinning_a_resolved_tag_drops_the_tag() {
        let r = Reference::parse("ghcr.io/acme/agent:v1").expect("parses");
        let pinned = r.pinned_to(DIGEST).expect("pins");
        assert!(pinned.is_pinned());
        assert_eq!(pinned.to_string(), format!("ghcr.io/acme/agent@{DIGEST}"));
        assert!(r.pinned_to("sha256:nothex").is_err());
    }
}
