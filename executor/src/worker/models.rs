//! The models this executor's Agent is granted, as the operator handed them over: their
//! ModelConfig specs in `ARI_MODELS` and each key in the variable the kubelet filled from the
//! marked Secret (see docs/models.md, "How the executor gets a model"). The executor reads no
//! ModelConfig and no Secret through the API.

use ari_crds::Provider;
use ari_crds::model_config::{ExecutorModel, MODELS_ENV, SchemaStyle};
use ari_llm::budget::{Estimator, OutputLimits};
use ari_llm::{ApiKey, Endpoint, Model, ModelProvider};

use super::ConfigError;

/// The granted models with their keys, read once at start. `Debug` shows names only.
#[derive(Clone, Default)]
pub struct GrantedModels {
    pub models: Vec<Model>,
    /// Models handed over whose key variable was empty or absent (the Secret lacks the key):
    /// not loaded, so their calls are `unavailable` rather than sent without a key.
    pub keyless: Vec<String>,
}

impl std::fmt::Debug for GrantedModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.models.iter().map(|m| &m.name))
            .finish()
    }
}

impl GrantedModels {
    /// Reads `ARI_MODELS` and the key variables it names through `get`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let Some(list) = get(MODELS_ENV) else {
            return Ok(Self::default());
        };
        let declared: Vec<ExecutorModel> =
            serde_json::from_str(&list).map_err(|e| ConfigError::Invalid {
                var: MODELS_ENV,
                // The list holds no key; the parser's message says where it went wrong.
                value: e.to_string(),
                want: "a JSON list of models, as the operator writes it",
            })?;
        let mut out = Self::default();
        for m in declared {
            let key = m.key_env.as_deref().and_then(get).map(ApiKey::new);
            if m.key_env.is_some() && key.is_none() {
                out.keyless.push(m.name.clone());
                continue;
            }
            out.models.push(model(&m, key)?);
        }
        Ok(out)
    }
}

/// One granted model as the model client takes it.
fn model(m: &ExecutorModel, key: Option<ApiKey>) -> Result<Model, ConfigError> {
    let url = url::Url::parse(&m.spec.endpoint).map_err(|_| ConfigError::Invalid {
        var: MODELS_ENV,
        value: format!("model {}: endpoint {:?}", m.name, m.spec.endpoint),
        want: "an http(s) URL",
    })?;
    let provider = match m.spec.provider {
        Provider::OpenAI => ModelProvider::OpenAI,
        Provider::Anthropic => ModelProvider::Anthropic,
    };
    let mut endpoint = Endpoint::new(provider, url, m.spec.model.clone());
    if let Some(style) = m.spec.schema_style {
        endpoint = endpoint.with_schema_style(match style {
            SchemaStyle::JsonSchema => ari_llm::SchemaStyle::JsonSchema,
            SchemaStyle::JsonObjectSchema => ari_llm::SchemaStyle::JsonObjectSchema,
        });
    }
    if let Some(key) = key {
        endpoint = endpoint.with_key(key);
    }
    let limits = m.spec.limits.clone().unwrap_or_default();
    let mut estimator = Estimator::default();
    if let Some(b) = limits.bytes_per_token {
        estimator.bytes_per_token = b.max(1);
    }
    Ok(Model {
        name: m.name.clone(),
        endpoint,
        output: OutputLimits {
            default_max_tokens: m.spec.defaults.as_ref().and_then(|d| d.max_tokens),
            max_output_tokens: limits.max_output_tokens,
        },
        estimator,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const KEY: &str = "sk-worker-test-0b7e";

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn list() -> String {
        serde_json::json!([
            {"name": "small", "keyEnv": "ARI_MODEL_KEY_0", "spec": {
                "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": "tiny",
                "credentials": {"name": "k", "key": "apiKey"},
                "schemaStyle": "JsonObjectSchema",
                "defaults": {"maxTokens": 64},
                "limits": {"maxOutputTokens": 128, "bytesPerToken": 3}
            }},
            {"name": "open", "spec": {
                "provider": "Anthropic", "endpoint": "https://a.example", "model": "claude"
            }}
        ])
        .to_string()
    }

    #[test]
    fn the_operators_list_becomes_models_with_their_limits_and_key() {
        let got =
            GrantedModels::from_lookup(&env(&[("ARI_MODELS", &list()), ("ARI_MODEL_KEY_0", KEY)]))
                .unwrap_or_else(|e| panic!("{e}"));
        let small = &got.models[0];
        assert_eq!(small.name, "small");
        assert_eq!(small.endpoint.model, "tiny");
        assert_eq!(small.endpoint.kind, ModelProvider::OpenAI);
        assert_eq!(
            small.endpoint.schema_style,
            ari_llm::SchemaStyle::JsonObjectSchema
        );
        assert!(small.endpoint.key.is_some());
        assert_eq!(small.output.default_max_tokens, Some(64));
        assert_eq!(small.output.max_output_tokens, Some(128));
        assert_eq!(small.estimator.bytes_per_token, 3);
        assert_eq!(got.models[1].endpoint.kind, ModelProvider::Anthropic);
        assert!(got.models[1].endpoint.key.is_none());
        assert!(got.keyless.is_empty());
        let shown = format!("{got:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert_eq!(shown, r#"["small", "open"]"#);
    }

    #[test]
    fn a_model_whose_key_the_secret_lacks_is_not_loaded_and_is_named() {
        let got = GrantedModels::from_lookup(&env(&[("ARI_MODELS", &list())]))
            .unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = got.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["open"]);
        assert_eq!(got.keyless, ["small"]);
    }

    #[test]
    fn no_list_is_no_models_and_a_broken_one_is_a_config_error() {
        let none = GrantedModels::from_lookup(&env(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert!(none.models.is_empty());
        assert!(GrantedModels::from_lookup(&env(&[("ARI_MODELS", "[{")])).is_err());
    }
}
