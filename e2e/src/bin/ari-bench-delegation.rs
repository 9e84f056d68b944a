//! `ari-bench-delegation`: what one delegation hop adds, in one run on a real control plane
//! (BENCHMARKS.md, "Delegation in the cluster").
//!
//! Plain: a Task on `echo`. One hop: a Task on `relay` (fixtures/agents/relay, `pass:TEXT`),
//! whose guest delegates the same input to `echo` and waits for it, so the child is a second
//! Task created, claimed, run and read back by the parent's executor. The two alternate, one at
//! a time, so both see the same machine. Times are client-side: from the create request to the
//! watch event showing the Task finished.
//!
//! Then `kubectl ari verify` of a whole tree: a `fanout` Task with `--verify-children` children
//! (each a `wordcount` Task), every Agent keeping its trace, against one `wordcount` Task alone;
//! each verification a process (`ari verify task/NAME`, the binary of `--ari` or of this
//! build's profile) that fetches, checks and replays every Task, alternating, `--verify-rounds`
//! of each.
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
    /// Children of the tree `ari verify` checks whole.
    #[arg(long, default_value_t = 10)]
    verify_children: usize,
    /// Verifications of the tree and of the lone Task each (after one warm-up of each).
    #[arg(long, default_value_t = 20)]
    verify_rounds: usize,
    /// The `ari` binary that verifies (default: this build profile's).
    #[arg(long)]
    ari: Option<std::path::PathBuf>,
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
    verify_tree(&ctx, &args)
}

/// `ari verify` of a tree of `verify_children` children against one Task alone.
fn verify_tree(ctx: &Ctx, args: &Args) -> Result<()> {
    let client = ctx.cluster.client();
    let ns = ctx.rt.block_on(ctx.cluster.new_namespace("bench-verify"))?;
    ctx.module_configmap(&ns, "fanout-module", "fanout")?;
    ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
    let keep = "  trace: Keep\n";
    ctx.apply_ok(&ns, &agent_yaml("wordcount", "wordcount-module", 1, keep))?;
    let grant = "  capabilities:\n    delegation:\n      agents: [wordcount]\n";
    ctx.apply_ok(
        &ns,
        &agent_yaml("fanout", "fanout-module", 1, &format!("{keep}{grant}")),
    )?;
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let lines: Vec<String> = (0..args.verify_children)
        .map(|i| format!("line {i} of the tree"))
        .collect();
    ctx.rt.block_on(async {
        agent_ready(&client, &ns, "wordcount").await?;
        agent_ready(&client, &ns, "fanout").await?;
        task_round_trip(&tasks, "tree", "fanout", &lines.join("\n")).await?;
        task_round_trip(&tasks, "lone", "wordcount", "line 0 of the tree").await?;
        anyhow::Ok(())
    })?;
    let ari = match args.ari.clone().or_else(|| ari_e2e::built_binary("ari")) {
        Some(ari) => ari,
        None => anyhow::bail!("no ari binary is built (cargo build -p ari-executor)"),
    };
    let verify = |task: &str| -> Result<std::time::Duration> {
        let start = std::time::Instant::now();
        let out = std::process::Command::new(&ari)
            .args(["verify", &format!("task/{task}"), "-n", &ns])
            .env("KUBECONFIG", ctx.cluster.kubeconfig_path())
            .output()?;
        let took = start.elapsed();
        let said = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(
            out.status.success() && said.matches("replayed: same output").count() > 0,
            "ari verify task/{task}: {said}"
        );
        Ok(took)
    };
    let (mut tree, mut lone) = (Vec::new(), Vec::new());
    for i in 0..=args.verify_rounds {
        let (t, l) = (verify("tree")?, verify("lone")?);
        if i > 0 {
            tree.push(t);
            lone.push(l);
        }
    }
    let (t, l) = (percentiles(&mut tree), percentiles(&mut lone));
    println!("\n| `ari verify task/…` (fetch, check, replay every Task) | p50 | p99 |");
    println!("|---|---|---|");
    println!("| one `wordcount` Task | {:.1} ms | {:.1} ms |", l.0, l.1);
    println!(
        "| `fanout` tree: 1 + {} Tasks | {:.1} ms | {:.1} ms |",
        args.verify_children, t.0, t.1
    );
    println!(
        "\ntree/lone p50 ratio {:.2}; per Task of the tree {:.1} ms ({} rounds of each, `{}`)",
        t.0 / l.0,
        t.0 / (args.verify_children + 1) as f64,
        args.verify_rounds,
        ari.display()
    );
    Ok(())
}
