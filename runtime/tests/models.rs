//! The `models` capability with a real component (`ask`): a granted model answers through the
//! host, which holds the key; the budget refuses before the call; cancellation and the
//! deadline cut a call in flight; and every run replays from its trace with no model.
//!
//! The provider here is a scripted OpenAI-compatible server on 127.0.0.1: these tests check
//! the host's part (grants, budget, records, cancellation), and need answers a real server
//! cannot be made to give on demand (a stall, a fixed text). The same agent runs against the
//! real llama.cpp server in the last test, when it is installed.

use std::time::{Duration, Instant};

use ari_llm::{
    ApiKey, Client, Endpoint, Limits as ClientLimits, Model, ModelProvider, RetryPolicy,
};
use ari_runtime::capability::{Grants, LoadedModels};
use ari_runtime::{
    CancelToken, FailureKind, Limits, RunReport, TaskOutcome, VerifyOptions, verify_report,
};
use ari_testkit::model_server::ModelServer;
use ari_testkit::runtime as common;
use ari_testkit::scripted::{Reply, Scripted, tool_using_answer};
use common::*;

const SECRET: &str = "sk-live-never-in-a-trace-0123456789";

const ANSWER: &str = r#"{"id":"c1","model":"scripted-1","choices":[{"index":0,
    "message":{"role":"assistant","content":"Forty-two."},"finish_reason":"stop"}],
    "usage":{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33}}"#;

/// A Tokio runtime for the scripted server (the task itself runs on the test's thread, as in a
/// worker).
fn io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn scripted(io: &tokio::runtime::Runtime, reply: fn() -> Reply) -> Scripted {
    io.block_on(Scripted::start(move |_| reply()))
}

fn answer() -> Reply {
    Reply::new(200, ANSWER).header("content-type", "application/json")
}

fn client() -> Client {
    let retry = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    Client::new(ClientLimits::default(), retry).expect("client")
}

fn model(name: &str, base_url: &str) -> Model {
    Model::new(
        name,
        Endpoint::new(
            ModelProvider::OpenAI,
            url::Url::parse(base_url).expect("url"),
            "scripted-1",
        )
        .with_key(ApiKey::new(SECRET)),
    )
}

/// The `ask` agent granted `granted`, with `loaded` models behind the names.
fn ask(question: &str, granted: &str, loaded: Vec<Model>, tokens: u64) -> ari_runtime::TaskRequest {
    let grants: Grants =
        grants(&[&format!("models={granted}")]).with_models(LoadedModels::live(client(), loaded));
    let mut req = request(question, grants);
    req.limits = Limits {
        tokens,
        ..Limits::default()
    };
    req
}

fn embedded() -> VerifyOptions {
    VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    }
}

fn verify(outcome: TaskOutcome, input: &str) -> Result<(), ari_runtime::VerifyError> {
    let report = RunReport::new(outcome, input.as_bytes(), &[]);
    let report = serde_json::to_vec(&report).expect("report json");
    let report: RunReport = serde_json::from_slice(&report).expect("report parses");
    verify_report(common::runtime(), &report, &agent_bytes("ask"), &embedded()).map(|_| ())
}

#[test]
fn a_granted_model_answers_with_a_key_the_guest_never_sees_and_the_run_replays_without_it() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let question = "What is six times seven?";
    let outcome = agent("ask").run(ask(question, "tiny", vec![model("tiny", &base)], 10_000));
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "Forty-two.");

    // The provider got the key; nothing the run produced holds it.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    let json = serde_json::to_string(&outcome).expect("outcome json");
    assert!(!json.contains(SECRET), "the key leaked into the outcome");
    assert!(json.contains("modelCall"), "the call is in the trace");

    // Usage as the provider reported it, per model and in the totals, signed.
    assert_eq!(outcome.models.len(), 1);
    let calls = &outcome.models[0];
    assert_eq!(
        (calls.name.as_str(), calls.model.as_str()),
        ("tiny", "scripted-1")
    );
    assert_eq!(
        (
            calls.usage.calls,
            calls.usage.input_tokens,
            calls.usage.output_tokens
        ),
        (1, 30, 3)
    );
    assert_eq!(outcome.resources_used.input_tokens, 30);
    assert_eq!(outcome.resources_used.output_tokens, 3);
    assert_eq!(
        outcome.attestation.predicate().expect("decodes").models,
        outcome.models
    );
    assert_eq!(outcome.limits_applied.tokens, Some(10_000));
    let applied = &outcome.limits_applied.models[0];
    assert_eq!(applied.name, "tiny");
    assert_eq!(
        applied.endpoint.as_ref().map(|e| e.url.as_str()),
        Some(base.as_str())
    );

    // The replay contacts no model: the server is gone.
    drop(server);
    verify(outcome, question).expect("replays from the trace alone");
}

