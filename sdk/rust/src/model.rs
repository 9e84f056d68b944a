//! Language models (capability `models`): chat with tools, embeddings, and the models this
//! Agent is granted. The host holds the credentials, clips every call to the task's token
//! budget and records each answer, so a replay needs no model; the guest only names a model
//! by its ModelConfig name.
//!
//! ```no_run
//! use ari_sdk::model::{self, ChatRequest, Message, Tool};
//!
//! # fn main() -> Result<(), ari_sdk::Error> {
//! let mut request = ChatRequest::new("small")
//!     .system("Answer in one word.")
//!     .user("What is the capital of France?")
//!     .tool(Tool::new("lookup", r#"{"type":"object","properties":{"q":{"type":"string"}}}"#));
//! let mut answer = model::chat(&request)?;
//! // A tool loop: hand each call's result back and ask again.
//! while let Some(call) = answer.tool_calls().first().cloned() {
//!     request.push(answer.message.clone());
//!     request.push(Message::tool_result(&call.id, "Paris"));
//!     answer = model::chat(&request)?;
//! }
//! println!("{}", answer.text().unwrap_or_default());
//! # Ok(())
//! # }
//! ```
//!
//! Every call fails with a [`ModelError`] case, never a trap; `?` turns it into
//! [`crate::Error::Model`] inside [`crate::Agent::execute`].

use std::time::Duration;

use crate::bindings::ainur::ari::model as wit;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering one [`ToolCall`].
    Tool,
}

/// A tool the model asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id for the call; the [`Message::tool_result`] answering it names it.
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, as the model wrote them: parse them, they may be invalid.
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    /// The text; `None` for an assistant message that only calls tools.
    pub content: Option<String>,
    /// The calls an assistant message made; empty for other roles.
    pub tool_calls: Vec<ToolCall>,
    /// The call a [`Role::Tool`] message answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// Instructions for the model.
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }

    /// An earlier answer, to carry a conversation on (an answer's own message keeps its tool
    /// calls: push [`ChatResponse::message`] instead).
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }

    /// The result of the tool call `call_id` (a [`ToolCall::id`]).
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::text(Role::Tool, content)
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object, as JSON text.
    pub parameters: String,
}

impl Tool {
    /// A tool `name` whose arguments match the JSON Schema `parameters` (JSON text).
    pub fn new(name: impl Into<String>, parameters: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            parameters: parameters.into(),
        }
    }

    /// What the tool does, for the model to decide when to call it.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool, the model chooses which.
    Required,
    /// This tool, by name.
    Function(String),
}

/// The answer's form. Servers with constrained decoding guarantee it; others only try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    /// An answer matching `schema` (JSON Schema as JSON text).
    JsonSchema {
        name: String,
        schema: String,
        strict: bool,
    },
}

/// One chat completion's request; build it with [`ChatRequest::new`] and the methods below.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// A model the Agent is granted, by its ModelConfig name.
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub response_format: Option<ResponseFormat>,
    /// Most tokens to generate; the host lowers it to what the task's budget has left.
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

impl ChatRequest {
    /// A request to `model` with no messages yet.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: None,
            response_format: None,
            max_tokens: None,
            temperature: None,
            seed: None,
            stop: Vec::new(),
        }
    }

    /// Adds a system message.
    pub fn system(self, content: impl Into<String>) -> Self {
        self.message(Message::system(content))
    }

    /// Adds a user message.
    pub fn user(self, content: impl Into<String>) -> Self {
        self.message(Message::user(content))
    }

    /// Adds an assistant message (an earlier answer).
    pub fn assistant(self, content: impl Into<String>) -> Self {
        self.message(Message::assistant(content))
    }

    /// Adds any message.
    pub fn message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// Appends a message in place: how a conversation or a tool loop grows.
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Offers a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }

    /// Asks for an answer matching the JSON Schema `schema` (JSON text), strictly.
    pub fn json_schema(self, name: impl Into<String>, schema: impl Into<String>) -> Self {
        self.response_format(ResponseFormat::JsonSchema {
            name: name.into(),
            schema: schema.into(),
            strict: true,
        })
    }

    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Adds a stop sequence.
    pub fn stop(mut self, sequence: impl Into<String>) -> Self {
        self.stop.push(sequence.into());
        self
    }

    /// Sends the request; see [`chat`].
    pub fn send(&self) -> Result<ChatResponse, ModelError> {
        chat(self)
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// `max_tokens` (as the budget clipped it) was reached.
    Length,
    ToolCalls,
    ContentFilter,
    /// A reason the provider names that none of the above fits.
    Other,
}

impl FinishReason {
    /// The reason as the WIT spells it (`stop`, `length`, `tool-calls`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::ContentFilter => "content-filter",
            FinishReason::Other => "other",
        }
    }
}

