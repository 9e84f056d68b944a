//! The faults soak in the suite (issue 7, item 2), at a size CI affords: `ARI_SOAK_TASKS`
//! Tasks (default 400) of `echo` (a quarter of them on `ARI_SOAK_POOLED`, default 20, Agents
//! sharing one ExecutorPool) and the storage agent `counter` while executors are killed every
//! few seconds, the operator restarted and kube-apiserver restarted once. Every Task must end
//! `Succeeded` exactly once and `counter`'s state must equal its successful Tasks. The full
//! 5,000-Task run is `cargo run -p ari-e2e --bin ari-soak` (docs/security.md).
//! Run: `cargo build --bins && cargo test -p ari-e2e --test faults`.

use anyhow::Result;
use ari_e2e::scenario::Ctx;
use ari_e2e::soak::{self, SoakConfig};
use ari_e2e::trials;

fn main() -> std::process::ExitCode {
    trials::run_phases(
        Ctx::start,
        vec![vec![("no_task_lost_or_doubled_under_faults", soak_trial)]],
    )
}

fn soak_trial(ctx: &Ctx) -> Result<()> {
    let tasks = std::env::var("ARI_SOAK_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    ctx.install_operator_manifest()?;
    // A quarter of the Tasks go to Agents sharing one pool, whose pods are killed too.
    let pooled = std::env::var("ARI_SOAK_POOLED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let cfg = SoakConfig {
        pooled,
        ..SoakConfig::new(tasks)
    };
    let report = soak::run(ctx, &cfg)?;
    eprintln!("{}", report.summary());
    report.check()?;
    anyhow::ensure!(
        report.executor_kills >= 3
            && (pooled == 0 || report.pool_kills >= 1)
            && report.operator_restarts >= 1
            && report.apiserver_restarts == 1,
        "too few faults injected to mean anything: {}",
        report.summary()
    );
    Ok(())
}
