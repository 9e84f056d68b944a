//! A ModelConfig's `requestsPerMinute` and `tokensPerMinute` are the namespace's: every
//! executor pod of every Agent granted the model enforces an even share of them
//! ([`pod_share`](super::models::pod_share)), so all of them together stay within the limit.
//!
//! The pods are counted from the namespace's Agents (their declared replicas, under the same
//! single-writer rule for storage as the operator's), which an executor may already watch. Each
//! pod follows that watch and reshares its limiters in place when the count changes: a new
//! Agent granted the model slows the others down without restarting a pod. Until the first
//! listing, a pod enforces its own Agent's share (see docs/models.md, "Rate limits").
//!
//! A pool pod holds one limiter per model for all its Agents, as a dedicated pod does for its
//! one: the Agents of a pool granted a model count the pool's pods once between them (the pods
//! the operator reports in their `status.replicas`), and a pool pod is Ready only once it has
//! its first listing.

use std::collections::BTreeMap;
use std::sync::Arc;

use ari_crds::Agent;
use ari_llm::rate::{RateLimiter, RateLimits};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use super::models::pod_share;

/// One rate-limited model of this pod: its limits as declared and the limiter every task of
/// the pod goes through.
pub struct Shared {
    pub model: String,
    pub declared: RateLimits,
    pub limiter: Arc<RateLimiter>,
}

/// The rate-limited models of this pod, whose shares follow the namespace's Agents.
#[derive(Default)]
pub struct ModelShares {
    pub shared: Vec<Shared>,
}

/// What an Agent counts for: the executor pods it runs, the pool they are when pooled, and
/// which of this pod's rate-limited models it is granted (only those, so the map stays small
/// however many Agents there are).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Granting {
    models: Vec<String>,
    pods: u32,
    pool: Option<String>,
}

/// An Agent's executor pods: its `replicas`, or one when storage without Redis holds it to a
/// single writer (the operator's rule; the Redis URL is the same for every Agent). A pooled
/// Agent runs in its pool's pods, which the operator reports in its `status.replicas`.
pub fn executor_pods(agent: &Agent, redis: bool) -> u32 {
    if agent.spec.executor.pool.is_some() {
        let pool_pods = agent.status.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        return u32::try_from(pool_pods).unwrap_or(1).max(1);
    }
    if agent.spec.capabilities.storage.is_some() && !redis {
        return 1;
    }
    u32::try_from(agent.spec.replicas()).unwrap_or(1).max(1)
}

/// The executor pods of the namespace granted `model`, at least one (this pod's): each
/// dedicated Agent's own, and each pool's once however many of its Agents are granted it
/// (they share its pods' limiters).
fn pods_granted(agents: &BTreeMap<String, Granting>, model: &str) -> u32 {
    let mut pools: BTreeMap<&str, u32> = BTreeMap::new();
    let mut dedicated = 0u32;
    for g in agents
        .values()
        .filter(|g| g.models.iter().any(|m| m == model))
    {
        match &g.pool {
            Some(pool) => {
                let pods = pools.entry(pool).or_default();
                *pods = (*pods).max(g.pods);
            }
            None => dedicated = dedicated.saturating_add(g.pods),
        }
    }
    pools
        .values()
        .fold(dedicated, |n, p| n.saturating_add(*p))
        .max(1)
}

impl ModelShares {
    /// What `agent` counts for here, if it is granted any of these models.
    fn granting(&self, agent: &Agent, redis: bool) -> Option<Granting> {
        let grant = agent.spec.capabilities.models.as_ref()?;
        let models: Vec<String> = self
            .shared
            .iter()
            .filter(|s| grant.allows(&s.model))
            .map(|s| s.model.clone())
            .collect();
        (!models.is_empty()).then(|| Granting {
            models,
            pods: executor_pods(agent, redis),
            pool: agent.spec.executor.pool.clone(),
        })
    }

    /// Reshares each limiter whose count of pods changed; `applied` remembers the counts.
    fn apply(&self, agents: &BTreeMap<String, Granting>, applied: &mut BTreeMap<String, u32>) {
        for s in &self.shared {
            let pods = pods_granted(agents, &s.model);
            if applied.insert(s.model.clone(), pods) != Some(pods) {
                s.limiter.reshare(pod_share(s.declared, pods));
                info!(model = %s.model, pods, "model rate limits shared out among the namespace's executor pods");
            }
        }
    }

