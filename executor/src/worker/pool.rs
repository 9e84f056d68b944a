//! A pool pod: one process serving every Agent of its namespace that names its `ExecutorPool`.
//!
//! The pod watches the Agents naming its pool (field selector on `spec.executor.pool`) and all
//! Tasks of the namespace, routing each Task to its Agent's backlog. An Agent is hosted — its
//! module loaded into the pod's one engine (from the on-disk artifact cache when compiled
//! before) and a claim loop started — when its first Task arrives, not before: a new Agent
//! costs the pod nothing until it is used. At most `hotModules` Agents stay loaded; beyond
//! that the least recently used idle ones are let go and loaded again on their next Task.
//!
//! Each hosted Agent is a [`Worker`] as in a dedicated pod, with its own slots (its
//! `executor.concurrency`) and backlog, so a busy Agent fills only its own share; every run
//! also takes a place among the pod's `concurrency`, shared first come first served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ari_crds::{Agent, Task};
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use super::backlog::Backlog;
use super::config::Resolved;
use super::feed::{self, Route};
use super::metrics::Metrics;
use super::peers::Peers;
use super::{Shared, Worker, WorkerConfig, WorkerError, build, refuse_replaced_key};

/// How often idle Agents beyond the hot bound are let go.
const EVICT_EVERY: Duration = Duration::from_secs(10);

/// One Agent as this pod hosts it.
struct Hosted {
    backlog: Arc<Backlog>,
    /// The module the running worker was built for; `None` until one is started.
    built_for: Option<Resolved>,
    /// The Agent's generation the worker was built for (a spec change rebuilds it).
    generation: Option<i64>,
    /// The worker once loaded (to tell idle from busy).
    worker: Arc<Mutex<Option<Arc<Worker>>>>,
    stop: watch::Sender<bool>,
    last_used: Instant,
}

impl Hosted {
    fn new(backlog: Arc<Backlog>) -> Self {
        Self {
            backlog,
            built_for: None,
            generation: None,
            worker: Arc::default(),
            stop: watch::channel(false).0,
            last_used: Instant::now(),
        }
    }

    fn idle(&self) -> bool {
        lock(&self.worker).as_ref().is_none_or(|w| w.idle()) && self.backlog.len() == 0
    }

