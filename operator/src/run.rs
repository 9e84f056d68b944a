//! The operator's process: leader election, the Agent and Task controllers, the caches they
//! read, metrics and health endpoints, and an orderly stop on SIGTERM or lost leadership.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::names;
use ari_crds::plan_view::LABEL_PLAN_UID;
use ari_crds::{Agent, ExecutorPool, MCPServer, ModelConfig, Plan, Task};
use futures::channel::mpsc::UnboundedReceiver;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, controller, reflector, reflector::Store, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{error, info};

use crate::config::Config;
use crate::context::Context;
use crate::error::Error;
use crate::health::{self, Health};
use crate::leader::{LeaderElector, LeaseConfig};
use crate::metrics::Metrics;
use crate::plan::controller::PlanContext;
use crate::pool::grants::{self as pool_grants, PoolWake};
use crate::task::controller::{Seen, TaskContext};
use crate::{agent, cache, plan, task};
use ari_crds::decode;

/// Agents per page of the Agent list: a page is held whole while it is decoded, and an Agent
/// can be ≈ 500 KB (the default page of 500 could take 250 MB before any is trimmed).
const AGENT_LIST_PAGE: u32 = 50;

/// Agent reconciles at once. Each may hold a module's ConfigMap (up to 1 MiB, several copies
/// while it is decoded and checked) and an Agent read afresh; unbounded, as kube-runtime's
/// default is, 10,000 Agents applied together held all of theirs at once. None waits on a
/// registry (`agent::lookup`), so one namespace's slow registries cannot hold these places.
pub(crate) const AGENT_RECONCILES: u16 = 32;

/// The label of the executor Deployments and pods the operator makes.
const EXECUTOR_LABEL: &str = "app.kubernetes.io/name=ari-executor";

/// Runs the operator until SIGTERM (`Ok`) or lost leadership (`Err(LostLeadership)`, so the pod
/// restarts as a fresh candidate).
pub async fn run(cfg: Config, client: Client) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::new()?);
    let health = Arc::new(Health::default());
    let stop = stop_on_signal();
    let server = tokio::spawn(health::serve(
        cfg.metrics_addr,
        health::router(metrics.clone(), health.clone()),
        wait_true(stop.clone()),
    ));
    let identity = identity(&cfg);
    let election = Election::start(&cfg, &client, &identity);
    // A standby is healthy and ready to take over.
    health.set_ready(true);

    if !election.leading_before(stop.clone()).await {
        return finish(server, election, false).await;
    }
    info!(%identity, "leading: starting controllers");
    let lost_it = lead(&cfg, client, metrics, identity, &election, stop).await?;
    finish(server, election, lost_it).await
}

/// A watch that turns true on SIGTERM (or Ctrl-C).
fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    stop_rx
}

/// This candidate's name in the Lease: the configured one, else the pod's host name.
fn identity(cfg: &Config) -> String {
    cfg.identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "ari-operator".into())
}

/// The leader election, running: whether we lead, and the switch that releases the Lease.
struct Election {
    task: tokio::task::JoinHandle<()>,
    leading: watch::Receiver<bool>,
    /// Set once the controllers have stopped (or never started): the election then releases
    /// the Lease, so a standby takes over in one round instead of after its expiry.
    done: watch::Sender<bool>,
}

impl Election {
    fn start(cfg: &Config, client: &Client, identity: &str) -> Self {
        let elector = LeaderElector::new(
            Api::<Lease>::namespaced(client.clone(), &cfg.lease_namespace),
            LeaseConfig {
                name: cfg.lease_name.clone(),
                identity: identity.to_owned(),
                lease_duration: Duration::from_secs(15),
                renew_every: Duration::from_secs(5),
            },
        );
        let (lead_tx, leading) = watch::channel(false);
        let (done, done_rx) = watch::channel(false);
        let task = tokio::spawn(elector.run(lead_tx, done_rx));
        Self {
            task,
            leading,
            done,
        }
    }

    /// Waits until we lead (`true`) or `stop` is set first (`false`).
    async fn leading_before(&self, mut stop: watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = wait_true(self.leading.clone()) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        !*stop.borrow()
    }

    /// A watch that turns true on `stop` or when leadership is lost, and whether it was lost.
    fn stop_controllers(
        &self,
        mut stop: watch::Receiver<bool>,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<bool>) {
        let mut leading = self.leading.clone();
        let (ctl_stop_tx, ctl_stop_rx) = watch::channel(false);
        let lost = tokio::spawn(async move {
            let lost_it = tokio::select! {
                _ = leading.wait_for(|l| !*l) => true,
                _ = stop.wait_for(|s| *s) => false,
            };
            let _ = ctl_stop_tx.send(true);
            lost_it
        });
        (ctl_stop_rx, lost)
    }
}

