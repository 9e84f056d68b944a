//! What the stress suites share (hostile guests, the faults soak and `ari-soak`): Tasks created
//! in bulk through the API, a watch-fed view of every Task in a namespace (so waiting on
//! thousands of Tasks costs watch events, not repeated lists), and executor process facts —
//! pid, restarts and resident memory — read from the node agent and `/proc`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use ari_crds::{Task, TaskPhase, TaskReason};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::{NodeAgent, wait};

/// A Task object for `agent` with UTF-8 `input`; `spec` fields are merged over the minimal spec
/// and `labels` are set on it.
pub fn task(
    name: &str,
    agent: &str,
    input: &str,
    spec: serde_json::Value,
    labels: &[(&str, &str)],
) -> Result<Task> {
    let mut s = serde_json::json!({"agentRef": {"name": agent}, "input": input});
    if let (Some(base), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        base.extend(extra.clone());
    }
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name, "labels": labels},
        "spec": s,
    }))?)
}

/// Creates `tasks` in `ns` in their order, `parallel` requests in flight. A create that fails
/// (e.g. while the API server restarts) is retried until [`wait::DEFAULT`] runs out; one that
/// finds the Task already there counts as created.
pub async fn create_tasks(
    client: &Client,
    ns: &str,
    tasks: Vec<Task>,
    parallel: usize,
) -> Result<()> {
    let api: Api<Task> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(tasks.into_iter().map(|t| {
        let api = api.clone();
        async move {
            let name = t.name_any();
            wait::until(&format!("Task {name} created"), wait::DEFAULT, || async {
                match api.create(&PostParams::default(), &t).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await
            .map_err(anyhow::Error::from)
        }
    }))
    .buffer_unordered(parallel)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Every Task of a namespace as the watch last saw it. Survives API server restarts (the
/// watcher backs off and relists).
pub struct TaskView {
    store: Store<Task>,
    driver: tokio::task::JoinHandle<()>,
}

impl TaskView {
    /// Starts watching `ns`; call inside the runtime that will poll it.
    pub fn start(client: &Client, ns: &str) -> TaskView {
        let api: Api<Task> = Api::namespaced(client.clone(), ns);
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .applied_objects();
        let driver = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Err(e) = item {
                    tracing::debug!(error = %e, "task watch error; the watcher retries");
                }
            }
        });
        TaskView { store, driver }
    }

    /// The Tasks as last seen.
    pub fn tasks(&self) -> Vec<Arc<Task>> {
        self.store.state()
    }

    /// How many Tasks there are and how many have finished.
    pub fn progress(&self) -> (usize, usize) {
        let all = self.store.state();
        let done = all.iter().filter(|t| is_finished(t)).count();
        (all.len(), done)
    }

    /// Waits until at least `want` Tasks exist and all of them finished; `tick` runs on every
    /// poll (sampling memory, say).
    pub async fn wait_all_finished(
        &self,
        want: usize,
        timeout: Duration,
        mut tick: impl FnMut(),
    ) -> Result<()> {
        wait::until("every Task finished", timeout, || {
            tick();
            let (all, done) = self.progress();
            async move {
                if all >= want && done == all {
                    Ok(())
                } else {
                    Err(format!("{done} of {all} Tasks finished (want {want})"))
                }
            }
        })
        .await?;
        Ok(())
    }
}

impl Drop for TaskView {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Whether the Task reached `Succeeded` or `Failed`.
pub fn is_finished(t: &Task) -> bool {
    t.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(TaskPhase::is_finished)
}

/// `(phase, reason)` of a Task, for tallies.
pub fn outcome(t: &Task) -> (Option<TaskPhase>, Option<TaskReason>) {
    let s = t.status.as_ref();
    (s.and_then(|s| s.phase), s.and_then(|s| s.reason))
}

/// Resident set size of a process (`VmRSS` of `/proc/<pid>/status`), in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    proc_status_bytes(pid, "VmRSS:")
}

/// The peak resident set size of a process since it started (`VmHWM`), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    proc_status_bytes(pid, "VmHWM:")
}

fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One executor pod as the node agent and the API see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorProcess {
    pub pod: String,
    pub pid: u32,
    pub restarts: i32,
}

/// The running executor containers of the pods matching `selector` in `ns`.
pub async fn executor_processes(
    client: &Client,
    node: &NodeAgent,
    ns: &str,
    selector: &str,
) -> Result<Vec<ExecutorProcess>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await?;
    let mut out = Vec::new();
    for p in pods.items {
        let name = p.name_any();
        let pid = *node
            .pod_pids(ns, &name)
            .get("executor")
            .with_context(|| format!("pod {ns}/{name} has no running executor process"))?;
        out.push(ExecutorProcess {
            restarts: restart_count(&p),
            pod: name,
            pid,
        });
    }
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    Ok(out)
}

/// Sum of the pod's container restart counts.
pub fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

/// Pod name → restart count for the pods matching `selector`.
pub async fn restarts(client: &Client, ns: &str, selector: &str) -> Result<HashMap<String, i32>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .map(|p| (p.name_any(), restart_count(p)))
        .collect())
}

/// Bytes as MiB with one decimal, for reports.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}
