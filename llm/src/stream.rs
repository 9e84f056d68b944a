//! Streamed answers (server-sent events): text handed on as it arrives, the whole answer
//! assembled under the same size bound as a plain one. The event lines are read one way for
//! both wire formats ([`Lines`], [`data`]); this module assembles OpenAI's chunks, and
//! `anthropic::Assembly` Anthropic's events.

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

/// Server-sent event lines from the bytes of a stream, each bounded; both wire formats' streams
/// are read through one.
pub(crate) struct Lines {
    max_bytes: usize,
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
}

impl Lines {
    pub(crate) fn new(max_bytes: usize) -> Lines {
        Lines {
            max_bytes,
            line: Vec::new(),
        }
    }

    /// Hands `each` every line `bytes` completes; a line over the bound is `too-large`. An
    /// unfinished last line waits for the next bytes (server-sent events count whole lines).
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(&[u8]) -> Result<(), ModelError>,
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
            each(&line)?;
        }
        Ok(())
    }
}

/// The data of an event's `data:` line; `None` for comments, `event:` and `id:` lines and the
/// blank separators.
pub(crate) fn data(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"data:").map(<[u8]>::trim_ascii)
}

/// The error of a streamed answer over `max_bytes`.
pub(crate) fn too_large(max_bytes: usize) -> ModelError {
    ModelError::provider(
        200,
        format!("the streamed answer is larger than {max_bytes} bytes"),
    )
}

/// A streamed chat answer being assembled, whichever wire format it comes in.
pub(crate) trait Assemble {
    /// Whether the stream said the answer is complete.
    fn done(&self) -> bool;
    /// Takes in the next bytes of the stream; `on_text` gets each piece of text.
    fn feed(&mut self, bytes: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError>;
    /// The whole answer, and whether usage was reported; a stream cut short is `unavailable`.
    fn finish(self) -> Result<(ChatResponse, bool), ModelError>;
}

/// An answer being assembled from its events.
pub(crate) struct Assembly {
    max_bytes: usize,
    lines: Lines,
    /// Text and arguments gathered so far, for the bound.
    gathered: usize,
    model: String,
    content: Option<String>,
    calls: Vec<ToolCall>,
    finish: Option<String>,
    usage: Option<WireUsage>,
    done: bool,
}

impl Assembly {
    pub(crate) fn new(max_bytes: usize) -> Assembly {
        Assembly {
            max_bytes,
            lines: Lines::new(max_bytes),
            gathered: 0,
            model: String::new(),
            content: None,
            calls: Vec::new(),
            finish: None,
            usage: None,
            done: false,
        }
    }

    /// Whether `[DONE]` has been seen.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Takes in the next bytes of the stream; `on_text` gets each piece of text.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), ModelError> {
        let mut lines = std::mem::replace(&mut self.lines, Lines::new(0));
        let fed = lines.feed(bytes, |line| self.event_line(line, on_text));
        self.lines = lines;
        fed
    }

    fn event_line(&mut self, line: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        let Some(data) = data(line) else {
            return Ok(());
        };
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
                self.count(text.len())?;
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
        self.count(pieces.iter().flatten().map(String::len).sum())?;
        let [id, name, arguments] = pieces;
        let call = &mut self.calls[delta.index];
        call.id.push_str(&id.unwrap_or_default());
        call.name.push_str(&name.unwrap_or_default());
        call.arguments.push_str(&arguments.unwrap_or_default());
        Ok(())
    }

    fn count(&mut self, bytes: usize) -> Result<(), ModelError> {
        self.gathered += bytes;
        if self.gathered > self.max_bytes {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> ModelError {
        too_large(self.max_bytes)
    }

    /// The whole answer, and whether usage was reported. A stream that ended without
    /// `[DONE]` or a finish reason was cut off; an unfinished last line is dropped, as
    /// server-sent events only count whole lines.
    pub(crate) fn finish(self) -> Result<(ChatResponse, bool), ModelError> {
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

impl Assemble for Assembly {
    fn done(&self) -> bool {
        Assembly::done(self)
    }
    fn feed(&mut self, bytes: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        Assembly::feed(self, bytes, on_text)
    }
    fn finish(self) -> Result<(ChatResponse, bool), ModelError> {
        Assembly::finish(self)
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
            let mut assembly = Assembly::new(1 << 20);
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
        let mut small = Assembly::new(4);
        let err = small
            .feed(EVENTS.as_bytes(), &mut |_| {})
            .expect_err("a line longer than the bound");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");

        let mut cut = Assembly::new(1 << 20);
        cut.feed(&EVENTS.as_bytes()[..200], &mut |_| {})
            .expect("feeds");
        let err = cut.finish().expect_err("no end");
        assert!(matches!(err, ModelError::Unavailable { .. }), "{err}");

        let mut skip = Assembly::new(1 << 20);
        let err = skip
            .feed(
                b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":5}]}}]}\n",
                &mut |_| {},
            )
            .expect_err("index skipped");
        assert!(matches!(err, ModelError::Provider { .. }), "{err}");
    }
}
