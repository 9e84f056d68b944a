//! The validator table: each rule from a proposal that breaks only it, with its message, then
//! proposals that break several rules at once and must report all of them.

use std::collections::BTreeMap;

use ari_model::{GrantSet, NetworkGrant};
use serde_json::json;

use crate::agents::{AgentMode, AgentView, Agents};
use crate::model::{Limits, Proposal};
use crate::validate::{Context, Rule, Violation, validate, validate_planner};

fn agent(ready: bool, mode: AgentMode) -> AgentView {
    AgentView {
        ready,
        mode,
        grants: GrantSet {
            network: Some(NetworkGrant {
                allowed_hosts: vec!["https://api.example.com".into()],
                approval: None,
            }),
            ..Default::default()
        },
        memory_bytes: 1 << 20,
        fuel_limit: 1_000,
        tokens_limit: 1_000,
    }
}

fn agents() -> Agents {
    BTreeMap::from([
        ("echo".into(), agent(true, AgentMode::All)),
        ("wc".into(), agent(true, AgentMode::Primary)),
        ("down".into(), agent(false, AgentMode::All)),
        ("helper".into(), agent(true, AgentMode::Subagent)),
    ])
}

fn proposal(v: serde_json::Value) -> Proposal {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("proposal: {e}"))
}

fn check(p: &Proposal, limits: &Limits) -> Vec<Violation> {
    let agents = agents();
    validate(
        p,
        &Context {
            agents: &agents,
            limits,
            plan_name: Some("plan"),
            allowed_agents: None,
        },
    )
}

/// `(step, rule, message fragment)` of each violation.
type Want<'a> = &'a [(Option<&'a str>, Rule, &'a str)];

fn assert_violations(got: &[Violation], want: Want, case: &str) {
    let brief: Vec<String> = got.iter().map(ToString::to_string).collect();
    assert_eq!(got.len(), want.len(), "{case}: {brief:#?}");
    for (v, (step, rule, fragment)) in got.iter().zip(want) {
        assert_eq!(
            (v.step.as_deref(), v.rule),
            (*step, *rule),
            "{case}: {brief:#?}"
        );
        assert!(
            v.message.contains(fragment),
            "{case}: {:?} does not say {fragment:?}",
            v.message
        );
    }
}

fn step(name: &str, agent: &str) -> serde_json::Value {
    json!({"name": name, "agentRef": {"name": agent}})
}

#[test]
fn a_fan_out_fan_in_plan_within_every_limit_has_no_violation() {
    let p = proposal(json!({"steps": [
        {"name": "split", "agentRef": {"name": "echo"}, "input": "{}", "outputs": ["a", "b"]},
        {"name": "left", "agentRef": {"name": "wc"}, "inputFrom": [{"step": "split", "field": "a"}]},
        {"name": "right", "agentRef": {"name": "wc"}, "inputFrom": [{"step": "split", "field": "b"}],
         "requirements": {"hosts": ["https://api.example.com"]}, "fuel": 500, "retry": {"limit": 1}},
        {"name": "join", "agentRef": {"name": "echo"},
         "inputFrom": [{"step": "left"}, {"step": "right"}], "dependsOn": ["split"]}
    ]}));
    let limits = Limits {
        fuel: Some(4_000),
        ..Default::default()
    };
    assert_violations(&check(&p, &limits), &[], "valid");
}

