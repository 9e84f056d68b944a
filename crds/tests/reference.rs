//! `docs/reference.md`, every field of Agent, Task, Plan, ModelConfig and ExecutorPool, rendered from the
//! CRDs the types generate (their openAPIV3Schema: types, bounds, defaults, enums, CEL rules,
//! descriptions). The test fails when the page differs from what the types say;
//! `ARI_BLESS=1 cargo test -p ari-crds --test reference` rewrites it.

use std::fmt::Write as _;
use std::path::Path;

use ari_crds::{Agent, ExecutorPool, ModelConfig, Plan, Task};
use kube::CustomResourceExt;
use serde_json::Value;

const HEADER: &str = "\
# API reference: `ari.dev/v1alpha1`

Every field of five of the custom resources, generated from their CRD schemas (which the Rust
types in `crds/src/` generate) by `crds/tests/reference.rs`. A test fails when this page and
the types differ; regenerate with `ARI_BLESS=1 cargo test -p ari-crds --test reference`.
Rules marked *CEL* are checked by the API server on every write; `kubectl explain agent.spec`
shows the same descriptions.
";

/// Markdown-safe table cell text.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// "string, 1–253 chars, pattern `…`" and the like.
fn type_of(s: &Value) -> String {
    let mut parts = Vec::new();
    let base = if s["x-kubernetes-int-or-string"] == true {
        "int or string".to_owned()
    } else if s["x-kubernetes-preserve-unknown-fields"] == true {
        "any".to_owned()
    } else {
        match s["type"].as_str() {
            Some("array") => format!("array of {}", type_of(&s["items"])),
            Some("object") if s.get("additionalProperties").is_some() => {
                format!("map of {}", type_of(&s["additionalProperties"]))
            }
            Some(t) => t.to_owned(),
            None => "any".to_owned(),
        }
    };
    parts.push(match s["format"].as_str() {
        Some(f) => format!("{base} ({f})"),
        None => base,
    });
    match (s.get("minimum"), s.get("maximum")) {
        (Some(lo), Some(hi)) => parts.push(format!("{}–{}", num(lo), num(hi))),
        (Some(lo), None) => parts.push(format!("≥ {}", num(lo))),
        (None, Some(hi)) => parts.push(format!("≤ {}", num(hi))),
        (None, None) => {}
    }
    match (s.get("minLength"), s.get("maxLength")) {
        (Some(lo), Some(hi)) => parts.push(format!("{}–{} chars", num(lo), num(hi))),
        (Some(lo), None) => parts.push(format!("≥ {} chars", num(lo))),
        (None, Some(hi)) => parts.push(format!("≤ {} chars", num(hi))),
        (None, None) => {}
    }
    if let Some(n) = s.get("maxItems") {
        parts.push(format!("≤ {} items", num(n)));
    }
    if let Some(p) = s["pattern"].as_str() {
        parts.push(format!("pattern `{p}`"));
    }
    if let Some(e) = s["enum"].as_array() {
        let vals: Vec<String> = e
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                )
            })
            .collect();
        parts.push(format!("one of {}", vals.join(", ")));
    }
    parts.join(", ")
}

/// One table row per field, depth first in schema (alphabetical) order.
fn rows(path: &str, schema: &Value, required: bool, out: &mut Vec<[String; 3]>) {
    let mut ty = type_of(schema);
    if required {
        ty = format!("**required** {ty}");
    }
    if let Some(d) = schema.get("default") {
        ty.push_str(&format!(", default `{d}`"));
    }
    let mut desc = schema["description"].as_str().unwrap_or("").to_owned();
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let msg = rule["message"].as_str().unwrap_or("");
        let r = rule["rule"].as_str().unwrap_or("");
        desc.push_str(&format!(" *CEL:* {msg} (`{r}`)."));
    }
    out.push([format!("`{path}`"), cell(&ty), cell(&desc)]);
    children(path, schema, out);
}

fn children(path: &str, schema: &Value, out: &mut Vec<[String; 3]>) {
    let req: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let p = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            rows(&p, sub, req.contains(&name.as_str()), out);
        }
    }
    let items = &schema["items"];
    if items["properties"].is_object() {
        children(&format!("{path}[]"), items, out);
    }
    let values = &schema["additionalProperties"];
    if values["properties"].is_object() {
        children(&format!("{path}.<key>"), values, out);
    }
}

