//! The loop: ask the model, run the calls it chooses, feed the results back, stop at an
//! answer, a subagent's answer, the turn limit or a budget. Written against [`Host`] so it is
//! tested natively; the component's host is the SDK's.

use ari_model::Declaration;
use ari_model::declaration::FormatKind;
use ari_sdk::Error;
use ari_sdk::model::{ChatRequest, ChatResponse, Message, ModelError, ResponseFormat, ToolCall};
use ari_sdk::tools::{Tool as McpTool, ToolError, ToolResult};

use crate::toolbox::{Target, Toolbox};

/// What the loop needs of the host: the SDK's functions, as one seam.
pub trait Host {
    fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError>;
    fn list_tools(&mut self, server: &str) -> Result<Vec<McpTool>, ToolError>;
    fn call_tool(&mut self, server: &str, tool: &str, args: &str) -> Result<ToolResult, ToolError>;
    fn delegate(&mut self, agent: &str, input: &[u8]) -> Result<Vec<u8>, Error>;
    fn log(&mut self, line: &str);
    /// The earlier turns of the conversation this task continues: (input, answer) pairs.
    fn history(&mut self) -> Vec<(String, String)>;
    /// Ends the turn asking the caller for input (the answer returned is the question).
    fn ask_for_input(&mut self);
}

/// The function offered beside the toolbox with which the model asks the caller something:
/// the turn ends asking for input, and the caller's reply is the next turn
/// (docs/conversations.md).
pub const ASK_USER: &str = "ask_user";
const ASK_USER_PARAMETERS: &str = r#"{"type":"object","properties":{"question":{"type":"string","description":"what to ask the user"}},"required":["question"]}"#;

/// The `ask_user` function.
fn ask_user() -> ari_sdk::model::Tool {
    ari_sdk::model::Tool::new(ASK_USER, ASK_USER_PARAMETERS).description(
        "Ask the user a question when you cannot go on without their answer; their reply \
         comes back as the next message.",
    )
}

/// The first request: the declaration's prompt, the conversation so far (`history`: each
/// earlier turn's input and answer), the user's input, its tools and settings.
pub fn first_request(
    declaration: &Declaration,
    toolbox: &Toolbox,
    history: &[(String, String)],
    input: &str,
) -> ChatRequest {
    let mut request = ChatRequest::new(declaration.model.clone())
        .system(declaration.instructions.clone().unwrap_or_default());
    for (asked, answered) in history {
        request = request.user(asked.clone()).assistant(answered.clone());
    }
    request = request.user(input);
    for tool in &toolbox.tools {
        request = request.tool(tool.clone());
    }
    request = request.tool(ask_user());
    if let Some(max) = declaration.max_tokens_per_turn {
        request = request.max_tokens(max);
    }
    if let Some(format) = &declaration.response_format {
        request = request.response_format(match (format.kind, &format.schema) {
            (FormatKind::JsonSchema, Some(schema)) => ResponseFormat::JsonSchema {
                name: format.name.clone().unwrap_or_else(|| "answer".into()),
                schema: schema.clone(),
                strict: true,
            },
            _ => ResponseFormat::JsonObject,
        });
    }
    request
}

/// The input a call hands an Agent: its `input` argument, or the raw arguments when the
/// model did not write the JSON object asked for.
pub fn agent_input(call: &ToolCall) -> String {
    serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|v| v.get("input")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| call.arguments.trim().to_owned())
}

/// What one call came to.
enum Step {
    /// A result for the model.
    Result(String),
    /// The final answer (a subagent's).
    Answer(String),
}

