//! Flags of `ari-gateway`; each can also come from the environment (the chart sets those).

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// The A2A gateway: every Agent with `spec.a2a.exposed` over the Agent2Agent protocol.
#[derive(Parser, Debug, Clone)]
#[command(name = "ari-gateway", version)]
pub struct Config {
    /// Where the A2A endpoints listen.
    #[arg(long, env = "ARI_GATEWAY_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Where /healthz, /readyz and /metrics listen.
    #[arg(long, env = "ARI_GATEWAY_PROBE_LISTEN", default_value = "0.0.0.0:8081")]
    pub probe_listen: SocketAddr,
    /// Largest request body; larger ones get 413.
    #[arg(long, env = "ARI_GATEWAY_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Open streams over all callers.
    #[arg(long, env = "ARI_GATEWAY_MAX_STREAMS", default_value_t = 2000)]
    pub max_streams: usize,
    /// Open streams of one caller.
    #[arg(
        long,
        env = "ARI_GATEWAY_MAX_STREAMS_PER_CALLER",
        default_value_t = 100
    )]
    pub max_streams_per_caller: usize,
    /// Requests per second of one caller, sustained.
    #[arg(long, env = "ARI_GATEWAY_RATE_PER_SECOND", default_value_t = 50)]
    pub rate_per_second: u32,
    /// Requests one caller may send at once above the sustained rate.
    #[arg(long, env = "ARI_GATEWAY_RATE_BURST", default_value_t = 100)]
    pub rate_burst: u32,
    /// Base URL written into cards (e.g. https://agents.example.com); empty: cards name their
    /// endpoint by a relative URL (`/a2a/<namespace>/<agent>`), never by the request's Host.
    #[arg(long, env = "ARI_GATEWAY_PUBLIC_URL", default_value = "")]
    pub public_url: String,
    /// Audiences a caller's token must carry (comma-separated); TokenReview checks them. The
    /// API server's own audience is not accepted unless listed here.
    #[arg(
        long,
        env = "ARI_GATEWAY_AUDIENCES",
        default_value = "ari-gateway",
        value_delimiter = ','
    )]
    pub audiences: Vec<String>,
    /// Open connections on the A2A port; past it new ones wait to be accepted.
    #[arg(long, env = "ARI_GATEWAY_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Longest wait for a request's headers (also for the next request on an idle connection).
    #[arg(long, env = "ARI_GATEWAY_HEADER_TIMEOUT_SECONDS", default_value_t = 10)]
    pub header_timeout_seconds: u64,
    /// Longest wait for a request's body, read only after its token was accepted.
    #[arg(long, env = "ARI_GATEWAY_BODY_TIMEOUT_SECONDS", default_value_t = 10)]
    pub body_timeout_seconds: u64,
    /// Longest a write may wait for the client to read (a stream not read is closed).
    #[arg(long, env = "ARI_GATEWAY_WRITE_TIMEOUT_SECONDS", default_value_t = 30)]
    pub write_timeout_seconds: u64,
    /// Serve only this namespace's Agents; empty: all.
    #[arg(long, env = "ARI_WATCH_NAMESPACE", default_value = "")]
    pub watch_namespace: String,
    /// Longest a blocking `SendMessage` waits for the task to end before answering with it
    /// as it is.
    #[arg(long, env = "ARI_GATEWAY_BLOCKING_SECONDS", default_value_t = 300)]
    pub blocking_seconds: u64,
    #[arg(long, env = "ARI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Log filter in RUST_LOG syntax (default: RUST_LOG, else "info,kube=warn").
    #[arg(long, env = "ARI_LOG_LEVEL")]
    pub log_level: Option<String>,
}

impl Config {
    /// Installs the global subscriber; a filter that does not parse is an error.
    pub fn init_tracing(&self) -> Result<(), tracing_subscriber::filter::ParseError> {
        let filter = self
            .log_level
            .clone()
            .or_else(|| std::env::var("RUST_LOG").ok())
            .unwrap_or_else(|| "info,kube=warn".into());
        let fmt = tracing_subscriber::fmt().with_env_filter(EnvFilter::try_new(filter)?);
        match self.log_format {
            LogFormat::Json => fmt.json().init(),
            LogFormat::Text => fmt.init(),
        }
        Ok(())
    }

    /// The audiences to review tokens for, blanks dropped.
    pub fn audiences(&self) -> Vec<String> {
        self.audiences
            .iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect()
    }

    pub fn namespace(&self) -> Option<String> {
        Some(self.watch_namespace.trim().to_owned()).filter(|n| !n.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bound_every_caller() {
        let c = Config::parse_from(["ari-gateway"]);
        assert_eq!(c.max_body_bytes, 1 << 20);
        assert_eq!(c.max_streams, 2000);
        assert_eq!(c.rate_per_second, 50);
        assert_eq!(c.namespace(), None);
        assert_eq!(c.audiences(), ["ari-gateway"]);
        assert_eq!(c.max_connections, 1024);
        assert_eq!(
            (
                c.header_timeout_seconds,
                c.body_timeout_seconds,
                c.write_timeout_seconds
            ),
            (10, 10, 30)
        );
        let two = Config::parse_from(["ari-gateway", "--audiences", "a, b,"]);
        assert_eq!(two.audiences(), ["a", "b"]);
    }
}
