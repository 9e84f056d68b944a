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

#[test]
fn a_task_finds_nothing_an_earlier_task_left_in_its_pool_slot() {
    use ari_runtime::{AllocatorChoice, EngineOptions, PoolConfig, Runtime, RuntimeConfig};
    // One slot, so every task reuses the memory the one before it wrote (a static, and 4 MiB
    // of heap: past what the pool keeps resident, so both ways of resetting pages are used).
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: None,
        engine: EngineOptions {
            allocator: AllocatorChoice::Pooling,
            pool: PoolConfig::for_concurrency(1),
            ..EngineOptions::default()
        },
    })
    .expect("pooling runtime");
    let residue = rt.load(&agent_bytes("residue")).expect("load");
    let echo = rt.load(&agent_bytes("echo")).expect("load");
    for round in 0..3 {
        let o = residue.run(request("", grants(&[])));
        assert_eq!(o.failure, None, "round {round}");
        assert_eq!(output(&o), "runs=1 dirty=0", "round {round}");
        assert_eq!(
            output(&echo.run(request("between", grants(&[])))),
            "between"
        );
    }
}
