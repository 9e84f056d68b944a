//! The client against a real OpenAI-compatible server: llama.cpp's (llama-cpp-python) with
//! the tiny generated model, installed by `scripts/model-server.sh`. The model's words are
//! random; what is checked is what the server guarantees whatever the weights: usage,
//! `max_tokens`, schema-constrained JSON and tool calls, embeddings, streaming, and that a
//! recorded run replays without the server.

use std::time::Duration;

use ari_llm::record::Replayer;
use ari_llm::types::{
    ChatRequest, FinishReason, JsonSchemaFormat, Message, ResponseFormat, ToolChoice,
    ToolDefinition,
};
use ari_llm::{
    CallError, Client, Endpoint, Limits, Model, ModelProvider, RetryPolicy, SchemaStyle, Session,
    Source,
};
use ari_testkit::model_server::{CHAT_MODEL, EMBEDDING_MODEL, ModelServer};
use tokio::time::Instant;

/// llama-cpp-python's server takes a response schema only in its own form (see
/// [`SchemaStyle`]).
fn endpoint(server: &ModelServer, model: &str) -> Endpoint {
    Endpoint::new(
        ModelProvider::OpenAI,
        url::Url::parse(&server.base_url()).expect("url"),
        model,
    )
    .with_schema_style(SchemaStyle::JsonObjectSchema)
}

fn model(server: &ModelServer) -> Model {
    Model::new("tiny", endpoint(server, CHAT_MODEL))
}

/// Tokens llama-cpp-python (0.3.36) may generate past `max_tokens`: while the text ends in an
/// unfinished UTF-8 sequence it skips its length check (`multibyte_fix` in `llama.py`), and the
/// random model emits lone byte tokens often. A real model rarely ends on half a character.
const MULTIBYTE_SLACK: u32 = 3;

fn client() -> Client {
    Client::new(Limits::default(), RetryPolicy::default()).expect("client")
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("You are terse."), Message::user(text)],
        temperature: Some(0.7),
        seed: Some(7),
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn real_server_chat_reports_usage_and_honours_max_tokens() {
    let Some(server) = ModelServer::start_or_skip("real_server_chat") else {
        return;
    };
    let client = client();
    let (answer, reported) = client
        .chat(&endpoint(&server, CHAT_MODEL), &ask("hello"), 8, deadline())
        .await
        .expect("answer");
    assert!(reported, "llama.cpp reports usage");
    assert!(answer.usage.input_tokens > 0, "{:?}", answer.usage);
    assert!(
        (1..=8 + MULTIBYTE_SLACK).contains(&answer.usage.output_tokens),
        "at most max_tokens: {:?}",
        answer.usage
    );
    assert!(
        matches!(
            answer.finish_reason,
            FinishReason::Length | FinishReason::Stop
        ),
        "{:?}",
        answer.finish_reason
    );
}

#[tokio::test]
async fn real_server_json_schema_constrains_the_answer() {
    let Some(server) = ModelServer::start_or_skip("real_server_json_schema") else {
        return;
    };
    let schema = r#"{"type":"object","properties":{"ok":{"type":"boolean"},
        "level":{"type":"string","enum":["low","high"]}},
        "required":["ok","level"],"additionalProperties":false}"#;
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema(JsonSchemaFormat {
            name: "verdict".into(),
            schema: schema.into(),
            strict: true,
        })),
        ..ask("Is it fine?")
    };
    let (answer, _) = client()
        .chat(&endpoint(&server, CHAT_MODEL), &request, 64, deadline())
        .await
        .expect("answer");
    let text = answer.message.content.expect("text");
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert!(value["ok"].is_boolean(), "{value}");
    assert!(
        ["low", "high"].contains(&value["level"].as_str().unwrap_or_default()),
        "{value}"
    );
}

