//! `ari run`: one task, printed as output or as a JSON report.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use ari_runtime::capability::storage::{MemoryBackend, RedbBackend, StorageBackend};
use ari_runtime::capability::{Grants, LoadedModels, LoadedTools, parse_cli_name, parse_size};
use ari_runtime::local::{LocalAgent, LocalDelegator};
use ari_runtime::{Limits, RunReport, Runtime, RuntimeConfig, TaskRequest};

const EXIT_CODES: &str = "\
Exit codes:
  0   the task succeeded
  1   ari itself failed (unreadable file, bad value)
  2   usage error
  10  Trap              (guest trap, panic, memory limit, stack overflow, exit)
  11  FuelExhausted
  12  DeadlineExceeded
  13  CapabilityDenied
  14  HostError
  15  InvalidModule
  16  OutputTooLarge
  17  AgentError        (the agent returned an error code or declined the task)
  18  Cancelled

Delegation: give the task other Agents to call with --agent NAME=FILE (repeatable) and grant it
--grant delegation=NAME[,NAME...][;maxDepth=N][;maxChildren=N]. Each such Agent has no
capabilities unless given with --agent-grant NAME:CAP[=VALUE], default limits, and what its
children may spend comes out of its parent's budget, as in a cluster.

Models: declare one with --model NAME=URL (an OpenAI-compatible API root; --model-id,
--model-provider, --model-key-file or --model-key-env for the rest) and grant it with
--grant models=NAME. The key stays with ari: the agent only names the model. --tokens sets the
task's token budget; every call is recorded, so `ari verify` replays the run without the model.

MCP tools: declare a server with --mcp NAME=URL (its streamable HTTP endpoint; --mcp-protocol,
--mcp-token-file or --mcp-token-env, --mcp-header-env for the rest) and grant its tools with
--grant tools=NAME:TOOL[,TOOL...] (`*` for all). The credentials stay with ari: the agent only
names the server and the tool; every exchange is recorded, so `ari verify` replays the run
without the server.

Approvals: a call of a tool the server marks destructive, or one --require-approval names
(NAME:TOOL, delegation=AGENT, network=ORIGIN), waits for approval: --approve-calls approves it
in your name, otherwise it is rejected. Decisions are recorded, so `ari verify` replays them.";

/// Run an agent component on one input, under limits, and print its output.
#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub struct RunArgs {
    /// The agent component (.wasm, built for wasm32-wasip2).
    component: PathBuf,
    /// The input, as text.
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,
    /// Read the input from a file.
    #[arg(long)]
    input_file: Option<PathBuf>,
    /// Grant a capability: storage=1MiB, network=https://host, randomness, signing=KEYFILE,
    /// timeAccess (alias: time), delegation=AGENT, models=NAME,
    /// tools=SERVER:TOOL[,TOOL...].
    #[arg(long = "grant", value_name = "CAP[=VALUE]")]
    grants: Vec<String>,
    /// Capabilities the task requires (fails CapabilityDenied unless granted).
    #[arg(long = "require", value_name = "CAP")]
    requirements: Vec<String>,
    /// Fuel budget (about one unit per Wasm instruction).
    #[arg(long, default_value_t = Limits::default().fuel)]
    fuel: u64,
    /// Memory limit (total of all linear memories), e.g. 64MiB.
    #[arg(long, default_value = "64MiB")]
    memory: String,
    /// Wall-clock deadline in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Largest output accepted, e.g. 1MiB.
    #[arg(long, default_value = "1MiB")]
    max_output: String,
    /// Largest input accepted, e.g. 1MiB.
    #[arg(long, default_value = "1MiB")]
    max_input: String,
    /// PRNG seed, 64 hex digits (generated and recorded when absent).
    #[arg(long)]
    seed: Option<String>,
    /// Keep storage in an embedded database in this directory (else in memory, lost on exit).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Attestation key (PKCS#8 PEM, 64 hex digits or 32 raw bytes); generated when absent.
    #[arg(long, env = "ARI_ATTESTATION_KEY")]
    key: Option<PathBuf>,
    /// Task id passed to the agent.
    #[arg(long, default_value = "local")]
    id: String,
    /// Handed to the agent's `initialize` (an Agent's `spec.config` in a cluster).
    #[arg(long, conflicts_with = "declaration")]
    config: Option<String>,
    /// Run a declarative Agent: FILE holds an Agent with `spec.declarative` (and any ConfigMap
    /// its `instructionsFrom` names) or a bare declaration; the component is the stock one
    /// (`target/agents/declarative.wasm`). Its config is the declaration's canonical bytes, as
    /// in a cluster, and it may name only what --grant grants.
    #[arg(long, value_name = "FILE")]
    declaration: Option<PathBuf>,
    /// Another Agent this task may delegate to: NAME=FILE (repeatable).
    #[arg(long = "agent", value_name = "NAME=FILE")]
    agents: Vec<String>,
    /// A capability for one of the --agent Agents: NAME:CAP[=VALUE] (repeatable).
    #[arg(long = "agent-grant", value_name = "NAME:CAP[=VALUE]")]
    agent_grants: Vec<String>,
    /// The `initialize` config of one of the --agent Agents: NAME=TEXT (repeatable).
    #[arg(long = "agent-config", value_name = "NAME=TEXT")]
    agent_configs: Vec<String>,
    #[command(flatten)]
    models: super::models::ModelArgs,
    #[command(flatten)]
    tools: super::tools::ToolArgs,
    /// Reply to a conversation: the `--json` report of a turn that ended asking for input.
    /// Repeat for every earlier turn, oldest first; the agent reads them as its history.
    #[arg(long = "continues", value_name = "REPORT")]
    continues: Vec<PathBuf>,
    /// Print one JSON report instead of the output.
    #[arg(long)]
    json: bool,
}

