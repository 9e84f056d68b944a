//! Error paths of model calls against a scripted server on 127.0.0.1. Scripted because a real
//! server cannot be made to do these on demand: each test says which misbehaviour it plays.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ari_llm::record::{Call, Outcome};
use ari_llm::types::{ChatRequest, Message};
use ari_llm::{
    ApiKey, CallError, Client, Endpoint, Limits, Model, ModelError, ModelProvider, RetryPolicy,
    Session, Source,
};
use ari_testkit::scripted::{Reply, Scripted};
use tokio::time::Instant;

const SECRET: &str = "sk-live-do-not-leak-0123456789";

const ANSWER: &str = r#"{"id":"c","model":"scripted","choices":[{"index":0,
    "message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
    "usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

fn endpoint(server: &Scripted, kind: ModelProvider) -> Endpoint {
    let base = match kind {
        ModelProvider::OpenAI => format!("http://{}/v1", server.host()),
        ModelProvider::Anthropic => format!("http://{}", server.host()),
    };
    Endpoint::new(kind, url::Url::parse(&base).expect("url"), "scripted")
        .with_key(ApiKey::new(SECRET))
}

/// Fast retries, so the retry tests take milliseconds.
fn client() -> Client {
    let retry = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
    };
    Client::new(Limits::default(), retry).expect("client")
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hello")],
        ..ChatRequest::default()
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

async fn chat(
    server: &Scripted,
    client: &Client,
) -> Result<ari_llm::types::ChatResponse, ModelError> {
    client
        .chat(
            &endpoint(server, ModelProvider::OpenAI),
            &hello(),
            16,
            soon(),
        )
        .await
        .map(|(answer, _)| answer)
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} holds the key: {text}");
}

/// A provider that refuses the key and echoes it back, as OpenAI's "Incorrect API key
/// provided: sk-..." does (a real server here takes no key at all).
#[tokio::test]
async fn a_refused_key_is_a_provider_error_without_the_key_in_it() {
    let server = Scripted::start(|req| {
        let sent = req.header("authorization").unwrap_or_default().to_string();
        Reply::new(
            401,
            format!(r#"{{"error":{{"message":"Incorrect API key provided: {sent}"}}}}"#),
        )
    })
    .await;
    let err = chat(&server, &client()).await.expect_err("refused");
    let ModelError::Provider { status, message } = &err else {
        panic!("provider error: {err:?}");
    };
    assert_eq!(*status, 401);
    assert!(message.contains("[redacted]"), "{message}");
    for shown in [
        err.to_string(),
        format!("{err:?}"),
        serde_json::to_string(&err).expect("json"),
    ] {
        assert_no_secret("the error", &shown);
    }
    assert_eq!(
        server.hits_on("/v1/chat/completions"),
        1,
        "a 401 is not retried"
    );
    let sent = &server.requests()[0];
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str()),
        "the key does go to the provider"
    );
}

