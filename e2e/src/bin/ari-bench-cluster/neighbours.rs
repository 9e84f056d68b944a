//! The neighbours run (issue 29, item 1): a well-behaved Agent's Task latency in a pool pod,
//! alone and then beside hostile neighbours in the same pod — a fork bomb of spinning Tasks, a
//! memory balloon and a log flood, each its own Agent — with the same Tasks, one at a time, in
//! one run. What it reports is how far the neighbours move the quiet Agent's figures; the
//! e2e `pools` suite asserts that they end with their own reasons and the pod lives on.

use std::time::{Duration, Instant};

use anyhow::Result;
use ari_crds::Task;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::tasks::{apply_agent_with, create_all, watch_tasks};
use crate::tracker::{Percentiles, Tracker};
use crate::{Bench, Report, procstat};

/// The hostile neighbours: (Agent, module, input, limits). Each may run 2 Tasks at once, so
/// together they can hold 6 of the pod's 8 places; the quiet Agent keeps its 2.
const HOSTILE: [(&str, &str, &str, &str); 3] = [
    (
        "spinner",
        "spin",
        "spin",
        r#"{"fuel": 1000000000000, "timeoutSeconds": 5}"#,
    ),
    (
        "balloon",
        "balloon",
        "",
        r#"{"memoryBytes": 33554432, "timeoutSeconds": 5}"#,
    ),
    ("loud", "loud-log", "", r#"{"fuel": 20000000}"#),
];

/// Hostile Tasks each neighbour is sent: more than it can run before the quiet rounds end.
const FLOOD: usize = 200;

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let client = &bench.client;
    let ns = bench.cluster.new_namespace("neighbours").await?;
    for module in ["echo", "spin", "balloon", "loud-log"] {
        bench.module_configmap(&ns, module)?;
    }
    crate::scale::warm_pool(bench, &ns, "neighbours", 1, 8).await?;
    let pooled = serde_json::json!({"pool": "neighbours", "concurrency": 2});
    apply_agent_with(client, &ns, "quiet", "echo", pooled.clone()).await?;
    for (agent, module, _, limits) in HOSTILE {
        apply_agent_with(client, &ns, agent, module, pooled.clone()).await?;
        let limits = serde_json::json!({"spec": {"limits": serde_json::from_str::<serde_json::Value>(limits)?}});
        Api::<ari_crds::Agent>::namespaced(client.clone(), &ns)
            .patch(agent, &PatchParams::default(), &Patch::Merge(&limits))
            .await?;
    }
    for agent in ["quiet", "spinner", "balloon", "loud"] {
        ari_e2e::scenario::agent_ready_within(client, &ns, agent, Duration::from_secs(120)).await?;
    }
    let tracker = Tracker::default();
    let watch = watch_tasks(client.clone(), &ns, tracker.clone());
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let rounds = bench.args.sequential.max(1);

    // Warm: the quiet Agent's module loaded, then its figures alone.
    one_at_a_time(&tasks, &tracker, "warm", 5).await?;
    let alone = one_at_a_time(&tasks, &tracker, "alone", rounds).await?;

    let flood_started = Instant::now();
    let mut hostile = Vec::new();
    for (agent, _, input, _) in HOSTILE {
        for i in 0..FLOOD {
            let name = format!("{agent}-{i}");
            let spec = serde_json::json!({"agentRef": {"name": agent}, "input": input});
            tasks
                .create(
                    &PostParams::default(),
                    &Task::new(&name, serde_json::from_value(spec)?),
                )
                .await?;
            hostile.push(name);
        }
    }
    let beside = one_at_a_time(&tasks, &tracker, "beside", rounds).await?;
    let during = flood_started.elapsed();
    let ended: usize = tracker.finished_of(&hostile);
    watch.abort();
    let pool_rss: f64 = bench
        .pids(&ns, "app.kubernetes.io/name=ari-executor")
        .await?
        .iter()
        .map(|(_, p)| procstat::memory_mib(*p).0)
        .sum();

    report.line(format!(
        "\n### Neighbours: a quiet `echo` Agent in a pool pod (concurrency 8, each Agent's share 2), alone and beside a spinner, a memory balloon and a log flood ({FLOOD} Tasks each)\n"
    ));
    report.line("| quiet Agent, one Task at a time, create → Succeeded | alone | beside the neighbours | beside / alone |\n|---|---|---|---|");
    let ratio = |a: f64, b: f64| b / a.max(1e-9);
    report.line(format!(
        "| p50 / p95 / p99 ({rounds} Tasks each) | {} | {} | {:.2} / {:.2} / {:.2} |",
        alone,
        beside,
        ratio(alone.p50, beside.p50),
        ratio(alone.p95, beside.p95),
        ratio(alone.p99, beside.p99),
    ));
    report.line(format!(
        "| max | {:.0} ms | {:.0} ms | {:.2} |",
        alone.max,
        beside.max,
        ratio(alone.max, beside.max)
    ));
    report.line(format!(
        "\nWhile the quiet rounds ran ({:.1} s), {ended} of the neighbours' {} Tasks ended; the pool pod's RSS at the end: {pool_rss:.0} MiB.",
        during.as_secs_f64(),
        hostile.len()
    ));
    Ok(())
}

/// Create → Succeeded of `n` Tasks of the quiet Agent, one at a time.
async fn one_at_a_time(
    tasks: &Api<Task>,
    tracker: &Tracker,
    batch: &str,
    n: usize,
) -> Result<Percentiles> {
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("quiet-{batch}-{i}");
        create_all(
            tasks,
            tracker,
            std::slice::from_ref(&name),
            |_| "quiet".to_owned(),
            batch,
            (1, 0),
        )
        .await?;
        let f = tracker
            .wait_all(std::slice::from_ref(&name), Duration::from_secs(120))
            .await?;
        anyhow::ensure!(f.failed == 0, "{name} failed");
        ms.push(f.to_finished.max);
    }
    Ok(Percentiles::of(ms))
}
