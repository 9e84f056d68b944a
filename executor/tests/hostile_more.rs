//! The second round of hostile agents: host-call loops, a 4 GiB memory request, storage
//! snooping, WASI escapes and log floods. Each ends with its own reason, the host stays
//! bounded, and the same runtime goes on serving.
mod common;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ari_executor::capability::Grants;
use ari_executor::capability::storage::{
    Batch, MemoryBackend, RedbBackend, RedisBackend, StorageBackend,
};
use ari_executor::{FailureKind, Limits, TaskOutcome};
use common::*;

/// Peak resident set of this test process (`VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// The executor process never came near committing what a guest asked for.
fn assert_host_memory_bounded() {
    let peak = peak_rss_bytes();
    assert!(
        peak < 1 << 30,
        "the test process peaked at {peak} bytes resident"
    );
}

fn assert_failed(o: &TaskOutcome, kind: FailureKind, needle: &str) {
    let f = o
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected {kind}, task succeeded: {:?}", output(o)));
    assert_eq!(f.kind, kind, "{f}");
    assert!(
        f.message.contains(needle),
        "message {:?} lacks {needle:?}",
        f.message
    );
    assert!(o.output.is_empty());
    assert!(o.attestation.verify_signature(None).is_ok());
    assert_echo_works();
}

/// Log bytes kept, markers included.
fn log_bytes(o: &TaskOutcome) -> usize {
    o.logs.iter().map(String::len).sum()
}

fn run_req(name: &str, input: &str, grants: Grants, limits: Limits) -> TaskOutcome {
    let mut req = request(input, grants);
    req.limits = limits;
    agent(name).run(req)
}

fn fuel(fuel: u64) -> Limits {
    Limits {
        fuel,
        ..Limits::default()
    }
}

// ---- hostcall-loop -------------------------------------------------------------------------

#[test]
fn hostcall_loop_every_call_runs_out_of_fuel() {
    // (mode, grants, fuel): host calls are charged, so each loop ends on fuel.
    let table: &[(&str, &[&str])] = &[
        ("log", &[]),
        ("hash", &[]),
        ("verify", &[]),
        ("random", &["randomness"]),
        ("storage-get", &["storage=1KiB"]),
        ("storage-set", &["storage=1KiB"]),
        ("now", &["time"]),
        ("wasi-clock", &["time"]),
        ("wasi-clock", &[]),
        ("stdout", &[]),
    ];
    for (mode, g) in table {
        let budget = 20_000_000;
        let o = run_req("hostcall-loop", mode, grants(g), fuel(budget));
        let f = o.failure.as_ref().expect("a loop never succeeds");
        assert_eq!(f.kind, FailureKind::FuelExhausted, "{mode} {g:?}: {f}");
        assert_eq!(o.resources_used.fuel, budget, "{mode}");
        assert!(log_bytes(&o) <= 64 * 1024 + 200, "{mode}: log not bounded");
    }
    assert_echo_works();
}

#[test]
fn hostcall_loop_denied_call_is_capability_denied_and_bounded() {
    // Each call is refused; the denials must not pile up in host memory.
    for (mode, g) in [("random", &[][..]), ("storage-get", &[]), ("now", &[])] {
        let o = run_req("hostcall-loop", mode, grants(g), fuel(50_000_000));
        assert_failed(&o, FailureKind::CapabilityDenied, "not granted");
        let f = o.failure.as_ref().expect("failed");
        assert!(f.message.contains("FuelExhausted"), "{mode}: {f}");
        assert!(
            f.message.len() < 1024,
            "{mode}: message grew to {}",
            f.message.len()
        );
    }
}

#[test]
fn hostcall_loop_with_huge_fuel_hits_the_deadline() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    for mode in ["log", "stdout"] {
        let o = run_req("hostcall-loop", mode, grants(&[]), limits.clone());
        assert_failed(&o, FailureKind::DeadlineExceeded, "deadline");
        assert!(log_bytes(&o) <= 64 * 1024 + 200, "{mode}: log not bounded");
    }
}

#[test]
fn hostcall_loop_recording_calls_stop_at_the_trace_ceiling() {
    // Every `now` and WASI clock read is recorded: a loop on them must not grow host memory
    // until the deadline. The trace ceiling (64 MiB) comes long before the default fuel runs out.
    for mode in ["now", "wasi-clock"] {
        let o = run_req("hostcall-loop", mode, grants(&["time"]), Limits::default());
        assert_failed(&o, FailureKind::Trap, "trace limit hit");
        let events = o.trace.events.len();
        assert!(events > 100_000, "{mode}: only {events} events");
        assert!(o.resources_used.fuel < Limits::default().fuel, "{mode}");
        let encoded = o.trace.canonical_bytes().len();
        assert!(encoded < 64 << 20, "{mode}: trace of {encoded} bytes");
    }
    assert_host_memory_bounded();
}