/// Runs one call. Errors the model can act on (a tool that failed, a rejected approval, a
/// child that failed) become its result; a denial ends the task, as the grant decided.
fn run_call(host: &mut impl Host, toolbox: &Toolbox, call: &ToolCall) -> Result<Step, Error> {
    let Some(target) = toolbox.targets.get(&call.name) else {
        return Ok(Step::Result(format!(
            "error: there is no tool named {:?}",
            call.name
        )));
    };
    match target {
        Target::Mcp { server, tool } => {
            let args = if call.arguments.trim().is_empty() {
                "{}"
            } else {
                call.arguments.as_str()
            };
            match host.call_tool(server, tool, args) {
                Ok(r) if r.is_error => Ok(Step::Result(format!("error: {}", r.text))),
                Ok(r) => Ok(Step::Result(r.text)),
                Err(e @ ToolError::Denied(_)) => Err(e.into()),
                Err(e) => Ok(Step::Result(format!("error: {e}"))),
            }
        }
        Target::Agent { agent } => match host.delegate(agent, agent_input(call).as_bytes()) {
            Ok(out) => Ok(Step::Result(String::from_utf8_lossy(&out).into_owned())),
            Err(e @ Error::Denied(_)) => Err(e),
            Err(e) => Ok(Step::Result(format!("error: {e}"))),
        },
        Target::Subagent { agent } => match host.delegate(agent, agent_input(call).as_bytes()) {
            Ok(out) => Ok(Step::Answer(String::from_utf8_lossy(&out).into_owned())),
            Err(e @ Error::Denied(_)) => Err(e),
            Err(e) => Ok(Step::Result(format!("error: {e}"))),
        },
    }
}

