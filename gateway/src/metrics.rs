//! The gateway's Prometheus metrics.

use prometheus::{Encoder, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

pub struct Metrics {
    registry: Registry,
    /// JSON-RPC calls by method and outcome (`ok` or an error label).
    pub calls: IntCounterVec,
    /// Refusals before a method ran (auth, rate, streams, unknown agent), by label.
    pub refused: IntCounterVec,
    /// Tasks created from messages.
    pub tasks_created: IntCounterVec,
    /// Decisions about waiting calls written for A2A callers.
    pub decisions: IntCounterVec,
    /// Streams open now.
    pub streams_open: IntGauge,
    /// Agents or Tasks skipped because they do not decode.
    pub decode_skipped: IntCounterVec,
    /// Connections open now on the A2A port.
    pub connections_open: IntGauge,
    /// Tasks followed now by streams and waits.
    pub followed: IntGauge,
    /// Exposed Agents cached now.
    pub agents_cached: IntGauge,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "ari_gateway_calls_total",
                "A2A JSON-RPC calls by method and outcome",
            ),
            &["method", "outcome"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "ari_gateway_refused_total",
                "Requests refused before a method ran, by reason",
            ),
            &["reason"],
        )?;
        let tasks_created = IntCounterVec::new(
            Opts::new(
                "ari_gateway_tasks_created_total",
                "Tasks created from A2A messages",
            ),
            &["namespace"],
        )?;
        let decisions = IntCounterVec::new(
            Opts::new(
                "ari_gateway_decisions_total",
                "Decisions about calls waiting for approval, written for A2A callers",
            ),
            &["namespace"],
        )?;
        let streams_open = IntGauge::new("ari_gateway_streams_open", "SSE streams open now")?;
        let decode_skipped = IntCounterVec::new(
            Opts::new(
                "ari_gateway_decode_skipped_total",
                "Objects skipped because they do not decode",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(tasks_created.clone()))?;
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(streams_open.clone()))?;
        registry.register(Box::new(decode_skipped.clone()))?;
        let connections_open = IntGauge::new(
            "ari_gateway_connections_open",
            "Connections open now on the A2A port",
        )?;
        let followed = IntGauge::new(
            "ari_gateway_followed_tasks",
            "Tasks followed now by streams and waits",
        )?;
        let agents_cached =
            IntGauge::new("ari_gateway_agents_cached", "Exposed Agents cached now")?;
        registry.register(Box::new(connections_open.clone()))?;
        registry.register(Box::new(followed.clone()))?;
        registry.register(Box::new(agents_cached.clone()))?;
        // process_resident_memory_bytes and friends: what open streams cost.
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Self {
            registry,
            calls,
            refused,
            tasks_created,
            decisions,
            streams_open,
            decode_skipped,
            connections_open,
            followed,
            agents_cached,
        })
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
