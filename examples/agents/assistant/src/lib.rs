//! A model that uses other Agents as its tools: each tool the model may call is an Agent this
//! one may delegate to, so every tool call is a child Task whose fuel and time come out of this
//! task's budget and whose signed attestation this task's trace names. The model's answers and
//! the children's results are recorded, so `ari verify` replays the whole run with neither the
//! model nor the other Agents.
//!
//! Config (the Agent's `spec.config`), one setting per line:
//! ```text
//! model=small
//! tool=wordcount: counts the words of a text
//! tool=keywords: lists the main keywords of a text
//! ```
//! Input: the user's request. Output: the model's final answer. At most [`MAX_TURNS`] model
//! calls; a tool the model names that is not configured is answered as an error, not run.

use std::sync::OnceLock;

use ari_sdk::host::delegation;
use ari_sdk::model::{self, ChatRequest, Message, Tool, ToolCall};
use ari_sdk::{Agent, Error, Output, Task};

/// Model calls per task: a model that keeps calling tools is stopped here.
pub const MAX_TURNS: usize = 6;

/// Every tool takes one string: the input of the Agent it runs.
const PARAMETERS: &str = r#"{"type":"object","properties":{"input":{"type":"string","description":"the text to hand the tool"}},"required":["input"]}"#;

const SYSTEM: &str = "You are an assistant with tools. Call a tool when it helps; \
                      answer the user briefly once you have what you need.";

/// The configured model (none: the first granted) and tools.
#[derive(Debug, Default, PartialEq)]
pub struct Settings {
    pub model: Option<String>,
    /// (Agent name, what it does).
    pub tools: Vec<(String, String)>,
}

/// Reads the config's `model=` and `tool=NAME: description` lines; blank lines and `#`
/// comments are skipped, anything else is an error.
pub fn settings(config: &str) -> Result<Settings, String> {
    let mut s = Settings::default();
    for line in config.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some(("model", name)) => s.model = Some(name.trim().to_owned()),
            Some(("tool", tool)) => {
                let (name, what) = tool.split_once(':').unwrap_or((tool, ""));
                s.tools
                    .push((name.trim().to_owned(), what.trim().to_owned()));
            }
            _ => return Err(format!("config: cannot read {line:?}")),
        }
    }
    Ok(s)
}

/// The input a tool call asks for: the `input` argument, or the raw arguments when they are
/// not the JSON object asked for (small models are sloppy; the Agent still gets something).
pub fn tool_input(call: &ToolCall) -> String {
    serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|v| v.get("input")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| call.arguments.trim().to_owned())
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

struct Assistant;

impl Agent for Assistant {
    fn initialize(config: Vec<u8>) -> Result<(), Error> {
        let text = String::from_utf8(config).map_err(|_| Error::Invalid("config: UTF-8".into()))?;
        let parsed = settings(&text).map_err(Error::Invalid)?;
        let _ = SETTINGS.set(parsed);
        Ok(())
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let question = String::from_utf8(task.input)
            .map_err(|_| Error::Invalid("the request must be UTF-8 text".into()))?;
        let settings = SETTINGS.get_or_init(Settings::default);
        let name = match &settings.model {
            Some(name) => name.clone(),
            None => model::models()
                .into_iter()
                .next()
                .ok_or_else(|| Error::Denied("no model is granted to this agent".into()))?,
        };
        let mut request = ChatRequest::new(name)
            .system(SYSTEM)
            .user(question)
            .max_tokens(256);
        for (agent, what) in &settings.tools {
            request = request.tool(Tool::new(agent.clone(), PARAMETERS).description(what.clone()));
        }
        for _ in 0..MAX_TURNS {
            let answer = model::chat(&request)?;
            let calls = answer.tool_calls().to_vec();
            if calls.is_empty() {
                return Ok(Output::from(answer.text().unwrap_or_default().to_owned()));
            }
            request.push(answer.message.clone());
            for call in &calls {
                let result = if settings.tools.iter().any(|(agent, _)| agent == &call.name) {
                    match delegation::delegate(&call.name, tool_input(call).as_bytes()) {
                        Ok(out) => String::from_utf8_lossy(&out).into_owned(),
                        Err(e) => format!("error: {e}"),
                    }
                } else {
                    format!("error: there is no tool named {:?}", call.name)
                };
                request.push(Message::tool_result(&call.id, result));
            }
        }
        Err(Error::Failed(format!(
            "no answer after {MAX_TURNS} model calls"
        )))
    }
}

ari_sdk::export_agent!(Assistant);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_the_model_and_the_tools() {
        let s = settings("model=small\n# c\ntool=wordcount: counts words\ntool=keywords\n")
            .expect("parses");
        assert_eq!(s.model.as_deref(), Some("small"));
        assert_eq!(
            s.tools,
            vec![
                ("wordcount".to_owned(), "counts words".to_owned()),
                ("keywords".to_owned(), String::new())
            ]
        );
        assert!(settings("temperature=2").is_err());
    }

    #[test]
    fn a_tool_input_is_the_input_argument_or_the_raw_arguments() {
        let call = |args: &str| ToolCall {
            id: "c".into(),
            name: "wordcount".into(),
            arguments: args.into(),
        };
        assert_eq!(tool_input(&call(r#"{"input": "a \"b\" c"}"#)), "a \"b\" c");
        assert_eq!(tool_input(&call("just text")), "just text");
    }
}
