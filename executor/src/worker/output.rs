//! A finished Task's output, wherever its status put it: inline, base64, or in its output
//! ConfigMap. Read for a parent awaiting a child and for the history of a conversation.

use ari_crds::TaskStatus;
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

/// The output `status` records (empty when it records none), or why it cannot be read.
pub(super) async fn read(
    configmaps: &Api<ConfigMap>,
    status: &TaskStatus,
) -> Result<Vec<u8>, String> {
    if let Some(text) = &status.output {
        return Ok(text.clone().into_bytes());
    }
    if let Some(b64) = &status.output_base64 {
        return base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("outputBase64 is not base64: {e}"));
    }
    let Some(r) = &status.output_ref else {
        return Ok(Vec::new());
    };
    let cm = configmaps
        .get(&r.config_map)
        .await
        .map_err(|e| format!("the output ConfigMap {}: {e}", r.config_map))?;
    cm.binary_data
        .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
        .or_else(|| {
            cm.data
                .and_then(|d| d.get(&r.key).map(|s| s.clone().into_bytes()))
        })
        .ok_or_else(|| format!("the output ConfigMap {} has no key {}", r.config_map, r.key))
}
