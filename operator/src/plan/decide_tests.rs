//! The Plan decisions, pure: validation before anything runs, starts in dependency order within
//! the parallelism limit, outputs flowing into inputs, failures, retries, cancellation,
//! deadlines, the planner, and Tasks the Plan did not create, which are never its steps'.

use std::collections::BTreeMap;

use ari_crds::{
    Plan, PlanPhase, PlanReason, PlanStepReason, StepPhase, StepReason, TaskPhase, TaskReason,
};
use ari_plan::{AgentMode, AgentView, Agents, Rule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::decide::{
    Created, Input, NewTask, Observed, Outcome, ProposalRead, decide, record_created,
};
use super::history;
use super::observe::{TaskObs, Tasks};

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn agents() -> Agents {
    let view = |ready, mode| AgentView {
        ready,
        mode,
        grants: Default::default(),
        memory_bytes: 1 << 20,
        fuel_limit: 1_000,
        tokens_limit: 1_000,
    };
    BTreeMap::from([
        ("echo".into(), view(true, AgentMode::All)),
        ("wc".into(), view(true, AgentMode::All)),
        ("planner".into(), view(true, AgentMode::All)),
        ("helper".into(), view(true, AgentMode::Subagent)),
    ])
}

fn plan(spec: Value) -> Plan {
    let mut p: Plan = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": "p", "namespace": "n", "uid": "plan-uid", "generation": 1},
        "spec": spec
    }))
    .unwrap_or_else(|e| panic!("plan: {e}"));
    p.metadata.creation_timestamp = Some(Time(ts(1_000)));
    p
}

/// `split` → `left`, `right` (fields of split) → `join` (both counts).
fn fan() -> Value {
    json!({"limits": {"maxParallel": 2, "deadlineSeconds": 100}, "steps": [
        {"name": "split", "agentRef": {"name": "echo"}, "input": r#"{"a":"x y","b":"z"}"#,
         "outputs": ["a", "b"]},
        {"name": "left", "agentRef": {"name": "wc"}, "inputFrom": [{"step": "split", "field": "a"}],
         "outputs": ["words"]},
        {"name": "right", "agentRef": {"name": "wc"}, "inputFrom": [{"step": "split", "field": "b"}],
         "outputs": ["words"], "retry": {"limit": 1}},
        {"name": "join", "agentRef": {"name": "echo"}, "inputFrom": [
            {"step": "left", "field": "words", "key": "l"}, {"step": "right", "field": "words", "key": "r"}]}
    ]})
}

fn task(phase: TaskPhase, reason: Option<TaskReason>, output: Option<&str>) -> TaskObs {
    TaskObs {
        phase,
        reason,
        output_sha256: output.map(|o| ari_model::sha256_hex(o.as_bytes())),
        attestation_sha256: output.map(|_| "att".into()),
        fuel_used: Some(10),
        tokens_used: Some(7),
        ..Default::default()
    }
}

fn ok(output: &str) -> TaskObs {
    task(
        TaskPhase::Succeeded,
        Some(TaskReason::Completed),
        Some(output),
    )
}

/// The uid the simulated API server gives the Task named `name`.
fn uid(name: &str) -> String {
    format!("uid-{name}")
}

/// The pass's view: each Task without a uid gets the one its create was answered with.
fn with_uids(tasks: &Tasks) -> Tasks {
    tasks
        .iter()
        .map(|(n, t)| {
            let mut t = t.clone();
            if t.uid.is_empty() {
                t.uid = uid(n);
            }
            (n.clone(), t)
        })
        .collect()
}

