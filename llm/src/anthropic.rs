//! The Anthropic messages wire format (`POST /v1/messages`), translated from and to the
//! OpenAI-shaped types: system messages become the top-level `system`, tool calls become
//! `tool_use` blocks and tool results `tool_result` blocks of a user turn. Anthropic has no
//! response-format field and no embeddings, so those are refused before anything is sent;
//! `seed` has no counterpart and is not sent.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::openai::{malformed, parse_json};
use crate::types::{
    ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, ToolCall, ToolChoice,
    Usage,
};

pub(crate) const MESSAGES_PATH: &str = "v1/messages";
/// The API version this translation follows.
pub(crate) const VERSION: &str = "2023-06-01";

pub fn chat_body(model: &str, request: &ChatRequest, max_tokens: u32) -> Result<Value, ModelError> {
    match request.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(_) => {
            return Err(ModelError::invalid(
                "the anthropic provider has no JSON response format",
            ));
        }
    }
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .filter_map(|m| m.content.as_deref())
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": turns(&request.messages)?,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                Ok(json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": parse_json(&t.parameters, "a tool's parameters")?,
                }))
            })
            .collect::<Result<Value, ModelError>>()?;
    }
    if let Some(choice) = &request.tool_choice {
        body["tool_choice"] = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
        };
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if !request.stop.is_empty() {
        body["stop_sequences"] = json!(request.stop);
    }
    Ok(body)
}

/// User and assistant turns; consecutive messages of one side are merged into one turn, as
/// the API wants turns to alternate.
fn turns(messages: &[Message]) -> Result<Vec<Value>, ModelError> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (side, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(m)),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
                    "content": m.content.as_deref().unwrap_or_default(),
                })],
            ),
            Role::Assistant => {
                let mut blocks = text_block(m);
                for call in &m.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": parse_json(&call.arguments, "a tool call's arguments")?,
                    }));
                }
                ("assistant", blocks)
            }
        };
        match turns.last_mut() {
            Some((last, content)) if *last == side => content.extend(blocks),
            _ => turns.push((side, blocks)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect())
}

fn text_block(m: &Message) -> Vec<Value> {
    match m.content.as_deref() {
        Some(text) if !text.is_empty() => vec![json!({"type": "text", "text": text})],
        _ => Vec::new(),
    }
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    model: String,
    content: Vec<WireBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u32,
    #[serde(default)]
    output_tokens: u32,
    #[serde(default)]
    cache_read_input_tokens: u32,
    #[serde(default)]
    cache_creation_input_tokens: u32,
}

/// A messages answer, and whether it reported usage. Anthropic's `input_tokens` leaves out
/// cached tokens; here input counts them all, as the WIT's `usage` says.
pub fn parse_chat(body: &[u8]) -> Result<(ChatResponse, bool), ModelError> {
    let wire: WireMessage = serde_json::from_slice(body).map_err(malformed)?;
    let mut text = Vec::new();
    let mut tool_calls = Vec::new();
    for block in wire.content {
        match block {
            WireBlock::Text { text: t } => text.push(t),
            WireBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input.to_string(),
            }),
            WireBlock::Other => {}
        }
    }
    let usage = wire.usage.as_ref().map(|u| Usage {
        input_tokens: u
            .input_tokens
            .saturating_add(u.cache_read_input_tokens)
            .saturating_add(u.cache_creation_input_tokens),
        output_tokens: u.output_tokens,
        cached_input_tokens: u.cache_read_input_tokens,
    });
    let response = ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: (!text.is_empty()).then(|| text.concat()),
            tool_calls,
            tool_call_id: None,
        },
        finish_reason: match wire.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("max_tokens") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("refusal") => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        },
        usage: usage.unwrap_or_default(),
        model: wire.model,
    };
    Ok((response, usage.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{JsonSchemaFormat, ToolDefinition};

    #[test]
    fn system_moves_up_tool_turns_become_blocks() {
        let request = ChatRequest {
            messages: vec![
                Message::system("be brief"),
                Message::user("weather?"),
                Message {
                    tool_calls: vec![ToolCall {
                        id: "toolu_1".into(),
                        name: "weather".into(),
                        arguments: r#"{"city":"Oslo"}"#.into(),
                    }],
                    ..Message::assistant("let me look")
                },
                Message::tool("toolu_1", "rain"),
                Message::user("and tomorrow?"),
            ],
            tools: vec![ToolDefinition {
                name: "weather".into(),
                description: None,
                parameters: r#"{"type":"object"}"#.into(),
            }],
            tool_choice: Some(ToolChoice::Required),
            temperature: Some(0.25),
            seed: Some(1),
            stop: vec!["END".into()],
            ..ChatRequest::default()
        };
        let body = chat_body("claude-x", &request, 64).expect("body");
        let want = json!({
            "model": "claude-x",
            "max_tokens": 64,
            "system": "be brief",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"},
                    {"type": "text", "text": "and tomorrow?"}]},
            ],
            "tools": [{"name": "weather", "description": null, "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "temperature": 0.25,
            "stop_sequences": ["END"],
        });
        assert_eq!(body, want);
    }

    #[test]
    fn json_formats_are_refused_before_sending() {
        let request = ChatRequest {
            response_format: Some(ResponseFormat::JsonSchema(JsonSchemaFormat {
                name: "n".into(),
                schema: "{}".into(),
                strict: true,
            })),
            ..ChatRequest::default()
        };
        let err = chat_body("m", &request, 1).expect_err("refused");
        assert!(matches!(err, ModelError::InvalidRequest { .. }), "{err}");
    }

    #[test]
    fn an_answer_with_text_a_tool_use_and_cache_usage() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x-1",
            "content":[{"type":"thinking","thinking":"..."},{"type":"text","text":"Checking."},
              {"type":"tool_use","id":"toolu_9","name":"weather","input":{"city":"Oslo"}}],
            "stop_reason":"tool_use",
            "usage":{"input_tokens":10,"output_tokens":7,"cache_read_input_tokens":90,
                     "cache_creation_input_tokens":5}}"#;
        let (answer, reported) = parse_chat(body).expect("parses");
        assert!(reported);
        assert_eq!(answer.message.content.as_deref(), Some("Checking."));
        assert_eq!(answer.message.tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            answer.usage,
            Usage {
                input_tokens: 105,
                output_tokens: 7,
                cached_input_tokens: 90
            }
        );
    }
}
