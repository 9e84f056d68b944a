//! Where a model is served and with which credentials.

use serde::{Deserialize, Serialize};
use url::Url;

/// A provider's API key: the workspace's one credential type (`ari_model::Secret`), which never
/// prints and is cut out of every message a provider sends back.
pub use ari_model::secret::{REDACTED, Secret as ApiKey};

/// The wire format a provider speaks: the model crate's, as ModelConfigs and attestations
/// name it.
pub use ari_model::ModelProvider;

/// How a response schema is sent over the OpenAI wire format: the model crate's, as
/// ModelConfigs name it.
pub use ari_model::SchemaStyle;

/// One model at one endpoint: what a ModelConfig resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub kind: ModelProvider,
    /// For [`ModelProvider::OpenAI`]: how a response schema is sent.
    pub schema_style: SchemaStyle,
    /// The API root: `https://api.openai.com/v1` (paths `chat/completions`, `embeddings` are
    /// joined to it) or `https://api.anthropic.com` (path `v1/messages`).
    pub base_url: Url,
    /// The provider's model id.
    pub model: String,
    pub key: Option<ApiKey>,
}

/// What a record says answered: the endpoint without its credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointId {
    pub kind: ModelProvider,
    pub base_url: String,
    pub model: String,
}

impl Endpoint {
    pub fn new(kind: ModelProvider, base_url: Url, model: impl Into<String>) -> Endpoint {
        Endpoint {
            kind,
            schema_style: SchemaStyle::default(),
            base_url,
            model: model.into(),
            key: None,
        }
    }

    pub fn with_schema_style(mut self, style: SchemaStyle) -> Endpoint {
        self.schema_style = style;
        self
    }

    pub fn with_key(mut self, key: ApiKey) -> Endpoint {
        self.key = Some(key);
        self
    }

    /// The endpoint as records and attestations name it: its URL without user or password
    /// (credentials written into a URL stay out of the trace too).
    pub fn id(&self) -> EndpointId {
        let mut url = self.base_url.clone();
        let _ = url.set_username("");
        let _ = url.set_password(None);
        EndpointId {
            kind: self.kind,
            base_url: url.to_string(),
            model: self.model.clone(),
        }
    }

    /// `path` under the API root, whether or not the root ends in `/`.
    pub(crate) fn url(&self, path: &str) -> Url {
        let mut base = self.base_url.clone();
        if !base.path().ends_with('/') {
            let with_slash = format!("{}/", base.path());
            base.set_path(&with_slash);
        }
        base.join(path).unwrap_or(base)
    }

    /// Cuts the key out of `text`.
    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) => key.redact(text),
            None => text.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-test-0123456789abcdef";

    #[test]
    fn a_key_never_prints_and_is_cut_from_messages() {
        let key = ApiKey::new(format!("{SECRET}\n"));
        assert_eq!(key.expose(), SECRET, "trimmed");
        for shown in [format!("{key:?}"), format!("{key}")] {
            assert!(!shown.contains(SECRET), "{shown}");
        }
        let endpoint = Endpoint::new(
            ModelProvider::OpenAI,
            Url::parse("http://127.0.0.1:1/v1").expect("url"),
            "m",
        )
        .with_key(key.clone());
        assert!(!format!("{endpoint:?}").contains(SECRET));
        assert_eq!(
            key.redact(&format!("Incorrect API key provided: {SECRET}.")),
            "Incorrect API key provided: [redacted]."
        );
        let id = serde_json::to_string(&endpoint.id()).expect("json");
        assert!(!id.contains(SECRET), "{id}");
    }

    #[test]
    fn credentials_in_the_url_stay_out_of_the_record() {
        let e = Endpoint::new(
            ModelProvider::OpenAI,
            Url::parse("https://user:hunter2@models.example/v1").expect("url"),
            "m",
        );
        assert_eq!(e.id().base_url, "https://models.example/v1");
    }

    #[test]
    fn paths_join_under_the_api_root() {
        for (base, want) in [
            ("http://h/v1", "http://h/v1/chat/completions"),
            ("http://h/v1/", "http://h/v1/chat/completions"),
            ("http://h", "http://h/chat/completions"),
        ] {
            let e = Endpoint::new(ModelProvider::OpenAI, Url::parse(base).expect("url"), "m");
            assert_eq!(e.url("chat/completions").as_str(), want, "{base}");
        }
    }
}
