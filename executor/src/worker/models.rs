//! The models this executor's Agent is granted, as the operator handed them over: their
//! ModelConfig specs in `ARI_MODELS` and each key in the variable the kubelet filled from the
//! marked Secret (see docs/models.md, "How the executor gets a model"). The executor reads no
//! ModelConfig and no Secret through the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use ari_crds::GrantSet;
use ari_crds::model_config::{ExecutorModel, MODELS_ENV, ModelConfigSpec};
use ari_llm::budget::{Estimator, OutputLimits};
use ari_llm::rate::{RateLimiter, RateLimits};
use ari_llm::{ApiKey, Endpoint, Model};
use ari_runtime::model::price::DEFAULT_CURRENCY;

use super::ConfigError;
use super::model_shares::{ModelShares, Shared};

/// The granted models with their keys, read once at start. `Debug` shows names only.
#[derive(Clone, Default)]
pub struct GrantedModels {
    pub models: Vec<Model>,
    /// Models handed over whose key variable was empty or absent (the Secret lacks the key):
    /// not loaded, so their calls are `unavailable` rather than sent without a key.
    pub keyless: Vec<String>,
    /// Each model's `requestsPerMinute` and `tokensPerMinute` as declared, by name: the
    /// limiters are built once the Agent's replicas are known ([`GrantedModels::limited`]).
    pub rate_limits: BTreeMap<String, RateLimits>,
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
            out.rate_limits
                .insert(m.name.clone(), declared_limits(&m.spec));
            let model = from_spec(&m.name, &m.spec, key).map_err(|e| ConfigError::Invalid {
                var: MODELS_ENV,
                value: e.to_string(),
                want: "a ModelConfig spec as the API server admits it",
            })?;
            out.models.push(model);
        }
        Ok(out)
    }

    /// Those of these models `grants` names: what a pool pod, which holds its Agents' models
    /// together, hands one hosted Agent. A model only another Agent of the pool is granted is
    /// not in it, so no call of this Agent's can reach it (the runtime checks the grant too).
    pub fn granted_to(&self, grants: &GrantSet) -> Self {
        let allows = |name: &str| grants.models.as_ref().is_some_and(|g| g.allows(name));
        Self {
            models: self
                .models
                .iter()
                .filter(|m| allows(&m.name))
                .cloned()
                .collect(),
            keyless: self.keyless.iter().filter(|n| allows(n)).cloned().collect(),
            rate_limits: self
                .rate_limits
                .iter()
                .filter(|(n, _)| allows(n))
                .map(|(n, l)| (n.clone(), *l))
                .collect(),
        }
    }

    /// The models, each with this process's rate limiter, and those limiters to follow: each
    /// starts with its ModelConfig's limits shared out among the Agent's own `replicas`
    /// executor pods ([`pod_share`]) and is reshared once the namespace's Agents granted the
    /// model are known ([`ModelShares::follow`]). Called once per process: every task's calls
    /// go through the same limiters.
    pub fn limited(&self, replicas: u32) -> (Vec<Model>, ModelShares) {
        let mut shares = ModelShares::default();
        let models = self
            .models
            .iter()
            .map(|m| {
                let declared = self.rate_limits.get(&m.name).copied().unwrap_or_default();
                let rate = RateLimiter::new(pod_share(declared, replicas)).map(Arc::new);
                if let Some(limiter) = &rate {
                    shares.shared.push(Shared {
                        model: m.name.clone(),
                        declared,
                        limiter: limiter.clone(),
                    });
                }
                Model { rate, ..m.clone() }
            })
            .collect();
        (models, shares)
    }
}

/// One executor pod's part of a ModelConfig's per-minute limits: each divided evenly among
/// the `pods` that share it, rounded down but at least 1, so that they together stay within
/// the limit. Exact coordination across pods would need a shared store; this needs none (see
/// docs/models.md, "Rate limits").
pub fn pod_share(limits: RateLimits, pods: u32) -> RateLimits {
    let share = |n: u64| (n / u64::from(pods.max(1))).max(1);
    RateLimits {
        requests_per_minute: limits.requests_per_minute.map(share),
        tokens_per_minute: limits.tokens_per_minute.map(share),
    }
}

/// A ModelConfig spec the API server's schema would refuse, met where none checked it (an
/// `ari run --model-config` file).
#[derive(Debug, thiserror::Error)]
pub enum ModelSpecError {
    #[error("model {0}: endpoint {1:?} is not an http(s) URL")]
    Endpoint(String, String),
    #[error("model {0}: {1}")]
    Prices(String, String),
}

/// A ModelConfig's per-minute limits as declared, before they are shared out.
pub fn declared_limits(spec: &ModelConfigSpec) -> RateLimits {
    let limits = spec.limits.clone().unwrap_or_default();
    RateLimits {
        requests_per_minute: limits.requests_per_minute.map(u64::from),
        tokens_per_minute: limits.tokens_per_minute,
    }
}

