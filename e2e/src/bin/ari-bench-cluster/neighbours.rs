//! The neighbours run (issue 29, item 1): a well-behaved Agent's Task latency in a pool pod,
//! alone and then beside hostile neighbours in the same pod — a fork bomb of spinning Tasks, a
//! memory balloon and a log flood, each its own Agent — with the same Tasks, one at a time, in
//! one run, with the executors' CPU shares, with the quiet Agent in a pod of its own beside the
//! same pool (what a pod per Agent gives, the issue's yardstick), and with flat priorities (the
//! design before shares). What it reports is how far the neighbours move the quiet Agent's
//! figures under each; the
//! e2e `hostile` suite asserts that they end with their own reasons, the pod lives on and the
//! spinner is lowered while the quiet Agent is not.

use std::time::{Duration, Instant};

use anyhow::Result;
use ari_crds::Task;
use ari_crds::pool::{GUEST_PRIORITIES_ENV, GuestPriorities};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};

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

/// Where the quiet Agent runs: in the neighbours' pool pod, or in a Deployment of its own (a
/// pod per Agent, the isolation a pool must match) while the neighbours run in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quiet {
    Pooled,
    Dedicated,
}

/// One run of the quiet Agent alone and beside its neighbours, in a fresh pool.
struct Phase {
    alone: Percentiles,
    beside: Percentiles,
    /// How long the quiet rounds beside the neighbours took.
    during: Duration,
    /// Neighbours' Tasks ended by then, of those sent.
    ended: usize,
    sent: usize,
    executors_rss_mib: f64,
    /// Cores used while the quiet Agent ran alone and beside its neighbours: by the control
    /// plane (kube-apiserver and etcd) and by the executor pods.
    control_plane: (f64, f64),
    executors: (f64, f64),
}

/// Cores each of `sets` of processes used while `f` ran, and what `f` gave.
async fn cores_during<T, const N: usize>(
    sets: [&[u32]; N],
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<([f64; N], T)> {
    let used = || sets.map(|pids| pids.iter().map(|p| procstat::cpu_seconds(*p)).sum::<f64>());
    let (before, started) = (used(), Instant::now());
    let out = f.await?;
    let (after, secs) = (used(), started.elapsed().as_secs_f64());
    Ok((std::array::from_fn(|i| (after[i] - before[i]) / secs), out))
}

/// Both designs in one run: CPU shares (the default) and flat priorities (the design before
/// them, `--guest-priorities=flat` on the operator), each in its own namespace and pool, the
/// first pool scaled to zero before the second starts so no leftover Task runs beside it.
pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let shares = phase(bench, GuestPriorities::Shares, Quiet::Pooled).await?;
    let dedicated = phase(bench, GuestPriorities::Shares, Quiet::Dedicated).await?;
    bench.set_operator_env(GUEST_PRIORITIES_ENV, Some(GuestPriorities::Flat.as_str()))?;
    let flat = phase(bench, GuestPriorities::Flat, Quiet::Pooled).await;
    bench.set_operator_env(GUEST_PRIORITIES_ENV, None)?;
    let flat = flat?;
    let rounds = bench.args.sequential.max(1);
    report.line(format!(
        "\n### Neighbours: a quiet `echo` Agent in a pool pod (concurrency 8, each Agent's share 2), alone and beside {} ({FLOOD} Tasks each): with CPU shares, in a pod of its own beside the same pool, and with flat priorities\n",
        bench.args.neighbours.join(", ")
    ));
    report.line(format!("| quiet Agent, one Task at a time ({rounds} each), create → Succeeded | p50 / p95 / p99 | max | p50 / p95 / p99 ÷ alone |\n|---|---|---|---|"));
    let ratio = |a: f64, b: f64| b / a.max(1e-9);
    let designs = [
        ("pooled, CPU shares", &shares),
        ("own pod (a pod per Agent), pool with shares", &dedicated),
        ("pooled, flat (before)", &flat),
    ];
    for (design, p) in designs {
        for (when, q) in [("alone", &p.alone), ("beside the neighbours", &p.beside)] {
            report.line(format!(
                "| {design}, {when} | {q} | {:.0} ms | {:.2} / {:.2} / {:.2} |",
                q.max,
                ratio(p.alone.p50, q.p50),
                ratio(p.alone.p95, q.p95),
                ratio(p.alone.p99, q.p99),
            ));
        }
    }
    report.line(format!(
        "\nBeside the neighbours, shares ÷ flat: p50 {:.2}, p95 {:.2}, p99 {:.2}.",
        ratio(flat.beside.p50, shares.beside.p50),
        ratio(flat.beside.p95, shares.beside.p95),
        ratio(flat.beside.p99, shares.beside.p99),
    ));
    report.line(format!(
        "Beside the neighbours, pooled with shares ÷ own pod: p50 {:.2}, p95 {:.2}, p99 {:.2}.",
        ratio(dedicated.beside.p50, shares.beside.p50),
        ratio(dedicated.beside.p95, shares.beside.p95),
        ratio(dedicated.beside.p99, shares.beside.p99),
    ));
    for (design, p) in designs {
        report.line(format!(
            "With {design}: while the quiet rounds ran ({:.1} s), {} of the neighbours' {} Tasks ended; the executors' RSS at the end: {:.0} MiB. Cores used alone → beside: kube-apiserver and etcd {:.2} → {:.2}, the executors {:.2} → {:.2}.",
            p.during.as_secs_f64(),
            p.ended,
            p.sent,
            p.executors_rss_mib,
            p.control_plane.0,
            p.control_plane.1,
            p.executors.0,
            p.executors.1,
        ));
    }
    Ok(())
}

