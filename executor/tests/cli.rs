//! The `ari` binary: output, JSON report, exit codes, verify and inspect.
use ari_testkit::agents as common;

use std::process::Command;

use common::*;

fn ari(args: &[&str]) -> std::process::Output {
    let cache = std::env::temp_dir().join("ari-cli-test-cache");
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run ari")
}

fn path(name: &str) -> String {
    agent_path(name).display().to_string()
}

#[test]
fn run_prints_the_output() {
    let out = ari(&["run", &path("echo"), "--input", "hi there"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"hi there");
}

#[test]
fn each_failure_class_has_its_exit_code() {
    let (trap, spin, dice, echo, flood) = (
        path("trap"),
        path("spin"),
        path("dice"),
        path("echo"),
        path("flood"),
    );
    let cases = [
        (vec!["run", &trap[..]], 10),
        (vec!["run", &spin[..], "--fuel", "100000"], 11),
        (
            vec![
                "run",
                &spin[..],
                "--fuel",
                "100000000000000",
                "--timeout",
                "0.5",
            ],
            12,
        ),
        (vec!["run", &dice[..]], 13),
        (
            vec!["run", &echo[..], "--input", "toolong", "--max-input", "2"],
            14,
        ),
        (
            vec!["run", &flood[..], "--input", "2", "--max-output", "1KiB"],
            16,
        ),
    ];
    for (args, code) in cases {
        let out = ari(&args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("core.wasm");
    std::fs::write(&bad, wat::parse_str("(module)").expect("wat")).expect("write");
    let out = ari(&["run", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(15));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a component"));
}

#[test]
fn json_report_verifies_and_tampering_fails() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("state");
    let state = state.display().to_string();
    let out = ari(&[
        "run",
        &path("counter"),
        "--grant",
        "storage=1MiB",
        "--state",
        &state,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let out = ari(&[
        "run",
        &path("counter"),
        "--grant",
        "storage=1MiB",
        "--state",
        &state,
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["output"], "2", "--state persists between runs");
    for key in ["resourcesUsed", "limitsApplied", "attestation", "trace"] {
        assert!(report.get(key).is_some(), "{key}");
    }
    let file = dir.path().join("report.json");
    std::fs::write(&file, &out.stdout).expect("write");
    let file = file.display().to_string();
    let unpinned = ari(&["verify", &file, "--module", &path("counter")]);
    assert_eq!(
        unpinned.status.code(),
        Some(2),
        "no key pinned, none accepted"
    );
    assert!(String::from_utf8_lossy(&unpinned.stderr).contains("--public-key"));
    let pk = predicate(&report)["publicKey"]
        .as_str()
        .expect("key")
        .to_string();
    let pinned = ari(&[
        "verify",
        &file,
        "--module",
        &path("counter"),
        "--public-key",
        &pk,
    ]);
    assert_eq!(
        pinned.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    let ok = ari(&[
        "verify",
        &file,
        "--module",
        &path("counter"),
        "--accept-embedded-key",
    ]);
    assert!(String::from_utf8_lossy(&ok.stdout).contains("EMBEDDED"));
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let tampered =
        String::from_utf8_lossy(&out.stdout).replace("\"output\": \"2\"", "\"output\": \"3\"");
    std::fs::write(&file, tampered).expect("write");
    let bad = ari(&[
        "verify",
        &file,
        "--module",
        &path("counter"),
        "--accept-embedded-key",
    ]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("output digest check failed"));

    let failed = ari(&["run", &path("trap"), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&failed.stdout).expect("json");
    assert_eq!(report["error"]["kind"], "Trap");
}

#[test]
fn inspect_lists_imports_and_exports() {
    let out = ari(&["inspect", &path("fetch")]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("valid ari agent"), "{text}");
    assert!(text.contains("instance ainur:ari/host@2.0.0"), "{text}");
    assert!(text.contains("func http-request("), "{text}");
    assert!(text.contains("instance ainur:ari/agent@2.0.0"), "{text}");
}

#[test]
fn time_is_spelled_time_access_in_the_report_as_in_the_cluster() {
    let out = ari(&[
        "run",
        &path("clock"),
        "--grant",
        "time",
        "--require",
        "time",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["requirements"], serde_json::json!(["timeAccess"]));
    let caps = &predicate(&report)["limitsApplied"]["capabilities"];
    assert_eq!(caps, &serde_json::json!(["timeAccess"]), "{report}");
}

/// Issue 26, item 10: the shipped `fanout` example run with `--config` (which Agent it calls)
/// verifies when the verifier gives the same config, and says which check failed otherwise.
/// Before the config was signed, `ari verify` replayed without it: "replay ended with
/// CapabilityDenied".
#[test]
fn a_run_with_a_config_verifies_with_that_config_and_a_changed_one_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let (fanout, wordcount) = (path("fanout"), path("wordcount"));
    let counter = format!("counter={wordcount}");
    let out = ari(&[
        "run",
        &fanout,
        "--input",
        "one two\nthree\n",
        "--config",
        "counter",
        "--agent",
        &counter,
        "--grant",
        "delegation=counter",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.path().join("report.json");
    std::fs::write(&file, &out.stdout).expect("write");
    let file = file.display().to_string();
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "verify",
            &file[..],
            "--module",
            &fanout[..],
            "--agent",
            &counter[..],
            "--accept-embedded-key",
        ];
        args.extend_from_slice(extra);
        ari(&args)
    };
    let ok = verify(&["--config", "counter"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let config_file = dir.path().join("config");
    std::fs::write(&config_file, "counter").expect("write");
    let from_file = verify(&["--config-file", &config_file.display().to_string()]);
    assert_eq!(
        from_file.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    for (extra, says) in [
        (vec![], "no config was given"),
        (
            vec!["--config", "wordcount"],
            "not the config the task ran with",
        ),
    ] {
        let bad = verify(&extra);
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains("config digest check failed") && stderr.contains(says),
            "{stderr}"
        );
    }

    // An envelope whose payload is not an in-toto Statement is refused as such.
    let mut other: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    other["attestation"]["payloadType"] = "application/json".into();
    std::fs::write(&file, other.to_string()).expect("write");
    let bad = verify(&["--config", "counter"]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("payload type is \"application/json\""),
        "{stderr}"
    );
}

/// The predicate of a report's attestation (the envelope's base64 payload, decoded).
fn predicate(report: &serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let payload = report["attestation"]["payload"].as_str().expect("payload");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .expect("base64");
    let statement: serde_json::Value = serde_json::from_slice(&bytes).expect("statement");
    statement["predicate"].clone()
}