/// The model the ModelConfig `name` declares, as the model client takes it (its rate limiter
/// is added by whoever knows how many processes share the limits).
pub fn from_spec(
    name: &str,
    spec: &ModelConfigSpec,
    key: Option<ApiKey>,
) -> Result<Model, ModelSpecError> {
    let url = url::Url::parse(&spec.endpoint)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| ModelSpecError::Endpoint(name.to_owned(), spec.endpoint.clone()))?;
    let mut endpoint = Endpoint::new(spec.provider, url, spec.model.clone());
    if let Some(style) = spec.schema_style {
        endpoint = endpoint.with_schema_style(style);
    }
    if let Some(key) = key {
        endpoint = endpoint.with_key(key);
    }
    let limits = spec.limits.clone().unwrap_or_default();
    let mut estimator = Estimator::default();
    if let Some(b) = limits.bytes_per_token {
        estimator.bytes_per_token = b.max(1);
    }
    let prices = spec.prices.as_ref().map(|p| ari_runtime::model::Prices {
        currency: p
            .currency
            .clone()
            .unwrap_or_else(|| DEFAULT_CURRENCY.to_owned()),
        input_per_million: p.input_per_million.clone(),
        cached_input_per_million: p.cached_input_per_million.clone(),
        output_per_million: p.output_per_million.clone(),
    });
    if let Some(p) = &prices {
        p.check()
            .map_err(|e| ModelSpecError::Prices(name.to_owned(), e.to_string()))?;
    }
    let defaults = spec.defaults.clone().unwrap_or_default();
    Ok(Model {
        output: OutputLimits {
            default_max_tokens: defaults.max_tokens,
            max_output_tokens: limits.max_output_tokens,
        },
        estimator,
        // The WIT's temperature is a 32-bit float: the default is sent as one.
        default_temperature: defaults.temperature.map(|t| t as f32),
        prices,
        ..Model::new(name, endpoint)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use ari_llm::ModelProvider;

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
                "defaults": {"maxTokens": 64, "temperature": 0.7},
                "limits": {"maxOutputTokens": 128, "bytesPerToken": 3,
                           "requestsPerMinute": 100, "tokensPerMinute": 90000},
                "prices": {"currency": "EUR", "inputPerMillion": "0.15",
                           "outputPerMillion": "0.6"}
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
        assert_eq!(small.default_temperature, Some(0.7));
        let prices = small.prices.as_ref().expect("prices");
        assert_eq!(prices.currency, "EUR");
        assert_eq!(prices.input_per_million.as_deref(), Some("0.15"));
        assert_eq!(
            got.rate_limits.get("small"),
            Some(&RateLimits {
                requests_per_minute: Some(100),
                tokens_per_minute: Some(90_000),
            })
        );
        let (limited, shares) = got.limited(3);
        assert_eq!(shares.shared.len(), 1, "only the limited model is followed");
        assert!(limited[0].rate.is_some(), "limited");
        assert!(limited[1].rate.is_none(), "no limits, no limiter");
        assert_eq!(got.models[1].default_temperature, None);
        assert_eq!(got.models[1].prices, None);
        assert_eq!(got.models[1].endpoint.kind, ModelProvider::Anthropic);
        assert!(got.models[1].endpoint.key.is_none());
        assert!(got.keyless.is_empty());
        let shown = format!("{got:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert_eq!(shown, r#"["small", "open"]"#);
    }

    #[test]
    fn a_pooled_agent_is_handed_only_the_models_its_own_spec_grants() {
        let pod = GrantedModels::from_lookup(&env(&[("ARI_MODELS", &list())]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pod.keyless, ["small"]);
        let grants = |v: serde_json::Value| -> GrantSet {
            serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
        };
        let open_only = pod.granted_to(&grants(
            serde_json::json!({"models": {"allowed": ["open"]}}),
        ));
        let names: Vec<_> = open_only.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["open"]);
        assert!(
            open_only.keyless.is_empty(),
            "another Agent's model is not even named"
        );
        let small_only = pod.granted_to(&grants(
            serde_json::json!({"models": {"allowed": ["small"]}}),
        ));
        assert!(small_only.models.is_empty());
        assert_eq!(small_only.keyless, ["small"]);
        let none = pod.granted_to(&grants(serde_json::json!({})));
        assert!(none.models.is_empty() && none.keyless.is_empty() && none.rate_limits.is_empty());
    }

    #[test]
    fn each_pod_gets_an_even_share_of_the_limits_rounded_down_and_at_least_one() {
        let declared = RateLimits {
            requests_per_minute: Some(100),
            tokens_per_minute: Some(90_001),
        };
        #[rustfmt::skip]
        let cases = [
            (1, Some(100), Some(90_001)),
            (3, Some(33), Some(30_000)),
            (0, Some(100), Some(90_001)), // no replicas is taken as one
            (1000, Some(1), Some(90)),
        ];
        for (replicas, rpm, tpm) in cases {
            let share = pod_share(declared, replicas);
            assert_eq!(
                (share.requests_per_minute, share.tokens_per_minute),
                (rpm, tpm),
                "{replicas} replicas"
            );
        }
        assert_eq!(
            pod_share(RateLimits::default(), 4),
            RateLimits::default(),
            "no limits stay none"
        );
    }

    #[test]
    fn a_malformed_price_is_a_config_error_naming_the_model() {
        let list = serde_json::json!([{"name": "m", "spec": {
            "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": "tiny",
            "prices": {"inputPerMillion": "1e3"}
        }}])
        .to_string();
        let Err(err) = GrantedModels::from_lookup(&env(&[("ARI_MODELS", &list)])) else {
            panic!("accepted");
        };
        assert!(err.to_string().contains("model m"), "{err}");
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
