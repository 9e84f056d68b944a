//! `ari worker`: what an executor pod runs, for one Agent or for an `ExecutorPool`.
//!
//! A dedicated pod loads its Agent's component once (compile or artifact cache), then watches
//! only its Agent's Tasks (field selector on `spec.agentRef.name`), claims each with a
//! resourceVersion-guarded status write, runs up to `concurrency` at once on blocking threads,
//! and writes each final status in one write. A pool pod does the same for every Agent naming
//! its pool, one [`Worker`] per Agent loaded when its first Task arrives (see [`pool`]). On
//! SIGTERM it stops claiming and finishes what it runs. The operator is not on this path. See
//! docs/operator.md for the claim protocol.

mod approvals;
mod backlog;
mod cancels;
mod children;
mod config;
mod conversation;
mod convert;
mod cpu;
mod declarative;
mod error;
mod feed;
mod gate;
mod items;
mod lifecycle;
mod livelog;
mod metrics;
mod model_shares;
pub(crate) mod models;
pub(crate) mod module;
mod oci;
mod output;
mod parent;
mod peers;
mod pool;
mod replicas;
mod secrets;
mod serve;
mod slots;
mod status;
mod storage;
mod taps;
mod tools;
#[cfg(test)]
use ari_testkit::mock_api as testutil;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ari_crds::Task;
use ed25519_dalek::SigningKey;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

pub use config::WorkerConfig;
pub use error::{ConfigError, KeyMismatch, ModuleError, WorkerError};

use ari_runtime::capability::{Grants, LoadedModels, LoadedSigningKey, LoadedTools};
use ari_runtime::{Runtime, RuntimeConfig};
use backlog::Backlog;
use metrics::Metrics;
use peers::Peers;
use slots::Slots;
use storage::AgentStorage;

/// Shared by every task this executor handles.
pub struct Worker {
    client: Client,
    tasks: Api<Task>,
    config: WorkerConfig,
    agent: ari_crds::Agent,
    runtime_agent: ari_runtime::LoadedAgent,
    grants: Grants,
    /// What every task's `initialize` gets: `spec.config`, or the resolved declaration.
    agent_config: Vec<u8>,
    storage: AgentStorage,
    attestation_key: Arc<SigningKey>,
    /// Its Agent's share of the pod's metrics: its series go with its last worker.
    metrics: metrics::AgentMetrics,
    /// Its Agent's share of the pod's CPU: the priority its guests run at (see [`cpu`]).
    cpu: Arc<cpu::AgentShare>,
    backlog: Arc<Backlog>,
    /// Claim, heartbeat, output and final writes (see [`status`]).
    writer: status::Writer,
    /// Cancel tokens of the runs under way (see [`cancels`]).
    cancels: Arc<cancels::Cancels>,
    /// Which runs are followed by a stream, and the pod's live-log write budget.
    live: Arc<livelog::LiveLogs>,
    /// Running slots, and room for parents parked while their children run (see [`slots`]).
    slots: Arc<Slots>,
    /// Tasks being handled now (a pool evicts only an idle Agent).
    active: Arc<AtomicUsize>,
    /// In a pool pod, told when a Task's handling ends (see [`Shared::room`]).
    room: Option<Arc<tokio::sync::Notify>>,
}

/// What every Agent served by one process shares.
#[derive(Clone)]
struct Shared {
    client: Client,
    metrics: Arc<Metrics>,
    cancels: Arc<cancels::Cancels>,
    /// Live logs, and the pod's live-log write budget.
    live: Arc<livelog::LiveLogs>,
    attestation_key: Arc<SigningKey>,
    /// A pool pod's one engine, which every Agent's module is loaded into; a dedicated pod
    /// makes its own, sized for its Agent.
    runtime: Option<Runtime>,
    /// In a pool pod, its running places and parking room, shared by all its Agents: a Task
    /// takes a place beside its Agent's own slot (see [`slots`]).
    pod_capacity: Option<slots::PodCapacity>,
    /// A pool pod's loaded modules by digest: Agents of one module share one compiled
    /// component, fetched and loaded once (see [`pool`]).
    modules: Option<Arc<std::sync::Mutex<ModuleCache>>>,
    /// In a pool pod, told when a Task's handling ends: its Agent may have gone idle, so it
    /// can make room for an Agent waiting under the hot bound (see [`pool`]).
    room: Option<Arc<tokio::sync::Notify>>,
    /// In a pool pod, its models with their rate limiters, one per model whichever hosted
    /// Agent calls it; each Agent is handed those its spec grants.
    pod_models: Option<PodModels>,
}

