//! `ari run` with models down a delegation tree: a child Agent granted a model with
//! `--agent-grant NAME:models=...` calls the `--model` the root declared, and its tokens come
//! out of its parent's `--tokens`. The model is a scripted OpenAI-compatible server on
//! 127.0.0.1 (fixed usage figures to count against).

use std::process::Command;

use ari_testkit::agents as common;
use ari_testkit::scripted::{Blocking, Request, chat_answer};
use serde_json::Value;

#[test]
fn a_child_calls_the_model_it_is_granted_out_of_its_parents_tokens() {
    let model = Blocking::start(|_: &Request| chat_answer("Forty-two.", 30, 3));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| common::agent_path(name).display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(dir.path())
        .args([
            "run",
            &path("relay"),
            "--input",
            "pass:What is six times seven?",
        ])
        .args([
            "--config",
            "ask",
            "--grant",
            "delegation=ask",
            "--tokens",
            "1000",
        ])
        .args([
            "--agent",
            &format!("ask={}", path("ask")),
            "--agent-grant",
            "ask:models=tiny",
        ])
        .args([
            "--model",
            &format!("tiny={}", model.openai_base()),
            "--json",
        ])
        .output()
        .expect("run ari");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(report["output"], "got(Forty-two.)", "{report}");
    assert_eq!(model.server.requests().len(), 1);
    let child = &report["children"][0];
    assert_eq!(
        child["limitsApplied"]["tokens"], 500,
        "half the parent's 1,000"
    );
    assert_eq!(child["resourcesUsed"]["inputTokens"], 30);
    assert_eq!(report["resourcesUsed"]["childrenTokens"], 33, "{report}");
}
