//! Operator settings from flags and environment.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// The ari operator: Agent and Task controllers.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
pub struct Config {
    /// Executor image used when an Agent does not override `spec.executor.image`.
    #[arg(long, env = "ARI_EXECUTOR_IMAGE", default_value = concat!("ari-executor:", env!("CARGO_PKG_VERSION")))]
    pub executor_image: String,
    /// Redis URL for agent storage; without it storage is embedded and an Agent with storage
    /// runs one replica.
    #[arg(long, env = "ARI_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, env = "ARI_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "ARI_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Namespace of the leader-election Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, env = "ARI_LEASE_NAME", default_value = "ari-operator")]
    pub lease_name: String,
    /// Identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// A Running Task whose heartbeat is older than this is treated as lost.
    #[arg(long, env = "ARI_HEARTBEAT_TIMEOUT_SECONDS", default_value_t = 30)]
    pub heartbeat_timeout_seconds: u64,
    /// How long a Task may wait for its Agent to appear before it is rejected.
    #[arg(long, env = "ARI_AGENT_GRACE_SECONDS", default_value_t = 5)]
    pub agent_grace_seconds: u64,
}

/// What the controllers need from the configuration (cheap to build in tests).
#[derive(Debug, Clone)]
pub struct Settings {
    pub executor_image: String,
    pub redis_url: Option<String>,
    pub heartbeat_timeout: Duration,
    pub agent_grace: Duration,
}

impl Config {
    pub fn settings(&self) -> Settings {
        Settings {
            executor_image: self.executor_image.clone(),
            redis_url: self.redis_url.clone(),
            heartbeat_timeout: Duration::from_secs(self.heartbeat_timeout_seconds),
            agent_grace: Duration::from_secs(self.agent_grace_seconds),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            executor_image: concat!("ari-executor:", env!("CARGO_PKG_VERSION")).to_owned(),
            redis_url: None,
            heartbeat_timeout: Duration::from_secs(30),
            agent_grace: Duration::from_secs(5),
        }
    }
}
