//! Streamed answers (server-sent events): text handed on as it arrives, the whole answer
//! assembled under the same size bound as a plain one. The event lines are read one way for
//! both wire formats ([`Stream`]), each format's events handed to its [`Events`]: this module
//! assembles OpenAI's chunks, `anthropic::Assembly` Anthropic's events.

use serde::Deserialize;

use crate::error::ModelError;
use crate::openai::{WireUsage, finish_reason};
use crate::types::{ChatResponse, Message, Role, ToolCall};

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    model: String,
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: WireDelta,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireDelta {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireCallDelta>,
}

#[derive(Deserialize)]
struct WireCallDelta {
    #[serde(default)]
    index: usize,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

/// What one wire format does with a stream's events (OpenAI's chunks here, Anthropic's in
/// `anthropic::Assembly`).
pub(crate) trait Events {
    /// Takes in the data of one event; `on_text` gets each piece of text.
    fn event(&mut self, data: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError>;
    /// Whether the stream said the answer is complete.
    fn done(&self) -> bool;
    /// The whole answer, and whether usage was reported; a stream cut short is `unavailable`.
    fn finish(self) -> Result<(ChatResponse, bool), ModelError>;
}

/// A streamed answer being assembled: the stream's event lines read one way for both wire
/// formats, each line bounded, and each event's data handed to the format's [`Events`].
pub(crate) struct Stream<E> {
    max_bytes: usize,
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    events: E,
}

impl<E: Events> Stream<E> {
    pub(crate) fn new(max_bytes: usize, events: E) -> Stream<E> {
        Stream {
            max_bytes,
            line: Vec::new(),
            events,
        }
    }

    /// Takes in the next bytes of the stream; a line over the bound is `too-large`. An
    /// unfinished last line waits for the next bytes (server-sent events count whole lines).
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), ModelError> {
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() >= self.max_bytes {
                    return Err(too_large(self.max_bytes));
                }
                self.line.push(b);
                continue;
            }
            let line = std::mem::take(&mut self.line);
            if let Some(data) = data(&line) {
                self.events.event(data, on_text)?;
            }
        }
        Ok(())
    }

    pub(crate) fn done(&self) -> bool {
        self.events.done()
    }

    pub(crate) fn finish(self) -> Result<(ChatResponse, bool), ModelError> {
        self.events.finish()
    }
}

/// The data of an event's `data:` line; `None` for comments, `event:` and `id:` lines and the
/// blank separators.
fn data(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"data:").map(<[u8]>::trim_ascii)
}

fn too_large(max_bytes: usize) -> ModelError {
    ModelError::provider(
        200,
        format!("the streamed answer is larger than {max_bytes} bytes"),
    )
}

/// Text and arguments an assembly has gathered, against the same bound as a whole answer.
pub(crate) struct Gathered {
    bytes: usize,
    max_bytes: usize,
}

impl Gathered {
    pub(crate) fn new(max_bytes: usize) -> Gathered {
        Gathered {
            bytes: 0,
            max_bytes,
        }
    }

    /// Counts `bytes` more; over the bound is `too-large`.
    pub(crate) fn add(&mut self, bytes: usize) -> Result<(), ModelError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.max_bytes {
            return Err(too_large(self.max_bytes));
        }
        Ok(())
    }
}

/// An answer being assembled from its events.
pub(crate) struct Assembly {
    gathered: Gathered,
    model: String,
    content: Option<String>,
    calls: Vec<ToolCall>,
    finish: Option<String>,
    usage: Option<WireUsage>,
    done: bool,
}

impl Assembly {
    /// A stream of OpenAI chunks, its answer bounded to `max_bytes`.
    pub(crate) fn stream(max_bytes: usize) -> Stream<Assembly> {
        Stream::new(max_bytes, Assembly::new(max_bytes))
    }

    fn new(max_bytes: usize) -> Assembly {
        Assembly {
            gathered: Gathered::new(max_bytes),
            model: String::new(),
            content: None,
            calls: Vec::new(),
            finish: None,
            usage: None,
            done: false,
        }
    }

