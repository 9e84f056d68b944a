//! What an Agent shows of itself over the Agent2Agent protocol, and the live tail of a Task's
//! guest log that A2A streams read while the Task runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most skills a card lists.
pub const MAX_SKILLS: usize = 32;
/// Lines kept in [`LiveLog::lines`]: the newest, so a stream that reads late still sees the end.
pub const LIVE_LOG_LINES: usize = 16;
/// Longest line kept in [`LiveLog::lines`] (bytes, cut on a char boundary).
pub const LIVE_LOG_LINE_BYTES: usize = 256;
/// Bytes of model text kept in [`LiveText::tail`]: the newest, cut on a char boundary.
pub const LIVE_TEXT_BYTES: usize = 2048;

/// Tool calls kept in [`LiveTools::recent`] (a call and its result are two).
pub const LIVE_TOOL_EVENTS: usize = 16;
/// Longest preview of a tool call's arguments or answer in [`LiveToolEvent::preview`].
pub const LIVE_TOOL_PREVIEW_BYTES: usize = 256;

/// `spec.a2a`: whether the A2A gateway serves this Agent, and the card it shows.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct A2aSpec {
    /// Served by the gateway (card and JSON-RPC). Off by default; only `primary` and `all`
    /// Agents may be exposed.
    #[serde(default)]
    pub exposed: bool,
    /// The card may be read without a token. Calls always need one.
    #[serde(default)]
    pub public_card: bool,
    /// What the agent can do, as the card lists it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub skills: Vec<A2aSkill>,
    /// Media types the agent accepts (default `text/plain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub input_modes: Vec<MediaType>,
    /// Media types the agent answers with (default `text/plain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub output_modes: Vec<MediaType>,
}

/// A media type such as `text/plain` or `application/json`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(transparent)]
pub struct MediaType(
    #[schemars(
        length(min = 3, max = 127),
        regex(pattern = r"^[a-z0-9.+-]+/[a-zA-Z0-9.+*-]+$")
    )]
    pub String,
);

/// One skill on the card.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct A2aSkill {
    #[schemars(length(min = 1, max = 63))]
    pub id: String,
    #[schemars(length(min = 1, max = 127))]
    pub name: String,
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub tags: Vec<ShortText>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub examples: Vec<ShortText>,
}

/// A tag or an example prompt.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(transparent)]
pub struct ShortText(#[schemars(length(min = 1, max = 256))] pub String);

/// `status.liveLog`: the newest guest log lines of a running Task, written by the executor
/// only while a gateway stream follows it (the lease [`crate::names::ANNOTATION_LIVE_LOG`]), at
/// most a few times a second and within the pod's live-log write budget.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LiveLog {
    /// Lines written so far (kept or not): a reader that saw `seq` lines before knows how many
    /// are new and how many it missed.
    pub seq: u64,
    /// The newest lines, at most [`LIVE_LOG_LINES`], each `LEVEL message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// The text the Task's model calls are generating, as they generate it (while a stream
    /// follows; the guest still receives each answer whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_text: Option<LiveText>,
    /// The Task's newest tool calls and their outcomes, as they are made (while a stream
    /// follows; the trace keeps them whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<LiveTools>,
    /// What the Task has used so far of what it is billed for (while a stream follows; the
    /// final `resourcesUsed` and `models` are the whole account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<LiveUsage>,
}

/// The running account of a Task's model and tool use: each model's calls and tokens so far
/// and the tool calls made, so a follower sees the bill grow, not only its total at the end.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LiveUsage {
    /// Per model called so far, as `status.models` will list it (at most 32, as many as an
    /// Agent may be granted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub models: Vec<ari_model::ModelCalls>,
    /// Tool calls made so far.
    #[serde(default)]
    pub tool_calls: u64,
}

impl LiveUsage {
    /// The usage so far in `resourcesUsed`'s terms: only what is counted while the Task runs
    /// (model calls and tokens, tool calls) — fuel, memory and time come with the end.
    pub fn totals(&self) -> ari_model::ResourcesUsed {
        let mut used = ari_model::ResourcesUsed {
            tool_calls: self.tool_calls,
            ..Default::default()
        };
        used.add_tokens(&self.models);
        used
    }
}