#[test]
fn a_model_not_granted_is_denied_and_never_contacted() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let mut req = ask("hi", "other", vec![model("tiny", &base)], 10_000);
    req.config = b"tiny".to_vec();
    let outcome = agent("ask").run(req);
    let failure = outcome.failure.expect("denied");
    assert_eq!(
        failure.kind,
        FailureKind::CapabilityDenied,
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("`tiny` is not granted"),
        "{}",
        failure.message
    );
    assert!(server.requests().is_empty(), "the server was contacted");
}

#[test]
fn a_prompt_the_budget_cannot_fit_is_refused_before_any_request_and_replays_alike() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let outcome = agent("ask").run(ask("hi", "tiny", vec![model("tiny", &base)], 20));
    let failure = outcome.failure.clone().expect("refused");
    assert_eq!(failure.kind, FailureKind::AgentError, "{}", failure.message);
    assert!(
        failure.message.contains("token budget exhausted"),
        "{}",
        failure.message
    );
    assert!(server.requests().is_empty(), "the server was contacted");
    assert_eq!(outcome.resources_used.model_calls, 0);
    verify(outcome, "hi").expect("a refused call replays as refused");
}

#[test]
fn a_granted_name_with_no_model_behind_it_is_unavailable() {
    let outcome = agent("ask").run(ask("hi", "missing", Vec::new(), 10_000));
    let failure = outcome.failure.expect("unavailable");
    assert!(
        failure.message.contains("unavailable"),
        "{}",
        failure.message
    );
}

#[test]
fn cancelling_the_task_interrupts_a_call_in_flight() {
    let io = io();
    let server = scripted(&io, Reply::hang);
    let base = format!("http://{}/v1", server.host());
    let mut req = ask("hi", "tiny", vec![model("tiny", &base)], 10_000);
    let cancel = CancelToken::new();
    req.cancel = Some(cancel.clone());
    let task = std::thread::spawn(move || agent("ask").run(req));
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.requests().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the call never reached the server"
        );
        std::thread::park_timeout(Duration::from_millis(20));
    }
    cancel.cancel();
    let outcome = task.join().expect("task thread");
    assert_eq!(
        outcome.failure.map(|f| f.kind),
        Some(FailureKind::Cancelled)
    );
}

#[test]
fn a_call_cut_by_the_deadline_ends_the_task_deadline_exceeded_live_and_in_replay() {
    let io = io();
    let server = scripted(&io, Reply::hang);
    let base = format!("http://{}/v1", server.host());
    let mut req = ask("hi", "tiny", vec![model("tiny", &base)], 10_000);
    req.limits.timeout = Duration::from_millis(1500);
    let outcome = agent("ask").run(req);
    assert_eq!(
        outcome.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::DeadlineExceeded),
        "{:?}",
        outcome.failure
    );
    assert!(
        serde_json::to_string(&outcome.trace)
            .expect("json")
            .contains("modelDeadline")
    );
    drop(server);
    verify(outcome, "hi").expect("the replay ends at the same call");
}

#[test]
fn the_agent_asks_a_real_openai_compatible_server_and_replays_without_it() {
    let Some(server) = ModelServer::start_or_skip("models::real_server") else {
        return;
    };
    let tiny = Model::new(
        "tiny",
        Endpoint::new(
            ModelProvider::OpenAI,
            url::Url::parse(&server.base_url()).expect("url"),
            ari_testkit::model_server::CHAT_MODEL,
        ),
    );
    let grants: Grants = grants(&["models=tiny"]).with_models(LoadedModels::live(client(), [tiny]));
    let outcome = agent("ask").run(request("Say hello.", grants));
    assert_eq!(
        outcome.failure,
        None,
        "{:?}\n{}",
        outcome.failure,
        server.log()
    );
    assert!(outcome.resources_used.input_tokens > 0);
    assert!(outcome.resources_used.output_tokens > 0);
    assert_eq!(
        outcome.models[0].model,
        ari_testkit::model_server::CHAT_MODEL
    );
    drop(server);
    verify(outcome, "Say hello.").expect("replays without the server");
}

