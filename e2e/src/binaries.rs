//! Locates the control-plane binaries built by `scripts/control-plane.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The binaries a cluster needs.
pub const REQUIRED: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// The repository root (this crate lives in `<repo>/e2e`).
pub fn repo_root() -> PathBuf {
    // At run time first: build outputs are cached outside the checkout and shared between
    // clones, so a path baked in at compile time may name another clone.
    let runtime = std::env::var_os("ARI_REPO").map(PathBuf::from).or_else(|| {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .and_then(|d| Path::new(&d).parent().map(Path::to_path_buf))
    });
    runtime
        .filter(|r| r.join("e2e").join("Cargo.toml").is_file())
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        })
}

/// `$ARI_CONTROL_PLANE_BIN`, else what `scripts/control-plane.sh --print` reports. Never builds:
/// a missing cache is an error that says which command builds it.
pub fn find_bin_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("ARI_CONTROL_PLANE_BIN") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => script_output(&["--print"])?,
    };
    check(&dir)?;
    Ok(dir)
}

/// Runs `scripts/control-plane.sh`, building the binaries if the cache is not current.
pub fn build_bin_dir() -> Result<PathBuf> {
    let dir = script_output(&[])?;
    check(&dir)?;
    Ok(dir)
}

fn script_output(args: &[&str]) -> Result<PathBuf> {
    let script = repo_root().join("scripts/control-plane.sh");
    let out = Command::new(&script)
        .args(args)
        .stderr(if args.is_empty() {
            std::process::Stdio::inherit()
        } else {
            std::process::Stdio::piped()
        })
        .output()
        .map_err(crate::error::io_err(&script))?;
    if !out.status.success() {
        return Err(Error::Binaries(format!(
            "{} {} failed: {}{}",
            script.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().trim();
    Ok(PathBuf::from(last))
}

fn check(dir: &Path) -> Result<()> {
    let missing: Vec<&str> = REQUIRED
        .into_iter()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Binaries(format!(
            "{} lacks {}; build them with scripts/control-plane.sh",
            dir.display(),
            missing.join(", ")
        )))
    }
}
