//! One pod's life on the node: volumes and environment, container processes with restarts,
//! status reports, and graceful termination when the pod is deleted.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{Notify, watch};

use super::env::{self, Lookup, PodFacts};
use super::status::{ContainerStatus, PodState, State, Terminated, now};
use super::volumes::{self, TokenFile};
use super::{NodeCtx, ip, probe};
use crate::kubeconfig;
use crate::process::die_with_parent;

/// Why a pod's processes must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The pod is being deleted: SIGTERM, wait `grace` seconds, SIGKILL, then remove it.
    Delete { grace: i64 },
    /// The agent shuts down: kill at once and leave the API object alone.
    Shutdown,
}

/// Init container or regular container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Init,
    Main,
}

/// Shared state of a running pod.
pub(crate) struct PodRun {
    ctx: Arc<NodeCtx>,
    ns: String,
    name: String,
    uid: String,
    dir: PathBuf,
    pub(crate) pod_ip: String,
    state: Mutex<PodState>,
    notify: Notify,
}

impl PodRun {
    fn lock(&self) -> std::sync::MutexGuard<'_, PodState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads one container's status.
    pub(crate) fn with_container<T>(
        &self,
        kind: Kind,
        idx: usize,
        f: impl FnOnce(&ContainerStatus) -> T,
    ) -> T {
        let s = self.lock();
        let list = if kind == Kind::Init {
            &s.init
        } else {
            &s.containers
        };
        f(&list[idx])
    }

    /// Changes one container's status; reports it if `f` returns true.
    pub(crate) fn update_container(
        &self,
        kind: Kind,
        idx: usize,
        f: impl FnOnce(&mut ContainerStatus) -> bool,
    ) {
        let changed = {
            let mut s = self.lock();
            let list = if kind == Kind::Init {
                &mut s.init
            } else {
                &mut s.containers
            };
            f(&mut list[idx])
        };
        if changed {
            self.notify.notify_one();
        }
    }

    fn update(&self, f: impl FnOnce(&mut PodState)) {
        f(&mut self.lock());
        self.notify.notify_one();
    }

    fn set_pid(&self, container: &str, pid: Option<u32>) {
        let mut pods = self.ctx.shared.lock();
        if let Some(e) = pods.get_mut(&(self.ns.clone(), self.name.clone()))
            && e.uid == self.uid
        {
            match pid {
                Some(p) => e.pids.insert(container.to_string(), p),
                None => e.pids.remove(container),
            };
        }
    }
}

/// What to run for one container.
struct ProcSpec {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    log: PathBuf,
}

struct Prepared {
    init: Vec<ProcSpec>,
    containers: Vec<ProcSpec>,
    tokens: Vec<TokenFile>,
}

