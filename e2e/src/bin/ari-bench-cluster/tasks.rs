//! ari's own path: Agents with long-lived executors, Tasks created through the API server.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ari_crds::{Agent, Task};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::apimetrics::{self, Requests};
use crate::tracker::{Figures, Tracker};
use crate::{Bench, Report, procstat};

/// Label on every benchmark Task, valued by its batch, so a batch is deleted in one call.
const BATCH_LABEL: &str = "bench.ari.dev/batch";

/// A paragraph for `wordcount` (about 1 KiB).
pub const WORDCOUNT_INPUT: &str = "Users will run code they did not write. ari must contain it, \
lose no Task and keep serving. Long-lived executors with precompiled modules finish a Task in \
milliseconds where a pod takes seconds.\nEvery limit is enforced and reported, every result is \
verifiable: the attestation names the module, the input, the output and the trace digests, and \
anyone holding the Task can replay it offline to the same output.\nFuel bounds the work \
deterministically, epochs bound the wall time, a resource limiter bounds memory, and storage \
commits only when the task succeeds. The operator is not on the hot path: executors watch their \
Agent's Tasks with a field selector and claim each with a status write guarded by its \
resourceVersion.\n";

pub fn input_for(agent: &str) -> &'static str {
    match agent {
        "wordcount" => WORDCOUNT_INPUT,
        _ => "hello",
    }
}

/// Resource use of ari's processes over one run.
struct Usage {
    requests: Requests,
    executor_cpu: f64,
    executor_peak_mib: f64,
    operator_cpu: f64,
    operator_peak_mib: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
}

struct Snapshot {
    requests: Requests,
    executors: Vec<(u32, f64)>,
    operator: Vec<(u32, f64)>,
    control_plane: Vec<(String, f64)>,
}

async fn snapshot(bench: &Bench, agent: &str) -> Result<Snapshot> {
    let selector = format!("ari.dev/agent={agent}");
    let cpu = |pids: Vec<u32>| -> Vec<(u32, f64)> {
        pids.into_iter()
            .map(|p| (p, procstat::cpu_seconds(p)))
            .collect()
    };
    Ok(Snapshot {
        requests: apimetrics::scrape(&bench.client).await?,
        executors: cpu(bench
            .pids(&bench.ns, &selector)
            .await?
            .into_iter()
            .map(|(_, p)| p)
            .collect()),
        operator: cpu(bench.operator_pids().await?),
        control_plane: bench
            .control_plane_pids()
            .into_iter()
            .map(|(n, p)| (n, procstat::cpu_seconds(p)))
            .collect(),
    })
}

fn usage(before: &Snapshot, after: &Snapshot) -> Usage {
    let delta = |b: &[(u32, f64)], a: &[(u32, f64)]| -> f64 {
        a.iter()
            .map(|(pid, cpu)| cpu - b.iter().find(|(p, _)| p == pid).map_or(0.0, |(_, c)| *c))
            .sum()
    };
    let peak = |a: &[(u32, f64)]| -> f64 {
        a.iter()
            .map(|(p, _)| procstat::memory_mib(*p).1)
            .fold(0.0, f64::max)
    };
    let cp = |name: &str| -> f64 {
        let sum = |s: &Snapshot| -> f64 {
            s.control_plane
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, c)| c)
                .sum()
        };
        sum(after) - sum(before)
    };
    Usage {
        requests: after.requests - before.requests,
        executor_cpu: delta(&before.executors, &after.executors),
        executor_peak_mib: peak(&after.executors),
        operator_cpu: delta(&before.operator, &after.operator),
        operator_peak_mib: peak(&after.operator),
        apiserver_cpu: cp("kube-apiserver"),
        etcd_cpu: cp("etcd"),
    }
}

/// Feeds the tracker from a watch on the namespace's Tasks.
pub fn watch_tasks(client: Client, ns: &str, tracker: Tracker) -> tokio::task::JoinHandle<()> {
    let api: Api<Task> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(t)) = stream.try_next().await {
            let name = t.name_any();
            match t.status.as_ref().and_then(|s| s.phase) {
                Some(ari_crds::TaskPhase::Running) => tracker.running(&name),
                Some(ari_crds::TaskPhase::Succeeded) => tracker.finished(&name, true),
                Some(ari_crds::TaskPhase::Failed) => tracker.finished(&name, false),
                _ => {}
            }
        }
    })
}