/// A pool pod's models (all its Agents' grants together), behind one model client, each with
/// the pod's one limiter (see [`model_shares`]).
#[derive(Clone)]
struct PodModels {
    client: ari_llm::Client,
    models: Vec<ari_llm::Model>,
}

impl PodModels {
    /// The pod's models, their limiters following the namespace's Agents; the answer turns
    /// true once the first listing of them is applied.
    fn load(
        client: &Client,
        config: &WorkerConfig,
    ) -> Result<(Self, tokio::sync::watch::Receiver<bool>), WorkerError> {
        let (models, shares) = config.models.limited(1);
        let listed = shares.follow(
            client.clone(),
            &config.namespace,
            config.redis_url.is_some(),
        );
        let client = model_client()?;
        Ok((Self { client, models }, listed))
    }

    /// Those of the pod's models `granted` holds: what one hosted Agent may call.
    fn granted(&self, granted: &models::GrantedModels) -> LoadedModels {
        let mine = self
            .models
            .iter()
            .filter(|m| granted.models.iter().any(|g| g.name == m.name))
            .cloned();
        LoadedModels::live(self.client.clone(), mine)
    }
}

/// Loaded components by their SHA-256 (hex).
type ModuleCache = std::collections::HashMap<String, ari_runtime::LoadedAgent>;

/// The component pinned by `config.module_digest`, when this pod has it loaded already.
fn cached_module(
    modules: Option<&Arc<std::sync::Mutex<ModuleCache>>>,
    config: &WorkerConfig,
) -> Option<ari_runtime::LoadedAgent> {
    let digest = config.module_digest.as_deref()?;
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let cache = modules?.lock().ok()?;
    cache.get(hex).cloned()
}

impl Shared {
    fn new(client: Client, metrics: Arc<Metrics>, config: &WorkerConfig) -> Self {
        Self {
            client,
            metrics,
            cancels: Arc::default(),
            live: Arc::new(livelog::LiveLogs::new(config.live_log_rate)),
            attestation_key: Arc::new(config.attestation_key.clone()),
            runtime: None,
            pod_capacity: None,
            modules: None,
            room: None,
            pod_models: None,
        }
    }
}

/// Runs the worker until SIGTERM/SIGINT.
pub async fn run(config: WorkerConfig) -> Result<(), WorkerError> {
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::new().map_err(ConfigError::Metrics)?);
    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let server = {
        let mut rx = stop_rx.clone();
        tokio::spawn(serve::serve(
            config.metrics_addr,
            ready.clone(),
            metrics.clone(),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
        ))
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested: no new claims; finishing running tasks");
        let _ = stop_tx.send(true);
    });

    if config.pool.is_some() {
        let result = pool::serve(client, config, metrics, ready, stop_rx).await;
        let _ = server.await;
        return result;
    }
    let worker = Arc::new(prepare(client, config, metrics, stop_rx.clone()).await?);
    ready.store(true, Ordering::Release);
    info!(agent = %worker.config.agent, digest = %worker.runtime_agent.module_sha256(), "ready");

    let result = worker.clone().serve_tasks(stop_rx).await;
    let _ = server.await;
    result
}

/// A replaced attestation key must sign nothing: stay up and not Ready rather than
/// crash-loop (issue 13, item 10), and leave on SIGTERM.
async fn refuse_replaced_key(
    config: &WorkerConfig,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), WorkerError> {
    if let Some(mismatch) = &config.attestation_key_mismatch {
        let why = ConfigError::AttestationKeyReplaced(mismatch.clone());
        error!(error = %why, "attestation key does not match the operator's; not ready");
        let _ = stop.wait_for(|s| *s).await;
        return Err(why.into());
    }
    Ok(())
}

