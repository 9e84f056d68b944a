//! `ari-bench-cluster`: Task latency and throughput on a real control plane with the operator
//! and two executors, as `kubectl apply` users see it (create → `Succeeded` seen on a watch).
//! Run: `cargo build --bins && cargo run -p ari-e2e --bin ari-bench-cluster -- --tasks 100 --burst 500`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ari_e2e::{Cluster, NodeAgent, ari_images, repo_root, target_dir, wait};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};

#[derive(Parser)]
struct Args {
    /// Sequential tasks for the latency figures.
    #[arg(long, default_value_t = 100)]
    tasks: usize,
    /// Tasks created at once for the throughput figure.
    #[arg(long, default_value_t = 500)]
    burst: usize,
}

type Seen = Arc<Mutex<HashMap<String, (Instant, bool)>>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let cluster = Cluster::start().await?;
    let node = tokio::task::block_in_place(|| NodeAgent::start(&cluster, ari_images()))?;
    let result = tokio::time::timeout(Duration::from_secs(600), run(&cluster, &args)).await;
    drop(node);
    drop(cluster);
    result.context("benchmark exceeded its 10 minute deadline")?
}

fn kubectl(cluster: &Cluster, args: &[&str]) -> Result<()> {
    let out = cluster.kubectl(args)?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

async fn run(cluster: &Cluster, args: &Args) -> Result<()> {
    let root = repo_root();
    kubectl(
        cluster,
        &["apply", "-f", &root.join("crds").display().to_string()],
    )?;
    kubectl(
        cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
    )?;
    kubectl(
        cluster,
        &[
            "apply",
            "-f",
            &root.join("deploy/operator.yaml").display().to_string(),
        ],
    )?;
    let client = cluster.client();
    let ns = cluster.new_namespace("bench").await?;
    let wasm = target_dir().join("agents/echo.wasm");
    let from = format!("--from-file=module.wasm={}", wasm.display());
    kubectl(
        cluster,
        &["create", "configmap", "echo-module", "-n", &ns, &from],
    )?;
    let agent = "apiVersion: ari.dev/v1alpha1\nkind: Agent\nmetadata: {name: echo}\nspec:\n  module: {configMap: {name: echo-module, key: module.wasm}}\n  executor: {replicas: 2, concurrency: 8}\n";
    let file = std::env::temp_dir().join(format!("ari-bench-agent-{}.yaml", std::process::id()));
    std::fs::write(&file, agent)?;
    kubectl(
        cluster,
        &["apply", "-n", &ns, "-f", &file.display().to_string()],
    )?;
    kubectl(
        cluster,
        &[
            "wait",
            "-n",
            &ns,
            "--for=condition=Ready",
            "--timeout=120s",
            "agent/echo",
        ],
    )?;
    kubectl(
        cluster,
        &[
            "rollout",
            "status",
            "-n",
            &ns,
            "--timeout=120s",
            "deployment/echo-executor",
        ],
    )?;

    let gvk = GroupVersionKind::gvk("ari.dev", "v1alpha1", "Task");
    let ar = ApiResource::from_gvk(&gvk);
    let tasks: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let seen: Seen = Arc::new(Mutex::new(HashMap::new()));
    let watch_seen = seen.clone();
    let stream = watcher(tasks.clone(), watcher::Config::default()).applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Ok(Some(t)) = stream.try_next().await {
            let phase = t
                .data
                .pointer("/status/phase")
                .and_then(|p| p.as_str())
                .map(str::to_owned);
            if let Some(p) = phase.filter(|p| p == "Succeeded" || p == "Failed") {
                let name = t.metadata.name.clone().unwrap_or_default();
                if let Ok(mut seen) = watch_seen.lock() {
                    seen.entry(name)
                        .or_insert((Instant::now(), p == "Succeeded"));
                }
            }
        }
    });

    let task = |name: &str| -> Result<DynamicObject> {
        let mut obj = DynamicObject::new(name, &ar);
        obj.data = serde_json::json!({"spec": {"agentRef": {"name": "echo"}, "input": "x"}});
        Ok(obj)
    };
    let finished = |name: String| {
        let seen = seen.clone();
        async move {
            wait::until(&format!("{name} finished"), Duration::from_secs(60), || {
                let s = seen.lock().ok().and_then(|s| s.get(&name).copied());
                async move { s.ok_or_else(|| "not yet".to_string()) }
            })
            .await
        }
    };

    // Latency: one at a time.
    let mut lat = Vec::with_capacity(args.tasks);
    for i in 0..args.tasks {
        let name = format!("lat-{i}");
        tasks.create(&PostParams::default(), &task(&name)?).await?;
        let created = Instant::now();
        let (at, ok) = finished(name.clone()).await?;
        if !ok {
            bail!("{name} failed");
        }
        lat.push(at.saturating_duration_since(created));
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;

    // Throughput: a burst from 16 concurrent creators.
    let start = Instant::now();
    let names: Vec<String> = (0..args.burst).map(|i| format!("burst-{i}")).collect();
    futures::stream::iter(names.clone())
        .map(|n| {
            let tasks = tasks.clone();
            let obj = task(&n);
            async move {
                tasks
                    .create(&PostParams::default(), &obj?)
                    .await
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let mut last = start;
    let mut failed = 0;
    for n in names {
        let (at, ok) = finished(n).await?;
        last = last.max(at);
        failed += usize::from(!ok);
    }
    let secs = last.duration_since(start).as_secs_f64();

    println!("| measure | value |\n|---|---|");
    println!(
        "| latency create → Succeeded seen ({} sequential) | p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        lat.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "| throughput ({} tasks, 16 creators, 2 executors × concurrency 8) | {:.0} tasks/s ({:.2} s), {failed} failed |",
        args.burst,
        args.burst as f64 / secs,
        secs
    );
    Ok(())
}
