//! Asks a language model the task's input and returns its answer: the smallest model-backed
//! agent. It never sees a key: it names a model its Agent is granted (`capabilities.models`),
//! the first one unless its config names another, and the host does the rest (credentials,
//! the token budget, the record that lets `ari verify` replay the run without the model).
//!
//! Output: the answer's text. A model error is the task's error, so the Task's message says
//! what the host refused (`denied`, `budget-exhausted`, ...).

use std::sync::OnceLock;

use ari_sdk::model::{self, ChatRequest};
use ari_sdk::{Agent, Error, Output, Task};

/// The system prompt: short answers keep small models and budgets on track.
const SYSTEM: &str = "You are a concise assistant. Answer in one short paragraph.";

static MODEL: OnceLock<String> = OnceLock::new();

struct Ask;

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
        let answer = ChatRequest::new(name)
            .system(SYSTEM)
            .user(question)
            .max_tokens(64)
            .temperature(0.0)
            .seed(1)
            .send()?;
        Ok(Output::from(answer.text().unwrap_or_default().to_owned()))
    }
}

ari_sdk::export_agent!(Ask);
