//! Tools and their results as the host keeps them: the parts of MCP's `Tool` and
//! `CallToolResult` a guest sees, in a form whose JSON is the record's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool call's arguments: a JSON object.
pub type Arguments = serde_json::Map<String, Value>;

/// A tool a server offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// What the server says the tool does; hints, not guarantees (a server may lie).
    #[serde(default)]
    pub hints: ToolHints,
}

/// MCP's tool annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// What a tool call returned. A tool that failed in its own terms (`is_error`) still answered:
/// its content says why, for the guest (or its model) to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// MCP content blocks (`{"type":"text","text":...}`, images, resources), as sent.
    pub content: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    #[serde(default)]
    pub is_error: bool,
}

impl ToolResult {
    /// The text blocks, joined by newlines: what most guests want of a result.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl From<rmcp::model::Tool> for ToolInfo {
    fn from(tool: rmcp::model::Tool) -> Self {
        let hints = tool
            .annotations
            .as_ref()
            .map_or_else(ToolHints::default, |a| ToolHints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
                idempotent: a.idempotent_hint,
                open_world: a.open_world_hint,
            });
        ToolInfo {
            name: tool.name.into_owned(),
            title: tool.title,
            description: tool.description.map(|d| d.into_owned()),
            input_schema: Value::Object((*tool.input_schema).clone()),
            hints,
        }
    }
}

/// `value` with every string in it passed through `redact` (keys too: a server may echo a
/// credential anywhere).
pub(crate) fn redact_value(value: Value, redact: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(redact(&s)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| redact_value(v, redact)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (redact(&k), redact_value(v, redact)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_joins_the_text_blocks_only() {
        let r = ToolResult {
            content: vec![
                json!({"type": "text", "text": "one"}),
                json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
                json!({"type": "text", "text": "two"}),
            ],
            structured: None,
            is_error: false,
        };
        assert_eq!(r.text(), "one\ntwo");
    }

    #[test]
    fn redaction_reaches_every_string() {
        let v = json!({"a": ["tok", {"tok": "x tok y"}], "n": 1});
        let out = redact_value(v, &|s| s.replace("tok", "[redacted]"));
        assert_eq!(
            out,
            json!({"a": ["[redacted]", {"[redacted]": "x [redacted] y"}], "n": 1})
        );
    }
}