/// Runs the controllers, and the caches they read, until `stop` or lost leadership; `true`
/// when leadership was lost.
async fn lead(
    cfg: &Config,
    client: Client,
    metrics: Arc<Metrics>,
    identity: String,
    election: &Election,
    stop: watch::Receiver<bool>,
) -> Result<bool, Error> {
    let settings = cfg.settings();
    let registry = Arc::new(crate::agent::image::registry_client(&settings)?);
    let ctx = Arc::new(Context::new(
        client.clone(),
        settings,
        metrics.clone(),
        Some(identity),
        registry,
    ));
    let (ctl_stop, lost_leadership) = election.stop_controllers(stop);
    let (pool_wake, pools_woken) = PoolWake::new();
    let (agent_ctl, agents) =
        agent_controller(cfg, &client, &metrics, (ctx.clone(), pool_wake), &ctl_stop);
    let (pod_cache, pods) = pod_cache(cfg, &client);
    let (task_ctl, tasks) = task_controller(
        cfg,
        &client,
        &metrics,
        ctx.clone(),
        (agents.clone(), pods),
        &ctl_stop,
    );
    let pool_ctl = pool_controller(
        cfg,
        &client,
        ctx.clone(),
        (agents.clone(), pools_woken),
        ctl_stop.clone(),
    );
    let plan_ctl = plan_controller(
        cfg,
        client.clone(),
        &metrics,
        ctx.clone(),
        agents,
        &ctl_stop,
    );
    let model_ctl = model_config_controller(cfg, client.clone(), ctx.clone(), ctl_stop.clone())?;
    let tool_ctl = mcp_server_controller(cfg, client, ctx, ctl_stop)?;
    let gauges = tokio::spawn(task_gauges(tasks, metrics));

    tokio::join!(agent_ctl, task_ctl, plan_ctl, pool_ctl, model_ctl, tool_ctl);
    gauges.abort();
    pod_cache.abort();
    Ok(lost_leadership.await.unwrap_or(false))
}

