//! The guest conformance suite: every language's conformance agent, run through the real `ari`
//! binary (`ari run … --json`), against one table of cases (`conformance/cases.json`; the
//! protocol is in `conformance/README.md`). A language whose component is not built is reported
//! as skipped on stderr, past the harness's capture; `ARI_CONFORMANCE_REQUIRE=python,c` (or
//! `all`) turns such a skip into a failure.
use ari_testkit::agents as common;
use ari_testkit::conformance as suite;

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
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
