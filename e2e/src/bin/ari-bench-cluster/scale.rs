//! The scale run: many Agents and Tasks present at once. What it reports is memory (does the
//! operator's cache stay small?) and reconcile lag (does the operator still react quickly
//! while it holds everything?).

use std::time::{Duration, Instant};

use anyhow::Result;
use ari_crds::{Agent, Task};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use crate::tasks::{apply_agent, create_all, watch_tasks};
use crate::tracker::Tracker;
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
    let wasm = ari_e2e::scenario::agent_wasm(&module);
    let from = format!("--from-file=module.wasm={}", wasm.display());
    bench.kubectl(&[
        "create",
        "configmap",
        &format!("{module}-module"),
        "-n",
        &ns,
        &from,
    ])?;
    let n_agents = bench.args.scale_agents;
    let agent_names: Vec<String> = (0..n_agents).map(|i| format!("scale-{i:03}")).collect();
    let started = Instant::now();
    for a in &agent_names {
        apply_agent(client, &ns, a, &module, 1, 4).await?;
    }
    let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
    ari_e2e::wait::until(
        "every scale Agent Ready",
        Duration::from_secs(900),
        || async {
            let list = agents
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|a| {
                    a.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .count();
            if ready == n_agents {
                Ok(())
            } else {
                Err(format!("{ready} of {n_agents} Ready"))
            }
        },
    )
    .await?;
    let agents_ready = started.elapsed();

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
        bench.args.creators,
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

    report.line(format!(
        "\n### Scale: {n_agents} Agents (1 executor × concurrency 4 each) and {} Tasks at once\n",
        names.len()
    ));
    report.line("| measure | value |\n|---|---|");
    report.line(format!(
        "| {n_agents} Agents applied → all Ready (executors started, module loaded) | {:.1} s |",
        agents_ready.as_secs_f64()
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