// ---- mega-memory ---------------------------------------------------------------------------

#[test]
fn mega_memory_is_refused_by_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    for mode in ["grow", "steps", "vec"] {
        let o = run_req("mega-memory", mode, grants(&[]), limits.clone());
        assert_failed(&o, FailureKind::Trap, "memory limit hit");
        assert!(
            o.resources_used.memory_bytes <= 64 << 20,
            "{mode}: {}",
            o.resources_used.memory_bytes
        );
    }
    assert_host_memory_bounded();
}

#[test]
fn mega_memory_over_a_huge_limit_is_clamped_and_refused() {
    // A manifest asking for 8 GiB gets the pool slot (1 GiB); 4 GiB is still refused.
    let limits = Limits {
        memory_bytes: 8 << 30,
        ..Limits::default()
    };
    let o = run_req("mega-memory", "grow", grants(&[]), limits);
    assert_eq!(o.limits_applied.memory_bytes, 1 << 30);
    assert_failed(&o, FailureKind::Trap, "memory limit hit");
    assert!(o.resources_used.memory_bytes <= 1 << 30);
    assert_host_memory_bounded();
}

// ---- snoop ---------------------------------------------------------------------------------

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

// ---- wasi-escape ---------------------------------------------------------------------------

#[test]
fn wasi_escape_gets_nothing_of_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "the-host-secret").expect("write secret");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    let marker = std::path::Path::new("/tmp/ari-wasi-escape");
    let marker_existed = marker.exists();

    let input = format!("path={}\ntcp={addr}", secret.display());
    let o = run("wasi-escape", &input, grants(&[]));
    assert_eq!(o.failure, None, "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.output).expect("json report");
    assert_eq!(report["leaks"], 0, "{report:#}");
    let attempts = report["attempts"].as_array().expect("attempts");
    assert!(attempts.len() >= 15, "{report:#}");
    for a in attempts {
        assert_eq!(a["leak"], false, "{a}");
    }
    let out = output(&o);
    assert!(
        !out.contains("the-host-secret") && !out.contains("root:"),
        "{out}"
    );
    // Nothing reached the listener, and no file appeared on the host.
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the guest reached a host socket: {other:?}"),
    }
    assert!(
        marker_existed || !marker.exists(),
        "the guest created a host file"
    );
    assert!(
        o.trace.events.is_empty(),
        "WASI calls must not reach recorded capabilities"
    );
    assert_echo_works();
}

// ---- loud-log ------------------------------------------------------------------------------

/// Counts the bytes of guest log events the host emits (target `ari::guest`).
struct GuestLogBytes(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GuestLogBytes {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Len(u64);
        impl tracing::field::Visit for Len {
            fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0 += format!("{v:?}").len() as u64;
            }
        }
        if event.metadata().target() == "ari::guest" {
            let mut len = Len(0);
            event.record(&mut len);
            self.0.fetch_add(len.0, Ordering::Relaxed);
        }
    }
}

#[test]
fn loud_log_is_capped_metered_and_bounded() {
    use tracing_subscriber::layer::SubscriberExt;
    let emitted = Arc::new(AtomicU64::new(0));
    let subscriber = tracing_subscriber::registry().with(GuestLogBytes(emitted.clone()));
    let o = tracing::subscriber::with_default(subscriber, || {
        run_req("loud-log", "8 100000", grants(&[]), Limits::default())
    });
    assert_eq!(o.failure, None, "{:?}", o.failure);
    let report: serde_json::Value = serde_json::from_slice(&o.output).expect("json report");
    let sent = report["bytes"].as_u64().expect("bytes");
    assert!(sent > 24 << 20, "{report}");
    // The task log holds at most the budget plus one marker that says what was dropped.
    assert!(log_bytes(&o) <= 64 * 1024 + 200, "kept {}", log_bytes(&o));
    let marker = o.logs.last().expect("a marker line");
    assert!(marker.contains("log truncated"), "{marker}");
    assert!(
        o.resources_used.fuel > 8 << 20,
        "the huge line was not charged"
    );
    // The executor's own log output is bounded the same way (dropped lines are not emitted).
    let emitted = emitted.load(Ordering::Relaxed);
    assert!(
        emitted <= 128 * 1024,
        "the host emitted {emitted} bytes of guest log"
    );
    assert_host_memory_bounded();
    assert_echo_works();
}

#[test]
fn loud_log_out_of_fuel_ends_on_fuel() {
    let o = run_req("loud-log", "8 100000", grants(&[]), fuel(4_000_000));
    assert_failed(&o, FailureKind::FuelExhausted, "fuel");
    assert!(log_bytes(&o) <= 64 * 1024 + 200);
}