pub fn run(args: RunArgs, config: RuntimeConfig) -> anyhow::Result<u8> {
    let bytes = super::read_module(&args.component)?;
    let input = match (&args.input, &args.input_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path)
            .with_context(|| format!("cannot read input file {}", path.display()))?,
        (None, None) => Vec::new(),
    };
    let models = args.models.load()?;
    let tools = args.tools.load()?;
    let grants = args.tools.with_approvals(
        Grants::parse_cli(&args.grants)?
            .with_models(models.clone())
            .with_tools(tools.clone()),
    )?;
    let declaration = args
        .declaration
        .as_deref()
        .map(super::declaration::load)
        .transpose()?;
    let grants = match &declaration {
        Some(d) => super::declaration::grants(d, grants)?,
        None => grants,
    };
    let limits = Limits {
        fuel: args.fuel,
        memory_bytes: size("--memory", &args.memory)?,
        timeout: Duration::try_from_secs_f64(args.timeout)
            .context("--timeout must be a positive number of seconds")?,
        max_output_bytes: size("--max-output", &args.max_output)?,
        max_input_bytes: size("--max-input", &args.max_input)?,
        tokens: args.models.tokens,
    };
    let seed = args.seed.as_deref().map(parse_seed).transpose()?;
    let key = match &args.key {
        Some(path) => ari_runtime::attestation::load_signing_key(path)?,
        None => ari_runtime::attestation::generate_signing_key(),
    };
    let storage: Box<dyn StorageBackend> = match &args.state {
        Some(dir) => Box::new(
            RedbBackend::open(dir, "local")
                .map_err(|e| anyhow::anyhow!("cannot open state in {}: {e}", dir.display()))?,
        ),
        None => Box::new(MemoryBackend::new()),
    };

    // The guest and the report see the cluster's vocabulary whatever spelling was typed.
    let requirements = args
        .requirements
        .iter()
        .map(|r| parse_cli_name(r))
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = Runtime::new(config)?;
    let key = Arc::new(key);
    let delegator = local_agents(&runtime, &args, key.clone(), (&models, &tools))?;
    let mut req = TaskRequest::new(args.id.clone(), input.clone(), key);
    req.config = match &declaration {
        Some(d) => d.canonical_bytes(),
        None => args.config.clone().unwrap_or_default().into_bytes(),
    };
    req.delegation = delegator.as_ref().map(LocalDelegator::root_context);
    req.requirements = requirements.clone();
    req.grants = grants;
    req.limits = limits;
    req.seed = seed;
    req.storage = Some(storage);
    req.approver = Some(args.tools.approver());
    if let Some((history, link)) = super::conversation::continued(&args.continues)? {
        req.history = history;
        req.conversation = Some(link);
    }
    let (outcome, code) = match runtime.load(&bytes) {
        Ok(agent) => {
            let outcome = agent.run(req);
            let code = outcome.failure_kind().map_or(0, |k| k.exit_code());
            (Some(outcome), code)
        }
        Err(err) => {
            if args.json {
                let report = serde_json::json!({
                    "error": {"kind": err.kind(), "message": err.to_string()}
                });
                println!("{report:#}");
            } else {
                eprintln!("ari: {}: {err}", err.kind());
            }
            (None, err.kind().exit_code())
        }
    };
    let Some(outcome) = outcome else {
        return Ok(code);
    };
    let children = delegator.map(|d| d.finish()).unwrap_or_default();
    if args.json {
        let report = RunReport::tree(outcome, &input, &requirements, children);
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(code);
    }
    for child in &children {
        for line in &child.outcome.logs {
            eprintln!("[{} {}] {line}", child.agent, child.outcome.task_id);
        }
    }
    for line in &outcome.logs {
        eprintln!("[agent] {line}");
    }
    match &outcome.failure {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&outcome.output)?;
            out.flush()?;
            if outcome.input_required {
                eprintln!(
                    "ari: the agent asks for input (its output is the question); reply with \
                     --continues on this run's --json report"
                );
            }
        }
        Some(f) => eprintln!("ari: {}: {}", f.kind, f.message),
    }
    Ok(code)
}

