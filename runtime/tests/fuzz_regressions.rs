//! Replays every input in `fuzz/regressions/<target>/` (crashes `scripts/fuzz.sh` found, plus
//! the seeds) through the same property checks the fuzz targets run, so a fixed crash stays
//! fixed under a plain `cargo test`.

#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

/// Every file under `fuzz/regressions/<target>/` and `fuzz/seeds/<target>/`.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in ["regressions", "seeds"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() && !path.ends_with(".gitkeep") {
                let bytes = std::fs::read(&path).expect("read input");
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no inputs for {target}");
    out
}

fn replay(target: &str, check: fn(&[u8])) {
    for (path, bytes) in inputs(target) {
        let result = std::panic::catch_unwind(|| check(&bytes));
        assert!(
            result.is_ok(),
            "{} fails the {target} check",
            path.display()
        );
    }
}

#[test]
fn allowlist_regressions() {
    replay("allowlist", checks::allowlist);
}

#[test]
fn attestation_regressions() {
    replay("attestation", checks::attestation);
}

#[test]
fn load_regressions() {
    replay("load", checks::load);
}