    /// Follows the namespace's Agents and reshares the limiters as they come and go. Nothing to
    /// follow when no granted model has a limit. A failing watch (not allowed, API server
    /// away) keeps the shares last applied and is retried with backoff. The answer turns true
    /// once the first listing is applied (at once when there is nothing to follow).
    pub fn follow(self, client: Client, namespace: &str, redis: bool) -> watch::Receiver<bool> {
        let (listed_tx, listed) = watch::channel(self.shared.is_empty());
        if self.shared.is_empty() {
            return listed;
        }
        let api: Api<Agent> = Api::namespaced(client, namespace);
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut agents = BTreeMap::new();
            let mut listing = BTreeMap::new();
            let mut applied = BTreeMap::new();
            while let Some(event) = stream.next().await {
                match event {
                    Err(e) => {
                        warn!(error = %e, "Agent watch failed; model rate limit shares kept as they are");
                    }
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(a)) => {
                        if let Some(g) = self.granting(&a, redis) {
                            listing.insert(a.name_any(), g);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        agents = std::mem::take(&mut listing);
                        self.apply(&agents, &mut applied);
                        let _ = listed_tx.send(true);
                    }
                    Ok(watcher::Event::Apply(a)) => {
                        match self.granting(&a, redis) {
                            Some(g) => agents.insert(a.name_any(), g),
                            None => agents.remove(&a.name_any()),
                        };
                        self.apply(&agents, &mut applied);
                    }
                    Ok(watcher::Event::Delete(a)) => {
                        agents.remove(&a.name_any());
                        self.apply(&agents, &mut applied);
                    }
                }
            }
        });
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::{Duration, Instant};

    fn agent(name: &str, models: &[&str], replicas: i32, storage: bool) -> Agent {
        let mut spec = serde_json::json!({
            "module": {"configMap": {"name": "m", "key": "module.wasm"}},
            "executor": {"replicas": replicas},
            "capabilities": {},
        });
        if !models.is_empty() {
            spec["capabilities"]["models"] = serde_json::json!({"allowed": models});
        }
        if storage {
            spec["capabilities"]["storage"] = serde_json::json!({"maxBytes": 1024});
        }
        let mut a = Agent::new(name, serde_json::from_value(spec).expect("an Agent spec"));
        a.metadata.namespace = Some("team".into());
        a
    }

    fn shares(models: &[(&str, u64)]) -> ModelShares {
        ModelShares {
            shared: models
                .iter()
                .map(|(m, rpm)| {
                    let declared = RateLimits {
                        requests_per_minute: Some(*rpm),
                        tokens_per_minute: None,
                    };
                    Shared {
                        model: (*m).to_owned(),
                        declared,
                        limiter: Arc::new(RateLimiter::new(declared).expect("limited")),
                    }
                })
                .collect(),
        }
    }

    /// Requests the limiter lets through at once (its share, when the bucket is full).
    fn burst(limiter: &RateLimiter) -> u32 {
        let now = Instant::now();
        let mut n = 0;
        while limiter.reserve(now, 0, Duration::from_millis(1)).is_ok() {
            n += 1;
        }
        n
    }

    #[test]
    fn every_pod_of_every_agent_granted_a_model_shares_its_limit() {
        let s = shares(&[("llama", 60), ("gpt", 10)]);
        let mut agents = BTreeMap::new();
        for a in [
            agent("ask", &["llama"], 2, false),
            agent("plan", &["llama", "gpt"], 1, false),
            // Storage without Redis: one writer, whatever its replicas say.
            agent("notes", &["llama"], 3, true),
            agent("echo", &[], 5, false),
            agent("other", &["mistral"], 4, false),
        ] {
            if let Some(g) = s.granting(&a, false) {
                agents.insert(a.name_any(), g);
            }
        }
        assert_eq!(
            agents.len(),
            3,
            "only Agents granted a limited model are kept"
        );
        assert_eq!(pods_granted(&agents, "llama"), 4);
        assert_eq!(pods_granted(&agents, "gpt"), 1);
        assert_eq!(pods_granted(&agents, "mistral"), 1, "never below this pod");
        let mut applied = BTreeMap::new();
        s.apply(&agents, &mut applied);
        assert_eq!(burst(&s.shared[0].limiter), 15, "60 a minute among 4 pods");
        assert_eq!(burst(&s.shared[1].limiter), 10, "gpt's one pod has it all");
    }

    #[test]
    fn the_agents_of_a_pool_count_its_pods_once_between_them() {
        let s = shares(&[("llama", 60)]);
        let pooled = |name: &str, pool: &str, pool_pods: i32| {
            let mut a = agent(name, &["llama"], 1, false);
            a.spec.executor.replicas = None;
            a.spec.executor.pool = Some(pool.to_owned());
            a.status = Some(ari_crds::AgentStatus {
                replicas: Some(pool_pods),
                ..Default::default()
            });
            a
        };
        let mut agents = BTreeMap::new();
        for a in [
            pooled("ask", "shared", 3),
            pooled("plan", "shared", 3),
            pooled("other", "small", 0),
            agent("dedicated", &["llama"], 2, false),
        ] {
            if let Some(g) = s.granting(&a, false) {
                agents.insert(a.name_any(), g);
            }
        }
        // shared's 3 pods once, small's pod (none ready yet counts as one), dedicated's 2.
        assert_eq!(pods_granted(&agents, "llama"), 6);
        let mut applied = BTreeMap::new();
        s.apply(&agents, &mut applied);
        assert_eq!(burst(&s.shared[0].limiter), 10, "60 a minute among 6 pods");
    }

    #[test]
    fn an_agent_coming_or_going_reshares_without_a_restart() {
        let s = shares(&[("llama", 60)]);
        let mut agents = BTreeMap::new();
        let mut applied = BTreeMap::new();
        let ask = agent("ask", &["llama"], 1, false);
        agents.insert("ask".into(), s.granting(&ask, false).expect("granted"));
        s.apply(&agents, &mut applied);
        assert_eq!(applied.get("llama"), Some(&1));
        let more = agent("more", &["llama"], 2, true);
        agents.insert("more".into(), s.granting(&more, true).expect("granted"));
        s.apply(&agents, &mut applied);
        assert_eq!(
            applied.get("llama"),
            Some(&3),
            "Redis: storage Agents keep replicas"
        );
        assert_eq!(burst(&s.shared[0].limiter), 20);
        agents.remove("more");
        s.apply(&agents, &mut applied);
        assert_eq!(applied.get("llama"), Some(&1));
    }
}