/// The Agents of `--agent`, with their `--agent-grant`s and `--agent-config`s; `None` when
/// there are none. The `--model`s and `--mcp` servers are the namespace's: an Agent granted
/// one of them (with `--agent-grant NAME:models=...` or `NAME:tools=...`) calls it as the root
/// task would.
fn local_agents(
    runtime: &Runtime,
    args: &RunArgs,
    key: Arc<ed25519_dalek::SigningKey>,
    (models, tools): (&LoadedModels, &LoadedTools),
) -> anyhow::Result<Option<LocalDelegator>> {
    let mut grants: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for g in &args.agent_grants {
        let (name, grant) = g
            .split_once(':')
            .with_context(|| format!("--agent-grant `{g}`: expected NAME:CAP[=VALUE]"))?;
        grants.entry(name).or_default().push(grant.to_owned());
    }
    let mut configs: BTreeMap<&str, &str> = BTreeMap::new();
    for c in &args.agent_configs {
        let (name, text) = c
            .split_once('=')
            .with_context(|| format!("--agent-config `{c}`: expected NAME=TEXT"))?;
        configs.insert(name, text);
    }
    let mut agents = BTreeMap::new();
    for a in &args.agents {
        let (name, path) = a
            .split_once('=')
            .with_context(|| format!("--agent `{a}`: expected NAME=FILE"))?;
        let bytes = super::read_module(std::path::Path::new(path))?;
        let agent = runtime
            .load(&bytes)
            .map_err(|e| anyhow::anyhow!("--agent {name}: {}: {e}", e.kind()))?;
        let granted = Grants::parse_cli(grants.remove(name).as_deref().unwrap_or_default())
            .with_context(|| format!("--agent-grant for {name}"))?
            .with_models(models.clone())
            .with_tools(tools.clone());
        let config = configs.remove(name).unwrap_or_default();
        agents.insert(
            name.to_owned(),
            LocalAgent {
                agent,
                grants: granted,
                limits: Limits::default(),
                config: config.as_bytes().to_vec(),
            },
        );
    }
    if let Some(name) = grants.keys().chain(configs.keys()).next() {
        bail!("--agent-grant/--agent-config name `{name}`, which no --agent gives");
    }
    Ok((!agents.is_empty()).then(|| LocalDelegator::new(agents, key)))
}

fn size(flag: &str, text: &str) -> anyhow::Result<u64> {
    match parse_size(text) {
        Some(n) => Ok(n),
        None => bail!("{flag}: `{text}` is not a size (e.g. 65536, 64KiB, 64MiB, 1GiB)"),
    }
}

fn parse_seed(text: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(text.trim()).context("--seed must be hex")?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("--seed must be 32 bytes (64 hex digits)"))
}
