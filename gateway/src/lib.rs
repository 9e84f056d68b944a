//! The A2A gateway of ari: every Agent with `spec.a2a.exposed` reachable over the
//! Agent2Agent protocol (v1.0, JSON-RPC binding), each message a Task, each Task's progress a
//! stream of canonical events.

pub mod a2a;
pub mod auth;
/// The card is built where the operator, which signs it, builds it too.
pub use ari_crds::card;
pub mod config;
pub mod conversation;
pub mod convert;
pub mod decision;
pub mod error;
pub mod events;
pub mod gateway;
pub mod hub;
pub mod legacy;
pub mod limits;
pub mod livelog;
pub mod mcp;
pub mod methods;
pub mod metrics;
pub mod routes;
pub mod rpc;
pub mod serve;
pub mod stream;

use std::sync::Arc;

use std::time::Duration;

use kube::Client;
use tracing::info;

use crate::config::Config;
use crate::gateway::Gateway;
use crate::hub::Hub;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("listening: {0}")]
    Listen(#[from] std::io::Error),
}

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(cfg: Config, client: Client) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new()?);
    let hub = Arc::new(Hub::new());
    let watches = tokio::spawn(hub.clone().run(
        client.clone(),
        cfg.namespace(),
        metrics.decode_skipped.clone(),
    ));
    let gw = Arc::new(Gateway::new(&cfg, client, hub, metrics.clone()));
    let a2a = serve::bind(cfg.listen)?;
    let probes = tokio::net::TcpListener::bind(cfg.probe_listen).await?;
    info!(listen = %cfg.listen, probes = %cfg.probe_listen, "A2A gateway serving");
    let limits = serve::ConnLimits {
        max_connections: cfg.max_connections,
        header_timeout: Duration::from_secs(cfg.header_timeout_seconds.max(1)),
        write_timeout: Duration::from_secs(cfg.write_timeout_seconds.max(1)),
    };
    let a2a = serve::serve(
        a2a,
        routes::router(gw.clone()),
        limits,
        metrics.connections_open.clone(),
        shutdown(),
    );
    let probes = axum::serve(probes, routes::probe_router(gw)).with_graceful_shutdown(shutdown());
    let (_, p) = tokio::join!(a2a, probes.into_future());
    watches.abort();
    p?;
    Ok(())
}

/// Resolves on SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
