//! `ari-bench-cluster`: Task latency and throughput on a real control plane, against one
//! `batch/v1` Job per task doing the same work, in one run. See BENCHMARKS.md.
//!
//! Run: `scripts/bench-cluster.sh` (builds release binaries, then runs this with `--help`-able
//! flags; defaults are the figures BENCHMARKS.md reports).

mod apimetrics;
mod jobs;
mod neighbours;
mod procstat;
mod scale;
mod tasks;
mod tracker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ari_e2e::scenario::OPERATOR_NS;
use ari_e2e::{Cluster, NodeAgent, repo_root, target_dir};
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

/// The operator's Deployment, as kubectl names it.
const OPERATOR: &str = "deployment/ari-operator";

#[derive(Parser, Clone)]
#[command(about = "Task latency/throughput on a real control plane vs a Job per task")]
pub struct Args {
    /// Tasks per throughput run (each agent × replicas × concurrency).
    #[arg(long, default_value_t = 2000)]
    pub tasks: usize,
    /// Tasks created one at a time for the unloaded latency figures.
    #[arg(long, default_value_t = 200)]
    pub sequential: usize,
    /// Executor replicas to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4])]
    pub replicas: Vec<u32>,
    /// Per-executor concurrency to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    pub concurrency: Vec<u32>,
    /// Example agents to measure.
    #[arg(long, value_delimiter = ',', default_values_t = ["echo".to_string(), "wordcount".to_string()])]
    pub agents: Vec<String>,
    /// Concurrent creators in throughput runs.
    #[arg(long, default_value_t = 16)]
    pub creators: usize,
    /// Jobs in the Job-per-task throughput baseline (0 skips the baseline).
    #[arg(long, default_value_t = 200)]
    pub jobs: usize,
    /// Jobs created one at a time for the baseline's latency.
    #[arg(long, default_value_t = 20)]
    pub sequential_jobs: usize,
    /// Agents and Tasks of the scale run (0 agents skips it).
    #[arg(long, default_value_t = 100)]
    pub scale_agents: usize,
    #[arg(long, default_value_t = 10_000)]
    pub scale_tasks: usize,
    /// Runs the scale Agents in one ExecutorPool of this many pods (0: each its own
    /// Deployment, as before pools).
    #[arg(long, default_value_t = 0)]
    pub scale_pool: u32,
    /// Only the scale run (no throughput, latency or Job baseline).
    #[arg(long)]
    pub only_scale: bool,
    /// Only the neighbours run: a quiet pooled Agent's latency (`--sequential` Tasks) alone
    /// and beside hostile neighbours in the same pool pod.
    #[arg(long)]
    pub only_neighbours: bool,
    /// Which hostile neighbours the neighbours run sends Tasks from (`spinner`, `balloon`,
    /// `loud`): one alone says what each costs the quiet Agent.
    #[arg(long, value_delimiter = ',', default_values_t = ["spinner".to_string(), "balloon".to_string(), "loud".to_string()])]
    pub neighbours: Vec<String>,
    /// Take a CPU profile of kube-apiserver during each throughput run and write it to this
    /// directory (`<batch>.pb.gz`, read with `go tool pprof -top`): where its CPU goes.
    #[arg(long)]
    pub apiserver_profile: Option<PathBuf>,
    /// Seconds each kube-apiserver profile covers (from the first Task created).
    #[arg(long, default_value_t = 8)]
    pub apiserver_profile_seconds: u64,
    /// Also measure each throughput setting with the same inputs as Tasks of this many items
    /// (`spec.items`, at most 256; 0 skips it): rates and costs per item, beside plain Tasks.
    #[arg(long, default_value_t = 0)]
    pub items: usize,
    /// Cargo profile whose `ari` and `ari-operator` the pods run.
    #[arg(long, default_value = "release")]
    pub profile: String,
}

/// What every section needs.
pub struct Bench {
    pub args: Args,
    pub cluster: Cluster,
    pub node: NodeAgent,
    pub client: Client,
    pub ns: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let images = images(&args.profile)?;
    let cluster = Cluster::start().await?;
    let node = tokio::task::block_in_place(|| NodeAgent::start(&cluster, images))?;
    let client = cluster.client();
    let bench = Bench {
        args,
        client,
        ns: String::new(),
        node,
        cluster,
    };
    let result = tokio::time::timeout(Duration::from_secs(90 * 60), run(bench)).await;
    result.context("benchmark exceeded its 90 minute deadline")?
}

