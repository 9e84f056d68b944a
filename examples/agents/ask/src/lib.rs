//! Asks a language model the task's input and returns its answer: the smallest model-backed
//! agent. It never sees a key: it names a model its Agent is granted (`capabilities.models`),
//! the first one unless its config names another, and the host does the rest (credentials,
//! the token budget, the record that lets `ari verify` replay the run without the model).
//!
//! Output: the answer's text. A model error is the task's error, so the Task's message says
//! what the host refused (`denied`, `budget-exhausted`, ...).

use ari_sdk::bindings::ainur::ari::model::{self, ChatRequest, Message, ModelError, Role};
use ari_sdk::{Agent, Error, Output, Task};

/// The system prompt: short answers keep small models and budgets on track.
const SYSTEM: &str = "You are a concise assistant. Answer in one short paragraph.";

struct Ask;

static MODEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

impl Agent for Ask {
    fn initialize(config: Vec<u8>) -> Result<(), Error> {
        let name = String::from_utf8(config)
            .map_err(|_| Error::Invalid("config: the model's name, UTF-8".into()))?;
        let name = name.trim();
        if !name.is_empty() {
            let _ = MODEL.set(name.to_owned());
        }
        Ok(())
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let question = String::from_utf8(task.input)
            .map_err(|_| Error::Invalid("the question must be UTF-8 text".into()))?;
        let name = match MODEL.get() {
            Some(name) => name.clone(),
            None => model::models()
                .into_iter()
                .next()
                .ok_or_else(|| Error::Denied("no model is granted to this agent".into()))?,
        };
        let answer = model::chat(&ChatRequest {
            model: name,
            messages: vec![text(Role::System, SYSTEM), text(Role::User, &question)],
            tools: Vec::new(),
            tool_choice: None,
            response_format: None,
            max_tokens: Some(64),
            temperature: Some(0.0),
            seed: Some(1),
            stop: Vec::new(),
        })
        .map_err(to_error)?;
        Ok(Output::from(answer.message.content.unwrap_or_default()))
    }
}

fn text(role: Role, content: &str) -> Message {
    Message {
        role,
        content: Some(content.to_owned()),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

fn to_error(e: ModelError) -> Error {
    match e {
        ModelError::Denied(m) => Error::Denied(m),
        ModelError::InvalidRequest(m) => Error::Invalid(m),
        ModelError::BudgetExhausted(m) => Error::Failed(format!("budget-exhausted: {m}")),
        ModelError::RateLimited(r) => Error::Failed(format!("rate-limited: {}", r.message)),
        ModelError::Unavailable(m) => Error::Failed(format!("unavailable: {m}")),
        ModelError::ProviderError(p) => Error::Failed(format!("provider-error {}: {}", p.status, p.message)),
    }
}

ari_sdk::export_agent!(Ask);
