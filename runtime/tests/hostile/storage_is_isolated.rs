//! Storage: the quota holds and one Agent's keys are invisible to another, on every backend.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ari_runtime::FailureKind;
use ari_runtime::capability::storage::{
    Batch, MemoryBackend, RedbBackend, RedisBackend, StorageBackend,
};

use crate::common::*;
use crate::support::*;

#[test]
fn hoarder_hits_its_quota() {
    let o = run("hoarder", "1000", grants(&["storage=64KiB"]));
    assert_failed(&o, FailureKind::CapabilityDenied, "quota");
}

/// Seeds the victim's namespace, runs snoop in its own namespace of the same store, and checks
/// snoop saw nothing and the victim lost nothing.
fn snoop_against(mut victim: Box<dyn StorageBackend>, snoop: Box<dyn StorageBackend>) {
    victim
        .apply(&Batch {
            writes: vec![
                ("secret".into(), b"hunter2".to_vec()),
                ("token".into(), b"t0k3n".to_vec()),
            ],
            ..Batch::default()
        })
        .expect("seed victim");
    let used = victim.used_bytes().expect("used");
    let mut req = request("default/victim\nsecret\ntoken", grants(&["storage=1MiB"]));
    req.storage = Some(snoop);
    let o = agent("snoop").run(req);
    assert_eq!(o.failure, None, "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.output).expect("json report");
    assert_eq!(
        report["found"],
        serde_json::json!([]),
        "snoop found: {report}"
    );
    assert!(report["probes"].as_u64() > Some(40), "{report}");
    assert!(report["writes"].as_u64() > Some(30), "{report}");
    // Empty and over-long keys are refused, not mapped onto something else.
    assert!(report["errors"].as_u64() >= Some(2), "{report}");
    let out = output(&o);
    assert!(!out.contains("hunter2") && !out.contains("t0k3n"), "{out}");
    // The victim's state is untouched by snoop's deletes and overwrites.
    assert_eq!(
        victim.get("secret").expect("get").as_deref(),
        Some(&b"hunter2"[..])
    );
    assert_eq!(
        victim.get("token").expect("get").as_deref(),
        Some(&b"t0k3n"[..])
    );
    assert_eq!(victim.used_bytes().expect("used"), used);
    assert_echo_works();
}

#[test]
fn snoop_sees_nothing_of_another_agent_in_redb() {
    let dir = tempfile::tempdir().expect("tempdir");
    let victim = RedbBackend::open(dir.path(), "default/victim").expect("redb");
    let snoop = victim.for_agent("default/snoop");
    snoop_against(Box::new(victim), Box::new(snoop));
}

#[test]
fn snoop_sees_nothing_of_another_agent_in_memory() {
    snoop_against(
        Box::new(MemoryBackend::new()),
        Box::new(MemoryBackend::new()),
    );
}

/// A real `redis-server` on a free loopback port; killed on drop.
struct RedisServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> Option<Self> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let Some(bin) = std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
            .map(|d| d.join("redis-server"))
            .find(|p| p.is_file())
        else {
            eprintln!("NOTICE: redis-server not found; skipping the Redis snoop test");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let dir = tempfile::tempdir().expect("tempdir");
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let server = Self {
            child,
            url: format!("redis://127.0.0.1:{port}/"),
            _dir: dir,
        };
        // Polls until the server answers (start-up, not synchronisation between test steps).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut b) = RedisBackend::connect(&server.url, "probe")
                && b.used_bytes().is_ok()
            {
                return Some(server);
            }
            assert!(Instant::now() < deadline, "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn snoop_sees_nothing_of_another_agent_in_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let victim = RedisBackend::connect(&server.url, "default/victim").expect("redis");
    let snoop = victim.for_agent("default/snoop");
    snoop_against(Box::new(victim), Box::new(snoop));
}
