//! The typed contract end to end: error variants cross the boundary as cases, an agent's error
//! code decides the Task's reason, and an agent's estimate is recorded.
use ari_testkit::runtime as common;

use ari_runtime::FailureKind;
use common::*;

#[test]
fn an_agent_error_code_ends_the_task_agent_error_naming_the_case() {
    let o = run("dice", "x", grants(&["randomness"]));
    let f = o.failure.expect("a bad dice count fails");
    assert_eq!(f.kind, FailureKind::AgentError, "{f}");
    assert!(
        f.message.starts_with("execute returned invalid-input: "),
        "{f}"
    );
    assert!(o.output.is_empty());
}

#[test]
fn host_errors_reach_the_guest_as_typed_cases() {
    let o = run(
        "gauntlet",
        "typed-errors",
        grants(&["storage=1MiB", "network=https://example.invalid"]),
    );
    assert_eq!(o.failure, None);
    assert_eq!(output(&o), "storage=Invalid http=Invalid");
}

#[test]
fn the_agents_estimate_is_recorded_beside_what_was_measured() {
    let o = run("sha256-loop", "1000 abc", grants(&[]));
    assert_eq!(o.failure, None);
    let estimate = o.estimate.expect("sha256-loop estimates its work");
    assert_eq!(estimate.fuel, 4_000 * 1000 + 64 * 3);
    assert!(o.resources_used.fuel > 0);
    // Echo gives no estimate: none is recorded, and the task is not worse for it.
    let o = run("echo", "hi", grants(&[]));
    assert_eq!(o.failure, None);
    assert_eq!(o.estimate, None);
}

#[test]
fn an_agent_that_cannot_estimate_its_input_still_fails_on_execute_not_estimate() {
    // `estimate` returns err for this input; the task goes on to `execute`, which decides.
    let o = run("sha256-loop", "not-a-number", grants(&[]));
    let f = o.failure.expect("bad input fails");
    assert_eq!(f.kind, FailureKind::AgentError, "{f}");
    assert!(f.message.contains("execute returned invalid-input"), "{f}");
    assert_eq!(o.estimate, None);
}