/// A benchmark Task: the agent's input, or `items` copies of it as a Task of items.
pub fn task(name: &str, agent: &str, batch: &str, items: usize) -> Result<Task> {
    let spec = if items == 0 {
        serde_json::json!({"agentRef": {"name": agent}, "input": input_for(agent)})
    } else {
        serde_json::json!({"agentRef": {"name": agent}, "items": vec![input_for(agent); items]})
    };
    let spec = serde_json::from_value(spec)?;
    let mut t = Task::new(name, spec);
    t.labels_mut().insert(BATCH_LABEL.into(), batch.into());
    Ok(t)
}

/// Creates `names` from `creators` concurrent clients, recording each create in the tracker;
/// each a Task of `items` items when that is not 0.
pub async fn create_all(
    api: &Api<Task>,
    tracker: &Tracker,
    names: &[String],
    agent_of: impl Fn(usize) -> String,
    batch: &str,
    (creators, items): (usize, usize),
) -> Result<()> {
    let objects: Vec<Task> = names
        .iter()
        .enumerate()
        .map(|(i, n)| task(n, &agent_of(i), batch, items))
        .collect::<Result<_>>()?;
    futures::stream::iter(objects)
        .map(|t| {
            let api = api.clone();
            let tracker = tracker.clone();
            async move {
                tracker.created(&t.name_any());
                api.create(&PostParams::default(), &t)
                    .await
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(creators.max(1))
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

pub async fn delete_batch(api: &Api<Task>, batch: &str) -> Result<()> {
    api.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels(&format!("{BATCH_LABEL}={batch}")),
    )
    .await?;
    Ok(())
}

/// Creates or updates an Agent of an example module (ConfigMap `<module>-module`).
pub async fn apply_agent(
    client: &Client,
    ns: &str,
    name: &str,
    module: &str,
    replicas: u32,
    concurrency: u32,
) -> Result<()> {
    let executor = serde_json::json!({"replicas": replicas, "concurrency": concurrency});
    apply_agent_with(client, ns, name, module, executor).await
}

/// Applies an Agent of `module`'s ConfigMap with `executor` as its `spec.executor`.
pub async fn apply_agent_with(
    client: &Client,
    ns: &str,
    name: &str,
    module: &str,
    executor: serde_json::Value,
) -> Result<()> {
    let agent = serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": name},
        "spec": {
            "module": {"configMap": {"name": format!("{module}-module"), "key": "module.wasm"}},
            "executor": executor,
        }
    });
    Api::<Agent>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("ari-bench").force(),
            &Patch::Apply(&agent),
        )
        .await?;
    Ok(())
}

/// Waits until the Agent's Deployment runs exactly `replicas` Ready pods of its current spec.
pub async fn settle(client: &Client, ns: &str, agent: &str, replicas: u32) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let want = i32::try_from(replicas)?;
    ari_e2e::wait::until(
        &format!("{agent}: {replicas} executors of the current spec"),
        Duration::from_secs(180),
        || async {
            let d = deployments
                .get(&format!("{agent}-executor"))
                .await
                .map_err(|e| e.to_string())?;
            let s = d.status.clone().unwrap_or_default();
            let current = s.observed_generation >= d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.ready_replicas == Some(want)
                && s.replicas == Some(want);
            let listed = pods
                .list(&ListParams::default().labels(&format!("ari.dev/agent={agent}")))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if current && listed == usize::try_from(want).unwrap_or(0) {
                Ok(())
            } else {
                Err(format!("deployment status {s:?}, {listed} pods"))
            }
        },
    )
    .await?;
    Ok(())
}

/// The throughput runs per executor setting: plain Tasks, then Tasks of `items` when asked.
fn modes(items: usize) -> Vec<usize> {
    if items == 0 { vec![0] } else { vec![0, items] }
}

