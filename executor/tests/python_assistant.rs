//! The Python tool-using agent (`examples/python/assistant`, built by
//! `scripts/build-guests.sh python`) run for real through the `ari` binary: a model that uses
//! another Agent (wordcount) as its tool, each tool call a delegation, and the whole tree replayed
//! by `ari verify` with neither the model nor wordcount (the Python twin of the runtime's
//! `a_model_uses_another_agent_as_its_tool_and_the_tree_replays_with_neither`); and a model that
//! names a tool the agent was not given, until the agent stops.
//!
//! Not built (no Python toolchain), each test is reported as skipped on stderr, past the
//! harness's capture; `ARI_CONFORMANCE_REQUIRE=python` (or `all`) turns the skip into a failure.
//!
//! The model is a scripted OpenAI-compatible server on 127.0.0.1 (the `scripted` feature of
//! ari-testkit), not a real one: the tests check the agent's loop (a tool call, its delegation,
//! the result handed back, the final answer, the turn limit), which needs fixed answers; a real
//! tiny model's words are random, and whether it calls a tool at all is up to it.
use ari_testkit::agents as common;
use ari_testkit::conformance::{Language, built_or_skipped};
use ari_testkit::scripted::{Blocking, Reply, Request, tool_using_answer};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const CONFIG: &str = "model=tiny\ntool=wordcount: counts the words of a text\n";
const INPUT: &str = "How many words are in: one two three four?";

/// The component, or `None` after the skip line (see the top of this file).
fn python_assistant() -> Option<PathBuf> {
    let dir = match std::env::var_os("ARI_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("agents"),
        None => common::repo_root().join("target").join("agents"),
    };
    let language = Language {
        component: "python-assistant.wasm".to_owned(),
        build: "scripts/build-guests.sh python".to_owned(),
        fuel: None,
        memory: None,
    };
    built_or_skipped(
        "python",
        &language,
        dir.join(&language.component),
        "tool-using agent test",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A model that only ever calls a tool the agent was not given.
fn unknown_tool_answer(_: &Request) -> Reply {
    let answer = r#"{"id":"c","model":"scripted-1","choices":[{"index":0,
        "message":{"role":"assistant","content":null,"tool_calls":[{"id":"call-1",
        "type":"function","function":{"name":"nosuch","arguments":"{}"}}]},
        "finish_reason":"tool_calls"}],
        "usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
    Reply::new(200, answer).header("content-type", "application/json")
}

fn ari(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run ari")
}

fn succeeded(what: &str, out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_python_assistant_uses_another_agent_as_its_tool_and_the_tree_replays_with_neither() {
    let Some(assistant) = python_assistant() else {
        return;
    };
    let assistant = assistant.display().to_string();
    let wordcount = format!("wordcount={}", common::agent_path("wordcount").display());
    let dir = tempfile::tempdir().expect("tempdir");
    // Kept between runs: compiling the 18 MB component (CPython inside) takes most of the time.
    let cache = std::env::temp_dir().join("ari-python-assistant-cache");
    let models = Blocking::start(tool_using_answer);
    let endpoint = format!("tiny={}", models.openai_base());

    let out = ari(
        &cache,
        &[
            "run",
            &assistant,
            "--input",
            INPUT,
            "--config",
            CONFIG,
            "--grant",
            "models=tiny",
            "--grant",
            "delegation=wordcount",
            "--agent",
            &wordcount,
            "--model",
            &endpoint,
            "--json",
        ],
    );
    succeeded("ari run", &out);
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["output"], "The text has 4 words.", "{report}");
    assert_eq!(
        models.server.requests().len(),
        2,
        "a tool call, then the answer"
    );
    // The first request offered wordcount as a tool (the config reached the agent).
    let first = String::from_utf8_lossy(&models.server.requests()[0].body).into_owned();
    assert!(first.contains(r#""name":"wordcount""#), "{first}");
    let children = report["children"].as_array().expect("children");
    assert_eq!(children.len(), 1, "{report}");
    assert_eq!(children[0]["agent"], "wordcount");
    let counted = children[0]["output"].as_str().unwrap_or_default();
    assert!(
        counted.contains(r#""words":4"#),
        "wordcount ran on the tool's input: {counted}"
    );
    // Its output went back to the model as the tool's result.
    let second = String::from_utf8_lossy(&models.server.requests()[1].body).into_owned();
    assert!(second.contains(r#"\"words\":4"#), "{second}");
    assert_eq!(report["resourcesUsed"]["modelCalls"], 2, "{report}");
    assert_eq!(report["resourcesUsed"]["inputTokens"], 110, "{report}");

    // The whole tree replays with neither the model nor wordcount's run: the server is gone.
    drop(models);
    let file = dir.path().join("report.json");
    std::fs::write(&file, &out.stdout).expect("write the report");
    let verified = ari(
        &cache,
        &[
            "verify",
            &file.display().to_string(),
            "--module",
            &assistant,
            "--agent",
            &wordcount,
            "--config",
            CONFIG,
            "--accept-embedded-key",
        ],
    );
    succeeded("ari verify", &verified);
}

#[test]
fn the_python_assistant_answers_an_unknown_tool_as_an_error_and_stops_after_six_model_calls() {
    let Some(assistant) = python_assistant() else {
        return;
    };
    let assistant = assistant.display().to_string();
    let cache = std::env::temp_dir().join("ari-python-assistant-cache");
    let models = Blocking::start(unknown_tool_answer);
    let endpoint = format!("tiny={}", models.openai_base());
    let out = ari(
        &cache,
        &[
            "run",
            &assistant,
            "--input",
            INPUT,
            "--config",
            CONFIG,
            "--grant",
            "models=tiny",
            "--grant",
            "delegation=wordcount",
            "--model",
            &endpoint,
            "--json",
        ],
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_ne!(out.status.code(), Some(0), "{report}");
    let message = report["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no answer after 6 model calls"),
        "{report}"
    );
    let requests = models.server.requests();
    assert_eq!(requests.len(), 6, "MAX_TURNS model calls, no more");
    assert_eq!(report["resourcesUsed"]["modelCalls"], 6, "{report}");
    assert!(
        report.get("children").is_none(),
        "nothing was delegated: {report}"
    );
    let last = String::from_utf8_lossy(&requests[5].body).into_owned();
    assert!(
        last.contains(r#"error: there is no tool named \"nosuch\""#),
        "{last}"
    );
}
