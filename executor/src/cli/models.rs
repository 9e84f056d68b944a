//! `ari run`'s models: `--model NAME=URL` declares one, or `--model-config FILE` reads the
//! ModelConfig a cluster is given (defaults, limits and prices included); `--grant
//! models=NAME` grants it, and the key comes from a file or the environment, never from the
//! command line (where `ps` and shell history would show it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;

use super::flags::{CredentialFlags, credential, pairs};
use crate::worker::models::{declared_limits, from_spec};
use ari_crds::ModelConfig;
use ari_llm::rate::RateLimiter;
use ari_llm::{Client, Endpoint, Model, ModelProvider, RetryPolicy, SchemaStyle};
use ari_runtime::capability::LoadedModels;
use ari_runtime::limits::DEFAULT_TOKENS;
use serde::Deserialize;

#[derive(Args, Debug, Default)]
pub struct ModelArgs {
    /// A model the task may be granted (--grant models=NAME): NAME=URL, the API root of an
    /// OpenAI-compatible endpoint such as http://127.0.0.1:8080/v1 (repeatable).
    #[arg(long = "model", value_name = "NAME=URL")]
    models: Vec<String>,
    /// ModelConfig manifests (YAML or JSON, several documents allowed; the files a cluster is
    /// given): each declares the model its name says, with its defaults, rate limits (this
    /// process has them whole) and prices. Its credentials Secret is not read: give the key
    /// with --model-key-file or --model-key-env (repeatable).
    #[arg(long = "model-config", value_name = "PATH")]
    configs: Vec<PathBuf>,
    /// The provider's model id for NAME (default: NAME).
    #[arg(long = "model-id", value_name = "NAME=ID")]
    ids: Vec<String>,
    /// The wire format NAME speaks: openai (default) or anthropic.
    #[arg(long = "model-provider", value_name = "NAME=PROVIDER")]
    providers: Vec<String>,
    /// How NAME is sent a JSON-schema response format: json-schema (OpenAI's, the default) or
    /// json-object-schema (llama-cpp-python's server).
    #[arg(long = "model-schema-style", value_name = "NAME=STYLE")]
    schema_styles: Vec<String>,
    /// NAME's API key, read from this file.
    #[arg(long = "model-key-file", value_name = "NAME=PATH")]
    key_files: Vec<String>,
    /// NAME's API key, read from this environment variable.
    #[arg(long = "model-key-env", value_name = "NAME=VAR")]
    key_envs: Vec<String>,
    /// Token budget of the task's model calls (input and output tokens together).
    #[arg(long, default_value_t = DEFAULT_TOKENS)]
    pub tokens: u64,
}

impl ModelArgs {
    /// The declared models, with their keys, and a client to call them.
    pub fn load(&self) -> anyhow::Result<LoadedModels> {
        let ids = pairs("--model-id", &self.ids)?;
        let providers = pairs("--model-provider", &self.providers)?;
        let key_files = pairs("--model-key-file", &self.key_files)?;
        let key_envs = pairs("--model-key-env", &self.key_envs)?;
        let styles = pairs("--model-schema-style", &self.schema_styles)?;
        let mut models = Vec::new();
        for (name, url) in pairs("--model", &self.models)? {
            let url = url::Url::parse(&url).with_context(|| format!("--model {name}: bad URL"))?;
            let provider = match providers.get(&name).map(String::as_str) {
                None | Some("openai") => ModelProvider::OpenAI,
                Some("anthropic") => ModelProvider::Anthropic,
                Some(other) => bail!("--model-provider {name}: unknown provider {other:?}"),
            };
            let id = ids.get(&name).cloned().unwrap_or_else(|| name.clone());
            let mut endpoint = Endpoint::new(provider, url, id);
            match styles.get(&name).map(String::as_str) {
                None | Some("json-schema") => {}
                Some("json-object-schema") => {
                    endpoint = endpoint.with_schema_style(SchemaStyle::JsonObjectSchema);
                }
                Some(other) => bail!("--model-schema-style {name}: unknown style {other:?}"),
            }
            if let Some(key) =
                credential(&KEY_FLAGS, &name, key_files.get(&name), key_envs.get(&name))?
            {
                endpoint = endpoint.with_key(key);
            }
            models.push(Model::new(name, endpoint));
        }
        for path in &self.configs {
            for mc in model_configs(path)? {
                let name = mc.metadata.name.clone().unwrap_or_default();
                if models.iter().any(|m| m.name == name) {
                    bail!("model {name:?} is declared twice");
                }
                if let Some(flag) = [
                    ("--model-id", &ids),
                    ("--model-provider", &providers),
                    ("--model-schema-style", &styles),
                ]
                .into_iter()
                .find_map(|(flag, given)| given.contains_key(&name).then_some(flag))
                {
                    bail!("{flag} {name}: {} declares it", path.display());
                }
                let key = credential(&KEY_FLAGS, &name, key_files.get(&name), key_envs.get(&name))?;
                if mc.spec.credentials.is_some() && key.is_none() {
                    bail!(
                        "model {name:?} names credentials: give its key with --model-key-file \
                         {name}=PATH or --model-key-env {name}=VAR"
                    );
                }
                let mut model = from_spec(&name, &mc.spec, key)?;
                model.rate = RateLimiter::new(declared_limits(&mc.spec)).map(Arc::new);
                models.push(model);
            }
        }
        for flag_names in [&ids, &providers, &key_files, &key_envs, &styles] {
            if let Some(name) = flag_names
                .keys()
                .find(|n| !models.iter().any(|m| &m.name == *n))
            {
                bail!("model {name:?} is not declared with --model {name}=URL");
            }
        }
        let client = Client::new(ari_llm::Limits::default(), RetryPolicy::default())
            .map_err(|e| anyhow::anyhow!("cannot build the model client: {e}"))?;
        Ok(LoadedModels::live(client, models))
    }
}

