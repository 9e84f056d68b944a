//! A ModelConfig's settings as a session applies them: the default temperature (sent, recorded
//! and replayed), prices (an exact estimated cost per model) and rate limits (a wait, or a
//! recorded `rate-limited` refusal a replay serves without a limiter).
//!
//! The provider is the scripted server on 127.0.0.1: it answers with fixed usage, so the
//! cost is known in advance, and it counts requests, so a refusal is seen to send none.

use std::sync::Arc;
use std::time::Duration;

use ari_llm::rate::{RateLimiter, RateLimits};
use ari_llm::record::{Call, Outcome, Replayer};
use ari_llm::types::{ChatRequest, EmbeddingRequest, Message};
use ari_llm::{
    CallError, Client, Endpoint, Limits, Model, ModelError, ModelProvider, RetryPolicy, Session,
    Source,
};
use ari_model::Prices;
use ari_testkit::scripted::{Reply, Scripted};
use tokio::time::Instant;

const ANSWER: &str = r#"{"id":"c","model":"scripted","choices":[{"index":0,
    "message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
    "usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500,
             "prompt_tokens_details":{"cached_tokens":200}}}"#;

const EMBEDDING: &str = r#"{"model":"scripted","data":[{"index":0,"embedding":[0.5]}],
    "usage":{"prompt_tokens":7,"total_tokens":7}}"#;

async fn server() -> Scripted {
    Scripted::start(|r| {
        let body = if r.target.ends_with("embeddings") {
            EMBEDDING
        } else {
            ANSWER
        };
        Reply::new(200, body).header("content-type", "application/json")
    })
    .await
}

fn client() -> Client {
    let retry = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    Client::new(Limits::default(), retry).expect("client")
}

fn model(server: &Scripted) -> Model {
    let base = url::Url::parse(&format!("http://{}/v1", server.host())).expect("url");
    Model::new(
        "small",
        Endpoint::new(ModelProvider::OpenAI, base, "scripted"),
    )
}

fn hello(temperature: Option<f32>) -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hello")],
        temperature,
        ..ChatRequest::default()
    }
}

fn in_30s() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn sent_temperature(server: &Scripted, index: usize) -> Option<serde_json::Value> {
    let requests = server.requests();
    let body: serde_json::Value = serde_json::from_slice(&requests[index].body).expect("json");
    body.get("temperature").cloned()
}

#[tokio::test]
async fn the_default_temperature_is_sent_recorded_and_replayed_unless_the_guest_sets_one() {
    let server = server().await;
    let model = Model {
        default_temperature: Some(0.7),
        ..model(&server)
    };
    let mut live = Session::new(Source::Live(client()), 100_000, 1 << 20);
    live.chat(&model, hello(None), in_30s(), None)
        .await
        .expect("answer");
    live.chat(&model, hello(Some(0.0)), in_30s(), None)
        .await
        .expect("answer");
    // 0.7 as an f32, as serde_json writes it.
    assert_eq!(
        sent_temperature(&server, 0),
        Some(serde_json::json!(0.7f32))
    );
    assert_eq!(sent_temperature(&server, 1), Some(serde_json::json!(0.0)));
    let records = live.finish().expect("records");
    let Call::Chat { request, .. } = &records[0].call else {
        panic!("chat");
    };
    assert_eq!(request.temperature, Some(0.7), "recorded as sent");

    // A replay that knows the default asks alike; one that does not diverges at call 0.
    let mut replay = Session::new(
        Source::Replay(Replayer::new(records.clone())),
        100_000,
        1 << 20,
    );
    replay
        .chat(&model, hello(None), in_30s(), None)
        .await
        .expect("same request");
    let mut without = Session::new(Source::Replay(Replayer::new(records)), 100_000, 1 << 20);
    let err = without
        .chat(
            &Model {
                default_temperature: None,
                ..model
            },
            hello(None),
            in_30s(),
            None,
        )
        .await
        .expect_err("diverges");
    let CallError::Diverged(d) = err else {
        panic!("{err:?}");
    };
    assert!(d.what.contains("temperature"), "{d}");
    assert_eq!(server.requests().len(), 2, "the replays contacted no one");
}

