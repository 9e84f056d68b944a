//! `ari-bench-delegation`: what one delegation hop adds, in one run on a real control plane
//! (BENCHMARKS.md, "Delegation in the cluster").
//!
//! Plain: a Task on `echo`. One hop: a Task on `relay` (fixtures/agents/relay, `pass:TEXT`),
//! whose guest delegates the same input to `echo` and waits for it, so the child is a second
//! Task created, claimed, run and read back by the parent's executor. The two alternate, one at
//! a time, so both see the same machine. Times are client-side: from the create request to the
//! watch event showing the Task finished.
//! Run: `scripts/build-agents.sh && cargo build --bins && cargo run -p ari-e2e --bin
//! ari-bench-delegation -- --tasks 200`.

use anyhow::Result;
use ari_crds::Task;
use ari_e2e::bench::{percentiles, task_round_trip};
use ari_e2e::scenario::{Ctx, agent_ready, agent_yaml};
use clap::Parser;
use kube::api::Api;

#[derive(Parser)]
struct Args {
    /// Tasks of each kind (after 10 warm-up pairs, not counted).
    #[arg(long, default_value_t = 200)]
    tasks: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ctx = Ctx::start_with_operator()?;
    let _runtime = ctx.rt.enter();
    let client = ctx.cluster.client();
    let ns = ctx
        .rt
        .block_on(ctx.cluster.new_namespace("bench-delegation"))?;
    ctx.module_configmap(&ns, "echo-module", "echo")?;
    ctx.module_configmap(&ns, "relay-module", "relay")?;
    ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
    ctx.apply_ok(
        &ns,
        &agent_yaml(
            "relay",
            "relay-module",
            1,
            "  config: echo\n  capabilities:\n    delegation:\n      agents: [echo]\n",
        ),
    )?;
    ctx.rt.block_on(async {
        agent_ready(&client, &ns, "echo").await?;
        agent_ready(&client, &ns, "relay").await?;
        anyhow::Ok(())
    })?;
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let (mut plain, mut hop) = (Vec::new(), Vec::new());
    for i in 0..args.tasks + 10 {
        let p = ctx.rt.block_on(task_round_trip(
            &tasks,
            &format!("plain-{i}"),
            "echo",
            "hello",
        ))?;
        let h = ctx.rt.block_on(task_round_trip(
            &tasks,
            &format!("hop-{i}"),
            "relay",
            "pass:hello",
        ))?;
        if i >= 10 {
            plain.push(p);
            hop.push(h);
        }
    }
    let (p, h) = (percentiles(&mut plain), percentiles(&mut hop));
    println!("| Task | p50 | p99 |");
    println!("|---|---|---|");
    println!("| plain (`echo`) | {:.1} ms | {:.1} ms |", p.0, p.1);
    println!(
        "| one delegation hop (`relay` → `echo`) | {:.1} ms | {:.1} ms |",
        h.0, h.1
    );
    println!(
        "\nadded by the hop: p50 {:+.1} ms, p99 {:+.1} ms; one-hop/plain p50 ratio {:.2} ({} of each)",
        h.0 - p.0,
        h.1 - p.1,
        h.0 / p.0,
        args.tasks
    );
    Ok(())
}
