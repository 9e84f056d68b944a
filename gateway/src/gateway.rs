//! The gateway's shared state: the API client, the watch hub, auth, limits and metrics.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use crate::auth::Auth;
use crate::config::Config;
use crate::hub::Hub;
use crate::limits::Limits;
use crate::metrics::Metrics;

pub struct Gateway {
    pub client: Client,
    pub hub: Arc<Hub>,
    pub auth: Auth,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    /// Base URL for cards; empty: cards carry relative URLs.
    pub public_url: String,
    /// Longest a blocking `SendMessage` waits.
    pub blocking: Duration,
    /// Largest request body, and the longest wait for it.
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
}

impl Gateway {
    pub fn new(cfg: &Config, client: Client, hub: Arc<Hub>, metrics: Arc<Metrics>) -> Self {
        Self {
            auth: Auth::new(client.clone(), cfg.audiences()),
            client,
            hub,
            limits: Limits::new(
                cfg.rate_per_second,
                cfg.rate_burst,
                cfg.max_streams,
                cfg.max_streams_per_caller,
            ),
            metrics,
            public_url: cfg.public_url.trim_end_matches('/').to_owned(),
            blocking: Duration::from_secs(cfg.blocking_seconds.max(1)),
            max_body_bytes: cfg.max_body_bytes,
            body_timeout: Duration::from_secs(cfg.body_timeout_seconds.max(1)),
        }
    }
}
