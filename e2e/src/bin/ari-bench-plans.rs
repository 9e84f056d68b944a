//! `ari-bench-plans`: the per-step cost of a Plan against the same work as single Tasks, in one
//! run on a real control plane (BENCHMARKS.md, "Plans").
//!
//! - chain: a Plan of `--chain` echo steps, each taking the previous output, against the same
//!   number of Tasks a client runs one after the other (create, wait, pass the output on);
//! - fan-out: a Plan of `--fan` independent echo steps, against as many Tasks created at once.
//!
//! Each figure is the median of `--runs`. Times are client-side: from the create request to the
//! watch event showing the Plan (or the last Task) finished.
//! Run: `scripts/bench-plans.sh` (or `cargo build --bins && cargo run -p ari-e2e --bin
//! ari-bench-plans`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ari_crds::{Plan, PlanPhase, Task, TaskPhase};
use ari_e2e::scenario::{Ctx, agent_ready, agent_yaml, ready_pods, task_yaml};
use clap::Parser;
use futures::future::try_join_all;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;

#[derive(Parser)]
struct Args {
    /// Steps of the chain.
    #[arg(long, default_value_t = 10)]
    chain: usize,
    /// Width of the fan-out.
    #[arg(long, default_value_t = 50)]
    fan: usize,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ctx = Ctx::start_with_operator()?;
    // The client's buffer task needs the runtime the requests run on.
    let _runtime = ctx.rt.enter();
    let client = ctx.cluster.client();
    let ns = ctx.rt.block_on(ctx.cluster.new_namespace("bench-plans"))?;
    ctx.module_configmap(&ns, "echo-module", "echo")?;
    // Two executors taking 32 Tasks at once each: the fan-out is not held back by slots.
    ctx.apply_ok(
        &ns,
        &agent_yaml("echo", "echo-module", 2, "").replace("concurrency: 4", "concurrency: 32"),
    )?;
    ctx.rt.block_on(async {
        agent_ready(&client, &ns, "echo").await?;
        ari_e2e::wait::until("two echo executors", ari_e2e::wait::DEFAULT, || {
            ready_pods(&client, &ns, "ari.dev/agent=echo", 2)
        })
        .await?;
        anyhow::Ok(())
    })?;
    let plans: Api<Plan> = Api::namespaced(client.clone(), &ns);
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let mut rows = Vec::new();
    for (what, steps) in [("chain", args.chain), ("fan-out", args.fan)] {
        let mut plan_times = Vec::new();
        let mut task_times = Vec::new();
        // One warm-up of each, not counted: the first Tasks pay module loading.
        for run in 0..=args.runs {
            let name = format!("{what}-{run}");
            let plan_time = ctx.rt.block_on(run_plan(&plans, &ns, &name, what, steps))?;
            let task_time = ctx.rt.block_on(run_tasks(&tasks, &name, what, steps))?;
            if run > 0 {
                plan_times.push(plan_time);
                task_times.push(task_time);
            }
        }
        rows.push((
            what,
            steps,
            median(&mut plan_times),
            median(&mut task_times),
        ));
    }
    println!(
        "| graph | steps | Plan | same work as single Tasks | Plan per step | overhead per step |"
    );
    println!("|---|---|---|---|---|---|");
    for (what, steps, plan, tasks) in rows {
        let n = steps as f64;
        let overhead = (plan.as_secs_f64() - tasks.as_secs_f64()) / n;
        println!(
            "| {what} | {steps} | {:.0} ms | {:.0} ms | {:.1} ms | {:+.1} ms |",
            ms(plan),
            ms(tasks),
            ms(plan) / n,
            overhead * 1000.0
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Applies the Plan and waits (on a watch) until it has finished; it must have succeeded.
async fn run_plan(
    plans: &Api<Plan>,
    ns: &str,
    name: &str,
    what: &str,
    steps: usize,
) -> Result<Duration> {
    let body: String = (0..steps)
        .map(|i| match (what, i) {
            ("chain", 0) => "    - {name: s0, agentRef: {name: echo}, input: hop}\n".to_owned(),
            ("chain", i) => format!(
                "    - {{name: s{i}, agentRef: {{name: echo}}, inputFrom: [{{step: s{}}}]}}\n",
                i - 1
            ),
            (_, i) => format!("    - {{name: s{i}, agentRef: {{name: echo}}, input: hop}}\n"),
        })
        .collect();
    let yaml = format!(
        "apiVersion: ari.dev/v1alpha1\nkind: Plan\nmetadata:\n  name: {name}\nspec:\n  limits:\n    maxSteps: {steps}\n    maxParallel: 64\n  steps:\n{body}"
    );
    let plan: Plan = serde_yaml::from_str(&yaml)?;
    let start = Instant::now();
    plans.create(&PostParams::default(), &plan).await?;
    let done = tokio::time::timeout(
        Duration::from_secs(300),
        await_condition(plans.clone(), name, |p: Option<&Plan>| {
            p.is_some_and(|p| p.phase().is_finished())
        }),
    )
    .await
    .context("plan timed out")??;
    let elapsed = start.elapsed();
    let phase = done.map(|p| p.phase());
    ensure!(
        phase == Some(PlanPhase::Succeeded),
        "plan {name} in {ns}: {phase:?}"
    );
    Ok(elapsed)
}

/// The same work as single Tasks: a chain run by the client (each created once the previous
/// finished, its output as input), or every Task created at once.
async fn run_tasks(tasks: &Api<Task>, prefix: &str, what: &str, steps: usize) -> Result<Duration> {
    let start = Instant::now();
    if what == "chain" {
        let mut input = "hop".to_owned();
        for i in 0..steps {
            let name = format!("{prefix}-t{i}");
            let t = create_and_wait(tasks, &name, &input).await?;
            input = t.status.and_then(|s| s.output).unwrap_or_default();
        }
    } else {
        let names: Vec<String> = (0..steps).map(|i| format!("{prefix}-t{i}")).collect();
        try_join_all(names.iter().map(|n| create_and_wait(tasks, n, "hop"))).await?;
    }
    Ok(start.elapsed())
}

async fn create_and_wait(tasks: &Api<Task>, name: &str, input: &str) -> Result<Task> {
    let t: Task = serde_yaml::from_str(&task_yaml(name, "echo", input, ""))?;
    tasks.create(&PostParams::default(), &t).await?;
    let done = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(tasks.clone(), name, |t: Option<&Task>| {
            t.is_some_and(|t| t.is_finished())
        }),
    )
    .await
    .context("task timed out")??
    .context("task gone")?;
    ensure!(
        done.phase() == TaskPhase::Succeeded,
        "task {name}: {:?}",
        done.phase()
    );
    Ok(done)
}
