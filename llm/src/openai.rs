//! The OpenAI chat-completions wire format (also spoken by Azure OpenAI, vLLM, Ollama,
//! llama.cpp's server and LiteLLM): requests built and answers read as pure functions.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::endpoint::SchemaStyle;
use crate::error::ModelError;
use crate::types::{
    ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, FinishReason, Message,
    ResponseFormat, Role, ToolCall, ToolChoice, Usage,
};

pub(crate) const CHAT_PATH: &str = "chat/completions";
pub(crate) const EMBEDDINGS_PATH: &str = "embeddings";

/// The request body. `max_tokens` is the budget's clipped value; `max_tokens` (not
/// `max_completion_tokens`) is the field every compatible server reads.
pub fn chat_body(
    model: &str,
    request: &ChatRequest,
    max_tokens: u32,
    stream: bool,
    style: SchemaStyle,
) -> Result<Value, ModelError> {
    let mut body = json!({
        "model": model,
        "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
        "max_tokens": max_tokens,
    });
    let fields = body
        .as_object_mut()
        .ok_or_else(|| ModelError::invalid("body"))?;
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                Ok(json!({"type": "function", "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": parse_json(&t.parameters, "a tool's parameters")?,
                }}))
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        fields.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        fields.insert("tool_choice".into(), tool_choice(choice));
    }
    if let Some(format) = &request.response_format {
        fields.insert("response_format".into(), response_format(format, style)?);
    }
    if let Some(t) = request.temperature {
        fields.insert("temperature".into(), json!(t));
    }
    if let Some(seed) = request.seed {
        fields.insert("seed".into(), json!(seed));
    }
    if !request.stop.is_empty() {
        fields.insert("stop".into(), json!(request.stop));
    }
    if stream {
        fields.insert("stream".into(), json!(true));
        fields.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(body)
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut v = json!({"role": role, "content": m.content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn response_format(format: &ResponseFormat, style: SchemaStyle) -> Result<Value, ModelError> {
    Ok(match (format, style) {
        (ResponseFormat::Text, _) => json!({"type": "text"}),
        (ResponseFormat::JsonObject, _) => json!({"type": "json_object"}),
        (ResponseFormat::JsonSchema(f), SchemaStyle::JsonSchema) => {
            json!({"type": "json_schema", "json_schema": {
                "name": f.name,
                "schema": parse_json(&f.schema, "the response schema")?,
                "strict": f.strict,
            }})
        }
        (ResponseFormat::JsonSchema(f), SchemaStyle::JsonObjectSchema) => json!({
            "type": "json_object",
            "schema": parse_json(&f.schema, "the response schema")?,
        }),
    })
}

pub(crate) fn parse_json(text: &str, what: &str) -> Result<Value, ModelError> {
    serde_json::from_str(text).map_err(|e| ModelError::invalid(format!("{what} is not JSON: {e}")))
}

#[derive(Deserialize)]
struct WireChat {
    #[serde(default)]
    model: String,
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: String,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u32,
    #[serde(default)]
    completion_tokens: u32,
    prompt_tokens_details: Option<WireUsageDetails>,
}

#[derive(Deserialize, Default)]
struct WireUsageDetails {
    #[serde(default)]
    cached_tokens: u32,
}

impl WireUsage {
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            cached_input_tokens: self
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens),
        }
    }
}

/// A chat answer, and whether the provider reported usage (when it did not, the caller
/// charges its own upper bound).
pub fn parse_chat(body: &[u8]) -> Result<(ChatResponse, bool), ModelError> {
    let wire: WireChat = serde_json::from_slice(body).map_err(malformed)?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::provider(200, "the answer has no choices"))?;
    let response = ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: choice.message.content,
            tool_calls: choice
                .message
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.function.name,
                    arguments: c.function.arguments,
                })
                .collect(),
            tool_call_id: None,
        },
        finish_reason: finish_reason(choice.finish_reason.as_deref()),
        usage: wire
            .usage
            .as_ref()
            .map(WireUsage::usage)
            .unwrap_or_default(),
        model: wire.model,
    };
    Ok((response, wire.usage.is_some()))
}

pub(crate) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

pub(crate) fn malformed(e: serde_json::Error) -> ModelError {
    ModelError::provider(200, format!("the answer is malformed: {e}"))
}

pub fn embed_body(model: &str, request: &EmbeddingRequest) -> Value {
    let mut body = json!({"model": model, "input": request.inputs, "encoding_format": "float"});
    if let Some(d) = request.dimensions {
        body["dimensions"] = json!(d);
    }
    body
}