fn section(crd: &Value) -> String {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or("?");
    let version = &spec["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut s = String::new();
    let _ = writeln!(s, "\n## {kind}\n");
    let _ = writeln!(s, "{}\n", schema["description"].as_str().unwrap_or(""));
    let short: Vec<String> = names["shortNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(|n| format!("`{n}`")))
        .collect();
    let _ = writeln!(
        s,
        "- `apiVersion: {}/{}`, `kind: {kind}`, {} (`kubectl get {}`; short name {})",
        spec["group"].as_str().unwrap_or("?"),
        version["name"].as_str().unwrap_or("?"),
        spec["scope"].as_str().unwrap_or("?").to_lowercase(),
        names["plural"].as_str().unwrap_or("?"),
        short.join(", "),
    );
    if version["subresources"]["status"].is_object() {
        let _ = writeln!(
            s,
            "- `status` is a subresource: written by the operator and executors, never by users"
        );
    }
    let cols: Vec<String> = version["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} (`{}`)",
                c["name"].as_str().unwrap_or("?"),
                c["jsonPath"].as_str().unwrap_or("?")
            )
        })
        .collect();
    if !cols.is_empty() {
        let _ = writeln!(s, "- `kubectl get` columns: {}", cols.join(", "));
    }
    let selectable: Vec<String> = version["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["jsonPath"].as_str().map(|p| format!("`{p}`")))
        .collect();
    if !selectable.is_empty() {
        let _ = writeln!(
            s,
            "- field selectors (`kubectl get --field-selector`, watches): {}",
            selectable.join(", ")
        );
    }
    for part in ["spec", "status"] {
        let Some(sub) = schema["properties"].get(part) else {
            continue;
        };
        let _ = writeln!(s, "\n### {kind} `{part}`\n");
        let mut table = Vec::new();
        let required = schema["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == part));
        rows(part, sub, required, &mut table);
        let _ = writeln!(s, "| Field | Type | Description |\n|---|---|---|");
        for [f, t, d] in table {
            let _ = writeln!(s, "| {f} | {t} | {d} |");
        }
    }
    s
}

fn render() -> String {
    let mut doc = HEADER.to_owned();
    for crd in [
        Agent::crd(),
        Task::crd(),
        Plan::crd(),
        ModelConfig::crd(),
        ExecutorPool::crd(),
    ] {
        let v = serde_json::to_value(&crd).expect("CRD as JSON");
        doc.push_str(&section(&v));
    }
    doc
}

#[test]
fn reference_md_is_what_the_types_generate() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.md");
    let want = render();
    if std::env::var_os("ARI_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write docs/reference.md");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/reference.md differs from the CRD schemas: run `ARI_BLESS=1 cargo test -p ari-crds --test reference`"
    );
}

#[test]
fn reference_lists_every_leaf_field_of_the_schemas() {
    let doc = render();
    // Fields the design names, spot-checked so a renderer bug that drops a subtree fails.
    for field in [
        "`spec.module.configMap.name`",
        "`spec.module.sha256`",
        "`spec.capabilities.network.allowedHosts`",
        "`spec.capabilities.signing.secretRef.key`",
        "`spec.limits.fuel`",
        "`spec.executor.tolerations`",
        "`status.conditions[].reason`",
        "`status.attestationPublicKey`",
        "`spec.agentRef.name`",
        "`spec.inputFrom.secretKeyRef.key`",
        "`status.resourcesUsed.wallMillis`",
        "`status.attestation.signatures[].sig`",
        "`status.limitsApplied`",
        "`spec.steps[].inputFrom[].field`",
        "`status.violations[].rule`",
    ] {
        assert!(doc.contains(field), "reference lacks {field}");
    }
    assert!(doc.contains("*CEL:*"), "CEL rules are missing");
    assert!(
        doc.contains("`.spec.agentRef.name`"),
        "selectable field missing"
    );
    assert!(!doc.contains("| `spec` | any"), "spec type not resolved");
}
