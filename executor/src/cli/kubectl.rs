//! `kubectl ari`: the `ari` binary installed (or linked) as `kubectl-ari` on the `PATH` is a
//! kubectl plugin for the cluster of the current kubeconfig: run an Agent and wait for its
//! answer, cancel a Task, read a Task's guest log lines, check its attestation, and see what
//! each Agent used. kubectl's conventions: `-n`, `--context`, `--kubeconfig`, `-o json|yaml`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ari_crds::names::LABEL_AGENT;
use ari_crds::{Task, TaskPhase, TaskSpec};
use base64::Engine as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{Value, json};

use super::EXIT_ERROR;

mod approve;
mod verify;

/// Exit code of `kubectl ari run` when the Task ended without succeeding.
pub const EXIT_TASK_FAILED: u8 = 4;
/// Exit code of `kubectl ari run` when the Task had not ended within `--timeout`.
pub const EXIT_TIMED_OUT: u8 = 5;
/// Most executor log bytes `logs` reads from each pod.
const MAX_LOG_BYTES: i64 = 16 << 20;

#[derive(Parser)]
#[command(
    name = "kubectl ari",
    version,
    about = "Run ari Agents, follow their Tasks and check their attestations"
)]
pub struct KubectlCli {
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// The kubeconfig context (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
    /// The kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Creates a Task for AGENT, shows its progress, prints its output and usage; the exit
    /// code says how it ended (0 succeeded, 4 did not, 5 still running at --timeout).
    Run(RunArgs),
    /// Asks a Task to stop (spec.cancelled).
    Cancel(TaskArg),
    /// The guest's log lines of a Task, from its Agent's executor pods.
    Logs(TaskArg),
    /// Checks a Task's attestation against the key its Agent publishes, then replays the run
    /// locally from the trace the Task kept (`spec.trace: Keep`): exit 3 when either fails.
    Verify(verify::VerifyArgs),
    /// What each Agent's Tasks used: counts by phase, fuel, tokens, model and tool calls.
    Top(TopArgs),
    /// Lets the call a Task waits on run (`status.pendingApproval`), in your name.
    Approve(approve::DecideArgs),
    /// Refuses the call a Task waits on: its guest gets a `rejected` error, in your name.
    Reject(approve::DecideArgs),
}

#[derive(Args)]
struct RunArgs {
    agent: String,
    /// The input, as text.
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,
    /// The input, from a file (sent as bytes when it is not UTF-8).
    #[arg(long)]
    input_file: Option<PathBuf>,
    /// Token budget for the Task's model calls (the Agent's ceiling applies).
    #[arg(long)]
    tokens: Option<u64>,
    /// Fuel for the Task (the Agent's ceiling applies).
    #[arg(long)]
    fuel: Option<u64>,
    /// The Task's deadline.
    #[arg(long)]
    deadline_seconds: Option<u32>,
    /// How long to wait for the Task to end, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Print the Task's name and return at once.
    #[arg(long)]
    no_wait: bool,
    /// Keep the Task's host-call trace beside it (`spec.trace: Keep`), so `kubectl ari
    /// verify` can replay it.
    #[arg(long)]
    keep_trace: bool,
    /// Print the whole Task instead of its output.
    #[arg(short = 'o', long)]
    output: Option<Format>,
}

#[derive(Args)]
struct TaskArg {
    /// `task/NAME` (or NAME).
    task: String,
    #[arg(short = 'o', long)]
    output: Option<Format>,
}

#[derive(Args)]
struct TopArgs {
    #[arg(short = 'o', long)]
    output: Option<Format>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Yaml,
}

/// Whether the binary was called as the plugin (`kubectl-ari`, which kubectl runs for `kubectl
/// ari`).
pub fn called_as_plugin() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .is_some_and(|stem| stem == "kubectl-ari")
}

/// Whether `ari ARGS` names the cluster's objects (`ari verify task/NAME`, `plan/NAME`): the
/// plugin's verify then serves it, with its `-n`, `--context` and `--kubeconfig`.
pub fn names_cluster_object(args: &[std::ffi::OsString]) -> bool {
    let arg = |i: usize| args.get(i).and_then(|a| a.to_str());
    arg(1) == Some("verify")
        && arg(2).is_some_and(|t| {
            [
                "task/",
                "tasks/",
                "task.ari.dev/",
                "plan/",
                "plans/",
                "plan.ari.dev/",
            ]
            .iter()
            .any(|p| t.starts_with(p))
        })
}

pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// The plugin, parsing `args` (the first is the program's name).
pub fn main_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = KubectlCli::parse_from(args);
    let io = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(io) => io,
        Err(e) => {
            eprintln!("kubectl-ari: error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match io.block_on(cli.run()) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("kubectl-ari: error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

impl KubectlCli {
    async fn run(self) -> anyhow::Result<u8> {
        let (client, ns) = self.client().await?;
        match self.command {
            PluginCommand::Run(args) => run(client, &ns, args).await,
            PluginCommand::Cancel(a) => cancel(client, &ns, &a).await,
            PluginCommand::Logs(a) => logs(client, &ns, &a).await,
            PluginCommand::Verify(a) => verify::verify(client, &ns, &a).await,
            PluginCommand::Top(a) => top(client, &ns, &a).await,
            PluginCommand::Approve(a) => {
                approve::decide(client, &ns, &a, ari_crds::Decision::Approved).await
            }
            PluginCommand::Reject(a) => {
                approve::decide(client, &ns, &a, ari_crds::Decision::Rejected).await
            }
        }
    }

    /// A client for the chosen kubeconfig and context, and the namespace to work in.
    async fn client(&self) -> anyhow::Result<(Client, String)> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(file, &options).await?
            }
            None => Config::from_kubeconfig(&options)
                .await
                .context("no usable kubeconfig (set KUBECONFIG or --kubeconfig)")?,
        };
        let ns = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        Ok((Client::try_from(config)?, ns))
    }
}

/// `NAME` of `task/NAME`, `tasks/NAME`, `task.ari.dev/NAME` or `NAME`.
fn task_name(arg: &str) -> anyhow::Result<&str> {
    let name = match arg.split_once('/') {
        Some(("task" | "tasks" | "task.ari.dev" | "tasks.ari.dev", name)) => name,
        Some((kind, _)) => bail!("{arg:?}: a Task is named task/NAME, not {kind}/..."),
        None => arg,
    };
    if name.is_empty() {
        bail!("{arg:?}: no Task name");
    }
    Ok(name)
}

fn print(value: &impl serde::Serialize, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => serde_json::to_string_pretty(value)?,
        Format::Yaml => serde_yaml::to_string(value)?,
    };
    println!("{text}");
    Ok(())
}

async fn run(client: Client, ns: &str, args: RunArgs) -> anyhow::Result<u8> {
    let api: Api<Task> = Api::namespaced(client, ns);
    let mut spec = TaskSpec::for_agent(&args.agent);
    match (&args.input, &args.input_file) {
        (Some(text), _) => spec.input = Some(text.clone()),
        (None, Some(path)) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            match String::from_utf8(bytes) {
                Ok(text) => spec.input = Some(text),
                Err(e) => {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                    spec.input_base64 = Some(b64);
                }
            }
        }
        (None, None) => spec.input = Some(String::new()),
    }
    spec.tokens = args.tokens;
    spec.fuel = args.fuel;
    spec.deadline_seconds = args.deadline_seconds;
    spec.trace = args.keep_trace.then_some(ari_crds::TracePolicy::Keep);
    let prefix: String = args.agent.chars().take(50).collect();
    let task = Task {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let created = api.create(&PostParams::default(), &task).await?;
    let name = created.name_any();
    if args.no_wait {
        println!("task/{name}");
        return Ok(0);
    }
    eprintln!("task/{name} created");
    let limit = Duration::from_secs(args.timeout);
    let Ok(ended) = tokio::time::timeout(limit, until_finished(&api, &name)).await else {
        eprintln!("task/{name} has not ended after {}s", args.timeout);
        return Ok(EXIT_TIMED_OUT);
    };
    let ended = ended?;
    if let Some(format) = args.output {
        print(&ended, format)?;
    } else {
        show_output(&ended)?;
    }
    eprintln!("{}", summary(&ended));
    Ok(if ended.phase() == TaskPhase::Succeeded {
        0
    } else {
        EXIT_TASK_FAILED
    })
}

/// Follows the Task, telling each phase it reaches, until it has ended.
async fn until_finished(api: &Api<Task>, name: &str) -> anyhow::Result<Task> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(api.clone(), config).applied_objects());
    let mut told = None;
    while let Some(task) = stream.next().await {
        let task = task?;
        let phase = task.phase();
        if told != Some(phase) {
            eprintln!("task/{name}: {phase:?}");
            told = Some(phase);
        }
        if task.is_finished() {
            return Ok(task);
        }
    }
    bail!("the watch of task/{name} ended")
}