#[derive(Deserialize)]
struct WireEmbeddings {
    #[serde(default)]
    model: String,
    data: Vec<WireEmbedding>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireEmbedding {
    index: usize,
    embedding: Vec<f32>,
}

/// Vectors in input order; `inputs` is how many were asked for.
pub fn parse_embeddings(
    body: &[u8],
    inputs: usize,
) -> Result<(EmbeddingResponse, bool), ModelError> {
    let mut wire: WireEmbeddings = serde_json::from_slice(body).map_err(malformed)?;
    wire.data.sort_by_key(|d| d.index);
    let in_order = wire.data.iter().enumerate().all(|(i, d)| d.index == i);
    if wire.data.len() != inputs || !in_order {
        return Err(ModelError::provider(
            200,
            format!(
                "the answer has {} vectors for {inputs} inputs",
                wire.data.len()
            ),
        ));
    }
    let response = EmbeddingResponse {
        embeddings: wire.data.into_iter().map(|d| d.embedding).collect(),
        usage: wire
            .usage
            .as_ref()
            .map(WireUsage::usage)
            .unwrap_or_default(),
        model: wire.model,
    };
    Ok((response, wire.usage.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{JsonSchemaFormat, ToolDefinition};

    #[test]
    fn a_request_in_the_wire_shape() {
        let request = ChatRequest {
            messages: vec![
                Message::system("be brief"),
                Message::user("weather?"),
                Message {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "weather".into(),
                        arguments: r#"{"city":"Oslo"}"#.into(),
                    }],
                    ..Message::assistant("")
                },
                Message::tool("c1", "rain"),
            ],
            tools: vec![ToolDefinition {
                name: "weather".into(),
                description: Some("looks it up".into()),
                parameters: r#"{"type":"object"}"#.into(),
            }],
            tool_choice: Some(ToolChoice::Function("weather".into())),
            response_format: Some(ResponseFormat::JsonSchema(JsonSchemaFormat {
                name: "w".into(),
                schema: r#"{"type":"object"}"#.into(),
                strict: true,
            })),
            max_tokens: Some(999),
            temperature: Some(0.5),
            seed: Some(7),
            stop: vec!["END".into()],
        };
        let body = chat_body("m1", &request, 42, true, SchemaStyle::JsonSchema).expect("body");
        let want = json!({
            "model": "m1",
            "max_tokens": 42,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "content": "rain", "tool_call_id": "c1"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "weather", "description": "looks it up", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "w", "schema": {"type": "object"}, "strict": true}},
            "temperature": 0.5,
            "seed": 7,
            "stop": ["END"],
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        assert_eq!(body, want);
        let llama =
            chat_body("m1", &request, 42, true, SchemaStyle::JsonObjectSchema).expect("body");
        assert_eq!(
            llama["response_format"],
            json!({"type": "json_object", "schema": {"type": "object"}})
        );
    }

    #[test]
    fn a_schema_that_is_not_json_is_refused_before_sending() {
        let request = ChatRequest {
            tools: vec![ToolDefinition {
                name: "t".into(),
                description: None,
                parameters: "{not json".into(),
            }],
            ..ChatRequest::default()
        };
        let err = chat_body("m", &request, 1, false, SchemaStyle::JsonSchema).expect_err("refused");
        assert!(matches!(err, ModelError::InvalidRequest { .. }), "{err}");
    }

    #[test]
    fn an_answer_with_tool_calls_and_cached_usage() {
        let body = br#"{"id":"x","model":"m-2024","choices":[{"index":0,
            "message":{"role":"assistant","content":null,"tool_calls":[
              {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
            "finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25,
                     "prompt_tokens_details":{"cached_tokens":16}}}"#;
        let (answer, reported) = parse_chat(body).expect("parses");
        assert!(reported);
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        assert_eq!(answer.model, "m-2024");
        assert_eq!(answer.message.tool_calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(
            answer.usage,
            Usage {
                input_tokens: 20,
                output_tokens: 5,
                cached_input_tokens: 16
            }
        );
    }

    #[test]
    fn malformed_answers_are_provider_errors() {
        for body in [
            &b"not json"[..],
            br#"{"choices":[]}"#,
            br#"{"choices":[{"message":{"content":1}}]}"#,
        ] {
            let err = parse_chat(body).expect_err("malformed");
            assert!(
                matches!(err, ModelError::Provider { status: 200, .. }),
                "{err}"
            );
        }
        let (answer, reported) =
            parse_chat(br#"{"choices":[{"message":{"content":"hi"},"finish_reason":"eos"}]}"#)
                .expect("no usage is allowed");
        assert!(!reported);
        assert_eq!(answer.finish_reason, FinishReason::Other);
    }

    #[test]
    fn embeddings_come_back_in_input_order_or_not_at_all() {
        let body =
            br#"{"model":"e","data":[{"index":1,"embedding":[0.5]},{"index":0,"embedding":[0.25]}],
            "usage":{"prompt_tokens":3,"total_tokens":3}}"#;
        let (answer, _) = parse_embeddings(body, 2).expect("parses");
        assert_eq!(answer.embeddings, vec![vec![0.25], vec![0.5]]);
        assert_eq!(answer.usage.input_tokens, 3);
        assert!(parse_embeddings(body, 3).is_err(), "a vector missing");
        let dup = br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[2]}]}"#;
        assert!(parse_embeddings(dup, 2).is_err(), "an index twice");
    }
}
