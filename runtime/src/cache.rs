//! On-disk cache of precompiled components, keyed by module digest and engine fingerprint.
//!
//! Compiling a component takes tens to hundreds of milliseconds; loading a precompiled artifact
//! is a `mmap`. The fingerprint (`Engine::precompile_compatibility_hash`) changes with the
//! Wasmtime version and every code-shaping setting, so a stale artifact is never loaded.
//!
//! Trust: artifacts are native code loaded without validation, so the cache directory must be
//! writable only by the executor's user (it is created `0700`).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a component came to be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Compiled now (cache miss or cache disabled).
    Compiled,
    /// Deserialized from a precompiled artifact on disk.
    Cache,
}

/// Where precompiled artifacts live (or nowhere, when disabled).
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: Option<PathBuf>,
    fingerprint: String,
}

impl ArtifactCache {
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            fingerprint: engine_fingerprint(engine),
        }
    }

    /// The default cache directory: `$XDG_CACHE_HOME/ari/modules`, else `~/.cache/ari/modules`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("ari").join("modules"))
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Hex digest of the engine's compatibility hash.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn artifact_path(&self, module_sha256: &str) -> Option<PathBuf> {
        let fp = &self.fingerprint[..16];
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{module_sha256}-{fp}.cwasm")))
    }

    /// Loads `bytes` (whose sha256 is `module_sha256`), from the cache when possible.
    /// A cache that cannot be read or written only costs a compile; it never fails the load.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        module_sha256: &str,
    ) -> wasmtime::Result<(Component, LoadSource)> {
        let Some(path) = self.artifact_path(module_sha256) else {
            return Ok((Component::new(engine, bytes)?, LoadSource::Compiled));
        };
        if path.is_file() {
            // SAFETY: the file was written by `store` below from `Engine::precompile_component`
            // into a directory only this user can write (see the module docs), and its name
            // binds it to the module digest and the engine fingerprint.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, LoadSource::Cache)),
                Err(err) => tracing::warn!(path = %path.display(), error = %err,
                    "unusable cached artifact; recompiling"),
            }
        }
        let artifact = engine.precompile_component(bytes)?;
        if let Err(err) = store(&path, &artifact) {
            tracing::warn!(path = %path.display(), error = %err, "could not write artifact cache");
        }
        // SAFETY: `artifact` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &artifact)? };
        Ok((component, LoadSource::Compiled))
    }
}

/// Writes to a temporary file in the same directory, then renames, so readers never see a
/// partial artifact and concurrent writers of the same key race harmlessly.
fn store(path: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("artifact path has no parent"))?;
    create_private_dir(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(artifact)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Feeds `Hash` output into SHA-256, so the fingerprint is stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex SHA-256 of everything that decides whether an artifact fits this engine.
pub fn engine_fingerprint(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(hasher.0.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_hex() {
        let engine = Engine::default();
        let a = engine_fingerprint(&engine);
        assert_eq!(a, engine_fingerprint(&engine));
        assert_eq!(a.len(), 64);
    }
}