/// Runs the declared agent on `input` and returns its answer.
pub fn run(host: &mut impl Host, declaration: &Declaration, input: &str) -> Result<String, Error> {
    let toolbox = Toolbox::build(declaration, |server| host.list_tools(server))?;
    let history = host.history();
    let mut request = first_request(declaration, &toolbox, &history, input);
    let turns = declaration.max_turns();
    for turn in 1..=turns {
        let answer = host.chat(&request)?;
        let calls = answer.tool_calls().to_vec();
        if calls.is_empty() {
            return Ok(answer.text().unwrap_or_default().to_owned());
        }
        if let Some(ask) = calls.iter().find(|c| c.name == ASK_USER) {
            let question = serde_json::from_str::<serde_json::Value>(&ask.arguments)
                .ok()
                .and_then(|v| v.get("question")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| ask.arguments.trim().to_owned());
            host.ask_for_input();
            return Ok(question);
        }
        host.log(&format!("turn {turn}: {} call(s)", calls.len()));
        request.push(answer.message.clone());
        for call in &calls {
            match run_call(host, &toolbox, call)? {
                Step::Result(text) => request.push(Message::tool_result(&call.id, text)),
                Step::Answer(text) => return Ok(text),
            }
        }
    }
    Err(Error::Failed(format!(
        "no answer after {turns} model calls (declarative.maxTurns)"
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use ari_sdk::model::{FinishReason, Role, Usage};
    use ari_sdk::tools::ToolHints;

    /// A scripted host: the model's answers in order, and what every call was.
    #[derive(Default)]
    struct Fake {
        answers: VecDeque<ChatResponse>,
        requests: Vec<ChatRequest>,
        history: Vec<(String, String)>,
        asked: bool,
        tool_calls: Vec<(String, String, String)>,
        tool_answer: Option<Result<ToolResult, ToolError>>,
        delegations: Vec<(String, String)>,
        child_answer: Option<Result<Vec<u8>, Error>>,
        lists: usize,
    }

    impl Host for Fake {
        fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
            self.requests.push(request.clone());
            self.answers
                .pop_front()
                .ok_or_else(|| ModelError::BudgetExhausted("no tokens left".into()))
        }
        fn list_tools(&mut self, _server: &str) -> Result<Vec<McpTool>, ToolError> {
            self.lists += 1;
            Ok(["search", "close"]
                .into_iter()
                .map(|n| McpTool {
                    name: n.into(),
                    title: None,
                    description: None,
                    input_schema: r#"{"type":"object"}"#.into(),
                    hints: ToolHints::default(),
                })
                .collect())
        }
        fn history(&mut self) -> Vec<(String, String)> {
            self.history.clone()
        }
        fn ask_for_input(&mut self) {
            self.asked = true;
        }
        fn call_tool(&mut self, s: &str, t: &str, a: &str) -> Result<ToolResult, ToolError> {
            self.tool_calls.push((s.into(), t.into(), a.into()));
            self.tool_answer.clone().unwrap_or_else(|| {
                Ok(ToolResult {
                    text: format!("{t} done"),
                    content: "[]".into(),
                    structured: None,
                    is_error: false,
                })
            })
        }
        fn delegate(&mut self, agent: &str, input: &[u8]) -> Result<Vec<u8>, Error> {
            self.delegations
                .push((agent.into(), String::from_utf8_lossy(input).into()));
            self.child_answer
                .clone()
                .unwrap_or_else(|| Ok(format!("{agent} says hi").into_bytes()))
        }
        fn log(&mut self, _line: &str) {}
    }

    fn says(text: &str) -> ChatResponse {
        respond(Some(text), vec![])
    }

    fn calls(calls: &[(&str, &str)]) -> ChatResponse {
        let calls = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("c{i}"),
                name: (*name).into(),
                arguments: (*args).into(),
            })
            .collect();
        respond(None, calls)
    }

    fn respond(text: Option<&str>, tool_calls: Vec<ToolCall>) -> ChatResponse {
        ChatResponse {
            message: Message {
                role: Role::Assistant,
                content: text.map(str::to_owned),
                tool_calls,
                tool_call_id: None,
            },
            finish_reason: FinishReason::Stop,
            usage: Usage::default(),
            model: "m".into(),
        }
    }

    fn declaration() -> Declaration {
        serde_json::from_value(serde_json::json!({
            "instructions": "You triage.", "model": "small",
            "tools": [
                {"mcpServer": {"name": "tracker", "tools": ["search", "close"]}},
                {"agent": {"name": "summarize", "description": "summarises"}}
            ],
            "subagents": [{"name": "expert"}],
            "maxTurns": 3, "maxTokensPerTurn": 200
        }))
        .expect("declaration JSON")
    }

    fn fake(answers: Vec<ChatResponse>) -> Fake {
        Fake {
            answers: answers.into(),
            ..Fake::default()
        }
    }

    #[test]
    fn an_answer_without_calls_is_the_output_of_one_model_call() {
        let mut host = fake(vec![says("all good")]);
        assert_eq!(
            run(&mut host, &declaration(), "hello").expect("runs"),
            "all good"
        );
        let req = &host.requests[0];
        assert_eq!(req.model, "small");
        assert_eq!(req.messages[0].content.as_deref(), Some("You triage."));
        assert_eq!(req.messages[1].content.as_deref(), Some("hello"));
        assert_eq!(req.max_tokens, Some(200));
        let offered: Vec<_> = req.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            offered,
            [
                "search",
                "close",
                "summarize",
                "transfer_to_expert",
                ASK_USER
            ]
        );
        assert_eq!(host.lists, 1, "each server is listed once per task");
    }

    #[test]
    fn tool_results_are_fed_back_until_the_model_answers() {
        let mut host = fake(vec![
            calls(&[
                ("search", r#"{"q":"disk"}"#),
                ("summarize", r#"{"input":"long"}"#),
            ]),
            says("done"),
        ]);
        assert_eq!(run(&mut host, &declaration(), "go").expect("runs"), "done");
        assert_eq!(
            host.tool_calls,
            [("tracker".into(), "search".into(), r#"{"q":"disk"}"#.into())]
        );
        assert_eq!(host.delegations, [("summarize".into(), "long".into())]);
        let second = &host.requests[1];
        let results: Vec<_> = second
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| (m.tool_call_id.as_deref(), m.content.as_deref()))
            .collect();
        assert_eq!(
            results,
            [
                (Some("c0"), Some("search done")),
                (Some("c1"), Some("summarize says hi"))
            ]
        );
    }

    #[test]
    fn a_subagents_answer_ends_the_task_without_another_model_call() {
        let mut host = fake(vec![calls(&[("transfer_to_expert", r#"{"input":"q"}"#)])]);
        assert_eq!(
            run(&mut host, &declaration(), "q").expect("runs"),
            "expert says hi"
        );
        assert_eq!(host.requests.len(), 1);
    }

    #[test]
    fn failures_the_model_can_act_on_become_results() {
        let mut host = fake(vec![
            calls(&[
                ("nosuch", "{}"),
                ("close", "{}"),
                ("summarize", "just text"),
            ]),
            says("ok"),
        ]);
        host.tool_answer = Some(Err(ToolError::Rejected("by ana: not today".into())));
        host.child_answer = Some(Err(Error::ChildFailed {
            reason: "FuelExhausted".into(),
            message: "out".into(),
        }));
        assert_eq!(run(&mut host, &declaration(), "x").expect("runs"), "ok");
        let contents: Vec<_> = host.requests[1]
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .filter_map(|m| m.content.clone())
            .collect();
        assert_eq!(
            contents,
            [
                "error: there is no tool named \"nosuch\"".to_owned(),
                "error: tool call rejected: by ana: not today".to_owned(),
                "error: child failed with FuelExhausted: out".to_owned(),
            ]
        );
        assert_eq!(host.delegations, [("summarize".into(), "just text".into())]);
    }

    #[test]
    fn a_rejected_delegation_is_a_result_the_model_reads_not_the_end_of_the_task() {
        let mut host = fake(vec![
            calls(&[("summarize", "text")]),
            says("done without it"),
        ]);
        host.child_answer = Some(Err(Error::Rejected(
            "ana rejected call 0-ab (delegation to Agent `summarize`): not today".into(),
        )));
        assert_eq!(
            run(&mut host, &declaration(), "x").expect("runs"),
            "done without it"
        );
        let result = host.requests[1]
            .messages
            .iter()
            .find(|m| m.role == Role::Tool)
            .and_then(|m| m.content.clone());
        assert_eq!(
            result.as_deref(),
            Some(
                "error: rejected: ana rejected call 0-ab (delegation to Agent `summarize`): not today"
            )
        );
    }

    #[test]
    fn a_denied_call_ends_the_task_as_a_denial() {
        let mut host = fake(vec![calls(&[("search", "{}")])]);
        host.tool_answer = Some(Err(ToolError::Denied("search".into())));
        let err = run(&mut host, &declaration(), "x").expect_err("denied");
        assert!(matches!(err, Error::Tool(ToolError::Denied(_))), "{err:?}");
    }

    #[test]
    fn the_turn_limit_stops_a_model_that_keeps_calling_tools() {
        let looping = || calls(&[("search", "{}")]);
        let mut host = fake(vec![looping(), looping(), looping(), says("late")]);
        let err = run(&mut host, &declaration(), "x").expect_err("limit");
        assert!(err.to_string().contains("after 3 model calls"), "{err}");
        assert_eq!(host.requests.len(), 3);
    }

    #[test]
    fn a_spent_token_budget_ends_the_task_with_the_models_error() {
        let mut host = fake(vec![calls(&[("search", "{}")])]);
        let err = run(&mut host, &declaration(), "x").expect_err("budget");
        assert!(
            matches!(err, Error::Model(ModelError::BudgetExhausted(_))),
            "{err:?}"
        );
    }

    #[test]
    fn a_declared_schema_is_asked_of_every_call() {
        let mut d = declaration();
        d.response_format = Some(ari_model::declaration::DeclaredFormat {
            kind: FormatKind::JsonSchema,
            schema: Some(r#"{"type":"object"}"#.into()),
            name: None,
        });
        let req = first_request(&d, &Toolbox::default(), &[], "x");
        assert_eq!(
            req.response_format,
            Some(ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: r#"{"type":"object"}"#.into(),
                strict: true
            })
        );
    }

    #[test]
    fn a_model_that_asks_the_user_ends_the_turn_asking_and_the_reply_sees_the_conversation() {
        let mut host = fake(vec![calls(&[(
            ASK_USER,
            r#"{"question":"Which laptop?"}"#,
        )])]);
        let out = run(&mut host, &declaration(), "I need a laptop").expect("runs");
        assert_eq!(out, "Which laptop?");
        assert!(host.asked, "the turn ends asking for input");

        let mut reply = fake(vec![says("Ordered.")]);
        reply.history = vec![("I need a laptop".into(), "Which laptop?".into())];
        assert_eq!(
            run(&mut reply, &declaration(), "The small one").expect("runs"),
            "Ordered."
        );
        assert!(!reply.asked);
        let said: Vec<_> = reply.requests[0]
            .messages
            .iter()
            .map(|m| (m.role, m.content.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            said[1..],
            [
                (Role::User, "I need a laptop".to_owned()),
                (Role::Assistant, "Which laptop?".to_owned()),
                (Role::User, "The small one".to_owned()),
            ]
        );
    }
}