#[test]
fn a_model_uses_another_agent_as_its_tool_and_the_tree_replays_with_neither() {
    use ari_runtime::local::{LocalAgent, LocalDelegator};
    let io = io();
    let server = io.block_on(Scripted::start(tool_using_answer));
    let base = format!("http://{}/v1", server.host());
    let others = LocalDelegator::new(
        [(
            "wordcount".to_owned(),
            LocalAgent {
                agent: agent("wordcount"),
                grants: Grants::default(),
                limits: Limits::default(),
                config: Vec::new(),
            },
        )]
        .into_iter()
        .collect(),
        key(),
    );
    let grants: Grants = grants(&["models=tiny", "delegation=wordcount"])
        .with_models(LoadedModels::live(client(), [model("tiny", &base)]));
    let input = "How many words are in: one two three four?";
    let mut req = request(input, grants);
    req.config = b"model=tiny\ntool=wordcount: counts the words of a text\n".to_vec();
    req.delegation = Some(others.root_context());
    let outcome = agent("assistant").run(req);
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "The text has 4 words.");
    assert_eq!(server.requests().len(), 2, "a tool call, then the answer");
    assert_eq!(outcome.children.len(), 1);
    assert_eq!(outcome.children[0].agent, "wordcount");
    assert_eq!(outcome.resources_used.model_calls, 2);
    assert_eq!(outcome.resources_used.input_tokens, 110);

    // The whole tree replays with neither the model nor wordcount.
    drop(server);
    let report = RunReport::tree(outcome, input.as_bytes(), &[], others.finish());
    let modules =
        |name: &str| (name == "wordcount").then(|| (agent_bytes("wordcount"), Vec::new()));
    let opts = VerifyOptions {
        config: b"model=tiny\ntool=wordcount: counts the words of a text\n".to_vec(),
        ..embedded()
    };
    let verified = ari_runtime::verify_tree(
        common::runtime(),
        &report,
        &agent_bytes("assistant"),
        &modules,
        &opts,
    )
    .expect("the tree verifies");
    assert_eq!(verified, 2);
}

/// `relay` (no model of its own) passes `question` to `ask`, which holds the model: the parent
/// has `tokens`, the child's Agent allows 100,000.
fn relayed_ask(
    question: &str,
    base: &str,
    tokens: u64,
) -> (ari_runtime::local::LocalDelegator, ari_runtime::TaskRequest) {
    use ari_runtime::local::{LocalAgent, LocalDelegator};
    let asker = LocalAgent {
        agent: agent("ask"),
        grants: grants(&["models=tiny"])
            .with_models(LoadedModels::live(client(), [model("tiny", base)])),
        limits: Limits::default(),
        config: Vec::new(),
    };
    let others = LocalDelegator::new([("ask".to_owned(), asker)].into_iter().collect(), key());
    let mut req = request(&format!("pass:{question}"), grants(&["delegation=ask"]));
    req.config = b"ask".to_vec();
    req.limits = Limits {
        tokens,
        ..Limits::default()
    };
    req.delegation = Some(others.root_context());
    (others, req)
}

#[test]
fn a_child_draws_its_tokens_from_its_parent_and_the_parent_gets_the_rest_back() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let (others, req) = relayed_ask("Say hello.", &base, 1_000);
    let outcome = agent("relay").run(req);
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "got(Forty-two.)");
    // The child was given half of the parent's 1,000 and used 33 (30 in, 3 out).
    assert_eq!(outcome.children[0].tokens, 33);
    assert_eq!(outcome.resources_used.children_tokens, 33);
    assert_eq!(outcome.resources_used.tokens_spent(), 33);
    assert_eq!(
        outcome.resources_used.model_calls, 0,
        "the parent called no model"
    );
    let runs = others.finish();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].outcome.limits_applied.tokens,
        Some(500),
        "its Agent allows 100,000"
    );

    // The parent's replay charges the child's tokens from the trace, with no child and no model.
    drop(server);
    let report = RunReport::tree(outcome, b"pass:Say hello.", &[], runs);
    let modules = |name: &str| (name == "ask").then(|| (agent_bytes("ask"), Vec::new()));
    let opts = VerifyOptions {
        config: b"ask".to_vec(),
        ..embedded()
    };
    let verified = ari_runtime::verify_tree(
        common::runtime(),
        &report,
        &agent_bytes("relay"),
        &modules,
        &opts,
    )
    .expect("the tree verifies");
    assert_eq!(verified, 2);
}

