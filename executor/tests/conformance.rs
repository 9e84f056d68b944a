//! The guest conformance suite: every language's conformance agent, run through the real `ari`
//! binary (`ari run … --json`), against one table of cases (`conformance/cases.json`; the
//! protocol is in `conformance/README.md`). A language whose component is not built is reported
//! as skipped on stderr, past the harness's capture; `ARI_CONFORMANCE_REQUIRE=python,c` (or
//! `all`) turns such a skip into a failure.
//!
//! The model cases reach a scripted OpenAI-compatible server on 127.0.0.1 (the `scripted`
//! feature of ari-testkit), not a real model: the suite checks each SDK's mapping of the
//! `model` contract (requests, answers, every error case), which needs fixed answers, a tool
//! call on demand and 429/400/500 refusals no real server gives when asked. The real llama.cpp
//! server is exercised by ari-llm's and the runtime's own tests.
use ari_testkit::agents as common;
use ari_testkit::conformance as suite;
use ari_testkit::mcp_server::{McpServer, Mode};
use ari_testkit::scripted::{Reply, Request, Scripted};

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use suite::{Case, EchoServer, Ending, Language, Placeholders, Suite};

fn suite() -> Suite {
    suite::load(&common::repo_root()).expect("conformance/cases.json")
}

/// Every host function of `wit/ari.wit`, and the protocol command that exercises it.
const HOST_FUNCTIONS: &[(&str, &str)] = &[
    ("log", "log "),
    ("storage-get", "storage "),
    ("storage-set", "storage "),
    ("storage-delete", "storage "),
    ("random-bytes", "random "),
    ("hash", "hash "),
    ("sign", "sign "),
    ("verify", "verify "),
    ("http-request", "http "),
    ("now", "now"),
    ("delegate", "delegate"),
    ("start-child", "fan "),
    ("await-child", "fan "),
    ("send-message", "message "),
    ("chat", "model-chat "),
    ("embed", "model-embed "),
    ("models", "models"),
    ("servers", "tools"),
    ("list-tools", "tool-list "),
    ("call-tool", "tool-call "),
];

#[test]
fn the_case_table_exercises_every_host_function_granted_and_refused() {
    let suite = suite();
    for (function, command) in HOST_FUNCTIONS {
        let cases: Vec<&Case> = suite
            .cases
            .iter()
            .filter(|c| c.input.trim_start_matches("must ").starts_with(command))
            .collect();
        assert!(!cases.is_empty(), "no case calls {function}");
        let gated = !matches!(*function, "log" | "hash" | "verify" | "models" | "servers");
        // A denied call fails the task even when the agent carries on: the agent's log shows
        // which error it saw.
        if gated {
            assert!(
                cases.iter().any(
                    |c| c.end == "CapabilityDenied" && c.logs.iter().any(|l| l == "err:denied")
                ),
                "no case shows {function} refused without its grant"
            );
        }
    }
    for case in &suite.cases {
        assert!(
            case.end != "Succeeded" || case.output.is_some(),
            "{}: a succeeding case needs an exact output",
            case.name
        );
    }
    let quota = suite
        .cases
        .iter()
        .any(|c| c.logs.iter().any(|l| l == "err:quota-exceeded"));
    assert!(quota, "no case runs into the storage quota");
    // Every case of `model-error`, each as the SDKs print it.
    for seen in [
        "err:denied",
        "err:budget-exhausted",
        "err:rate-limited:",
        "err:unavailable",
        "err:invalid-request",
        "err:provider-error:",
    ] {
        let shown = suite.cases.iter().any(|c| {
            c.input.starts_with("model-")
                && (c.output.as_deref().is_some_and(|o| o.starts_with(seen))
                    || c.logs.iter().any(|l| l.starts_with(seen)))
        });
        assert!(shown, "no model case ends {seen}");
    }
    // Every case of `tool-error` a guest can be made to meet, as the SDKs print it.
    for seen in [
        "err:denied",
        "err:not-found",
        "err:invalid-arguments",
        "err:unavailable",
    ] {
        let shown = suite.cases.iter().any(|c| {
            c.input.trim_start_matches("must ").starts_with("tool")
                && (c.output.as_deref().is_some_and(|o| o.starts_with(seen))
                    || c.logs.iter().any(|l| l.starts_with(seen)))
        });
        assert!(shown, "no tools case ends {seen}");
    }
    // A person's rejection, as every SDK types it, for each host function that can wait for one.
    for command in ["http ", "delegate ", "fan ", "message "] {
        let shown = suite.cases.iter().any(|c| {
            !c.approvals.is_empty()
                && c.input.starts_with(command)
                && c.output.as_deref() == Some("err:rejected")
                && c.logs.iter().any(|l| l == "err:rejected")
        });
        assert!(shown, "no case shows `{command}` rejected as err:rejected");
    }
    for case in suite.cases.iter().filter(|c| !c.approvals.is_empty()) {
        assert!(
            case.needs.iter().any(|n| n == "approvals-cluster"),
            "{}: a case with approvals needs approvals-cluster (no one rejects in the cluster runner)",
            case.name
        );
    }
    for case in suite.cases.iter().filter(|c| !c.mcp.is_empty()) {
        assert!(
            case.needs.iter().any(|n| n == "tools-cluster"),
            "{}: a case with MCP servers needs tools-cluster (the cluster runner declares none yet)",
            case.name
        );
    }
    for case in suite.cases.iter().filter(|c| !c.models.is_empty()) {
        assert!(
            case.needs.iter().any(|n| n == "models-cluster"),
            "{}: a case with models needs models-cluster (the cluster runner has no model server yet)",
            case.name
        );
    }
}

