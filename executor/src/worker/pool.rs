//! A pool pod: one process serving every Agent of its namespace that names its `ExecutorPool`.
//!
//! The pod watches the Agents naming its pool (field selector on `spec.executor.pool`) and all
//! Tasks of the namespace, routing each Task to its Agent's backlog. An Agent is hosted — its
//! module loaded into the pod's one engine (from the on-disk artifact cache when compiled
//! before) and a claim loop started — when its first Task arrives, not before: a new Agent
//! costs the pod nothing until it is used.
//!
//! Memory follows the compiled modules, so `hotModules` bounds the distinct module digests
//! loaded or being loaded here, busy or not: an Agent whose module would pass it waits, its
//! Tasks in its backlog, first come first served, and starts when room is made — an idle
//! Agent of another module let go at once for it, or a busy one going idle. Beyond the bound
//! in Agents, the least recently used idle ones are let go too, and load again on their next
//! Task.
//!
//! Each hosted Agent is a [`Worker`] as in a dedicated pod, with its own slots (its
//! `executor.concurrency`) and backlog, so a busy Agent fills only its own share; every run
//! also takes a place among the pod's `concurrency`, shared first come first served. The pod
//! holds the models, MCP servers, signing keys and pull secrets of all its Agents; each worker is
//! handed only its own Agent's (`WorkerConfig::for_pooled`), its models with the pod's one
//! limiter each, and counts its Tasks under its Agent's name (`metrics::AgentMetrics`); its
//! image is pulled only with its own pull secrets. An Agent whose worker cannot be built for
//! its spec (its signing key missing or not a key, a pull secret's variable empty) fails its
//! Tasks saying why ([`refuse_tasks`]); its neighbours run on. An Agent granted storage is
//! hosted only when the pod has the operator's Redis, which every pool pod shares (scoped by
//! the Agent's uid, as across a dedicated Agent's replicas). A
//! declarative Agent's worker runs the stock component and pins the declaration digest of the
//! Agent's status, so a prompt edit the operator has resolved rebuilds it ([`Resolved`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

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
    /// Waiting for room under the hot bound (named in [`Hosts::waiting`]).
    queued: bool,
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
            queued: false,
        }
    }

    /// Its worker, if any, finishes what it runs and takes nothing more; its backlog stays.
    fn retire(&mut self) {
        let _ = self.stop.send(true);
        self.built_for = None;
        self.generation = None;
        self.worker = Arc::default();
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

/// The Agents a pool pod hosts, and those of them waiting for room, under one lock.
#[derive(Default)]
struct Hosts {
    agents: HashMap<String, Hosted>,
    /// Agents whose module would pass the hot bound, first come first served.
    waiting: VecDeque<String>,
}

/// The runs holding each module digest (`sha256:…`): what the hot bound counts.
type Held = Arc<Mutex<HashMap<String, usize>>>;

/// One run's hold on its module, from its start until its worker has drained: an evicted or
/// rebuilt worker keeps its module in memory until its last Task ends.
struct Lease {
    held: Held,
    digest: String,
    room: Arc<Notify>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if let Some(runs) = held.get_mut(&self.digest) {
            *runs = runs.saturating_sub(1);
            if *runs == 0 {
                held.remove(&self.digest);
                drop(held);
                self.room.notify_one();
            }
        }
    }
}

/// The pool pod's state: its Agents and what it hosts of them.
struct Pool {
    shared: Shared,
    config: WorkerConfig,
    agents: Store<Agent>,
    hosted: Mutex<Hosts>,
    held: Held,
    /// Told when room may have been made for a waiting Agent: a run ended, a Task finished.
    room: Arc<Notify>,
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
        let mut hosts = lock(&self.hosted);
        if let Some(h) = hosts.agents.get_mut(agent) {
            h.last_used = Instant::now();
            h.backlog.offer(task, claimable, owned);
            if !claimable {
                // Its Agent may have nothing left to do: room for a waiting one.
                self.room.notify_one();
            }
            return;
        }
        if !claimable {
            return;
        }
        let Some(found) = self.agent(agent) else {
            return;
        };
        let h = Hosted::new(Arc::new(Backlog::new(self.config.steal_after)));
        h.backlog.offer(task, claimable, owned);
        hosts.agents.insert(agent.to_owned(), h);
        self.start(&mut hosts, &found);
    }

    fn remove(&self, agent: &str, name: &str) {
        if let Some(h) = lock(&self.hosted).agents.get(agent) {
            h.backlog.remove(name);
            self.room.notify_one();
        }
    }

    fn clear(&self) {
        for h in lock(&self.hosted).agents.values() {
            h.backlog.clear();
        }
    }
}

