//! What the hostile-agent tests share: run a guest, assert how it ended, check the host.

use ari_runtime::capability::Grants;
use ari_runtime::{FailureKind, Limits, TaskOutcome};

use crate::common::*;

/// Peak resident set of this test process (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// The executor process never came near committing what a guest asked for.
pub fn assert_host_memory_bounded() {
    let peak = peak_rss_bytes();
    assert!(
        peak < 1 << 30,
        "the test process peaked at {peak} bytes resident"
    );
}

pub fn assert_failed(o: &TaskOutcome, kind: FailureKind, needle: &str) {
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
    assert!(o.attestation.verify(None).is_ok());
    assert_echo_works();
}

/// Log bytes kept, markers included.
pub fn log_bytes(o: &TaskOutcome) -> usize {
    o.logs.iter().map(String::len).sum()
}

pub fn run_req(name: &str, input: &str, grants: Grants, limits: Limits) -> TaskOutcome {
    let mut req = request(input, grants);
    req.limits = limits;
    agent(name).run(req)
}

pub fn fuel(fuel: u64) -> Limits {
    Limits {
        fuel,
        ..Limits::default()
    }
}
