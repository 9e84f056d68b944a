//! A Task's attestation checked by verifiers no one in ari wrote: securesystemslib's DSSE
//! envelope verification and in-toto-attestation's Statement validation, from PyPI
//! (`scripts/intoto.sh`), driven by `e2e/intoto/check.py`.

use std::process::Command;

use anyhow::{Context, Result, bail};
use ari_model::Attestation;

use crate::repo_root;
use crate::scenario::installed_python;

/// What the in-toto verifiers said of an envelope.
#[derive(Debug)]
pub enum Verdict {
    /// Verified: the predicate type, the subjects by name, and the envelope's digest as
    /// Python computes it.
    Verified(serde_json::Value),
    /// Refused, with securesystemslib's reason.
    Refused(String),
}

/// Checks `envelope` against the hex Ed25519 `public_key` an Agent publishes.
pub fn check(envelope: &Attestation, public_key: &str) -> Result<Verdict> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("envelope.json");
    std::fs::write(&path, serde_json::to_vec(envelope)?)?;
    let out = Command::new(installed_python("ARI_INTOTO_PYTHON", "intoto.sh")?)
        .arg(repo_root().join("e2e/intoto/check.py"))
        .arg(&path)
        .arg(public_key)
        .output()
        .context("running e2e/intoto/check.py")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said: serde_json::Value = match serde_json::from_str(stdout.trim()) {
        Ok(v) => v,
        Err(_) => bail!(
            "check.py ({:?}) printed {stdout:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    Ok(match out.status.code() {
        Some(0) => Verdict::Verified(said),
        Some(3) => Verdict::Refused(said["error"].as_str().unwrap_or_default().to_owned()),
        code => bail!("check.py exited {code:?}: {stdout}"),
    })
}
