//! The client against a real MCP server built with the official Python SDK
//! (`testkit/mcp/server.py`, streamable HTTP on 127.0.0.1), in both protocol revisions: tools
//! listed with their annotations and called; the bounds (size, time) and a server gone give
//! their typed errors; credentials reach the server and nothing else; and the records replay
//! without the server, stopping at the first request that differs.
//!
//! Skipped (with the reason printed) when `ARI_MCP_PYTHON` is not set; `scripts/test.sh` sets it.

use std::time::Duration;

use ari_mcp::record::{Call, Outcome, Record as _, Replayer};
use ari_mcp::{
    CallError, Client, Credentials, Limits, Protocol, Secret, Session, Source, ToolError,
    ToolServer,
};
use ari_testkit::mcp_server::{McpServer, Mode};
use tokio::time::Instant;

const TOKEN: &str = "mcp-secret-token-0123456789";

fn server(mcp: &McpServer, protocol: Protocol, token: Option<&str>) -> ToolServer {
    let mut server = ToolServer::new("demo", url::Url::parse(&mcp.url()).expect("url"))
        .expect("server")
        .with_protocol(protocol);
    if let Some(token) = token {
        server = server.with_credentials(Credentials::default().with_bearer(Secret::new(token)));
    }
    server
}

fn live(limits: Limits) -> Session {
    Session::new(
        Source::Live(Client::new(limits).expect("client")),
        16 << 20,
        limits.max_arguments_bytes,
    )
}

