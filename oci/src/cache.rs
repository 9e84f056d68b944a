//! A disk cache of pulled modules, keyed by layer digest, so a restarted operator or executor
//! does not pull again. Files are trusted only after their bytes hash to their name.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;

use crate::Error;
use crate::digest::{sha256_digest, sha256_hex};

/// Modules on disk, one file per `sha256:` digest, named by its hex. Blocking I/O: async callers
/// should run it on a blocking thread for large modules. Pulls stream into it (see
/// [`Incoming`]), so a module is never held whole in memory while it downloads.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        let temp = self.temp_path(digest);
        let written = write_synced(&temp, bytes).and_then(|()| fs::rename(&temp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(io_error("writing the module cache", &path, e));
        }
        Ok(())
    }

    /// Removes the entry for `digest`, if any (the operator keeps no modules: it only checks
    /// them, and a tenant must not fill its disk).
    pub fn remove(&self, digest: &str) {
        if let Some(path) = self.path_of(digest) {
            let _ = fs::remove_file(path);
        }
    }

    /// A writer for the bytes of `digest`, hashed as they are written and put in place only if
    /// they hash to it.
    pub(crate) async fn incoming(&self, digest: &str) -> Result<Incoming, Error> {
        let Some(path) = self.path_of(digest) else {
            return Err(Error::InvalidReference(format!(
                "{digest:?} is not a sha256 digest"
            )));
        };
        let temp = self.temp_path(digest);
        let file = tokio::fs::File::create(&temp)
            .await
            .map_err(|e| io_error("writing the module cache", &temp, e))?;
        Ok(Incoming {
            file,
            temp,
            path,
            digest: digest.to_string(),
            hasher: Sha256::new(),
            written: 0,
            done: false,
        })
    }

    /// A temp file name no other writer uses (the pid covers other processes).
    fn temp_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir.join(format!(
            ".tmp-{}-{}-{hex}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// The file for `digest`; `None` for anything but a well-formed sha256 digest, so a digest
    /// can never name a path outside the directory.
    fn path_of(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|hex| self.dir.join(hex))
    }
}

/// A module streaming into the cache. Dropped before [`Incoming::finish`], its temp file is
/// removed.
pub(crate) struct Incoming {
    file: tokio::fs::File,
    temp: PathBuf,
    path: PathBuf,
    digest: String,
    hasher: Sha256,
    written: u64,
    done: bool,
}

impl Incoming {
    pub(crate) async fn write(&mut self, chunk: &[u8]) -> Result<(), Error> {
        self.hasher.update(chunk);
        self.written += chunk.len() as u64;
        self.file
            .write_all(chunk)
            .await
            .map_err(|e| io_error("writing the module cache", &self.temp, e))
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Puts the file in place if the bytes hash to the digest; a mismatch is refused and the
    /// file removed.
    pub(crate) async fn finish(mut self) -> Result<(), Error> {
        let actual = format!("sha256:{}", hex::encode(self.hasher.clone().finalize()));
        if actual != self.digest {
            return Err(Error::DigestMismatch {
                expected: self.digest.clone(),
                actual,
            });
        }
        let io = |e| io_error("writing the module cache", &self.path, e);
        self.file.flush().await.map_err(io)?;
        self.file.sync_all().await.map_err(io)?;
        tokio::fs::rename(&self.temp, &self.path)
            .await
            .map_err(io)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.temp);
        }
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

    #[tokio::test]
    async fn a_stream_is_put_in_place_only_when_it_hashes_to_its_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ModuleCache::new(dir.path()).expect("cache");
        let digest = sha256_digest(b"streamed");
        let mut good = cache.incoming(&digest).await.expect("incoming");
        good.write(b"stream").await.expect("write");
        good.write(b"ed").await.expect("write");
        assert_eq!(good.written(), 8);
        good.finish().await.expect("finish");
        assert_eq!(cache.get(&digest).as_deref(), Some(&b"streamed"[..]));
        cache.remove(&digest);

        let mut bad = cache.incoming(&digest).await.expect("incoming");
        bad.write(b"junk").await.expect("write");
        let err = bad.finish().await.expect_err("mismatch");
        assert_eq!(err.reason(), "DigestMismatch");
        let abandoned = cache.incoming(&digest).await.expect("incoming");
        drop(abandoned);
        assert_eq!(cache.get(&digest), None);
        let left = fs::read_dir(dir.path()).expect("read_dir").count();
        assert_eq!(left, 0, "no temp files are left");
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