/// `K`s of the operator's namespace, or of all namespaces.
fn scoped<K>(cfg: &Config, client: &Client) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match &cfg.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The Agent controller, and the Agent cache every controller reads. Agents and Tasks are
/// written by namespace users: each object is decoded on its own so one that does not fit the
/// types is skipped instead of failing every list (issue 13, item 3), and only what decisions
/// read is cached (issue 26, item 9). `pool_wake` sees every event, to wake the pools whose
/// Agents joined, left or changed their grants.
fn agent_controller(
    cfg: &Config,
    client: &Client,
    metrics: &Metrics,
    (ctx, pool_wake): (Arc<Context>, PoolWake),
    stop: &watch::Receiver<bool>,
) -> (impl Future<Output = ()> + use<>, Store<Agent>) {
    let (agent_store, agent_writer) = reflector::store();
    let agent_events = decode::watch::<Agent>(
        client.clone(),
        cfg.namespace.clone(),
        watcher::Config::default().page_size(AGENT_LIST_PAGE),
        metrics.count_skipped(),
    )
    .modify(cache::trim_agent)
    .inspect_ok(move |event| pool_wake.observe(event))
    .reflect(agent_writer)
    .applied_objects();
    // A change to a namespace's attestation key copy wakes that namespace's Agents, whose
    // reconcile re-asserts the copy (issue 13, item 10). Only that name is watched (RBAC
    // grants list/watch on it alone).
    let agents_of_ns = agent_store.clone();
    let agents_granting = agent_store.clone();
    let agents_granting_tools = agent_store.clone();
    let agents_pooled = agent_store.clone();
    // An image lookup's new answer wakes the Agents of its namespace and reference: their
    // reconcile returned without waiting for the registry (`agent::lookup`).
    let agents_using = agent_store.clone();
    let lookups_ended = futures::stream::iter(ctx.images.woken())
        .flatten()
        .flat_map(move |woken| {
            futures::stream::iter(agent::lookup::agents_to_wake(&agents_using.state(), &woken))
        });
    let controller = Controller::for_stream(agent_events, agent_store.clone())
        .reconcile_on(lookups_ended)
        .watches(
            scoped::<Secret>(cfg, client),
            watcher::Config::default()
                .fields(&format!("metadata.name={}", names::ATTESTATION_SECRET)),
            move |secret: Secret| {
                let ns = secret.metadata.namespace.unwrap_or_default();
                agents_of_ns
                    .state()
                    .into_iter()
                    .filter(|a| a.metadata.namespace.as_deref() == Some(ns.as_str()))
                    .map(|a| ObjectRef::from_obj(a.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        // A ModelConfig's change (created, endpoint moved, credentials renamed) reaches the
        // executors of the Agents granting it: their pod template carries its spec.
        .watches(
            scoped::<ModelConfig>(cfg, client),
            watcher::Config::default(),
            move |mc: ModelConfig| {
                let ns = mc.metadata.namespace.unwrap_or_default();
                let name = mc.metadata.name.unwrap_or_default();
                agents_granting
                    .state()
                    .into_iter()
                    .filter(|a| {
                        a.metadata.namespace.as_deref() == Some(ns.as_str())
                            && a.spec
                                .capabilities
                                .models
                                .as_ref()
                                .is_some_and(|m| m.allowed.contains(&name))
                    })
                    .map(|a| ObjectRef::from_obj(a.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        // An MCPServer's change reaches the executors of the Agents granting it likewise.
        .watches(
            scoped::<MCPServer>(cfg, client),
            watcher::Config::default(),
            move |server: MCPServer| {
                let ns = server.metadata.namespace.unwrap_or_default();
                let name = server.metadata.name.unwrap_or_default();
                agents_granting_tools
                    .state()
                    .into_iter()
                    .filter(|a| {
                        a.metadata.namespace.as_deref() == Some(ns.as_str())
                            && a.spec
                                .capabilities
                                .tools
                                .as_ref()
                                .is_some_and(|t| t.servers.iter().any(|s| s.name == name))
                    })
                    .map(|a| ObjectRef::from_obj(a.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        // A pool's readiness is its Agents' readiness: they are woken when it changes.
        .watches_stream(
            {
                let mut seen = crate::pool::controller::PoolsSeen::default();
                watcher(
                    scoped::<ExecutorPool>(cfg, client),
                    watcher::Config::default(),
                )
                .default_backoff()
                .filter_map(move |e| {
                    futures::future::ready(match e {
                        Ok(event) => seen.wakes(event).map(Ok),
                        Err(e) => Some(Err(e)),
                    })
                })
            },
            move |pool: ExecutorPool| {
                let ns = pool.metadata.namespace.unwrap_or_default();
                let name = pool.metadata.name.unwrap_or_default();
                agents_pooled
                    .state()
                    .into_iter()
                    .filter(|a| {
                        a.metadata.namespace.as_deref() == Some(ns.as_str())
                            && a.spec.executor.pool.as_deref() == Some(name.as_str())
                    })
                    .map(|a| ObjectRef::from_obj(a.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .owns(
            scoped::<Deployment>(cfg, client),
            watcher::Config::default().labels(EXECUTOR_LABEL),
        )
        .with_config(controller::Config::default().concurrency(AGENT_RECONCILES))
        .graceful_shutdown_on(wait_true(stop.clone()))
        .run(
            agent::controller::reconcile,
            agent::controller::error_policy,
            ctx,
        )
        .for_each(|_| async {});
    (controller, agent_store)
}

/// The executor pods' cache (the Task controller reads it), kept until aborted.
fn pod_cache(cfg: &Config, client: &Client) -> (tokio::task::JoinHandle<()>, Store<Pod>) {
    let (pod_store, pod_writer) = reflector::store();
    let pods = watcher(
        scoped::<Pod>(cfg, client),
        watcher::Config::default().labels(EXECUTOR_LABEL),
    )
    .default_backoff()
    .modify(cache::trim_pod)
    .reflect(pod_writer)
    .for_each(|_| async {});
    (tokio::spawn(pods), pod_store)
}

/// The Task controller, and the Task cache (the gauges read it). Decisions on a Task read the
/// Agent and pod caches: it starts only once both have listed everything, or a cold cache
/// would look like a missing Agent.
fn task_controller(
    cfg: &Config,
    client: &Client,
    metrics: &Metrics,
    ctx: Arc<Context>,
    (agents, pods): (Store<Agent>, Store<Pod>),
    stop: &watch::Receiver<bool>,
) -> (impl Future<Output = ()> + use<>, Store<Task>) {
    let (task_store, task_writer) = reflector::store();
    let children = Arc::new(task::children::ChildIndex::default());
    let index = children.clone();
    let task_events = decode::watch::<Task>(
        client.clone(),
        cfg.namespace.clone(),
        watcher::Config::default(),
        metrics.count_skipped(),
    )
    .modify(cache::trim_task)
    .inspect_ok(move |event| index.observe(event))
    .reflect(task_writer)
    .applied_objects();
    let controller = Controller::for_stream(task_events, task_store.clone())
        .graceful_shutdown_on(wait_true(stop.clone()));
    let task_ctx = Arc::new(TaskContext {
        base: ctx,
        seen: Seen::default(),
        announced: Seen::default(),
        labelled: Seen::default(),
        started: k8s_openapi::jiff::Timestamp::now(),
        agents: agents.clone(),
        pods: pods.clone(),
        tasks: task_store.clone(),
        children,
    });
    let run = async move {
        if agents.wait_until_ready().await.is_err() || pods.wait_until_ready().await.is_err() {
            error!("agent or pod cache closed before it was ready");
            return;
        }
        controller
            .run(
                task::controller::reconcile,
                task::controller::error_policy,
                task_ctx,
            )
            .for_each(|_| async {})
            .await;
    };
    (run, task_store)
}

/// The Plan controller, woken by its Plans and by changes to the Tasks they own (only Tasks
/// labelled with a Plan's uid are watched), deciding from the cache of those Tasks. Both
/// caches are trimmed before they store anything: a Plan to what a pass reads
/// ([`plan::observe::trim_plan`]), a Task to its state and digests
/// ([`plan::observe::trim_plan_task`]), so no input, output or attestation is kept.
/// Validation reads the Agent cache: it starts only once that has listed everything. The Plan
/// Task cache is filled by the controller's own watch, so waiting for it would never end; a
/// recorded Task it does not have yet is looked up by a metadata read and counts as Pending
/// until its watch event arrives and wakes the Plan again.
fn plan_controller(
    cfg: &Config,
    client: Client,
    metrics: &Metrics,
    ctx: Arc<Context>,
    agents: Store<Agent>,
    stop: &watch::Receiver<bool>,
) -> impl Future<Output = ()> + use<> {
    let (plan_store, plan_writer) = reflector::store();
    let plan_events = decode::watch::<Plan>(
        client.clone(),
        cfg.namespace.clone(),
        watcher::Config::default(),
        metrics.count_skipped(),
    )
    .modify(plan::observe::trim_plan)
    .reflect(plan_writer)
    .applied_objects();
    let (task_store, task_writer) = reflector::store();
    let step_tasks = decode::watch::<Task>(
        client,
        cfg.namespace.clone(),
        watcher::Config::default().labels(LABEL_PLAN_UID),
        metrics.count_skipped(),
    )
    .modify(plan::observe::trim_plan_task)
    .reflect(task_writer)
    .applied_objects();
    let controller = Controller::for_stream(plan_events, plan_store)
        .owns_stream(step_tasks)
        .graceful_shutdown_on(wait_true(stop.clone()));
    let plan_ctx = Arc::new(PlanContext::new(ctx, agents.clone(), task_store));
    async move {
        if agents.wait_until_ready().await.is_err() {
            error!("agent cache closed before it was ready");
            return;
        }
        controller
            .run(
                plan::controller::reconcile,
                plan::controller::error_policy,
                plan_ctx,
            )
            .for_each(|_| async {})
            .await;
    }
}

/// The objects of kind `K` in scope, cached as they change: the store a controller reads and
/// the applied objects that wake it.
fn cached<K>(
    cfg: &Config,
    client: Client,
    metrics: &Metrics,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + use<K>,
)
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone,
    K: std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = decode::watch::<K>(
        client,
        cfg.namespace.clone(),
        watcher::Config::default(),
        metrics.count_skipped(),
    )
    .reflect(writer)
    .applied_objects();
    (store, events)
}

/// The ModelConfig controller, probing at most a few endpoints at once (each probe holds up
/// to `MAX_LIST_BYTES` of an answer).
fn model_config_controller(
    cfg: &Config,
    client: Client,
    ctx: Arc<Context>,
    stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = ()> + Send + use<>, Error> {
    use crate::model_config::controller::{self as mc, ModelContext, Prober};
    let (store, events) = cached::<ModelConfig>(cfg, client, &ctx.metrics);
    let model_ctx = Arc::new(ModelContext {
        base: ctx,
        prober: Prober::new(&cfg.model_probe_internal_endpoints)?,
    });
    Ok(Controller::for_stream(events, store)
        .with_config(controller::Config::default().concurrency(mc::MAX_CONCURRENT_PROBES))
        .graceful_shutdown_on(wait_true(stop))
        .run(mc::reconcile, mc::error_policy, model_ctx)
        .for_each(|_| async {}))
}

/// The ExecutorPool controller: each pool's Deployment and status. Woken by its pools, their
/// Deployments, `woken` (pools whose Agents joined, left or changed their grants) and changes
/// to a ModelConfig or MCPServer an Agent of the pool is granted. It starts once the Agent
/// cache has listed everything: a cold cache would take a pool's grants away for one pass.
fn pool_controller(
    cfg: &Config,
    client: &Client,
    ctx: Arc<Context>,
    (agents, woken): (Store<Agent>, UnboundedReceiver<ObjectRef<ExecutorPool>>),
    stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + use<> {
    use crate::pool::controller::{self as pc, PoolContext};
    let (store, events) = cached::<ExecutorPool>(cfg, client.clone(), &ctx.metrics);
    let (granting_model, granting_tool) = (agents.clone(), agents.clone());
    let controller = Controller::for_stream(events, store)
        .owns(
            scoped::<Deployment>(cfg, client),
            watcher::Config::default().labels(EXECUTOR_LABEL),
        )
        .reconcile_on(woken)
        .watches(
            scoped::<ModelConfig>(cfg, client),
            watcher::Config::default(),
            move |mc: ModelConfig| {
                let (ns, name) = (mc.namespace().unwrap_or_default(), mc.name_any());
                pool_grants::pools_granting(&granting_model.state(), &ns, |g| {
                    g.models.contains(&name)
                })
            },
        )
        .watches(
            scoped::<MCPServer>(cfg, client),
            watcher::Config::default(),
            move |server: MCPServer| {
                let (ns, name) = (server.namespace().unwrap_or_default(), server.name_any());
                pool_grants::pools_granting(&granting_tool.state(), &ns, |g| {
                    g.tools.contains(&name)
                })
            },
        )
        .graceful_shutdown_on(wait_true(stop));
    let pool_ctx = Arc::new(PoolContext {
        base: ctx,
        agents: agents.clone(),
    });
    async move {
        if agents.wait_until_ready().await.is_err() {
            error!("agent cache closed before it was ready");
            return;
        }
        controller
            .run(pc::reconcile, pc::error_policy, pool_ctx)
            .for_each(|_| async {})
            .await;
    }
}

/// The MCPServer controller, listing at most a few servers' tools at once.
fn mcp_server_controller(
    cfg: &Config,
    client: Client,
    ctx: Arc<Context>,
    stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = ()> + Send + use<>, Error> {
    use crate::mcp_server::controller::{self as ms, Prober, ToolServerContext};
    let (store, events) = cached::<MCPServer>(cfg, client, &ctx.metrics);
    let tool_ctx = Arc::new(ToolServerContext {
        base: ctx,
        prober: Prober::new(&cfg.tool_probe_internal_endpoints)?,
    });
    Ok(Controller::for_stream(events, store)
        .with_config(controller::Config::default().concurrency(ms::MAX_CONCURRENT_PROBES))
        .graceful_shutdown_on(wait_true(stop))
        .run(ms::reconcile, ms::error_policy, tool_ctx)
        .for_each(|_| async {}))
}

/// Ends the election (which releases the Lease if ours), stops the HTTP server; exits
/// non-zero after lost leadership so the pod restarts as a fresh candidate.
async fn finish(
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    election: Election,
    lost_leadership: bool,
) -> Result<(), Error> {
    let _ = election.done.send(true);
    // Bounded: a hung API call must not keep the pod past its grace period.
    if tokio::time::timeout(Duration::from_secs(10), election.task)
        .await
        .is_err()
    {
        error!("releasing the lease timed out");
    }
    server.abort();
    if lost_leadership {
        return Err(Error::LostLeadership);
    }
    info!("stopped");
    Ok(())
}

/// Refreshes the tasks-by-phase-and-reason gauge from the controller's cache.
async fn task_gauges(store: Store<Task>, metrics: Arc<Metrics>) {
    loop {
        metrics.tasks.reset();
        for t in store.state() {
            let reason = t
                .status
                .as_ref()
                .and_then(|s| s.reason)
                .map(|r| r.as_str())
                .unwrap_or("");
            metrics
                .tasks
                .with_label_values(&[t.phase().as_str(), reason])
                .inc();
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

async fn wait_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
