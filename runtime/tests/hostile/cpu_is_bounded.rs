//! CPU: fuel and the deadline stop guests that loop, in Wasm or through host calls.

use std::time::Duration;

use ari_runtime::{FailureKind, Grants, Limits};

use crate::common::*;
use crate::support::*;

#[test]
fn spin_runs_out_of_fuel() {
    let o = run_with_limits(
        "spin",
        "",
        Limits {
            fuel: 5_000_000,
            ..Limits::default()
        },
    );
    assert_failed(&o, FailureKind::FuelExhausted, "fuel");
    assert_eq!(o.resources_used.fuel, 5_000_000);
}

#[test]
fn spin_with_huge_fuel_hits_the_deadline() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let o = run_with_limits("spin", "", limits);
    assert_failed(&o, FailureKind::DeadlineExceeded, "deadline");
}

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
        ("now", &["timeAccess"]),
        ("wasi-clock", &["timeAccess"]),
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
        let o = run_req(
            "hostcall-loop",
            mode,
            grants(&["timeAccess"]),
            Limits::default(),
        );
        assert_failed(&o, FailureKind::Trap, "trace limit hit");
        let events = o.trace.events.len();
        assert!(events > 100_000, "{mode}: only {events} events");
        assert!(o.resources_used.fuel < Limits::default().fuel, "{mode}");
        let encoded = o.trace.canonical_bytes().len();
        assert!(encoded < 64 << 20, "{mode}: trace of {encoded} bytes");
    }
    assert_host_memory_bounded();
}

/// The executor lowers a CPU-bound guest's thread from that thread: the watch must be told
/// once, on the thread that runs the guest, after the CPU it names; a short task never tells it.
#[test]
fn a_cpu_watch_is_told_once_on_the_guests_thread_after_its_cpu_and_never_by_a_short_task() {
    use std::sync::{Arc, Mutex};
    let told = Arc::new(Mutex::new(Vec::new()));
    let watch = |told: &Arc<Mutex<Vec<std::thread::ThreadId>>>| {
        let told = told.clone();
        ari_runtime::CpuWatch {
            after: Duration::from_millis(30),
            reached: Arc::new(move || {
                if let Ok(mut t) = told.lock() {
                    t.push(std::thread::current().id());
                }
            }),
        }
    };
    let mut req = request("", Grants::default());
    req.limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    req.cpu_watch = Some(watch(&told));
    let o = agent("spin").run(req);
    assert_failed(&o, FailureKind::DeadlineExceeded, "deadline");
    let seen = told.lock().map(|t| t.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        vec![std::thread::current().id()],
        "told once, on this thread"
    );

    let quiet = Arc::new(Mutex::new(Vec::new()));
    let mut req = request("hello", Grants::default());
    req.cpu_watch = Some(watch(&quiet));
    let o = agent("echo").run(req);
    assert!(o.failure.is_none(), "{:?}", o.failure);
    assert!(quiet.lock().map(|t| t.is_empty()).unwrap_or(false));
}
