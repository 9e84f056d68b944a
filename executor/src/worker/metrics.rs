//! The executor's Prometheus metrics (served at `/metrics`).
//!
//! What a Task does is counted under its Agent (`namespace`, `agent` labels), in a dedicated
//! pod as in a pool pod, whose one process serves many Agents: each worker counts through its
//! [`AgentMetrics`]. The pod's own gauges (backlog, module cache, hosted and waiting Agents)
//! carry no label. Series are bounded by the Agents a pod holds a worker of: when the last
//! worker of an Agent is gone (a pool let it go, or it was deleted or moved, and its runs
//! ended) its series are removed, so a pool pod carries at most those of its hosted Agents
//! (about `hotModules` idle ones plus the busy ones), not of every Agent it ever served. An
//! Agent hosted again counts from zero, as a restarted pod does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use ari_crds::{TaskPhase, TaskReason};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The labels naming an Agent.
const AGENT: [&str; 2] = ["namespace", "agent"];

/// Counters of one executor process.
pub struct Metrics {
    registry: Registry,
    tasks: IntCounterVec,
    fuel: IntCounterVec,
    active: IntGaugeVec,
    claims_lost: IntCounterVec,
    delegations_refused: IntCounterVec,
    children_started: IntCounterVec,
    dropped: IntCounterVec,
    task_seconds: HistogramVec,
    live_log_writes: IntCounterVec,
    live_log_deferred: IntCounterVec,
    background_tasks: IntCounterVec,
    /// Model use, named after the OpenTelemetry GenAI client metrics (`gen_ai.client.*`):
    /// labelled by namespace, Agent and model (the ModelConfig's name, one of the Agent's
    /// grants, so the label set stays bounded). No label carries a key or a prompt.
    model_tokens: IntCounterVec,
    model_cached_tokens: IntCounterVec,
    model_operations: IntCounterVec,
    /// The Agents with a live [`AgentMetrics`]: how many, and the models each has counted
    /// (so its series can all be removed).
    agents: Mutex<HashMap<(String, String), Counted>>,
    pub undecodable: IntCounter,
    pub backlog: IntGauge,
    pub cache_hits: IntGauge,
    pub compiles: IntGauge,
    /// In a pool pod: Agents whose module is loaded now.
    pub hosted_agents: IntGauge,
    /// In a pool pod: Agents whose module would pass `hotModules`, waiting for room.
    pub pool_waiting_agents: IntGauge,
}

/// One Agent's entry in [`Metrics::agents`].
#[derive(Default)]
struct Counted {
    handles: usize,
    models: BTreeSet<String>,
}

