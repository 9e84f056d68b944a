//! Maps container images to host binaries: there is no container runtime here, so an image
//! stands for "this binary" (its entrypoint), plus the environment the image sets for it (a
//! Dockerfile's `ENV`), which is how a host binary finds what the real image carries as files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Image-prefix → binary table. The longest matching prefix wins; a prefix matches either the
/// whole image reference or its last path segment (`ghcr.io/x/ari-executor:1` matches
/// `ari-executor`).
#[derive(Clone, Debug, Default)]
pub struct ImageMap {
    entries: Vec<(String, PathBuf)>,
    /// Image prefix → the variables the image sets; the pod spec's `env` overrides them.
    env: Vec<(String, Vec<(String, String)>)>,
}

impl ImageMap {
    /// Builds the table from `prefix → binary` pairs.
    pub fn new(images: HashMap<String, PathBuf>) -> ImageMap {
        let mut entries: Vec<_> = images.into_iter().collect();
        entries.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        ImageMap {
            entries,
            env: Vec::new(),
        }
    }

    /// The table with `env` (image prefix → variables) as the images' own environment.
    pub fn with_env(mut self, env: Vec<(String, Vec<(String, String)>)>) -> ImageMap {
        self.env = env;
        self.env
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        self
    }

    /// The variables `image` sets for its entrypoint (longest matching prefix), if any.
    pub fn env(&self, image: &str) -> &[(String, String)] {
        self.env
            .iter()
            .find(|(prefix, _)| matches(prefix, image))
            .map_or(&[], |(_, vars)| vars.as_slice())
    }

    /// The binary standing for `image`, or a message naming the known prefixes.
    pub fn resolve(&self, image: &str) -> Result<&Path, String> {
        self.entries
            .iter()
            .find(|(prefix, _)| matches(prefix, image))
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

/// Whether `prefix` matches the whole image reference or its last path segment.
fn matches(prefix: &str, image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    image.starts_with(prefix) || last.starts_with(prefix)
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

    #[test]
    fn an_image_sets_its_own_environment_by_the_longest_prefix() {
        let vars = |v: &str| vec![("ARI_STOCK_AGENT".to_string(), v.to_string())];
        let map = ImageMap::new(HashMap::new()).with_env(vec![
            ("ari".to_string(), vars("/short")),
            ("ari-executor".to_string(), vars("/long")),
        ]);
        assert_eq!(
            map.env("ghcr.io/x/ari-executor:1"),
            vars("/long").as_slice()
        );
        assert_eq!(map.env("ari-operator"), vars("/short").as_slice());
        assert!(map.env("nginx").is_empty());
    }
}