/// Tokens a call used, as the provider reported them: what the task's budget was charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Input tokens served from the provider's prompt cache (included in `input_tokens`).
    pub cached_input_tokens: u32,
}

/// A chat completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatResponse {
    /// The assistant's message, tool calls included: push it onto the request to go on.
    pub message: Message,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The model id the provider says answered.
    pub model: String,
}

impl ChatResponse {
    /// The answer's text, if it has any.
    pub fn text(&self) -> Option<&str> {
        self.message.content.as_deref()
    }

    /// The tools the model asked to run, in its order.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.message.tool_calls
    }
}

/// Vectors for some texts.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingRequest {
    /// A model the Agent is granted, by its ModelConfig name.
    pub model: String,
    pub inputs: Vec<String>,
    /// Output size, for models that can shorten their vectors.
    pub dimensions: Option<u32>,
}

impl EmbeddingRequest {
    /// A request to `model` for the vectors of `inputs`.
    pub fn new<I, S>(model: impl Into<String>, inputs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            model: model.into(),
            inputs: inputs.into_iter().map(Into::into).collect(),
            dimensions: None,
        }
    }

    pub fn dimensions(mut self, dimensions: u32) -> Self {
        self.dimensions = Some(dimensions);
        self
    }

    /// Sends the request; see [`embed`].
    pub fn send(&self) -> Result<EmbeddingResponse, ModelError> {
        embed(self)
    }
}

/// The vectors, one per input in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingResponse {
    pub embeddings: Vec<Vec<f32>>,
    pub usage: Usage,
    pub model: String,
}

/// Why a model call failed, one case per case of the WIT's `model-error`. Only `Denied` and
/// `BudgetExhausted` are decided before the provider is contacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The Agent is not granted that model; the task ends `CapabilityDenied`.
    #[error("model denied: {0}")]
    Denied(String),
    /// The task's token budget cannot cover the prompt; nothing was sent.
    #[error("token budget exhausted: {0}")]
    BudgetExhausted(String),
    /// The provider still refused after the host's retries within the task's deadline.
    #[error("rate limited{}: {message}", after(*retry_after_millis))]
    RateLimited {
        /// When the provider said to try again, if it did.
        retry_after_millis: Option<u64>,
        message: String,
    },
    /// The endpoint could not be reached or did not answer in time.
    #[error("model unavailable: {0}")]
    Unavailable(String),
    /// The request is malformed, or the provider rejected it as such.
    #[error("invalid model request: {0}")]
    InvalidRequest(String),
    /// The provider failed otherwise (`status` 200: its answer could not be read).
    #[error("model provider error (HTTP {status}): {message}")]
    Provider { status: u16, message: String },
}

fn after(millis: Option<u64>) -> String {
    millis.map_or_else(String::new, |ms| format!(" (retry after {ms} ms)"))
}

impl ModelError {
    /// The case as the WIT spells it (`denied`, `budget-exhausted`, `rate-limited`,
    /// `unavailable`, `invalid-request`, `provider-error`), for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Denied(_) => "denied",
            ModelError::BudgetExhausted(_) => "budget-exhausted",
            ModelError::RateLimited { .. } => "rate-limited",
            ModelError::Unavailable(_) => "unavailable",
            ModelError::InvalidRequest(_) => "invalid-request",
            ModelError::Provider { .. } => "provider-error",
        }
    }

    /// How long the provider asked to wait, when it is rate limiting and said so.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited {
                retry_after_millis: Some(ms),
                ..
            } => Some(Duration::from_millis(*ms)),
            _ => None,
        }
    }
}

/// One chat completion: the whole answer, or why there is none.
pub fn chat(request: &ChatRequest) -> Result<ChatResponse, ModelError> {
    wit::chat(&request.into())
        .map(ChatResponse::from)
        .map_err(ModelError::from)
}

/// Vectors for `request.inputs`.
pub fn embed(request: &EmbeddingRequest) -> Result<EmbeddingResponse, ModelError> {
    wit::embed(&request.into())
        .map(EmbeddingResponse::from)
        .map_err(ModelError::from)
}

/// The names of the models this Agent is granted (empty without a `models` grant).
pub fn models() -> Vec<String> {
    wit::models()
}

impl From<Role> for wit::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::System => wit::Role::System,
            Role::User => wit::Role::User,
            Role::Assistant => wit::Role::Assistant,
            Role::Tool => wit::Role::Tool,
        }
    }
}

impl From<wit::Role> for Role {
    fn from(role: wit::Role) -> Self {
        match role {
            wit::Role::System => Role::System,
            wit::Role::User => Role::User,
            wit::Role::Assistant => Role::Assistant,
            wit::Role::Tool => Role::Tool,
        }
    }
}

