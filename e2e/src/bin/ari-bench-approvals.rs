//! `ari-bench-approvals`: how long a decision takes to reach a waiting guest, on a real control
//! plane (BENCHMARKS.md, "Approvals in the cluster").
//!
//! A `toolbox` Agent calls the official MCP Python SDK's `delete_everything` (marked
//! destructive, so it waits). Each round: a Task is created; once its status shows the waiting
//! call, the decision is written (a merge patch of `spec.approvals`, as `kubectl ari approve`
//! writes it) and the time runs from that write's answer to the watch event showing the Task
//! ended: the executor's watch seeing the decision, the parked guest resuming, the one MCP
//! `call` exchange, and the final status write. Beside it, alternating: the same Task with its
//! decision written at creation (the call never waits), from its creation to its end, and the
//! same server's `echo` tool from creation to end (no approval at all).
//! Run: `scripts/build-agents.sh && cargo build --bins && ARI_MCP_PYTHON=$(scripts/mcp-server.sh
//! | tail -n 1) cargo run -p ari-e2e --bin ari-bench-approvals -- --rounds 30`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ari_crds::Task;
use ari_e2e::bench::percentiles;
use ari_e2e::registry;
use ari_e2e::scenario::{Ctx, agent_ready, task_yaml};
use ari_testkit::mcp_server::{McpServer, Mode};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

#[derive(Parser)]
struct Args {
    /// Rounds of each kind (after 3 warm-up rounds, not counted).
    #[arg(long, default_value_t = 30)]
    rounds: usize,
}

const DESTROY: &str = "call demo delete_everything {\"confirm\":true}";
const ECHO: &str = "call demo echo {\"text\":\"hi\"}";

fn main() -> Result<()> {
    let args = Args::parse();
    let python = McpServer::installed().map_err(anyhow::Error::msg)?;
    let server = McpServer::start(&python, Mode::Sessions, None);
    let ctx = Ctx::start()?;
    registry::install_operator_with(
        &ctx,
        "ARI_TOOL_PROBE_INTERNAL_ENDPOINTS",
        &format!("127.0.0.1:{}", server.port()),
    )?;
    let _runtime = ctx.rt.enter();
    let client = ctx.cluster.client();
    let ns = ctx
        .rt
        .block_on(ctx.cluster.new_namespace("bench-approvals"))?;
    ctx.module_configmap(&ns, "toolbox-module", "toolbox")?;
    ctx.apply_ok(
        &ns,
        &format!(
            "apiVersion: ari.dev/v1alpha1
kind: MCPServer
metadata:
  name: demo
spec:
  url: {:?}
---
apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: toolbox
spec:
  module:
    configMap:
      name: toolbox-module
      key: module.wasm
  executor:
    replicas: 1
    concurrency: 4
  limits:
    timeoutSeconds: 600
  capabilities:
    tools:
      servers:
        - name: demo
          tools: [\"*\"]
",
            server.url()
        ),
    )?;
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let (mut decided, mut pre, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    ctx.rt.block_on(async {
        agent_ready(&client, &ns, "toolbox").await?;
        let me = whoami(&client).await?;
        for i in 0..args.rounds + 3 {
            let d = decision_to_end(&ctx, &tasks, &ns, &format!("wait-{i}"), &me).await?;
            let p = pre_approved(&ctx, &tasks, &ns, &format!("pre-{i}"), &me).await?;
            let e = create_to_end(&ctx, &tasks, &ns, &format!("echo-{i}"), ECHO, "").await?;
            if i >= 3 {
                decided.push(d);
                pre.push(p);
                plain.push(e);
            }
        }
        anyhow::Ok(())
    })?;
    let (d, p, e) = (
        percentiles(&mut decided),
        percentiles(&mut pre),
        percentiles(&mut plain),
    );
    println!("| what | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| decision written → Task ended (waiting `delete_everything`) | {:.1} ms | {:.1} ms |",
        d.0, d.1
    );
    println!(
        "| decided at creation: created → ended (`delete_everything`, never waits) | {:.1} ms | {:.1} ms |",
        p.0, p.1
    );
    println!(
        "| no approval: created → ended (`echo` tool) | {:.1} ms | {:.1} ms |",
        e.0, e.1
    );
    println!("\n{} rounds of each, alternating", args.rounds);
    Ok(())
}

/// The name the API server knows this client by: the approver it admits.
async fn whoami(client: &Client) -> Result<String> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .context("no username")
}

/// Creates the waiting Task, writes the decision once the call shows, and times from the
/// write's answer to the Task's end.
async fn decision_to_end(
    ctx: &Ctx,
    tasks: &Api<Task>,
    ns: &str,
    name: &str,
    me: &str,
) -> Result<Duration> {
    ctx.apply_ok(ns, &task_yaml(name, "toolbox", DESTROY, ""))?;
    let waiting = until(tasks, name, |t| {
        t.status.as_ref().and_then(|s| s.pending_approval.clone())
    })
    .await?;
    let patch = serde_json::json!({"spec": {"approvals": [
        {"call": waiting.call, "decision": "Approved", "approver": me}]}});
    tasks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let start = Instant::now();
    until(tasks, name, |t| t.is_finished().then_some(())).await?;
    Ok(start.elapsed())
}

/// The same call decided at creation (its id is its index and content): never waits.
async fn pre_approved(
    ctx: &Ctx,
    tasks: &Api<Task>,
    ns: &str,
    name: &str,
    me: &str,
) -> Result<Duration> {
    let call = ari_model::approval::call_id(0, "demo", "delete_everything", "{\"confirm\":true}");
    let extra =
        format!("  approvals:\n  - call: {call:?}\n    decision: Approved\n    approver: {me:?}\n");
    create_to_end(ctx, tasks, ns, name, DESTROY, &extra).await
}

async fn create_to_end(
    ctx: &Ctx,
    tasks: &Api<Task>,
    ns: &str,
    name: &str,
    input: &str,
    extra: &str,
) -> Result<Duration> {
    let start = Instant::now();
    ctx.apply_ok(ns, &task_yaml(name, "toolbox", input, extra))?;
    let task = until(tasks, name, |t| t.is_finished().then(|| t.clone())).await?;
    anyhow::ensure!(
        task.status
            .as_ref()
            .and_then(|s| s.output.as_deref())
            .is_some_and(|o| !o.starts_with("error")),
        "task {name} did not run its call: {:?}",
        task.status.and_then(|s| s.output)
    );
    Ok(start.elapsed())
}

/// Watches the Task until `seen` returns something (two minutes at most).
async fn until<T>(tasks: &Api<Task>, name: &str, seen: impl Fn(&Task) -> Option<T>) -> Result<T> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(tasks.clone(), config).applied_objects());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while let Ok(Some(task)) = tokio::time::timeout_at(deadline, stream.next()).await {
        if let Some(v) = seen(&task?) {
            return Ok(v);
        }
    }
    anyhow::bail!("task {name}: not seen in two minutes")
}