/// `ari-executor*` and `ari-operator*` images mapped to this profile's binaries.
fn images(profile: &str) -> Result<HashMap<String, PathBuf>> {
    let mut images = HashMap::new();
    for (image, bin) in [
        (ari_e2e::EXECUTOR_IMAGE, "ari"),
        (ari_e2e::OPERATOR_IMAGE, "ari-operator"),
    ] {
        let path = target_dir().join(profile).join(bin);
        if !path.is_file() {
            bail!(
                "{} is missing: run `cargo build --profile {profile} --bins` first",
                path.display()
            );
        }
        images.insert(image.to_string(), path);
    }
    Ok(images)
}

async fn run(mut bench: Bench) -> Result<()> {
    bench.install_operator().await?;
    bench.ns = bench.cluster.new_namespace("bench").await?;
    let mut report = Report::default();
    report.header(&bench).await?;

    if bench.args.only_neighbours {
        neighbours::run(&bench, &mut report).await?;
        println!("{}", report.text);
        return Ok(());
    }
    if !bench.args.only_scale {
        tasks::run_all(&bench, &mut report).await?;
        jobs::run(&bench, &mut report).await?;
    }
    if bench.args.scale_agents > 0 {
        scale::run(&bench, &mut report).await?;
    }
    println!("{}", report.text);
    Ok(())
}

impl Bench {
    /// Starts a CPU profile of kube-apiserver (its `/debug/pprof/profile`, which a cluster
    /// admin may read) covering the next `--apiserver-profile-seconds`, written to
    /// `<dir>/<name>.pb.gz`; `None` without `--apiserver-profile`.
    pub fn profile_apiserver(&self, name: &str) -> Option<tokio::task::JoinHandle<Result<()>>> {
        let dir = self.args.apiserver_profile.clone()?;
        let kubectl = self.cluster.bin_dir().join("kubectl");
        let kubeconfig = self.cluster.kubeconfig_path().to_path_buf();
        let url = format!(
            "/debug/pprof/profile?seconds={}",
            self.args.apiserver_profile_seconds
        );
        let path = dir.join(format!("{name}.pb.gz"));
        Some(tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            let out = std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["get", "--raw", &url])
                .output()?;
            if !out.status.success() {
                bail!("profile: {}", String::from_utf8_lossy(&out.stderr));
            }
            std::fs::write(&path, out.stdout)?;
            eprintln!("kube-apiserver profile: {}", path.display());
            Ok(())
        }))
    }

    /// ConfigMap `<module>-module` of `ns` holding the example agent `module`'s component.
    pub fn module_configmap(&self, ns: &str, module: &str) -> Result<()> {
        let wasm = ari_e2e::scenario::agent_wasm(module);
        let from = format!("--from-file=module.wasm={}", wasm.display());
        let name = format!("{module}-module");
        self.kubectl(&["create", "configmap", &name, "-n", ns, &from])?;
        Ok(())
    }

    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self.cluster.kubectl(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Sets (or with `None` removes) one variable of the operator's Deployment and waits for
    /// its rollout, so what the operator builds next follows it.
    pub fn set_operator_env(&self, name: &str, value: Option<&str>) -> Result<()> {
        let assignment = match value {
            Some(v) => format!("{name}={v}"),
            None => format!("{name}-"),
        };
        self.kubectl(&["set", "env", "-n", OPERATOR_NS, OPERATOR, &assignment])?;
        self.operator_rolled_out()
    }

    /// Waits (up to 2 minutes) until the operator's Deployment has rolled out.
    fn operator_rolled_out(&self) -> Result<()> {
        let timeout = "--timeout=120s";
        self.kubectl(&["rollout", "status", "-n", OPERATOR_NS, timeout, OPERATOR])?;
        Ok(())
    }

    async fn install_operator(&self) -> Result<()> {
        let root = repo_root();
        self.kubectl(&["apply", "-f", &root.join("crds").display().to_string()])?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/agents.ari.dev",
            "crd/tasks.ari.dev",
        ])?;
        self.kubectl(&[
            "apply",
            "-f",
            &root.join("deploy/operator.yaml").display().to_string(),
        ])?;
        self.operator_rolled_out()
    }

    /// `(pod name, pid)` of every running container of the pods matching `selector`.
    pub async fn pids(&self, ns: &str, selector: &str) -> Result<Vec<(String, u32)>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await?;
        Ok(pods
            .items
            .iter()
            .flat_map(|p| {
                let name = p.name_any();
                self.node
                    .pod_pids(ns, &name)
                    .into_values()
                    .map(move |pid| (name.clone(), pid))
            })
            .collect())
    }

    pub async fn operator_pids(&self) -> Result<Vec<u32>> {
        Ok(self
            .pids(OPERATOR_NS, "app.kubernetes.io/name=ari-operator")
            .await?
            .into_iter()
            .map(|(_, p)| p)
            .collect())
    }

    /// Control-plane processes (etcd, kube-apiserver, ...) by executable name.
    pub fn control_plane_pids(&self) -> Vec<(String, u32)> {
        procstat::processes_under(self.cluster.dir())
    }

    /// Waits (up to 60 s) until the control plane and the operator are idle: under 10 % of a
    /// core over half a second. Deleting a 2,000-Task batch keeps kube-apiserver, the garbage
    /// collector and every watcher busy for seconds after the DELETE returns; without this the
    /// next run would measure its own Tasks plus the previous run's cleanup.
    pub async fn quiesce(&self) -> Result<()> {
        const WINDOW: Duration = Duration::from_millis(500);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut pids: Vec<u32> = self
                .control_plane_pids()
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            pids.extend(self.operator_pids().await?);
            let busy = || pids.iter().map(|p| procstat::cpu_seconds(*p)).sum::<f64>();
            let before = busy();
            tokio::time::sleep(WINDOW).await;
            let used = busy() - before;
            if used < 0.1 * WINDOW.as_secs_f64() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "control plane still busy ({used:.2} CPU-s per 0.5 s) after 60 s; measuring anyway"
                );
                return Ok(());
            }
        }
    }
}