impl Pool {
    fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.agents
            .get(&ObjectRef::new(name).within(&self.config.namespace))
    }

    /// The most module digests loaded or being loaded here at once (`hotModules`).
    fn bound(&self) -> usize {
        self.config
            .pool
            .as_ref()
            .map_or(usize::MAX, |p| p.hot_modules)
    }

    /// Starts `agent`'s worker for its current spec, once the operator has resolved its
    /// module (until then its Tasks wait in the backlog) and when its module fits under the
    /// hot bound with no Agent waiting before it (else it waits its turn).
    fn start(&self, hosts: &mut Hosts, agent: &Agent) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let name = agent.name_any();
        let Some(h) = hosts.agents.get_mut(&name) else {
            return;
        };
        let Some(resolved) = Resolved::of(agent) else {
            return;
        };
        let current =
            h.built_for.as_ref() == Some(&resolved) && h.generation == agent.metadata.generation;
        if h.queued || current {
            return;
        }
        // A worker of an older spec finishes what it runs and takes nothing more.
        h.retire();
        // A pod whose Deployment predates the Agent's signing key or pull secret (the pool is
        // rolling to one that carries it) leaves its Tasks to the pods that have it; storage
        // without the shared Redis is hosted by none (the operator says so on the Agent).
        if let Err(why) = self.config.can_host(&agent.spec) {
            debug!(agent = %name, "not hosted here: {why}");
            return;
        }
        if hosts.waiting.is_empty()
            && let Some(lease) = self.lease(&resolved.digest)
        {
            self.launch(h, agent, resolved, lease);
            return;
        }
        h.queued = true;
        hosts.waiting.push_back(name.clone());
        self.admit_waiting(hosts);
        if hosts.agents.get(&name).is_some_and(|h| h.queued) {
            info!(
                agent = %name,
                digest = %resolved.digest,
                hot_modules = self.bound(),
                "waiting for room: its module would pass the pool's hotModules; its Tasks wait \
                 in its backlog until a module of an idle Agent is let go"
            );
        }
    }

    /// A hold on `digest` for one run, when it is loaded already or fits under the bound.
    fn lease(&self, digest: &str) -> Option<Lease> {
        let mut held = lock(&self.held);
        if !held.contains_key(digest) && held.len() >= self.bound() {
            return None;
        }
        *held.entry(digest.to_owned()).or_default() += 1;
        Some(Lease {
            held: self.held.clone(),
            digest: digest.to_owned(),
            room: self.room.clone(),
        })
    }

    /// Builds and runs a worker for `agent`'s `resolved` module, holding `lease` until it
    /// has drained.
    fn launch(&self, h: &mut Hosted, agent: &Agent, resolved: Resolved, lease: Lease) {
        let (stop_tx, stop_rx) = watch::channel(false);
        h.stop = stop_tx;
        h.generation = agent.metadata.generation;
        h.worker = Arc::default();
        let config = self.config.for_pooled(agent, &resolved);
        h.built_for = Some(resolved);
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
            let (client, metrics) = (shared.client.clone(), shared.metrics.clone());
            let namespace = config.namespace.clone();
            let built = build(shared, config, agent, backlog.clone(), stop_rx.clone()).await;
            let worker = match built {
                Ok(w) => Arc::new(w),
                // What the Agent's own spec or key gets wrong (a signing key missing or not a
                // key) fails its Tasks, saying why; its neighbours run on.
                Err(WorkerError::Config(why)) => {
                    drop(lease);
                    warn!(agent = %name, error = %why, "pooled Agent not hosted; failing its Tasks");
                    let tasks = Api::namespaced(client, &namespace);
                    let metrics = metrics.agent(&namespace, &name);
                    refuse_tasks(&tasks, &backlog, &metrics, &why.to_string(), stop_rx).await;
                    return;
                }
                Err(e) => {
                    warn!(agent = %name, error = %e, "pooled Agent not hosted");
                    return;
                }
            };
            let _lease = lease;
            info!(agent = %name, digest = %worker.runtime_agent.module_sha256(), "hosting");
            *lock(&slot) = Some(worker.clone());
            if let Err(e) = worker.claim_loop(peers, stop_rx).await {
                warn!(agent = %name, error = %e, "pooled Agent's claim loop ended");
            }
        });
    }

    /// An Agent naming this pool changed: a hosted one whose spec, module or declaration
    /// digest changed is rebuilt; one that now has its module resolved starts.
    fn changed(&self, agent: &Agent) {
        self.start(&mut lock(&self.hosted), agent);
    }

    /// An Agent left the pool (deleted, or moved): its worker finishes and goes, and it
    /// waits no more.
    fn gone(&self, name: &str) {
        let mut hosts = lock(&self.hosted);
        if let Some(h) = hosts.agents.remove(name) {
            let _ = h.stop.send(true);
            if h.queued {
                hosts.waiting.retain(|w| w != name);
                self.count_waiting(&hosts);
            }
        }
    }

    /// Lets go of the least recently used idle Agents beyond the hot bound.
    fn evict_cold(&self) {
        let bound = self.bound();
        let mut hosts = lock(&self.hosted);
        let seen = hosts.agents.iter().map(|(name, h)| Seen {
            name,
            loaded: h.loaded(),
            idle: h.idle(),
            last_used: h.last_used,
        });
        for name in to_evict(seen, bound) {
            if let Some(h) = hosts.agents.remove(&name) {
                let _ = h.stop.send(true);
            }
        }
    }

    /// Room may have been made: forgets the modules no run holds, lets go of the idle Agents
    /// the waiting ones need room from (their runs end at once, which calls this again), and
    /// starts the waiting Agents that fit, first come first served.
    fn make_room(&self) {
        let mut hosts = lock(&self.hosted);
        if let Some(modules) = &self.shared.modules {
            let held = lock(&self.held);
            let held: HashSet<&str> = held.keys().map(|d| hex(d)).collect();
            lock(modules).retain(|digest, _| held.contains(digest.as_str()));
        }
        self.admit_waiting(&mut hosts);
    }

    /// Applies the admission rule ([`plan`]) to the waiting Agents.
    fn admit_waiting(&self, hosts: &mut Hosts) {
        if hosts.waiting.is_empty() || self.stopping.load(Ordering::Acquire) {
            return;
        }
        let waiting: Vec<(String, Option<Arc<Agent>>, usize)> = hosts
            .waiting
            .iter()
            .map(|name| {
                let tasks = hosts.agents.get(name).map_or(0, |h| h.backlog.len());
                (name.clone(), self.agent(name), tasks)
            })
            .collect();
        let resolved: Vec<Option<Resolved>> = waiting
            .iter()
            .map(|(_, a, _)| a.as_deref().and_then(Resolved::of))
            .collect();
        let plan = {
            let held = self.held_modules(hosts);
            let waits = waiting
                .iter()
                .zip(&resolved)
                .map(|((name, _, tasks), r)| Waiting {
                    name,
                    digest: r.as_ref().map(|r| r.digest.as_str()),
                    tasks: *tasks,
                });
            plan(&held, waits, self.bound())
        };
        for name in &plan.evict {
            if let Some(h) = hosts.agents.remove(name) {
                info!(agent = %name, "idle: let go to make room for a waiting Agent");
                let _ = h.stop.send(true);
            }
        }
        for ((name, agent, _), resolved) in waiting.into_iter().zip(resolved) {
            if !plan.start.contains(&name) {
                continue;
            }
            let (Some(agent), Some(resolved)) = (agent, resolved) else {
                continue;
            };
            self.admit(hosts, &name, &agent, resolved);
        }
        self.count_waiting(hosts);
    }

    /// Starts a waiting Agent the rule made room for.
    fn admit(&self, hosts: &mut Hosts, name: &str, agent: &Agent, resolved: Resolved) {
        let Some(lease) = self.lease(&resolved.digest) else {
            return;
        };
        let Some(h) = hosts.agents.get_mut(name) else {
            return;
        };
        h.queued = false;
        hosts.waiting.retain(|w| w != name);
        info!(agent = %name, digest = %resolved.digest, "room made: starting");
        self.launch(h, agent, resolved, lease);
    }

    /// The modules held here, with the Agents holding each, as the admission rule sees them.
    fn held_modules<'a>(&self, hosts: &'a Hosts) -> Vec<HeldModule<'a>> {
        let mut by_digest: HashMap<&str, Vec<(&str, &Hosted)>> = HashMap::new();
        for (name, h) in &hosts.agents {
            if let Some(r) = &h.built_for {
                by_digest
                    .entry(r.digest.as_str())
                    .or_default()
                    .push((name, h));
            }
        }
        lock(&self.held)
            .iter()
            .map(|(digest, runs)| {
                let agents = by_digest.remove(digest.as_str()).unwrap_or_default();
                HeldModule {
                    digest: digest.clone(),
                    // A run of another spec still finishing holds it too.
                    idle: *runs <= agents.len() && agents.iter().all(|(_, h)| h.idle()),
                    last_used: agents.iter().map(|(_, h)| h.last_used).max(),
                    agents: agents.into_iter().map(|(n, _)| n).collect(),
                }
            })
            .collect()
    }

    fn count_waiting(&self, hosts: &Hosts) {
        self.shared
            .metrics
            .pool_waiting_agents
            .set(i64::try_from(hosts.waiting.len()).unwrap_or(i64::MAX));
    }

    /// How many Agents have a module loaded here.
    fn loaded(&self) -> usize {
        lock(&self.hosted)
            .agents
            .values()
            .filter(|h| h.loaded())
            .count()
    }

    fn stop_all(&self) {
        self.stopping.store(true, Ordering::Release);
        for h in lock(&self.hosted).agents.values() {
            let _ = h.stop.send(true);
        }
    }
}

