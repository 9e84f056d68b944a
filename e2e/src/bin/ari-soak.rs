//! `ari-soak`: the faults soak of issue 7 at full size. Starts a control plane, a node agent and
//! the operator, runs `--tasks` Tasks (default 5,000) of `echo` and `counter` while killing an
//! executor every `--kill-every` seconds, restarting the operator and kube-apiserver, then
//! prints the figures and fails unless every Task succeeded exactly once.
//! Run: `cargo build --bins && scripts/build-agents.sh && cargo run -p ari-e2e --bin ari-soak`.

use std::time::Duration;

use anyhow::Result;
use ari_e2e::scenario::Ctx;
use ari_e2e::soak::{self, SoakConfig};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Tasks in all, half `echo`, half `counter`.
    #[arg(long, default_value_t = 5000)]
    tasks: usize,
    /// Seconds between two executor kills.
    #[arg(long, default_value_t = 3)]
    kill_every: u64,
    /// Restart the operator after every this many executor kills.
    #[arg(long, default_value_t = 6)]
    operator_every: usize,
    /// `echo` executor replicas.
    #[arg(long, default_value_t = 3)]
    echo_replicas: u32,
    /// Seconds an executor process must have run before it may be killed.
    #[arg(long, default_value_t = 10)]
    min_gap: u64,
    /// Tasks created per second (half go to the single `counter` executor).
    #[arg(long, default_value_t = 12)]
    rate: usize,
    /// `echo` Agents in one ExecutorPool (of `--echo-replicas` pods) taking a quarter of the
    /// Tasks; 0 for none.
    #[arg(long, default_value_t = 0)]
    pooled: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = SoakConfig {
        kill_every: Duration::from_secs(args.kill_every.max(1)),
        min_gap: Duration::from_secs(args.min_gap),
        operator_every: args.operator_every.max(1),
        echo_replicas: args.echo_replicas.max(1),
        rate: args.rate.max(1),
        pooled: args.pooled,
        ..SoakConfig::new(args.tasks)
    };
    let ctx = Ctx::start()?;
    ctx.install_operator_manifest()?;
    let report = soak::run(&ctx, &cfg)?;
    println!("{}", report.summary());
    report.check()
}
