//! Delegation through the real runtime: real components calling each other in-process (the
//! semantics `ari run --agent` and the cluster share), within grants and budgets, recorded so
//! a replay needs no other Agent.

use ari_testkit::runtime as common;

use std::collections::BTreeMap;
use std::time::Duration;

use ari_runtime::capability::DelegationGrant;
use ari_runtime::local::{LocalAgent, LocalDelegator};
use ari_runtime::model::grant::GrantSet;
use ari_runtime::{
    CancelToken, FailureKind, Grants, Limits, RunReport, TaskOutcome, VerifyOptions, verify_tree,
};
use common::{agent, agent_bytes, grants, key, output, request, runtime};

/// A delegator offering `agents` as (name, component, grants, config).
fn delegator(agents: &[(&str, &str, Grants, &str)]) -> LocalDelegator {
    let agents = agents
        .iter()
        .map(|(name, component, grants, config)| {
            (
                (*name).to_owned(),
                LocalAgent {
                    agent: agent(component),
                    grants: grants.clone(),
                    limits: Limits::default(),
                    config: config.as_bytes().to_vec(),
                },
            )
        })
        .collect::<BTreeMap<_, _>>();
    LocalDelegator::new(agents, key())
}

fn delegating(agents: &[&str], depth: u32, children: u32) -> Grants {
    Grants::load(
        GrantSet {
            delegation: Some(DelegationGrant::new(
                agents.iter().map(|a| (*a).to_owned()).collect(),
                depth,
                children,
            )),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap()
}

/// Runs `component` as the root task with `config`, `grants` and the `others` to call.
fn run_root(
    component: &str,
    input: &str,
    config: &str,
    grants: Grants,
    others: &LocalDelegator,
) -> TaskOutcome {
    let mut req = request(input, grants);
    req.config = config.as_bytes().to_vec();
    req.delegation = Some(others.root_context());
    agent(component).run(req)
}

#[test]
fn a_fan_out_runs_every_child_and_sums_their_answers_within_the_parents_fuel() {
    let others = delegator(&[("wordcount", "wordcount", Grants::default(), "")]);
    let outcome = run_root(
        "fanout",
        "one two three\nfour five\n\nsix\n",
        "",
        delegating(&["wordcount"], 1, 8),
        &others,
    );
    assert_eq!(outcome.failure, None);
    assert_eq!(output(&outcome), r#"{"parts":3,"words":6}"#);
    assert_eq!(outcome.children.len(), 3);
    let children_fuel: u64 = outcome.children.iter().map(|c| c.fuel).sum();
    assert!(children_fuel > 0);
    assert_eq!(outcome.resources_used.children_fuel, children_fuel);
    assert!(
        outcome.resources_used.fuel > children_fuel,
        "the parent's fuel covers its children's and its own work"
    );
    for child in &outcome.children {
        assert_eq!(child.reason.as_deref(), Some("Completed"), "{child:?}");
        assert!(!child.attestation_sha256.is_empty());
    }
    let runs = others.finish();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r.outcome.failure.is_none()));
}

#[test]
fn a_call_outside_the_grant_starts_nothing_and_the_guest_sees_a_denial() {
    let others = delegator(&[("wordcount", "wordcount", Grants::default(), "")]);
    let outcome = run_root(
        "fanout",
        "a b\n",
        "",
        delegating(&["summarize"], 1, 8),
        &others,
    );
    assert_eq!(outcome.failure_kind(), Some(FailureKind::CapabilityDenied));
    assert!(
        outcome
            .failure
            .as_ref()
            .is_some_and(|f| f.message.contains("wordcount")),
        "{:?}",
        outcome.failure
    );
    assert!(outcome.children.is_empty());
    assert!(others.finish().is_empty(), "no child ran");
    let ungranted = run_root("fanout", "a b\n", "", Grants::default(), &others);
    assert_eq!(
        ungranted.failure_kind(),
        Some(FailureKind::CapabilityDenied)
    );
}

#[test]
fn two_agents_delegating_to_each_other_stop_at_the_depth_limit() {
    let ping = delegating(&["pong"], 3, 4);
    let pong = delegating(&["ping"], 3, 4);
    let others = delegator(&[
        ("ping", "relay", ping.clone(), "pong"),
        ("pong", "relay", pong, "ping"),
    ]);
    let outcome = run_root("relay", "chain", "pong", ping, &others);
    // Root (depth 0) → pong (1) → ping (2) → pong (3), which is refused a fourth level.
    assert_eq!(output(&outcome), "up(up(up(bottom)))");
    let runs = others.finish();
    assert_eq!(runs.len(), 3);
    let deepest = runs
        .iter()
        .find(|r| {
            r.outcome
                .limits_applied
                .delegation
                .as_ref()
                .is_some_and(|d| d.depth == 3)
        })
        .expect("a task at depth 3");
    assert_eq!(
        deepest.outcome.failure, None,
        "a limit reached is not a denial: the guest handled it and succeeded"
    );
}

#[test]
fn children_started_in_a_tight_loop_are_refused_at_the_limit_and_cancelled() {
    let others = delegator(&[("spinner", "relay", Grants::default(), "")]);
    let outcome = run_root(
        "relay",
        "bomb",
        "spinner",
        delegating(&["spinner"], 1, 5),
        &others,
    );
    assert!(
        outcome
            .output
            .starts_with(b"started=5 then limit reached: children limit"),
        "{:?} {:?}",
        output(&outcome),
        outcome.failure
    );
    assert_eq!(outcome.failure, None, "the loop was stopped, not the task");
    assert_eq!(
        outcome.delegations_refused, 1,
        "the refused start is counted"
    );
    let runs = others.finish();
    assert_eq!(runs.len(), 5);
    for run in runs {
        assert!(
            matches!(
                run.outcome.failure_kind(),
                Some(FailureKind::Cancelled | FailureKind::FuelExhausted)
            ),
            "an abandoned child ends: {:?}",
            run.outcome.failure
        );
    }
}

#[test]
fn a_child_never_gets_more_fuel_than_its_parent_has_left() {
    let others = delegator(&[("spinner", "relay", Grants::default(), "")]);
    let mut req = request("wait", delegating(&["spinner"], 1, 1));
    req.config = b"spinner".to_vec();
    req.limits.fuel = 20_000_000;
    req.delegation = Some(others.root_context());
    let outcome = agent("relay").run(req);
    let runs = others.finish();
    assert_eq!(runs.len(), 1);
    let child = &runs[0].outcome;
    assert_eq!(child.failure_kind(), Some(FailureKind::FuelExhausted));
    assert!(
        child.limits_applied.fuel <= 10_000_000,
        "the default share is half of what was left: {}",
        child.limits_applied.fuel
    );
    assert!(outcome.resources_used.fuel <= 20_000_000);
    assert_eq!(outcome.children.len(), 1);
    assert_eq!(outcome.children[0].reason.as_deref(), Some("FuelExhausted"));
}

/// Issue 26 item 19: a fan-out whose children each ask 50 M fuel of a 50 M budget used to hand
/// the first child all of it; the parent then died `FuelExhausted` and its child was cancelled
/// before it ran. The ask is now refused `budget-exhausted` (the guest's error), nothing starts,
/// and the same fan-out with room for its children and the parent's reserve completes.
#[test]
fn a_child_asking_more_fuel_than_its_parent_can_spare_gets_budget_exhausted() {
    let fan_out = |fuel: u64| {
        let others = delegator(&[("wordcount", "wordcount", Grants::default(), "")]);
        let mut req = request("a b\nc\nd e f\n", delegating(&["wordcount"], 1, 8));
        req.limits.fuel = fuel;
        req.delegation = Some(others.root_context());
        (agent("fanout").run(req), others.finish())
    };
    let (outcome, runs) = fan_out(50_000_000);
    assert_eq!(
        outcome.failure_kind(),
        Some(FailureKind::AgentError),
        "{:?}",
        outcome.failure
    );
    let message = outcome.failure.map(|f| f.message).unwrap_or_default();
    assert!(
        message.contains("not enough fuel for this child")
            && message.contains("to await its children"),
        "{message}"
    );
    assert!(runs.is_empty(), "no child started: {}", runs.len());
    assert!(outcome.children.is_empty());

    let (outcome, runs) = fan_out(200_000_000);
    assert_eq!(outcome.failure, None);
    assert_eq!(output(&outcome), r#"{"parts":3,"words":6}"#);
    assert_eq!(runs.len(), 3);
}

/// A self-recursing Agent on a small budget with the default share: every level either
/// reaches the depth limit or is told `budget-exhausted`; none dies `FuelExhausted`.
#[test]
fn a_recursion_on_a_small_budget_reaches_its_depth_or_gets_budget_exhausted() {
    let grant = delegating(&["relay"], 3, 4);
    let others = delegator(&[("relay", "relay", grant.clone(), "relay")]);
    let mut req = request("chain", grant);
    req.config = b"relay".to_vec();
    req.limits.fuel = 12_000_000;
    req.delegation = Some(others.root_context());
    let outcome = agent("relay").run(req);
    let runs = others.finish();
    for run in &runs {
        assert_ne!(
            run.outcome.failure_kind(),
            Some(FailureKind::FuelExhausted),
            "{:?}",
            run.outcome.failure
        );
    }
    assert_ne!(outcome.failure_kind(), Some(FailureKind::FuelExhausted));
    let said = format!("{:?} {:?}", output(&outcome), outcome.failure);
    assert!(
        said.contains("bottom") || said.contains("not enough fuel for this child"),
        "{said}"
    );
}

#[test]
fn cancelling_a_waiting_parent_cancels_its_child_and_keeps_no_output() {
    let others = delegator(&[("spinner", "relay", Grants::default(), "")]);
    let cancel = CancelToken::new();
    let mut req = request("wait", delegating(&["spinner"], 1, 1));
    req.config = b"spinner".to_vec();
    req.limits.fuel = u64::MAX / 4;
    req.limits.timeout = Duration::from_secs(60);
    req.cancel = Some(cancel.clone());
    req.delegation = Some(others.root_context());
    let relay = agent("relay");
    let run = std::thread::spawn(move || relay.run(req));
    // Wait (with a deadline) until the child is running, then cancel the parent.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while others.started() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never started"
        );
        std::thread::yield_now();
    }
    cancel.cancel();
    let outcome = run.join().expect("parent thread");
    assert_eq!(
        outcome.failure_kind(),
        Some(FailureKind::Cancelled),
        "{:?}",
        outcome.failure
    );
    assert!(outcome.output.is_empty());
    let runs = others.finish();
    assert_eq!(runs[0].outcome.failure_kind(), Some(FailureKind::Cancelled));
}

