//! The executor's Prometheus metrics (served at `/metrics`).

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Counters of one executor process.
pub struct Metrics {
    registry: Registry,
    pub tasks: IntCounterVec,
    pub fuel: IntCounter,
    pub active: IntGauge,
    pub claims_lost: IntCounter,
    pub delegations_refused: IntCounter,
    pub children_started: IntCounter,
    pub dropped: IntCounter,
    pub undecodable: IntCounter,
    pub backlog: IntGauge,
    pub cache_hits: IntGauge,
    pub compiles: IntGauge,
    pub task_seconds: Histogram,
    pub live_log_writes: IntCounter,
    pub live_log_deferred: IntCounter,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let tasks = IntCounterVec::new(
            Opts::new(
                "ari_executor_tasks_total",
                "Tasks finished by this executor",
            ),
            &["phase", "reason"],
        )?;
        let fuel = IntCounter::new("ari_executor_fuel_consumed_total", "Fuel consumed by tasks")?;
        let active = IntGauge::new("ari_executor_active_instances", "Tasks running right now")?;
        let claims_lost = IntCounter::new(
            "ari_executor_claims_lost_total",
            "Claims lost to another executor (resourceVersion conflicts)",
        )?;
        let delegations_refused = IntCounter::new(
            "ari_executor_delegations_refused_total",
            "Delegation calls refused by the grant or its depth and children limits",
        )?;
        let children_started = IntCounter::new(
            "ari_executor_children_started_total",
            "Child Tasks created for delegating guests",
        )?;
        let dropped = IntCounter::new(
            "ari_executor_results_dropped_total",
            "Runs whose Task was no longer this executor's (failed, re-queued or deleted meanwhile)",
        )?;
        let undecodable = IntCounter::new(
            "ari_executor_tasks_undecodable_total",
            "Task watch events skipped because the Task could not be decoded",
        )?;
        let backlog = IntGauge::new(
            "ari_executor_backlog",
            "Claimable tasks this executor knows of and has not tried yet",
        )?;
        let cache_hits = IntGauge::new(
            "ari_executor_module_cache_hits",
            "Modules loaded from the precompiled artifact cache",
        )?;
        let compiles = IntGauge::new("ari_executor_module_compiles", "Modules compiled")?;
        let task_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "ari_executor_task_duration_seconds",
                "Wall time of a task run",
            )
            .buckets(vec![
                0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
            ]),
        )?;
        let live_log_writes = IntCounter::new(
            "ari_executor_live_log_writes_total",
            "status.liveLog writes for Tasks a gateway stream follows",
        )?;
        let live_log_deferred = IntCounter::new(
            "ari_executor_live_log_deferred_total",
            "status.liveLog writes put off because the pod used its live-log write budget",
        )?;
        registry.register(Box::new(live_log_writes.clone()))?;
        registry.register(Box::new(live_log_deferred.clone()))?;
        registry.register(Box::new(tasks.clone()))?;
        registry.register(Box::new(fuel.clone()))?;
        registry.register(Box::new(active.clone()))?;
        registry.register(Box::new(claims_lost.clone()))?;
        registry.register(Box::new(dropped.clone()))?;
        registry.register(Box::new(delegations_refused.clone()))?;
        registry.register(Box::new(children_started.clone()))?;
        registry.register(Box::new(undecodable.clone()))?;
        registry.register(Box::new(backlog.clone()))?;
        registry.register(Box::new(cache_hits.clone()))?;
        registry.register(Box::new(compiles.clone()))?;
        registry.register(Box::new(task_seconds.clone()))?;
        Ok(Self {
            registry,
            tasks,
            fuel,
            active,
            claims_lost,
            delegations_refused,
            children_started,
            dropped,
            undecodable,
            backlog,
            cache_hits,
            compiles,
            task_seconds,
            live_log_writes,
            live_log_deferred,
        })
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding our own registered metrics cannot fail; an empty page is the fallback.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