/// Runs the pod until `stop` says otherwise, then removes it from the API (on deletion).
pub(crate) async fn run(ctx: Arc<NodeCtx>, pod: Pod, mut stop: watch::Receiver<Option<Stop>>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = pod.spec.clone() else { return };
    let pod_ip = if spec.host_network == Some(true) {
        "127.0.0.1".to_string()
    } else {
        ip::allocate().to_string()
    };
    let dir = ctx
        .root
        .join("pods")
        .join(format!("{ns}_{name}_{}", uid.get(..8).unwrap_or(&uid)));
    for sub in ["logs", "tmp", "volumes"] {
        if let Err(e) = volumes::mkdir(&dir.join(sub)) {
            tracing::warn!(%ns, %name, "pod directory: {e}");
        }
    }
    ctx.shared.lock().insert(
        (ns.clone(), name.clone()),
        super::PodEntry {
            uid: uid.clone(),
            dir: dir.clone(),
            pids: HashMap::new(),
        },
    );
    let statuses = |cs: &[Container]| -> Vec<ContainerStatus> {
        cs.iter()
            .map(|c| {
                let probe = c.readiness_probe.as_ref().is_some_and(probe::supported);
                ContainerStatus::new(&c.name, c.image.as_deref().unwrap_or_default(), probe)
            })
            .collect()
    };
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let run = Arc::new(PodRun {
        ctx: ctx.clone(),
        ns: ns.clone(),
        name: name.clone(),
        uid: uid.clone(),
        dir: dir.clone(),
        pod_ip: pod_ip.clone(),
        state: Mutex::new(PodState::new(
            pod_ip.clone(),
            statuses(&init_specs),
            statuses(&spec.containers),
        )),
        notify: Notify::new(),
    });
    let writer = tokio::spawn(status_writer(run.clone()));
    run.notify.notify_one();

    let prepared = loop {
        match prepare(&run, &pod).await {
            Ok(p) => break Some(p),
            Err((reason, message)) => {
                tracing::info!(%ns, %name, %reason, "pod not startable yet: {message}");
                run.update(|s| {
                    for c in s.init.iter_mut().chain(s.containers.iter_mut()) {
                        c.state = State::Waiting {
                            reason: reason.to_string(),
                            message: message.clone(),
                        };
                    }
                });
                if stopped_within(&mut stop, Duration::from_secs(2)).await {
                    break None;
                }
            }
        }
    };

    if let Some(p) = prepared {
        let refresher = tokio::spawn(refresh_tokens(ctx.clone(), pod.clone(), p.tokens));
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let init_policy = if policy == "Never" {
            "Never"
        } else {
            "OnFailure"
        };
        let mut initialized = true;
        for (i, proc) in p.init.into_iter().enumerate() {
            match run_container(
                run.clone(),
                Kind::Init,
                i,
                Arc::new(proc),
                init_policy.into(),
                stop.clone(),
            )
            .await
            {
                Some(0) => {}
                Some(_) => {
                    run.update(|s| s.failed = true);
                    initialized = false;
                    break;
                }
                None => {
                    initialized = false;
                    break;
                }
            }
        }
        if initialized {
            run.update(|s| s.initialized = true);
            let mut probes = Vec::new();
            for (i, c) in spec.containers.iter().enumerate() {
                if let Some(pr) = c.readiness_probe.clone().filter(probe::supported) {
                    probes.push(tokio::spawn(probe::run(
                        run.clone(),
                        i,
                        pr,
                        c.ports.clone().unwrap_or_default(),
                    )));
                }
            }
            let tasks: Vec<_> = p
                .containers
                .into_iter()
                .enumerate()
                .map(|(i, proc)| {
                    tokio::spawn(run_container(
                        run.clone(),
                        Kind::Main,
                        i,
                        Arc::new(proc),
                        policy.clone(),
                        stop.clone(),
                    ))
                })
                .collect();
            for t in tasks {
                let _ = t.await;
            }
            probes.iter().for_each(|p| p.abort());
        }
        refresher.abort();
    }

    // Processes are gone; the pod stays until it is deleted, like a finished pod on a kubelet.
    let reason = wait_stop(&mut stop).await;
    if let Stop::Delete { .. } = reason {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = api.delete(&name, &dp).await
            && !is_not_found(&e)
        {
            tracing::warn!(%ns, %name, "final pod delete: {e}");
        }
    }
    writer.abort();
    let mut pods = ctx.shared.lock();
    // The entry (pod dir for logs) stays; only the pids go, and only if it is still ours.
    if let Some(e) = pods.get_mut(&(ns, name))
        && e.uid == uid
    {
        e.pids.clear();
    }
}