/// The newest tool events of a running Task: each call before it is sent, then how it came
/// out. Bounded: the newest [`LIVE_TOOL_EVENTS`], and `seq` counts them all, so a reader
/// knows what it missed.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LiveTools {
    /// Events so far (kept, dropped or missed by the executor alike).
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub recent: Vec<LiveToolEvent>,
}

/// One tool call on its way out, or its outcome.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LiveToolEvent {
    /// The MCPServer's name, as the guest called it.
    #[schemars(length(max = 253))]
    pub server: String,
    #[schemars(length(max = 128))]
    pub tool: String,
    /// None for the call; how it came out for its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ari_model::ToolOutcome>,
    /// The call's arguments, or the answer's text, cut to [`LIVE_TOOL_PREVIEW_BYTES`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    pub preview: String,
}

impl LiveToolEvent {
    /// An event with each text cut (on a char boundary) to what the status keeps.
    pub fn new(
        server: &str,
        tool: &str,
        outcome: Option<ari_model::ToolOutcome>,
        preview: &str,
    ) -> Self {
        Self {
            server: cut(server, 253).to_owned(),
            tool: cut(tool, 128).to_owned(),
            outcome,
            preview: cut(preview, LIVE_TOOL_PREVIEW_BYTES).to_owned(),
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl LiveTools {
    /// Adds an event, keeping the newest [`LIVE_TOOL_EVENTS`].
    pub fn push(&mut self, event: LiveToolEvent) {
        self.recent.push(event);
        if self.recent.len() > LIVE_TOOL_EVENTS {
            let extra = self.recent.len() - LIVE_TOOL_EVENTS;
            self.recent.drain(..extra);
        }
        self.seq += 1;
    }

    /// Counts `n` events made but never seen here (the executor dropped them rather than
    /// wait): readers learn they missed them.
    pub fn skip(&mut self, n: u64) {
        self.seq = self.seq.saturating_add(n);
        self.recent.clear();
    }

    /// The events a reader that had seen `seen` has not seen, and how many of those are no
    /// longer kept.
    pub fn since(&self, seen: u64) -> (&[LiveToolEvent], u64) {
        let new = self.seq.saturating_sub(seen);
        let kept = usize::try_from(new)
            .unwrap_or(usize::MAX)
            .min(self.recent.len());
        (&self.recent[self.recent.len() - kept..], new - kept as u64)
    }
}

/// The newest model text of a running Task: what A2A followers see as the model produces
/// it. Bounded: only the newest [`LIVE_TEXT_BYTES`] are kept, and `seq` counts every byte, so
/// a reader knows what it missed.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LiveText {
    /// Bytes of text produced so far (kept, dropped or missed by the executor alike).
    pub seq: u64,
    /// The newest text, at most [`LIVE_TEXT_BYTES`] bytes, starting on a char boundary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 2048))]
    pub tail: String,
}

impl LiveText {
    /// Adds a piece of text, keeping the newest [`LIVE_TEXT_BYTES`].
    pub fn push(&mut self, piece: &str) {
        self.tail.push_str(piece);
        self.seq = self.seq.saturating_add(piece.len() as u64);
        if self.tail.len() > LIVE_TEXT_BYTES {
            let mut cut = self.tail.len() - LIVE_TEXT_BYTES;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }

    /// Counts `bytes` of text produced but never seen here (the executor dropped them rather
    /// than wait): readers learn they missed them.
    pub fn skip(&mut self, bytes: u64) {
        self.seq = self.seq.saturating_add(bytes);
        self.tail.clear();
    }

    /// The text a reader that had seen `seen` bytes has not seen (from a char boundary), and
    /// how many bytes of it are no longer kept.
    pub fn since(&self, seen: u64) -> (&str, u64) {
        let new = self.seq.saturating_sub(seen);
        let kept = usize::try_from(new)
            .unwrap_or(usize::MAX)
            .min(self.tail.len());
        let mut start = self.tail.len() - kept;
        while !self.tail.is_char_boundary(start) {
            start += 1;
        }
        let text = &self.tail[start..];
        (text, new - text.len() as u64)
    }
}

impl LiveLog {
    /// Adds one line, keeping only the newest [`LIVE_LOG_LINES`], each cut to
    /// [`LIVE_LOG_LINE_BYTES`].
    pub fn push(&mut self, line: &str) {
        self.lines.push(cut(line, LIVE_LOG_LINE_BYTES).to_owned());
        if self.lines.len() > LIVE_LOG_LINES {
            let extra = self.lines.len() - LIVE_LOG_LINES;
            self.lines.drain(..extra);
        }
        self.seq += 1;
    }

    /// The lines a reader that had seen `seen` lines has not seen, and how many of those
    /// are no longer kept.
    pub fn since(&self, seen: u64) -> (&[String], u64) {
        let new = self.seq.saturating_sub(seen);
        let kept = (new as usize).min(self.lines.len());
        (&self.lines[self.lines.len() - kept..], new - kept as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_tools_keep_the_newest_events_cut_short_and_count_all() {
        let mut t = LiveTools::default();
        let long = "é".repeat(200); // 400 bytes
        t.push(LiveToolEvent::new("kit", "echo", None, &long));
        let first = &t.recent[0];
        assert_eq!(first.preview.len(), 256, "cut on a char boundary");
        for i in 0..20 {
            t.push(LiveToolEvent::new(
                "kit",
                &format!("t{i}"),
                Some(ari_model::ToolOutcome::Answered),
                "",
            ));
        }
        assert_eq!(t.recent.len(), LIVE_TOOL_EVENTS);
        let (new, missed) = t.since(1);
        assert_eq!((new.len(), missed), (16, 4), "20 new, 16 kept");
        assert_eq!(new.last().map(|e| e.tool.as_str()), Some("t19"));
        assert_eq!(t.since(21), (&[][..], 0));
        t.skip(3);
        assert_eq!(t.since(21), (&[][..], 3));
    }

    #[test]
    fn live_text_keeps_the_newest_bytes_on_char_boundaries_and_counts_all() {
        let mut text = LiveText::default();
        text.push("Hel");
        text.push("lo");
        assert_eq!(text.since(0), ("Hello", 0));
        assert_eq!(text.since(3), ("lo", 0));
        assert_eq!(text.since(5), ("", 0));
        // Far more than is kept, in two-byte characters: the tail starts on a boundary.
        for _ in 0..LIVE_TEXT_BYTES {
            text.push("é");
        }
        assert!(text.tail.len() <= LIVE_TEXT_BYTES);
        assert_eq!(text.seq, 5 + 2 * LIVE_TEXT_BYTES as u64);
        let (seen, missed) = text.since(0);
        assert_eq!(seen.len() as u64 + missed, text.seq);
        assert!(seen.chars().all(|c| c == 'é'));
        // Bytes the executor dropped count as missed.
        text.skip(10);
        assert_eq!(text.since(text.seq - 10), ("", 10));
    }

    #[test]
    fn live_log_keeps_the_newest_lines_and_counts_all() {
        let mut log = LiveLog::default();
        for i in 0..40 {
            log.push(&format!("INFO line {i}"));
        }
        assert_eq!(log.seq, 40);
        assert_eq!(log.lines.len(), LIVE_LOG_LINES);
        assert_eq!(log.lines.last().map(String::as_str), Some("INFO line 39"));
    }

    #[test]
    fn a_reader_gets_only_new_lines_and_how_many_it_missed() {
        let mut log = LiveLog::default();
        for i in 0..20 {
            log.push(&format!("{i}"));
        }
        let (new, missed) = log.since(18);
        assert_eq!(new, ["18", "19"]);
        assert_eq!(missed, 0);
        let (new, missed) = log.since(0);
        assert_eq!(new.len(), LIVE_LOG_LINES);
        assert_eq!(missed, 4);
        assert!(log.since(20).0.is_empty());
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let mut log = LiveLog::default();
        log.push(&"é".repeat(300));
        assert!(log.lines[0].len() <= LIVE_LOG_LINE_BYTES);
        assert!(log.lines[0].chars().all(|c| c == 'é'));
    }
}