/// The Markdown the run prints at the end.
#[derive(Default)]
pub struct Report {
    pub text: String,
    /// ari's unloaded create → Succeeded p50 (ms) and best throughput (tasks/s), first agent.
    ours: Option<(f64, f64)>,
}

impl Report {
    pub fn set_ours(&mut self, p50_ms: f64, per_second: f64) {
        let (p, r) = self.ours.unwrap_or((p50_ms, 0.0));
        self.ours = Some((p, r.max(per_second)));
    }

    /// Prints the ratios of ari's figures to the Job baseline's, measured in this run.
    pub fn set_baseline(&mut self, job_p50_ms: f64, job_per_second: f64) {
        let Some((p50, rate)) = self.ours else { return };
        self.line(format!(
            "\nRatios in this run: create → finished p50, Job / ari = {job_p50_ms:.0} ms / {p50:.0} ms = **{:.0}×** faster; throughput, ari / Job = {rate:.0} / {job_per_second:.1} tasks/s = **{:.0}×**.",
            job_p50_ms / p50.max(1e-9),
            rate / job_per_second.max(1e-9)
        ));
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        self.text.push_str(s.as_ref());
        self.text.push('\n');
        eprintln!("{}", s.as_ref());
    }

    async fn header(&mut self, bench: &Bench) -> Result<()> {
        let version = bench.kubectl(&["version", "-o", "json"])?;
        let server: serde_json::Value = serde_json::from_str(&version).unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_owned())
            })
            .unwrap_or_default();
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let mem_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        self.line(format!(
            "Machine: {cores} cores ({cpu}), {mem_gib:.0} GiB. Kubernetes {} (kube-apiserver, etcd, KCM, scheduler built from Go modules). ari {} binaries, profile `{}`.",
            server["serverVersion"]["gitVersion"]
                .as_str()
                .unwrap_or("?"),
            env!("CARGO_PKG_VERSION"),
            bench.args.profile,
        ));
        self.line("");
        Ok(())
    }
}
