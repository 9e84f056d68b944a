//! The operator's process: leader election, the Agent and Task controllers, the caches they
//! read, metrics and health endpoints, and an orderly stop on SIGTERM or lost leadership.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::names;
use ari_crds::plan_view::LABEL_PLAN_UID;
use ari_crds::{Agent, ModelConfig, Plan, Task};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, controller, reflector, reflector::Store, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{error, info};

use crate::config::Config;
use crate::context::Context;
use crate::error::Error;
use crate::health::{self, Health};
use crate::leader::{LeaderElector, LeaseConfig};
use crate::metrics::Metrics;
use crate::plan::controller::PlanContext;
use crate::task::controller::{Seen, TaskContext};
use crate::{agent, cache, plan, task};
use ari_crds::decode;

/// Agents per page of the Agent list: a page is held whole while it is decoded, and an Agent
/// can be ≈ 500 KB (the default page of 500 could take 250 MB before any is trimmed).
const AGENT_LIST_PAGE: u32 = 50;

/// Runs the operator until SIGTERM (`Ok`) or lost leadership (`Err(LostLeadership)`, so the pod
/// restarts as a fresh candidate).
pub async fn run(cfg: Config, client: Client) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::new()?);
    let health = Arc::new(Health::default());

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });

    let server = tokio::spawn(health::serve(
        cfg.metrics_addr,
        health::router(metrics.clone(), health.clone()),
        wait_true(stop_rx.clone()),
    ));

    let identity = cfg
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "ari-operator".into());
    let elector = LeaderElector::new(
        Api::<Lease>::namespaced(client.clone(), &cfg.lease_namespace),
        LeaseConfig {
            name: cfg.lease_name.clone(),
            identity: identity.clone(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        },
    );
    let (lead_tx, lead_rx) = watch::channel(false);
    // Set once the controllers have stopped (or never started): the election then releases
    // the Lease, so a standby takes over in one round instead of after its expiry.
    let (done_tx, done_rx) = watch::channel(false);
    let election = tokio::spawn(elector.run(lead_tx, done_rx));
    // A standby is healthy and ready to take over.
    health.set_ready(true);

    let mut stop = stop_rx.clone();
    tokio::select! {
        _ = wait_true(lead_rx.clone()) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    if *stop_rx.borrow() {
        return finish(server, election, done_tx, false).await;
    }
    info!(%identity, "leading: starting controllers");

    let settings = cfg.settings();
    let registry = Arc::new(crate::agent::image::registry_client(&settings)?);
    let ctx = Arc::new(Context::new(
        client.clone(),
        settings,
        metrics.clone(),
        Some(identity),
        registry,
    ));
    // Stop controllers on SIGTERM or when leadership is lost.
    let lost = {
        let mut lead_rx = lead_rx.clone();
        async move {
            let _ = lead_rx.wait_for(|l| !*l).await;
        }
    };
    let (ctl_stop_tx, ctl_stop_rx) = watch::channel(false);
    let mut stop2 = stop_rx.clone();
    let lost_leadership = tokio::spawn(async move {
        let lost_it = tokio::select! {
            _ = lost => true,
            _ = stop2.wait_for(|s| *s) => false,
        };
        let _ = ctl_stop_tx.send(true);
        lost_it
    });

    let deployments = match &cfg.namespace {
        Some(ns) => Api::<Deployment>::namespaced(client.clone(), ns),
        None => Api::<Deployment>::all(client.clone()),
    };
    // Agents and Tasks are written by namespace users: decode each object on its own so one
    // that does not fit the types is skipped instead of failing every list (issue 13, item 3),
    // and cache only what decisions read (issue 26, item 9).
    let (agent_store, agent_writer) = reflector::store();
    let agent_events = decode::watch::<Agent>(
        client.clone(),
        cfg.namespace.as_deref(),
        watcher::Config::default().page_size(AGENT_LIST_PAGE),
        metrics.count_skipped(),
    )
    .modify(cache::trim_agent)
    .reflect(agent_writer)
    .applied_objects();
    let agent_controller = Controller::for_stream(agent_events, agent_store.clone());
    // A change to a namespace's attestation key copy wakes that namespace's Agents, whose
    // reconcile re-asserts the copy (issue 13, item 10). Only that name is watched (RBAC
    // grants list/watch on it alone).
    let key_copies = match &cfg.namespace {
        Some(ns) => Api::<Secret>::namespaced(client.clone(), ns),
        None => Api::<Secret>::all(client.clone()),
    };
    let agents_of_ns = agent_store.clone();
    let agent_controller = agent_controller.watches(
        key_copies,
        watcher::Config::default().fields(&format!("metadata.name={}", names::ATTESTATION_SECRET)),
        move |secret: Secret| {
            let ns = secret.metadata.namespace.unwrap_or_default();
            agents_of_ns
                .state()
                .into_iter()
                .filter(|a| a.metadata.namespace.as_deref() == Some(ns.as_str()))
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let agent_ctl = agent_controller
        .owns(
            deployments,
            watcher::Config::default().labels("app.kubernetes.io/name=ari-executor"),
        )
        .graceful_shutdown_on(wait_true(ctl_stop_rx.clone()))
        .run(
            agent::controller::reconcile,
            agent::controller::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {});
    let pods = match &cfg.namespace {
        Some(ns) => Api::<Pod>::namespaced(client.clone(), ns),
        None => Api::<Pod>::all(client.clone()),
    };
    let (pod_store, pod_writer) = reflector::store();
    let pod_cache = watcher(
        pods,
        watcher::Config::default().labels("app.kubernetes.io/name=ari-executor"),
    )
    .default_backoff()
    .modify(cache::trim_pod)
    .reflect(pod_writer)
    .for_each(|_| async {});
    let pod_cache = tokio::spawn(pod_cache);

    let (task_store, task_writer) = reflector::store();
    let children = Arc::new(task::children::ChildIndex::default());
    let index = children.clone();
    let task_events = decode::watch::<Task>(
        client.clone(),
        cfg.namespace.as_deref(),
        watcher::Config::default(),
        metrics.count_skipped(),
    )
    .modify(cache::trim_task)
    .inspect_ok(move |event| index.observe(event))
    .reflect(task_writer)
    .applied_objects();
    let task_controller = Controller::for_stream(task_events, task_store.clone())
        .graceful_shutdown_on(wait_true(ctl_stop_rx.clone()));
    let task_ctx = Arc::new(TaskContext {
        base: ctx.clone(),
        seen: Seen::default(),
        announced: Seen::default(),
        started: k8s_openapi::jiff::Timestamp::now(),
        agents: agent_store.clone(),
        pods: pod_store.clone(),
        tasks: task_store.clone(),
        children,
    });
    // The Plan controller's validator reads the same Agent cache.
    let plan_agents = agent_store.clone();
    // Decisions on a Task read the Agent and pod caches: start only once both have listed
    // everything, or a cold cache would look like a missing Agent.
    let task_ctl = async move {
        if agent_store.wait_until_ready().await.is_err()
            || pod_store.wait_until_ready().await.is_err()
        {
            error!("agent or pod cache closed before it was ready");
            return;
        }
        task_controller
            .run(
                task::controller::reconcile,
                task::controller::error_policy,
                task_ctx,
            )
            .for_each(|_| async {})
            .await;
    };
    let gauges = tokio::spawn(task_gauges(task_store, metrics.clone()));
    let plan_ctl = plan_controller(&cfg, client.clone(), &metrics)
        .graceful_shutdown_on(wait_true(ctl_stop_rx.clone()));
    let plan_ctx = Arc::new(PlanContext::new(ctx.clone(), plan_agents.clone()));
    // Validation reads the Agent cache: start only once it has listed everything.
    let plan_ctl = async move {
        if plan_agents.wait_until_ready().await.is_err() {
            error!("agent cache closed before it was ready");
            return;
        }
        plan_ctl
            .run(
                plan::controller::reconcile,
                plan::controller::error_policy,
                plan_ctx,
            )
            .for_each(|_| async {})
            .await;
    };

    let model_ctl = model_config_controller(&cfg, client.clone(), ctx.clone(), ctl_stop_rx)?;
    tokio::join!(agent_ctl, task_ctl, plan_ctl, model_ctl);
    gauges.abort();
    pod_cache.abort();
    let lost_it = lost_leadership.await.unwrap_or(false);
    finish(server, election, done_tx, lost_it).await
}

/// The Plan controller, woken by its Plans and by changes to the Tasks they own (only Tasks
/// labelled with a Plan's uid are watched).
fn plan_controller(cfg: &Config, client: Client, metrics: &Arc<Metrics>) -> Controller<Plan> {
    let (plan_store, plan_writer) = reflector::store();
    let plan_events = decode::watch::<Plan>(
        client.clone(),
        cfg.namespace.as_deref(),
        watcher::Config::default(),
        metrics.count_skipped(),
    )
    .reflect(plan_writer)
    .applied_objects();
    let step_tasks = decode::watch::<Task>(
        client,
        cfg.namespace.as_deref(),
        watcher::Config::default().labels(LABEL_PLAN_UID),
        metrics.count_skipped(),
    )
    .applied_objects();
    Controller::for_stream(plan_events, plan_store).owns_stream(step_tasks)
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
    let (store, writer) = reflector::store();
    let events = decode::watch::<ModelConfig>(
        client,
        cfg.namespace.as_deref(),
        watcher::Config::default(),
        ctx.metrics.count_skipped(),
    )
    .reflect(writer)
    .applied_objects();
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

/// Ends the election (which releases the Lease if ours), stops the HTTP server; exits
/// non-zero after lost leadership so the pod restarts as a fresh candidate.
async fn finish(
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    election: tokio::task::JoinHandle<()>,
    done: watch::Sender<bool>,
    lost_leadership: bool,
) -> Result<(), Error> {
    let _ = done.send(true);
    // Bounded: a hung API call must not keep the pod past its grace period.
    if tokio::time::timeout(Duration::from_secs(10), election)
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