/// A digest without its `sha256:` prefix, as the module cache keys it.
fn hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// A module held in the pod, as the admission rule sees it.
struct HeldModule<'a> {
    digest: String,
    /// The hosted Agents built for it, let go together to free it; none when only runs of
    /// Agents let go or rebuilt still hold it (it is on its way out).
    agents: Vec<&'a str>,
    /// Whether letting go of its Agents frees it now: all idle, no other run holds it.
    idle: bool,
    last_used: Option<Instant>,
}

/// An Agent waiting for room.
struct Waiting<'a> {
    name: &'a str,
    /// Its module, `None` while the operator has not resolved its current spec's.
    digest: Option<&'a str>,
    /// Tasks in its backlog.
    tasks: usize,
}

/// What to do for the waiting Agents.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    /// Waiting Agents to start now.
    start: Vec<String>,
    /// Idle Agents to let go, to make room for waiting ones.
    evict: Vec<String>,
}

/// Who starts and who is let go so that at most `bound` module digests are held. Waiting
/// Agents go first come first served: each starts when its module is held already or fits,
/// until one does not; from then on each module the queue still lacks takes the room of one
/// on its way out, or else of the least recently used idle one (not one the queue wants),
/// whose Agents are let go. Starting waits for that room to be freed, so the bound holds.
/// An Agent with no Task in its backlog, or no resolved module, is passed over, keeping its
/// place; a busy module is never let go.
fn plan<'a>(
    held: &[HeldModule<'_>],
    waiting: impl Iterator<Item = Waiting<'a>>,
    bound: usize,
) -> Plan {
    let waiting: Vec<(&str, &str)> = waiting
        .filter(|w| w.tasks > 0)
        .filter_map(|w| Some((w.name, w.digest?)))
        .collect();
    let wanted: HashSet<&str> = waiting.iter().map(|(_, d)| *d).collect();
    let mut in_use: HashSet<&str> = held.iter().map(|m| m.digest.as_str()).collect();
    let mut leaving = held.iter().filter(|m| m.agents.is_empty()).count();
    let mut idle: Vec<&HeldModule<'_>> = held
        .iter()
        .filter(|m| m.idle && !m.agents.is_empty() && !wanted.contains(m.digest.as_str()))
        .collect();
    idle.sort_by_key(|m| std::cmp::Reverse(m.last_used));
    let mut plan = Plan::default();
    let mut blocked = false;
    let mut awaited = HashSet::new();
    for (name, digest) in waiting {
        if !blocked && (in_use.contains(digest) || in_use.len() < bound) {
            in_use.insert(digest);
            plan.start.push(name.to_owned());
            continue;
        }
        blocked = true;
        if in_use.contains(digest) || !awaited.insert(digest) {
            continue;
        }
        if leaving > 0 {
            leaving -= 1;
        } else if let Some(m) = idle.pop() {
            plan.evict.extend(m.agents.iter().map(|a| (*a).to_owned()));
        } else {
            break;
        }
    }
    plan
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

/// Runs a pool pod until SIGTERM: Ready once it knows its pool's Agents and, when its models
/// have rate limits, its share of them.
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
    // One engine for the pod: an instance slot per running task and per parked task (a parent
    // waiting on its child, or a task on a person), which lends its place
    // (`slots::PodCapacity`).
    let instances = super::slots::PodCapacity::instances(config.concurrency);
    let runtime_config = super::runtime_config(&config, instances);
    let runtime = tokio::task::spawn_blocking(move || ari_runtime::Runtime::new(runtime_config))
        .await
        .map_err(super::ModuleError::LoadTask)??;
    let mut shared = Shared::new(client.clone(), metrics.clone(), &config);
    shared.runtime = Some(runtime);
    shared.pod_capacity = Some(super::slots::PodCapacity::new(config.concurrency));
    shared.modules = Some(Arc::default());
    let room = Arc::new(Notify::new());
    shared.room = Some(room.clone());
    let (pod_models, mut shares_listed) = super::PodModels::load(&client, &config)?;
    shared.pod_models = Some(pod_models);

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
        held: Held::default(),
        room,
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
    // No model call before the pod knows its share of each model's limits.
    tokio::select! {
        r = shares_listed.wait_for(|l| *l) => if r.is_err() {
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
                pool.make_room();
                metrics.hosted_agents.set(i64::try_from(pool.loaded()).unwrap_or(i64::MAX));
            }
            () = pool.room.notified() => pool.make_room(),
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

/// Fails each Task `backlog` yields with `why` (`HostError`), until `stop`: an Agent whose
/// worker cannot be built for its spec. As an admission refusal, without a claim
/// ([`super::status::refuse`]).
async fn refuse_tasks(
    tasks: &Api<Task>,
    backlog: &Backlog,
    metrics: &super::metrics::AgentMetrics,
    why: &str,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let task = tokio::select! {
            t = backlog.next() => t,
            _ = stop.wait_for(|s| *s) => return,
        };
        let name = task.name_any();
        match super::status::refuse(tasks, &task, TaskReason::HostError, why).await {
            Ok(true) => {
                warn!(task = %name, reason = TaskReason::HostError.as_str(), message = %why, "refused");
                metrics.count(TaskPhase::Failed, TaskReason::HostError);
            }
            Ok(false) => {}
            Err(e) => {
                warn!(task = %name, error = %e, "cannot fail the Task; will try again");
                backlog.retry_later(task);
            }
        }
    }
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

    /// A pooled Agent whose module the operator resolved to `digest`.
    fn agent(name: &str, digest: &str) -> Agent {
        serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
                         "generation": 1},
            "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                     "executor": {"pool": "shared"}},
            "status": {"observedGeneration": 1, "moduleDigest": digest,
                       "conditions": [{"type": "ModuleResolved", "status": "True",
                                       "reason": "Resolved", "message": "",
                                       "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("agent: {e}"))
    }

    /// A pooled declarative Agent `declared` whose declaration the operator resolved to
    /// `declaration` (its module the stock component, `sha256:57`).
    fn declared(declaration: &str) -> Agent {
        let mut a = agent("declared", "sha256:57");
        a.spec.module = Default::default();
        a.spec.declarative = Some(
            serde_json::from_value(json!({"instructions": "triage", "model": "small"}))
                .unwrap_or_else(|e| panic!("declaration: {e}")),
        );
        if let Some(s) = a.status.as_mut() {
            s.declaration_digest = Some(declaration.to_owned());
        }
        a
    }

    /// A pool pod keeping at most `hot` modules, knowing Agents `pooled` (module
    /// `sha256:00`), `other` (`sha256:01`) and `declared` (declaration `sha256:d1`), with an
    /// API that answers nothing.
    fn pool_of(hot: &str) -> Pool {
        let (client, _log) = mock_client(|_, _, _| status(404, "NotFound"));
        pool_with(hot, client, &[], [])
    }

    /// As [`pool_of`], with `client`, more variables and more Agents.
    fn pool_with<const N: usize>(
        hot: &str,
        client: Client,
        vars: &[(&str, &str)],
        more: [Agent; N],
    ) -> Pool {
        let mut env: Map<&str, &str> = Map::from([
            ("ARI_POOL_NAME", "shared"),
            ("ARI_HOT_MODULES", hot),
            ("POD_NAMESPACE", "demo"),
            ("POD_NAME", "shared-pool-a"),
            ("ARI_ATTESTATION_KEY", KEY),
        ]);
        env.extend(vars.iter().copied());
        let config = WorkerConfig::from_lookup(|k| env.get(k).map(|v| (*v).to_owned()))
            .unwrap_or_else(|e| panic!("config: {e}"));
        let metrics = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}")));
        let (agents, mut writer) = reflector::store::<Agent>();
        let known = [
            agent("pooled", "sha256:00"),
            agent("other", "sha256:01"),
            declared("sha256:d1"),
        ];
        for a in known.into_iter().chain(more) {
            writer.apply_watcher_event(&watcher::Event::Apply(a));
        }
        let room = Arc::new(Notify::new());
        let mut shared = Shared::new(client, metrics, &config);
        shared.room = Some(room.clone());
        Pool {
            shared,
            config,
            agents,
            hosted: Mutex::default(),
            held: Held::default(),
            room,
            runs: Mutex::default(),
            known: Mutex::default(),
            peers: Peers::alone("shared-pool-a"),
            stopping: AtomicBool::new(false),
        }
    }

    fn pool() -> Pool {
        pool_of("256")
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
            lock(&pool.hosted).agents.is_empty(),
            "a finished Task hosted its Agent"
        );
        // A claimable one hosts it, with the Task in its backlog.
        feed::offer(&api, &task("t2", "pooled", None), &pool, &cx).await;
        let hosts = lock(&pool.hosted);
        let h = hosts
            .agents
            .get("pooled")
            .unwrap_or_else(|| panic!("not hosted"));
        assert_eq!(h.backlog.len(), 1);
        assert_eq!(
            h.built_for.as_ref().map(|r| r.digest.as_str()),
            Some("sha256:00"),
            "its worker is built for the digest the operator resolved"
        );
        assert_eq!(hosts.agents.len(), 1);
    }

    /// A pooled Agent signing with the key of Secret `secret`.
    fn signer(name: &str, secret: &str) -> Agent {
        let mut a = agent(name, "sha256:00");
        a.spec.capabilities.signing = Some(
            serde_json::from_value(
                json!({"keyId": name, "secretRef": {"name": secret, "key": "private-key"}}),
            )
            .unwrap_or_else(|e| panic!("grant: {e}")),
        );
        a
    }

    /// `ARI_SIGNING_KEYS` handing a pod the `private-key` of Secret `secret` as
    /// `ARI_SIGNING_KEY_0`.
    fn one_signing_key(secret: &str) -> String {
        json!([{"secretRef": {"name": secret, "key": "private-key"},
                "keyEnv": "ARI_SIGNING_KEY_0"}])
        .to_string()
    }

    #[tokio::test]
    async fn a_pod_not_handed_an_agents_signing_key_leaves_its_tasks_to_pods_that_were() {
        let (client, _log) = mock_client(|_, _, _| status(404, "NotFound"));
        let keys = one_signing_key("a-key");
        let pool = pool_with(
            "256",
            client,
            &[
                (ari_crds::pool::SIGNING_KEYS_ENV, &keys),
                ("ARI_SIGNING_KEY_0", KEY),
            ],
            [signer("carried", "a-key"), signer("newer", "b-key")],
        );
        give(&pool, task("t1", "carried", None)).await;
        give(&pool, task("t2", "newer", None)).await;
        let hosts = lock(&pool.hosted);
        assert_eq!(started(&hosts, "carried").as_deref(), Some("sha256:00"));
        assert_eq!(started(&hosts, "newer"), None, "hosted without its key");
        assert_eq!(
            hosts.agents.get("newer").map(|h| h.backlog.len()),
            Some(1),
            "its Task was dropped"
        );
    }

    /// The status the pod wrote to Task `name`, waited for (10 s at most).
    async fn written_status(log: &crate::worker::testutil::Log, name: &str) -> serde_json::Value {
        let path = format!("/tasks/{name}/status");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(w) = crate::worker::testutil::find(log, "PUT", &path).pop() {
                return w.body;
            }
            assert!(tokio::time::Instant::now() < deadline, "no status written");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn an_agent_whose_signing_key_is_missing_fails_its_tasks_saying_why() {
        let (client, log) = mock_client(|method, path, body| match method {
            "PUT" if path.ends_with("/tasks/t1/status") => (200, body.clone()),
            _ => status(404, "NotFound"),
        });
        // Handed the pair, but the Secret lacked the key: the variable is empty.
        let keys = one_signing_key("a-key");
        let pool = pool_with(
            "256",
            client,
            &[(ari_crds::pool::SIGNING_KEYS_ENV, &keys)],
            [signer("broken", "a-key")],
        );
        give(&pool, task("t1", "broken", None)).await;
        let written = written_status(&log, "t1").await;
        assert_eq!(written["status"]["phase"], "Failed");
        assert_eq!(written["status"]["reason"], "HostError");
        let message = written["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("a-key") && message.contains("ARI_SIGNING_KEY_0"),
            "{message}"
        );
        let page = pool.shared.metrics.render();
        assert!(
            page.contains(r#"ari_executor_tasks_total{agent="broken",namespace="demo",phase="Failed",reason="HostError"} 1"#),
            "{page}"
        );
        // Its module is not held: it takes no room from its neighbours.
        assert!(lock(&pool.held).is_empty());
    }

    #[tokio::test]
    async fn an_agent_whose_pull_secret_is_missing_fails_its_tasks_and_one_with_storage_waits_for_redis()
     {
        let (client, log) = mock_client(|method, path, body| match method {
            "PUT" if path.ends_with("/tasks/t1/status") => (200, body.clone()),
            _ => status(404, "NotFound"),
        });
        // Handed the Secret, but its variable is empty (the Secret was gone when the pod began).
        let pulls = json!([{"secretRef": {"name": "reg", "key": ".dockerconfigjson"},
                            "keyEnv": "ARI_PULL_SECRET_0"}])
        .to_string();
        let mut broken = agent("broken", "sha256:00");
        broken.spec.module = serde_json::from_value(json!({
            "image": "r.example/echo:v1", "imagePullSecrets": [{"name": "reg"}]}))
        .unwrap_or_else(|e| panic!("module: {e}"));
        let mut storing = agent("storing", "sha256:01");
        storing.spec.capabilities.storage = Some(
            serde_json::from_value(json!({"maxBytes": 1024}))
                .unwrap_or_else(|e| panic!("grant: {e}")),
        );
        let pool = pool_with(
            "256",
            client,
            &[(ari_crds::pool::PULL_SECRETS_ENV, &pulls)],
            [broken, storing],
        );
        give(&pool, task("t1", "broken", None)).await;
        give(&pool, task("t2", "storing", None)).await;
        let written = written_status(&log, "t1").await;
        assert_eq!(written["status"]["reason"], "HostError");
        let message = written["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("reg") && message.contains("ARI_PULL_SECRET_0"),
            "{message}"
        );
        // Without Redis no pod hosts the storing Agent: its Task waits, failed by none.
        let hosts = lock(&pool.hosted);
        assert_eq!(
            started(&hosts, "storing"),
            None,
            "hosted on an embedded store"
        );
        assert_eq!(
            hosts.agents.get("storing").map(|h| h.backlog.len()),
            Some(1)
        );
        assert!(crate::worker::testutil::find(&log, "PUT", "/tasks/t2/status").is_empty());
    }

    #[tokio::test]
    async fn a_declarative_agents_worker_is_rebuilt_when_its_resolved_declaration_changes() {
        let pool = pool();
        give(&pool, task("t1", "declared", None)).await;
        let built = |pool: &Pool| {
            let hosts = lock(&pool.hosted);
            let h = hosts.agents.get("declared");
            let r = h.and_then(|h| h.built_for.clone());
            (r.and_then(|r| r.declaration), h.map(|h| h.stop.subscribe()))
        };
        let (declaration, first) = built(&pool);
        assert_eq!(declaration.as_deref(), Some("sha256:d1"));
        pool.changed(&declared("sha256:d1"));
        assert_eq!(
            first.as_ref().map(|s| *s.borrow()),
            Some(false),
            "the same declaration rebuilt it"
        );
        // The operator resolved an edited prompt: the worker of the old one takes no more.
        pool.changed(&declared("sha256:d2"));
        assert_eq!(
            first.as_ref().map(|s| *s.borrow()),
            Some(true),
            "the old one kept on"
        );
        let (declaration, _) = built(&pool);
        assert_eq!(declaration.as_deref(), Some("sha256:d2"));
        assert_eq!(
            lock(&pool.hosted)
                .agents
                .get("declared")
                .map(|h| h.backlog.len()),
            Some(1),
            "its Task was dropped"
        );
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

    /// Offers `t` to the pool as its Task watch would.
    async fn give(pool: &Pool, t: DynamicObject) {
        let (cancels, live) = (Cancels::default(), LiveLogs::new(Default::default()));
        let cx = feed::Context {
            peers: &pool.peers,
            metrics: &pool.shared.metrics,
            cancels: &cancels,
            live: &live,
        };
        let api = feed::dynamic_tasks(pool.shared.client.clone(), "demo");
        feed::offer(&api, &t, pool, &cx).await;
    }

    /// Makes room as the pod's loop does when told, until `done` holds (or fails the test
    /// after a deadline).
    async fn settle(pool: &Pool, done: impl Fn(&Hosts) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            pool.make_room();
            if done(&lock(&pool.hosted)) {
                return;
            }
            if tokio::time::timeout_at(deadline, pool.room.notified())
                .await
                .is_err()
            {
                panic!("not settled within 10 s");
            }
        }
    }

    fn started(hosts: &Hosts, name: &str) -> Option<String> {
        let h = hosts.agents.get(name)?;
        h.built_for.as_ref().map(|r| r.digest.clone())
    }

    #[tokio::test]
    async fn past_the_hot_bound_an_agent_waits_with_its_task_and_starts_once_the_first_goes_idle() {
        let pool = pool_of("1");
        give(&pool, task("t1", "pooled", None)).await;
        give(&pool, task("t2", "other", None)).await;
        {
            let hosts = lock(&pool.hosted);
            assert_eq!(started(&hosts, "pooled").as_deref(), Some("sha256:00"));
            assert_eq!(
                started(&hosts, "other"),
                None,
                "a second module passed the bound"
            );
            assert_eq!(hosts.waiting, ["other"]);
        }
        assert_eq!(pool.shared.metrics.pool_waiting_agents.get(), 1);
        // The idle-Agent eviction leaves a waiting Agent and its Task alone.
        pool.evict_cold();
        pool.make_room();
        {
            let hosts = lock(&pool.hosted);
            let other = hosts.agents.get("other");
            assert_eq!(
                other.map(|h| h.backlog.len()),
                Some(1),
                "its Task was dropped"
            );
            assert_eq!(hosts.waiting, ["other"], "a busy Agent was let go");
        }
        // The first Agent's Task goes: it is idle, let go, and its module freed.
        pool.remove("pooled", "t1");
        settle(&pool, |hosts| started(hosts, "other").is_some()).await;
        let hosts = lock(&pool.hosted);
        assert_eq!(started(&hosts, "other").as_deref(), Some("sha256:01"));
        assert!(
            !hosts.agents.contains_key("pooled"),
            "the idle Agent stayed"
        );
        assert!(hosts.waiting.is_empty());
        assert_eq!(hosts.agents.get("other").map(|h| h.backlog.len()), Some(1));
        assert_eq!(lock(&pool.held).keys().collect::<Vec<_>>(), ["sha256:01"]);
        assert_eq!(pool.shared.metrics.pool_waiting_agents.get(), 0);
    }

    #[tokio::test]
    async fn an_agent_deleted_while_waiting_leaves_the_queue() {
        let pool = pool_of("1");
        give(&pool, task("t1", "pooled", None)).await;
        give(&pool, task("t2", "other", None)).await;
        assert_eq!(pool.shared.metrics.pool_waiting_agents.get(), 1);
        pool.gone("other");
        let hosts = lock(&pool.hosted);
        assert!(hosts.waiting.is_empty());
        assert!(!hosts.agents.contains_key("other"));
        assert_eq!(pool.shared.metrics.pool_waiting_agents.get(), 0);
    }

    #[test]
    fn waiting_agents_start_first_come_first_served_within_the_bound_and_idle_modules_make_room() {
        let t0 = Instant::now();
        let module = |digest: &str, agents: &[&'static str], idle, s: u64| HeldModule {
            digest: digest.to_owned(),
            agents: agents.to_vec(),
            idle,
            last_used: (!agents.is_empty()).then(|| t0 + Duration::from_secs(s)),
        };
        let wait = |name, digest| Waiting {
            name,
            digest: Some(digest),
            tasks: 1,
        };
        let busy_a = || vec![module("a", &["A"], false, 0)];
        let idle_a_c = || {
            vec![
                module("a", &["A1", "A2"], true, 5),
                module("c", &["C"], true, 1),
            ]
        };
        type Row = (
            &'static str,
            usize,
            Vec<HeldModule<'static>>,
            Vec<Waiting<'static>>,
        );
        let table: Vec<(Row, &[&str], &[&str])> = vec![
            (
                (
                    "under the bound, the first waiting starts",
                    2,
                    busy_a(),
                    vec![wait("w1", "b")],
                ),
                &["w1"],
                &[],
            ),
            (
                (
                    "a module held already is shared, whatever the bound",
                    1,
                    busy_a(),
                    vec![wait("w1", "a")],
                ),
                &["w1"],
                &[],
            ),
            (
                (
                    "full of busy modules, nobody starts and nobody is let go",
                    1,
                    busy_a(),
                    vec![wait("w1", "b")],
                ),
                &[],
                &[],
            ),
            (
                (
                    "full, the least recently used idle module goes; the waiting one starts after",
                    2,
                    idle_a_c(),
                    vec![wait("w1", "b")],
                ),
                &[],
                &["C"],
            ),
            (
                (
                    "each module the queue lacks frees one, however many Agents want it",
                    2,
                    idle_a_c(),
                    vec![wait("w1", "b"), wait("w2", "d"), wait("w3", "b")],
                ),
                &[],
                &["C", "A1", "A2"],
            ),
            (
                (
                    "once one waits, a later Agent of a held module waits behind it",
                    1,
                    busy_a(),
                    vec![wait("w1", "b"), wait("w2", "a")],
                ),
                &[],
                &[],
            ),
            (
                (
                    "a module on its way out is room coming: no idle one goes for it",
                    2,
                    vec![module("x", &[], false, 0), module("c", &["C"], true, 1)],
                    vec![wait("w1", "b")],
                ),
                &[],
                &[],
            ),
            (
                (
                    "a module a waiting Agent wants is not let go",
                    2,
                    idle_a_c(),
                    vec![wait("w1", "b"), wait("w2", "c")],
                ),
                &[],
                &["A1", "A2"],
            ),
            (
                (
                    "an Agent with no Task or no resolved module is passed over",
                    2,
                    busy_a(),
                    vec![
                        Waiting {
                            name: "empty",
                            digest: Some("b"),
                            tasks: 0,
                        },
                        Waiting {
                            name: "unresolved",
                            digest: None,
                            tasks: 3,
                        },
                        wait("w1", "c"),
                    ],
                ),
                &["w1"],
                &[],
            ),
        ];
        for ((why, bound, held, waiting), start, evict) in table {
            let got = plan(&held, waiting.into_iter(), bound);
            let want = Plan {
                start: start.iter().map(|s| (*s).to_owned()).collect(),
                evict: evict.iter().map(|s| (*s).to_owned()).collect(),
            };
            assert_eq!(got, want, "{why}");
        }
    }
}
