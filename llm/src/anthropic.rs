//! The Anthropic messages wire format (`POST /v1/messages`), translated from and to the
//! OpenAI-shaped types: system messages become the top-level `system`, tool calls become
//! `tool_use` blocks and tool results `tool_result` blocks of a user turn. Anthropic has no
//! response-format field and no embeddings, so those are refused before anything is sent;
//! `seed` has no counterpart and is not sent.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::openai::{malformed, parse_json};
use crate::stream::{Events, Gathered, Stream};
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
    let usage = wire.usage.as_ref().map(WireUsage::usage);
    Ok(answer(
        &text,
        tool_calls,
        wire.stop_reason.as_deref(),
        usage,
        wire.model,
    ))
}

/// The answer a messages response (whole or streamed) comes to, and whether it reported
/// usage.
fn answer(
    text: &[String],
    tool_calls: Vec<ToolCall>,
    stop_reason: Option<&str>,
    usage: Option<Usage>,
    model: String,
) -> (ChatResponse, bool) {
    let response = ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: (!text.is_empty()).then(|| text.concat()),
            tool_calls,
            tool_call_id: None,
        },
        finish_reason: finish_reason(stop_reason),
        usage: usage.unwrap_or_default(),
        model,
    };
    (response, usage.is_some())
}

fn finish_reason(stop_reason: Option<&str>) -> FinishReason {
    match stop_reason {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

impl WireUsage {
    /// Anthropic's `input_tokens` leaves out cached tokens; here input counts them all, as the
    /// WIT's `usage` says.
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self
                .input_tokens
                .saturating_add(self.cache_read_input_tokens)
                .saturating_add(self.cache_creation_input_tokens),
            output_tokens: self.output_tokens,
            cached_input_tokens: self.cache_read_input_tokens,
        }
    }
}