fn observe(
    plan: &Plan,
    tasks: &Tasks,
    now: i64,
    foreign: &[String],
    proposal: Option<&str>,
) -> Outcome {
    let agents = agents();
    let tasks = with_uids(tasks);
    let read = proposal.map(|p| ProposalRead {
        sha256: ari_model::sha256_hex(p.as_bytes()),
        parsed: ari_plan::parse_proposal(p.as_bytes()).map(std::sync::Arc::new),
    });
    decide(&Observed {
        plan,
        agents: &agents,
        tasks: &tasks,
        created: &Created::new(),
        foreign,
        proposal: read.as_ref(),
        nonce: "abcde",
        now: ts(now),
    })
}

fn run(plan: &Plan, tasks: &Tasks, now: i64) -> Outcome {
    observe(plan, tasks, now, &[], None)
}

/// Keeps a pass's status on the Plan as the controller would: each create answered with
/// [`uid`], then history, then the status write.
fn keep(plan: &mut Plan, mut out: Outcome, now: i64) -> Outcome {
    for new in &out.create.clone() {
        record_created(&mut out.status, new, &uid(&new.name));
    }
    let old = plan.status.clone().unwrap_or_default();
    let stages = history::stages(
        &old,
        &out.status,
        plan.is_cancelled() || !out.cancel.is_empty(),
    );
    history::append(&mut out.status, &stages, ts(now));
    plan.status = Some(out.status.clone());
    out
}

/// Runs a pass and keeps its status on the Plan (as the status write would), with history.
fn step(plan: &mut Plan, tasks: &Tasks, now: i64) -> Outcome {
    let out = run(plan, tasks, now);
    keep(plan, out, now)
}

/// The literal input of a new Task.
fn bytes(new: &NewTask) -> Vec<u8> {
    match &new.input {
        Input::Bytes(b) => b.clone(),
        other => panic!("not literal: {other:?}"),
    }
}

/// The input a new Task gets from `outputs` (by step), composed as the controller does.
fn composed(new: &NewTask, outputs: &[(&str, &str)]) -> Vec<u8> {
    let Input::Composed { step, sources } = &new.input else {
        panic!("literal: {:?}", new.input)
    };
    let outputs: BTreeMap<String, Vec<u8>> = outputs
        .iter()
        .map(|(s, o)| (s.to_string(), o.as_bytes().to_vec()))
        .collect();
    for (dep, source) in sources {
        let sha = outputs.get(dep).map(|o| ari_model::sha256_hex(o));
        assert_eq!(source.output_sha256, sha, "source {dep} names its digest");
    }
    ari_plan::compose_input(step, &outputs).unwrap_or_else(|e| panic!("{e}"))
}

fn created(out: &Outcome) -> Vec<&str> {
    out.create.iter().map(|t| t.name.as_str()).collect()
}

fn phase_of(out: &Outcome, step: &str) -> (StepPhase, Option<StepReason>) {
    let s = out.status.steps.iter().find(|s| s.name == step);
    let s = s.unwrap_or_else(|| panic!("no step {step}: {:?}", out.status.steps));
    (s.phase, s.reason)
}

