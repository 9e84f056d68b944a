//! `chat`, `embed` and `models` of `interface model`: linkage, fuel, and the WIT records'
//! conversions to and from the provider-neutral types of `ari-llm`.

use ari_llm::ModelError as CallFailure;
use ari_llm::budget;
use ari_llm::types as llm;
use wasmtime::component::LinkerInstance;

use super::{Ending, ModelCapability};
use crate::bindings::model as wit;
use crate::capability::CapError;
use crate::capability::io;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, charge_bytes};
use crate::state::TaskState;

/// The fully qualified name of the interface.
pub const MODEL_IMPORT: &str = "ainur:ari/model@2.0.0";

/// A model call: bytes of the request, then of the answer. The base is high: each call is a
/// provider round trip and a record in the trace, so a guest calling in a loop pays for it.
pub const CALL: FuelCost = FuelCost::new(500_000, 2);
/// `models`: the names listed.
pub const LIST: FuelCost = FuelCost::new(1_000, 2);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("chat", CALL), ("embed", CALL), ("models", LIST)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: MODEL_IMPORT,
    link,
    fuel: FUEL,
};

fn link(model: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    model.func_wrap("chat", |mut cx: Cx<'_>, (request,): (wit::ChatRequest,)| {
        let name = request.model.clone();
        let request = to_chat(request);
        charge(&mut cx, CALL, name.len() + budget::request_bytes(&request))?;
        let ending = cx
            .data()
            .caps()
            .with(|m: &mut ModelCapability, rec| m.chat(&name, request, rec));
        let result = settle(&mut cx, ending)?;
        if let Ok(answer) = &result {
            let bytes = budget::message_bytes(&answer.message) + answer.model.len();
            charge_bytes(&mut cx, CALL, bytes)?;
        }
        Ok((result.map(from_chat),))
    })?;
    model.func_wrap(
        "embed",
        |mut cx: Cx<'_>, (request,): (wit::EmbeddingRequest,)| {
            let bytes: usize = request.inputs.iter().map(String::len).sum();
            charge(&mut cx, CALL, bytes + request.model.len())?;
            let name = request.model.clone();
            let request = llm::EmbeddingRequest {
                inputs: request.inputs,
                dimensions: request.dimensions,
            };
            let ending = cx
                .data()
                .caps()
                .with(|m: &mut ModelCapability, rec| m.embed(&name, request, rec));
            let result = settle(&mut cx, ending)?.map(|r| wit::EmbeddingResponse {
                embeddings: r.embeddings,
                usage: from_usage(r.usage),
                model: r.model,
            });
            if let Ok(answer) = &result {
                let floats: usize = answer.embeddings.iter().map(Vec::len).sum();
                charge_bytes(&mut cx, CALL, floats * 4)?;
            }
            Ok((result,))
        },
    )?;
    model.func_wrap("models", |mut cx: Cx<'_>, (): ()| {
        let names = cx.data().caps().get::<ModelCapability>().names();
        charge(&mut cx, LIST, names.iter().map(String::len).sum())?;
        Ok((names,))
    })
}

/// What the guest gets of a call's ending ([`io::settle`]).
fn settle<T>(
    cx: &mut Cx<'_>,
    ending: Result<Ending<T>, CapError>,
) -> wasmtime::Result<Result<T, wit::ModelError>> {
    let denial: fn(&CallFailure) -> Option<&String> = |e| match e {
        CallFailure::Denied { message } => Some(message),
        _ => None,
    };
    io::settle(cx, ending, denial, to_wit_error)
}

fn to_wit_error(error: CallFailure) -> wit::ModelError {
    match error {
        CallFailure::Denied { message } => wit::ModelError::Denied(message),
        CallFailure::BudgetExhausted { message } => wit::ModelError::BudgetExhausted(message),
        CallFailure::RateLimited {
            retry_after_millis,
            message,
        } => wit::ModelError::RateLimited(wit::RateLimit {
            retry_after_millis,
            message,
        }),
        CallFailure::Unavailable { message } => wit::ModelError::Unavailable(message),
        CallFailure::InvalidRequest { message } => wit::ModelError::InvalidRequest(message),
        CallFailure::Provider { status, message } => {
            wit::ModelError::ProviderError(wit::ProviderFailure { status, message })
        }
    }
}

fn to_chat(r: wit::ChatRequest) -> llm::ChatRequest {
    llm::ChatRequest {
        messages: r.messages.into_iter().map(to_message).collect(),
        tools: r
            .tools
            .into_iter()
            .map(|t| llm::ToolDefinition {
                name: t.name,
                description: t.description,
                parameters: t.parameters,
            })
            .collect(),
        tool_choice: r.tool_choice.map(|c| match c {
            wit::ToolChoice::Auto => llm::ToolChoice::Auto,
            wit::ToolChoice::None => llm::ToolChoice::None,
            wit::ToolChoice::Required => llm::ToolChoice::Required,
            wit::ToolChoice::Function(name) => llm::ToolChoice::Function(name),
        }),
        response_format: r.response_format.map(|f| match f {
            wit::ResponseFormat::Text => llm::ResponseFormat::Text,
            wit::ResponseFormat::JsonObject => llm::ResponseFormat::JsonObject,
            wit::ResponseFormat::JsonSchema(s) => {
                llm::ResponseFormat::JsonSchema(llm::JsonSchemaFormat {
                    name: s.name,
                    schema: s.schema,
                    strict: s.strict,
                })
            }
        }),
        max_tokens: r.max_tokens,
        temperature: r.temperature,
        seed: r.seed,
        stop: r.stop,
    }
}

fn to_message(m: wit::Message) -> llm::Message {
    llm::Message {
        role: match m.role {
            wit::Role::System => llm::Role::System,
            wit::Role::User => llm::Role::User,
            wit::Role::Assistant => llm::Role::Assistant,
            wit::Role::Tool => llm::Role::Tool,
        },
        content: m.content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| llm::ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect(),
        tool_call_id: m.tool_call_id,
    }
}

fn from_message(m: llm::Message) -> wit::Message {
    wit::Message {
        role: match m.role {
            llm::Role::System => wit::Role::System,
            llm::Role::User => wit::Role::User,
            llm::Role::Assistant => wit::Role::Assistant,
            llm::Role::Tool => wit::Role::Tool,
        },
        content: m.content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| wit::ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect(),
        tool_call_id: m.tool_call_id,
    }
}

fn from_chat(r: llm::ChatResponse) -> wit::ChatResponse {
    wit::ChatResponse {
        message: from_message(r.message),
        finish_reason: match r.finish_reason {
            llm::FinishReason::Stop => wit::FinishReason::Stop,
            llm::FinishReason::Length => wit::FinishReason::Length,
            llm::FinishReason::ToolCalls => wit::FinishReason::ToolCalls,
            llm::FinishReason::ContentFilter => wit::FinishReason::ContentFilter,
            llm::FinishReason::Other => wit::FinishReason::Other,
        },
        usage: from_usage(r.usage),
        model: r.model,
    }
}

fn from_usage(u: llm::Usage) -> wit::Usage {
    wit::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cached_input_tokens: u.cached_input_tokens,
    }
}
