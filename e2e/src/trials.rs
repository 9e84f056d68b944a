//! The `main` of each cluster test binary: one cluster per binary (libtest-mimic, not the
//! default harness, so trials share it), trials run against it in phases, and a failure
//! carries what the shared context adds (the operator's log tail for [`Ctx`]) so CI output says
//! what the cluster saw.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use libtest_mimic::{Arguments, Failed, Trial};

use crate::scenario::Ctx;

/// What the trials of one binary share.
pub trait Shared: Send + Sync + 'static {
    /// Appended to a failed trial's message.
    fn failure_context(&self) -> String {
        String::new()
    }
}

impl Shared for Ctx {
    fn failure_context(&self) -> String {
        self.operator_logs()
    }
}

/// One trial: gets the binary's shared cluster.
pub type TrialFn<C = Ctx> = fn(&C) -> Result<()>;

/// Runs one phase of trials against a cluster with the CRDs and the operator installed.
pub fn run(trials: Vec<(&'static str, TrialFn)>) -> ExitCode {
    run_phases(Ctx::start_with_operator, vec![trials])
}

/// Starts the cluster with `start` (not when only listing), then runs `phases` one after the
/// other; trials within a phase run in parallel (`--test-threads`).
pub fn run_phases<C: Shared>(
    start: fn() -> Result<C>,
    phases: Vec<Vec<(&'static str, TrialFn<C>)>>,
) -> ExitCode {
    let args = Arguments::from_args();
    let ctx: Option<Arc<C>> = if args.list {
        None
    } else {
        match start() {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                eprintln!("cannot start the e2e cluster: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    };
    let trial = |name: &'static str, f: TrialFn<C>| {
        let ctx = ctx.clone();
        Trial::test(name, move || {
            let Some(ctx) = ctx else {
                return Err(Failed::from("no cluster"));
            };
            f(&ctx).map_err(|e| {
                let extra = ctx.failure_context();
                let sep = if extra.is_empty() { "" } else { "\n" };
                Failed::from(format!("{e:#}{sep}{extra}"))
            })
        })
    };
    let failed = if args.list {
        let all = phases.into_iter().flatten().map(|(n, f)| trial(n, f));
        libtest_mimic::run(&args, all.collect()).has_failed()
    } else {
        let mut failed = false;
        for phase in phases {
            let trials = phase.into_iter().map(|(n, f)| trial(n, f)).collect();
            failed |= libtest_mimic::run(&args, trials).has_failed();
        }
        failed
    };
    // The cluster stops before the exit code is returned, not at process exit.
    drop(ctx);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