/// A rate limit that lifts: a real server cannot be told to answer 429 once.
#[tokio::test]
async fn a_rate_limit_is_retried_after_the_wait_the_provider_names() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let server = Scripted::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::new(429, r#"{"error":{"message":"slow down"}}"#).header("Retry-After", "0")
        } else {
            Reply::new(200, ANSWER)
        }
    })
    .await;
    let answer = chat(&server, &client()).await.expect("the retry succeeds");
    assert_eq!(answer.message.content.as_deref(), Some("hi"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A rate limit whose wait ends past the call's deadline: given up at once, and the guest
/// learns when to come back.
#[tokio::test]
async fn a_rate_limit_past_the_deadline_is_returned_with_its_wait() {
    let server = Scripted::start(|_| {
        Reply::new(429, r#"{"error":{"message":"quota"}}"#).header("Retry-After", "3600")
    })
    .await;
    let err = chat(&server, &client()).await.expect_err("rate limited");
    assert_eq!(
        err,
        ModelError::RateLimited {
            retry_after_millis: Some(3_600_000),
            message: "quota".into()
        }
    );
    assert_eq!(
        server.hits().len(),
        1,
        "no retry that cannot finish in time"
    );
}

/// A server that keeps failing: a real one does not fail on demand.
#[tokio::test]
async fn server_errors_are_retried_then_reported_with_their_status() {
    let server = Scripted::start(|_| Reply::new(503, "<html>upstream down</html>")).await;
    let err = chat(&server, &client()).await.expect_err("fails");
    assert_eq!(
        err,
        ModelError::Provider {
            status: 503,
            message: "<html>upstream down</html>".into()
        }
    );
    assert_eq!(server.hits().len(), 3, "every attempt the policy allows");
}

/// A server that accepts and never answers.
#[tokio::test]
async fn a_silent_server_fails_the_call_at_its_deadline() {
    let server = Scripted::start(|_| Reply::hang()).await;
    let deadline = Instant::now() + Duration::from_millis(300);
    let err = client()
        .chat(
            &endpoint(&server, ModelProvider::OpenAI),
            &hello(),
            16,
            deadline,
        )
        .await
        .expect_err("no answer");
    assert!(
        matches!(&err, ModelError::Unavailable { message } if message.contains("deadline")),
        "{err:?}"
    );
}

/// An answer that is not what the wire format says.
#[tokio::test]
async fn a_malformed_answer_is_a_provider_error() {
    for body in [
        "<html>hello</html>",
        r#"{"choices":"none"}"#,
        r#"{"choices":[]}"#,
    ] {
        let server = Scripted::start(move |_| Reply::new(200, body)).await;
        let err = chat(&server, &client()).await.expect_err("malformed");
        assert!(
            matches!(err, ModelError::Provider { status: 200, .. }),
            "{body}: {err:?}"
        );
    }
}

/// An answer far larger than the bound, declared and undeclared: read no further than it.
#[tokio::test]
async fn an_oversized_answer_is_cut_off_at_the_bound() {
    let limits = Limits {
        max_response_bytes: 64 << 10,
        ..Limits::default()
    };
    let client = Client::new(limits, RetryPolicy::default()).expect("client");
    for declared in [true, false] {
        let server = Scripted::start(move |_| Reply::repeat(b' ', 1 << 30, declared)).await;
        let err = chat(&server, &client).await.expect_err("too large");
        assert!(
            matches!(&err, ModelError::Provider { message, .. } if message.contains("larger than")),
            "{err:?}"
        );
        assert!(
            server.bytes_sent() < 64 << 20,
            "the client stopped reading ({} bytes sent)",
            server.bytes_sent()
        );
    }
}

/// A stream that sends a few events and then nothing: a real server does not stall on demand.
#[tokio::test]
async fn a_stalled_stream_fails_after_the_idle_timeout() {
    let server = Scripted::start(|_| {
        Reply::stall_after(
            200,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        )
        .header("Content-Type", "text/event-stream")
    })
    .await;
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let client = Client::new(limits, RetryPolicy::default()).expect("client");
    let mut seen = String::new();
    let err = client
        .chat_streaming(
            &endpoint(&server, ModelProvider::OpenAI),
            &hello(),
            16,
            soon(),
            &mut |t: &str| seen.push_str(t),
        )
        .await
        .expect_err("stalled");
    assert_eq!(seen, "Hel", "the text before the stall was handed on");
    assert!(
        matches!(&err, ModelError::Unavailable { message } if message.contains("sent nothing")),
        "{err:?}"
    );
}

/// Nothing listens on the port.
#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let endpoint = Endpoint::new(
        ModelProvider::OpenAI,
        url::Url::parse(&format!("http://127.0.0.1:{port}/v1")).expect("url"),
        "m",
    );
    let err = client()
        .chat(&endpoint, &hello(), 16, soon())
        .await
        .expect_err("refused");
    assert!(matches!(err, ModelError::Unavailable { .. }), "{err:?}");
}

/// Cancelling a task drops its call: the connection closes and the provider stops working
/// for it. Scripted because the server must hold the call open until then.
#[tokio::test]
async fn dropping_a_call_closes_its_connection() {
    let server = Scripted::start(|_| Reply::hang()).await;
    let client = client();
    let endpoint = endpoint(&server, ModelProvider::OpenAI);
    let request = hello();
    let call = client.chat(&endpoint, &request, 16, soon());
    let wait_in_flight = async {
        while server.in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        _ = call => panic!("the server never answers"),
        () = wait_in_flight => {}
    }
    // `call` is dropped here: the task was cancelled.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while server.in_flight() > 0 {
        assert!(
            std::time::Instant::now() < end,
            "the connection stayed open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn model(server: &Scripted) -> Model {
    Model::new("scripted", endpoint(server, ModelProvider::OpenAI))
}

/// The budget refuses a prompt that cannot fit before anything is sent (the scripted server
/// counts requests: any would do, and this one answers nothing else).
#[tokio::test]
async fn a_prompt_over_the_budget_never_reaches_the_provider() {
    let server = Scripted::start(|_| Reply::new(200, ANSWER)).await;
    let mut session = Session::new(Source::Live(client()), 20, 1 << 20);
    let request = ChatRequest {
        messages: vec![Message::user("x".repeat(100))],
        ..ChatRequest::default()
    };
    let err = session
        .chat(&model(&server), request, soon(), None)
        .await
        .expect_err("refused");
    assert!(
        matches!(err, CallError::Model(ModelError::BudgetExhausted { .. })),
        "{err:?}"
    );
    assert!(server.hits().is_empty(), "the provider was contacted");
    assert!(session.recording().records().is_empty());
}

/// A provider that does not report usage is charged the most the call could have used.
#[tokio::test]
async fn a_call_without_usage_is_charged_its_upper_bound() {
    let server = Scripted::start(|_| {
        Reply::new(
            200,
            r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#,
        )
    })
    .await;
    let mut session = Session::new(Source::Live(client()), 1000, 1 << 20);
    let request = ChatRequest {
        max_tokens: Some(10),
        ..hello()
    };
    let answer = session
        .chat(&model(&server), request, soon(), None)
        .await
        .expect("answer");
    // "hello": 5 bytes + 8 for the message + 16 for the request.
    assert_eq!(answer.usage.input_tokens, 29);
    assert_eq!(answer.usage.output_tokens, 10);
    assert_eq!(session.budget().remaining(), 1000 - 39);
    let sent: serde_json::Value =
        serde_json::from_slice(&server.requests()[0].body).expect("json body");
    assert_eq!(sent["max_tokens"], 10);
}

/// A provider error ends up in the record, so a replay fails the same way.
#[tokio::test]
async fn errors_are_recorded_and_replayed() {
    let server = Scripted::start(|_| Reply::new(400, r#"{"error":{"message":"bad tool"}}"#)).await;
    let mut live = Session::new(Source::Live(client()), 1000, 1 << 20);
    let err = live
        .chat(&model(&server), hello(), soon(), None)
        .await
        .expect_err("rejected");
    let records = live.finish().expect("records");
    assert!(matches!(
        &records[0].call,
        Call::Chat {
            outcome: Outcome::Error(ModelError::InvalidRequest { .. }),
            ..
        }
    ));
    let mut replay = Session::new(
        Source::Replay(ari_llm::record::Replayer::new(records.clone())),
        1000,
        1 << 20,
    );
    let again = replay
        .chat(&model(&server), hello(), soon(), None)
        .await
        .expect_err("the same error");
    assert_eq!(again, err);
    assert_eq!(server.hits().len(), 1, "the replay contacted no one");
    assert_eq!(replay.finish().expect("all served"), records);
    let text = serde_json::to_string(&records).expect("json");
    assert_no_secret("the record", &text);
}

/// The Anthropic wire format end to end: no Anthropic-compatible server can be installed
/// here, so the scripted one checks the request's headers and answers in Anthropic's shape.
#[tokio::test]
async fn anthropic_messages_round_trip() {
    let server = Scripted::start(|req| {
        let ok = req.target == "/v1/messages"
            && req.header("x-api-key") == Some(SECRET)
            && req.header("anthropic-version") == Some("2023-06-01")
            && req.header("authorization").is_none();
        if !ok {
            return Reply::new(
                400,
                r#"{"type":"error","error":{"message":"wrong headers"}}"#,
            );
        }
        Reply::new(
            200,
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-scripted",
                "content":[{"type":"text","text":"hello back"}],"stop_reason":"end_turn",
                "usage":{"input_tokens":4,"output_tokens":2}}"#,
        )
    })
    .await;
    let (answer, reported) = client()
        .chat(
            &endpoint(&server, ModelProvider::Anthropic),
            &ChatRequest {
                messages: vec![Message::system("terse"), Message::user("hello")],
                ..ChatRequest::default()
            },
            32,
            soon(),
        )
        .await
        .expect("answer");
    assert!(reported);
    assert_eq!(answer.message.content.as_deref(), Some("hello back"));
    assert_eq!(answer.model, "claude-scripted");
    let sent: serde_json::Value =
        serde_json::from_slice(&server.requests()[0].body).expect("json body");
    assert_eq!(sent["system"], "terse");
    assert_eq!(sent["max_tokens"], 32);
    assert_eq!(sent["messages"][0]["role"], "user");
}

/// Anthropic's streamed messages through the client: `stream: true` sent, the text handed on as
/// it arrives, the whole answer returned. Scripted: no Anthropic server can be had here.
#[tokio::test]
async fn anthropic_messages_stream_to_the_callback_and_assemble_the_answer() {
    let events = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-scripted\",\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello \"}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"back\"}}\n\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    let server = Scripted::start(move |req| {
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
        if req.target != "/v1/messages" || body["stream"] != true {
            return Reply::new(
                400,
                r#"{"type":"error","error":{"message":"not a stream"}}"#,
            );
        }
        Reply::new(200, events).header("Content-Type", "text/event-stream")
    })
    .await;
    let mut seen = Vec::new();
    let (answer, reported) = client()
        .chat_streaming(
            &endpoint(&server, ModelProvider::Anthropic),
            &hello(),
            32,
            soon(),
            &mut |t: &str| seen.push(t.to_owned()),
        )
        .await
        .expect("answer");
    assert_eq!(seen, ["hello ", "back"]);
    assert!(reported);
    assert_eq!(answer.message.content.as_deref(), Some("hello back"));
    assert_eq!(answer.finish_reason, ari_llm::types::FinishReason::Stop);
    assert_eq!(
        (answer.usage.input_tokens, answer.usage.output_tokens),
        (4, 2)
    );
    assert_eq!(answer.model, "claude-scripted");
}

/// The model list of a probe: each failure is one fixed case, never the endpoint's text.
/// Scripted because a real server answers neither 500 with a secret in its body, nor HTML,
/// nor a redirect to an internal service.
#[tokio::test]
async fn a_failed_model_list_is_a_fixed_case_without_the_answer() {
    const BODY_SECRET: &str = "internal-page-token-7f3a";
    let cases: Vec<(Reply, ari_llm::ListError)> = vec![
        (
            Reply::new(500, format!("<html>{BODY_SECRET}</html>")),
            ari_llm::ListError::Status(500),
        ),
        (
            Reply::redirect("http://127.0.0.1:1/admin"),
            ari_llm::ListError::Status(307),
        ),
        (
            Reply::new(200, format!("<html>{BODY_SECRET}</html>")),
            ari_llm::ListError::NotAModelList,
        ),
        (
            Reply::repeat(b' ', 1 << 30, false),
            ari_llm::ListError::TooLarge,
        ),
    ];
    for (reply, want) in cases {
        let reply = Arc::new(reply);
        let server = Scripted::start(move |_| reply.as_ref().clone()).await;
        let mut endpoint = endpoint(&server, ModelProvider::OpenAI);
        endpoint.key = None;
        let got = client()
            .list_models(&endpoint, 64 << 10, 64, 256, soon())
            .await
            .expect_err("no list");
        assert_eq!(got, want);
        assert!(!got.to_string().contains(BODY_SECRET), "{got}");
        let hits = server.hits();
        assert_eq!(hits.len(), 1, "one GET, no retry, no redirect: {hits:?}");
    }
}

/// A closed port and a port that accepts and never answers are one case. (The silent server's
/// port is open: the kernel accepts the connection whether or not the request arrives before
/// the deadline, so it is silent by construction.)
#[tokio::test]
async fn a_closed_and_a_silent_endpoint_look_the_same() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let closed = Endpoint::new(
        ModelProvider::OpenAI,
        url::Url::parse(&format!("http://127.0.0.1:{port}/v1")).expect("url"),
        "m",
    );
    let silent_server = Scripted::start(|_| Reply::hang()).await;
    let mut silent = endpoint(&silent_server, ModelProvider::Anthropic);
    silent.key = None;
    let quick = Instant::now() + Duration::from_secs(1);
    let a = client().list_models(&closed, 1 << 16, 64, 256, quick).await;
    let b = client().list_models(&silent, 1 << 16, 64, 256, quick).await;
    assert_eq!(a, Err(ari_llm::ListError::Unreachable));
    assert_eq!(b, a);
}
