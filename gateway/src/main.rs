//! The `ari-gateway` binary: flags, logging, the Kubernetes client, then [`ari_gateway::run`].

use anyhow::Context as _;
use ari_gateway::config::Config;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg = Config::parse();
    cfg.init_tracing().context("log level")?;
    let client = kube::Client::try_default()
        .await
        .context("kubernetes client")?;
    ari_gateway::run(cfg, client).await?;
    Ok(())
}