#[tokio::test]
async fn usage_carries_the_exact_estimated_cost_of_each_model_only_when_priced() {
    let server = server().await;
    let priced = Model {
        prices: Some(Prices {
            currency: "EUR".into(),
            input_per_million: Some("0.15".into()),
            cached_input_per_million: Some("0.075".into()),
            output_per_million: Some("0.6".into()),
        }),
        ..model(&server)
    };
    let plain = Model {
        name: "plain".into(),
        ..model(&server)
    };
    let mut session = Session::new(Source::Live(client()), 100_000, 1 << 20);
    for _ in 0..3 {
        session
            .chat(&priced, hello(None), in_30s(), None)
            .await
            .expect("answer");
    }
    session
        .chat(&plain, hello(None), in_30s(), None)
        .await
        .expect("answer");
    let usage = session.usage();
    let small = usage.iter().find(|m| m.name == "small").expect("small");
    // 3 × (800 input × 0.15 + 200 cached × 0.075 + 500 output × 0.6) / 10⁶.
    assert_eq!(small.usage.calls, 3);
    let cost = small.estimated_cost.as_ref().expect("priced");
    assert_eq!(
        (cost.amount.as_str(), cost.currency.as_str()),
        ("0.001305", "EUR")
    );
    let plain = usage.iter().find(|m| m.name == "plain").expect("plain");
    assert_eq!(plain.estimated_cost, None, "no prices, no cost");
    let json = serde_json::to_value(plain).expect("json");
    assert!(json.get("estimatedCost").is_none(), "{json}");
}

#[tokio::test]
async fn a_rate_limit_wait_past_the_deadline_is_a_recorded_refusal_the_replay_serves() {
    let server = server().await;
    let limits = RateLimits {
        requests_per_minute: Some(1),
        tokens_per_minute: None,
    };
    let limited = Model {
        rate: RateLimiter::new(limits).map(Arc::new),
        ..model(&server)
    };
    let mut live = Session::new(Source::Live(client()), 100_000, 1 << 20);
    live.chat(&limited, hello(None), in_30s(), None)
        .await
        .expect("the minute's one request");
    // The next request waits about a minute; the deadline is 30 s away.
    let err = live
        .chat(&limited, hello(None), in_30s(), None)
        .await
        .expect_err("refused");
    let CallError::Model(ModelError::RateLimited {
        retry_after_millis: Some(wait),
        ..
    }) = &err
    else {
        panic!("{err:?}");
    };
    assert!(
        *wait > 30_000,
        "the wait is longer than the deadline: {wait}"
    );
    // So is an embedding, which shares the model's requests.
    let embed = EmbeddingRequest {
        inputs: vec!["x".into()],
        dimensions: None,
    };
    let embed_err = live
        .embed(&limited, embed.clone(), in_30s())
        .await
        .expect_err("refused");
    assert!(matches!(
        embed_err,
        CallError::Model(ModelError::RateLimited { .. })
    ));
    assert_eq!(server.requests().len(), 1, "refusals send nothing");
    let records = live.finish().expect("records");
    assert_eq!(records.len(), 3, "the refusals are recorded");
    assert!(matches!(
        &records[1].call,
        Call::Chat {
            outcome: Outcome::Error(ModelError::RateLimited { .. }),
            ..
        }
    ));

    // The replay has no limiter: it serves the refusals from the records.
    let replayed = model(&server);
    let mut replay = Session::new(
        Source::Replay(Replayer::new(records.clone())),
        100_000,
        1 << 20,
    );
    replay
        .chat(&replayed, hello(None), in_30s(), None)
        .await
        .expect("answer");
    let again = replay
        .chat(&replayed, hello(None), in_30s(), None)
        .await
        .expect_err("the same refusal");
    assert_eq!(again, err);
    replay
        .embed(&replayed, embed, in_30s())
        .await
        .expect_err("the same refusal");
    assert_eq!(replay.finish().expect("all served"), records);
    assert_eq!(server.requests().len(), 1);
}

/// A wait shorter than the deadline is waited, then the call goes; the same wait with less
/// time left is refused. The bucket is emptied through the limiter itself, so the wait is one
/// request's interval (200 ms at 300 a minute); nothing here measures it.
#[tokio::test]
async fn a_rate_limit_wait_within_the_deadline_is_waited_then_the_call_goes() {
    let server = server().await;
    let limits = RateLimits {
        requests_per_minute: Some(300),
        tokens_per_minute: None,
    };
    let rate = Arc::new(RateLimiter::new(limits).expect("limited"));
    let limited = Model {
        rate: Some(rate.clone()),
        ..model(&server)
    };
    let forever = Duration::from_secs(3600);
    for _ in 0..300 {
        rate.reserve(Instant::now(), 0, forever)
            .expect("the minute's burst");
    }
    let mut live = Session::new(Source::Live(client()), 100_000, 1 << 20);
    live.chat(&limited, hello(None), in_30s(), None)
        .await
        .expect("sent after its wait");
    assert_eq!(server.requests().len(), 1);
    // Ten more taken (two seconds' worth): 1 ms is too little to wait for them.
    for _ in 0..10 {
        rate.reserve(Instant::now(), 0, forever)
            .expect("reserved ahead");
    }
    let err = live
        .chat(
            &limited,
            hello(None),
            Instant::now() + Duration::from_millis(1),
            None,
        )
        .await
        .expect_err("refused");
    assert!(
        matches!(err, CallError::Model(ModelError::RateLimited { .. })),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}