pub async fn run_all(bench: &Bench, report: &mut Report) -> Result<()> {
    let ns = &bench.ns;
    let client = &bench.client;
    for agent in &bench.args.agents {
        bench.module_configmap(ns, agent)?;
    }
    let tracker = Tracker::default();
    let watch = watch_tasks(client.clone(), ns, tracker.clone());
    let api: Api<Task> = Api::namespaced(client.clone(), ns);

    // Unloaded latency: one Task at a time, two executors.
    report.line("### Latency, one Task at a time (2 executors × concurrency 4)\n");
    report.line("| agent | Tasks | create → Running p50 / p95 / p99 | create → Succeeded p50 / p95 / p99 | max | failed |");
    report.line("|---|---|---|---|---|---|");
    for agent in &bench.args.agents {
        apply_agent(client, ns, agent, agent, 2, 4).await?;
        settle(client, ns, agent, 2).await?;
        let batch = format!("{agent}-seq");
        let mut names = Vec::new();
        for i in 0..bench.args.sequential {
            let name = format!("{agent}-seq-{i}");
            create_all(
                &api,
                &tracker,
                std::slice::from_ref(&name),
                |_| agent.clone(),
                &batch,
                (1, 0),
            )
            .await?;
            tracker
                .wait_all(std::slice::from_ref(&name), Duration::from_secs(60))
                .await?;
            names.push(name);
        }
        let f = tracker.wait_all(&names, Duration::from_secs(1)).await?;
        if Some(agent) == bench.args.agents.first() {
            report.set_ours(f.to_finished.p50, 0.0);
        }
        report.line(format!(
            "| {agent} | {} | {} | {} | {:.0} ms | {} |",
            f.count, f.to_running, f.to_finished, f.to_finished.max, f.failed
        ));
        delete_batch(&api, &batch).await?;
    }

    report.line(format!(
        "\n### Throughput: {} Tasks created by {} concurrent clients, per agent × executors × concurrency\n",
        bench.args.tasks, bench.args.creators
    ));
    report.line("| agent | executors × concurrency | tasks/s | create → Running p50 / p95 / p99 | create → Succeeded p50 / p95 / p99 | failed | API requests per Task (all / on Tasks / Task writes) | CPU s per 1,000 Tasks: executors / operator / kube-apiserver / etcd | peak RSS: executor / operator |");
    report.line("|---|---|---|---|---|---|---|---|---|");
    for agent in &bench.args.agents {
        for &replicas in &bench.args.replicas {
            for &concurrency in &bench.args.concurrency {
                apply_agent(client, ns, agent, agent, replicas, concurrency).await?;
                settle(client, ns, agent, replicas).await?;
                for items in modes(bench.args.items) {
                    bench.quiesce().await?;
                    let batch = match items {
                        0 => format!("{agent}-r{replicas}-c{concurrency}"),
                        n => format!("{agent}-r{replicas}-c{concurrency}-items{n}"),
                    };
                    // The same work either way: `--tasks` inputs, one per Task or `items` per Task.
                    let names: Vec<String> = (0..bench.args.tasks / items.max(1))
                        .map(|i| format!("{batch}-{i}"))
                        .collect();
                    let before = snapshot(bench, agent).await?;
                    let profile = bench.profile_apiserver(&batch);
                    let started = Instant::now();
                    create_all(
                        &api,
                        &tracker,
                        &names,
                        |_| agent.clone(),
                        &batch,
                        (bench.args.creators, items),
                    )
                    .await?;
                    let f: Figures = tracker
                        .wait_all(&names, Duration::from_secs(900))
                        .await
                        .with_context(|| format!("{batch} after {:?}", started.elapsed()))?;
                    let after = snapshot(bench, agent).await?;
                    if let Some(profile) = profile {
                        profile.await??;
                    }
                    if Some(agent) == bench.args.agents.first() {
                        report.set_ours(f.to_finished.p50, f.per_second());
                    }
                    let u = usage(&before, &after);
                    // Per input: a Task of items counts each of its items.
                    let per_task = items.max(1) as f64;
                    let n = f.count as f64 * per_task;
                    let per_k = |cpu: f64| cpu / n * 1000.0;
                    let label = match items {
                        0 => agent.clone(),
                        n => format!("{agent}, Tasks of {n} items (per item)"),
                    };
                    report.line(format!(
                    "| {label} | {replicas} × {concurrency} | **{:.0}** | {} | {} | {} | {:.2} / {:.2} / {:.2} | {:.1} / {:.1} / {:.1} / {:.1} | {:.0} / {:.0} MiB |",
                    f.per_second() * per_task,
                    f.to_running,
                    f.to_finished,
                    f.failed,
                    u.requests.all / n,
                    u.requests.tasks / n,
                    u.requests.task_writes / n,
                    per_k(u.executor_cpu),
                    per_k(u.operator_cpu),
                    per_k(u.apiserver_cpu),
                    per_k(u.etcd_cpu),
                    u.executor_peak_mib,
                    u.operator_peak_mib,
                ));
                    delete_batch(&api, &batch).await?;
                }
            }
        }
        // Leave the namespace to the next agent.
        Api::<Agent>::namespaced(client.clone(), ns)
            .delete(agent, &DeleteParams::default())
            .await?;
    }
    watch.abort();
    Ok(())
}
