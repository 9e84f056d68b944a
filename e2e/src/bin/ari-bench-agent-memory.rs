//! `ari-bench-agent-memory`: the operator's and the A2A gateway's memory with many large
//! exposed Agents (issue 26, item 9;
//! docs/security.md). Creates `--agents` Agents at their size bounds (32 A2A skills, a 64 KiB
//! config, a 4 KiB description, a 200 KB annotation: ≈ 500 KB each) whose module ConfigMap does
//! not exist (so no executors run), waits until the operator has reconciled each, then restarts
//! the operator (its first list holds them all) and waits until its Task controller runs (it
//! starts only once the Agent cache has listed everything), and the gateway (Ready once both of
//! its watches have listed). Prints each process's `VmRSS` and peak `VmHWM` at each point.
//! Run: `cargo build --bins && cargo run -p ari-e2e --bin ari-bench-agent-memory`.

use anyhow::{Context, Result, ensure};
use ari_crds::Agent;
use ari_e2e::scenario::{Ctx, OPERATOR_NS, ready_pods, task_finished, task_yaml};
use ari_e2e::wait;
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Agents to create.
    #[arg(long, default_value_t = 300)]
    agents: usize,
}

const OPERATOR_PODS: &str = "app.kubernetes.io/name=ari-operator";
const GATEWAY_PODS: &str = "app.kubernetes.io/name=ari-gateway";

fn main() -> Result<()> {
    let args = Args::parse();
    let ctx = Ctx::start_with_operator()?;
    let _runtime = ctx.rt.enter();
    let client = ctx.cluster.client();
    let ns = ctx.rt.block_on(ctx.cluster.new_namespace("bench-agents"))?;
    let bytes = serde_json::to_vec(&large_agent(0))?.len();
    let (pod, pid) = ctx
        .rt
        .block_on(ready_pid(&ctx, &client, OPERATOR_PODS, None))?;
    let (gw_pod, gw_pid) = ctx
        .rt
        .block_on(ready_pid(&ctx, &client, GATEWAY_PODS, None))?;
    let baseline = memory(pid)?;
    let gw_baseline = memory(gw_pid)?;
    ctx.rt.block_on(async {
        let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
        stream::iter(0..args.agents)
            .map(|i| {
                let agents = agents.clone();
                async move {
                    let agent: Agent = serde_json::from_value(large_agent(i))?;
                    agents.create(&PostParams::default(), &agent).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<()>>()
            .await?;
        wait::until("every Agent reconciled", wait::DEFAULT * 4, || async {
            let list = agents
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let done = list
                .items
                .iter()
                .filter(|a| {
                    a.status
                        .as_ref()
                        .is_some_and(|s| s.observed_generation.is_some())
                })
                .count();
            if done == args.agents {
                Ok(())
            } else {
                Err(format!("{done} of {} reconciled", args.agents))
            }
        })
        .await?;
        anyhow::Ok(())
    })?;
    let loaded = memory(pid)?;
    let gw_loaded = memory(gw_pid)?;

    // A restarted operator lists them all at once.
    let (_, new_pid) = ctx.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
        pods.delete(&pod, &DeleteParams::default()).await?;
        ready_pid(&ctx, &client, OPERATOR_PODS, Some(&pod)).await
    })?;
    ctx.rt.block_on(async {
        // Decided only by a Task controller, which starts after the Agent cache is complete.
        ctx.apply_ok(&ns, &task_yaml("probe", "nobody", "x", ""))?;
        task_finished(&client, &ns, "probe", wait::DEFAULT).await?;
        anyhow::Ok(())
    })?;
    let relisted = memory(new_pid)?;
    let (_, gw_new_pid) = ctx.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
        pods.delete(&gw_pod, &DeleteParams::default()).await?;
        ready_pid(&ctx, &client, GATEWAY_PODS, Some(&gw_pod)).await
    })?;
    let gw_relisted = memory(gw_new_pid)?;

    println!(
        "{} Agents of {} KB each ({} MB in all)",
        args.agents,
        bytes / 1000,
        bytes * args.agents / 1_000_000
    );
    println!("| when | operator VmRSS | operator peak (VmHWM) | gateway VmRSS | gateway peak |");
    println!("|---|---:|---:|---:|---:|");
    for (what, (rss, hwm), (gw_rss, gw_hwm)) in [
        ("ready, no Agents", baseline, gw_baseline),
        ("every Agent reconciled", loaded, gw_loaded),
        ("restarted, all listed", relisted, gw_relisted),
    ] {
        println!(
            "| {what} | {} | {} | {} | {} |",
            mib(rss),
            mib(hwm),
            mib(gw_rss),
            mib(gw_hwm)
        );
    }
    Ok(())
}

/// A Ready pod of `selector` in the operator's namespace (other than `not`) and its process id.
async fn ready_pid(
    ctx: &Ctx,
    client: &Client,
    selector: &str,
    not: Option<&str>,
) -> Result<(String, u32)> {
    let pods = wait::until(
        &format!("a Ready pod of {selector}"),
        wait::DEFAULT,
        || async {
            let ready = ready_pods(client, OPERATOR_NS, selector, 1).await?;
            let fresh: Vec<Pod> = ready
                .into_iter()
                .filter(|p| Some(p.name_any().as_str()) != not)
                .collect();
            if fresh.is_empty() {
                Err("only the old pod".into())
            } else {
                Ok(fresh)
            }
        },
    )
    .await?;
    let name = pods[0].name_any();
    let pid = ctx
        .node
        .pod_pids(OPERATOR_NS, &name)
        .into_values()
        .next()
        .with_context(|| format!("no process for pod {name}"))?;
    Ok((name, pid))
}

/// `VmRSS` and `VmHWM` of `pid`, in bytes.
fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} for {pid}"))?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed")?
            .parse()?;
        Ok(kib * 1024)
    };
    let (rss, hwm) = (field("VmRSS:")?, field("VmHWM:")?);
    ensure!(rss > 0, "no memory reading for {pid}");
    Ok((rss, hwm))
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

/// An Agent at its size bounds; its module ConfigMap does not exist, so it gets no executors.
fn large_agent(i: usize) -> serde_json::Value {
    let skill = |s: usize| {
        json!({"id": format!("skill-{s}"), "name": "n".repeat(127), "description": "d".repeat(1024),
               "tags": vec!["t".repeat(256); 16], "examples": vec!["e".repeat(256); 8]})
    };
    json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": format!("large-{i}"),
                     "annotations": {"example.com/notes": "x".repeat(200_000)}},
        "spec": {
            "module": {"configMap": {"name": "absent", "key": "module.wasm"}},
            "description": "d".repeat(4096),
            "config": "c".repeat(64 << 10),
            "a2a": {"exposed": true, "skills": (0..32).map(skill).collect::<Vec<_>>()},
        }
    })
}