    fn loaded(&self) -> bool {
        lock(&self.worker).is_some()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The pool pod's state: its Agents and what it hosts of them.
struct Pool {
    shared: Shared,
    config: WorkerConfig,
    agents: Store<Agent>,
    hosted: Mutex<HashMap<String, Hosted>>,
    /// Every worker's run, so shutdown waits for each to drain (evicted ones included).
    runs: Mutex<tokio::task::JoinSet<()>>,
    /// Agents seen since the Agent watch first listed: a Task that arrived before its Agent
    /// did is found again by listing that Agent's Tasks once (see [`catch_up`]).
    known: Mutex<std::collections::HashSet<String>>,
    peers: Peers,
    stopping: AtomicBool,
}

impl Route for Pool {
    fn serves(&self, agent: &str) -> bool {
        self.agents
            .get(&ObjectRef::new(agent).within(&self.config.namespace))
            .is_some()
    }

    fn offer(&self, agent: &str, task: Task, claimable: bool, owned: bool) {
        let mut hosted = lock(&self.hosted);
        if let Some(h) = hosted.get_mut(agent) {
            h.last_used = Instant::now();
            h.backlog.offer(task, claimable, owned);
            return;
        }
        if !claimable {
            return;
        }
        let Some(found) = self
            .agents
            .get(&ObjectRef::new(agent).within(&self.config.namespace))
        else {
            return;
        };
        let mut h = Hosted::new(Arc::new(Backlog::new(self.config.steal_after)));
        h.backlog.offer(task, claimable, owned);
        self.start(&mut h, &found);
        hosted.insert(agent.to_owned(), h);
    }

    fn remove(&self, agent: &str, name: &str) {
        if let Some(h) = lock(&self.hosted).get(agent) {
            h.backlog.remove(name);
        }
    }

    fn clear(&self) {
        for h in lock(&self.hosted).values() {
            h.backlog.clear();
        }
    }
}

impl Pool {
    /// Starts `agent`'s worker for its current spec, once the operator has resolved its
    /// module; until then its Tasks wait in the backlog.
    fn start(&self, h: &mut Hosted, agent: &Agent) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let Some(resolved) = Resolved::of(agent) else {
            return;
        };
        if h.built_for.as_ref() == Some(&resolved) && h.generation == agent.metadata.generation {
            return;
        }
        // A worker of an older spec finishes what it runs and takes nothing more.
        let _ = h.stop.send(true);
        let (stop_tx, stop_rx) = watch::channel(false);
        h.stop = stop_tx;
        h.built_for = Some(resolved.clone());
        h.generation = agent.metadata.generation;
        h.worker = Arc::default();
        let config = self.config.for_pooled(agent, &resolved);
        let (shared, agent, backlog, peers) = (
            self.shared.clone(),
            agent.clone(),
            h.backlog.clone(),
            self.peers.clone(),
        );
        let slot = h.worker.clone();
        let name = agent.name_any();
        let mut runs = lock(&self.runs);
        while runs.try_join_next().is_some() {}
        runs.spawn(async move {
            let worker = match build(shared, config, agent, backlog, stop_rx.clone()).await {
                Ok(w) => Arc::new(w),
                Err(e) => {
                    warn!(agent = %name, error = %e, "pooled Agent not hosted");
                    return;
                }
            };
            info!(agent = %name, digest = %worker.runtime_agent.module_sha256(), "hosting");
            *lock(&slot) = Some(worker.clone());
            if let Err(e) = worker.claim_loop(peers, stop_rx).await {
                warn!(agent = %name, error = %e, "pooled Agent's claim loop ended");
            }
        });
    }

    /// An Agent naming this pool changed: a hosted one whose spec or module changed is
    /// rebuilt; one that now has its module resolved starts.
    fn changed(&self, agent: &Agent) {
        let mut hosted = lock(&self.hosted);
        if let Some(h) = hosted.get_mut(&agent.name_any()) {
            self.start(h, agent);
        }
    }

    /// An Agent left the pool (deleted, or moved): its worker finishes and goes.
    fn gone(&self, name: &str) {
        if let Some(h) = lock(&self.hosted).remove(name) {
            let _ = h.stop.send(true);
        }
    }

    /// Lets go of the least recently used idle Agents beyond the hot bound.
    fn evict_cold(&self) {
        let bound = self
            .config
            .pool
            .as_ref()
            .map_or(usize::MAX, |p| p.hot_modules);
        let mut hosted = lock(&self.hosted);
        let seen = hosted.iter().map(|(name, h)| Seen {
            name,
            loaded: h.loaded(),
            idle: h.idle(),
            last_used: h.last_used,
        });
        for name in to_evict(seen, bound) {
            if let Some(h) = hosted.remove(&name) {
                let _ = h.stop.send(true);
            }
        }
        // Keep the components some hosted Agent still runs; the rest load again on demand.
        let in_use: std::collections::HashSet<String> = hosted
            .values()
            .filter_map(|h| {
                lock(&h.worker)
                    .as_ref()
                    .map(|w| w.runtime_agent.module_sha256().to_owned())
            })
            .collect();
        if let Some(modules) = &self.shared.modules {
            lock(modules).retain(|digest, _| in_use.contains(digest));
        }
    }

    /// How many Agents have a module loaded here.
    fn loaded(&self) -> usize {
        lock(&self.hosted).values().filter(|h| h.loaded()).count()
    }

    fn stop_all(&self) {
        self.stopping.store(true, Ordering::Release);
        for h in lock(&self.hosted).values() {
            let _ = h.stop.send(true);
        }
    }
}

/// A hosted Agent as the eviction rule sees it.
struct Seen<'a> {
    name: &'a str,
    loaded: bool,
    idle: bool,
    last_used: Instant,
}

/// Which Agents to let go so that at most `bound` stay loaded: the least recently used of the
/// idle ones. A busy Agent is never let go, so the bound can be passed while many are busy.
fn to_evict<'a>(hosted: impl Iterator<Item = Seen<'a>>, bound: usize) -> Vec<String> {
    let hosted: Vec<Seen<'a>> = hosted.collect();
    let over = hosted
        .iter()
        .filter(|h| h.loaded)
        .count()
        .saturating_sub(bound);
    let mut idle: Vec<&Seen<'a>> = hosted.iter().filter(|h| h.loaded && h.idle).collect();
    idle.sort_by_key(|h| h.last_used);
    idle.into_iter()
        .take(over)
        .map(|h| h.name.to_owned())
        .collect()
}

