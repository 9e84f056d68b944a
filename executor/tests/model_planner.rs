//! The model-backed planner (`examples/agents/model-planner`) run through the `ari` binary: it
//! asks a model for a Plan proposal in the proposal's own JSON schema, and `ari plan validate`
//! (the operator's validator) admits a proposal that keeps to the Plan's Agents and refuses one
//! that names another; the run replays with `ari verify` without the model.
//!
//! The model is a scripted OpenAI-compatible server on 127.0.0.1 (ari-testkit's `scripted`): a
//! real tiny model writes random words, and these tests need one plan that keeps the rules and
//! one that breaks them.

use std::path::Path;
use std::process::{Command, Output};

use ari_testkit::agents as common;
use ari_testkit::scripted::{Blocking, Reply, Request, chat_answer};
use serde_json::Value;

const CONFIG: &str = "model=tiny\n\
    agent=wordcount: counts the words of a text; its output is {\"words\": N}\n\
    agent=echo: returns its input unchanged\n";
const GOAL: &str = "Count the words of 'one two' and of 'three', then report both counts.";

/// A fan-out over wordcount and a fan-in on echo: within the example Plan.
const GOOD: &str = r#"{"steps": [
    {"name": "left", "agentRef": {"name": "wordcount"}, "input": "one two", "outputs": ["words"]},
    {"name": "right", "agentRef": {"name": "wordcount"}, "input": "three", "outputs": ["words"]},
    {"name": "report", "agentRef": {"name": "echo"}, "inputFrom": [
        {"step": "left", "field": "words", "key": "l"}, {"step": "right", "field": "words", "key": "r"}]}]}"#;
/// A model that reaches for an Agent the Plan does not allow (one that does not exist either).
const BAD: &str =
    r#"{"steps": [{"name": "run", "agentRef": {"name": "shell"}, "input": "rm -rf /"}]}"#;

fn ari(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run ari")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

/// Runs the planner against a model answering `proposal`; returns the report, the one
/// request the model got and the report's file.
fn plan_with(proposal: &'static str, dir: &Path) -> (Value, String, std::path::PathBuf) {
    let model = Blocking::start(move |_: &Request| -> Reply { chat_answer(proposal, 400, 90) });
    let planner = common::agent_path("model-planner").display().to_string();
    let endpoint = format!("tiny={}", model.openai_base());
    let out = ari(
        &dir.join("cache"),
        &[
            "run",
            &planner,
            "--input",
            GOAL,
            "--config",
            CONFIG,
            "--grant",
            "models=tiny",
            "--model",
            &endpoint,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "ari run: {}", text(&out));
    let requests = model.server.requests();
    assert_eq!(requests.len(), 1);
    let request = String::from_utf8_lossy(&requests[0].body).into_owned();
    let file = dir.join("report.json");
    std::fs::write(&file, &out.stdout).expect("write the report");
    let report = serde_json::from_slice(&out.stdout).expect("a JSON report");
    (report, request, file)
}

/// `ari plan validate` of the example Plan (`examples/manifests/models/planner.yaml`, which
/// allows wordcount and echo) with `report`'s output as its planner's proposal, against the
/// example Agents.
fn validate(report: &Value, dir: &Path) -> Output {
    let proposal = dir.join("proposal.json");
    let output = report["output"].as_str().expect("the proposal is text");
    std::fs::write(&proposal, output).expect("write the proposal");
    let manifests = common::repo_root().join("examples/manifests");
    let plan = manifests.join("models/planner.yaml");
    let p = |p: &Path| p.display().to_string();
    ari(
        &dir.join("cache"),
        &[
            "plan",
            "validate",
            &p(&plan),
            "--agents",
            &p(&manifests),
            "--agents",
            &p(&plan),
            "--proposal",
            &p(&proposal),
        ],
    )
}

#[test]
fn a_models_plan_within_the_plans_agents_is_admitted_and_the_run_replays_without_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (report, request, file) = plan_with(GOOD, dir.path());
    // The model was asked in the proposal's own schema, told which Agents it may use.
    assert!(request.contains("response_format"), "{request}");
    assert!(request.contains("ari plan proposal"), "{request}");
    assert!(
        request.contains("- wordcount: counts the words"),
        "{request}"
    );
    assert_eq!(report["resourcesUsed"]["inputTokens"], 400, "{report}");

    let verdict = validate(&report, dir.path());
    assert_eq!(
        verdict.status.code(),
        Some(0),
        "admitted: {}",
        text(&verdict)
    );

    // The model is gone: the run replays from its trace.
    let planner = common::agent_path("model-planner").display().to_string();
    let verified = ari(
        &dir.path().join("cache"),
        &[
            "verify",
            &file.display().to_string(),
            "--module",
            &planner,
            "--config",
            CONFIG,
            "--accept-embedded-key",
        ],
    );
    assert_eq!(
        verified.status.code(),
        Some(0),
        "ari verify: {}",
        text(&verified)
    );
}

#[test]
fn a_models_plan_that_reaches_for_another_agent_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (report, _, _) = plan_with(BAD, dir.path());
    // The planner's own run succeeded: judging the plan is the validator's job.
    assert!(report["failure"].is_null(), "{report}");
    let verdict = validate(&report, dir.path());
    assert_eq!(
        verdict.status.code(),
        Some(3),
        "refused: {}",
        text(&verdict)
    );
    assert!(
        text(&verdict).contains("agent-not-allowed"),
        "{}",
        text(&verdict)
    );
}