/// Resolves volumes, the service-account kubeconfig and every container's command line.
async fn prepare(run: &PodRun, pod: &Pod) -> Result<Prepared, (&'static str, String)> {
    let ctx = &run.ctx;
    let config_err = |m: String| ("CreateContainerConfigError", m);
    let facts = PodFacts {
        pod,
        pod_ip: run.pod_ip.clone(),
        node_name: &ctx.node_name,
    };
    let mut lookup = Lookup::new(ctx.client.clone(), &run.ns);
    let mat = volumes::materialize(&ctx.client, &facts, &mut lookup, &run.dir)
        .await
        .map_err(config_err)?;

    let sa_token = TokenFile {
        path: run.dir.join("serviceaccount").join("token"),
        audiences: Vec::new(),
        expiration_seconds: 3600,
    };
    volumes::write_token(&ctx.client, pod, &sa_token)
        .await
        .map_err(config_err)?;
    let kubeconfig_path = run.dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig_path,
        kubeconfig::with_token_file(&ctx.server, &ctx.ca_pem, &sa_token.path),
    )
    .map_err(|e| config_err(format!("{}: {e}", kubeconfig_path.display())))?;
    let mut tokens = mat.tokens.clone();
    tokens.push(sa_token);

    let spec = pod
        .spec
        .as_ref()
        .ok_or(("InvalidPod", "pod has no spec".to_string()))?;
    let mut build = Vec::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let image = c.image.as_deref().unwrap_or_default();
        let program = ctx
            .images
            .resolve(image)
            .map_err(|m| ("ErrImagePull", m))?
            .to_path_buf();
        let mounts = volumes::mounts_for(c, &mat.volumes).map_err(config_err)?;
        let resolved = env::resolve(c, &facts, &mut lookup)
            .await
            .map_err(config_err)?;
        let resolved: Vec<(String, String)> = resolved
            .into_iter()
            .map(|(k, v)| (k, env::substitute_paths(&v, &mounts)))
            .collect();
        let vars: HashMap<&str, &str> = resolved
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let args: Vec<String> = c
            .command
            .iter()
            .flatten()
            .skip(1)
            .chain(c.args.iter().flatten())
            .map(|a| env::substitute_paths(&env::expand(a, &vars), &mounts))
            .collect();
        let cwd = c
            .working_dir
            .as_deref()
            .map(|w| PathBuf::from(env::substitute_paths(w, &mounts)))
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| run.dir.clone());
        let mut env = vec![
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            ),
            ("HOME".to_string(), run.dir.to_string_lossy().into_owned()),
            (
                "TMPDIR".to_string(),
                run.dir.join("tmp").to_string_lossy().into_owned(),
            ),
            ("HOSTNAME".to_string(), run.name.clone()),
            (
                "KUBECONFIG".to_string(),
                kubeconfig_path.to_string_lossy().into_owned(),
            ),
        ];
        // The image's own environment, then the pod spec's, which overrides it.
        let image_env = ctx.images.env(image).iter().cloned();
        for (k, v) in image_env.chain(resolved) {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        }
        build.push(ProcSpec {
            name: c.name.clone(),
            program,
            args,
            env,
            cwd,
            log: run.dir.join("logs").join(format!("{}.log", c.name)),
        });
    }
    let containers = build.split_off(spec.init_containers.as_ref().map_or(0, Vec::len));
    Ok(Prepared {
        init: build,
        containers,
        tokens,
    })
}

/// Runs one container, restarting it per `policy`. Returns its final exit code, or `None` if
/// it was stopped because the pod is going away.
async fn run_container(
    run: Arc<PodRun>,
    kind: Kind,
    idx: usize,
    proc: Arc<ProcSpec>,
    policy: String,
    mut stop: watch::Receiver<Option<Stop>>,
) -> Option<i32> {
    let mut backoff = Duration::from_millis(500);
    let mut restarting = false;
    loop {
        if stop.borrow().is_some() {
            return None;
        }
        let started_at = now();
        let t0 = Instant::now();
        let spawned = spawn(&proc);
        let (code, signal, message) = match spawned {
            Err(e) => (
                128,
                None,
                Some(format!("starting {}: {e}", proc.program.display())),
            ),
            Ok(mut child) => {
                let pid = child.id();
                run.set_pid(&proc.name, pid);
                run.update_container(kind, idx, |c| {
                    if restarting {
                        c.restart_count += 1;
                    }
                    c.state = State::Running {
                        started_at: started_at.clone(),
                    };
                    c.pid = pid;
                    c.running_since = Some(Instant::now());
                    c.probe_ok = false;
                    true
                });
                let status = tokio::select! {
                    s = child.wait() => s,
                    why = wait_stop(&mut stop) => {
                        let s = terminate(&mut child, pid, why).await;
                        run.set_pid(&proc.name, None);
                        let (code, signal) = exit_code(s);
                        run.update_container(kind, idx, |c| {
                            c.state = State::Terminated(Terminated {
                                exit_code: code,
                                signal,
                                reason: if code == 0 { "Completed".into() } else { "Error".into() },
                                message: None,
                                started_at: started_at.clone(),
                                finished_at: now(),
                            });
                            c.running_since = None;
                            c.done = true;
                            true
                        });
                        return None;
                    }
                };
                kill_group(pid, Signal::SIGKILL);
                run.set_pid(&proc.name, None);
                let (code, signal) = exit_code(status);
                (code, signal, None)
            }
        };
        let t = Terminated {
            exit_code: code,
            signal,
            reason: if code == 0 {
                "Completed".into()
            } else if message.is_some() {
                "StartError".into()
            } else {
                "Error".into()
            },
            message,
            started_at,
            finished_at: now(),
        };
        let again = match policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        if !again {
            run.update_container(kind, idx, |c| {
                c.state = State::Terminated(t);
                c.running_since = None;
                c.done = true;
                true
            });
            return Some(code);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(500);
        }
        let wait = backoff;
        run.update_container(kind, idx, |c| {
            c.last = Some(t);
            c.running_since = None;
            c.state = State::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!("back-off {wait:?} restarting failed container {}", c.name),
            };
            true
        });
        if stopped_within(&mut stop, wait).await {
            return None;
        }
        backoff = (backoff * 2).min(Duration::from_secs(20));
        restarting = true;
    }
}

