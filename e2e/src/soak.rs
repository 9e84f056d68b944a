//! The faults soak (issue 7, item 2): Tasks of `echo` and of the storage agent `counter`
//! while a fault script kills an executor process every few seconds, restarts the operator
//! (deleting its pod, or killing its process) and restarts kube-apiserver once. Afterwards
//! every Task must be `Succeeded` exactly once — none lost, none finished twice (executor logs
//! hold at most one `finished` line per Task), attempts recorded — and `counter`'s committed
//! value must equal its number of successful Tasks (their outputs are exactly `1..=N`).
//! With `pooled` set, half the `echo` Tasks go to that many `echo` Agents sharing one
//! `ExecutorPool` of `echo_replicas` pods, whose processes are killed like the others: the
//! same guarantees at pool density (issue 29, item 5).
//! Used by `tests/faults.rs` (a few hundred Tasks) and `ari-soak` (5,000 by default).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ari_crds::{TaskPhase, TaskReason};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::scenario::{
    Ctx, OPERATOR_NS, agent_ready, agent_ready_within, agent_yaml, pool_yaml, pooled_yaml,
    ready_pods, task_finished,
};
use crate::stress::{self, TaskView};
use crate::wait;

/// What to run and which faults to inject.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Tasks in all, split evenly between `echo` and `counter`.
    pub tasks: usize,
    /// Pause between two executor kills.
    pub kill_every: Duration,
    /// Only an executor process that has run at least this long is killed: the node agent's
    /// restart back-off (0.5 s doubling to 20 s, reset after 60 s up) would otherwise keep
    /// every executor down and the soak would measure back-off, not recovery.
    pub min_gap: Duration,
    /// Restart the operator after every this many executor kills.
    pub operator_every: usize,
    /// Restart kube-apiserver once, at this executor kill.
    pub apiserver_at: usize,
    /// `echo` executor replicas.
    pub echo_replicas: u32,
    /// Tasks created per second, so the faults land throughout the run.
    pub rate: usize,
    /// `echo` Agents in one ExecutorPool of `echo_replicas` pods, taking half the `echo`
    /// Tasks in turn (0: none, every `echo` Task goes to the dedicated Agent).
    pub pooled: usize,
}

impl SoakConfig {
    /// Faults paced for `tasks` Tasks.
    pub fn new(tasks: usize) -> SoakConfig {
        SoakConfig {
            tasks,
            kill_every: Duration::from_secs(3),
            min_gap: Duration::from_secs(10),
            operator_every: 6,
            apiserver_at: 4,
            echo_replicas: 3,
            rate: 8,
            pooled: 0,
        }
    }
}

/// What happened, for the report and the assertions.
#[derive(Debug, Default)]
pub struct SoakReport {
    pub tasks: usize,
    pub succeeded: usize,
    /// Tasks not `Succeeded` at the end (failed or never finished).
    pub lost: usize,
    pub failed_by_reason: BTreeMap<String, usize>,
    /// `name: message` of the first lost Tasks, so a failure says why, not only how many.
    pub lost_messages: Vec<String>,
    /// Tasks whose status has no `attempts`.
    pub without_attempts: usize,
    /// Tasks that needed more than one attempt.
    pub retried: usize,
    pub max_attempts: u32,
    /// Tasks with more than one `finished` line in the executors' logs.
    pub finished_twice: usize,
    /// Succeeded Tasks with no `finished` line (killed between the status write and the log).
    pub finished_unlogged: usize,
    pub executor_kills: usize,
    /// Of `executor_kills`, those of a pool pod's process.
    pub pool_kills: usize,
    pub operator_restarts: usize,
    pub apiserver_restarts: usize,
    pub counter_tasks: usize,
    /// `counter` outputs that are not exactly `1..=counter_tasks`, described.
    pub counter_errors: Vec<String>,
    /// The value a final `counter` Task read and incremented (want `counter_tasks + 1`).
    pub counter_final: Option<u64>,
    pub elapsed: Duration,
}

