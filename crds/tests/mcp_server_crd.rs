//! The MCPServer CRD: the checked-in YAML is what the types generate, its names and columns
//! are what `kubectl get mcpservers` shows, and its schema bounds what a namespace user writes.

use ari_crds::MCPServer;
use kube::CustomResourceExt;
use serde_json::{Value, json};

fn checked_in() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ari.dev_mcpservers.yaml");
    std::fs::read_to_string(&path).unwrap_or_default()
}

fn spec_schema() -> Value {
    let crd = serde_json::to_value(MCPServer::crd()).unwrap_or_else(|e| panic!("{e}"));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

#[test]
fn mcp_servers_yaml_matches_the_types() {
    let want = ari_crds::mcp_server_crd_yaml().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        checked_in() == want,
        "CRD YAML drifted from the Rust types: run `cargo run -p ari-crds --bin crdgen`"
    );
}

#[test]
fn the_crd_has_a_short_name_columns_and_a_status_subresource() {
    let crd = MCPServer::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.plural, "mcpservers");
    assert_eq!(crd.spec.names.short_names, Some(vec!["mcps".to_owned()]));
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
    assert_eq!(cols, ["URL", "Tools", "Ready", "Age"]);
}

#[test]
fn the_schema_bounds_the_url_the_headers_and_the_timeout() {
    let spec = spec_schema();
    let p = &spec["properties"];
    assert_eq!(spec["required"], json!(["url"]));
    assert_eq!(p["url"]["pattern"], "^https?://");
    assert_eq!(p["url"]["maxLength"], 2048);
    assert_eq!(p["headers"]["maxItems"], 8);
    assert_eq!(
        p["headers"]["items"]["properties"]["name"]["pattern"],
        "^[A-Za-z0-9-]+$"
    );
    assert_eq!(p["callTimeoutSeconds"]["maximum"], 3600.0);
    assert_eq!(
        p["protocol"]["enum"],
        json!(["auto", "stateless", "session"])
    );
}

#[test]
fn a_server_declaration_reads_as_users_write_it() {
    let s: MCPServer = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "MCPServer",
        "metadata": {"name": "docs", "namespace": "n"},
        "spec": {
            "url": "https://tools.example/mcp",
            "protocol": "session",
            "token": {"name": "docs-token", "key": "token"},
            "headers": [{"name": "X-Tenant", "valueFrom": {"name": "docs-token", "key": "tenant"}}],
            "callTimeoutSeconds": 30
        }
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.spec.protocol, Some(ari_model::McpProtocol::Session));
    assert_eq!(s.spec.headers[0].value_from.key, "tenant");
}
