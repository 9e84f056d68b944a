//! Helpers for the runtime's tests: real components from `target/agents/`, one runtime per
//! test binary (so hostile tasks and normal tasks share it, as in a worker).

use std::sync::{Arc, OnceLock};

use ari_runtime::capability::Grants;
use ari_runtime::{Limits, LoadedAgent, Runtime, RuntimeConfig, TaskOutcome, TaskRequest};
use ed25519_dalek::SigningKey;

pub use crate::agents::{agent_bytes, agent_path, repo_root};
pub use crate::http;

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