impl SoakReport {
    /// Fails unless every Task succeeded exactly once and the counter matches.
    pub fn check(&self) -> Result<()> {
        ensure!(
            self.lost == 0,
            "{} Tasks lost: {:?}: {:?}",
            self.lost,
            self.failed_by_reason,
            self.lost_messages
        );
        ensure!(
            self.finished_twice == 0,
            "{} Tasks finished twice",
            self.finished_twice
        );
        ensure!(
            self.without_attempts == 0,
            "{} Tasks without attempts",
            self.without_attempts
        );
        ensure!(
            self.counter_errors.is_empty(),
            "counter outputs are not 1..={}: {:?}",
            self.counter_tasks,
            self.counter_errors
        );
        ensure!(
            self.counter_final == Some(self.counter_tasks as u64 + 1),
            "counter's committed state after {} successful Tasks: the next Task read {:?}",
            self.counter_tasks,
            self.counter_final.map(|v| v.saturating_sub(1))
        );
        Ok(())
    }

    /// One paragraph of figures.
    pub fn summary(&self) -> String {
        format!(
            "soak: {} Tasks ({} counter) in {:.0} s; faults: {} executor kills ({} of pool pods), \
             {} operator restarts, {} kube-apiserver restarts; succeeded {}, lost {}, finished twice {}, retried {} \
             (max attempts {}), unlogged finishes {}, counter final {:?}{}",
            self.tasks,
            self.counter_tasks,
            self.elapsed.as_secs_f64(),
            self.executor_kills,
            self.pool_kills,
            self.operator_restarts,
            self.apiserver_restarts,
            self.succeeded,
            self.lost,
            self.finished_twice,
            self.retried,
            self.max_attempts,
            self.finished_unlogged,
            self.counter_final.map(|v| v.saturating_sub(1)),
            if self.failed_by_reason.is_empty() {
                String::new()
            } else {
                format!(", failed: {:?}", self.failed_by_reason)
            }
        )
    }
}

/// Fault counters shared with the fault script.
#[derive(Default)]
struct Faults {
    kills: usize,
    pool_kills: usize,
    operator: usize,
    apiserver: usize,
}

/// Runs the soak in a fresh namespace of `ctx` (which must have the operator installed).
pub fn run(ctx: &Ctx, cfg: &SoakConfig) -> Result<SoakReport> {
    ctx.rt.block_on(async {
        let client = ctx.cluster.client();
        let ns = ctx.cluster.new_namespace("soak").await?;
        let result = soak(ctx, &client, &ns, cfg).await;
        if result.is_err() {
            eprintln!("{}", ctx.executor_logs(&client, &ns).await);
        }
        result
    })
}

