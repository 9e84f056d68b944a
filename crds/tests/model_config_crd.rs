//! The ModelConfig CRD: the checked-in YAML is what the types generate, its names and columns
//! are what `kubectl get modelconfigs` shows, its schema refuses what the executor could not
//! use, and its CEL rule holds.

use ari_crds::ModelConfig;
use kube::CustomResourceExt;
use serde_json::{Value, json};

fn checked_in() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ari.dev_modelconfigs.yaml");
    std::fs::read_to_string(&path).unwrap_or_default()
}

fn model_config(spec: Value) -> ModelConfig {
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfig",
        "metadata": {"name": "m", "namespace": "n"}, "spec": spec
    }))
    .unwrap_or_else(|e| panic!("model config JSON: {e}"))
}

fn errors(m: &ModelConfig) -> String {
    match m.validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn model_configs_yaml_matches_the_types() {
    let want = ari_crds::model_config_crd_yaml().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        checked_in() == want,
        "CRD YAML drifted from the Rust types: run `cargo run -p ari-crds --bin crdgen`"
    );
}

#[test]
fn the_crd_has_a_short_name_columns_and_a_status_subresource() {
    let crd = ModelConfig::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["mc".to_owned()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["ari".to_owned()]));
    let v = &crd.spec.versions[0];
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Provider", "Model", "Ready", "Age"]);
}

#[test]
fn a_full_spec_round_trips_and_passes_its_rule() {
    let spec = json!({
        "provider": "OpenAI",
        "endpoint": "http://vllm.models.svc:8000/v1",
        "model": "qwen",
        "credentials": {"name": "vllm-key", "key": "apiKey"},
        "schemaStyle": "JsonObjectSchema",
        "defaults": {"maxTokens": 512, "temperature": 0.2},
        "limits": {"maxOutputTokens": 4096, "requestsPerMinute": 60,
                   "tokensPerMinute": 100000, "bytesPerToken": 1},
        "prices": {"currency": "USD", "inputPerMillion": "0.15", "outputPerMillion": "0.60"},
    });
    let m = model_config(spec.clone());
    assert_eq!(serde_json::to_value(&m.spec).expect("json"), spec);
    assert_eq!(errors(&m), "");
}

#[test]
fn schema_style_is_refused_for_anthropic() {
    let m = model_config(json!({
        "provider": "Anthropic", "endpoint": "https://api.anthropic.com", "model": "claude",
        "schemaStyle": "JsonSchema",
    }));
    assert!(
        errors(&m).contains("OpenAI wire format only"),
        "{}",
        errors(&m)
    );
    let plain = model_config(json!({
        "provider": "Anthropic", "endpoint": "https://api.anthropic.com", "model": "claude",
    }));
    assert_eq!(errors(&plain), "");
}

/// The schema's own checks, as the API server applies them: patterns, lengths and bounds.
#[test]
fn the_schema_refuses_what_the_executor_could_not_use() {
    let crd: Value = serde_yaml::from_str(&checked_in()).expect("CRD parses");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let props = &spec["properties"];
    assert_eq!(
        spec["required"],
        json!(["endpoint", "model", "provider"]),
        "{spec}"
    );
    assert_eq!(props["provider"]["enum"], json!(["OpenAI", "Anthropic"]));
    let matches = |schema: &Value, v: &str| {
        let re = regex::Regex::new(schema["pattern"].as_str().expect("pattern")).expect("regex");
        re.is_match(v)
            && schema["maxLength"]
                .as_u64()
                .is_none_or(|m| v.len() as u64 <= m)
    };
    let endpoint = &props["endpoint"];
    for good in ["https://api.openai.com/v1", "http://10.0.0.1:8000/v1"] {
        assert!(matches(endpoint, good), "{good}");
    }
    for bad in [
        "api.openai.com",
        "file:///etc/passwd",
        "https://a b",
        "https://user:key@api.openai.com/v1",
        "",
    ] {
        assert!(!matches(endpoint, bad), "{bad}");
    }
    let price = &props["prices"]["properties"]["inputPerMillion"];
    for good in ["0", "2.50", "0.000000001"] {
        assert!(matches(price, good), "{good}");
    }
    for bad in ["-1", "1e3", "1.", "NaN", "1234567890"] {
        assert!(!matches(price, bad), "{bad}");
    }
    let temperature = &props["defaults"]["properties"]["temperature"];
    assert_eq!(
        (
            temperature["minimum"].as_f64(),
            temperature["maximum"].as_f64()
        ),
        (Some(0.0), Some(2.0))
    );
    let bytes = &props["limits"]["properties"]["bytesPerToken"];
    assert_eq!(
        (bytes["minimum"].as_f64(), bytes["maximum"].as_f64()),
        (Some(1.0), Some(8.0))
    );
}
