//! `ari run`'s models: `--model NAME=URL` declares one (as a ModelConfig does in a cluster),
//! `--grant models=NAME` grants it, and the key comes from a file or the environment, never
//! from the command line (where `ps` and shell history would show it).

use anyhow::{Context, bail};
use clap::Args;

use super::flags::{CredentialFlags, credential, pairs};
use ari_llm::{Client, Endpoint, Model, ModelProvider, RetryPolicy, SchemaStyle};
use ari_runtime::capability::LoadedModels;
use ari_runtime::limits::DEFAULT_TOKENS;

#[derive(Args, Debug, Default)]
pub struct ModelArgs {
    /// A model the task may be granted (--grant models=NAME): NAME=URL, the API root of an
    /// OpenAI-compatible endpoint such as http://127.0.0.1:8080/v1 (repeatable).
    #[arg(long = "model", value_name = "NAME=URL")]
    models: Vec<String>,
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
