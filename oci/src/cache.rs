//! A disk cache of pulled modules, keyed by layer digest, so a restarted operator or executor
//! does not pull again. Files are trusted only after their bytes hash to their name.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;
use crate::digest::{sha256_digest, sha256_hex};

/// Modules on disk, one file per `sha256:` digest, named by its hex. Blocking I/O: async callers
/// should run it on a blocking thread for large modules.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: PathBuf,
}

/// Distinguishes temp files of concurrent writers in one process (the pid covers processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ModuleCache {
    /// A cache in `dir`, created if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, Error> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| io_error("creating the module cache", &dir, e))?;
        Ok(ModuleCache { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes stored under `digest`, or `None`. An entry whose bytes do not hash to its name
    /// (a torn write from another tool, disk corruption, tampering) is removed and is a miss, so
    /// the caller pulls it again rather than running it.
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path_of(digest)?;
        let bytes = fs::read(&path).ok()?;
        if sha256_digest(&bytes) == digest {
            Some(bytes)
        } else {
            let _ = fs::remove_file(&path);
            None
        }
    }

    /// Stores `bytes` under `digest`, refusing bytes that do not hash to it. Written to a temp
    /// file in the same directory and renamed, so readers never see a partial file.
    pub fn put(&self, digest: &str, bytes: &[u8]) -> Result<(), Error> {
        let Some(path) = self.path_of(digest) else {
            return Err(Error::InvalidReference(format!(
                "{digest:?} is not a sha256 digest"
            )));
        };
        let actual = sha256_digest(bytes);
        if actual != digest {
            return Err(Error::DigestMismatch {
                expected: digest.to_string(),
                actual,
            });
        }
        let temp = self.dir.join(format!(
            ".tmp-{}-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed),
            &digest["sha256:".len()..]
        ));
        let written = write_synced(&temp, bytes).and_then(|()| fs::rename(&temp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(io_error("writing the module cache", &path, e));
        }
        Ok(())
    }

    /// The file for `digest`; `None` for anything but a well-formed sha256 digest, so a digest
    /// can never name a path outside the directory.
    fn path_of(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|hex| self.dir.join(hex))
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn io_error(what: &str, path: &Path, e: io::Error) -> Error {
    Error::Other(format!("{what} ({}): {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_put_is_got() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ModuleCache::new(dir.path().join("modules")).expect("cache");
        let digest = sha256_digest(b"module");
        assert_eq!(cache.get(&digest), None);
        cache.put(&digest, b"module").expect("put");
        assert_eq!(cache.get(&digest).as_deref(), Some(&b"module"[..]));
        let name = digest.trim_start_matches("sha256:");
        assert!(cache.dir().join(name).is_file());
    }

    #[test]
    fn bytes_that_do_not_match_the_digest_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ModuleCache::new(dir.path()).expect("cache");
        let err = cache.put(&sha256_digest(b"a"), b"b").expect_err("mismatch");
        assert_eq!(err.reason(), "DigestMismatch");
        assert_eq!(
            cache.put("sha256:../x", b"b").map_err(|e| e.reason()),
            Err("InvalidImageReference")
        );
        assert_eq!(cache.get("sha256:../x"), None);
    }

    #[test]
    fn no_temp_files_are_left_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ModuleCache::new(dir.path()).expect("cache");
        cache.put(&sha256_digest(b"m"), b"m").expect("put");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("read_dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
