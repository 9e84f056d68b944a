//! `ari run --mcp`: the toolbox agent calls a real MCP server built with the official Python
//! SDK (`testkit/mcp/server.py`) with a token from the environment that nothing the run prints
//! holds, and `ari verify` replays the run with the server gone.
//!
//! Skipped (with the reason printed) when `ARI_MCP_PYTHON` is not set; `scripts/test.sh` sets it.

use std::process::Command;

use ari_testkit::agents::agent_path;
use ari_testkit::mcp_server::{McpServer, Mode};

const TOKEN: &str = "cli-mcp-token-never-printed-0123456789";

fn ari(args: &[&str]) -> std::process::Output {
    let cache = std::env::temp_dir().join("ari-cli-test-cache");
    Command::new(env!("CARGO_BIN_EXE_ari"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env("ARI_TEST_MCP_TOKEN", TOKEN)
        .output()
        .expect("run ari")
}

/// `ari verify REPORT --module MODULE`, trusting the key the report embeds.
fn verify(report: &str, module: &str) -> std::process::Output {
    ari(&[
        "verify",
        report,
        "--module",
        module,
        "--accept-embedded-key",
    ])
}

#[test]
fn ari_run_calls_an_mcp_server_and_ari_verify_replays_without_it() {
    let Some(mcp) = McpServer::start_or_skip("ari_run_mcp", Mode::Sessions, Some(TOKEN)) else {
        return;
    };
    let toolbox = agent_path("toolbox").display().to_string();
    let url = format!("demo={}", mcp.url());
    let input = "list demo\ncall demo echo {\"text\":\"hi from ari run\"}\ncall demo auth_echo";
    let out = ari(&[
        "run",
        &toolbox,
        "--input",
        input,
        "--mcp",
        &url,
        "--mcp-token-env",
        "demo=ARI_TEST_MCP_TOKEN",
        "--grant",
        "tools=demo:echo,auth_echo",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for printed in [&stdout, &stderr] {
        assert!(!printed.contains(TOKEN), "the token was printed");
    }
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json report");
    let output = report["output"].as_str().expect("output");
    assert!(output.contains("echo [read-only]"), "{output}");
    assert!(output.contains("hi from ari run"), "{output}");
    assert!(output.ends_with("you sent Bearer [redacted]"), "{output}");
    assert_eq!(report["limitsApplied"]["tools"][0]["name"], "demo");

    mcp.stop();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("report.json");
    std::fs::write(&file, &out.stdout).expect("write");
    let file = file.display().to_string();
    let verified = verify(&file, &toolbox);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    // A recorded answer changed: the trace no longer matches what was signed.
    std::fs::write(
        &file,
        stdout.replace("hi from ari run", "hi from elsewhere"),
    )
    .expect("write");
    let tampered = verify(&file, &toolbox);
    assert_ne!(tampered.status.code(), Some(0));
}

/// A destructive tool's call waits for approval: `ari run` rejects it unless given
/// `--approve-calls`, `--require-approval` marks a read-only one too, and an approved run's
/// report names who approved and replays without asking.
#[test]
fn ari_run_asks_approval_for_destructive_and_marked_tools() {
    let Some(mcp) = McpServer::start_or_skip("ari_run_approval", Mode::Stateless, None) else {
        return;
    };
    let toolbox = agent_path("toolbox").display().to_string();
    let url = format!("demo={}", mcp.url());
    let run = |input: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            &toolbox,
            "--input",
            input,
            "--mcp",
            &url,
            "--grant",
            "tools=demo:*",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = ari(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
        (report, out.stdout)
    };
    let destroy = "call demo delete_everything {\"confirm\":true}";
    let (report, _) = run(destroy, &[]);
    let output = report["output"].as_str().expect("output");
    assert!(
        output.starts_with("error rejected:") && output.contains("--approve-calls"),
        "{output}"
    );
    let (report, _) = run(
        "call demo echo {\"text\":\"x\"}",
        &["--require-approval", "demo:echo"],
    );
    assert!(
        report["output"]
            .as_str()
            .is_some_and(|o| o.starts_with("error rejected:")),
        "{report}"
    );

    let (report, bytes) = run(destroy, &["--approve-calls"]);
    assert_eq!(report["output"], "deleted nothing", "{report}");
    mcp.stop();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("report.json");
    std::fs::write(&file, &bytes).expect("write");
    let verified = verify(&file.display().to_string(), &toolbox);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}
