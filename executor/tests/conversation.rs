//! `ari run --continues`: a conversation of three turns with `examples/agents/intake`, each
//! turn a run of its own whose report the next one continues; every turn verifies by replay
//! (the history comes from the trace), and a report given out of order or that did not ask is
//! refused.

use std::path::Path;
use std::process::Command;

use ari_testkit::agents::agent_path;
use serde_json::Value;

fn ari(cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run ari")
}

/// One turn as `--json`, written to `dir/<id>.json`; the report.
fn turn(dir: &Path, id: &str, input: &str, continues: &[&str]) -> (String, Value) {
    let intake = agent_path("intake").display().to_string();
    let mut args = vec![
        "run",
        intake.as_str(),
        "--id",
        id,
        "--input",
        input,
        "--json",
    ];
    let paths: Vec<String> = continues
        .iter()
        .map(|c| dir.join(format!("{c}.json")).display().to_string())
        .collect();
    for p in &paths {
        args.extend(["--continues", p.as_str()]);
    }
    let out = ari(dir, &args);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, &out.stdout).expect("write the report");
    (path.display().to_string(), report)
}

fn predicate(report: &Value) -> Value {
    let payload = report["attestation"]["payload"].as_str().expect("payload");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .expect("base64");
    let statement: Value = serde_json::from_slice(&bytes).expect("statement");
    statement["predicate"].clone()
}

#[test]
fn three_turns_ask_twice_then_answer_and_each_replays_from_its_own_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (p1, r1) = turn(d, "t1", "a new laptop", &[]);
    assert_eq!(r1["output"], "What is your name?", "{r1}");
    assert_eq!(predicate(&r1)["ending"]["reason"], "InputRequired");
    let (p2, r2) = turn(d, "t2", "Ada", &["t1"]);
    assert_eq!(r2["output"], "When do you need it?", "{r2}");
    let link = &predicate(&r2)["conversation"];
    assert_eq!(link["conversation"], "t1");
    assert_eq!(link["turn"], 2);
    assert_eq!(link["previous"], "t1");
    let (p3, r3) = turn(d, "t3", "Friday", &["t1", "t2"]);
    let answer: Value =
        serde_json::from_str(r3["output"].as_str().expect("text output")).expect("json");
    assert_eq!(answer["request"], "a new laptop");
    assert_eq!(answer["answers"]["When do you need it?"], "Friday");
    assert_eq!(predicate(&r3)["ending"]["reason"], "Completed");
    assert_eq!(predicate(&r3)["conversation"]["turn"], 3);

    let intake = agent_path("intake").display().to_string();
    for p in [&p1, &p2, &p3] {
        let out = ari(
            d,
            &["verify", p, "--module", &intake, "--accept-embedded-key"],
        );
        assert!(
            out.status.success(),
            "{p}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_reply_to_a_turn_that_did_not_ask_or_to_turns_out_of_order_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    turn(d, "t1", "a new laptop", &[]);
    turn(d, "t2", "Ada", &["t1"]);
    let (_, r3) = turn(d, "t3", "Friday", &["t1", "t2"]);
    assert_eq!(predicate(&r3)["ending"]["reason"], "Completed");
    let intake = agent_path("intake").display().to_string();
    for (continues, why) in [
        (vec!["t1", "t2", "t3"], "did not end asking for input"),
        (vec!["t2", "t1"], "does not continue the report before it"),
    ] {
        let mut args = vec!["run", intake.as_str(), "--input", "x"];
        let paths: Vec<String> = continues
            .iter()
            .map(|c| d.join(format!("{c}.json")).display().to_string())
            .collect();
        for p in &paths {
            args.extend(["--continues", p.as_str()]);
        }
        let out = ari(d, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{why}: {err}");
    }
}
