//! Lists and calls tools of the MCP servers its Agent is granted (`capabilities.tools`): the
//! smallest tools-using agent. It never sees a server's credentials or URL: it names a server
//! and a tool, and the host does the rest (the MCP exchange, its bounds, the record that lets
//! `ari verify` replay the run without the server).
//!
//! Input: one command per line.
//! - `servers`: the granted servers, one per line;
//! - `list SERVER`: the tools it may call, one per line, as `name` followed by ` [read-only]`
//!   or ` [destructive]` when the server says so;
//! - `call SERVER TOOL ARGUMENTS`: the result's text (`ARGUMENTS` is a JSON object, or
//!   nothing); a result the tool marked as an error is prefixed `tool error: `.
//!
//! A tools call that fails prints `error KIND: MESSAGE` (the WIT's case) and the agent goes on,
//! so one task shows every case; a denial still ends the task `CapabilityDenied`.

use ari_sdk::tools::{self, ToolError};
use ari_sdk::{Agent, Error, Output, Task};

struct Toolbox;

impl Agent for Toolbox {
    fn execute(task: Task) -> Result<Output, Error> {
        let input = String::from_utf8(task.input)
            .map_err(|_| Error::Invalid("the commands must be UTF-8 text".into()))?;
        let mut out = Vec::new();
        for line in input.lines().map(str::trim).filter(|l| !l.is_empty()) {
            out.push(match run(line) {
                Ok(text) => text,
                Err(Failure::Tool(e)) => format!("error {}: {e}", e.kind()),
                Err(Failure::Usage(e)) => return Err(Error::Invalid(e)),
            });
        }
        Ok(Output::from(out.join("\n")))
    }
}

enum Failure {
    Tool(ToolError),
    Usage(String),
}

impl From<ToolError> for Failure {
    fn from(e: ToolError) -> Self {
        Failure::Tool(e)
    }
}

fn run(line: &str) -> Result<String, Failure> {
    let mut words = line.splitn(4, ' ');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("servers"), None, _, _) => Ok(tools::servers().join("\n")),
        (Some("list"), Some(server), None, _) => {
            let listed = tools::list(server)?;
            Ok(listed
                .iter()
                .map(|t| {
                    let mut shown = t.name.clone();
                    if t.hints.read_only == Some(true) {
                        shown.push_str(" [read-only]");
                    }
                    if t.hints.destructive == Some(true) {
                        shown.push_str(" [destructive]");
                    }
                    shown
                })
                .collect::<Vec<_>>()
                .join("\n"))
        }
        (Some("call"), Some(server), Some(tool), arguments) => {
            let result = tools::call(server, tool, arguments.unwrap_or(""))?;
            Ok(if result.is_error {
                format!("tool error: {}", result.text)
            } else {
                result.text
            })
        }
        _ => Err(Failure::Usage(format!("unknown command: {line}"))),
    }
}

ari_sdk::export_agent!(Toolbox);