async fn soak(ctx: &Ctx, client: &Client, ns: &str, cfg: &SoakConfig) -> Result<SoakReport> {
    ctx.module_configmap(ns, "echo-module", "echo")?;
    ctx.module_configmap(ns, "counter-module", "counter")?;
    ctx.apply_ok(
        ns,
        &agent_yaml("echo", "echo-module", cfg.echo_replicas, ""),
    )?;
    ctx.apply_ok(
        ns,
        &agent_yaml(
            "counter",
            "counter-module",
            1,
            "  capabilities:\n    storage:\n      maxBytes: 1048576\n",
        ),
    )?;
    for a in ["echo", "counter"] {
        agent_ready(client, ns, a).await?;
    }
    let pooled = pooled_agents(ctx, client, ns, cfg).await?;
    let pool_pods = if pooled.is_empty() {
        0
    } else {
        cfg.echo_replicas as usize
    };
    let executors = cfg.echo_replicas as usize + 1 + pool_pods;
    wait::until("executors Ready", wait::DEFAULT, || {
        ready_pods(client, ns, "app.kubernetes.io/name=ari-executor", executors)
    })
    .await?;

    let view = TaskView::start(client, ns);
    let counter_tasks = cfg.tasks / 2;
    let mut tasks = Vec::with_capacity(cfg.tasks);
    for i in 0..cfg.tasks {
        let (agent, input) = if i % 2 == 1 && i / 2 < counter_tasks {
            ("counter", "soak".to_string())
        } else if i % 4 == 0 && !pooled.is_empty() {
            (pooled[(i / 4) % pooled.len()].as_str(), format!("soak-{i}"))
        } else {
            ("echo", format!("soak-{i}"))
        };
        tasks.push(stress::task(
            &format!("{agent}-{i}"),
            agent,
            &input,
            serde_json::json!({"retries": ari_crds::task::MAX_RETRIES}),
            &[],
        )?);
    }
    let total = tasks.len();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let mut faults = Faults::default();
    let work = async {
        // Paced creation (not synchronisation): `rate` Tasks a second, like a steady user.
        let mut tasks = tasks.into_iter().peekable();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while tasks.peek().is_some() {
            tick.tick().await;
            let batch: Vec<_> = tasks.by_ref().take(cfg.rate.max(1)).collect();
            stress::create_tasks(client, ns, batch, 4).await?;
        }
        // Generous: executors spend much of the soak restarting (with back-off) or waiting
        // for the operator to notice a stale heartbeat.
        let patience = Duration::from_secs(600) + Duration::from_millis(400 * total as u64);
        let done = view.wait_all_finished(total, patience, || {}).await;
        stop.store(true, Ordering::Release);
        done
    };
    let script = fault_script(ctx, client, ns, cfg, &stop, &mut faults);
    let (done, script) = tokio::join!(work, script);
    script?;
    done?;
    let elapsed = started.elapsed();

    let mut report = SoakReport {
        tasks: total,
        counter_tasks,
        executor_kills: faults.kills,
        pool_kills: faults.pool_kills,
        operator_restarts: faults.operator,
        apiserver_restarts: faults.apiserver,
        elapsed,
        ..SoakReport::default()
    };
    let finished = finished_lines(ctx, client, ns).await?;
    let mut counter_values = Vec::new();
    let mut unkept: Vec<(String, String)> = Vec::new();
    for t in view.tasks() {
        let name = t.name_any();
        let s = t.status.clone().unwrap_or_default();
        match stress::outcome(&t) {
            (Some(TaskPhase::Succeeded), _) => report.succeeded += 1,
            (_, reason) => {
                report.lost += 1;
                if report.lost_messages.len() < 10 {
                    report.lost_messages.push(format!(
                        "{name}: {}",
                        s.message.as_deref().unwrap_or("(no message)")
                    ));
                }
                *report
                    .failed_by_reason
                    .entry(reason.map_or("none", TaskReason::as_str).to_string())
                    .or_default() += 1;
            }
        }
        match s.attempts {
            None | Some(0) => report.without_attempts += 1,
            Some(a) => {
                report.max_attempts = report.max_attempts.max(a);
                if a > 1 {
                    report.retried += 1;
                }
            }
        }
        match finished.get(&name).copied().unwrap_or(0) {
            0 => report.finished_unlogged += 1,
            1 => {}
            _ => report.finished_twice += 1,
        }
        if t.spec.agent_ref.name == "counter" && s.phase == Some(TaskPhase::Succeeded) {
            match (s.output.as_deref().map(str::parse::<u64>), &s.output_sha256) {
                (Some(Ok(v)), _) => counter_values.push(v),
                // Finished from the storage receipt of an earlier attempt that committed before
                // its executor was lost: the receipt keeps the output's digest, not its bytes
                // (docs/security.md). Matched below against the values never returned.
                (None, Some(sha)) => unkept.push((name.clone(), sha.clone())),
                (other, _) => report
                    .counter_errors
                    .push(format!("{name}: output {other:?}")),
            }
        }
    }
    counter_values.sort_unstable();
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for v in &counter_values {
        *seen.entry(*v).or_default() += 1;
    }
    let dupes: Vec<u64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(v, _)| *v)
        .collect();
    let mut missing: Vec<u64> = (1..=counter_tasks as u64)
        .filter(|v| !seen.contains_key(v))
        .collect();
    // An output known only by its digest is the missing value with that digest, or an error.
    for (name, sha) in unkept {
        let digest = |v: &u64| ari_model::attestation::sha256_hex(v.to_string().as_bytes());
        match missing.iter().position(|v| digest(v) == sha) {
            Some(i) => {
                missing.remove(i);
            }
            None => report.counter_errors.push(format!(
                "{name}: output not kept and its digest {sha} is no missing value"
            )),
        }
    }
    if !dupes.is_empty() {
        report.counter_errors.push(format!(
            "{} values returned twice (lost updates), e.g. {:?}",
            dupes.len(),
            &dupes[..dupes.len().min(10)]
        ));
    }
    if !missing.is_empty() {
        report.counter_errors.push(format!(
            "{} values never returned (increments applied twice or lost), e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        ));
    }

    // The committed state: one more increment must return counter_tasks + 1.
    let probe = stress::task(
        "counter-final",
        "counter",
        "soak",
        serde_json::json!({}),
        &[],
    )?;
    stress::create_tasks(client, ns, vec![probe], 1).await?;
    let t = task_finished(client, ns, "counter-final", wait::DEFAULT).await?;
    report.counter_final = t.status.and_then(|s| s.output).and_then(|o| o.parse().ok());
    Ok(report)
}

/// The soak's ExecutorPool.
const POOL: &str = "soak";

/// Applies `cfg.pooled` `echo` Agents naming one ExecutorPool and waits until each is Ready;
/// their names.
async fn pooled_agents(
    ctx: &Ctx,
    client: &Client,
    ns: &str,
    cfg: &SoakConfig,
) -> Result<Vec<String>> {
    if cfg.pooled == 0 {
        return Ok(Vec::new());
    }
    ctx.apply_ok(ns, &pool_yaml(POOL, cfg.echo_replicas, 16))?;
    let names: Vec<String> = (0..cfg.pooled).map(|i| format!("pooled-{i}")).collect();
    let docs: Vec<String> = names
        .iter()
        .map(|n| pooled_yaml(n, "echo-module", POOL, 4, ""))
        .collect();
    ctx.apply_ok(ns, &docs.join("---\n"))?;
    for n in &names {
        agent_ready_within(client, ns, n, wait::DEFAULT).await?;
    }
    Ok(names)
}

/// Kills an executor every `kill_every`, restarts the operator every `operator_every` kills
/// and kube-apiserver once, until `stop`. Pacing with sleeps is the point here.
async fn fault_script(
    ctx: &Ctx,
    client: &Client,
    ns: &str,
    cfg: &SoakConfig,
    stop: &AtomicBool,
    faults: &mut Faults,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // When each executor process (by pid) was first seen running.
    let mut up_since: HashMap<u32, Instant> = HashMap::new();
    while !stop.load(Ordering::Acquire) {
        tokio::time::sleep(cfg.kill_every).await;
        if stop.load(Ordering::Acquire) {
            break;
        }
        // The executor process that has run longest, if that is at least `min_gap`.
        let Ok(list) = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=ari-executor"))
            .await
        else {
            continue;
        };
        let now = Instant::now();
        let victim = list
            .items
            .iter()
            .filter_map(|p| {
                let name = p.name_any();
                let pid = *ctx.node.pod_pids(ns, &name).get("executor")?;
                Some((*up_since.entry(pid).or_insert(now), name))
            })
            .filter(|(since, _)| now.duration_since(*since) >= cfg.min_gap)
            .min();
        if let Some((_, victim)) = victim
            && ctx.node.kill_pod_process(ns, &victim).is_ok()
        {
            faults.kills += 1;
            if victim.starts_with(&ari_crds::names::pool_deployment_name(POOL)) {
                faults.pool_kills += 1;
            }
        }
        if faults.kills > 0
            && faults.kills.is_multiple_of(cfg.operator_every)
            && restart_operator(ctx, client, faults.operator.is_multiple_of(2)).await
        {
            faults.operator += 1;
        }
        if faults.kills == cfg.apiserver_at && faults.apiserver == 0 {
            ctx.cluster
                .restart("kube-apiserver")
                .await
                .context("restarting kube-apiserver")?;
            faults.apiserver += 1;
        }
    }
    Ok(())
}

/// Deletes the operator pod (its Deployment makes a new one) or kills its process (the node
/// agent restarts it). Whether it did; a failure (say, a pod between restarts) is retried at
/// the next turn.
async fn restart_operator(ctx: &Ctx, client: &Client, delete: bool) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    let Ok(list) = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=ari-operator"))
        .await
    else {
        return false;
    };
    let mut done = false;
    for p in list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        done |= if delete {
            pods.delete(&p.name_any(), &DeleteParams::default())
                .await
                .is_ok()
        } else {
            ctx.node
                .kill_pod_process(OPERATOR_NS, &p.name_any())
                .is_ok()
        };
    }
    done
}

/// Task name → number of `finished` lines across the executors' logs in `ns`.
async fn finished_lines(ctx: &Ctx, client: &Client, ns: &str) -> Result<HashMap<String, usize>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    let mut counts = HashMap::new();
    for p in pods.items {
        for line in ctx.node.logs(ns, &p.name_any(), "executor").lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let fields = &v["fields"];
            if fields["message"] == "finished"
                && let Some(task) = fields["task"].as_str()
            {
                *counts.entry(task.to_string()).or_default() += 1;
            }
        }
    }
    Ok(counts)
}
