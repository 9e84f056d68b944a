//! `ari push`: publish a component to an OCI registry in the CNCF Wasm layout.

use std::path::PathBuf;

use anyhow::Context;
use ari_oci::{Client, ClientOptions, Credentials, Reference};
use clap::Args;

/// Push a component to a registry as a Wasm OCI artifact and print the pinned reference
/// (`REF@sha256:...`) to put in an Agent's `spec.module.image`.
///
/// Plain HTTP is used only for registries on 127.0.0.1, localhost or [::1]; every other
/// registry is HTTPS.
#[derive(Args)]
pub struct PushArgs {
    /// The component (`.wasm`, built for wasm32-wasip2).
    file: PathBuf,
    /// Where to push it: `registry/repository:tag`.
    reference: String,
    /// A docker config (`~/.docker/config.json` or a pull secret's `.dockerconfigjson`) holding
    /// credentials for the registry. Without it the push is anonymous.
    #[arg(long, env = "ARI_DOCKER_CONFIG")]
    docker_config: Option<PathBuf>,
}

pub fn push(args: PushArgs) -> anyhow::Result<u8> {
    let reference = Reference::parse(&args.reference)?;
    let bytes = super::read_module(&args.file)?;
    let (client, credentials) = registry_client(&reference, args.docker_config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let digest = runtime.block_on(client.push(&reference, bytes, &credentials))?;
    println!("{reference}@{digest}");
    Ok(0)
}

/// A client for `reference`'s registry (plain HTTP only for one on this machine) and the
/// credentials of `docker_config` for it (anonymous without one). `kubectl ari verify` pulls
/// with the same.
pub(crate) fn registry_client(
    reference: &Reference,
    docker_config: Option<&std::path::Path>,
) -> anyhow::Result<(Client, Credentials)> {
    let credentials = match docker_config {
        Some(path) => {
            let json = std::fs::read(path)
                .with_context(|| format!("cannot read docker config {}", path.display()))?;
            Credentials::from_docker_config_json(&json, reference.registry())?
        }
        None => Credentials::anonymous(),
    };
    let insecure_registries = if is_loopback(reference.registry()) {
        vec![reference.registry().to_owned()]
    } else {
        Vec::new()
    };
    let client = Client::new(ClientOptions {
        insecure_registries,
        ..ClientOptions::default()
    })?;
    Ok((client, credentials))
}

/// Whether `registry` (`host[:port]`) is this machine: the only registries worth plain HTTP.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => registry.split(':').next().unwrap_or(registry),
    };
    matches!(
        host.to_ascii_lowercase().as_str(),
        "127.0.0.1" | "localhost" | "::1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_gets_plain_http() {
        for local in [
            "127.0.0.1:5000",
            "localhost:5000",
            "LOCALHOST",
            "[::1]:5000",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for remote in [
            "ghcr.io",
            "127.0.0.1.nip.io:5000",
            "localhost.example.com",
            "10.0.0.1:5000",
            "[::2]:5000",
        ] {
            assert!(!is_loopback(remote), "{remote}");
        }
    }
}