#[test]
fn a_valid_plan_is_validated_then_starts_only_the_steps_without_dependencies() {
    let mut p = plan(fan());
    let out = step(&mut p, &Tasks::new(), 1_001);
    assert_eq!(created(&out), ["p-split"]);
    assert_eq!(out.status.phase, Some(PlanPhase::Running));
    assert!(ari_crds::conditions::is_true(
        &out.status.conditions,
        "Validated"
    ));
    assert_eq!(bytes(&out.create[0]), br#"{"a":"x y","b":"z"}"#.to_vec());
    assert_eq!(
        out.create[0].deadline_seconds,
        Some(99),
        "capped by the plan's deadline"
    );
    let events: Vec<_> = out
        .status
        .history
        .iter()
        .map(|e| e.event.as_str())
        .collect();
    assert_eq!(events, ["Proposed", "Validated", "StepStarted"]);
}

#[test]
fn outputs_flow_into_dependants_which_start_together_within_max_parallel() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let mut tasks = Tasks::from([("p-split".into(), ok(r#"{"a":"x y","b":"z"}"#))]);
    let out = step(&mut p, &tasks, 1_002);
    assert_eq!(created(&out), ["p-left", "p-right"]);
    let split = [("split", r#"{"a":"x y","b":"z"}"#)];
    assert_eq!(composed(&out.create[0], &split), b"x y".to_vec());
    assert_eq!(composed(&out.create[1], &split), b"z".to_vec());
    assert_eq!(out.create[1].retries, Some(1));
    tasks.insert("p-left".into(), ok(r#"{"lines":0,"words":2}"#));
    tasks.insert("p-right".into(), ok(r#"{"words":1}"#));
    let out = step(&mut p, &tasks, 1_003);
    assert_eq!(created(&out), ["p-join"]);
    let counts = [
        ("left", r#"{"lines":0,"words":2}"#),
        ("right", r#"{"words":1}"#),
    ];
    assert_eq!(
        composed(&out.create[0], &counts),
        br#"{"l":2,"r":1}"#.to_vec()
    );
    tasks.insert("p-join".into(), ok(r#"{"l":2,"r":1}"#));
    let out = step(&mut p, &tasks, 1_004);
    assert!(out.create.is_empty());
    assert_eq!(
        (out.status.phase, out.status.reason),
        (Some(PlanPhase::Succeeded), Some(PlanReason::Completed))
    );
    assert_eq!(out.status.progress.as_deref(), Some("4/4"));
    assert_eq!(out.status.fuel_used, Some(40));
    assert_eq!(
        out.status.tokens_used,
        Some(28),
        "the steps' tokens, summed"
    );
    assert!(
        out.status
            .steps
            .iter()
            .all(|s| s.attestation_sha256.is_some())
    );
    assert!(ari_crds::conditions::is_true(
        &out.status.conditions,
        "Succeeded"
    ));
    let last = out.status.history.last().map(|e| e.event);
    assert_eq!(last, Some(ari_crds::HistoryEvent::PlanFinished));
    let seqs: Vec<u32> = out.status.history.iter().map(|e| e.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "ordered: {seqs:?}"
    );
}

#[test]
fn max_parallel_holds_back_ready_steps_until_a_slot_frees() {
    let mut spec = fan();
    spec["limits"]["maxParallel"] = json!(1);
    let mut p = plan(spec);
    step(&mut p, &Tasks::new(), 1_001);
    let mut tasks = Tasks::from([("p-split".into(), ok(r#"{"a":"x","b":"y"}"#))]);
    assert_eq!(created(&step(&mut p, &tasks, 1_002)), ["p-left"]);
    tasks.insert("p-left".into(), task(TaskPhase::Running, None, None));
    assert!(step(&mut p, &tasks, 1_003).create.is_empty());
    tasks.insert("p-left".into(), ok(r#"{"words":1}"#));
    assert_eq!(created(&step(&mut p, &tasks, 1_004)), ["p-right"]);
}

#[test]
fn a_plan_breaking_rules_is_rejected_with_every_violation_and_nothing_starts() {
    let p = plan(json!({"steps": [
        {"name": "a", "agentRef": {"name": "echo"}, "dependsOn": ["b"]},
        {"name": "b", "agentRef": {"name": "helper"}, "dependsOn": ["a"]},
        {"name": "c", "agentRef": {"name": "ghost"}}
    ]}));
    let out = run(&p, &Tasks::new(), 1_001);
    assert!(out.create.is_empty());
    assert_eq!(
        (out.status.phase, out.status.reason),
        (Some(PlanPhase::Failed), Some(PlanReason::Rejected))
    );
    let rules: Vec<Rule> = out.status.violations.iter().map(|v| v.rule).collect();
    assert_eq!(rules, [Rule::ModeRefused, Rule::UnknownAgent, Rule::Cycle]);
    assert_eq!(out.status.violation_count, Some(3));
    let c = ari_crds::conditions::find(&out.status.conditions, "Validated");
    assert_eq!(c.map(|c| c.status.as_str()), Some("False"));
    // A rejected Plan is finished: later passes do nothing.
    let mut again = p.clone();
    again.status = Some(out.status.clone());
    assert_eq!(run(&again, &Tasks::new(), 1_100).status, out.status);
}

#[test]
fn a_failed_step_fails_its_dependants_dependency_failed_and_they_never_run() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let mut tasks = Tasks::from([("p-split".into(), ok(r#"{"a":"x","b":"y"}"#))]);
    step(&mut p, &tasks, 1_002);
    tasks.insert(
        "p-left".into(),
        task(TaskPhase::Failed, Some(TaskReason::Trap), None),
    );
    tasks.insert("p-right".into(), ok(r#"{"words":1}"#));
    let out = step(&mut p, &tasks, 1_003);
    assert!(out.create.is_empty(), "{:?}", created(&out));
    assert_eq!(
        phase_of(&out, "left"),
        (StepPhase::Failed, Some(TaskReason::Trap.into()))
    );
    assert_eq!(
        phase_of(&out, "join"),
        (
            StepPhase::Failed,
            Some(PlanStepReason::DependencyFailed.into())
        )
    );
    assert_eq!(
        (out.status.phase, out.status.reason),
        (Some(PlanPhase::Failed), Some(PlanReason::StepFailed))
    );
    let msg = out.status.message.clone().unwrap_or_default();
    assert!(
        msg.contains("left (Trap)") && msg.contains("1 dependant"),
        "{msg}"
    );
}

#[test]
fn a_failure_is_retried_as_a_new_task_up_to_the_limit_but_a_refusal_is_not() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let mut tasks = Tasks::from([("p-split".into(), ok(r#"{"a":"x","b":"y"}"#))]);
    step(&mut p, &tasks, 1_002);
    tasks.insert("p-left".into(), task(TaskPhase::Running, None, None));
    tasks.insert(
        "p-right".into(),
        task(TaskPhase::Failed, Some(TaskReason::FuelExhausted), None),
    );
    let out = step(&mut p, &tasks, 1_003);
    assert_eq!(created(&out), ["p-right.2"]);
    assert_eq!(
        composed(&out.create[0], &[("split", r#"{"a":"x","b":"y"}"#)]),
        b"y".to_vec(),
        "the retry gets the same input"
    );
    assert_eq!(phase_of(&out, "right").0, StepPhase::Running);
    assert!(out.status.history.iter().any(|e| e.event == "StepRetried"));
    tasks.insert(
        "p-right.2".into(),
        task(TaskPhase::Failed, Some(TaskReason::FuelExhausted), None),
    );
    let out = step(&mut p, &tasks, 1_004);
    assert!(
        !created(&out).iter().any(|n| n.starts_with("p-right")),
        "limit 1"
    );
    assert_eq!(
        phase_of(&out, "right"),
        (StepPhase::Failed, Some(TaskReason::FuelExhausted.into()))
    );

    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let denied = Tasks::from([
        ("p-split".into(), ok(r#"{"a":"x","b":"y"}"#)),
        (
            "p-right".into(),
            task(TaskPhase::Failed, Some(TaskReason::CapabilityDenied), None),
        ),
    ]);
    let out = step(&mut p, &denied, 1_002);
    assert!(
        !created(&out).contains(&"p-right.2"),
        "a refusal would be refused again"
    );
}

#[test]
fn a_step_whose_input_cannot_be_made_stays_failed_and_fails_its_dependants() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let tasks = Tasks::from([("p-split".into(), ok(r#"{"a":"x"}"#))]);
    let mut out = run(&p, &tasks, 1_002);
    assert_eq!(created(&out), ["p-left", "p-right"]);
    // The controller could not make right's input (field b is missing): it fails the step.
    let right = out.create.remove(1);
    super::controller::fail_input(&mut out.status, &right, "no field b".into());
    keep(&mut p, out, 1_002);
    let mut tasks = tasks;
    tasks.insert("p-left".into(), task(TaskPhase::Running, None, None));
    let out = step(&mut p, &tasks, 1_003);
    assert_eq!(
        phase_of(&out, "right"),
        (
            StepPhase::Failed,
            Some(PlanStepReason::InputUnavailable.into())
        )
    );
    assert_eq!(
        phase_of(&out, "join"),
        (
            StepPhase::Failed,
            Some(PlanStepReason::DependencyFailed.into())
        )
    );
    assert!(out.create.is_empty(), "{:?}", created(&out));
}

#[test]
fn a_task_the_plan_did_not_record_is_never_a_steps_result() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    // While split runs, someone creates left and join, succeeded, with made-up outputs (their
    // uids are not the ones the Plan recorded; name, labels and owner can all be forged).
    let mut forged = ok(r#"{"words":99}"#);
    forged.uid = "forged".into();
    let mut tasks = Tasks::from([
        ("p-split".into(), task(TaskPhase::Running, None, None)),
        ("p-left".into(), forged.clone()),
        ("p-join".into(), forged),
    ]);
    let out = step(&mut p, &tasks, 1_002);
    assert!(out.create.is_empty(), "{:?}", created(&out));
    assert_eq!(phase_of(&out, "left").0, StepPhase::Waiting);
    assert_eq!(phase_of(&out, "join").0, StepPhase::Waiting);
    // Once split succeeds, left is created (the create meets the forged Task: see
    // `controller::adoptable`), never taken as done.
    let mut done = ok(r#"{"a":"x","b":"y"}"#);
    done.completion_time = Some(ts(1_003));
    tasks.insert("p-split".into(), done);
    let out = step(&mut p, &tasks, 1_004);
    assert_eq!(created(&out), ["p-left", "p-right"]);
    assert_eq!(
        out.create[0].not_before,
        Some(ts(1_003)),
        "made after the verdict and after split ended"
    );
}

#[test]
fn a_name_held_by_a_task_the_plan_did_not_create_gets_a_random_suffix_and_says_so() {
    let mut p = plan(fan());
    let out = observe(&p, &Tasks::new(), 1_001, &["p-split".into()], None);
    assert_eq!(created(&out), ["p-split.abcde"]);
    let out = keep(&mut p, out, 1_001);
    let split = out.status.steps.iter().find(|s| s.name == "split");
    assert_eq!(
        split.and_then(|s| s.task_uid.clone()),
        Some(uid("p-split.abcde"))
    );
    let tasks = Tasks::from([("p-split.abcde".into(), task(TaskPhase::Running, None, None))]);
    let out = step(&mut p, &tasks, 1_002);
    let started = out
        .status
        .history
        .iter()
        .find(|e| e.event == "StepStarted")
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(
        started.contains(
            "Task p-split.abcde: Task name p-split is held by a Task this Plan did not create"
        ),
        "{started}"
    );
    let running = out.status.steps.iter().find(|s| s.name == "split");
    let message = running.and_then(|s| s.message.clone()).unwrap_or_default();
    assert!(
        message.contains("p-split is held by a Task this Plan did not create"),
        "{message}"
    );
    // The step's result is that Task's.
    let tasks = Tasks::from([("p-split.abcde".into(), ok(r#"{"a":"x","b":"y"}"#))]);
    let out = step(&mut p, &tasks, 1_003);
    assert_eq!(phase_of(&out, "split").0, StepPhase::Succeeded);
}

#[test]
fn a_recorded_task_replaced_under_its_name_is_deleted_not_taken() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let mut other = ok(r#"{"a":"x","b":"y"}"#);
    other.uid = "someone-elses".into();
    let out = step(&mut p, &Tasks::from([("p-split".into(), other)]), 1_002);
    assert_eq!(
        phase_of(&out, "split"),
        (StepPhase::Failed, Some(PlanStepReason::TaskDeleted.into()))
    );
}

#[test]
fn cancelling_cancels_running_steps_never_starts_others_and_ends_cancelled() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let mut tasks = Tasks::from([("p-split".into(), task(TaskPhase::Running, None, None))]);
    p.spec.cancelled = Some(true);
    let out = step(&mut p, &tasks, 1_002);
    assert_eq!(out.cancel, ["p-split"]);
    assert!(out.create.is_empty());
    assert_eq!(
        out.status.phase,
        Some(PlanPhase::Running),
        "until the step stops"
    );
    assert!(out.status.history.iter().any(|e| e.event == "Cancelling"));
    tasks.insert(
        "p-split".into(),
        task(TaskPhase::Cancelled, Some(TaskReason::Cancelled), None),
    );
    let out = step(&mut p, &tasks, 1_003);
    assert_eq!(
        (out.status.phase, out.status.reason),
        (Some(PlanPhase::Cancelled), Some(PlanReason::Cancelled))
    );
    assert!(
        out.status
            .steps
            .iter()
            .all(|s| s.phase == StepPhase::Cancelled)
    );
}

#[test]
fn past_its_deadline_a_plan_stops_and_fails_deadline_exceeded() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let tasks = Tasks::from([("p-split".into(), task(TaskPhase::Running, None, None))]);
    let out = step(&mut p, &tasks, 1_050);
    assert!(out.requeue.is_some(), "woken at the deadline");
    let out = step(&mut p, &tasks, 1_100);
    assert_eq!(out.cancel, ["p-split"]);
    let done = Tasks::from([(
        "p-split".into(),
        task(TaskPhase::Cancelled, Some(TaskReason::Cancelled), None),
    )]);
    let out = step(&mut p, &done, 1_101);
    assert_eq!(out.status.reason, Some(PlanReason::DeadlineExceeded));
}

fn planned() -> Plan {
    plan(json!({"planner": {"agentRef": {"name": "planner"}, "input": "count words"}}))
}

#[test]
fn a_planner_runs_first_and_its_accepted_proposal_runs() {
    let mut p = planned();
    let out = step(&mut p, &Tasks::new(), 1_001);
    assert_eq!(created(&out), ["p-planner"]);
    assert_eq!(bytes(&out.create[0]), b"count words".to_vec());
    assert_eq!(out.status.phase, Some(PlanPhase::Planning));
    let proposal = r#"{"steps": [{"name": "one", "agentRef": {"name": "echo"}, "input": "hi"}]}"#;
    let mut tasks = Tasks::from([("p-planner".into(), task(TaskPhase::Running, None, None))]);
    assert!(step(&mut p, &tasks, 1_002).create.is_empty());
    tasks.insert("p-planner".into(), ok(proposal));
    let out = observe(&p, &tasks, 1_003, &[], Some(proposal));
    let out = keep(&mut p, out, 1_003);
    assert_eq!(created(&out), ["p-one"]);
    assert_eq!(
        out.status.proposal_sha256,
        Some(ari_model::sha256_hex(proposal.as_bytes()))
    );
    let events: Vec<_> = out
        .status
        .history
        .iter()
        .map(|e| e.event.as_str())
        .collect();
    assert_eq!(
        events,
        ["PlannerStarted", "Proposed", "Validated", "StepStarted"]
    );
}

#[test]
fn a_proposal_breaking_a_rule_or_not_a_proposal_runs_nothing() {
    for (output, reason) in [
        (
            r#"{"steps": [{"name": "one", "agentRef": {"name": "helper"}}]}"#,
            PlanReason::Rejected,
        ),
        ("I would run echo twice", PlanReason::InvalidProposal),
    ] {
        let mut p = planned();
        step(&mut p, &Tasks::new(), 1_001);
        let tasks = Tasks::from([("p-planner".into(), ok(output))]);
        let out = observe(&p, &tasks, 1_002, &[], Some(output));
        assert!(out.create.is_empty(), "{output}");
        assert_eq!(out.status.reason, Some(reason), "{output}");
        assert_eq!(out.status.phase, Some(PlanPhase::Failed));
    }
}

#[test]
fn a_planner_on_a_subagent_is_rejected_before_it_runs() {
    let p = plan(json!({"planner": {"agentRef": {"name": "helper"}}}));
    let out = run(&p, &Tasks::new(), 1_001);
    assert!(out.create.is_empty());
    assert_eq!(out.status.reason, Some(PlanReason::Rejected));
    assert_eq!(out.status.violations[0].step.as_deref(), Some("planner"));
}

#[test]
fn history_stays_bounded_and_keeps_the_plan_level_entries() {
    let mut status = ari_crds::PlanStatus::default();
    let stage = |event, step: Option<&str>| history::Stage {
        event,
        step: step.map(Into::into),
        message: "m".repeat(500),
        warning: false,
    };
    history::append(
        &mut status,
        &[
            stage(ari_crds::HistoryEvent::Proposed, None),
            stage(ari_crds::HistoryEvent::Validated, None),
        ],
        ts(1),
    );
    let many: Vec<_> = (0..400)
        .map(|_| stage(ari_crds::HistoryEvent::StepStarted, Some("s")))
        .collect();
    history::append(&mut status, &many, ts(2));
    assert_eq!(status.history.len(), ari_crds::plan::MAX_HISTORY);
    assert_eq!(status.history_dropped, Some(102));
    assert_eq!(status.history[0].event, "Proposed");
    assert_eq!(status.history[1].event, "Validated");
    assert_eq!(status.history.last().map(|e| e.seq), Some(402));
    assert!(status.history.iter().all(|e| e.message.len() <= 200));
}

#[test]
fn a_step_whose_task_was_deleted_while_running_fails_instead_of_running_again() {
    let mut p = plan(fan());
    step(&mut p, &Tasks::new(), 1_001);
    let out = step(&mut p, &Tasks::new(), 1_002);
    assert!(out.create.is_empty(), "{:?}", created(&out));
    assert_eq!(
        phase_of(&out, "split"),
        (StepPhase::Failed, Some(PlanStepReason::TaskDeleted.into()))
    );
    assert_eq!(out.status.reason, Some(PlanReason::StepFailed));
}

#[test]
fn a_planner_whose_task_was_deleted_is_not_run_again() {
    let mut p = planned();
    step(&mut p, &Tasks::new(), 1_001);
    let out = step(&mut p, &Tasks::new(), 1_002);
    assert!(out.create.is_empty());
    assert_eq!(out.status.reason, Some(PlanReason::PlannerFailed));
}

#[test]
fn a_steps_token_budget_becomes_its_tasks_and_a_plan_over_its_token_limit_never_runs() {
    let spec = json!({"limits": {"tokens": 900}, "steps": [
        {"name": "ask", "agentRef": {"name": "echo"}, "input": "q", "tokens": 500}]});
    let out = run(&plan(spec), &Tasks::new(), 1_001);
    assert_eq!(out.create.len(), 1, "{:?}", out.status);
    assert_eq!(out.create[0].tokens, Some(500));

    // Two steps at 500 each: 1,000 may be spent, above the 900 allowed.
    let spec = json!({"limits": {"tokens": 900}, "steps": [
        {"name": "a", "agentRef": {"name": "echo"}, "input": "q", "tokens": 500},
        {"name": "b", "agentRef": {"name": "echo"}, "input": "q", "tokens": 500}]});
    let out = run(&plan(spec), &Tasks::new(), 1_001);
    assert!(out.create.is_empty());
    assert_eq!(out.status.phase, Some(PlanPhase::Failed));
    let violations = format!("{:?}", out.status.violations);
    assert!(violations.contains("TokensOverLimit"), "{violations}");
}
