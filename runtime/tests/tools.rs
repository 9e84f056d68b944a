//! The `tools` capability with a real component (`toolbox`) and a real MCP server built with
//! the official Python SDK (`testkit/mcp/server.py`, streamable HTTP on 127.0.0.1): granted
//! tools are listed and called with a token the guest never sees; a tool or server not granted
//! is denied with nothing sent; an oversized answer is `too-large`, a slow one `timeout`, a
//! server gone `unavailable`; every run replays from its trace with the server gone, and a
//! replay whose guest asks something else stops at that request.
//!
//! Skipped (with the reason printed) when `ARI_MCP_PYTHON` is not set; `scripts/test.sh` sets
//! it. The denial test needs no Python: its server is scripted and must see no request.

use std::time::Duration;

use ari_mcp::{Client, Credentials, Limits as ToolLimits, Protocol, Secret, ToolServer};
use ari_runtime::capability::{Grants, LoadedTools};
use ari_runtime::{FailureKind, RunReport, TaskOutcome, VerifyOptions, verify_report};
use ari_testkit::mcp_server::{McpServer, Mode};
use ari_testkit::runtime as common;
use ari_testkit::scripted::{Reply, Scripted};
use common::*;

const TOKEN: &str = "mcp-live-token-never-in-a-trace-0123";

fn demo(url: &str, token: Option<&str>) -> ToolServer {
    let mut server = ToolServer::new("demo", url::Url::parse(url).expect("url"))
        .expect("server")
        .with_protocol(Protocol::Auto);
    if let Some(token) = token {
        server = server.with_credentials(Credentials::default().with_bearer(Secret::new(token)));
    }
    server
}

/// The `toolbox` agent granted `grants` (e.g. `tools=demo:echo`) on `servers`.
fn toolbox(
    input: &str,
    grants: &[&str],
    servers: Vec<ToolServer>,
    limits: ToolLimits,
) -> ari_runtime::TaskRequest {
    let client = Client::new(limits).expect("client");
    let grants: Grants = common::grants(grants).with_tools(LoadedTools::live(client, servers));
    request(input, grants)
}

fn verify(outcome: TaskOutcome, input: &str) -> Result<(), ari_runtime::VerifyError> {
    let report = RunReport::new(outcome, input.as_bytes(), &[]);
    let report = serde_json::to_vec(&report).expect("report json");
    let report: RunReport = serde_json::from_slice(&report).expect("report parses");
    let opts = VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    };
    verify_report(common::runtime(), &report, &agent_bytes("toolbox"), &opts).map(|_| ())
}

#[test]
fn granted_tools_are_listed_and_called_with_a_token_the_guest_never_sees_and_replay_without_the_server()
 {
    let Some(mcp) = McpServer::start_or_skip("granted_tools", Mode::Stateless, Some(TOKEN)) else {
        return;
    };
    let input = "servers\nlist demo\ncall demo echo {\"text\":\"hello\"}\ncall demo add {\"a\":2,\"b\":40}\ncall demo auth_echo";
    let grants = ["tools=demo:echo,add,auth_echo,delete_everything"];
    let outcome = agent("toolbox").run(toolbox(
        input,
        &grants,
        vec![demo(&mcp.url(), Some(TOKEN))],
        ToolLimits::default(),
    ));
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    let lines: Vec<String> = output(&outcome).lines().map(str::to_owned).collect();
    assert_eq!(lines[0], "demo");
    // Only the granted tools are listed, with what the server says of them.
    let listed: Vec<&str> = lines[1..5].iter().map(String::as_str).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "add [read-only]",
            "auth_echo",
            "delete_everything [destructive]",
            "echo [read-only]"
        ]
    );
    assert_eq!(lines[5], "hello");
    assert_eq!(lines[6], "42");
    // The server echoed the token it got: the guest sees it cut out.
    assert_eq!(lines[7], "you sent Bearer [redacted]");
    let json = serde_json::to_string(&outcome).expect("outcome json");
    assert!(!json.contains(TOKEN), "the token leaked into the outcome");
    assert!(json.contains("toolCall"), "the exchanges are in the trace");
    // Three calls sent; the listing is not a call.
    assert_eq!(outcome.resources_used.tool_calls, 3);
    assert!(
        outcome.limits_applied.tools[0]
            .url
            .as_deref()
            .is_some_and(|u| u.ends_with("/mcp")),
        "{:?}",
        outcome.limits_applied.tools
    );

    mcp.stop();
    verify(outcome, input).expect("replays without the server");
}

#[test]
fn a_tool_or_server_not_granted_is_denied_with_nothing_sent() {
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let server: Scripted = io.block_on(Scripted::start(|_| Reply::new(500, "no")));
    let url = format!("http://{}/mcp", server.host());
    let input = "call demo big {\"size\":1}\ncall other echo {}\nlist other";
    let outcome = agent("toolbox").run(toolbox(
        input,
        &["tools=demo:echo"],
        vec![demo(&url, Some(TOKEN))],
        ToolLimits::default(),
    ));
    // The guest carried on after each denial, but the task ends denied (it keeps no output).
    let failure = outcome.failure.clone().expect("denied");
    assert_eq!(
        failure.kind,
        FailureKind::CapabilityDenied,
        "{}",
        failure.message
    );
    assert!(
        failure
            .message
            .contains("tool `big` of server `demo` is not granted"),
        "{}",
        failure.message
    );
    assert!(server.requests().is_empty(), "the server was contacted");
    assert_eq!(
        outcome.resources_used.tool_calls, 0,
        "a denied call is not a call"
    );
    verify(outcome, input).expect("denials replay as denials");

    // No grant at all: denied too.
    let outcome = run("toolbox", "list demo", Grants::default());
    let failure = outcome.failure.clone().expect("denied");
    assert_eq!(
        failure.kind,
        FailureKind::CapabilityDenied,
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("capability `tools` not granted"),
        "{}",
        failure.message
    );
    verify(outcome, "list demo").expect("a denial replays as a denial");
}

