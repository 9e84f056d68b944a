//! Memory: the limiter refuses growth past the limit before the host commits a page, and the
//! Wasm stack is bounded.

use ari_runtime::{FailureKind, Limits};

use crate::common::*;
use crate::support::*;

#[test]
fn balloon_hits_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let o = run_with_limits("balloon", "", limits);
    assert_failed(&o, FailureKind::Trap, "memory limit");
    assert!(o.resources_used.memory_bytes <= 16 << 20);
    assert!(o.resources_used.memory_bytes > 8 << 20);
}

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

#[test]
fn deep_overflows_the_stack() {
    let o = run_with_limits("deep", "", Limits::default());
    let f = o.failure.as_ref().expect("deep must fail");
    assert_eq!(f.kind, FailureKind::Trap, "{f}");
    assert!(
        f.message.contains("stack") || f.message.contains("out of bounds"),
        "{f}"
    );
    assert_echo_works();
}
