//! The properties the `plan_validate` fuzz target checks, shared with `plan/tests/fuzz.rs`
//! (which replays `fuzz/seeds/plan_validate` and `fuzz/regressions/plan_validate`, and runs a
//! bounded deterministic mutation loop on every `cargo test`).
//!
//! Input: JSON of a proposal, or any other bytes, read as a recipe for a random step graph.
//! 1. The validator never panics and answers the same twice.
//! 2. Every violation about a step names a step of the proposal (or its first 80 bytes).
//! 3. An accepted proposal is runnable: unique names, every dependency known, no cycle (a
//!    topological order exists), within the step limit; and its inputs compose without panic.

use std::collections::{BTreeMap, BTreeSet};

use ari_model::{GrantSet, NetworkGrant};
use ari_plan::{
    AgentMode, AgentView, Agents, Context, InputRef, Limits, Proposal, Step, compose_input,
    validate,
};

const AGENT_NAMES: [&str; 5] = ["echo", "wc", "down", "helper", "ghost"];

fn agents() -> Agents {
    let view = |ready, mode| AgentView {
        ready,
        mode,
        grants: GrantSet {
            network: Some(NetworkGrant {
                allowed_hosts: vec!["https://*.example.com".into()],
                approval: None,
            }),
            ..Default::default()
        },
        memory_bytes: 1 << 20,
        fuel_limit: 1_000,
        tokens_limit: 1_000,
    };
    BTreeMap::from([
        ("echo".to_owned(), view(true, AgentMode::All)),
        ("wc".to_owned(), view(true, AgentMode::Primary)),
        ("down".to_owned(), view(false, AgentMode::All)),
        ("helper".to_owned(), view(true, AgentMode::Subagent)),
    ])
}

/// A proposal from arbitrary bytes: a step count, then per step an agent, dependencies (some
/// pointing past the end), an optional field reference and budget.
fn recipe(data: &[u8]) -> Proposal {
    let mut bytes = data.iter().copied();
    let mut next = move || bytes.next().unwrap_or(0);
    let n = usize::from(next() % 12);
    let name = |i: usize| format!("s{i}");
    let steps = (0..n)
        .map(|i| {
            let agent = AGENT_NAMES[usize::from(next()) % AGENT_NAMES.len()];
            let deps = usize::from(next() % 4);
            let depends_on = (0..deps).map(|_| name(usize::from(next() % 14))).collect();
            let mut input_from = Vec::new();
            let flags = next();
            if flags & 1 == 1 {
                input_from.push(InputRef {
                    step: name(usize::from(next() % 14)),
                    field: (flags & 2 == 2).then(|| "out".to_owned()),
                    key: (flags & 4 == 4).then(|| "k".to_owned()),
                });
            }
            Step {
                name: if flags & 8 == 8 { name(0) } else { name(i) },
                agent_ref: ari_plan::AgentRef { name: agent.into() },
                input: (flags & 16 == 16).then(|| "x".to_owned()),
                input_from,
                depends_on,
                outputs: if flags & 32 == 32 {
                    vec!["out".into()]
                } else {
                    vec![]
                },
                requirements: None,
                fuel: (flags & 64 == 64).then(|| u64::from(next()) * 10),
                tokens: (flags & 64 == 64).then(|| u64::from(next()) * 5),
                deadline_seconds: None,
                retry: (flags & 128 == 128).then(|| ari_plan::RetryPolicy {
                    limit: u32::from(next() % 8),
                }),
            }
        })
        .collect();
    Proposal {
        steps,
        limits: None,
        summary: None,
    }
}

pub fn plan_validate(data: &[u8]) {
    let proposal = match serde_json::from_slice::<Proposal>(data) {
        Ok(p) => p,
        Err(_) => recipe(data),
    };
    let agents = agents();
    let limits = Limits {
        max_steps: Some(10),
        max_parallel: Some(4),
        fuel: Some(20_000),
        tokens: Some(20_000),
        deadline_seconds: Some(600),
    };
    let ctx = Context {
        agents: &agents,
        limits: &limits,
        plan_name: Some("fuzz"),
        allowed_agents: None,
    };
    let verdict = validate(&proposal, &ctx);
    assert_eq!(verdict, validate(&proposal, &ctx), "not deterministic");
    let names: BTreeSet<&str> = proposal.steps.iter().map(|s| s.name.as_str()).collect();
    for v in &verdict {
        if let Some(step) = &v.step {
            // A name is shown whole, or cut to its first 80 bytes with `…`.
            let whole = names.contains(step.as_str());
            let cut = step
                .strip_suffix('…')
                .is_some_and(|head| names.iter().any(|n| n.starts_with(head)));
            assert!(whole || cut, "{v} names no step");
        }
    }
    if !verdict.is_empty() {
        return;
    }
    assert_eq!(
        names.len(),
        proposal.steps.len(),
        "accepted duplicate names"
    );
    assert!(proposal.steps.len() <= 10, "accepted too many steps");
    // Kahn's algorithm must order every step: no cycle, no unknown dependency.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut outputs = BTreeMap::new();
    while done.len() < proposal.steps.len() {
        let ready: Vec<&Step> = proposal
            .steps
            .iter()
            .filter(|s| !done.contains(s.name.as_str()))
            .filter(|s| s.dependencies().iter().all(|d| done.contains(d)))
            .collect();
        assert!(
            !ready.is_empty(),
            "accepted a cycle or an unknown dependency"
        );
        for s in ready {
            let _ = compose_input(s, &outputs);
            outputs.insert(s.name.clone(), br#"{"out":"v"}"#.to_vec());
            done.insert(s.name.as_str());
        }
    }
}
