//! The Wasm OCI artifact layout of the CNCF TAG Runtime's Wasm working group, the one wasmtime,
//! wkg, Spin and wasmCloud read and write: an OCI image manifest whose config has media type
//! `application/vnd.wasm.config.v0+json` and whose one layer is the component itself, media
//! type `application/wasm`. Keeping to it means modules pushed by those tools run here, and
//! modules pushed here run there.

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::digest::is_sha256;

/// Media type of the config blob of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the one layer: the Wasm binary, uncompressed.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// `architecture` in the config.
pub const WASM_ARCHITECTURE: &str = "wasm";
/// `os` in the config for a component (WASI preview 2); modules (preview 1) say `wasip1`.
pub const COMPONENT_OS: &str = "wasip2";
/// `created` in configs pushed here: fixed, so the same bytes always push to the same manifest
/// digest (readers of the layout expect the field, so it is not left out).
pub const REPRODUCIBLE_CREATED: &str = "1970-01-01T00:00:00Z";

/// The config blob. Readers need `architecture`, `os` and `layerDigests`; the rest is optional
/// and kept out so pushes are reproducible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    pub created: String,
    pub architecture: String,
    pub os: String,
    /// The layers' digests in manifest order (the layout repeats them in the config).
    pub layer_digests: Vec<String>,
}

/// The config and layer that push `bytes` as a component.
pub(crate) fn artifact_for(bytes: Vec<u8>) -> Result<(Config, ImageLayer), Error> {
    let layer = ImageLayer::new(bytes, WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let config = WasmConfig {
        created: REPRODUCIBLE_CREATED.to_string(),
        architecture: WASM_ARCHITECTURE.to_string(),
        os: COMPONENT_OS.to_string(),
        layer_digests: vec![layer.sha256_digest()],
    };
    let data = serde_json::to_vec(&config)
        .map_err(|e| Error::Other(format!("encoding the Wasm config: {e}")))?;
    Ok((
        Config::new(data, WASM_CONFIG_MEDIA_TYPE.to_string(), None),
        layer,
    ))
}

/// The one Wasm layer a manifest describes, checked before anything is downloaded: the config
/// media type, exactly one layer, `application/wasm`, a sha256 digest and a sane size.
pub(crate) struct WasmLayer<'a> {
    pub descriptor: &'a OciDescriptor,
    pub size: u64,
}

pub(crate) fn wasm_layer_of(manifest: &OciImageManifest) -> Result<WasmLayer<'_>, Error> {
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(Error::NotAWasmArtifact(format!(
            "config media type is {:?}, not {WASM_CONFIG_MEDIA_TYPE:?}",
            manifest.config.media_type
        )));
    }
    let layer = match manifest.layers.as_slice() {
        [layer] => layer,
        layers => {
            return Err(Error::NotAWasmArtifact(format!(
                "{} layers, not exactly one {WASM_LAYER_MEDIA_TYPE:?} layer",
                layers.len()
            )));
        }
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(Error::NotAWasmArtifact(format!(
            "layer media type is {:?}, not {WASM_LAYER_MEDIA_TYPE:?}",
            layer.media_type
        )));
    }
    if !is_sha256(&layer.digest) {
        return Err(Error::NotAWasmArtifact(format!(
            "layer digest {:?} is not a sha256 digest",
            layer.digest
        )));
    }
    let size = u64::try_from(layer.size)
        .map_err(|_| Error::NotAWasmArtifact(format!("layer size {} is negative", layer.size)))?;
    Ok(WasmLayer {
        descriptor: layer,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::manifest::OciDescriptor;

    fn manifest(config_type: &str, layers: &[(&str, i64)]) -> OciImageManifest {
        let mut m = OciImageManifest::default();
        m.config.media_type = config_type.to_string();
        m.layers = layers
            .iter()
            .map(|(media_type, size)| OciDescriptor {
                media_type: media_type.to_string(),
                digest: crate::digest::sha256_digest(b"x"),
                size: *size,
                ..Default::default()
            })
            .collect();
        m
    }

    #[test]
    fn the_config_is_reproducible_and_names_the_layer() {
        let (config, layer) = artifact_for(b"\0asm".to_vec()).expect("builds");
        let (again, _) = artifact_for(b"\0asm".to_vec()).expect("builds");
        assert_eq!(config.data, again.data);
        assert_eq!(config.media_type, WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(layer.media_type, WASM_LAYER_MEDIA_TYPE);
        let parsed: WasmConfig = serde_json::from_slice(&config.data).expect("json");
        assert_eq!(parsed.architecture, "wasm");
        assert_eq!(parsed.os, "wasip2");
        assert_eq!(parsed.layer_digests, vec![layer.sha256_digest()]);
        let raw: serde_json::Value = serde_json::from_slice(&config.data).expect("json");
        assert!(raw.get("layerDigests").is_some(), "{raw}");
    }

    #[test]
    fn one_wasm_layer_under_the_wasm_config_is_accepted() {
        let m = manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 7)]);
        let layer = wasm_layer_of(&m)
            .map_err(|e| e.to_string())
            .expect("accepted");
        assert_eq!(layer.size, 7);
        assert_eq!(layer.descriptor.digest, crate::digest::sha256_digest(b"x"));
    }

    #[test]
    fn anything_else_is_not_a_wasm_artifact() {
        let image_config = "application/vnd.oci.image.config.v1+json";
        let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
        for m in [
            manifest(image_config, &[(WASM_LAYER_MEDIA_TYPE, 1)]),
            manifest(WASM_CONFIG_MEDIA_TYPE, &[(tar, 1)]),
            manifest(WASM_CONFIG_MEDIA_TYPE, &[]),
            manifest(
                WASM_CONFIG_MEDIA_TYPE,
                &[(WASM_LAYER_MEDIA_TYPE, 1), (WASM_LAYER_MEDIA_TYPE, 1)],
            ),
            manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, -1)]),
        ] {
            let err = wasm_layer_of(&m).err().map(|e| e.reason());
            assert_eq!(err, Some("NotAWasmArtifact"));
        }
    }
}
