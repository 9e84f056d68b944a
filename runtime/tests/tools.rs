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
    fn usage(&self, tool_calls: u64) {
        let mut seen = self.0.lock().expect("lock");
        seen.push(format!("made {tool_calls}"));
    }
}

#[test]
fn a_followers_tap_sees_each_call_before_it_is_made_how_it_came_out_and_the_calls_made() {
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
            "made 1",
            "call demo/delete_everything {}",
            "result demo/delete_everything Denied ",
            "made 1",
        ],
        "{:?}",
        outcome.failure
    );
}

/// Decides every call it is asked about as `decision` says, as `alice`, and remembers what
/// it was asked.
struct Person {
    decision: Option<ari_model::Decision>,
    asked: std::sync::Mutex<Vec<ari_runtime::capability::ApprovalRequest>>,
}

impl Person {
    fn new(decision: Option<ari_model::Decision>) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            decision,
            asked: std::sync::Mutex::default(),
        })
    }

    fn asked(&self) -> Vec<ari_runtime::capability::ApprovalRequest> {
        self.asked.lock().expect("lock").clone()
    }
}

impl ari_runtime::capability::Approver for Person {
    fn decide(
        &self,
        request: &ari_runtime::capability::ApprovalRequest,
        until: std::time::Instant,
        _: &ari_runtime::cancel::CancelToken,
    ) -> ari_runtime::capability::Waited {
        use ari_runtime::capability::{Decided, Waited};
        self.asked.lock().expect("lock").push(request.clone());
        match self.decision {
            Some(decision) => Waited::Decided(Decided {
                decision,
                approver: "alice".into(),
                reason: Some("checked the path".into()),
            }),
            // Nobody answers: the wait lasts until the task's deadline (a real approver's
            // wait on the cluster ends the same way).
            None => {
                std::thread::sleep(until.saturating_duration_since(std::time::Instant::now()));
                Waited::Deadline
            }
        }
    }
}

/// A call of `tool` of `demo`, as an approval names it.
fn tool_call(tool: &str) -> ari_model::CallSubject {
    ari_model::CallSubject::Tool {
        server: "demo".into(),
        tool: tool.into(),
    }
}

/// `toolbox` granted every tool of `demo`, with `rule` deciding which calls need approval.
fn approving(
    input: &str,
    url: &str,
    rule: Option<ari_model::ApprovalRule>,
    approver: Option<std::sync::Arc<Person>>,
) -> ari_runtime::TaskRequest {
    let mut spec = grants(&["tools=demo:*"]).spec().clone();
    if let Some(tools) = spec.tools.as_mut() {
        tools.servers[0].approval = rule;
    }
    let client = Client::new(ToolLimits::default()).expect("client");
    let grants = Grants::load(spec, None)
        .expect("grants")
        .with_tools(LoadedTools::live(client, vec![demo(url, None)]));
    let mut req = request(input, grants);
    req.approver = approver.map(|a| a as std::sync::Arc<dyn ari_runtime::capability::Approver>);
    req
}

#[test]
fn a_destructive_call_waits_for_a_person_and_runs_only_once_approved_and_replays_the_decision() {
    let Some(mcp) = McpServer::start_or_skip("approvals", Mode::Stateless, None) else {
        return;
    };
    let input =
        "call demo echo {\"text\":\"read\"}\ncall demo delete_everything {\"confirm\":true}";

    // Approved: asked once, about that call only (echo is read-only), then made.
    let alice = Person::new(Some(ari_model::Decision::Approved));
    let outcome = agent("toolbox").run(approving(input, &mcp.url(), None, Some(alice.clone())));
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    let asked = alice.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        (&asked[0].subject, asked[0].arguments.as_str()),
        (&tool_call("delete_everything"), "{\"confirm\":true}")
    );
    assert_eq!(
        asked[0].call,
        ari_model::approval::call_id(0, "demo", "delete_everything", "{\"confirm\":true}")
    );
    assert!(
        output(&outcome).contains("deleted nothing"),
        "{}",
        output(&outcome)
    );
    assert_eq!(outcome.resources_used.tool_calls, 2);
    let attested = outcome
        .attestation
        .verify(None)
        .expect("verifies")
        .predicate;
    let [decided] = &attested.approvals[..] else {
        panic!(
            "the attestation names one decision: {:?}",
            attested.approvals
        )
    };
    assert_eq!(
        (
            decided.approver.as_str(),
            decided.decision,
            &decided.subject
        ),
        (
            "alice",
            ari_model::Decision::Approved,
            &tool_call("delete_everything")
        )
    );
    mcp.stop();
    // The replay reads the decision from the trace: nobody is asked, no server is needed.
    verify(outcome, input).expect("replays with the recorded decision");
}

