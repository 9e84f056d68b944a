//! The scale run: many Agents and Tasks present at once. What it reports is memory (does the
//! operator's cache stay small?) and reconcile lag (does the operator still react quickly
//! while it holds everything?).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use ari_crds::{Agent, ExecutorPool, Task};
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::tasks::{apply_agent_with, create_all, watch_tasks};
use crate::tracker::{Percentiles, Tracker};
use crate::{Bench, Report, procstat};

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let client = &bench.client;
    let ns = bench.cluster.new_namespace("scale").await?;
    let module = bench
        .args
        .agents
        .first()
        .cloned()
        .unwrap_or_else(|| "echo".into());
    bench.module_configmap(&ns, &module)?;
    let n_agents = bench.args.scale_agents;
    let pool = bench.args.scale_pool;
    let agent_names: Vec<String> = (0..n_agents).map(|i| format!("scale-{i:04}")).collect();
    if pool > 0 {
        warm_pool(bench, &ns, "scale", pool, 16).await?;
    }
    let ready_at = ready_times(client.clone(), &ns);
    let mut applied_at = Vec::with_capacity(n_agents);
    let started = Instant::now();
    for a in &agent_names {
        let executor = if pool > 0 {
            serde_json::json!({"pool": "scale", "concurrency": 4})
        } else {
            serde_json::json!({"replicas": 1, "concurrency": 4})
        };
        apply_agent_with(client, &ns, a, &module, executor).await?;
        applied_at.push(Instant::now());
    }
    let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
    ari_e2e::wait::until(
        "every scale Agent Ready",
        Duration::from_secs(1800),
        || async {
            let ready = ready_at.lock().map(|m| m.len()).unwrap_or(0);
            if ready >= n_agents {
                Ok(())
            } else {
                Err(format!("{ready} of {n_agents} Ready"))
            }
        },
    )
    .await?;
    let agents_ready = started.elapsed();
    let to_ready = {
        let seen = ready_at.lock().map(|m| m.clone()).unwrap_or_default();
        let ms: Vec<f64> = agent_names
            .iter()
            .zip(&applied_at)
            .filter_map(|(a, t0)| seen.get(a).map(|t| t.saturating_duration_since(*t0)))
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        Percentiles::of(ms)
    };
    let (cold, warm) = cold_and_warm(client, &ns, &agent_names).await?;

    let tracker = Tracker::default();
    let watch = watch_tasks(client.clone(), &ns, tracker.clone());
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..bench.args.scale_tasks)
        .map(|i| format!("scale-task-{i}"))
        .collect();
    let created_at = Instant::now();
    create_all(
        &tasks,
        &tracker,
        &names,
        |i| agent_names[i % n_agents.max(1)].clone(),
        "scale",
        (bench.args.creators, 0),
    )
    .await?;
    let create_secs = created_at.elapsed().as_secs_f64();
    let f = tracker.wait_all(&names, Duration::from_secs(1800)).await?;
    watch.abort();

    // Reconcile lag with everything present: an Agent spec change until its status shows
    // the new generation (the operator's Agent controller, its only path).
    let mut lags = Vec::new();
    for (round, a) in agent_names.iter().take(5).enumerate() {
        let patch = serde_json::json!({"spec": {"description": format!("probe {round}")}});
        let t0 = Instant::now();
        let changed = agents
            .patch(a, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let generation = changed.metadata.generation;
        ari_e2e::wait::until(
            "Agent status at the new generation",
            Duration::from_secs(120),
            || async {
                let cur = agents.get(a).await.map_err(|e| e.to_string())?;
                let seen = cur.status.as_ref().and_then(|s| s.observed_generation);
                if seen >= generation {
                    Ok(())
                } else {
                    Err(format!("observedGeneration {seen:?} < {generation:?}"))
                }
            },
        )
        .await?;
        lags.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    lags.sort_by(f64::total_cmp);

    let operator = bench.operator_pids().await?;
    let (op_rss, op_hwm) = operator
        .iter()
        .map(|p| procstat::memory_mib(*p))
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, f64::max(a.1, b.1)));
    let executors = bench
        .pids(&ns, "app.kubernetes.io/name=ari-executor")
        .await?;
    let exec_rss: Vec<f64> = executors
        .iter()
        .map(|(_, p)| procstat::memory_mib(*p).0)
        .collect();
    let exec_total: f64 = exec_rss.iter().sum();
    let exec_max = exec_rss.iter().copied().fold(0.0, f64::max);

    let shape = if pool > 0 {
        format!("one ExecutorPool of {pool} pod(s) × concurrency 16, each Agent's share 4")
    } else {
        "1 executor × concurrency 4 each".to_owned()
    };
    report.line(format!(
        "\n### Scale: {n_agents} Agents ({shape}) and {} Tasks at once\n",
        names.len()
    ));
    report.line("| measure | value |\n|---|---|");
    report.line(format!(
        "| {n_agents} Agents applied → all Ready | {:.1} s |",
        agents_ready.as_secs_f64()
    ));
    report.line(format!(
        "| one Agent applied → Ready, p50 / p95 / p99 | {to_ready} |"
    ));
    report.line(format!(
        "| first Task of a cold Agent (never run): create → Succeeded, 10 Agents one at a time | {cold} |"
    ));
    report.line(format!(
        "| second Task of the same Agents (warm) | {warm} |"
    ));
    report.line(format!(
        "| {} Tasks created ({} creators) | {create_secs:.1} s |",
        names.len(),
        bench.args.creators
    ));
    report.line(format!(
        "| all Succeeded | {:.1} s after the first create ({:.0} tasks/s), {} failed |",
        f.elapsed.as_secs_f64(),
        f.per_second(),
        f.failed
    ));
    report.line(format!(
        "| create → Succeeded p50 / p95 / p99 | {} |",
        f.to_finished
    ));
    report.line(format!(
        "| operator RSS with {} Tasks and {n_agents} Agents present (peak over the whole run) | **{op_rss:.0} MiB** ({op_hwm:.0} MiB) |",
        names.len()
    ));
    report.line(format!(
        "| executor RSS: total over {} executors / largest | {exec_total:.0} MiB / {exec_max:.0} MiB |",
        exec_rss.len()
    ));
    report.line(format!(
        "| reconcile lag: Agent spec change → status at the new generation, 5 probes | min {:.0} ms, median {:.0} ms, max {:.0} ms |",
        lags.first().copied().unwrap_or(0.0),
        lags.get(lags.len() / 2).copied().unwrap_or(0.0),
        lags.last().copied().unwrap_or(0.0)
    ));
    Ok(())
}

