//! `ari run --declaration`: a declarative Agent run by the stock component
//! (`stock/declarative`) through the `ari` binary, then replayed by `ari verify` with the model,
//! the MCP server and the other Agents gone. The attestation's config digest is the
//! declaration's.
//!
//! The model is llama.cpp's server where it is installed (`ARI_MODEL_SERVER`) and a scripted
//! OpenAI-compatible server where the test needs the model to choose particular tools (a real
//! tiny model writes random words). The MCP server is the official Python SDK's
//! (`ARI_MCP_PYTHON`); tests needing one are skipped, saying why, without it.

use std::path::Path;
use std::process::{Command, Output};

use ari_runtime::model::{Attestation, Declaration, sha256_hex};
use ari_testkit::agents::agent_path;
use ari_testkit::mcp_server::{McpServer, Mode};
use ari_testkit::model_server::ModelServer;
use ari_testkit::scripted::{Blocking, Reply, Request, tool_using_answer};
use serde_json::Value;

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

fn stock() -> String {
    agent_path("declarative").display().to_string()
}

/// Writes `yaml` to `dir/agent.yaml`, returning its path.
fn declaration_file(dir: &Path, yaml: &str) -> String {
    let path = dir.join("agent.yaml");
    std::fs::write(&path, yaml).expect("write the declaration");
    path.display().to_string()
}

/// Runs `ari run` and returns the report, with the report written to `dir/report.json`.
fn run(dir: &Path, args: &[&str]) -> Value {
    let out = ari(&dir.join("cache"), args);
    assert_eq!(out.status.code(), Some(0), "ari run: {}", text(&out));
    std::fs::write(dir.join("report.json"), &out.stdout).expect("write the report");
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// `ari verify` of `dir/report.json` with the stock component, `declaration` and `extra`.
fn verify(dir: &Path, declaration: &str, extra: &[&str]) -> Output {
    let report = dir.join("report.json").display().to_string();
    let stock = stock();
    let mut args = vec![
        "verify",
        &report,
        "--module",
        &stock,
        "--declaration",
        declaration,
        "--accept-embedded-key",
    ];
    args.extend_from_slice(extra);
    ari(&dir.join("cache"), &args)
}

/// The config digest the report's attestation signs.
fn attested_config(report: &Value) -> String {
    let att: Attestation =
        serde_json::from_value(report["attestation"].clone()).expect("an attestation");
    att.predicate().expect("a predicate").config_sha256
}

const ASSISTANT: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: prompts}
data:
  assistant: You count words with your tool, then say how many there are.
---
apiVersion: ari.dev/v1alpha1
kind: Agent
metadata: {name: counter}
spec:
  declarative:
    instructionsFrom: {name: prompts, key: assistant}
    model: tiny
    tools:
      - agent: {name: wordcount, description: counts the words of a text}
    maxTurns: 3
  capabilities:
    models: {allowed: [tiny]}
    delegation: {agents: [wordcount]}
"#;

