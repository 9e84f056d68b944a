//! Kubeconfig files: the admin's (client certificate) and a pod's (service-account token file).

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

/// A kubeconfig for `user` authenticating with a client certificate.
pub(crate) fn with_client_cert(
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    let user = json!({
        "client-certificate-data": STANDARD.encode(cert_pem),
        "client-key-data": STANDARD.encode(key_pem),
    });
    render(server, ca_pem, "admin", user)
}

/// A kubeconfig that reads its bearer token from `token_file`, so the node agent can refresh
/// the token without rewriting the kubeconfig (kube-rs and kubectl both re-read the file).
pub(crate) fn with_token_file(server: &str, ca_pem: &str, token_file: &Path) -> String {
    let user = json!({ "tokenFile": token_file.to_string_lossy() });
    render(server, ca_pem, "pod", user)
}

fn render(server: &str, ca_pem: &str, user_name: &str, user: serde_json::Value) -> String {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "ari-e2e",
            "cluster": {
                "server": server,
                "certificate-authority-data": STANDARD.encode(ca_pem),
            },
        }],
        "users": [{ "name": user_name, "user": user }],
        "contexts": [{
            "name": "ari-e2e",
            "context": { "cluster": "ari-e2e", "user": user_name, "namespace": "default" },
        }],
        "current-context": "ari-e2e",
    });
    // Serialising a JSON value to YAML cannot fail.
    serde_yaml::to_string(&doc).unwrap_or_default()
}