#[test]
fn an_oversized_answer_is_too_large_a_slow_one_times_out_and_both_replay() {
    let Some(mcp) = McpServer::start_or_skip("bounds", Mode::Sessions, None) else {
        return;
    };
    let limits = ToolLimits {
        max_result_bytes: 64 << 10,
        call_timeout: Duration::from_millis(1500),
        ..ToolLimits::default()
    };
    let input = "call demo big {\"size\":8000000}\ncall demo slow {\"seconds\":30}\ncall demo echo {\"text\":\"after\"}\ncall demo nope {}";
    let outcome = agent("toolbox").run(toolbox(
        input,
        &["tools=demo:*"],
        vec![demo(&mcp.url(), None)],
        limits,
    ));
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    let lines: Vec<String> = output(&outcome).lines().map(str::to_owned).collect();
    assert!(lines[0].starts_with("error too-large: "), "{lines:?}");
    assert!(lines[1].starts_with("error timeout: "), "{lines:?}");
    assert_eq!(lines[2], "after");
    assert!(lines[3].starts_with("error not-found: "), "{lines:?}");
    mcp.stop();
    verify(outcome, input).expect("replays without the server");
}

#[test]
fn a_server_gone_or_not_configured_is_unavailable() {
    let Some(mcp) = McpServer::start_or_skip("server_gone", Mode::Stateless, None) else {
        return;
    };
    let url = mcp.url();
    mcp.stop();
    let input = "call demo echo {\"text\":\"anyone?\"}\nlist ghost";
    let outcome = agent("toolbox").run(toolbox(
        input,
        &["tools=demo:echo", "tools=ghost:*"],
        vec![demo(&url, None)],
        ToolLimits::default(),
    ));
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    let lines: Vec<String> = output(&outcome).lines().map(str::to_owned).collect();
    assert!(lines[0].starts_with("error unavailable: "), "{lines:?}");
    assert!(lines[1].contains("not configured"), "{lines:?}");
    verify(outcome, input).expect("an unavailable server replays alike");
}

#[test]
fn a_replay_whose_guest_asks_something_else_stops_at_that_request() {
    let Some(mcp) = McpServer::start_or_skip("divergent", Mode::Stateless, None) else {
        return;
    };
    let recorded = "call demo echo {\"text\":\"one\"}";
    let outcome = agent("toolbox").run(toolbox(
        recorded,
        &["tools=demo:echo"],
        vec![demo(&mcp.url(), None)],
        ToolLimits::default(),
    ));
    assert_eq!(output(&outcome), "one");
    mcp.stop();

    // The same trace served to a guest that asks for other arguments.
    let grants = common::grants(&["tools=demo:echo"]).with_tools(LoadedTools::replayed([demo(
        &outcome.limits_applied.tools[0].url.clone().expect("url"),
        None,
    )]));
    let mut req = request("call demo echo {\"text\":\"two\"}", grants);
    req.replay = Some(outcome.trace.clone());
    let replay = agent("toolbox").run(req);
    let failure = replay.failure.expect("diverged");
    assert!(
        failure.message.contains("replay diverged"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("arguments"), "{}", failure.message);
}

/// Records what a follower would be told.
#[derive(Default)]
struct Recorded(std::sync::Mutex<Vec<String>>);

impl ari_runtime::capability::ToolTap for Recorded {
    fn call(&self, server: &str, tool: &str, arguments: &str) {
        let mut seen = self.0.lock().expect("lock");
        seen.push(format!("call {server}/{tool} {arguments}"));
    }
    fn result(&self, server: &str, tool: &str, outcome: ari_model::ToolOutcome, text: &str) {
        let mut seen = self.0.lock().expect("lock");
        seen.push(format!("result {server}/{tool} {outcome:?} {text}"));
    }
}

#[test]
fn a_followers_tap_sees_each_call_before_it_is_made_and_how_it_came_out() {
    let Some(mcp) = McpServer::start_or_skip("tool_tap", Mode::Stateless, None) else {
        return;
    };
    let input = "call demo echo {\"text\":\"hi\"}\ncall demo delete_everything {}";
    let tap = std::sync::Arc::new(Recorded::default());
    let mut req = toolbox(
        input,
        &["tools=demo:echo"],
        vec![demo(&mcp.url(), None)],
        ToolLimits::default(),
    );
    req.tool_tap = Some(tap.clone());
    let outcome = agent("toolbox").run(req);
    let seen = tap.0.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [
            "call demo/echo {\"text\":\"hi\"}",
            "result demo/echo Answered hi",
            "call demo/delete_everything {}",
            "result demo/delete_everything Denied ",
        ],
        "{:?}",
        outcome.failure
    );
}