#[test]
fn each_rule_alone_is_reported_with_its_step_and_message() {
    let table: Vec<(&str, serde_json::Value, Limits, Want)> = vec![
        (
            "no steps",
            json!({"steps": []}),
            Limits::default(),
            &[(None, Rule::NoSteps, "no step")],
        ),
        (
            "too many steps",
            json!({"steps": [step("a", "echo"), step("b", "echo"), step("c", "echo")]}),
            Limits {
                max_steps: Some(2),
                ..Default::default()
            },
            &[(None, Rule::TooManySteps, "3 steps, above the limit of 2")],
        ),
        (
            "proposal asks for more steps",
            json!({"steps": [step("a", "echo")], "limits": {"maxSteps": 100}}),
            Limits::default(),
            &[(
                None,
                Rule::TooManySteps,
                "maxSteps 100, above the plan's 32",
            )],
        ),
        (
            "proposal asks for more parallelism",
            json!({"steps": [step("a", "echo")], "limits": {"maxParallel": 9}}),
            Limits {
                max_parallel: Some(4),
                ..Default::default()
            },
            &[(
                None,
                Rule::ParallelOverLimit,
                "maxParallel 9, above the plan's 4",
            )],
        ),
        (
            "plan parallelism over the cap",
            json!({"steps": [step("a", "echo")]}),
            Limits {
                max_parallel: Some(65),
                ..Default::default()
            },
            &[(None, Rule::ParallelOverLimit, "outside 1..=64")],
        ),
        (
            "proposal asks for more fuel",
            json!({"steps": [step("a", "echo")], "limits": {"fuel": 5000}}),
            Limits {
                fuel: Some(2_000),
                ..Default::default()
            },
            &[(
                None,
                Rule::FuelOverLimit,
                "fuel 5000, above the plan's 2000",
            )],
        ),
        (
            "total fuel over the limit, retries counted",
            json!({"steps": [step("a", "echo"), {"name": "b", "agentRef": {"name": "echo"},
                "fuel": 600, "retry": {"limit": 2}}]}),
            Limits {
                fuel: Some(2_500),
                ..Default::default()
            },
            &[(None, Rule::FuelOverLimit, "up to 2800 fuel")],
        ),
        (
            "proposal asks for more tokens",
            json!({"steps": [step("a", "echo")], "limits": {"tokens": 5000}}),
            Limits {
                tokens: Some(2_000),
                ..Default::default()
            },
            &[(
                None,
                Rule::TokensOverLimit,
                "tokens 5000, above the plan's 2000",
            )],
        ),
        (
            "total tokens over the limit, retries counted, an agent without models at none",
            json!({"steps": [step("a", "echo"), {"name": "b", "agentRef": {"name": "echo"},
                "tokens": 900, "retry": {"limit": 2}}]}),
            Limits {
                tokens: Some(2_500),
                ..Default::default()
            },
            &[(None, Rule::TokensOverLimit, "up to 2700 tokens")],
        ),
        (
            "a step asking more tokens than its agent allows",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "tokens": 1001}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::TokensOverAgentLimit,
                "exceeds agent echo's limits.tokens 1000",
            )],
        ),
        (
            "proposal asks for a later deadline",
            json!({"steps": [step("a", "echo")], "limits": {"deadlineSeconds": 100}}),
            Limits {
                deadline_seconds: Some(60),
                ..Default::default()
            },
            &[(
                None,
                Rule::DeadlineOverLimit,
                "deadlineSeconds 100, above the plan's 60",
            )],
        ),
        (
            "step deadline after the plan's",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "deadlineSeconds": 90}]}),
            Limits {
                deadline_seconds: Some(60),
                ..Default::default()
            },
            &[(
                Some("a"),
                Rule::DeadlineOverLimit,
                "deadlineSeconds 90 is above the plan's deadlineSeconds 60",
            )],
        ),
        (
            "invalid name",
            json!({"steps": [step("Bad_Name", "echo")]}),
            Limits::default(),
            &[(Some("Bad_Name"), Rule::InvalidName, "not a DNS label")],
        ),
        (
            "reserved name",
            json!({"steps": [step("planner", "echo")]}),
            Limits::default(),
            &[(Some("planner"), Rule::InvalidName, "reserved")],
        ),
        (
            "duplicate step",
            json!({"steps": [step("a", "echo"), step("a", "wc")]}),
            Limits::default(),
            &[(Some("a"), Rule::DuplicateStep, "already named \"a\"")],
        ),
        (
            "unknown agent",
            json!({"steps": [step("a", "nope")]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::UnknownAgent,
                "agent \"nope\" does not exist",
            )],
        ),
        (
            "agent not ready",
            json!({"steps": [step("a", "down")]}),
            Limits::default(),
            &[(Some("a"), Rule::AgentNotReady, "agent down is not Ready")],
        ),
        (
            "subagent-only agent",
            json!({"steps": [step("a", "helper")]}),
            Limits::default(),
            &[(Some("a"), Rule::ModeRefused, "mode subagent")],
        ),
        (
            "requirement outside the grants",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"},
                "requirements": {"capabilities": ["storage"]}}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::NotGranted,
                "capability storage is required but not granted",
            )],
        ),
        (
            "host outside the allow-list",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"},
                "requirements": {"hosts": ["https://evil.example"]}}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::NotGranted,
                "host https://evil.example is not within",
            )],
        ),
        (
            "fuel above the agent's limit",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "fuel": 1001}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::FuelOverAgentLimit,
                "fuel 1001 exceeds agent echo's limits.fuel 1000",
            )],
        ),
        (
            "too many retries",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "retry": {"limit": 6}}]}),
            Limits::default(),
            &[(Some("a"), Rule::RetryOverLimit, "retry.limit 6 is above 5")],
        ),
        (
            "both inputs",
            json!({"steps": [step("a", "echo"), {"name": "b", "agentRef": {"name": "echo"},
                "input": "x", "inputFrom": [{"step": "a"}]}]}),
            Limits::default(),
            &[(Some("b"), Rule::InputConflict, "both input and inputFrom")],
        ),
        (
            "unknown dependency",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "dependsOn": ["ghost"],
                "inputFrom": [{"step": "ghost"}]}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::UnknownStep,
                "step \"ghost\", which the plan does not have",
            )],
        ),
        (
            "field the step does not produce",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "outputs": ["words"]},
                {"name": "b", "agentRef": {"name": "echo"}, "inputFrom": [{"step": "a", "field": "lines"}]}]}),
            Limits::default(),
            &[(
                Some("b"),
                Rule::UnknownField,
                "field \"lines\" of step a, which declares outputs [words]",
            )],
        ),
        (
            "field of a step declaring no outputs",
            json!({"steps": [step("a", "echo"),
                {"name": "b", "agentRef": {"name": "echo"}, "inputFrom": [{"step": "a", "field": "x"}]}]}),
            Limits::default(),
            &[(Some("b"), Rule::UnknownField, "declares no outputs")],
        ),
        (
            "two inputs with one key",
            json!({"steps": [step("a", "echo"), step("b", "echo"),
                {"name": "c", "agentRef": {"name": "echo"},
                 "inputFrom": [{"step": "a", "key": "x"}, {"step": "b", "key": "x"}]}]}),
            Limits::default(),
            &[(Some("c"), Rule::DuplicateInputKey, "both be named \"x\"")],
        ),
        (
            "cycle",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "dependsOn": ["c"]},
                {"name": "b", "agentRef": {"name": "echo"}, "inputFrom": [{"step": "a"}]},
                {"name": "c", "agentRef": {"name": "echo"}, "dependsOn": ["b"]}]}),
            Limits::default(),
            &[(Some("a"), Rule::Cycle, "ring: a → c → b → a")],
        ),
        (
            "self dependency",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "dependsOn": ["a"]}]}),
            Limits::default(),
            &[(Some("a"), Rule::Cycle, "ring: a → a")],
        ),
        (
            "fuel of zero",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "fuel": 0}]}),
            Limits::default(),
            &[(Some("a"), Rule::OutOfRange, "fuel 0 is outside")],
        ),
        (
            "literal input too long",
            json!({"steps": [{"name": "a", "agentRef": {"name": "echo"}, "input": "x".repeat(65_537)}]}),
            Limits::default(),
            &[(
                Some("a"),
                Rule::OutOfRange,
                "input is 65537 bytes, above 65536",
            )],
        ),
    ];
    let mut rules_seen = std::collections::BTreeSet::new();
    for (case, p, limits, want) in table {
        let got = check(&proposal(p), &limits);
        assert_violations(&got, want, case);
        rules_seen.extend(want.iter().map(|(_, r, _)| *r));
    }
    // `agent-not-allowed` has its own test (it needs the Plan's allow-list).
    assert_eq!(rules_seen.len(), 21, "every rule has a row: {rules_seen:?}");
}