/// A streamed messages answer's events (`"stream": true`), as far as assembling it needs.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: WireStart,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: WireDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: WireStop,
        usage: Option<WireOutput>,
    },
    MessageStop,
    Error {
        error: Value,
    },
    /// `ping`, `content_block_stop` and any event added after this client.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireStart {
    #[serde(default)]
    model: String,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct WireStop {
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireOutput {
    #[serde(default)]
    output_tokens: u32,
}

/// One content block being assembled.
enum Block {
    Text(String),
    /// A tool call: its id, its name and its input's JSON as streamed so far.
    Tool(String, String, String),
    Other,
}

/// A streamed messages answer being assembled from its events, to the same answer a plain one
/// parses to ([`parse_chat`]): text blocks joined, each tool call's input the JSON its pieces
/// make, written compactly as a parsed `input` is.
pub(crate) struct Assembly {
    /// Text and input JSON gathered so far, for the bound.
    gathered: Gathered,
    model: String,
    blocks: Vec<Block>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    done: bool,
}

/// Most content blocks one answer may have.
const MAX_BLOCKS: usize = 128;

impl Assembly {
    /// A stream of messages events, its answer bounded to `max_bytes`.
    pub(crate) fn stream(max_bytes: usize) -> Stream<Assembly> {
        Stream::new(max_bytes, Assembly::new(max_bytes))
    }

    fn new(max_bytes: usize) -> Assembly {
        Assembly {
            gathered: Gathered::new(max_bytes),
            model: String::new(),
            blocks: Vec::new(),
            usage: None,
            stop_reason: None,
            done: false,
        }
    }
}

impl Events for Assembly {
    fn event(&mut self, data: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        let event: WireEvent = serde_json::from_slice(data).map_err(|e| {
            ModelError::provider(200, format!("a streamed event is malformed: {e}"))
        })?;
        match event {
            WireEvent::MessageStart { message } => {
                self.model = message.model;
                self.usage = message.usage.as_ref().map(WireUsage::usage);
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                if index != self.blocks.len() || index >= MAX_BLOCKS {
                    return Err(ModelError::provider(
                        200,
                        "a streamed content block skips an index",
                    ));
                }
                let block = match content_block {
                    WireBlock::Text { text } => Block::Text(text),
                    WireBlock::ToolUse { id, name, .. } => {
                        self.gathered.add(id.len() + name.len())?;
                        Block::Tool(id, name, String::new())
                    }
                    WireBlock::Other => Block::Other,
                };
                self.blocks.push(block);
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                let piece = match &delta {
                    WireDelta::TextDelta { text } => text.len(),
                    WireDelta::InputJsonDelta { partial_json } => partial_json.len(),
                    WireDelta::Other => 0,
                };
                self.gathered.add(piece)?;
                match (self.blocks.get_mut(index), delta) {
                    (Some(Block::Text(t)), WireDelta::TextDelta { text }) => {
                        on_text(&text);
                        t.push_str(&text);
                    }
                    (Some(Block::Tool(_, _, json)), WireDelta::InputJsonDelta { partial_json }) => {
                        json.push_str(&partial_json);
                    }
                    (None, _) => {
                        return Err(ModelError::provider(
                            200,
                            "a streamed delta names no content block",
                        ));
                    }
                    _ => {}
                }
            }
            WireEvent::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let (Some(out), Some(usage)) = (usage, self.usage.as_mut()) {
                    usage.output_tokens = out.output_tokens;
                }
            }
            WireEvent::MessageStop => self.done = true,
            WireEvent::Error { error } => {
                let text = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error event");
                return Err(ModelError::provider(200, text.to_string()));
            }
            WireEvent::Other => {}
        }
        Ok(())
    }

    /// Whether `message_stop` has been seen.
    fn done(&self) -> bool {
        self.done
    }

    /// The whole answer, and whether usage was reported. A stream that ended before
    /// `message_stop` was cut off.
    fn finish(self) -> Result<(ChatResponse, bool), ModelError> {
        if !self.done {
            return Err(ModelError::unavailable(
                "the stream ended before the answer did",
            ));
        }
        let mut text = Vec::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks {
            match block {
                Block::Text(t) => text.push(t),
                Block::Tool(id, name, json) => {
                    let input: Value = if json.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&json).map_err(|e| {
                            ModelError::provider(
                                200,
                                format!("a streamed tool call's input is not JSON: {e}"),
                            )
                        })?
                    };
                    tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments: input.to_string(),
                    });
                }
                Block::Other => {}
            }
        }
        Ok(answer(
            &text,
            tool_calls,
            self.stop_reason.as_deref(),
            self.usage,
            self.model,
        ))
    }
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

    /// A messages stream as Anthropic documents it: text, a tool call whose input arrives in
    /// pieces, pings, usage at the start and the end.
    const EVENTS: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}\r\n\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"look.\"}}\n\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"lookup\",\"input\":{}}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\": \\\"a\"}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ri\\\", \\\"n\\\": 2}\"}}\n\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":17}}\n\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    /// The same answer, unstreamed.
    const WHOLE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
        "content":[{"type":"text","text":"Let me look."},
                   {"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"ari","n":2}}],
        "stop_reason":"tool_use","usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":17}}"#;

    #[test]
    fn a_streamed_answer_split_anywhere_is_the_answer_a_whole_one_parses_to() {
        let whole = parse_chat(WHOLE.as_bytes()).expect("whole answer");
        for split in [1, 5, 64, EVENTS.len()] {
            let mut assembly = Assembly::stream(1 << 20);
            let mut seen = String::new();
            for piece in EVENTS.as_bytes().chunks(split) {
                assembly
                    .feed(piece, &mut |t| seen.push_str(t))
                    .expect("feeds");
            }
            assert!(assembly.done());
            assert_eq!(seen, "Let me look.", "split {split}");
            let streamed = assembly.finish().expect("whole");
            assert_eq!(streamed, whole, "split {split}");
        }
        assert_eq!(whole.0.usage.input_tokens, 25);
        assert_eq!(
            whole.0.message.tool_calls[0].arguments,
            r#"{"n":2,"q":"ari"}"#
        );
    }

    #[test]
    fn a_streamed_answer_is_bounded_and_a_cut_or_failed_stream_is_an_error() {
        let mut small = Assembly::stream(64);
        let err = small
            .feed(EVENTS.as_bytes(), &mut |_| {})
            .expect_err("a line longer than the bound");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");

        let mut cut = Assembly::stream(1 << 20);
        cut.feed(&EVENTS.as_bytes()[..EVENTS.len() / 2], &mut |_| {})
            .expect("feeds");
        let err = cut.finish().expect_err("no message_stop");
        assert!(matches!(err, ModelError::Unavailable { .. }), "{err}");

        let mut failed = Assembly::stream(1 << 20);
        let err = failed
            .feed(
                b"data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n",
                &mut |_| {},
            )
            .expect_err("an error event");
        assert!(err.to_string().contains("Overloaded"), "{err}");

        let mut skip = Assembly::stream(1 << 20);
        let err = skip
            .feed(
                b"data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n",
                &mut |_| {},
            )
            .expect_err("index skipped");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");
    }
}
