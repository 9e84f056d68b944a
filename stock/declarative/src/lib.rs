//! ari's stock agent component: it runs an Agent declared instead of coded
//! (`spec.declarative`, docs/declarative.md). Its config is the declaration's canonical JSON
//! (`ari_model::Declaration::canonical_bytes`, the system prompt resolved), which the executor
//! hands to `initialize` and the attestation signs as `configSha256`.
//!
//! It uses nothing a hand-written agent could not: the public SDK's `model`, `tools` and
//! `delegation`, under the Agent's own grants, fuel, memory, time and token budget. Every
//! model answer, tool result and child's output is recorded by the host, so `ari verify`
//! replays a run with neither the model, the MCP servers nor the other Agents.
//!
//! Input: the user's request (UTF-8). Output: the model's final answer, or a subagent's.

pub mod toolbox;
pub mod turns;

use std::sync::OnceLock;

use ari_model::Declaration;
use ari_sdk::host::{delegation, log};
use ari_sdk::model::{self, ChatRequest, ChatResponse, ModelError};
use ari_sdk::tools::{self, Tool as McpTool, ToolError, ToolResult};
use ari_sdk::{Agent, Error, Output, Task, conversation};

static DECLARATION: OnceLock<Declaration> = OnceLock::new();

/// The SDK's host functions.
struct Sdk;

impl turns::Host for Sdk {
    fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        model::chat(request)
    }
    fn list_tools(&mut self, server: &str) -> Result<Vec<McpTool>, ToolError> {
        tools::list(server)
    }
    fn call_tool(&mut self, s: &str, t: &str, args: &str) -> Result<ToolResult, ToolError> {
        tools::call(s, t, args)
    }
    fn delegate(&mut self, agent: &str, input: &[u8]) -> Result<Vec<u8>, Error> {
        delegation::delegate(agent, input)
    }
    fn log(&mut self, line: &str) {
        log::info(line);
    }
    fn history(&mut self) -> Vec<(String, String)> {
        conversation::history()
            .into_iter()
            .map(|t| (t.input_text(), t.output_text()))
            .collect()
    }
    fn ask_for_input(&mut self) {
        conversation::ask_for_input();
    }
}

struct Stock;

impl Agent for Stock {
    fn initialize(config: Vec<u8>) -> Result<(), Error> {
        let declaration = Declaration::parse(&config).map_err(|e| Error::Invalid(e.to_string()))?;
        let _ = DECLARATION.set(declaration);
        Ok(())
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let declaration = DECLARATION.get().ok_or_else(|| {
            Error::Invalid("no declaration: this component runs an Agent's spec.declarative".into())
        })?;
        let input = String::from_utf8(task.input)
            .map_err(|_| Error::Invalid("the request must be UTF-8 text".into()))?;
        turns::run(&mut Sdk, declaration, &input).map(Output::from)
    }
}

ari_sdk::export_agent!(Stock);