#[test]
fn a_proposal_breaking_several_rules_reports_every_one_in_a_stable_order() {
    let p = proposal(json!({"steps": [
        {"name": "fetch", "agentRef": {"name": "ghost"}, "dependsOn": ["report"]},
        {"name": "count", "agentRef": {"name": "helper"},
         "inputFrom": [{"step": "fetch", "field": "body"}],
         "requirements": {"capabilities": ["randomness", "storage"]}},
        {"name": "report", "agentRef": {"name": "down"}, "dependsOn": ["count", "nowhere"], "fuel": 5000},
        {"name": "count", "agentRef": {"name": "echo"}}
    ], "limits": {"maxParallel": 100}}));
    let limits = Limits {
        max_steps: Some(3),
        fuel: Some(1_500),
        ..Default::default()
    };
    let got = check(&p, &limits);
    assert_violations(
        &got,
        &[
            (None, Rule::ParallelOverLimit, "maxParallel 100"),
            (None, Rule::TooManySteps, "4 steps, above the limit of 3"),
            (Some("fetch"), Rule::UnknownAgent, "\"ghost\""),
            (Some("count"), Rule::ModeRefused, "subagent"),
            // In the capabilities' own order, as the operator names them for a Task.
            (Some("count"), Rule::NotGranted, "storage"),
            (Some("count"), Rule::NotGranted, "randomness"),
            (
                Some("count"),
                Rule::UnknownField,
                "field \"body\" of step fetch",
            ),
            (Some("report"), Rule::AgentNotReady, "down"),
            (Some("report"), Rule::FuelOverAgentLimit, "fuel 5000"),
            (Some("report"), Rule::UnknownStep, "\"nowhere\""),
            (Some("count"), Rule::DuplicateStep, "already named"),
            (
                Some("fetch"),
                Rule::Cycle,
                "ring: fetch → report → count → fetch",
            ),
            (None, Rule::FuelOverLimit, "up to 7000 fuel"),
        ],
        "several",
    );
    // Deterministic: the same input, the same answer.
    assert_eq!(got, check(&p, &limits));
}

