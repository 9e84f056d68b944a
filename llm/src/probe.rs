//! The model list an endpoint offers (`GET models` in the OpenAI wire format, `GET v1/models`
//! in Anthropic's), asked once, without retries: a probe that says whether the endpoint
//! answers. Its outcome is a fixed case, never the provider's text: whoever writes a
//! ModelConfig chooses the URL, and the answer may be an internal service's error page.

use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

use crate::anthropic;
use crate::client::Client;
use crate::endpoint::{Endpoint, ModelProvider};
use crate::error::ModelError;

const OPENAI_MODELS_PATH: &str = "models";
const ANTHROPIC_MODELS_PATH: &str = "v1/models";

/// The model ids an endpoint listed, at most the number asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelList {
    pub ids: Vec<String>,
    /// The endpoint listed more than were kept (or ids too long to keep).
    pub truncated: bool,
}

/// Why no model list was had. No case carries text from the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// No HTTP answer: refused, silent, timed out, TLS failed, or a name that does not resolve
    /// (to an allowed address). One case, so a status cannot tell a closed port from a
    /// filtered one.
    #[error("the endpoint could not be reached or gave no HTTP answer")]
    Unreachable,
    /// An HTTP answer that is not 2xx (redirects are not followed).
    #[error("the endpoint answered HTTP {0}")]
    Status(u16),
    /// A 2xx answer larger than the bound.
    #[error("the endpoint's model list is larger than the probe reads")]
    TooLarge,
    /// A 2xx answer that is not a model list (`{"data": [{"id": ...}, ...]}`).
    #[error("the endpoint's answer is not a model list")]
    NotAModelList,
}

#[derive(Deserialize)]
struct Listing {
    data: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    id: String,
}

/// The ids of a model list body, at most `max_ids`, each at most `max_id_len` bytes (longer
/// ones are left out and the list marked truncated).
pub fn parse_model_list(
    body: &[u8],
    max_ids: usize,
    max_id_len: usize,
) -> Result<ModelList, ListError> {
    let listing: Listing = serde_json::from_slice(body).map_err(|_| ListError::NotAModelList)?;
    let total = listing.data.len();
    let ids: Vec<String> = listing
        .data
        .into_iter()
        .map(|e| e.id)
        .filter(|id| !id.is_empty() && id.len() <= max_id_len)
        .take(max_ids)
        .collect();
    Ok(ModelList {
        truncated: ids.len() < total,
        ids,
    })
}

impl Client {
    /// The models `endpoint` lists, reading at most `max_bytes` of the answer before
    /// `deadline`. The key is sent if the endpoint has one; the operator's probe has none.
    pub async fn list_models(
        &self,
        endpoint: &Endpoint,
        max_bytes: usize,
        max_ids: usize,
        max_id_len: usize,
        deadline: Instant,
    ) -> Result<ModelList, ListError> {
        let (path, mut headers) = match endpoint.kind {
            ModelProvider::OpenAI => (OPENAI_MODELS_PATH, Vec::new()),
            ModelProvider::Anthropic => (
                ANTHROPIC_MODELS_PATH,
                vec![(
                    HeaderName::from_static("anthropic-version"),
                    HeaderValue::from_static(anthropic::VERSION),
                )],
            ),
        };
        if endpoint.key.is_some() {
            headers = crate::client::auth(endpoint).map_err(|_| ListError::Unreachable)?;
        }
        let response = self
            .transport()
            .get(endpoint, path, &headers, deadline)
            .await
            .map_err(|_| ListError::Unreachable)?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            return Err(ListError::Status(status));
        }
        let body = self
            .transport()
            .read_body(response, max_bytes, deadline)
            .await
            .map_err(|e| match e {
                ModelError::Provider { .. } => ListError::TooLarge,
                _ => ListError::Unreachable,
            })?;
        parse_model_list(&body, max_ids, max_id_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_are_read_within_bounds() {
        let list = |ids: &[&str], truncated| {
            Ok(ModelList {
                ids: ids.iter().map(|s| s.to_string()).collect(),
                truncated,
            })
        };
        #[rustfmt::skip]
        let cases: &[(&str, &[u8], Result<ModelList, ListError>)] = &[
            ("openai shape", br#"{"object":"list","data":[{"id":"tiny","object":"model"}]}"#, list(&["tiny"], false)),
            ("anthropic shape", br#"{"data":[{"type":"model","id":"claude"}],"has_more":false}"#, list(&["claude"], false)),
            ("empty", br#"{"data":[]}"#, list(&[], false)),
            ("cut at the count", br#"{"data":[{"id":"a"},{"id":"b"},{"id":"c"}]}"#, list(&["a", "b"], true)),
            ("long id left out", br#"{"data":[{"id":"a"},{"id":"0123456789abcdef"}]}"#, list(&["a"], true)),
            ("html", b"<html>internal</html>", Err(ListError::NotAModelList)),
            ("no data", br#"{"models":["a"]}"#, Err(ListError::NotAModelList)),
            ("id not a string", br#"{"data":[{"id":7}]}"#, Err(ListError::NotAModelList)),
        ];
        for (what, body, want) in cases {
            assert_eq!(&parse_model_list(body, 2, 10), want, "{what}");
        }
    }

    #[test]
    fn no_error_text_names_the_endpoint_or_its_answer() {
        for e in [
            ListError::Unreachable,
            ListError::Status(500),
            ListError::TooLarge,
            ListError::NotAModelList,
        ] {
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(
            ListError::Status(404).to_string(),
            "the endpoint answered HTTP 404"
        );
    }
}