#[tokio::test]
async fn real_server_calls_a_named_tool_with_schema_valid_arguments() {
    let Some(server) = ModelServer::start_or_skip("real_server_tool_call") else {
        return;
    };
    let request = ChatRequest {
        tools: vec![ToolDefinition {
            name: "weather".into(),
            description: Some("The weather in a city".into()),
            parameters: r#"{"type":"object","properties":{"city":{"type":"string",
                "enum":["Oslo","Lima"]}},"required":["city"]}"#
                .into(),
        }],
        tool_choice: Some(ToolChoice::Function("weather".into())),
        ..ask("Weather in Oslo?")
    };
    let (answer, _) = client()
        .chat(&endpoint(&server, CHAT_MODEL), &request, 64, deadline())
        .await
        .expect("answer");
    let call = answer.message.tool_calls.first().expect("a tool call");
    assert_eq!(call.name, "weather");
    assert!(!call.id.is_empty());
    let args: serde_json::Value = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|e| panic!("arguments not JSON ({e}): {}", call.arguments));
    assert!(
        ["Oslo", "Lima"].contains(&args["city"].as_str().unwrap_or_default()),
        "{args}"
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn real_server_embeds_each_input() {
    let Some(server) = ModelServer::start_or_skip("real_server_embeddings") else {
        return;
    };
    let request = ari_llm::types::EmbeddingRequest {
        inputs: vec!["a cat".into(), "a dog".into(), "stock prices".into()],
        dimensions: None,
    };
    let (answer, _) = client()
        .embed(&endpoint(&server, EMBEDDING_MODEL), &request, deadline())
        .await
        .expect("vectors");
    assert_eq!(answer.embeddings.len(), 3);
    assert!(
        answer.embeddings.iter().all(|v| v.len() == 64),
        "the model's width"
    );
    assert_ne!(answer.embeddings[0], answer.embeddings[2]);
}

#[tokio::test]
async fn real_server_streams_text_as_it_is_generated() {
    let Some(server) = ModelServer::start_or_skip("real_server_streaming") else {
        return;
    };
    let mut pieces = Vec::new();
    let (answer, _) = client()
        .chat_streaming(
            &endpoint(&server, CHAT_MODEL),
            &ask("count"),
            12,
            deadline(),
            &mut |t: &str| pieces.push(t.to_string()),
        )
        .await
        .expect("answer");
    assert!(pieces.len() > 1, "text came in pieces: {pieces:?}");
    assert_eq!(Some(pieces.concat()), answer.message.content);
}

/// A run of several calls is recorded live, then replayed with the server gone: the same
/// answers, and the first changed request fails the replay.
#[tokio::test]
async fn real_server_run_replays_without_the_server() {
    let Some(server) = ModelServer::start_or_skip("real_server_replay") else {
        return;
    };
    let model = model(&server);
    let questions = ["one", "two", "three"];
    let mut live = Session::new(Source::Live(client()), 10_000, 1 << 20);
    let mut answers = Vec::new();
    for q in questions {
        let request = ChatRequest {
            max_tokens: Some(6),
            ..ask(q)
        };
        answers.push(
            live.chat(&model, request, deadline(), None)
                .await
                .expect("answer"),
        );
    }
    let spent = live.budget().spent;
    let calls = live.usage();
    assert_eq!(calls.len(), 1, "one model called: {calls:?}");
    assert_eq!(
        (calls[0].name.as_str(), calls[0].model.as_str()),
        ("tiny", CHAT_MODEL)
    );
    let usage = calls[0].usage;
    assert_eq!(usage.calls, 3);
    assert_eq!(usage.input_tokens + usage.output_tokens, spent);
    let records = live.finish().expect("records");
    drop(server);

    let mut replay = Session::new(
        Source::Replay(Replayer::new(records.clone())),
        10_000,
        1 << 20,
    );
    for (q, want) in questions.iter().zip(&answers) {
        let request = ChatRequest {
            max_tokens: Some(6),
            ..ask(q)
        };
        let got = replay
            .chat(&model, request, deadline(), None)
            .await
            .expect("served");
        assert_eq!(&got, want);
    }
    assert_eq!(replay.budget().spent, spent, "the replay charges the same");
    assert_eq!(replay.finish().expect("all served"), records);

    let mut diverging = Session::new(Source::Replay(Replayer::new(records)), 10_000, 1 << 20);
    let err = diverging
        .chat(&model, ask("something else"), deadline(), None)
        .await
        .expect_err("differs");
    assert!(
        matches!(err, CallError::Diverged(ref d) if d.index == 0),
        "{err:?}"
    );
}

/// The budget clips `max_tokens` to what remains, and the server keeps to it.
#[tokio::test]
async fn real_server_keeps_to_the_clipped_max_tokens() {
    let Some(server) = ModelServer::start_or_skip("real_server_budget") else {
        return;
    };
    let model = model(&server);
    let request = ChatRequest {
        max_tokens: Some(500),
        ..ask("hi")
    };
    let estimate = ari_llm::budget::estimate_prompt(&request, model.estimator);
    let mut session = Session::new(Source::Live(client()), estimate + 5, 1 << 20);
    let answer = session
        .chat(&model, request, deadline(), None)
        .await
        .expect("answer");
    assert!(
        answer.usage.output_tokens <= 5 + MULTIBYTE_SLACK,
        "{:?}",
        answer.usage
    );
    let sent = match &session.recording().records()[0].call {
        ari_llm::record::Call::Chat { request, .. } => request.max_tokens,
        other => panic!("{other:?}"),
    };
    assert_eq!(sent, Some(5));
}

#[tokio::test]
async fn real_server_lists_its_models() {
    let Some(server) = ModelServer::start_or_skip("real_server_lists_models") else {
        return;
    };
    let list = client()
        .list_models(
            &endpoint(&server, CHAT_MODEL),
            64 << 10,
            64,
            256,
            deadline(),
        )
        .await
        .expect("model list");
    assert!(list.ids.iter().any(|id| id == CHAT_MODEL), "{list:?}");
    assert!(!list.truncated, "{list:?}");
}
