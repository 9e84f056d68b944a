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
    /// In a pool pod: Agents whose module is loaded now.
    pub hosted_agents: IntGauge,
    /// In a pool pod: Agents whose module would pass `hotModules`, waiting for room.
    pub pool_waiting_agents: IntGauge,
    pub task_seconds: Histogram,
    pub live_log_writes: IntCounter,
    pub live_log_deferred: IntCounter,
    /// Model use, named after the OpenTelemetry GenAI client metrics (`gen_ai.client.*`):
    /// labelled by namespace, Agent and model (the ModelConfig's name, one of the Agent's
    /// grants, so the label set stays bounded). No label carries a key or a prompt.
    pub model_tokens: IntCounterVec,
    pub model_cached_tokens: IntCounterVec,
    pub model_operations: IntCounterVec,
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
        let hosted_agents = IntGauge::new(
            "ari_executor_hosted_agents",
            "In a pool pod: Agents whose module is loaded now",
        )?;
        let pool_waiting_agents = IntGauge::new(
            "ari_executor_pool_waiting_agents",
            "In a pool pod: Agents whose module would pass hotModules, their Tasks waiting for room",
        )?;
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
        let model_tokens = IntCounterVec::new(
            Opts::new(
                "ari_gen_ai_client_token_usage_total",
                "Model tokens the provider reported, by gen_ai.token.type (input includes cached input)",
            ),
            &["namespace", "agent", "model", "token_type"],
        )?;
        let model_cached_tokens = IntCounterVec::new(
            Opts::new(
                "ari_gen_ai_client_cached_input_token_usage_total",
                "Input tokens the provider served from its prompt cache (part of token_type=input)",
            ),
            &["namespace", "agent", "model"],
        )?;
        let model_operations = IntCounterVec::new(
            Opts::new(
                "ari_gen_ai_client_operation_total",
                "Model calls made to the provider (answered or failed there)",
            ),
            &["namespace", "agent", "model"],
        )?;
        registry.register(Box::new(model_tokens.clone()))?;
        registry.register(Box::new(model_cached_tokens.clone()))?;
        registry.register(Box::new(model_operations.clone()))?;
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
        registry.register(Box::new(hosted_agents.clone()))?;
        registry.register(Box::new(pool_waiting_agents.clone()))?;
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
            hosted_agents,
            pool_waiting_agents,
            compiles,
            task_seconds,
            live_log_writes,
            live_log_deferred,
            model_tokens,
            model_cached_tokens,
            model_operations,
        })
    }

    /// Adds one task's model use (`TaskOutcome::models`, one entry per model it called).
    pub fn record_models(&self, namespace: &str, agent: &str, models: &[ari_crds::ModelCalls]) {
        for m in models {
            let who = [namespace, agent, m.name.as_str()];
            self.model_operations
                .with_label_values(&who)
                .inc_by(m.usage.calls);
            for (token_type, n) in [
                ("input", m.usage.input_tokens),
                ("output", m.usage.output_tokens),
            ] {
                self.model_tokens
                    .with_label_values(&[namespace, agent, m.name.as_str(), token_type])
                    .inc_by(n);
            }
            self.model_cached_tokens
                .with_label_values(&who)
                .inc_by(m.usage.cached_input_tokens);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding our own registered metrics cannot fail; an empty page is the fallback.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_use_is_counted_by_namespace_agent_model_and_token_type() {
        let m = Metrics::new().unwrap_or_else(|e| panic!("{e}"));
        let calls = ari_crds::ModelCalls {
            name: "small".into(),
            endpoint: "http://m:8000/v1".into(),
            model: "tiny".into(),
            usage: ari_crds::TokenUsage {
                calls: 2,
                input_tokens: 30,
                output_tokens: 7,
                cached_input_tokens: 4,
            },
            estimated_cost: None,
        };
        m.record_models("team-a", "ask", std::slice::from_ref(&calls));
        m.record_models("team-a", "ask", &[calls]);
        let page = m.render();
        for line in [
            r#"ari_gen_ai_client_token_usage_total{agent="ask",model="small",namespace="team-a",token_type="input"} 60"#,
            r#"ari_gen_ai_client_token_usage_total{agent="ask",model="small",namespace="team-a",token_type="output"} 14"#,
            r#"ari_gen_ai_client_cached_input_token_usage_total{agent="ask",model="small",namespace="team-a"} 8"#,
            r#"ari_gen_ai_client_operation_total{agent="ask",model="small",namespace="team-a"} 4"#,
        ] {
            assert!(page.contains(line), "missing {line} in\n{page}");
        }
    }
}