/// Creates ExecutorPool `name` with `replicas` pods of `concurrency` and waits until they are
/// all available, so Agents join a warm pool.
pub async fn warm_pool(
    bench: &Bench,
    ns: &str,
    name: &str,
    replicas: u32,
    concurrency: u32,
) -> Result<()> {
    let pool = serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "ExecutorPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "concurrency": concurrency},
    });
    let pools: Api<ExecutorPool> = Api::namespaced(bench.client.clone(), ns);
    pools
        .patch(
            name,
            &PatchParams::apply("ari-bench").force(),
            &Patch::Apply(&pool),
        )
        .await?;
    let want = i32::try_from(replicas)?;
    ari_e2e::wait::until(
        "the pool's pods available",
        Duration::from_secs(300),
        || async {
            let p = pools.get(name).await.map_err(|e| e.to_string())?;
            let available = p.status.and_then(|s| s.available_replicas).unwrap_or(0);
            if available == want {
                Ok(())
            } else {
                Err(format!("{available} of {want} available"))
            }
        },
    )
    .await?;
    Ok(())
}

/// When each Agent of `ns` was first seen Ready, from a watch.
fn ready_times(client: kube::Client, ns: &str) -> Arc<Mutex<HashMap<String, Instant>>> {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let api: Api<Agent> = Api::namespaced(client, ns);
    let out = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream.applied_objects());
        while let Some(event) = stream.next().await {
            let Ok(a) = event else { continue };
            if a.is_ready()
                && let Ok(mut m) = out.lock()
            {
                m.entry(a.name_any()).or_insert_with(Instant::now);
            }
        }
    });
    seen
}

/// Create → Succeeded of the first Task of ten Agents that never ran one (their module not
/// yet loaded anywhere), then of a second Task of each: one at a time.
async fn cold_and_warm(
    client: &kube::Client,
    ns: &str,
    agents: &[String],
) -> Result<(Percentiles, Percentiles)> {
    let tracker = Tracker::default();
    let watch = watch_tasks(client.clone(), ns, tracker.clone());
    let tasks: Api<Task> = Api::namespaced(client.clone(), ns);
    let mut figures = [Vec::new(), Vec::new()];
    for (round, ms) in figures.iter_mut().enumerate() {
        for (i, agent) in agents.iter().rev().take(10).enumerate() {
            let name = format!("probe-{round}-{i}");
            let agent = agent.clone();
            create_all(
                &tasks,
                &tracker,
                std::slice::from_ref(&name),
                |_| agent.clone(),
                "probe",
                (1, 0),
            )
            .await?;
            let f = tracker
                .wait_all(std::slice::from_ref(&name), Duration::from_secs(120))
                .await?;
            ms.push(f.to_finished.max);
        }
    }
    watch.abort();
    let [cold, warm] = figures;
    Ok((Percentiles::of(cold), Percentiles::of(warm)))
}