#[test]
fn a_planner_on_a_missing_subagent_or_unready_agent_is_reported_on_step_planner() {
    let agents = agents();
    let limits = Limits::default();
    let ctx = Context {
        agents: &agents,
        limits: &limits,
        plan_name: None,
        allowed_agents: None,
    };
    assert!(validate_planner("echo", &ctx).is_empty());
    for (agent, rule) in [
        ("ghost", Rule::UnknownAgent),
        ("helper", Rule::ModeRefused),
        ("down", Rule::AgentNotReady),
    ] {
        let got = validate_planner(agent, &ctx);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].step.as_deref(), got[0].rule),
            (Some("planner"), rule)
        );
    }
}

#[test]
fn a_step_name_too_long_for_its_task_name_is_invalid() {
    let agents = agents();
    let limits = Limits::default();
    let long_plan = "p".repeat(200);
    let ctx = Context {
        agents: &agents,
        limits: &limits,
        plan_name: Some(&long_plan),
        allowed_agents: None,
    };
    let p = proposal(json!({"steps": [step(&"s".repeat(60), "echo")]}));
    let got = validate(&p, &ctx);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].rule, Rule::InvalidName);
    assert!(got[0].message.contains("above 253"), "{}", got[0].message);
    assert!(got[0].message.contains(".<attempt>"), "{}", got[0].message);
}

#[test]
fn the_retry_suffix_counts_only_for_a_step_with_retries() {
    let agents = agents();
    let limits = Limits::default();
    // 253 = plan (183) + '-' + step (63) + ".xxxxx" (6): fits without a retry suffix only.
    let plan = "p".repeat(183);
    let ctx = Context {
        agents: &agents,
        limits: &limits,
        plan_name: Some(&plan),
        allowed_agents: None,
    };
    let name = "s".repeat(63);
    let plain = proposal(json!({"steps": [step(&name, "echo")]}));
    assert_eq!(validate(&plain, &ctx), []);
    let retried = proposal(
        json!({"steps": [{"name": name, "agentRef": {"name": "echo"},
        "retry": {"limit": 1}}]}),
    );
    let got = validate(&retried, &ctx);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].rule, Rule::InvalidName);
}

