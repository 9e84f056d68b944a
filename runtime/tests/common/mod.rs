//! Shared helpers for the runtime tests: real components from `target/agents/`, one runtime per
//! test binary (so hostile tasks and normal tasks share it, as in a worker).
#![allow(dead_code)]

pub mod http;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use ari_runtime::capability::Grants;
use ari_runtime::{Limits, LoadedAgent, Runtime, RuntimeConfig, TaskOutcome, TaskRequest};
use ed25519_dalek::SigningKey;

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

/// One runtime per test binary, with a private artifact cache.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        Runtime::new(RuntimeConfig {
            cache_dir: Some(dir),
            ..Default::default()
        })
        .expect("runtime")
    })
}

pub fn agent(name: &str) -> LoadedAgent {
    runtime().load(&agent_bytes(name)).expect("load agent")
}

pub fn key() -> Arc<SigningKey> {
    static KEY: OnceLock<Arc<SigningKey>> = OnceLock::new();
    KEY.get_or_init(|| Arc::new(SigningKey::from_bytes(&[42; 32])))
        .clone()
}

pub fn grants(args: &[&str]) -> Grants {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    Grants::parse_cli(&args).expect("grants")
}

pub fn request(input: &str, grants: Grants) -> TaskRequest {
    let mut req = TaskRequest::new("test-task", input.as_bytes().to_vec(), key());
    req.grants = grants;
    req.seed = Some([7; 32]);
    req.start_unix_nanos = Some(1_700_000_000_000_000_000);
    req.executor = "test".into();
    req
}

pub fn run(name: &str, input: &str, grants: Grants) -> TaskOutcome {
    agent(name).run(request(input, grants))
}

pub fn run_with_limits(name: &str, input: &str, limits: Limits) -> TaskOutcome {
    let mut req = request(input, Grants::default());
    req.limits = limits;
    agent(name).run(req)
}

pub fn output(o: &TaskOutcome) -> String {
    String::from_utf8_lossy(&o.output).into_owned()
}

/// Asserts the runtime still serves a normal task.
pub fn assert_echo_works() {
    let o = run("echo", "still alive", Grants::default());
    assert_eq!(o.failure, None, "echo after a hostile task");
    assert_eq!(output(&o), "still alive");
}
