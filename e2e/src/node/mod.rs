//! The test node agent: a stand-in kubelet that registers a Node and runs the pods bound to
//! it as host processes (see docs/e2e.md for what it does and does not emulate).

mod env;
mod images;
mod ip;
mod kubelet;
mod pod;
mod probe;
mod registration;
mod status;
mod volumes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DeleteParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use nix::sys::signal::Signal;
use tokio::sync::{oneshot, watch};

pub use images::ImageMap;
use pod::Stop;

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// Where a pod lives on this node, and its current container processes.
pub(crate) struct PodEntry {
    uid: String,
    dir: PathBuf,
    pids: HashMap<String, u32>,
}

/// Pod table shared between the agent thread and the test's handle.
#[derive(Default)]
pub(crate) struct Shared(Mutex<HashMap<(String, String), PodEntry>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), PodEntry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What every pod worker needs.
pub(crate) struct NodeCtx {
    client: Client,
    node_name: String,
    images: ImageMap,
    server: String,
    ca_pem: String,
    root: PathBuf,
    shared: Arc<Shared>,
    kubelet_pki: crate::certs::KubeletPki,
}

static NODE_COUNTER: AtomicU32 = AtomicU32::new(1);

/// A running node agent. Dropping it kills its pods' processes and deletes the Node.
pub struct NodeAgent {
    name: String,
    root: PathBuf,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NodeAgent {
    /// Starts a node named `ari-e2e-node-<n>` whose images map to `images` (image prefix →
    /// host binary). Returns once the Node is registered and Ready.
    pub fn start(cluster: &Cluster, images: HashMap<String, PathBuf>) -> Result<NodeAgent> {
        let n = NODE_COUNTER.fetch_add(1, Ordering::Relaxed);
        NodeAgent::start_named(cluster, &format!("ari-e2e-node-{n}"), images)
    }

    /// Like [`NodeAgent::start`] with a chosen node name.
    pub fn start_named(
        cluster: &Cluster,
        name: &str,
        images: HashMap<String, PathBuf>,
    ) -> Result<NodeAgent> {
        let root = cluster.dir().join("nodes").join(name);
        std::fs::create_dir_all(&root).map_err(crate::error::io_err(&root))?;
        let shared = Arc::new(Shared::default());
        let config = cluster.config().clone();
        let (server, ca_pem) = (
            cluster.server_url().to_string(),
            cluster.ca_pem().to_string(),
        );
        let kubelet_pki = cluster.kubelet_pki().clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let (name_owned, root_owned, shared_owned) =
            (name.to_string(), root.clone(), shared.clone());
        // One dedicated thread with its own runtime: pod processes are spawned from it, so their
        // parent-death signal fires only when the agent (or the test process) goes away.
        let thread = std::thread::Builder::new()
            .name(format!("node-{name}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let client = match Client::try_from(config) {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(format!("client: {e}")));
                            return;
                        }
                    };
                    let ctx = Arc::new(NodeCtx {
                        client,
                        node_name: name_owned,
                        images: ImageMap::new(images).with_env(crate::ari_image_env()),
                        server,
                        ca_pem,
                        root: root_owned,
                        shared: shared_owned,
                        kubelet_pki,
                    });
                    agent_main(ctx, ready_tx, shutdown_rx).await;
                });
            })
            .map_err(crate::error::io_err("node agent thread"))?;
        let mut agent = NodeAgent {
            name: name.to_string(),
            root,
            shared,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(())) => Ok(agent),
            Ok(Err(e)) => {
                agent.stop();
                Err(Error::Other(format!("node agent {name}: {e}")))
            }
            Err(_) => {
                agent.stop();
                Err(Error::Timeout {
                    what: format!("node agent {name}"),
                    secs: 60,
                    detail: "node registration did not finish".into(),
                })
            }
        }
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent's directory: `pods/<ns>_<name>_<uid8>/{logs,volumes,kubeconfig,...}`.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// SIGKILLs the processes of a pod's containers, as if they crashed; the agent then
    /// restarts them per the pod's restartPolicy.
    pub fn kill_pod_process(&self, ns: &str, name: &str) -> Result<()> {
        let pids: Vec<u32> = self
            .shared
            .lock()
            .get(&(ns.to_string(), name.to_string()))
            .map(|e| e.pids.values().copied().collect())
            .unwrap_or_default();
        if pids.is_empty() {
            return Err(Error::Other(format!(
                "pod {ns}/{name} has no running process on {}",
                self.name
            )));
        }
        for p in pids {
            pod::kill_group(Some(p), Signal::SIGKILL);
        }
        Ok(())
    }

    /// The pids of a pod's running container processes, by container name.
    pub fn pod_pids(&self, ns: &str, name: &str) -> HashMap<String, u32> {
        self.shared
            .lock()
            .get(&(ns.to_string(), name.to_string()))
            .map(|e| e.pids.clone())
            .unwrap_or_default()
    }

    /// The pod's directory on this node, if the pod ever ran here.
    pub fn pod_dir(&self, ns: &str, name: &str) -> Option<PathBuf> {
        self.shared
            .lock()
            .get(&(ns.to_string(), name.to_string()))
            .map(|e| e.dir.clone())
    }

    /// A container's log file (stdout and stderr, appended across restarts).
    pub fn log_path(&self, ns: &str, name: &str, container: &str) -> Option<PathBuf> {
        self.pod_dir(ns, name)
            .map(|d| d.join("logs").join(format!("{container}.log")))
    }

    /// A container's log so far, or an empty string.
    pub fn logs(&self, ns: &str, name: &str, container: &str) -> String {
        self.log_path(ns, name, container)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// The host directory standing for a pod volume.
    pub fn volume_path(&self, ns: &str, name: &str, volume: &str) -> Option<PathBuf> {
        self.pod_dir(ns, name)
            .map(|d| d.join("volumes").join(volume))
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    stop: watch::Sender<Option<Stop>>,
    task: tokio::task::JoinHandle<()>,
}

async fn agent_main(
    ctx: Arc<NodeCtx>,
    ready: std::sync::mpsc::Sender<std::result::Result<(), String>>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let kubelet = match kubelet::KubeletServer::bind(&ctx.kubelet_pki).await {
        Ok(k) => k,
        Err(e) => {
            let _ = ready.send(Err(format!("kubelet endpoint: {e}")));
            return;
        }
    };
    if let Err(e) = registration::register(&ctx, kubelet.port()).await {
        let _ = ready.send(Err(format!("registering node: {e}")));
        return;
    }
    let kubelet = tokio::spawn(kubelet.serve(ctx.shared.clone()));
    let heartbeat = tokio::spawn(registration::heartbeat(ctx.clone()));
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.node_name));
    let stream = watcher::watcher(api, cfg).default_backoff();
    futures::pin_mut!(stream);
    let _ = ready.send(Ok(()));
    let mut workers: HashMap<String, Worker> = HashMap::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            ev = stream.next() => match ev {
                Some(Ok(Event::Apply(p) | Event::InitApply(p))) => on_pod(&ctx, &mut workers, p),
                Some(Ok(Event::Delete(p))) => {
                    if let Some(w) = p.metadata.uid.as_ref().and_then(|u| workers.get(u)) {
                        w.stop.send_if_modified(|s| set_stop(s, Stop::Delete { grace: 0 }));
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(node = %ctx.node_name, "pod watch: {e}"),
                None => break,
            },
        }
        workers.retain(|_, w| !w.task.is_finished());
    }
    for w in workers.values() {
        w.stop.send_if_modified(|s| set_stop(s, Stop::Shutdown));
    }
    for (_, w) in workers.drain() {
        let _ = tokio::time::timeout(Duration::from_secs(10), w.task).await;
    }
    heartbeat.abort();
    kubelet.abort();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        nodes.delete(&ctx.node_name, &DeleteParams::default()),
    )
    .await;
}

/// An escalation only: a shutdown or a shorter grace period replaces what was asked before.
fn set_stop(current: &mut Option<Stop>, new: Stop) -> bool {
    let replace = match (*current, new) {
        (None, _) => true,
        (Some(Stop::Delete { grace: old }), Stop::Delete { grace }) => grace < old,
        (Some(Stop::Delete { .. }), Stop::Shutdown) => true,
        (Some(Stop::Shutdown), _) => false,
    };
    if replace {
        *current = Some(new);
    }
    replace
}

fn on_pod(ctx: &Arc<NodeCtx>, workers: &mut HashMap<String, Worker>, pod: Pod) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    if let Some(w) = workers.get(&uid) {
        if deleting {
            w.stop
                .send_if_modified(|s| set_stop(s, Stop::Delete { grace }));
        }
        return;
    }
    if deleting {
        // Never ran here (or ran before this agent started): nothing to stop, just remove it.
        let api: Api<Pod> = Api::namespaced(
            ctx.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        tokio::spawn(async move {
            let _ = api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        });
        return;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return;
    }
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(pod::run(ctx.clone(), pod, rx));
    workers.insert(uid, Worker { stop: tx, task });
}
