//! Command-line interface: one module per subcommand.

mod conversation;
mod declaration;
mod flags;
mod inspect;
mod kubectl;
mod models;
mod plan;
mod push;
mod run;
mod tools;
mod verify;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code when the command itself failed (unreadable file, bad flag value, ...).
pub const EXIT_ERROR: u8 = 1;
/// Exit code of `ari verify` when a check failed.
pub const EXIT_VERIFY_FAILED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "ari",
    version,
    about = "Run WebAssembly agents under every limit, metered and attested"
)]
struct Cli {
    /// Directory of the precompiled-artifact cache (default: $XDG_CACHE_HOME/ari/modules).
    #[arg(long, global = true, env = "ARI_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Do not read or write the artifact cache.
    #[arg(long, global = true)]
    no_cache: bool,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    Run(run::RunArgs),
    Inspect(inspect::InspectArgs),
    Verify(verify::VerifyArgs),
    Push(push::PushArgs),
    Worker(worker::WorkerArgs),
    Plan(plan::PlanArgs),
}

pub fn main() -> ExitCode {
    if kubectl::called_as_plugin() {
        init_logging(false);
        return kubectl::main();
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if kubectl::names_cluster_object(&args) {
        init_logging(false);
        return kubectl::main_from(args);
    }
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Worker(_)));
    let runtime_config = ari_runtime::RuntimeConfig {
        cache_dir: if cli.no_cache {
            None
        } else {
            cli.cache_dir
                .or_else(ari_runtime::cache::ArtifactCache::default_dir)
        },
        ..Default::default()
    };
    let result = match cli.command {
        Command::Run(args) => run::run(args, runtime_config),
        Command::Inspect(args) => inspect::inspect(args, runtime_config),
        Command::Verify(args) => verify::verify(args, runtime_config),
        Command::Push(args) => push::push(args),
        Command::Worker(args) => worker::worker(args),
        Command::Plan(args) => plan::plan(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("ari: error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Plain warnings for people at a terminal; JSON at info level for the in-cluster worker.
fn init_logging(worker: bool) {
    let default = if worker { "info" } else { "warn" };
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("ARI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Whatever ARI_LOG says: rmcp logs what MCP servers send (see ari_mcp::SILENCE_SDK_LOGS).
    if let Ok(silenced) = ari_mcp::SILENCE_SDK_LOGS.parse() {
        filter = filter.add_directive(silenced);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if worker {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Reads a component file with a message that names it.
fn read_module(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    std::fs::read(path).with_context(|| format!("cannot read component {}", path.display()))
}