#[test]
fn a_cancelled_task_stops_within_the_check_interval_and_commits_nothing() {
    let cancel = CancelToken::new();
    let mut req = request("", grants(&["storage=1MiB"]));
    req.limits.fuel = u64::MAX / 4;
    req.limits.timeout = Duration::from_secs(60);
    req.cancel = Some(cancel.clone());
    let spin = agent("spin");
    let run = std::thread::spawn(move || spin.run(req));
    cancel.cancel();
    let outcome = run.join().expect("task thread");
    assert_eq!(outcome.failure_kind(), Some(FailureKind::Cancelled));
    assert!(outcome.output.is_empty());
}

#[test]
fn a_tree_replays_without_any_other_agent_and_verifies_whole() {
    let others = delegator(&[("wordcount", "wordcount", Grants::default(), "")]);
    let input = "alpha beta\ngamma\n";
    let outcome = run_root(
        "fanout",
        input,
        "",
        delegating(&["wordcount"], 1, 8),
        &others,
    );
    assert_eq!(outcome.failure, None);
    let report = RunReport::tree(outcome, input.as_bytes(), &[], others.finish());
    assert_eq!(report.children.len(), 2);
    let opts = VerifyOptions {
        trusted_key: Some(key().verifying_key()),
        ..Default::default()
    };
    let modules =
        |name: &str| (name == "wordcount").then(|| (agent_bytes("wordcount"), Vec::new()));
    let verified = verify_tree(runtime(), &report, &agent_bytes("fanout"), &modules, &opts)
        .expect("the whole tree verifies");
    assert_eq!(verified, 3);

    // A child report swapped for another run of the same Agent is caught by its digest.
    let mut forged = report.clone();
    forged.children.swap(0, 1);
    forged.children[0].task_id = report.children[0].task_id.clone();
    let err = verify_tree(runtime(), &forged, &agent_bytes("fanout"), &modules, &opts)
        .expect_err("a swapped child does not verify");
    assert!(err.to_string().contains("child attestation"), "{err}");

    // Dropping an awaited child from the report is caught too.
    let mut partial = report.clone();
    partial.children.pop();
    let err = verify_tree(runtime(), &partial, &agent_bytes("fanout"), &modules, &opts)
        .expect_err("a missing child does not verify");
    assert!(err.to_string().contains("missing"), "{err}");
}