#[test]
fn a_step_on_an_agent_outside_the_allow_list_is_refused() {
    let agents = agents();
    let limits = Limits::default();
    let allowed = vec!["echo".to_owned()];
    let ctx = Context {
        agents: &agents,
        limits: &limits,
        plan_name: Some("plan"),
        allowed_agents: Some(&allowed),
    };
    let p = proposal(json!({"steps": [step("a", "echo"), step("b", "wc")]}));
    assert_violations(
        &validate(&p, &ctx),
        &[(
            Some("b"),
            Rule::AgentNotAllowed,
            "agent \"wc\" is not in the Plan's allowedAgents",
        )],
        "allow-list",
    );
    let none: Vec<String> = Vec::new();
    let ctx = Context {
        allowed_agents: Some(&none),
        ..ctx
    };
    assert_eq!(validate(&p, &ctx).len(), 2);
}

/// A proposal of `steps` steps whose names are `name(i)`.
fn many(steps: usize, name: impl Fn(usize) -> String) -> Proposal {
    Proposal {
        steps: (0..steps)
            .map(|i| crate::model::Step {
                name: name(i),
                agent_ref: crate::model::AgentRef {
                    name: "echo".into(),
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_name_of_60_kb_gives_one_short_violation_and_nothing_else() {
    let mut p = many(3, |i| format!("s{i}"));
    p.steps[1].name = "n".repeat(61_440);
    p.steps[2].depends_on = vec![p.steps[1].name.clone(); 3];
    let got = check(&p, &Limits::default());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].rule, Rule::OutOfRange);
    assert!(got[0].message.contains("61440 bytes"), "{}", got[0].message);
    let shown = got[0].step.clone().unwrap_or_default();
    assert!(shown.len() <= 84 && shown.ends_with('…'), "{shown}");
    assert!(got[0].to_string().len() < 400, "{}", got[0]);
}

#[test]
fn more_steps_than_the_hard_cap_is_one_violation_checked_first() {
    // Names that would each break a rule: none is looked at.
    let p = many(12_000, |i| format!("Bad_{i}"));
    let got = check(&p, &Limits::default());
    assert_violations(
        &got,
        &[(
            None,
            Rule::TooManySteps,
            "12000 steps, above the hard cap of 128",
        )],
        "hard cap",
    );
}

#[test]
fn a_ring_at_every_depth_names_a_bounded_number_of_short_rings() {
    // s0 waits for s1, s1 for s2, …, and every step also for s0.
    let n = 128;
    let mut p = many(n, |i| format!("{i}{}", "x".repeat(58)));
    let names: Vec<String> = p.steps.iter().map(|s| s.name.clone()).collect();
    for (i, s) in p.steps.iter_mut().enumerate() {
        if i > 0 {
            s.depends_on.push(names[0].clone());
        }
        if i + 1 < n {
            s.depends_on.push(names[i + 1].clone());
        }
    }
    let limits = Limits {
        max_steps: Some(128),
        ..Default::default()
    };
    let got = check(&p, &limits);
    let rings: Vec<&Violation> = got.iter().filter(|v| v.rule == Rule::Cycle).collect();
    assert_eq!(rings.len(), crate::validate::MAX_CYCLES + 1, "{got:#?}");
    assert!(rings[crate::validate::MAX_CYCLES].step.is_none());
    for v in &rings {
        assert!(v.message.len() < 1_000, "{}", v.message);
    }
}

#[test]
fn past_the_listing_cap_one_violation_counts_the_rest() {
    // 128 steps on a missing Agent, each also waiting for 3 missing steps: 512 violations.
    let mut p = many(128, |i| format!("s{i}"));
    for s in &mut p.steps {
        s.agent_ref.name = "ghost".into();
        s.depends_on = vec!["x".into(), "y".into(), "z".into()];
    }
    let limits = Limits {
        max_steps: Some(128),
        ..Default::default()
    };
    let got = check(&p, &limits);
    assert_eq!(got.len(), crate::validate::MAX_LISTED + 1);
    let last = got.last().map(ToString::to_string).unwrap_or_default();
    assert!(last.contains("256 more violation(s) not listed"), "{last}");
}

#[test]
fn rule_ids_are_the_serialised_names() {
    for rule in [
        Rule::NoSteps,
        Rule::UnknownField,
        Rule::FuelOverAgentLimit,
        Rule::Cycle,
    ] {
        assert_eq!(
            serde_json::to_value(rule).ok(),
            Some(serde_json::Value::from(rule.id()))
        );
    }
}
