//! End-to-end harness: a real Kubernetes control plane built from Go modules
//! (`scripts/control-plane.sh`), a node agent that runs pods as host processes, and helpers
//! for the scenarios in `tests/`. See docs/e2e.md.

pub mod bench;
mod binaries;
mod certs;
mod cluster;
mod error;
mod http;
pub mod intoto;
mod kubeconfig;
pub mod namespace_user;
mod node;
mod process;
pub mod redis;
pub mod registry;
pub mod scenario;
pub mod soak;
pub mod stress;
pub mod trials;
pub mod wait;

use std::collections::HashMap;
use std::path::PathBuf;

pub use binaries::{build_bin_dir, find_bin_dir, repo_root};
pub use certs::KubeletPki;
pub use cluster::{Cluster, new_namespace};
pub use error::{Error, Result};
pub use node::{ImageMap, NodeAgent};
pub use process::log_tail;

/// Image prefix of the executor; maps to the `ari` binary.
pub const EXECUTOR_IMAGE: &str = "ari-executor";
/// Image prefix of the operator; maps to the `ari-operator` binary.
pub const OPERATOR_IMAGE: &str = "ari-operator";
/// Image prefix of the A2A gateway; maps to the `ari-gateway` binary.
pub const GATEWAY_IMAGE: &str = "ari-gateway";

/// The cargo target directory (`$CARGO_TARGET_DIR` or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// The stock agent component that runs declarative Agents (`stock/declarative`), where
/// `scripts/build-agents.sh` puts it.
pub fn stock_agent() -> PathBuf {
    target_dir().join("agents").join("declarative.wasm")
}

/// What ari's images set for their entrypoints (image prefix → variables). The release images
/// carry the stock agent component at `/usr/share/ari/declarative.wasm`; the node agent's
/// images are host binaries with no files of their own, so the operator's and the executor's
/// name the built component with `ARI_STOCK_AGENT`, the override both read (docs/declarative.md).
pub fn ari_image_env() -> Vec<(String, Vec<(String, String)>)> {
    let stock = (
        "ARI_STOCK_AGENT".to_string(),
        stock_agent().display().to_string(),
    );
    [EXECUTOR_IMAGE, OPERATOR_IMAGE]
        .into_iter()
        .map(|image| (image.to_string(), vec![stock.clone()]))
        .collect()
}

/// Build profiles to take pod binaries from, this binary's own first: a release benchmark runs
/// release pods, a debug test suite debug ones, and either falls back to what is built.
fn profiles() -> [&'static str; 2] {
    if cfg!(debug_assertions) {
        ["debug", "release"]
    } else {
        ["release", "debug"]
    }
}

/// `bin` as built in this binary's profile, else the other; `None` when not built.
pub fn built_binary(bin: &str) -> Option<PathBuf> {
    profiles()
        .iter()
        .map(|p| target_dir().join(p).join(bin))
        .find(|p| p.is_file())
}

/// The image map for ari's own binaries: `ari-executor*` → `ari`, `ari-operator*` →
/// `ari-operator`, `ari-gateway*` → `ari-gateway`, taken from the target directory of this
/// binary's own profile (see [`profiles`]), else the other. Binaries that are not built are left out, so pods
/// using them report the missing mapping. `ARI_EXECUTOR_BIN` names another executor binary
/// (a benchmark comparing two builds).
pub fn ari_images() -> HashMap<String, PathBuf> {
    let mut images = HashMap::new();
    for (image, bin) in [
        (EXECUTOR_IMAGE, "ari"),
        (OPERATOR_IMAGE, "ari-operator"),
        (GATEWAY_IMAGE, "ari-gateway"),
    ] {
        let chosen = (image == EXECUTOR_IMAGE)
            .then(|| std::env::var_os("ARI_EXECUTOR_BIN").map(PathBuf::from))
            .flatten();
        let found = chosen.or_else(|| built_binary(bin));
        if let Some(path) = found {
            images.insert(image.to_string(), path);
        }
    }
    images
}