async fn phase(bench: &Bench, priorities: GuestPriorities, quiet: Quiet) -> Result<Phase> {
    let client = &bench.client;
    let name = match quiet {
        Quiet::Pooled => format!("neighbours-{priorities}"),
        Quiet::Dedicated => format!("neighbours-{priorities}-own-pod"),
    };
    let ns = bench.cluster.new_namespace(&name).await?;
    for module in ["echo", "spin", "balloon", "loud-log"] {
        bench.module_configmap(&ns, module)?;
    }
    crate::scale::warm_pool(bench, &ns, "neighbours", 1, 8).await?;
    ensure_pool_priorities(bench, &ns, priorities).await?;
    let pooled = serde_json::json!({"pool": "neighbours", "concurrency": 2});
    let own = serde_json::json!({"replicas": 1, "concurrency": 2});
    let quiet_executor = match quiet {
        Quiet::Pooled => pooled.clone(),
        Quiet::Dedicated => own,
    };
    apply_agent_with(client, &ns, "quiet", "echo", quiet_executor).await?;
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
    let control_plane: Vec<u32> = bench
        .control_plane_pids()
        .into_iter()
        .filter(|(name, _)| name.contains("kube-apiserver") || name.contains("etcd"))
        .map(|(_, p)| p)
        .collect();
    let executor_pids: Vec<u32> = bench
        .pids(&ns, "app.kubernetes.io/name=ari-executor")
        .await?
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let watched = [control_plane.as_slice(), executor_pids.as_slice()];
    let ([cp_alone, executors_alone], alone) =
        cores_during(watched, one_at_a_time(&tasks, &tracker, "alone", rounds)).await?;

    let flood_started = Instant::now();
    let mut hostile = Vec::new();
    let flooding = HOSTILE
        .iter()
        .filter(|(agent, ..)| bench.args.neighbours.iter().any(|n| n == agent));
    for (agent, _, input, _) in flooding {
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
    let ([cp_beside, executors_beside], beside) =
        cores_during(watched, one_at_a_time(&tasks, &tracker, "beside", rounds)).await?;
    let during = flood_started.elapsed();
    let ended: usize = tracker.finished_of(&hostile);
    watch.abort();
    let executors_rss_mib: f64 = bench
        .pids(&ns, "app.kubernetes.io/name=ari-executor")
        .await?
        .iter()
        .map(|(_, p)| procstat::memory_mib(*p).0)
        .sum();
    stop_executors(bench, &ns).await?;
    Ok(Phase {
        alone,
        beside,
        during,
        ended,
        sent: hostile.len(),
        executors_rss_mib,
        control_plane: (cp_alone, cp_beside),
        executors: (executors_alone, executors_beside),
    })
}

/// Fails unless the pool's pods run with `priorities` (the operator passes only `flat`).
async fn ensure_pool_priorities(
    bench: &Bench,
    ns: &str,
    priorities: GuestPriorities,
) -> Result<()> {
    let pods = Api::<Pod>::namespaced(bench.client.clone(), ns)
        .list(&ListParams::default().labels("ari.dev/pool=neighbours"))
        .await?;
    let told: Vec<Option<String>> = pods
        .items
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .map(|c| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == GUEST_PRIORITIES_ENV)
                .and_then(|e| e.value.clone())
        })
        .collect();
    let want = (priorities != GuestPriorities::default()).then(|| priorities.as_str().to_owned());
    anyhow::ensure!(
        !told.is_empty() && told.iter().all(|t| *t == want),
        "pool pods told {told:?}, want {want:?}"
    );
    Ok(())
}

/// Scales the pool to zero, deletes the quiet Agent (its own pod, if it had one, goes with it)
/// and waits until the executors' processes are gone, so the neighbours' Tasks left over stop
/// using the CPU.
async fn stop_executors(bench: &Bench, ns: &str) -> Result<()> {
    let zero = serde_json::json!({"spec": {"replicas": 0}});
    Api::<ari_crds::ExecutorPool>::namespaced(bench.client.clone(), ns)
        .patch("neighbours", &PatchParams::default(), &Patch::Merge(&zero))
        .await?;
    Api::<ari_crds::Agent>::namespaced(bench.client.clone(), ns)
        .delete("quiet", &Default::default())
        .await?;
    ari_e2e::wait::until(
        "the executors' processes gone",
        Duration::from_secs(120),
        || async {
            match bench.pids(ns, "app.kubernetes.io/name=ari-executor").await {
                Ok(p) if p.is_empty() => Ok(()),
                Ok(p) => Err(format!("{} still running", p.len())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?;
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