#[test]
fn a_rejected_call_is_the_guests_rejected_error_and_nothing_is_sent() {
    let Some(mcp) = McpServer::start_or_skip("approval_rejected", Mode::Stateless, None) else {
        return;
    };
    let input = "call demo delete_everything {\"confirm\":true}";
    let bob = Person::new(Some(ari_model::Decision::Rejected));
    let outcome = agent("toolbox").run(approving(input, &mcp.url(), None, Some(bob.clone())));
    assert_eq!(
        outcome.failure, None,
        "a rejection is the guest's to handle"
    );
    let out = output(&outcome);
    assert!(
        out.starts_with("error rejected: tool call rejected: alice rejected call 0-")
            && out.ends_with("checked the path"),
        "{out}"
    );
    assert_eq!(bob.asked().len(), 1);
    // The trace records every exchange: the tool list, and no call.
    let records = ari_runtime::capability::tools::records_of(&outcome.trace);
    assert!(
        records
            .iter()
            .all(|r| matches!(r.call, ari_mcp::record::Call::List { .. })),
        "a rejected call was sent: {records:?}"
    );
    assert_eq!(outcome.resources_used.tool_calls, 0);
    verify(outcome, input).expect("a rejection replays");

    // No one to ask: rejected, saying so.
    let outcome = agent("toolbox").run(approving(input, &mcp.url(), None, None));
    assert!(
        output(&outcome).contains("no one to ask"),
        "{}",
        output(&outcome)
    );
}

#[test]
fn the_grant_decides_which_calls_wait_named_tools_and_destructive_ones_unless_it_says_otherwise() {
    let Some(mcp) = McpServer::start_or_skip("approval_rules", Mode::Stateless, None) else {
        return;
    };
    let input = "call demo echo {\"text\":\"x\"}\ncall demo delete_everything {\"confirm\":false}";
    let rule = |tools: &[&str], destructive| ari_model::ApprovalRule {
        tools: tools.iter().map(|t| t.to_string()).collect(),
        destructive,
    };
    use ari_model::DestructivePolicy::{NotRequired, Required};
    // (rule, the tools asked about)
    let table: [(ari_model::ApprovalRule, &[&str]); 3] = [
        (rule(&[], NotRequired), &[]),
        (rule(&["echo"], NotRequired), &["echo"]),
        (rule(&["*"], Required), &["echo", "delete_everything"]),
    ];
    for (rule, want) in table {
        let carol = Person::new(Some(ari_model::Decision::Approved));
        let outcome = agent("toolbox").run(approving(
            input,
            &mcp.url(),
            Some(rule.clone()),
            Some(carol.clone()),
        ));
        assert_eq!(outcome.failure, None, "{rule:?}: {:?}", outcome.failure);
        let asked: Vec<_> = carol.asked().into_iter().map(|r| r.subject).collect();
        let want: Vec<_> = want.iter().map(|t| tool_call(t)).collect();
        assert_eq!(asked, want, "{rule:?}");
        assert_eq!(outcome.resources_used.tool_calls, 2, "{rule:?}");
    }
}

#[test]
fn a_call_nobody_decides_ends_the_task_at_its_deadline_and_replays_so() {
    let Some(mcp) = McpServer::start_or_skip("approval_deadline", Mode::Stateless, None) else {
        return;
    };
    let input = "call demo delete_everything {\"confirm\":true}";
    let nobody = Person::new(None);
    let mut req = approving(input, &mcp.url(), None, Some(nobody));
    req.limits.timeout = Duration::from_millis(300);
    let outcome = agent("toolbox").run(req);
    let failure = outcome.failure.clone().expect("deadline");
    assert_eq!(
        failure.kind,
        FailureKind::DeadlineExceeded,
        "{}",
        failure.message
    );
    mcp.stop();
    verify(outcome, input).expect("the deadline replays");
}