impl From<&ToolCall> for wit::ToolCall {
    fn from(c: &ToolCall) -> Self {
        wit::ToolCall {
            id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        }
    }
}

impl From<wit::ToolCall> for ToolCall {
    fn from(c: wit::ToolCall) -> Self {
        ToolCall {
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        }
    }
}

impl From<&Message> for wit::Message {
    fn from(m: &Message) -> Self {
        wit::Message {
            role: m.role.into(),
            content: m.content.clone(),
            tool_calls: m.tool_calls.iter().map(Into::into).collect(),
            tool_call_id: m.tool_call_id.clone(),
        }
    }
}

impl From<wit::Message> for Message {
    fn from(m: wit::Message) -> Self {
        Message {
            role: m.role.into(),
            content: m.content,
            tool_calls: m.tool_calls.into_iter().map(Into::into).collect(),
            tool_call_id: m.tool_call_id,
        }
    }
}

impl From<&Tool> for wit::ToolDefinition {
    fn from(t: &Tool) -> Self {
        wit::ToolDefinition {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        }
    }
}

impl From<&ToolChoice> for wit::ToolChoice {
    fn from(c: &ToolChoice) -> Self {
        match c {
            ToolChoice::Auto => wit::ToolChoice::Auto,
            ToolChoice::None => wit::ToolChoice::None,
            ToolChoice::Required => wit::ToolChoice::Required,
            ToolChoice::Function(name) => wit::ToolChoice::Function(name.clone()),
        }
    }
}

impl From<&ResponseFormat> for wit::ResponseFormat {
    fn from(f: &ResponseFormat) -> Self {
        match f {
            ResponseFormat::Text => wit::ResponseFormat::Text,
            ResponseFormat::JsonObject => wit::ResponseFormat::JsonObject,
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => wit::ResponseFormat::JsonSchema(wit::JsonSchemaFormat {
                name: name.clone(),
                schema: schema.clone(),
                strict: *strict,
            }),
        }
    }
}

impl From<&ChatRequest> for wit::ChatRequest {
    fn from(r: &ChatRequest) -> Self {
        wit::ChatRequest {
            model: r.model.clone(),
            messages: r.messages.iter().map(Into::into).collect(),
            tools: r.tools.iter().map(Into::into).collect(),
            tool_choice: r.tool_choice.as_ref().map(Into::into),
            response_format: r.response_format.as_ref().map(Into::into),
            max_tokens: r.max_tokens,
            temperature: r.temperature,
            seed: r.seed,
            stop: r.stop.clone(),
        }
    }
}

impl From<wit::FinishReason> for FinishReason {
    fn from(f: wit::FinishReason) -> Self {
        match f {
            wit::FinishReason::Stop => FinishReason::Stop,
            wit::FinishReason::Length => FinishReason::Length,
            wit::FinishReason::ToolCalls => FinishReason::ToolCalls,
            wit::FinishReason::ContentFilter => FinishReason::ContentFilter,
            wit::FinishReason::Other => FinishReason::Other,
        }
    }
}

impl From<wit::Usage> for Usage {
    fn from(u: wit::Usage) -> Self {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_input_tokens: u.cached_input_tokens,
        }
    }
}

impl From<wit::ChatResponse> for ChatResponse {
    fn from(r: wit::ChatResponse) -> Self {
        ChatResponse {
            message: r.message.into(),
            finish_reason: r.finish_reason.into(),
            usage: r.usage.into(),
            model: r.model,
        }
    }
}

impl From<&EmbeddingRequest> for wit::EmbeddingRequest {
    fn from(r: &EmbeddingRequest) -> Self {
        wit::EmbeddingRequest {
            model: r.model.clone(),
            inputs: r.inputs.clone(),
            dimensions: r.dimensions,
        }
    }
}

impl From<wit::EmbeddingResponse> for EmbeddingResponse {
    fn from(r: wit::EmbeddingResponse) -> Self {
        EmbeddingResponse {
            embeddings: r.embeddings,
            usage: r.usage.into(),
            model: r.model,
        }
    }
}