#[test]
fn a_tree_never_spends_more_tokens_than_its_root_was_given() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    // 40 tokens at the root: the child gets 20, too few for any prompt of `ask`.
    let (others, req) = relayed_ask("Say hello.", &base, 40);
    let outcome = agent("relay").run(req);
    assert!(
        outcome.failure.is_some(),
        "the child's refusal fails the relay"
    );
    let runs = others.finish();
    assert_eq!(runs[0].outcome.limits_applied.tokens, Some(20));
    let refusal = &runs[0]
        .outcome
        .failure
        .as_ref()
        .expect("the child fails")
        .message;
    assert!(refusal.contains("token budget"), "{refusal}");
    assert!(server.requests().is_empty(), "no request left the host");
}

/// The ModelConfig's default temperature goes into the request the guest left without one
/// (`assistant` sets none), its prices give the usage an exact cost; both are signed in
/// `limitsApplied` and the attestation, and `ari verify` rebuilds the same requests and cost.
#[test]
fn a_default_temperature_and_prices_are_applied_signed_and_replayed() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let tiny = Model {
        default_temperature: Some(0.7),
        prices: Some(ari_model::Prices {
            currency: "USD".into(),
            input_per_million: Some("2.5".into()),
            cached_input_per_million: None,
            output_per_million: Some("10".into()),
        }),
        ..model("tiny", &base)
    };
    let grants: Grants = grants(&["models=tiny"]).with_models(LoadedModels::live(client(), [tiny]));
    let input = "What is six times seven?";
    let mut req = request(input, grants);
    req.config = b"model=tiny\n".to_vec();
    let outcome = agent("assistant").run(req);
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "Forty-two.");

    let sent: serde_json::Value = serde_json::from_slice(&server.requests()[0].body).expect("json");
    assert_eq!(sent["temperature"], serde_json::json!(0.7f32));
    // 30 input tokens at 2.5 and 3 output at 10 per million.
    let cost = outcome.models[0].estimated_cost.as_ref().expect("priced");
    assert_eq!(
        (cost.amount.as_str(), cost.currency.as_str()),
        ("0.000105", "USD")
    );
    assert_eq!(
        outcome.attestation.predicate().expect("decodes").models,
        outcome.models,
        "signed"
    );
    let applied = outcome.limits_applied.models[0]
        .endpoint
        .as_ref()
        .expect("resolved");
    assert_eq!(applied.default_temperature.as_deref(), Some("0.7"));
    assert_eq!(
        applied
            .prices
            .as_ref()
            .and_then(|p| p.output_per_million.as_deref()),
        Some("10")
    );

    drop(server);
    let report = RunReport::new(outcome, input.as_bytes(), &[]);
    let report = serde_json::to_vec(&report).expect("report json");
    let report: RunReport = serde_json::from_slice(&report).expect("report parses");
    let opts = VerifyOptions {
        config: b"model=tiny\n".to_vec(),
        ..embedded()
    };
    verify_report(common::runtime(), &report, &agent_bytes("assistant"), &opts)
        .expect("the replay sends the same temperature and reaches the same cost");
}

