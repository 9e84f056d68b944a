//! The host's types mirror `interface model` of `wit/model.wit`: every record field and every
//! case, by name (the WIT's kebab-case is the JSON's camelCase), so the runtime's translation
//! between them is field for field. The WIT's `model` fields are the host's to resolve to an
//! endpoint, so the host's requests leave them out.

use std::collections::BTreeSet;
use std::path::Path;

use ari_llm::ModelError;
use ari_llm::types::{
    ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, FinishReason, JsonSchemaFormat,
    Message, ResponseFormat, Role, ToolCall, ToolChoice, ToolDefinition, Usage,
};
use serde::Serialize;
use serde_json::Value;
use wit_parser::{InterfaceId, Resolve, TypeDefKind};

fn model_interface() -> (Resolve, InterfaceId) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_path(&dir).expect("wit/ parses");
    let id = *resolve.packages[pkg]
        .interfaces
        .get("model")
        .expect("interface model");
    (resolve, id)
}

/// The names a WIT type declares: a record's fields, a variant's or an enum's cases.
fn wit_names(resolve: &Resolve, id: InterfaceId, name: &str) -> BTreeSet<String> {
    let ty = resolve.interfaces[id]
        .types
        .get(name)
        .unwrap_or_else(|| panic!("type {name} missing"));
    let names: Vec<String> = match &resolve.types[*ty].kind {
        TypeDefKind::Record(r) => r.fields.iter().map(|f| f.name.clone()).collect(),
        TypeDefKind::Variant(v) => v.cases.iter().map(|c| c.name.clone()).collect(),
        TypeDefKind::Enum(e) => e.cases.iter().map(|c| c.name.clone()).collect(),
        other => panic!("{name} is {other:?}"),
    };
    names.into_iter().map(|n| camel(&n)).collect()
}

fn camel(kebab: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in kebab.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The JSON keys of a value with every field set.
fn keys(value: &impl Serialize) -> BTreeSet<String> {
    match serde_json::to_value(value).expect("serializes") {
        Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

/// The JSON name of a unit case, or the tag of a case with data.
fn case(value: &impl Serialize) -> String {
    match serde_json::to_value(value).expect("serializes") {
        Value::String(s) => s,
        Value::Object(map) if map.contains_key("kind") => map["kind"].as_str().expect("tag").into(),
        Value::Object(map) => map.keys().next().expect("one key").clone(),
        other => panic!("{other}"),
    }
}

fn without(mut names: BTreeSet<String>, name: &str) -> BTreeSet<String> {
    assert!(names.remove(name), "{name} is in the WIT");
    names
}

fn full_message() -> Message {
    Message {
        role: Role::Assistant,
        content: Some("c".into()),
        tool_calls: vec![tool_call()],
        tool_call_id: Some("i".into()),
    }
}

fn tool_call() -> ToolCall {
    ToolCall {
        id: "i".into(),
        name: "n".into(),
        arguments: "{}".into(),
    }
}

fn schema() -> JsonSchemaFormat {
    JsonSchemaFormat {
        name: "n".into(),
        schema: "{}".into(),
        strict: true,
    }
}

#[test]
fn records_have_the_same_fields() {
    let (resolve, id) = model_interface();
    let names = |n| wit_names(&resolve, id, n);
    let usage = Usage::default();
    let chat = ChatRequest {
        messages: vec![full_message()],
        tools: vec![ToolDefinition {
            name: "n".into(),
            description: None,
            parameters: "{}".into(),
        }],
        tool_choice: Some(ToolChoice::Auto),
        response_format: Some(ResponseFormat::Text),
        max_tokens: Some(1),
        temperature: Some(0.0),
        seed: Some(1),
        stop: vec!["s".into()],
    };
    let answer = ChatResponse {
        message: full_message(),
        finish_reason: FinishReason::Stop,
        usage,
        model: "m".into(),
    };
    let embed = EmbeddingRequest {
        inputs: vec!["a".into()],
        dimensions: Some(1),
    };
    let vectors = EmbeddingResponse {
        embeddings: vec![vec![0.0]],
        usage,
        model: "m".into(),
    };
    let tool = ToolDefinition {
        name: "n".into(),
        description: Some("d".into()),
        parameters: "{}".into(),
    };
    assert_eq!(names("tool-call"), keys(&tool_call()));
    assert_eq!(names("message"), keys(&full_message()));
    assert_eq!(names("tool-definition"), keys(&tool));
    assert_eq!(names("json-schema-format"), keys(&schema()));
    assert_eq!(without(names("chat-request"), "model"), keys(&chat));
    assert_eq!(names("usage"), keys(&usage));
    assert_eq!(names("chat-response"), keys(&answer));
    assert_eq!(without(names("embedding-request"), "model"), keys(&embed));
    assert_eq!(names("embedding-response"), keys(&vectors));
}

#[test]
fn variants_have_the_same_cases() {
    let (resolve, id) = model_interface();
    let names = |n| wit_names(&resolve, id, n);
    let cases = |values: Vec<String>| values.into_iter().collect::<BTreeSet<_>>();
    assert_eq!(
        names("role"),
        cases(
            [Role::System, Role::User, Role::Assistant, Role::Tool]
                .iter()
                .map(case)
                .collect()
        )
    );
    assert_eq!(
        names("finish-reason"),
        cases(
            [
                FinishReason::Stop,
                FinishReason::Length,
                FinishReason::ToolCalls,
                FinishReason::ContentFilter,
                FinishReason::Other,
            ]
            .iter()
            .map(case)
            .collect()
        )
    );
    assert_eq!(
        names("tool-choice"),
        cases(
            [
                ToolChoice::Auto,
                ToolChoice::None,
                ToolChoice::Required,
                ToolChoice::Function("f".into()),
            ]
            .iter()
            .map(case)
            .collect()
        )
    );
    assert_eq!(
        names("response-format"),
        cases(
            [
                ResponseFormat::Text,
                ResponseFormat::JsonObject,
                ResponseFormat::JsonSchema(schema()),
            ]
            .iter()
            .map(case)
            .collect()
        )
    );
    let m = || "m".to_string();
    let errors = [
        ModelError::Denied { message: m() },
        ModelError::BudgetExhausted { message: m() },
        ModelError::RateLimited {
            retry_after_millis: None,
            message: m(),
        },
        ModelError::Unavailable { message: m() },
        ModelError::InvalidRequest { message: m() },
        ModelError::Provider {
            status: 500,
            message: m(),
        },
    ];
    assert_eq!(
        names("model-error"),
        cases(errors.iter().map(case).collect())
    );
    // The payloads of the two cases that carry records.
    let mut rate = keys(&errors[2]);
    rate.remove("kind");
    assert_eq!(names("rate-limit"), rate);
    let mut provider = keys(&errors[5]);
    provider.remove("kind");
    assert_eq!(names("provider-failure"), provider);
}

#[test]
fn the_interface_has_chat_embed_and_models_and_the_agent_world_imports_it() {
    let (resolve, id) = model_interface();
    let functions: Vec<&str> = resolve.interfaces[id]
        .functions
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(functions, ["chat", "embed", "models"]);
    // The agent's world imports it: the runtime links it (capability `models`).
    let importers: Vec<&str> = resolve
        .worlds
        .iter()
        .filter(|(_, world)| {
            world.imports.values().any(
                |item| matches!(item, wit_parser::WorldItem::Interface { id: i, .. } if *i == id),
            )
        })
        .map(|(_, world)| world.name.as_str())
        .collect();
    assert_eq!(importers, ["ari-agent"]);
}
