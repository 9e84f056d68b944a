//! The guest conformance suite: every language's conformance agent, run through the real `ari`
//! binary (`ari run … --json`), against one table of cases (`conformance/cases.json`; the
//! protocol is in `conformance/README.md`). A language whose component is not built is reported
//! as skipped on stderr, past the harness's capture; `ARI_CONFORMANCE_REQUIRE=python,c` (or
//! `all`) turns such a skip into a failure.
#[path = "../../runtime/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Suite {
    #[allow(dead_code)]
    protocol: String,
    signing_key: String,
    public_key: String,
    default_seed: String,
    languages: BTreeMap<String, Language>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Language {
    /// File name under `target/agents/`.
    component: String,
    /// The command that builds it, for the skip message.
    build: String,
    /// `--fuel` for every case of this language (else `ari run`'s default).
    #[serde(default)]
    fuel: Option<u64>,
    /// `--memory` for every case of this language (else `ari run`'s default).
    #[serde(default)]
    memory: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    input: String,
    #[serde(default)]
    grants: Vec<String>,
    #[serde(default)]
    require: Vec<String>,
    #[serde(default)]
    seed: Option<String>,
    /// The exact output; required when the case ends `Succeeded`.
    #[serde(default)]
    output: Option<String>,
    /// `Succeeded` (the default) or the failure kind of the report's `error.kind`.
    #[serde(default = "succeeded")]
    end: String,
    /// A piece of the failure message.
    #[serde(default)]
    message: Option<String>,
    /// Pieces that some log line must contain, one each.
    #[serde(default)]
    logs: Vec<String>,
    /// Inclusive `[min, max]` bounds on fields of the report's `resourcesUsed`.
    #[serde(default)]
    usage: BTreeMap<String, [u64; 2]>,
}

fn succeeded() -> String {
    "Succeeded".into()
}

fn suite() -> Suite {
    let path = common::repo_root().join("conformance/cases.json");
    let text = std::fs::read_to_string(&path).expect("read conformance/cases.json");
    serde_json::from_str(&text).expect("conformance/cases.json parses")
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
        let gated = !matches!(*function, "log" | "hash" | "verify");
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

fn required(lang: &str) -> bool {
    std::env::var("ARI_CONFORMANCE_REQUIRE").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|l| l == lang || l == "all")
    })
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
    let path = dir.join(&language.component);
    if path.is_file() {
        return Some(path);
    }
    let why = format!(
        "{} is not built; run {} (it installs the toolchain on first use)",
        path.display(),
        language.build
    );
    assert!(!required(lang), "{lang} conformance: {why}");
    // Straight to stderr, past the test harness's capture, so a skip is never silent.
    let _ = writeln!(std::io::stderr(), "SKIPPED {lang} conformance suite: {why}");
    None
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
    let server = EchoServer::start();
    let closed = closed_port_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("signing.key");
    std::fs::write(&key, &suite.signing_key).expect("write key");
    let cache = std::env::temp_dir().join(format!("ari-conformance-cache-{lang}"));
    let fill = |text: &str| {
        text.replace("{server}", &server.base)
            .replace("{closed}", &closed)
            .replace("{key}", &key.display().to_string())
            .replace("{publicKey}", &suite.public_key)
    };

    let mut failures = Vec::new();
    for case in &suite.cases {
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
    let passed = suite.cases.len() - failures.len();
    let _ = writeln!(
        std::io::stderr(),
        "{lang} conformance: {passed} of {} cases passed ({})",
        suite.cases.len(),
        component.display()
    );
    assert!(
        failures.is_empty(),
        "{lang} conformance: {} of {} cases failed:\n{}",
        failures.len(),
        suite.cases.len(),
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
    let end = report["error"]["kind"].as_str().unwrap_or("Succeeded");
    let message = report["error"]["message"].as_str().unwrap_or("");
    if end != case.end {
        return Err(format!(
            "ended {end} ({message}), expected {}; output {:?}",
            case.end, report["output"]
        ));
    }
    if (end == "Succeeded") != (out.status.code() == Some(0)) {
        return Err(format!(
            "ended {end} but ari exited {:?}",
            out.status.code()
        ));
    }
    if let Some(piece) = &case.message
        && !message.contains(piece.as_str())
    {
        return Err(format!("message {message:?} lacks {piece:?}"));
    }
    if let Some(expected) = &case.output {
        let output = report["output"].as_str();
        if output != Some(expected.as_str()) {
            return Err(format!(
                "output {:?}, expected {expected:?}",
                output.map_or(report["outputBase64"].clone(), Value::from)
            ));
        }
    }
    let logs: Vec<&str> = report["logs"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for piece in &case.logs {
        if !logs.iter().any(|line| line.contains(piece.as_str())) {
            return Err(format!("no log line contains {piece:?}: {logs:?}"));
        }
    }
    for (field, [min, max]) in &case.usage {
        let used = report["resourcesUsed"][field.as_str()].as_u64();
        if !used.is_some_and(|u| (*min..=*max).contains(&u)) {
            return Err(format!(
                "resourcesUsed.{field} = {used:?}, expected {min}..={max}"
            ));
        }
    }
    Ok(())
}

/// `http://127.0.0.1:PORT` where nothing listens: a port bound and released again.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// A real HTTP server on 127.0.0.1: `GET /hello` → 200 `hello conformance`; `POST /echo` → 200
/// with the request body; anything else → 404 `not found`.
struct EchoServer {
    base: String,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoServer {
    fn start() -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1"));
        let port = server.server_addr().to_ip().expect("ip address").port();
        let s = server.clone();
        let thread = std::thread::spawn(move || {
            for mut req in s.incoming_requests() {
                let resp = match (req.method(), req.url()) {
                    (tiny_http::Method::Get, "/hello") => {
                        tiny_http::Response::from_string("hello conformance")
                    }
                    (tiny_http::Method::Post, "/echo") => {
                        let mut body = Vec::new();
                        // A body cut short is echoed as far as it came.
                        let _ = req.as_reader().take(64 * 1024).read_to_end(&mut body);
                        tiny_http::Response::from_data(body)
                    }
                    _ => tiny_http::Response::from_string("not found").with_status_code(404),
                };
                let _ = req.respond(resp);
            }
        });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            server,
            thread: Some(thread),
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
