//! Calls to a provider: the request in its wire format, the answer read under the bounds of
//! [`Limits`], retried as [`RetryPolicy`] says within the call's deadline. The budget and the
//! record are the [`crate::Session`]'s; this only talks to the provider. Dropping a call's
//! future abandons it (the connection is closed), which is how a cancelled task stops one.

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use crate::endpoint::{Endpoint, ModelProvider};
use crate::error::ModelError;
use crate::stream::{Assembly, Events, Stream};
use crate::transport::{Limits, RetryPolicy, Transport};
use crate::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse};
use crate::{anthropic, openai};

/// A provider's answer, and whether it reported its usage.
pub type Answer<T> = (T, bool);

/// The HTTP client of model calls, shared by every call of a process.
#[derive(Clone)]
pub struct Client {
    transport: Transport,
}

impl Client {
    pub fn new(limits: Limits, retry: RetryPolicy) -> Result<Client, ModelError> {
        Ok(Client {
            transport: Transport::new(limits, retry, None)?,
        })
    }

    /// A client whose host names are resolved by `resolver` (which may refuse addresses: the
    /// operator's probe keeps to the addresses its admin allows).
    pub fn with_resolver(
        limits: Limits,
        retry: RetryPolicy,
        resolver: Arc<dyn reqwest::dns::Resolve>,
    ) -> Result<Client, ModelError> {
        Ok(Client {
            transport: Transport::new(limits, retry, Some(resolver))?,
        })
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    pub fn limits(&self) -> Limits {
        self.transport.limits
    }

    /// One chat completion, generating at most `max_tokens`.
    pub async fn chat(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        max_tokens: u32,
        deadline: Instant,
    ) -> Result<Answer<ChatResponse>, ModelError> {
        let (path, body) = chat_request(endpoint, request, max_tokens, false)?;
        let body = self.exchange(endpoint, path, &body, deadline).await?;
        match endpoint.kind {
            ModelProvider::OpenAI => openai::parse_chat(&body),
            ModelProvider::Anthropic => anthropic::parse_chat(&body),
        }
    }

    /// A chat completion streamed: `on_text` gets the text as the model produces it (for
    /// followers), the caller still gets the whole answer, the same as [`Client::chat`]'s.
    pub async fn chat_streaming(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        max_tokens: u32,
        deadline: Instant,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Answer<ChatResponse>, ModelError> {
        let (path, body) = chat_request(endpoint, request, max_tokens, true)?;
        let response = self
            .transport
            .post(endpoint, path, &auth(endpoint)?, to_bytes(&body)?, deadline)
            .await?
            .response;
        let max = self.transport.limits.max_response_bytes;
        match endpoint.kind {
            ModelProvider::OpenAI => {
                self.assemble(response, Assembly::stream(max), deadline, on_text)
                    .await
            }
            ModelProvider::Anthropic => {
                self.assemble(
                    response,
                    anthropic::Assembly::stream(max),
                    deadline,
                    on_text,
                )
                .await
            }
        }
    }

    /// Reads a streamed answer into `assembly` until it is whole or the stream ends.
    async fn assemble(
        &self,
        mut response: reqwest::Response,
        mut assembly: Stream<impl Events>,
        deadline: Instant,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Answer<ChatResponse>, ModelError> {
        while !assembly.done() {
            match self.transport.next_chunk(&mut response, deadline).await? {
                Some(bytes) => assembly.feed(&bytes, on_text)?,
                None => break,
            }
        }
        assembly.finish()
    }

    /// Vectors for `request.inputs` (OpenAI wire format only: Anthropic has no embeddings).
    pub async fn embed(
        &self,
        endpoint: &Endpoint,
        request: &EmbeddingRequest,
        deadline: Instant,
    ) -> Result<Answer<EmbeddingResponse>, ModelError> {
        if endpoint.kind != ModelProvider::OpenAI {
            return Err(ModelError::invalid("this provider has no embeddings"));
        }
        let body = openai::embed_body(&endpoint.model, request);
        let body = self
            .exchange(endpoint, openai::EMBEDDINGS_PATH, &body, deadline)
            .await?;
        openai::parse_embeddings(&body, request.inputs.len())
    }

    /// POSTs `body` and reads the whole answer.
    async fn exchange(
        &self,
        endpoint: &Endpoint,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Vec<u8>, ModelError> {
        let answer = self
            .transport
            .post(endpoint, path, &auth(endpoint)?, to_bytes(body)?, deadline)
            .await?;
        self.transport
            .read_body(
                answer.response,
                self.transport.limits.max_response_bytes,
                deadline,
            )
            .await
    }
}

/// The path and body of a chat call in the endpoint's wire format, asking for a stream or not.
fn chat_request(
    endpoint: &Endpoint,
    request: &ChatRequest,
    max_tokens: u32,
    stream: bool,
) -> Result<(&'static str, Value), ModelError> {
    Ok(match endpoint.kind {
        ModelProvider::OpenAI => (
            openai::CHAT_PATH,
            openai::chat_body(
                &endpoint.model,
                request,
                max_tokens,
                stream,
                endpoint.schema_style,
            )?,
        ),
        ModelProvider::Anthropic => {
            let mut body = anthropic::chat_body(&endpoint.model, request, max_tokens)?;
            if stream {
                body["stream"] = Value::Bool(true);
            }
            (anthropic::MESSAGES_PATH, body)
        }
    })
}

fn to_bytes(body: &Value) -> Result<Vec<u8>, ModelError> {
    serde_json::to_vec(body).map_err(|e| ModelError::invalid(format!("encoding the request: {e}")))
}

/// The provider's authentication (and version) headers. The key's header value is marked
/// sensitive, so the HTTP stack never prints it either.
pub(crate) fn auth(endpoint: &Endpoint) -> Result<Vec<(HeaderName, HeaderValue)>, ModelError> {
    let mut headers = Vec::new();
    if endpoint.kind == ModelProvider::Anthropic {
        headers.push((
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(anthropic::VERSION),
        ));
    }
    if let Some(key) = &endpoint.key {
        let (name, value) = match endpoint.kind {
            ModelProvider::OpenAI => (AUTHORIZATION, format!("Bearer {}", key.expose())),
            ModelProvider::Anthropic => (HeaderName::from_static("x-api-key"), key.expose().into()),
        };
        headers.push((name, secret_header(&value)?));
    }
    Ok(headers)
}

fn secret_header(value: &str) -> Result<HeaderValue, ModelError> {
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| ModelError::invalid("the API key holds characters a header cannot"))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ApiKey;

    #[test]
    fn a_key_that_cannot_be_a_header_is_refused_without_echoing_it() {
        let endpoint = Endpoint::new(
            ModelProvider::OpenAI,
            url::Url::parse("http://127.0.0.1:1").expect("url"),
            "m",
        )
        .with_key(ApiKey::new("sk-\u{7}bell"));
        let err = auth(&endpoint).expect_err("refused");
        assert!(!err.to_string().contains("bell"), "{err}");
    }
}