/// A counter of Tasks per Agent, `name` and `help` as given.
fn per_agent(name: &str, help: &str) -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(Opts::new(name, help), &AGENT)
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let tasks = IntCounterVec::new(
            Opts::new(
                "ari_executor_tasks_total",
                "Tasks finished by this executor",
            ),
            &["namespace", "agent", "phase", "reason"],
        )?;
        let fuel = per_agent("ari_executor_fuel_consumed_total", "Fuel consumed by tasks")?;
        let active = IntGaugeVec::new(
            Opts::new("ari_executor_active_instances", "Tasks running right now"),
            &AGENT,
        )?;
        let claims_lost = per_agent(
            "ari_executor_claims_lost_total",
            "Claims lost to another executor (resourceVersion conflicts)",
        )?;
        let delegations_refused = per_agent(
            "ari_executor_delegations_refused_total",
            "Delegation calls refused by the grant or its depth and children limits",
        )?;
        let children_started = per_agent(
            "ari_executor_children_started_total",
            "Child Tasks created for delegating guests",
        )?;
        let dropped = per_agent(
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
        let task_seconds = HistogramVec::new(
            HistogramOpts::new(
                "ari_executor_task_duration_seconds",
                "Wall time of a task run",
            )
            .buckets(vec![
                0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
            ]),
            &AGENT,
        )?;
        let live_log_writes = per_agent(
            "ari_executor_live_log_writes_total",
            "status.liveLog writes for Tasks a gateway stream follows",
        )?;
        let live_log_deferred = per_agent(
            "ari_executor_live_log_deferred_total",
            "status.liveLog writes put off because the pod used its live-log write budget",
        )?;
        let background_tasks = per_agent(
            "ari_executor_background_tasks_total",
            "Tasks whose guest ran at background CPU priority: past its own CPU allowance or its Agent's",
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
        registry.register(Box::new(background_tasks.clone()))?;
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
            background_tasks,
            model_tokens,
            model_cached_tokens,
            model_operations,
            agents: Mutex::default(),
        })
    }

    /// The metrics of `agent`'s Tasks. Its series stay while a handle of it lives.
    pub fn agent(self: &Arc<Self>, namespace: &str, agent: &str) -> AgentMetrics {
        let who = [namespace, agent];
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .entry((namespace.to_owned(), agent.to_owned()))
            .or_default()
            .handles += 1;
        AgentMetrics {
            fuel: self.fuel.with_label_values(&who),
            active: self.active.with_label_values(&who),
            claims_lost: self.claims_lost.with_label_values(&who),
            delegations_refused: self.delegations_refused.with_label_values(&who),
            children_started: self.children_started.with_label_values(&who),
            dropped: self.dropped.with_label_values(&who),
            task_seconds: self.task_seconds.with_label_values(&who),
            live_log_writes: self.live_log_writes.with_label_values(&who),
            live_log_deferred: self.live_log_deferred.with_label_values(&who),
            background_tasks: self.background_tasks.with_label_values(&who),
            namespace: namespace.to_owned(),
            agent: agent.to_owned(),
            pod: self.clone(),
        }
    }

    /// Removes every series of `who` (namespace, agent); `models` are those it counted.
    fn remove(&self, who: [&str; 2], models: &BTreeSet<String>) {
        let [ns, agent] = who;
        // A series never created is simply not found.
        for vec in [
            &self.fuel,
            &self.claims_lost,
            &self.delegations_refused,
            &self.children_started,
            &self.dropped,
            &self.live_log_writes,
            &self.live_log_deferred,
            &self.background_tasks,
        ] {
            let _ = vec.remove_label_values(&who);
        }
        let _ = self.active.remove_label_values(&who);
        let _ = self.task_seconds.remove_label_values(&who);
        for phase in TaskPhase::ALL {
            for reason in TaskReason::ALL {
                let _ =
                    self.tasks
                        .remove_label_values(&[ns, agent, phase.as_str(), reason.as_str()]);
            }
        }
        for model in models {
            let m = model.as_str();
            let _ = self.model_operations.remove_label_values(&[ns, agent, m]);
            let _ = self
                .model_cached_tokens
                .remove_label_values(&[ns, agent, m]);
            for token_type in ["input", "output"] {
                let _ = self
                    .model_tokens
                    .remove_label_values(&[ns, agent, m, token_type]);
            }
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

/// One Agent's share of a pod's metrics: what its worker counts its Tasks with.
pub struct AgentMetrics {
    pub fuel: IntCounter,
    pub active: IntGauge,
    pub claims_lost: IntCounter,
    pub delegations_refused: IntCounter,
    pub children_started: IntCounter,
    pub dropped: IntCounter,
    pub task_seconds: Histogram,
    pub live_log_writes: IntCounter,
    pub live_log_deferred: IntCounter,
    pub background_tasks: IntCounter,
    namespace: String,
    agent: String,
    pod: Arc<Metrics>,
}

impl AgentMetrics {
    /// The pod's metrics (its own gauges, the Task feed's).
    pub fn pod(&self) -> &Metrics {
        &self.pod
    }

    /// One Task finished with `phase` and `reason`.
    pub fn count(&self, phase: TaskPhase, reason: TaskReason) {
        let labels = [
            self.namespace.as_str(),
            self.agent.as_str(),
            phase.as_str(),
            reason.as_str(),
        ];
        self.pod.tasks.with_label_values(&labels).inc();
    }

    /// Adds one task's model use (`TaskOutcome::models`, one entry per model it called).
    pub fn record_models(&self, models: &[ari_crds::ModelCalls]) {
        if models.is_empty() {
            return;
        }
        let (ns, agent, pod) = (self.namespace.as_str(), self.agent.as_str(), &self.pod);
        // Noted under the lock that removal takes, so no series outlives its Agent.
        let mut agents = pod.agents.lock().unwrap_or_else(|e| e.into_inner());
        let counted = agents
            .entry((self.namespace.clone(), self.agent.clone()))
            .or_default();
        for m in models {
            counted.models.insert(m.name.clone());
            let who = [ns, agent, m.name.as_str()];
            pod.model_operations
                .with_label_values(&who)
                .inc_by(m.usage.calls);
            for (token_type, n) in [
                ("input", m.usage.input_tokens),
                ("output", m.usage.output_tokens),
            ] {
                pod.model_tokens
                    .with_label_values(&[ns, agent, m.name.as_str(), token_type])
                    .inc_by(n);
            }
            pod.model_cached_tokens
                .with_label_values(&who)
                .inc_by(m.usage.cached_input_tokens);
        }
    }
}

impl Drop for AgentMetrics {
    /// The last handle of an Agent takes its series with it.
    fn drop(&mut self) {
        let mut agents = self.pod.agents.lock().unwrap_or_else(|e| e.into_inner());
        let key = (self.namespace.clone(), self.agent.clone());
        let Some(counted) = agents.get_mut(&key) else {
            return;
        };
        counted.handles = counted.handles.saturating_sub(1);
        if counted.handles == 0
            && let Some(counted) = agents.remove(&key)
        {
            self.pod
                .remove([&self.namespace, &self.agent], &counted.models);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_use_is_counted_by_namespace_agent_model_and_token_type() {
        let pod = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("{e}")));
        let m = pod.agent("team-a", "ask");
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
        m.record_models(std::slice::from_ref(&calls));
        m.record_models(&[calls]);
        let page = pod.render();
        for line in [
            r#"ari_gen_ai_client_token_usage_total{agent="ask",model="small",namespace="team-a",token_type="input"} 60"#,
            r#"ari_gen_ai_client_token_usage_total{agent="ask",model="small",namespace="team-a",token_type="output"} 14"#,
            r#"ari_gen_ai_client_cached_input_token_usage_total{agent="ask",model="small",namespace="team-a"} 8"#,
            r#"ari_gen_ai_client_operation_total{agent="ask",model="small",namespace="team-a"} 4"#,
        ] {
            assert!(page.contains(line), "missing {line} in\n{page}");
        }
    }

    #[test]
    fn two_agents_of_one_pod_are_counted_apart_and_a_let_go_agents_series_go_with_it() {
        let pod = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("{e}")));
        let (a, b) = (pod.agent("team-a", "ask"), pod.agent("team-a", "echo"));
        a.count(TaskPhase::Succeeded, TaskReason::Completed);
        a.count(TaskPhase::Succeeded, TaskReason::Completed);
        b.count(TaskPhase::Failed, TaskReason::Trap);
        a.fuel.inc_by(70);
        b.fuel.inc_by(5);
        b.task_seconds.observe(0.2);
        b.record_models(&[ari_crds::ModelCalls {
            name: "small".into(),
            endpoint: "http://m:8000/v1".into(),
            model: "tiny".into(),
            usage: ari_crds::TokenUsage {
                calls: 1,
                ..Default::default()
            },
            estimated_cost: None,
        }]);
        pod.pool_waiting_agents.set(3);
        let page = pod.render();
        for line in [
            r#"ari_executor_tasks_total{agent="ask",namespace="team-a",phase="Succeeded",reason="Completed"} 2"#,
            r#"ari_executor_tasks_total{agent="echo",namespace="team-a",phase="Failed",reason="Trap"} 1"#,
            r#"ari_executor_fuel_consumed_total{agent="ask",namespace="team-a"} 70"#,
            r#"ari_executor_fuel_consumed_total{agent="echo",namespace="team-a"} 5"#,
            r#"ari_executor_task_duration_seconds_count{agent="echo",namespace="team-a"} 1"#,
            r#"ari_gen_ai_client_operation_total{agent="echo",model="small",namespace="team-a"} 1"#,
            // The pool's own gauges name no Agent.
            "ari_executor_pool_waiting_agents 3",
        ] {
            assert!(page.contains(line), "missing {line} in\n{page}");
        }
        assert!(!page.contains(r#"agent="echo",namespace="team-a",phase="Succeeded""#));
        // A rebuilt worker's new handle keeps the series while the old one drains.
        let b_again = pod.agent("team-a", "echo");
        drop(b);
        assert!(
            pod.render().contains(r#"agent="echo""#),
            "series gone with a handle left"
        );
        // The pool lets go of echo: every series of it goes; ask's stay.
        drop(b_again);
        let page = pod.render();
        assert!(
            !page.contains(r#"agent="echo""#),
            "echo's series stayed:\n{page}"
        );
        assert!(page.contains(
            r#"ari_executor_tasks_total{agent="ask",namespace="team-a",phase="Succeeded",reason="Completed"} 2"#
        ));
        // Hosted again, it counts from zero.
        let b = pod.agent("team-a", "echo");
        b.count(TaskPhase::Succeeded, TaskReason::Completed);
        assert!(pod.render().contains(
            r#"ari_executor_tasks_total{agent="echo",namespace="team-a",phase="Succeeded",reason="Completed"} 1"#
        ));
        drop(a);
        assert!(!pod.render().contains(r#"agent="ask""#));
    }
}
