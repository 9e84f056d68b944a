//! `ari worker`: the executor pod's main loop (configured by the environment the operator sets).

use clap::Args;

/// Serve an Agent's Tasks inside the cluster (what the executor Deployment runs).
///
/// Configuration comes from the environment: ARI_AGENT_NAME, POD_NAME, POD_NAMESPACE,
/// ARI_ATTESTATION_KEY (required); ARI_CONCURRENCY, ARI_METRICS_ADDR, ARI_REDIS_URL,
/// ARI_STATE_DIR, ARI_CACHE_DIR, ARI_HEARTBEAT_SECONDS (optional).
#[derive(Args)]
pub struct WorkerArgs {}

pub fn worker(_args: WorkerArgs) -> anyhow::Result<u8> {
    let config = crate::worker::WorkerConfig::from_env()?;
    tracing::info!(?config, "starting worker");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(crate::worker::run(config))?;
    Ok(0)
}