/// The ModelConfigs in a manifest file, each with a name; documents of other kinds (the
/// Secret and Agent beside them) are skipped, and a file with none is refused.
fn model_configs(path: &Path) -> anyhow::Result<Vec<ModelConfig>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--model-config: cannot read {shown}"))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc)
            .with_context(|| format!("--model-config {shown}: not YAML"))?;
        if value.is_null() {
            continue;
        }
        if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("ModelConfig") {
            continue;
        }
        let mc: ModelConfig = serde_yaml::from_value(value)
            .with_context(|| format!("--model-config {shown}: not a ModelConfig"))?;
        if mc.metadata.name.as_deref().is_none_or(str::is_empty) {
            bail!("--model-config {shown}: a ModelConfig without metadata.name");
        }
        out.push(mc);
    }
    if out.is_empty() {
        bail!("--model-config {shown}: holds no ModelConfig");
    }
    Ok(out)
}

/// How `--model-key-file` and `--model-key-env` name a model's key.
const KEY_FLAGS: CredentialFlags<'static> = CredentialFlags {
    owner: "model",
    noun: "key",
    flag: "--model-key",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_for_an_undeclared_model_is_refused() {
        let args = ModelArgs {
            ids: vec!["tiny=llama".into()],
            ..Default::default()
        };
        let err = args.load().expect_err("undeclared");
        assert!(err.to_string().contains("not declared"), "{err}");
    }

    const MANIFEST: &str = "apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: small
spec:
  provider: OpenAI
  endpoint: http://127.0.0.1:9/v1
  model: llama-3.2-1b
  credentials: {name: llm-key, key: apiKey}
  defaults: {temperature: 0.5, maxTokens: 64}
  limits: {requestsPerMinute: 30, tokensPerMinute: 9000, maxOutputTokens: 128}
  prices: {currency: EUR, inputPerMillion: \"0.15\", outputPerMillion: \"0.60\"}
---
apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: open
spec:
  provider: Anthropic
  endpoint: https://api.anthropic.com
  model: claude
";

    fn manifest(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("models.yaml");
        std::fs::write(&path, text).expect("written");
        path
    }

    #[test]
    fn a_model_config_file_declares_its_models_with_defaults_limits_and_prices() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("key");
        std::fs::write(&key, "sk-file-key").expect("written");
        let args = ModelArgs {
            configs: vec![manifest(&dir, MANIFEST)],
            key_files: vec![format!("small={}", key.display())],
            ..Default::default()
        };
        let models = args.load().expect("loads");
        let small = models.get("small").expect("declared");
        assert_eq!(small.endpoint.model, "llama-3.2-1b");
        assert!(small.endpoint.key.is_some());
        assert_eq!(small.default_temperature, Some(0.5));
        assert_eq!(small.output.default_max_tokens, Some(64));
        assert_eq!(small.output.max_output_tokens, Some(128));
        let prices = small.prices.as_ref().expect("prices");
        assert_eq!(prices.currency, "EUR");
        let rate = small.rate.as_ref().expect("rate limited, the whole limit");
        let now = tokio::time::Instant::now();
        let quick = std::time::Duration::from_millis(1);
        assert!((0..30).all(|_| rate.reserve(now, 0, quick).is_ok()));
        assert!(
            rate.reserve(now, 0, quick).is_err(),
            "31st request in a minute"
        );
        let open = models.get("open").expect("declared");
        assert_eq!(open.endpoint.kind, ModelProvider::Anthropic);
        assert!(open.rate.is_none() && open.prices.is_none());
    }

    #[test]
    fn a_model_config_file_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases = [
            (MANIFEST.to_owned(), vec![], "names credentials"),
            (
                MANIFEST.replace("kind: ModelConfig", "kind: Agent"),
                vec!["small=SOME_VAR".to_owned()],
                "holds no ModelConfig",
            ),
            (
                MANIFEST.replace("name: open", "name: small"),
                vec![],
                "declared twice",
            ),
            (
                MANIFEST.replace("http://127.0.0.1:9/v1", "ftp://x"),
                vec![],
                "not an http(s) URL",
            ),
        ];
        // SAFETY: this test alone reads this variable.
        unsafe { std::env::set_var("SOME_VAR", "sk") };
        for (text, key_envs, want) in cases {
            let mut args = ModelArgs {
                configs: vec![manifest(&dir, &text)],
                key_envs: key_envs.clone(),
                ..Default::default()
            };
            if key_envs.is_empty() && want != "names credentials" {
                args.key_envs = vec!["small=SOME_VAR".to_owned()];
            }
            let err = format!("{:#}", args.load().expect_err(want));
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn a_key_comes_from_its_variable_and_never_prints() {
        // SAFETY: this test alone reads this variable.
        unsafe { std::env::set_var("ARI_TEST_MODEL_KEY", "sk-secret-value\n") };
        let args = ModelArgs {
            models: vec!["tiny=http://127.0.0.1:9/v1".into()],
            key_envs: vec!["tiny=ARI_TEST_MODEL_KEY".into()],
            ..Default::default()
        };
        let models = args.load().expect("loads");
        let model = models.get("tiny").expect("declared");
        assert_eq!(model.endpoint.model, "tiny");
        assert!(model.endpoint.key.is_some());
        assert!(!format!("{models:?}").contains("sk-secret-value"));
    }
}
