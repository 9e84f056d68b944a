//! `ari run --require-approval delegation=AGENT | network=ORIGIN`: a delegation or a request
//! the command line marks waits for approval, which `--approve-calls` gives in your name (and
//! otherwise is a rejection); the decision is signed and `ari verify` replays it.

use std::process::Command;

use ari_testkit::agents::agent_path;
use ari_testkit::http::Server;

fn ari(args: &[&str]) -> std::process::Output {
    let cache = std::env::temp_dir().join("ari-cli-test-cache");
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env("USER", "carol")
        .output()
        .expect("run ari")
}

fn path(name: &str) -> String {
    agent_path(name).display().to_string()
}

/// `ari run ARGS --json`, which must exit 0: the report, and its bytes.
fn run(args: &[&str]) -> (serde_json::Value, Vec<u8>) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = ari(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_slice(&out.stdout).expect("json report");
    (report, out.stdout)
}

/// The attestation's predicate.
fn predicate(report: &serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let payload = report["attestation"]["payload"].as_str().expect("payload");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .expect("base64");
    let statement: serde_json::Value = serde_json::from_slice(&bytes).expect("statement");
    statement["predicate"].clone()
}

/// `ari verify` of `report` (written to a file) with `extra` arguments: its exit code and
/// stderr.
fn verify(report: &[u8], module: &str, extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("report.json");
    std::fs::write(&file, report).expect("write");
    let file = file.display().to_string();
    let mut args = vec![
        "verify",
        &file[..],
        "--module",
        module,
        "--accept-embedded-key",
    ];
    args.extend_from_slice(extra);
    let out = ari(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ari_run_holds_a_marked_request_for_approval_and_ari_verify_replays_the_decision() {
    let server = Server::start();
    let conformance = path("conformance");
    let grant = format!("network={}", server.base);
    let input = format!("http GET {}/hello", server.base);
    let mark = format!("network={}", server.base);
    let base = [
        &conformance[..],
        "--input",
        &input,
        "--grant",
        &grant,
        "--require-approval",
        &mark,
    ];

    // Not approved on the command line: the guest gets `http-error.rejected`, nothing sent.
    let (report, rejected) = run(&base);
    assert_eq!(report["output"], "err:rejected", "{report}");
    assert_eq!(server.hits(), 0, "a rejected request was sent");
    let approvals = &predicate(&report)["approvals"];
    assert_eq!(approvals[0]["decision"], "Rejected", "{approvals}");
    let (code, stderr) = verify(&rejected, &conformance, &[]);
    assert_eq!(code, Some(0), "the rejection replays: {stderr}");

    let mut approved = base.to_vec();
    approved.push("--approve-calls");
    let (report, bytes) = run(&approved);
    assert_eq!(
        report["output"], "status:200 body:hello from the test server",
        "{report}"
    );
    assert_eq!(server.hits(), 1);
    let approvals = &predicate(&report)["approvals"];
    assert_eq!(approvals[0]["method"], "GET", "{approvals}");
    assert_eq!(approvals[0]["decision"], "Approved", "{approvals}");
    assert_eq!(approvals[0]["approver"], "carol (ari run)", "{approvals}");
    drop(server);
    let (code, stderr) = verify(&bytes, &conformance, &[]);
    assert_eq!(code, Some(0), "{stderr}");

    // A host the grant does not name cannot be marked.
    let out = ari(&[
        "run",
        &conformance,
        "--input",
        "echo x",
        "--grant",
        &grant,
        "--require-approval",
        "network=https://elsewhere.example",
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an entry of --grant network="),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ari_run_holds_a_marked_delegation_for_approval_and_ari_verify_replays_the_tree() {
    let (fanout, wordcount) = (path("fanout"), path("wordcount"));
    let agent = format!("wordcount={wordcount}");
    let base = [
        &fanout[..],
        "--input",
        "one two\nthree\n",
        "--agent",
        &agent,
        "--grant",
        "delegation=wordcount",
        "--require-approval",
        "delegation=wordcount",
    ];

    // Not approved: the first child is rejected before it starts, and fanout gives up.
    let out = ari(&[&["run"], &base[..]].concat());
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rejected") && stderr.contains("--approve-calls"),
        "{stderr}"
    );

    let mut approved = base.to_vec();
    approved.push("--approve-calls");
    let (report, bytes) = run(&approved);
    assert_eq!(report["output"], r#"{"parts":2,"words":3}"#, "{report}");
    let approvals = &predicate(&report)["approvals"];
    assert_eq!(
        approvals.as_array().map(Vec::len),
        Some(2),
        "one decision per child: {approvals}"
    );
    assert_eq!(approvals[1]["agent"], "wordcount", "{approvals}");
    let (code, stderr) = verify(&bytes, &fanout, &["--agent", &agent]);
    assert_eq!(code, Some(0), "{stderr}");
}
