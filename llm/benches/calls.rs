//! The host's cost of model calls, without a provider's latency: a live call through the
//! whole client (budget, request encoding, HTTP on loopback, parsing, record) against a
//! server that answers at once with a canned answer, and a 10-call run recorded and replayed.
//!
//! `cargo bench -p ari-llm --bench calls` (`ARI_BENCH_CALLS=N` sets the live calls timed).

use std::time::{Duration, Instant};

use ari_llm::record::{CallRecord, Record as _, Replayer};
use ari_llm::types::{ChatRequest, Message};
use ari_llm::{Client, Endpoint, Limits, Model, ModelProvider, RetryPolicy, Session, Source};
use ari_testkit::scripted::{Reply, Scripted};

/// A realistic answer: a paragraph of text and usage.
fn answer() -> String {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 200, "total_tokens": 320},
    })
    .to_string()
}

/// A short conversation: a system prompt and a question.
fn request(i: usize) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("You are a careful assistant. Answer in one paragraph."),
            Message::user(format!("Question {i}: what does the fox do?")),
        ],
        max_tokens: Some(256),
        temperature: Some(0.2),
        ..ChatRequest::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "| {what} | {} | {:.3} | {:.3} | {:.3} |",
        times.len(),
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.iter().sum::<Duration>().as_secs_f64() * 1e3 / times.len() as f64,
    );
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::var("ARI_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let body = answer();
    let server = Scripted::start(move |_| Reply::new(200, body.clone())).await;
    let model = Model::new(
        "bench",
        Endpoint::new(
            ModelProvider::OpenAI,
            url::Url::parse(&format!("http://{}/v1", server.host())).expect("url"),
            "bench",
        ),
    );
    let client = Client::new(Limits::default(), RetryPolicy::default()).expect("client");
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(30);

    println!("| what | calls | p50 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");

    // Warm the connection path once.
    let mut session = Session::new(Source::Live(client.clone()), u64::MAX, usize::MAX);
    session
        .chat(&model, request(0), deadline(), None)
        .await
        .expect("warm-up");

    let mut live = Vec::with_capacity(calls);
    for i in 0..calls {
        let start = Instant::now();
        session
            .chat(&model, request(i), deadline(), None)
            .await
            .expect("answer");
        live.push(start.elapsed());
    }
    report("live call, loopback server answering at once", live);

    // A 10-call run, recorded, then replayed (no server), many times over.
    let mut recorded = Session::new(Source::Live(client), u64::MAX, usize::MAX);
    for i in 0..10 {
        recorded
            .chat(&model, request(i), deadline(), None)
            .await
            .expect("answer");
    }
    let records: Vec<CallRecord> = recorded.finish().expect("records");
    let bytes: usize = records.iter().map(|r| r.canonical_bytes().len()).sum();

    let mut encode = Vec::new();
    let mut replays = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        let total: usize = records.iter().map(|r| r.canonical_bytes().len()).sum();
        encode.push(start.elapsed());
        assert_eq!(total, bytes);

        let start = Instant::now();
        let mut replay = Session::new(
            Source::Replay(Replayer::new(records.clone())),
            u64::MAX,
            usize::MAX,
        );
        for i in 0..10 {
            replay
                .chat(&model, request(i), deadline(), None)
                .await
                .expect("served");
        }
        replay.finish().expect("all served");
        replays.push(start.elapsed());
    }
    report("encode the 10 records (canonical bytes)", encode);
    report("replay the 10-call run (no server)", replays);
    println!("\nrecords of the 10-call run: {bytes} bytes");
}