fn args(json: &str) -> ari_mcp::Arguments {
    serde_json::from_str(json).expect("object")
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

async fn list_and_call(server: &ToolServer) -> Session {
    let mut session = live(Limits::default());
    let tools = session.list(server, deadline()).await.expect("listed");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for name in [
        "echo",
        "add",
        "slow",
        "big",
        "delete_everything",
        "auth_echo",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    assert_eq!(echo.hints.read_only, Some(true));
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    let delete = tools
        .iter()
        .find(|t| t.name == "delete_everything")
        .expect("delete");
    assert_eq!(delete.hints.destructive, Some(true));

    session.find("demo", "echo").expect("found");
    let result = session
        .call(server, "echo", args(r#"{"text":"hello"}"#), deadline())
        .await
        .expect("echoed");
    assert_eq!(result.text(), "hello");
    assert!(!result.is_error);
    let sum = session
        .call(server, "add", args(r#"{"a":2,"b":40}"#), deadline())
        .await
        .expect("added");
    assert_eq!(sum.text(), "42");
    assert_eq!(sum.structured, Some(serde_json::json!({"result": 42})));
    session
}

#[tokio::test]
async fn both_protocol_revisions_list_and_call_tools() {
    for (mode, protocol) in [
        (Mode::Stateless, Protocol::Stateless),
        (Mode::Sessions, Protocol::Session),
        (Mode::Sessions, Protocol::Auto),
    ] {
        let Some(mcp) = McpServer::start_or_skip("both_protocol_revisions", mode, None) else {
            return;
        };
        list_and_call(&server(&mcp, protocol, None)).await;
    }
}

#[tokio::test]
async fn the_token_reaches_the_server_and_is_cut_from_what_it_echoes() {
    let Some(mcp) = McpServer::start_or_skip("the_token_reaches", Mode::Stateless, Some(TOKEN))
    else {
        return;
    };
    // Without it, the server refuses: unavailable, and the error names no token.
    let mut session = live(Limits::default());
    let err = session
        .list(&server(&mcp, Protocol::Auto, None), deadline())
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, CallError::Tool(ToolError::Unavailable { .. })),
        "{err:?}"
    );
    // A wrong token is refused too, and the error does not echo it.
    let wrong = "wrong-token-abcdefghij";
    let err = live(Limits::default())
        .list(&server(&mcp, Protocol::Auto, Some(wrong)), deadline())
        .await
        .expect_err("refused");
    assert!(!err.to_string().contains(wrong), "{err}");

    let good = server(&mcp, Protocol::Auto, Some(TOKEN));
    let mut session = list_and_call(&good).await;
    // The server echoes the header it got: the host cuts the token out before anyone sees it.
    let echoed = session
        .call(&good, "auth_echo", args("{}"), deadline())
        .await
        .expect("answered");
    assert_eq!(echoed.text(), "you sent Bearer [redacted]");
    let records = session.finish().expect("records");
    let json = serde_json::to_string(
        &records
            .iter()
            .map(|r| String::from_utf8_lossy(&r.canonical_bytes()).into_owned())
            .collect::<Vec<_>>(),
    )
    .expect("json");
    assert!(!json.contains(TOKEN), "the token is in a record");
}

#[tokio::test]
async fn an_answer_over_the_bound_is_too_large_and_a_slow_one_times_out() {
    let Some(mcp) = McpServer::start_or_skip("bounds", Mode::Sessions, None) else {
        return;
    };
    let limits = Limits {
        max_result_bytes: 64 << 10,
        call_timeout: Duration::from_millis(1500),
        ..Limits::default()
    };
    for protocol in [Protocol::Session, Protocol::Auto] {
        let demo = server(&mcp, protocol, None);
        let mut session = live(limits);
        session.list(&demo, deadline()).await.expect("listed");
        // Under the transport's limit but over the result bound (text and structured output
        // both hold it), then over both.
        for size in [40 << 10, 8 << 20] {
            let err = session
                .call(
                    &demo,
                    "big",
                    args(&format!(r#"{{"size":{size}}}"#)),
                    deadline(),
                )
                .await
                .expect_err("too large");
            assert!(
                matches!(&err, CallError::Tool(ToolError::TooLarge { .. })),
                "{size}: {err:?}"
            );
        }
        let err = session
            .call(&demo, "slow", args(r#"{"seconds":30}"#), deadline())
            .await
            .expect_err("timed out");
        assert!(
            matches!(&err, CallError::Tool(ToolError::Timeout { .. })),
            "{err:?}"
        );
        // The session goes on after both.
        let ok = session
            .call(&demo, "echo", args(r#"{"text":"still here"}"#), deadline())
            .await
            .expect("echo");
        assert_eq!(ok.text(), "still here");
    }
}

#[tokio::test]
async fn a_server_gone_is_unavailable() {
    let Some(mcp) = McpServer::start_or_skip("server_gone", Mode::Stateless, None) else {
        return;
    };
    let demo = server(&mcp, Protocol::Auto, None);
    let mut session = live(Limits::default());
    session.list(&demo, deadline()).await.expect("listed");
    mcp.stop();
    let err = session
        .call(&demo, "echo", args(r#"{"text":"anyone?"}"#), deadline())
        .await
        .expect_err("gone");
    assert!(
        matches!(&err, CallError::Tool(ToolError::Unavailable { .. })),
        "{err:?}"
    );
    let err = session
        .list(&demo, deadline())
        .await
        .expect_err("still gone");
    assert!(
        matches!(&err, CallError::Tool(ToolError::Unavailable { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn records_replay_without_the_server_and_stop_at_a_divergent_request() {
    let Some(mcp) = McpServer::start_or_skip("records_replay", Mode::Stateless, None) else {
        return;
    };
    let demo = server(&mcp, Protocol::Auto, None);
    let records = list_and_call(&demo).await.finish().expect("records");
    assert_eq!(records.len(), 3);
    assert!(matches!(records[0].call, Call::List { .. }));
    mcp.stop();

    // The same exchanges, served from the records with the server gone.
    let mut replay = Session::new(
        Source::Replay(Replayer::new(records.clone())),
        16 << 20,
        1 << 20,
    );
    let tools = replay.list(&demo, deadline()).await.expect("replayed list");
    assert!(tools.iter().any(|t| t.name == "echo"));
    let echoed = replay
        .call(&demo, "echo", args(r#"{"text":"hello"}"#), deadline())
        .await
        .expect("replayed call");
    assert_eq!(echoed.text(), "hello");
    // A request that differs from the record stops the replay there.
    let err = replay
        .call(&demo, "add", args(r#"{"a":2,"b":41}"#), deadline())
        .await
        .expect_err("diverged");
    let CallError::Diverged(d) = err else {
        panic!("{err:?}");
    };
    assert_eq!(d.index, 2);
    assert!(d.what.contains("arguments"), "{d}");
    let Call::Tool { outcome, .. } = &records[2].call else {
        panic!("a call");
    };
    assert!(matches!(outcome, Outcome::Answer(_)));
}