#[test]
fn rust_agent_passes_every_conformance_case() {
    run_language("rust");
}

#[test]
fn python_agent_passes_every_conformance_case() {
    run_language("python");
}

#[test]
fn javascript_agent_passes_every_conformance_case() {
    run_language("javascript");
}

#[test]
fn c_agent_passes_every_conformance_case() {
    run_language("c");
}

fn component_of(lang: &str, language: &Language) -> Option<PathBuf> {
    if lang == "rust" {
        // Built with the other example agents (and built on demand, like them).
        return Some(common::agent_path(
            language.component.trim_end_matches(".wasm"),
        ));
    }
    let dir = match std::env::var_os("ARI_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("agents"),
        None => common::repo_root().join("target").join("agents"),
    };
    suite::built_or_skipped(
        lang,
        language,
        dir.join(&language.component),
        "conformance suite",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn run_language(lang: &str) {
    let suite = suite();
    let language = suite
        .languages
        .get(lang)
        .unwrap_or_else(|| panic!("conformance/cases.json has no language {lang}"));
    let Some(component) = component_of(lang, language) else {
        return;
    };
    let server = EchoServer::start().expect("echo server");
    let models = ModelServer::start();
    // The tools cases need the official MCP SDK's server; without it they are skipped, saying so
    // (scripts/test.sh always installs it).
    let mcp = McpServer::installed()
        .map(|python| McpServer::start(&python, Mode::Stateless, None))
        .map_err(|why| {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED the {lang} conformance cases with MCP servers: {why}"
            );
        })
        .ok();
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("signing.key");
    std::fs::write(&key, &suite.signing_key).expect("write key");
    let cache = std::env::temp_dir().join(format!("ari-conformance-cache-{lang}"));
    let places = Placeholders {
        server: server.base.clone(),
        closed: suite::closed_port_url().expect("a closed port"),
        key: key.display().to_string(),
        public_key: suite.public_key.clone(),
    };
    let fill = |text: &str| places.fill(text);

    let mut failures = Vec::new();
    let mut ran = 0;
    for case in &suite.cases {
        if !case.mcp.is_empty() && mcp.is_none() {
            continue;
        }
        ran += 1;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ari"));
        cmd.arg("--cache-dir")
            .arg(&cache)
            .arg("run")
            .arg(&component);
        cmd.arg("--input").arg(fill(&case.input)).arg("--json");
        cmd.arg("--seed")
            .arg(case.seed.as_deref().unwrap_or(&suite.default_seed));
        for grant in &case.grants {
            cmd.arg("--grant").arg(fill(grant));
        }
        for requirement in &case.require {
            cmd.arg("--require").arg(requirement);
        }
        for (name, url) in &case.models {
            let url = fill(url).replace("{models}", &models.base);
            cmd.arg("--model").arg(format!("{name}={url}"));
        }
        for (name, url) in &case.mcp {
            let server = mcp.as_ref().map(McpServer::url).unwrap_or_default();
            let url = fill(url).replace("{mcp}", &server);
            cmd.arg("--mcp").arg(format!("{name}={url}"));
        }
        if let Some(tokens) = case.tokens {
            cmd.arg("--tokens").arg(tokens.to_string());
        }
        // Without --approve-calls, ari run rejects every call these mark.
        for marked in &case.approvals {
            cmd.arg("--require-approval").arg(fill(marked));
        }
        // The Agents to delegate to run this language's component too: no other is needed.
        for (name, grants) in &case.agents {
            cmd.arg("--agent")
                .arg(format!("{name}={}", component.display()));
            for grant in grants {
                cmd.arg("--agent-grant")
                    .arg(format!("{name}:{}", fill(grant)));
            }
        }
        if let Some(fuel) = language.fuel {
            cmd.arg("--fuel").arg(fuel.to_string());
        }
        if let Some(memory) = &language.memory {
            cmd.arg("--memory").arg(memory);
        }
        let out = cmd.output().expect("run ari");
        if let Err(why) = check(case, &out) {
            failures.push(format!("  {}: {why}", case.name));
        }
    }
    let passed = ran - failures.len();
    let _ = writeln!(
        std::io::stderr(),
        "{lang} conformance: {passed} of {ran} cases passed ({})",
        component.display()
    );
    assert!(
        failures.is_empty(),
        "{lang} conformance: {} of {ran} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Checks one `ari run --json` against its case; `Err` says what differed.
fn check(case: &Case, out: &std::process::Output) -> Result<(), String> {
    let report: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "no JSON report ({e}); exit {:?}, stderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let ending = Ending {
        end: report["error"]["kind"]
            .as_str()
            .unwrap_or("Succeeded")
            .to_owned(),
        message: report["error"]["message"].as_str().unwrap_or("").to_owned(),
        output: report["output"].as_str().map(str::to_owned),
        other_output: report["outputBase64"].as_str().map(str::to_owned),
        logs: report["logs"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        usage: report["resourcesUsed"]
            .as_object()
            .map(|u| {
                u.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default(),
    };
    suite::check(case, &ending)?;
    if (ending.end == "Succeeded") != (out.status.code() == Some(0)) {
        return Err(format!(
            "ended {} but ari exited {:?}",
            ending.end,
            out.status.code()
        ));
    }
    Ok(())
}

/// The scripted OpenAI-compatible server of the model cases (see the top of this file for why
/// scripted). The first segment of a request's path names the answer, so one server serves
/// every case: `/ok/v1/...` answers, `/429/v1/...`, `/400/v1/...` and `/500/v1/...` refuse.
struct ModelServer {
    /// `http://127.0.0.1:PORT`, for `{models}`.
    base: String,
    // Dropped before the runtime that serves it.
    _server: Scripted,
    _runtime: tokio::runtime::Runtime,
}

impl ModelServer {
    fn start() -> ModelServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the model server");
        let server = runtime.block_on(Scripted::start(model_reply));
        ModelServer {
            base: format!("http://{}", server.host()),
            _server: server,
            _runtime: runtime,
        }
    }
}

/// An OpenAI error body.
fn refusal(status: u16, message: &str) -> Reply {
    Reply::new(status, json!({"error": {"message": message}}).to_string())
        .header("Content-Type", "application/json")
}

fn answer(body: Value) -> Reply {
    Reply::new(200, body.to_string()).header("Content-Type", "application/json")
}

fn model_reply(req: &Request) -> Reply {
    let mut segments = req.target.trim_start_matches('/').splitn(2, '/');
    let script = segments.next().unwrap_or_default();
    let path = segments.next().unwrap_or_default();
    match script {
        // A wait the host honours in milliseconds, so its retries take no time; its last
        // refusal's wait reaches the guest.
        "429" => refusal(429, "the script is rate limiting").header("retry-after-ms", "1"),
        "400" => refusal(400, "the script refuses this request"),
        // Retried by the host like any 5xx; the wait keeps the retries quick.
        "500" => refusal(500, "the script broke").header("retry-after-ms", "1"),
        "ok" => {
            let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
                return refusal(400, "the body is not JSON");
            };
            if path.ends_with("chat/completions") {
                chat_answer(&body)
            } else if path.ends_with("embeddings") {
                embeddings_answer(&body)
            } else {
                refusal(404, "no such path")
            }
        }
        _ => refusal(404, "no such script"),
    }
}

/// Three answers, by the conversation's shape: a tool's result is acknowledged (`tool ID said
/// CONTENT`, only if the message before it made that call), a request offering tools gets a
/// call of the first one with the user's text as `q` (only under `tool_choice: required`),
/// anything else its last message echoed (`echo:CONTENT`).
fn chat_answer(body: &Value) -> Reply {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(last) = messages.last() else {
        return refusal(400, "no messages");
    };
    let content = last["content"].as_str().unwrap_or_default();
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14,
                       "prompt_tokens_details": {"cached_tokens": 2}});
    let said = |text: String| {
        answer(json!({"id": "c", "model": "scripted-chat", "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]}))
    };
    if last["role"] == "tool" {
        let id = last["tool_call_id"].as_str().unwrap_or_default();
        let called = messages.len() >= 2
            && messages[messages.len() - 2]["tool_calls"][0]["id"].as_str() == Some(id);
        if !called {
            return refusal(
                400,
                "a tool result answers no call of the message before it",
            );
        }
        return said(format!("tool {id} said {content}"));
    }
    if let Some(tool) = body["tools"][0]["function"]["name"].as_str() {
        if body["tool_choice"] != "required" {
            return refusal(400, &format!("tool_choice is {}", body["tool_choice"]));
        }
        let arguments = json!({"q": content}).to_string();
        return answer(json!({"id": "c", "model": "scripted-chat", "usage": usage,
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call-1", "type": "function",
                     "function": {"name": tool, "arguments": arguments}}]}}]}));
    }
    said(format!("echo:{content}"))
}

/// Input `i` of text `t` gets `[chars of t, i + 0.5, -0.25]` (exact in f32, so every language
/// prints the same digits); the input tokens are the characters in all.
fn embeddings_answer(body: &Value) -> Reply {
    let inputs: Vec<&str> = body["input"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let chars = text.chars().count() as f64;
            json!({"index": i, "object": "embedding", "embedding": [chars, i as f64 + 0.5, -0.25]})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|t| t.chars().count()).sum();
    answer(
        json!({"object": "list", "model": "scripted-embed", "data": data,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
}