/// Everything before Ready: the Agent, its module (verified, compiled or cached), grants, storage.
async fn prepare(
    client: Client,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Worker, WorkerError> {
    refuse_replaced_key(&config, &mut stop).await?;
    let agents: Api<ari_crds::Agent> = Api::namespaced(client.clone(), &config.namespace);
    let agent = agents.get(&config.agent).await?;
    let shared = Shared::new(client, metrics, &config);
    let backlog = Arc::new(Backlog::new(config.steal_after));
    build(shared, config, agent, backlog, stop).await
}

/// One Agent's worker: its module fetched, verified and loaded (retried while it cannot be,
/// until `stop`), its grants, storage and slots.
async fn build(
    shared: Shared,
    config: WorkerConfig,
    agent: ari_crds::Agent,
    backlog: Arc<Backlog>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Worker, WorkerError> {
    let Shared {
        client,
        metrics,
        cancels,
        live,
        attestation_key,
        runtime,
        pod_capacity,
        modules,
        room,
        pod_models,
    } = shared;
    // Before the module: a key missing or not a key is the Agent's to fix, said at once.
    let signing_key = match &agent.spec.capabilities.signing {
        Some(s) => Some(LoadedSigningKey::from_key(signing_key(
            &config,
            &s.secret_ref.name,
            &s.secret_ref.key,
        )?)),
        None => None,
    };
    // A pooled Agent's pull secret whose variable is empty is the Agent's to fix, as a key is.
    if let Some((secret, key)) = config.pull_secrets.iter().find(|(_, k)| k.text.is_none()) {
        return Err(ConfigError::PullSecretMissing {
            secret: secret.name.clone(),
            var: key.var.to_owned(),
        }
        .into());
    }
    let waiting = slots::waiting_for(
        config.concurrency,
        agent.spec.capabilities.delegation.as_ref().map(|d| {
            d.max_depth
                .unwrap_or(ari_crds::delegation::DEFAULT_MAX_DEPTH)
        }),
        agent.spec.capabilities.may_ask_approval(),
    );
    // A module that cannot be fetched or loaded is bad input (or a passing network fault), not
    // a crash: stay up and not Ready (the Agent shows no available executor), retry now and
    // then, and leave at once on SIGTERM. Exiting instead would crash-loop the pod.
    let (runtime_agent, agent_config) = loop {
        // A download stuck on a slow server must not hold up SIGTERM.
        let loaded = tokio::select! {
            r = async {
                let agent_config = declarative::config(&client, &agent, &config).await?;
                let loaded = match cached_module(modules.as_ref(), &config) {
                    Some(loaded) => loaded,
                    None => {
                        let loaded =
                            load_module(&client, &agent, &config, waiting, runtime.as_ref())
                                .await?;
                        if let Some(Ok(mut cache)) = modules.as_ref().map(|m| m.lock()) {
                            cache.insert(loaded.module_sha256().to_owned(), loaded.clone());
                        }
                        loaded
                    }
                };
                Ok::<_, WorkerError>((loaded, agent_config))
            } => r,
            _ = stop.wait_for(|s| *s) => {
                return Err(ModuleError::Shutdown.into());
            }
        };
        match loaded {
            Ok(a) => break a,
            Err(e) => {
                error!(
                    error = %e,
                    retry_seconds = MODULE_RETRY.as_secs(),
                    "cannot load the Agent's module; not ready"
                );
                tokio::select! {
                    _ = tokio::time::sleep(MODULE_RETRY) => {}
                    _ = stop.wait_for(|s| *s) => return Err(e),
                }
            }
        }
    };
    let stats = runtime_agent.runtime().stats();
    metrics
        .cache_hits
        .set(i64::try_from(stats.cache_hits).unwrap_or(i64::MAX));
    metrics
        .compiles
        .set(i64::try_from(stats.compiles).unwrap_or(i64::MAX));

    // A declaration only adds approvals to the grants (`Declaration::narrow`).
    let capabilities = match &agent.spec.declarative {
        Some(d) => d.narrow(agent.spec.capabilities.clone()),
        None => agent.spec.capabilities.clone(),
    };
    let grants = Grants::load(capabilities, signing_key).map_err(ConfigError::Grants)?;
    let grants = match &agent.spec.capabilities.models {
        Some(_) => grants.with_models(loaded_models(
            &client,
            &config,
            &agent,
            pod_models.as_ref(),
        )?),
        None => grants,
    };
    let grants = match &agent.spec.capabilities.tools {
        Some(_) => grants.with_tools(loaded_tools(&config)?),
        None => grants,
    };
    // Keyed by the Agent's uid: a re-created Agent of the same name starts empty.
    let agent_uid = agent.uid().ok_or(ConfigError::AgentWithoutUid)?;
    let storage = AgentStorage::open(
        agent.spec.capabilities.storage.is_some(),
        config.redis_url.as_deref(),
        &config.state_dir,
        &config.namespace,
        &agent_uid,
    )
    .map_err(ConfigError::Storage)?;

    // Parked parents keep their instances: their memory is bounded by what the pod has left.
    let parked_memory = config.parked_memory_bytes.or_else(|| {
        slots::parking_budget(
            slots::pod_memory_limit(),
            config.concurrency,
            agent.spec.limits.effective().memory_bytes,
        )
    });
    let slots = Slots::new(
        config.concurrency,
        waiting,
        parked_memory,
        pod_capacity,
        stop.clone(),
    );
    let metrics = metrics.agent(&config.namespace, &config.agent);
    let priorities = cpu::for_pod(config.pool.is_some(), config.priorities);
    let cpu = cpu::AgentShare::new(priorities, metrics.background_tasks.clone());
    Ok(Worker {
        writer: status::Writer {
            tasks: Api::namespaced(client.clone(), &config.namespace),
            configmaps: Api::namespaced(client.clone(), &config.namespace),
            pod: config.pod_name.clone(),
            agent: config.agent.clone(),
        },
        tasks: Api::namespaced(client.clone(), &config.namespace),
        client,
        attestation_key,
        backlog,
        live,
        config,
        agent,
        runtime_agent,
        grants,
        agent_config,
        storage,
        metrics,
        cpu,
        cancels,
        slots,
        active: Arc::default(),
        room,
    })
}

/// Pause between attempts to load a module that failed to load.
const MODULE_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Fetches the Agent's component, verifies its digest and compiles it (or loads the cached
/// artifact), into `shared` (a pool pod's engine) or an engine of its own.
async fn load_module(
    client: &Client,
    agent: &ari_crds::Agent,
    config: &WorkerConfig,
    waiting: usize,
    shared: Option<&Runtime>,
) -> Result<ari_runtime::LoadedAgent, WorkerError> {
    let bytes = module::fetch(client, agent, config).await?;
    let runtime = shared.cloned();
    let runtime_config = runtime_config(config, config.concurrency.saturating_add(waiting));
    tokio::task::spawn_blocking(move || {
        let runtime = match runtime {
            Some(r) => r,
            None => Runtime::new(runtime_config)?,
        };
        runtime.load(&bytes)
    })
    .await
    .map_err(ModuleError::LoadTask)?
    .map_err(WorkerError::from)
}

/// An engine whose pool has an instance slot for each of `instances` (running tasks and
/// parked parents), caching compiled artifacts under the pod's cache directory.
fn runtime_config(config: &WorkerConfig, instances: usize) -> RuntimeConfig {
    let mut runtime_config = RuntimeConfig::default();
    runtime_config.engine.pool = ari_runtime::engine::PoolConfig::for_concurrency(instances);
    if let Some(dir) = &config.cache_dir {
        runtime_config.cache_dir = Some(dir.clone());
    }
    runtime_config
}

/// The granted models the operator handed over, behind one model client for the process. A
/// granted name not among them (no ModelConfig, an unmarked Secret, a key the Secret lacks)
/// is answered `unavailable` by the runtime.
///
/// Each rate limit starts as the Agent's own pods' share and then follows the namespace's
/// Agents granted the model (`model_shares`). In a pool pod, the Agent's models are the pod's
/// (`pod`), with the pod's limiters.
fn loaded_models(
    client: &Client,
    config: &WorkerConfig,
    agent: &ari_crds::Agent,
    pod: Option<&PodModels>,
) -> Result<LoadedModels, WorkerError> {
    for name in &config.models.keyless {
        warn!(model = %name, "the model's credentials Secret lacks the key it names; its calls are unavailable");
    }
    if let Some(pod) = pod {
        info!(agent = %config.agent, models = ?config.models, "models handed to a pooled Agent");
        return Ok(pod.granted(&config.models));
    }
    let model_client = model_client()?;
    let redis = config.redis_url.is_some();
    let pods = model_shares::executor_pods(agent, redis);
    info!(models = ?config.models, pods, "models loaded");
    let (models, shares) = config.models.limited(pods);
    let _listed = shares.follow(client.clone(), &config.namespace, redis);
    Ok(LoadedModels::live(model_client, models))
}

/// The client every model call of this process goes through.
fn model_client() -> Result<ari_llm::Client, WorkerError> {
    Ok(
        ari_llm::Client::new(ari_llm::Limits::default(), ari_llm::RetryPolicy::default())
            .map_err(|e| ConfigError::ModelClient(e.to_string()))?,
    )
}

/// The granted MCP servers the operator handed over, behind one MCP client for the process. A
/// granted name not among them (no MCPServer, an unmarked Secret, a key the Secret lacks) is
/// answered `unavailable` by the runtime.
fn loaded_tools(config: &WorkerConfig) -> Result<LoadedTools, WorkerError> {
    for name in &config.tools.without_credentials {
        warn!(server = %name, "the MCP server's credentials Secret lacks a key it names; its calls are unavailable");
    }
    info!(servers = ?config.tools, "tool servers loaded");
    Ok(config.tools.loaded()?)
}

/// The signing grant's key, which the Deployment passes in `ARI_SIGNING_KEY` (a pool's in the
/// `ARI_SIGNING_KEY_<n>` of the Agent's pair) from the Agent's `signing.secretRef` (the
/// executor cannot read Secrets through the API).
fn signing_key(config: &WorkerConfig, name: &str, key: &str) -> Result<SigningKey, WorkerError> {
    let bytes = config
        .signing_key
        .as_deref()
        .ok_or_else(|| ConfigError::SigningKeyMissing {
            secret: name.to_owned(),
            key: key.to_owned(),
            var: config.signing_key_env.clone(),
        })?;
    ari_runtime::attestation::parse_signing_key(bytes.as_bytes()).ok_or_else(|| {
        ConfigError::SigningKeyInvalid {
            secret: name.to_owned(),
            key: key.to_owned(),
        }
        .into()
    })
}

impl Worker {
    async fn serve_tasks(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), WorkerError> {
        let peers = Peers::watch(
            self.client.clone(),
            &self.config.namespace,
            (ari_crds::names::LABEL_AGENT, &self.config.agent),
            &self.config.pod_name,
        );
        let feeder = tokio::spawn(self.clone().feed_backlog(peers.clone()));
        let result = self.claim_loop(peers, stop).await;
        feeder.abort();
        result
    }

    /// Claims and runs this Agent's Tasks from its backlog until `stop`, then waits for the
    /// runs under way.
    async fn claim_loop(
        self: Arc<Self>,
        peers: Peers,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), WorkerError> {
        let mut running = JoinSet::new();
        loop {
            // A free slot first, then a task: a busy executor leaves its peers' tasks to them.
            let Some(slot) = self.slots.acquire().await else {
                break;
            };
            let task = tokio::select! {
                t = self.backlog.next() => t,
                // A parked parent's child ended: its slot comes before new work.
                () = self.slots.wanted_back() => {
                    drop(slot);
                    continue;
                }
                _ = stop.wait_for(|s| *s) => break,
            };
            // Counted from here: a pool never lets go of an Agent with a Task in hand.
            let active = Active::enter(&self.active);
            // In a pool, a place in the pod too: taken only with a task in hand, so idle
            // Agents hold none, and held with the slot (a parked parent lends both). Stopped
            // while waiting (the Agent is rebuilt or the pod stops), the Task goes back to
            // the backlog it came from, unclaimed.
            if !slot.take_place().await {
                self.backlog.retry_later(task);
                break;
            }
            if !self.slots.pooled() {
                self.metrics
                    .pod()
                    .backlog
                    .set(i64::try_from(self.backlog.len()).unwrap_or(i64::MAX));
            }
            while running.try_join_next().is_some() {}
            let me = self.clone();
            let peers = peers.clone();
            let room = self.room.clone();
            running.spawn(async move {
                me.handle(task, slot, &peers).await;
                drop(active);
                if let Some(room) = room {
                    room.notify_one();
                }
            });
        }
        // Drain: every handler back means every running task wrote its status (a parent
        // parked on a child holds no slot, so counting slots would not tell).
        while running.join_next().await.is_some() {}
        if self.slots.pooled() {
            // A pool lets an idle Agent go, or rebuilds it; the pod goes on.
            tracing::debug!(agent = %self.config.agent, "claim loop ended");
        } else {
            info!("all running tasks finished; exiting");
        }
        Ok(())
    }

    /// Keeps the backlog in step with the Agent's Tasks (see [`feed`]).
    async fn feed_backlog(self: Arc<Self>, peers: Peers) {
        let api = feed::dynamic_tasks(self.client.clone(), &self.config.namespace);
        let route = feed::OneAgent(self.backlog.clone());
        let selector = format!("spec.agentRef.name={}", self.config.agent);
        feed::feed(
            api,
            Some(&selector),
            &route,
            &feed::Context {
                peers: &peers,
                metrics: self.metrics.pod(),
                cancels: &self.cancels,
                live: &self.live,
            },
        )
        .await;
    }

    /// Whether no Task of this Agent is being handled or waiting here.
    fn idle(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0 && self.backlog.len() == 0
    }
}

/// One Task being handled, counted in [`Worker::active`] until dropped.
struct Active(Arc<AtomicUsize>);

impl Active {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