/// A call the model's rate limit would hold past the task's deadline is refused
/// `rate-limited` with the wait, without contacting the provider; the refusal is recorded, so
/// `ari verify` (which has no limiter) fails the call the same way.
#[test]
fn a_rate_limited_call_is_refused_recorded_and_replayed_alike() {
    let io = io();
    let server = scripted(&io, answer);
    let base = format!("http://{}/v1", server.host());
    let limits = ari_llm::rate::RateLimits {
        requests_per_minute: Some(1),
        tokens_per_minute: None,
    };
    let rate = std::sync::Arc::new(ari_llm::rate::RateLimiter::new(limits).expect("limited"));
    // Another task of the process took this minute's request.
    rate.reserve(tokio::time::Instant::now(), 0, Duration::from_secs(3600))
        .expect("the minute's request");
    let tiny = Model {
        rate: Some(rate),
        ..model("tiny", &base)
    };
    let mut req = ask("hi", "tiny", vec![tiny], 10_000);
    req.limits.timeout = Duration::from_secs(10);
    let outcome = agent("ask").run(req);
    let failure = outcome.failure.clone().expect("refused");
    assert_eq!(failure.kind, FailureKind::AgentError, "{}", failure.message);
    assert!(
        failure.message.contains("rate limited"),
        "{}",
        failure.message
    );
    assert!(server.requests().is_empty(), "the provider was contacted");
    let trace = serde_json::to_string(&outcome.trace).expect("json");
    assert!(trace.contains("modelCall"), "the refusal is recorded");
    drop(server);
    verify(outcome, "hi").expect("the replay is refused alike");
}

/// Collects what a task's model tap is given, as a worker's live view would.
struct Collect {
    followed: bool,
    pieces: std::sync::Mutex<Vec<String>>,
    /// Output tokens so far, each time a call ended.
    usage: std::sync::Mutex<Vec<u64>>,
}

impl ari_runtime::capability::ModelTap for Collect {
    fn followed(&self) -> bool {
        self.followed
    }

    fn text(&self, piece: &str) {
        self.pieces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(piece.to_owned());
    }

    fn usage(&self, so_far: &[ari_model::ModelCalls]) {
        let tokens = so_far.iter().map(|m| m.usage.output_tokens).sum();
        self.usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tokens);
    }
}

/// An OpenAI-style streamed answer in three pieces (the scripted server plays a provider
/// that streams; llama.cpp's server does too, but its random model's words cannot be
/// asserted), or the whole answer when the request does not ask for a stream.
fn streamed_or_whole(request: &ari_testkit::scripted::Request) -> Reply {
    let body = String::from_utf8_lossy(&request.body);
    if !body.contains(r#""stream":true"#) {
        return answer();
    }
    let events = concat!(
        "data: {\"model\":\"scripted-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Forty\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"-two\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\".\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":3}}\n\n",
        "data: [DONE]\n\n",
    );
    Reply::new(200, events).header("content-type", "text/event-stream")
}

/// While followed, a call is streamed and its text reaches the tap piece by piece; the guest
/// receives the whole answer, the same as unfollowed, and the run replays without a model.
/// Unfollowed, the provider is asked for the whole answer and the tap gets it whole once it
/// came (a follower may arrive meanwhile). Either way the tap is told the usage once the call
/// ends.
#[test]
fn a_followed_tasks_model_text_reaches_its_tap_as_generated_and_the_guest_gets_it_whole() {
    let io = io();
    let server = io.block_on(Scripted::start(streamed_or_whole));
    let base = format!("http://{}/v1", server.host());
    let mut outputs = Vec::new();
    for followed in [true, false] {
        let tap = std::sync::Arc::new(Collect {
            followed,
            pieces: Default::default(),
            usage: Default::default(),
        });
        let mut req = ask("hi", "tiny", vec![model("tiny", &base)], 10_000);
        req.model_tap = Some(tap.clone());
        let outcome = agent("ask").run(req);
        assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
        let pieces = tap.pieces.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if followed {
            assert_eq!(pieces, ["Forty", "-two", "."]);
        } else {
            assert_eq!(pieces, ["Forty-two."], "the whole answer, once it came");
        }
        assert_eq!(outcome.models[0].usage.output_tokens, 3);
        let told = tap.usage.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(
            told,
            [3],
            "the usage is told once the call ends, followed or not"
        );
        outputs.push(output(&outcome));
        verify(outcome, "hi").expect("replays without the model");
    }
    assert_eq!(outputs, ["Forty-two.", "Forty-two."]);
    let streamed: Vec<bool> = server
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).contains(r#""stream":true"#))
        .collect();
    assert_eq!(streamed, [true, false]);
}