/// Runs a pool pod until SIGTERM: Ready once it knows its pool's Agents.
pub(super) async fn serve(
    client: Client,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), WorkerError> {
    refuse_replaced_key(&config, &mut stop).await?;
    let pool_name = config
        .pool
        .as_ref()
        .map(|p| p.name.clone())
        .unwrap_or_default();
    // One engine for the pod: an instance slot per running task and one more per slot for a
    // task waiting on a person (network approvals lend their slot).
    let instances = config.concurrency.saturating_mul(2);
    let runtime_config = super::runtime_config(&config, instances);
    let runtime = tokio::task::spawn_blocking(move || ari_runtime::Runtime::new(runtime_config))
        .await
        .map_err(super::ModuleError::LoadTask)??;
    let mut shared = Shared::new(client.clone(), metrics.clone(), &config);
    shared.runtime = Some(runtime);
    shared.pod_slots = Some(Arc::new(tokio::sync::Semaphore::new(config.concurrency)));
    shared.modules = Some(Arc::default());

    let (agents, writer) = reflector::store();
    let selector = format!("spec.executor.pool={pool_name}");
    let agent_events = reflector::reflector(
        writer,
        watcher(
            Api::<Agent>::namespaced(client.clone(), &config.namespace),
            watcher::Config::default().fields(&selector),
        ),
    )
    .default_backoff();
    let peers = Peers::watch(
        client.clone(),
        &config.namespace,
        (ari_crds::names::LABEL_POOL, &pool_name),
        &config.pod_name,
    );
    let pool = Arc::new(Pool {
        shared,
        config,
        agents: agents.clone(),
        hosted: Mutex::default(),
        peers: peers.clone(),
        runs: Mutex::default(),
        known: Mutex::default(),
        stopping: AtomicBool::new(false),
    });
    let follower = tokio::spawn(follow_agents(pool.clone(), agent_events));
    tokio::select! {
        r = agents.wait_until_ready() => if r.is_err() {
            return Err(super::ConfigError::AgentWatchEnded.into());
        },
        _ = stop.wait_for(|s| *s) => return Ok(()),
    }
    ready.store(true, Ordering::Release);
    info!(pool = %pool_name, agents = agents.len(), "ready");

    let feeder = {
        let pool = pool.clone();
        let api = feed::dynamic_tasks(client, &pool.config.namespace);
        tokio::spawn(async move {
            let cx = feed::Context {
                peers: &peers,
                metrics: &pool.shared.metrics,
                cancels: &pool.shared.cancels,
                live: &pool.shared.live,
            };
            feed::feed(api, None, pool.as_ref(), &cx).await;
        })
    };
    let mut tick = tokio::time::interval(EVICT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                pool.evict_cold();
                metrics.hosted_agents.set(i64::try_from(pool.loaded()).unwrap_or(i64::MAX));
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    feeder.abort();
    follower.abort();
    pool.stop_all();
    // Every hosted worker drains its runs.
    let mut runs = std::mem::take(&mut *lock(&pool.runs));
    while runs.join_next().await.is_some() {}
    info!("all running tasks finished; exiting");
    Ok(())
}

/// Keeps the hosted workers in step with the pool's Agents.
async fn follow_agents(
    pool: Arc<Pool>,
    events: impl futures::Stream<Item = Result<watcher::Event<Agent>, watcher::Error>>,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::InitApply(a)) => {
                lock(&pool.known).insert(a.name_any());
                pool.changed(&a);
            }
            Ok(watcher::Event::Apply(a)) => {
                if lock(&pool.known).insert(a.name_any()) {
                    tokio::spawn(catch_up(pool.clone(), a.name_any()));
                }
                pool.changed(&a);
            }
            Ok(watcher::Event::Delete(a)) => {
                lock(&pool.known).remove(&a.name_any());
                pool.gone(&a.name_any());
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "agent watch error"),
        }
    }
}

