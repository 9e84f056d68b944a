//! Maps container images to host binaries: there is no container runtime here, so an image
//! stands for "this binary" (its entrypoint).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Image-prefix → binary table. The longest matching prefix wins; a prefix matches either the
/// whole image reference or its last path segment (`ghcr.io/x/ari-executor:1` matches
/// `ari-executor`).
#[derive(Clone, Debug, Default)]
pub struct ImageMap {
    entries: Vec<(String, PathBuf)>,
}

impl ImageMap {
    /// Builds the table from `prefix → binary` pairs.
    pub fn new(images: HashMap<String, PathBuf>) -> ImageMap {
        let mut entries: Vec<_> = images.into_iter().collect();
        entries.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        ImageMap { entries }
    }

    /// The binary standing for `image`, or a message naming the known prefixes.
    pub fn resolve(&self, image: &str) -> Result<&Path, String> {
        let last = image.rsplit('/').next().unwrap_or(image);
        self.entries
            .iter()
            .find(|(prefix, _)| image.starts_with(prefix.as_str()) || last.starts_with(prefix.as_str()))
            .map(|(_, p)| p.as_path())
            .ok_or_else(|| {
                let known: Vec<&str> = self.entries.iter().map(|(p, _)| p.as_str()).collect();
                format!(
                    "image {image:?} is not mapped to a host binary by the ari e2e node agent (mapped prefixes: {})",
                    known.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_and_last_segment_match() {
        let map = ImageMap::new(HashMap::from([
            ("ari".to_string(), PathBuf::from("/a")),
            ("ari-executor".to_string(), PathBuf::from("/e")),
        ]));
        assert_eq!(map.resolve("ari-executor:dev"), Ok(Path::new("/e")));
        assert_eq!(
            map.resolve("ghcr.io/x/ari-executor@sha256:ab"),
            Ok(Path::new("/e"))
        );
        assert_eq!(map.resolve("ari-operator"), Ok(Path::new("/a")));
        let err = map.resolve("nginx").unwrap_err();
        assert!(
            err.contains("nginx") && err.contains("ari-executor"),
            "{err}"
        );
    }
}