/// Starts the process in its own process group (so signals reach its children too), with
/// output appended to the container's log file.
fn spawn(proc: &ProcSpec) -> std::io::Result<tokio::process::Child> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&proc.log)?;
    let mut cmd = std::process::Command::new(&proc.program);
    cmd.args(&proc.args)
        .env_clear()
        .envs(proc.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&proc.cwd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    die_with_parent(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    cmd.spawn()
}

/// SIGTERM, up to `grace` seconds, then SIGKILL — the kubelet's termination sequence.
async fn terminate(
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    why: Stop,
) -> std::io::Result<std::process::ExitStatus> {
    let grace = match why {
        Stop::Delete { grace } => grace.max(0) as u64,
        Stop::Shutdown => 0,
    };
    if grace > 0 {
        kill_group(pid, Signal::SIGTERM);
        if let Ok(s) = tokio::time::timeout(Duration::from_secs(grace), child.wait()).await {
            kill_group(pid, Signal::SIGKILL);
            return s;
        }
    }
    kill_group(pid, Signal::SIGKILL);
    child.wait().await
}

/// Signals the whole process group led by `pid`.
pub(crate) fn kill_group(pid: Option<u32>, sig: Signal) {
    if let Some(p) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = killpg(Pid::from_raw(p), sig);
    }
}

fn exit_code(s: std::io::Result<std::process::ExitStatus>) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match s {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => (c, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            (None, None) => (1, None),
        },
        Err(_) => (1, None),
    }
}

/// Waits until a stop is requested; a dropped sender means the agent is gone.
async fn wait_stop(stop: &mut watch::Receiver<Option<Stop>>) -> Stop {
    loop {
        if let Some(s) = *stop.borrow_and_update() {
            return s;
        }
        if stop.changed().await.is_err() {
            return Stop::Shutdown;
        }
    }
}

/// Sleeps `d` unless a stop arrives first; true if it did.
async fn stopped_within(stop: &mut watch::Receiver<Option<Stop>>, d: Duration) -> bool {
    tokio::select! {
        _ = wait_stop(stop) => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// Patches the pod status whenever the state changes (coalescing bursts).
async fn status_writer(run: Arc<PodRun>) {
    let api: Api<Pod> = Api::namespaced(run.ctx.client.clone(), &run.ns);
    loop {
        run.notify.notified().await;
        let patch = run.lock().patch();
        if let Err(e) = api
            .patch_status(&run.name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            if is_not_found(&e) {
                return;
            }
            tracing::warn!(ns = %run.ns, name = %run.name, "status patch: {e}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            run.notify.notify_one();
        }
    }
}

/// Re-requests service-account tokens well before they expire.
async fn refresh_tokens(ctx: Arc<NodeCtx>, pod: Pod, tokens: Vec<TokenFile>) {
    loop {
        tokio::time::sleep(Duration::from_secs(20 * 60)).await;
        for t in &tokens {
            if let Err(e) = volumes::write_token(&ctx.client, &pod, t).await {
                tracing::warn!("token refresh: {e}");
            }
        }
    }
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
