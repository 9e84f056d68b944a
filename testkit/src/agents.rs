//! The example agents, built once into `target/agents/` (or `$ARI_TARGET_DIR/agents/`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The repository's root (this crate sits one level below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn agents_dir() -> PathBuf {
    match std::env::var_os("ARI_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("agents"),
        None => repo_root().join("target").join("agents"),
    }
}

static BUILD: Mutex<bool> = Mutex::new(false);

/// Path of an example agent, building the agents once if it is missing.
pub fn agent_path(name: &str) -> PathBuf {
    let path = agents_dir().join(format!("{name}.wasm"));
    if !path.is_file() {
        let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        if !*built && !path.is_file() {
            let status = Command::new(repo_root().join("scripts/build-agents.sh")).status();
            assert!(
                matches!(status, Ok(s) if s.success()),
                "building the example agents failed; run scripts/build-agents.sh ({status:?})"
            );
            *built = true;
        }
    }
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-agents.sh",
        path.display()
    );
    path
}

pub fn agent_bytes(name: &str) -> Vec<u8> {
    std::fs::read(agent_path(name)).expect("read agent")
}