/// Issue 26, item 10: the config decides which Agent `fanout` calls. It is signed, and a
/// replay given it reproduces the run; without it (or with another) verification says so
/// instead of failing the replay with `CapabilityDenied`.
#[test]
fn a_tree_run_with_a_config_verifies_only_with_that_config() {
    let others = delegator(&[("counter", "wordcount", Grants::default(), "")]);
    let input = "alpha beta\ngamma\n";
    let outcome = run_root(
        "fanout",
        input,
        "counter",
        delegating(&["counter"], 1, 8),
        &others,
    );
    assert_eq!(outcome.failure, None);
    assert_eq!(
        outcome
            .attestation
            .predicate()
            .expect("decodes")
            .config_sha256,
        ari_runtime::attestation::sha256_hex(b"counter")
    );
    let report = RunReport::tree(outcome, input.as_bytes(), &[], others.finish());
    let agents = |name: &str| (name == "counter").then(|| (agent_bytes("wordcount"), Vec::new()));
    let with = |config: &[u8]| VerifyOptions {
        trusted_key: Some(key().verifying_key()),
        config: config.to_vec(),
        ..Default::default()
    };
    let verified = verify_tree(
        runtime(),
        &report,
        &agent_bytes("fanout"),
        &agents,
        &with(b"counter"),
    )
    .expect("verifies with the config it ran with");
    assert_eq!(verified, 3);
    for (config, says) in [
        (&b""[..], "no config was given"),
        (&b"wordcount"[..], "not the config the task ran with"),
    ] {
        let err = verify_tree(
            runtime(),
            &report,
            &agent_bytes("fanout"),
            &agents,
            &with(config),
        )
        .expect_err("another config does not verify");
        let text = err.to_string();
        assert!(
            text.starts_with("config digest check failed") && text.contains(says),
            "{text}"
        );
    }
}

#[test]
fn a_child_inherits_no_capability_of_its_parent() {
    let others = delegator(&[("counter", "counter", Grants::default(), "")]);
    let mut req = request(
        "chain",
        grants(&[
            "storage=1MiB",
            "delegation=counter;maxDepth=1;maxChildren=1",
        ]),
    );
    req.config = b"counter".to_vec();
    req.delegation = Some(others.root_context());
    let outcome = agent("relay").run(req);
    assert_eq!(outcome.failure_kind(), Some(FailureKind::AgentError));
    assert_eq!(
        outcome.children[0].reason.as_deref(),
        Some("CapabilityDenied"),
        "the parent's storage grant is not the child's"
    );
    assert!(others.finish()[0].outcome.failure.is_some());
}