    fn call_delta(&mut self, delta: WireCallDelta) -> Result<(), ModelError> {
        if delta.index > self.calls.len() || delta.index > 128 {
            return Err(ModelError::provider(
                200,
                "a streamed tool call skips an index",
            ));
        }
        if delta.index == self.calls.len() {
            self.calls.push(ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
        }
        let function = delta.function.unwrap_or(WireFunctionDelta {
            name: None,
            arguments: None,
        });
        let pieces = [delta.id, function.name, function.arguments];
        self.gathered
            .add(pieces.iter().flatten().map(String::len).sum())?;
        let [id, name, arguments] = pieces;
        let call = &mut self.calls[delta.index];
        call.id.push_str(&id.unwrap_or_default());
        call.name.push_str(&name.unwrap_or_default());
        call.arguments.push_str(&arguments.unwrap_or_default());
        Ok(())
    }
}

impl Events for Assembly {
    fn event(&mut self, data: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_slice(data).map_err(|e| {
            ModelError::provider(200, format!("a streamed event is malformed: {e}"))
        })?;
        if let Some(error) = chunk.error {
            let text = error
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("an error event");
            return Err(ModelError::provider(200, text.to_string()));
        }
        if !chunk.model.is_empty() {
            self.model = chunk.model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices {
            if let Some(text) = choice.delta.content {
                self.gathered.add(text.len())?;
                on_text(&text);
                self.content.get_or_insert_with(String::new).push_str(&text);
            }
            for delta in choice.delta.tool_calls {
                self.call_delta(delta)?;
            }
            if choice.finish_reason.is_some() {
                self.finish = choice.finish_reason;
            }
        }
        Ok(())
    }

    /// Whether `[DONE]` has been seen.
    fn done(&self) -> bool {
        self.done
    }

    /// The whole answer, and whether usage was reported. A stream that ended without
    /// `[DONE]` or a finish reason was cut off; an unfinished last line is dropped, as
    /// server-sent events only count whole lines.
    fn finish(self) -> Result<(ChatResponse, bool), ModelError> {
        if !self.done && self.finish.is_none() {
            return Err(ModelError::unavailable(
                "the stream ended before the answer did",
            ));
        }
        let reported = self.usage.is_some();
        let response = ChatResponse {
            message: Message {
                role: Role::Assistant,
                content: self.content,
                tool_calls: self.calls,
                tool_call_id: None,
            },
            finish_reason: finish_reason(self.finish.as_deref()),
            usage: self
                .usage
                .as_ref()
                .map(WireUsage::usage)
                .unwrap_or_default(),
            model: self.model,
        };
        Ok((response, reported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FinishReason;

    const EVENTS: &str = concat!(
        ": keep-alive\n\n",
        "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn events_split_anywhere_assemble_the_same_answer() {
        for split in [1, 7, 64, EVENTS.len()] {
            let mut assembly = Assembly::stream(1 << 20);
            let mut seen = String::new();
            for piece in EVENTS.as_bytes().chunks(split) {
                assembly
                    .feed(piece, &mut |t| seen.push_str(t))
                    .expect("feeds");
            }
            assert!(assembly.done());
            let (answer, reported) = assembly.finish().expect("whole");
            assert!(reported);
            assert_eq!(seen, "Hello", "split {split}");
            assert_eq!(answer.message.content.as_deref(), Some("Hello"));
            assert_eq!(answer.message.tool_calls[0].arguments, r#"{"a":1}"#);
            assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
            assert_eq!(answer.usage.input_tokens, 9);
            assert_eq!(answer.model, "m");
        }
    }

    #[test]
    fn bounds_and_cut_streams() {
        let mut small = Assembly::stream(4);
        let err = small
            .feed(EVENTS.as_bytes(), &mut |_| {})
            .expect_err("a line longer than the bound");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");

        let mut cut = Assembly::stream(1 << 20);
        cut.feed(&EVENTS.as_bytes()[..200], &mut |_| {})
            .expect("feeds");
        let err = cut.finish().expect_err("no end");
        assert!(matches!(err, ModelError::Unavailable { .. }), "{err}");

        let mut skip = Assembly::stream(1 << 20);
        let err = skip
            .feed(
                b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":5}]}}]}\n",
                &mut |_| {},
            )
            .expect_err("index skipped");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");
    }
}
