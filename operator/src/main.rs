//! The ari operator binary: reads its flags, sets up logging and the Kubernetes client, and
//! hands over to [`ari_operator::run`].

use anyhow::Context as _;
use ari_operator::config::Config;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg = Config::parse();
    cfg.init_tracing().context("log level")?;
    let client = kube::Client::try_default()
        .await
        .context("kubernetes client")?;
    ari_operator::run(cfg, client).await?;
    Ok(())
}