/// Offers the Tasks of an Agent that just joined the pool: the Task watch may have shown
/// them before the Agent watch showed the Agent, and they were passed over then.
async fn catch_up(pool: Arc<Pool>, agent: String) {
    let api = feed::dynamic_tasks(pool.shared.client.clone(), &pool.config.namespace);
    let params = kube::api::ListParams::default().fields(&format!("spec.agentRef.name={agent}"));
    let tasks = match api.list(&params).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(agent = %agent, error = %e, "cannot list a new pooled Agent's Tasks");
            return;
        }
    };
    let cx = feed::Context {
        peers: &pool.peers,
        metrics: &pool.shared.metrics,
        cancels: &pool.shared.cancels,
        live: &pool.shared.live,
    };
    for o in &tasks {
        feed::offer(&api, o, pool.as_ref(), &cx).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap as Map;

    use kube::api::DynamicObject;
    use serde_json::json;

    use super::*;
    use crate::worker::cancels::Cancels;
    use crate::worker::livelog::LiveLogs;
    use crate::worker::testutil::{mock_client, status};

    const KEY: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    /// A pool pod knowing Agent `pooled` (module resolved), with an API that answers nothing.
    fn pool() -> Pool {
        let (client, _log) = mock_client(|_, _, _| status(404, "NotFound"));
        let env: Map<&str, &str> = Map::from([
            ("ARI_POOL_NAME", "shared"),
            ("POD_NAMESPACE", "demo"),
            ("POD_NAME", "shared-pool-a"),
            ("ARI_ATTESTATION_KEY", KEY),
        ]);
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| (*v).to_owned()))
            .unwrap_or_else(|e| panic!("config: {e}"));
        let metrics = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}")));
        let (agents, mut writer) = reflector::store::<Agent>();
        let agent: Agent = serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "pooled", "namespace": "demo", "uid": "u1", "generation": 1},
            "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                     "executor": {"pool": "shared"}},
            "status": {"observedGeneration": 1, "moduleDigest": "sha256:00",
                       "conditions": [{"type": "ModuleResolved", "status": "True",
                                       "reason": "Resolved", "message": "",
                                       "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("agent: {e}"));
        writer.apply_watcher_event(&watcher::Event::Apply(agent));
        Pool {
            shared: Shared::new(client, metrics, &config),
            config,
            agents,
            hosted: Mutex::default(),
            runs: Mutex::default(),
            known: Mutex::default(),
            peers: Peers::alone("shared-pool-a"),
            stopping: AtomicBool::new(false),
        }
    }

    fn task(name: &str, agent: &str, phase: Option<&str>) -> DynamicObject {
        let mut t = json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
                         "resourceVersion": "5"},
            "spec": {"agentRef": {"name": agent}, "input": "x"}});
        if let Some(p) = phase {
            t["status"] = json!({"phase": p});
        }
        serde_json::from_value(t).unwrap_or_else(|e| panic!("task: {e}"))
    }

    #[tokio::test]
    async fn only_a_claimable_task_of_a_pooled_agent_hosts_it_and_others_pass_by() {
        let pool = pool();
        let metrics = Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}"));
        let (cancels, live) = (Cancels::default(), LiveLogs::new(Default::default()));
        let cx = feed::Context {
            peers: &pool.peers,
            metrics: &metrics,
            cancels: &cancels,
            live: &live,
        };
        let api = feed::dynamic_tasks(pool.shared.client.clone(), "demo");
        // Another Agent's Task (dedicated, or another pool's): not ours.
        feed::offer(&api, &task("t0", "elsewhere", None), &pool, &cx).await;
        assert!(!pool.serves("elsewhere"));
        // A finished Task of a pooled Agent loads nothing.
        feed::offer(&api, &task("t1", "pooled", Some("Succeeded")), &pool, &cx).await;
        assert!(
            lock(&pool.hosted).is_empty(),
            "a finished Task hosted its Agent"
        );
        // A claimable one hosts it, with the Task in its backlog.
        feed::offer(&api, &task("t2", "pooled", None), &pool, &cx).await;
        let hosted = lock(&pool.hosted);
        let h = hosted.get("pooled").unwrap_or_else(|| panic!("not hosted"));
        assert_eq!(h.backlog.len(), 1);
        assert_eq!(
            h.built_for.as_ref().map(|r| r.digest.as_str()),
            Some("sha256:00"),
            "its worker is built for the digest the operator resolved"
        );
        assert_eq!(hosted.len(), 1);
    }

    #[test]
    fn beyond_the_hot_bound_the_least_recently_used_idle_agents_go_and_busy_ones_stay() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let seen = |name, loaded, idle, s| Seen {
            name,
            loaded,
            idle,
            last_used: at(s),
        };
        let hosted = || {
            vec![
                seen("old-busy", true, false, 0),
                seen("old-idle", true, true, 1),
                seen("newer-idle", true, true, 5),
                seen("newest-idle", true, true, 9),
                // Waiting for its module: not loaded, never counted or let go.
                seen("unresolved", false, true, 0),
            ]
            .into_iter()
        };
        // (bound, let go)
        let table: [(usize, &[&str]); 5] = [
            (4, &[]),
            (3, &["old-idle"]),
            (2, &["old-idle", "newer-idle"]),
            (1, &["old-idle", "newer-idle", "newest-idle"]),
            // Busy Agents stay even when the bound says none.
            (0, &["old-idle", "newer-idle", "newest-idle"]),
        ];
        for (bound, want) in table {
            assert_eq!(to_evict(hosted(), bound), want, "bound {bound}");
        }
    }
}