#[test]
fn a_declared_agent_calls_another_agent_as_a_tool_and_replays_without_model_or_agent() {
    let model = Blocking::start(tool_using_answer);
    let dir = tempfile::tempdir().expect("tempdir");
    let declaration = declaration_file(dir.path(), ASSISTANT);
    let endpoint = format!("tiny={}", model.openai_base());
    let wordcount = format!("wordcount={}", agent_path("wordcount").display());
    let stock = stock();
    let report = run(
        dir.path(),
        &[
            "run",
            &stock,
            "--declaration",
            &declaration,
            "--input",
            "How many words are in 'one two three four'?",
            "--grant",
            "models=tiny",
            "--model",
            &endpoint,
            "--grant",
            "delegation=wordcount",
            "--agent",
            &wordcount,
            "--json",
        ],
    );
    assert_eq!(report["output"], "The text has 4 words.", "{report}");
    // The prompt came from the ConfigMap, the tool from the declaration.
    let requests = model.server.requests();
    assert_eq!(requests.len(), 2);
    let first = String::from_utf8_lossy(&requests[0].body).into_owned();
    assert!(first.contains("You count words with your tool"), "{first}");
    assert!(first.contains(r#""name":"wordcount""#), "{first}");
    assert!(first.contains("counts the words of a text"), "{first}");
    // The child's output went back to the model.
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(second.contains(r#"\"words\":4"#), "{second}");
    assert_eq!(report["children"][0]["agent"], "wordcount", "{report}");

    // The attestation signs the declaration's digest as its config.
    let resolved: Declaration = serde_json::from_value(serde_json::json!({
        "instructions": "You count words with your tool, then say how many there are.",
        "instructionsFrom": {"name": "prompts", "key": "assistant"},
        "model": "tiny",
        "tools": [{"agent": {"name": "wordcount", "description": "counts the words of a text"}}],
        "maxTurns": 3
    }))
    .expect("declaration");
    assert_eq!(attested_config(&report), resolved.sha256());
    assert_eq!(
        attested_config(&report),
        sha256_hex(&resolved.canonical_bytes())
    );

    drop(model);
    let verified = verify(dir.path(), &declaration, &["--agent", &wordcount]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));

    // Another prompt is another config: the replay is refused.
    std::fs::write(
        &declaration,
        ASSISTANT.replace("then say how many", "then say how few"),
    )
    .expect("write");
    let other = verify(dir.path(), &declaration, &["--agent", &wordcount]);
    assert_ne!(other.status.code(), Some(0), "{}", text(&other));
}

#[test]
fn a_declaration_naming_what_is_not_granted_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let declaration = declaration_file(dir.path(), ASSISTANT);
    let stock = stock();
    let out = ari(
        &dir.path().join("cache"),
        &[
            "run",
            &stock,
            "--declaration",
            &declaration,
            "--input",
            "x",
            "--grant",
            "models=tiny",
            "--model",
            "tiny=http://127.0.0.1:9/v1",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out).contains("Agent wordcount: not in capabilities.delegation.agents"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_declared_agent_answers_from_a_real_model_and_replays_without_it() {
    let Some(server) = ModelServer::start_or_skip("declarative_real_model") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let declaration = declaration_file(
        dir.path(),
        "instructions: You answer in one short sentence.\nmodel: tiny\nmaxTokensPerTurn: 16\n",
    );
    let endpoint = format!("tiny={}", server.base_url());
    let stock = stock();
    let report = run(
        dir.path(),
        &[
            "run",
            &stock,
            "--declaration",
            &declaration,
            "--input",
            "What is WebAssembly?",
            "--grant",
            "models=tiny",
            "--model",
            &endpoint,
            "--tokens",
            "4000",
            "--json",
        ],
    );
    assert!(report["error"].is_null(), "{report}");
    assert_eq!(report["resourcesUsed"]["modelCalls"], 1, "{report}");
    let out = report["resourcesUsed"]["outputTokens"]
        .as_u64()
        .expect("output tokens");
    // llama-cpp-python may pass max_tokens by a few tokens (docs/models.md).
    assert!(out <= 16 + 3, "maxTokensPerTurn bounds the answer: {out}");
    drop(server);
    let verified = verify(dir.path(), &declaration, &[]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}

/// The model's script for the MCP test: it calls `echo` and the `add` the declaration makes
/// wait for approval, then answers once it has the results.
fn tool_script(request: &Request) -> Reply {
    let body = String::from_utf8_lossy(&request.body);
    let answer = if body.contains(r#""role":"tool""#) {
        serde_json::json!({"id": "c2", "model": "scripted-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Filed."},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 80, "completion_tokens": 2, "total_tokens": 82}})
    } else {
        serde_json::json!({"id": "c1", "model": "scripted-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call-1", "type": "function",
                     "function": {"name": "echo", "arguments": "{\"text\":\"disk full\"}"}},
                    {"id": "call-2", "type": "function",
                     "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 9, "total_tokens": 69}})
    };
    Reply::new(200, answer.to_string()).header("content-type", "application/json")
}

#[test]
fn a_declared_mcp_tool_is_called_a_declared_approval_waits_and_the_run_replays_without_the_server()
{
    let Some(mcp) = McpServer::start_or_skip("declarative_mcp", Mode::Stateless, None) else {
        return;
    };
    let model = Blocking::start(tool_script);
    let dir = tempfile::tempdir().expect("tempdir");
    let declaration = declaration_file(
        dir.path(),
        "instructions: You file tickets.\nmodel: tiny\n\
         tools:\n  - mcpServer: {name: demo, tools: [echo, add], requireApproval: [add]}\n",
    );
    let endpoint = format!("tiny={}", model.openai_base());
    let server = format!("demo={}", mcp.url());
    let stock = stock();
    // `add` is read-only: only the declaration makes it wait, and `ari run` rejects what waits
    // unless told to approve.
    let report = run(
        dir.path(),
        &[
            "run",
            &stock,
            "--declaration",
            &declaration,
            "--input",
            "The disk is full.",
            "--grant",
            "models=tiny",
            "--model",
            &endpoint,
            "--mcp",
            &server,
            "--grant",
            "tools=demo:echo,add",
            "--json",
        ],
    );
    assert_eq!(report["output"], "Filed.", "{report}");
    let requests = model.server.requests();
    let first = String::from_utf8_lossy(&requests[0].body).into_owned();
    assert!(
        first.contains(r#""name":"echo""#) && first.contains(r#""name":"add""#),
        "the declared tools, with the server's schemas: {first}"
    );
    assert!(
        !first.contains("delete_everything"),
        "undeclared tools are not offered"
    );
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(second.contains("disk full"), "echo's result: {second}");
    assert!(
        second.contains("rejected"),
        "add waited and was rejected: {second}"
    );
    let approval = &report["limitsApplied"]["tools"][0]["approval"]["tools"];
    assert_eq!(approval, &serde_json::json!(["add"]), "{report}");

    mcp.stop();
    drop(model);
    let verified = verify(dir.path(), &declaration, &[]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}
