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
    return_large_frees_to_the_os();
    let config = crate::worker::WorkerConfig::from_env()?;
    tracing::info!(?config, "starting worker");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(crate::worker::run(config))?;
    Ok(0)
}

/// Serves every allocation of 256 KiB or more from its own mapping, given back when freed.
///
/// A guest may hand the host a string as large as its memory limit (a log line, a tool's
/// arguments); the host copies it while lifting. glibc's default raises its mmap threshold to
/// the largest block freed so far, after which such copies come from per-thread arenas that keep
/// the freed pages: a worker that served 100 Tasks logging 8 MiB lines stayed 65 MiB above its
/// baseline for good (e2e `hostile`). A fixed threshold turns that adjustment off.
fn return_large_frees_to_the_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const THRESHOLD: libc::c_int = 256 * 1024;
        // SAFETY: mallopt only changes allocator tuning; called before the worker's threads.
        let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
        if ok == 0 {
            tracing::warn!("mallopt(M_MMAP_THRESHOLD) refused; large frees may stay resident");
        }
    }
}