/// The output on stdout, as the guest wrote it; or where it is kept.
fn show_output(task: &Task) -> anyhow::Result<()> {
    let Some(s) = &task.status else {
        return Ok(());
    };
    let mut out = std::io::stdout().lock();
    if let Some(text) = &s.output {
        writeln!(out, "{text}")?;
    } else if let Some(b64) = &s.output_base64 {
        out.write_all(&base64::engine::general_purpose::STANDARD.decode(b64)?)?;
    } else if let Some(r) = &s.output_ref {
        eprintln!(
            "output: ConfigMap {} key {} (sha256 {})",
            r.config_map,
            r.key,
            s.output_sha256.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// One line: how it ended and what it used.
fn summary(task: &Task) -> String {
    let s = task.status.clone().unwrap_or_default();
    let used = s.resources_used.unwrap_or_default();
    let mut line = format!(
        "{:?}/{}: fuel {}, {} ms",
        task.phase(),
        s.reason.map_or("-", |r| r.as_str()),
        used.fuel,
        used.wall_millis
    );
    if used.model_calls > 0 {
        line.push_str(&format!(
            ", {} model call(s), {} in / {} out tokens",
            used.model_calls, used.input_tokens, used.output_tokens
        ));
    }
    if used.tool_calls > 0 {
        line.push_str(&format!(", {} tool call(s)", used.tool_calls));
    }
    if let Some(m) = s.message.filter(|_| task.phase() != TaskPhase::Succeeded) {
        line.push_str(&format!("; {m}"));
    }
    line
}

async fn cancel(client: Client, ns: &str, arg: &TaskArg) -> anyhow::Result<u8> {
    let name = task_name(&arg.task)?;
    let api: Api<Task> = Api::namespaced(client, ns);
    let task = api.get(name).await?;
    if task.is_finished() {
        println!("task/{name} already ended {:?}", task.phase());
        return Ok(0);
    }
    let patch = Patch::Merge(json!({"spec": {"cancelled": true}}));
    api.patch(name, &PatchParams::default(), &patch).await?;
    println!("task/{name} cancelled");
    Ok(0)
}

async fn logs(client: Client, ns: &str, arg: &TaskArg) -> anyhow::Result<u8> {
    let name = task_name(&arg.task)?;
    let task: Task = Api::namespaced(client.clone(), ns).get(name).await?;
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let selector = format!(
        "app.kubernetes.io/name=ari-executor,{LABEL_AGENT}={}",
        task.spec.agent_ref.name
    );
    let params = LogParams {
        container: Some("executor".into()),
        limit_bytes: Some(MAX_LOG_BYTES),
        ..Default::default()
    };
    let mut lines = Vec::new();
    for pod in pods.list(&ListParams::default().labels(&selector)).await? {
        let text = pods.logs(&pod.name_any(), &params).await?;
        lines.extend(text.lines().filter_map(|l| guest_line(l, ns, name)));
    }
    lines.sort();
    match arg.output {
        Some(format) => print(&lines, format)?,
        None => {
            for (_, line) in &lines {
                println!("{line}");
            }
        }
    }
    Ok(0)
}

/// `(timestamp, "LEVEL message")` of an executor log line the guest of Task `ns/name` wrote.
fn guest_line(line: &str, ns: &str, name: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v["target"] != "ari::guest" {
        return None;
    }
    let ours = |span: &Value| span["task"] == name && span["namespace"] == ns;
    let tagged = ours(&v["span"])
        || v["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(ours));
    if !tagged {
        return None;
    }
    let message = v["fields"]["message"].as_str().unwrap_or_default();
    let level = v["level"].as_str().unwrap_or("INFO");
    let at = v["timestamp"].as_str().unwrap_or_default().to_owned();
    Some((at, format!("{level} {message}")))
}

/// What one Agent's Tasks used: their count by phase and their `resourcesUsed` added up as a
/// Task of many items adds its items' (counts summed, `memoryBytes` the largest any one
/// Task's instance reached).
#[derive(serde::Serialize, Default, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct AgentUse {
    tasks: BTreeMap<String, u64>,
    #[serde(flatten)]
    used: ari_crds::ResourcesUsed,
}

/// The Tasks' use, by Agent.
fn usage_by_agent(tasks: &[Task]) -> BTreeMap<String, AgentUse> {
    let mut by = BTreeMap::<String, AgentUse>::new();
    for t in tasks {
        let u = by.entry(t.spec.agent_ref.name.clone()).or_default();
        *u.tasks.entry(format!("{:?}", t.phase())).or_default() += 1;
        if let Some(used) = t.status.as_ref().and_then(|s| s.resources_used.as_ref()) {
            u.used.add(used);
        }
    }
    by
}

async fn top(client: Client, ns: &str, args: &TopArgs) -> anyhow::Result<u8> {
    let tasks = Api::<Task>::namespaced(client, ns)
        .list(&ListParams::default())
        .await?
        .items;
    let by = usage_by_agent(&tasks);
    if let Some(format) = args.output {
        print(&by, format)?;
        return Ok(0);
    }
    println!(
        "{:<24} {:>6} {:>8} {:>7} {:>14} {:>9} {:>9} {:>10} {:>10} {:>6} {:>6}",
        "AGENT",
        "TASKS",
        "RUNNING",
        "FAILED",
        "FUEL",
        "CPU(ms)",
        "PEAK-MEM",
        "TOKENS-IN",
        "TOKENS-OUT",
        "MODEL",
        "TOOLS"
    );
    for (agent, AgentUse { tasks, used: u }) in &by {
        let count = |p: &str| tasks.get(p).copied().unwrap_or(0);
        println!(
            "{:<24} {:>6} {:>8} {:>7} {:>14} {:>9} {:>9} {:>10} {:>10} {:>6} {:>6}",
            agent,
            tasks.values().sum::<u64>(),
            count("Running"),
            count("Failed"),
            u.fuel,
            u.cpu_millis,
            format!("{}Ki", u.memory_bytes / 1024),
            u.input_tokens,
            u.output_tokens,
            u.model_calls,
            u.tool_calls
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_named_as_kubectl_names_it() {
        for ok in ["task/a", "tasks/a", "task.ari.dev/a", "a"] {
            assert_eq!(task_name(ok).expect(ok), "a");
        }
        for bad in ["pod/a", "task/", ""] {
            assert!(task_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_guests_lines_of_that_task_are_its_log() {
        let line = |target: &str, task: &str, ns: &str| {
            json!({"timestamp": "2026-11-27T10:00:00Z", "level": "WARN", "target": target,
                   "fields": {"message": "hello"},
                   "span": {"name": "task", "task": task, "namespace": ns, "attempt": 1}})
            .to_string()
        };
        assert_eq!(
            guest_line(&line("ari::guest", "t", "ns"), "ns", "t"),
            Some(("2026-11-27T10:00:00Z".into(), "WARN hello".into()))
        );
        assert_eq!(guest_line(&line("ari::worker", "t", "ns"), "ns", "t"), None);
        assert_eq!(guest_line(&line("ari::guest", "u", "ns"), "ns", "t"), None);
        assert_eq!(
            guest_line(&line("ari::guest", "t", "other"), "ns", "t"),
            None
        );
        assert_eq!(guest_line("not json", "ns", "t"), None);
    }

    #[test]
    fn top_adds_up_each_agents_tasks() {
        let task = |agent: &str, phase: &str, fuel: u64, tokens: u64| -> Task {
            let mut t: Task = serde_json::from_value(json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
                "metadata": {"name": "x"},
                "spec": {"agentRef": {"name": agent}},
                "status": {"phase": phase}
            }))
            .expect("task");
            if let Some(s) = t.status.as_mut() {
                s.resources_used = Some(ari_crds::ResourcesUsed {
                    fuel,
                    input_tokens: tokens,
                    cpu_millis: fuel * 2,
                    memory_bytes: fuel << 16,
                    ..Default::default()
                });
            }
            t
        };
        let by = usage_by_agent(&[
            task("ask", "Succeeded", 10, 5),
            task("ask", "Failed", 1, 0),
            task("echo", "Running", 0, 0),
        ]);
        let ask = &by["ask"].used;
        assert_eq!((ask.fuel, ask.input_tokens), (11, 5));
        // CPU adds up; memory is the largest any one Task reached.
        assert_eq!((ask.cpu_millis, ask.memory_bytes), (22, 10 << 16));
        assert_eq!(by["ask"].tasks.get("Failed"), Some(&1));
        assert_eq!(by["echo"].tasks.get("Running"), Some(&1));
    }
}