impl From<wit::ModelError> for ModelError {
    fn from(e: wit::ModelError) -> Self {
        match e {
            wit::ModelError::Denied(m) => ModelError::Denied(m),
            wit::ModelError::BudgetExhausted(m) => ModelError::BudgetExhausted(m),
            wit::ModelError::RateLimited(r) => ModelError::RateLimited {
                retry_after_millis: r.retry_after_millis,
                message: r.message,
            },
            wit::ModelError::Unavailable(m) => ModelError::Unavailable(m),
            wit::ModelError::InvalidRequest(m) => ModelError::InvalidRequest(m),
            wit::ModelError::ProviderError(p) => ModelError::Provider {
                status: p.status,
                message: p.message,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_request_reaches_the_wire_as_written() {
        let request = ChatRequest::new("small")
            .system("be brief")
            .user("hi")
            .message(Message::tool_result("call-1", "42"))
            .tool(Tool::new("lookup", "{}").description("finds things"))
            .tool_choice(ToolChoice::Function("lookup".into()))
            .json_schema("answer", r#"{"type":"object"}"#)
            .max_tokens(64)
            .temperature(0.5)
            .seed(7)
            .stop("\n\n");
        let wire = wit::ChatRequest::from(&request);
        assert_eq!(wire.model, "small");
        let roles: Vec<wit::Role> = wire.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [wit::Role::System, wit::Role::User, wit::Role::Tool],
            "messages keep their order and roles"
        );
        assert_eq!(wire.messages[2].tool_call_id.as_deref(), Some("call-1"));
        assert_eq!(wire.messages[2].content.as_deref(), Some("42"));
        assert_eq!(wire.messages[0].tool_call_id, None);
        assert_eq!(
            wire.tools[0].description.as_deref(),
            Some("finds things"),
            "a tool keeps its description"
        );
        assert_eq!(
            wire.tool_choice,
            Some(wit::ToolChoice::Function("lookup".into()))
        );
        let Some(wit::ResponseFormat::JsonSchema(format)) = &wire.response_format else {
            panic!("json schema format: {:?}", wire.response_format);
        };
        assert_eq!(format.name, "answer");
        assert!(format.strict);
        assert_eq!(wire.max_tokens, Some(64));
        assert_eq!(wire.temperature, Some(0.5));
        assert_eq!(wire.seed, Some(7));
        assert_eq!(wire.stop, ["\n\n"]);
    }

    #[test]
    fn an_answer_with_tool_calls_can_be_pushed_back_into_the_conversation() {
        let answer = ChatResponse::from(wit::ChatResponse {
            message: wit::Message {
                role: wit::Role::Assistant,
                content: None,
                tool_calls: vec![wit::ToolCall {
                    id: "call-1".into(),
                    name: "lookup".into(),
                    arguments: r#"{"q":"ari"}"#.into(),
                }],
                tool_call_id: None,
            },
            finish_reason: wit::FinishReason::ToolCalls,
            usage: wit::Usage {
                input_tokens: 10,
                output_tokens: 4,
                cached_input_tokens: 2,
            },
            model: "m".into(),
        });
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        assert_eq!(answer.finish_reason.as_str(), "tool-calls");
        assert_eq!(answer.text(), None);
        assert_eq!(answer.tool_calls()[0].name, "lookup");
        assert_eq!(answer.usage.cached_input_tokens, 2);

        let mut request = ChatRequest::new("m").user("find ari");
        request.push(answer.message.clone());
        request.push(Message::tool_result(&answer.tool_calls()[0].id, "found"));
        let wire = wit::ChatRequest::from(&request);
        assert_eq!(wire.messages[1].tool_calls[0].arguments, r#"{"q":"ari"}"#);
        assert_eq!(wire.messages[1].content, None);
        assert_eq!(wire.messages[2].tool_call_id.as_deref(), Some("call-1"));
    }

    #[test]
    fn every_model_error_case_keeps_its_fields() {
        let rate = ModelError::from(wit::ModelError::RateLimited(wit::RateLimit {
            retry_after_millis: Some(1500),
            message: "slow down".into(),
        }));
        assert_eq!(rate.kind(), "rate-limited");
        assert_eq!(rate.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(
            rate.to_string(),
            "rate limited (retry after 1500 ms): slow down"
        );
        let provider = ModelError::from(wit::ModelError::ProviderError(wit::ProviderFailure {
            status: 502,
            message: "bad gateway".into(),
        }));
        assert_eq!(
            provider,
            ModelError::Provider {
                status: 502,
                message: "bad gateway".into()
            }
        );
        assert_eq!(provider.retry_after(), None);
        let cases = [
            (wit::ModelError::Denied("d".into()), "denied"),
            (
                wit::ModelError::BudgetExhausted("b".into()),
                "budget-exhausted",
            ),
            (wit::ModelError::Unavailable("u".into()), "unavailable"),
            (
                wit::ModelError::InvalidRequest("i".into()),
                "invalid-request",
            ),
        ];
        for (wire, kind) in cases {
            assert_eq!(ModelError::from(wire).kind(), kind);
        }
    }

    #[test]
    fn embedding_requests_take_any_strings() {
        let request = EmbeddingRequest::new("embedder", ["a", "bb"]).dimensions(8);
        let wire = wit::EmbeddingRequest::from(&request);
        assert_eq!(wire.inputs, ["a", "bb"]);
        assert_eq!(wire.dimensions, Some(8));
    }
}
