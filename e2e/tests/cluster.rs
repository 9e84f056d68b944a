//! Smoke trials of the harness itself, sharing one control plane and one node agent.
//! Each trial gets its own namespace. Run: `cargo test -p ari-e2e --test cluster`.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use ari_e2e::{Cluster, NodeAgent, trials, wait};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

struct Ctx {
    rt: tokio::runtime::Runtime,
    // Dropped in field order: node agent before the cluster it talks to.
    node: NodeAgent,
    cluster: Cluster,
}

fn main() -> std::process::ExitCode {
    trials::run_phases(
        start,
        vec![vec![
            ("control_plane_reports_v1_35_4", control_plane_version),
            (
                "deployment_pod_runs_ready_via_scheduler",
                deployment_pod_runs,
            ),
            ("env_and_volumes_are_resolved", env_and_volumes),
            (
                "pod_kubeconfig_is_its_service_account",
                service_account_identity,
            ),
            ("pods_get_own_ips_and_readiness_probes", own_ips_and_probes),
            (
                "deleting_deployment_collects_rs_pod_and_process",
                deletion_gc,
            ),
            ("killed_process_restarts", killed_process_restarts),
            ("deleted_pod_gets_sigterm_first", graceful_termination),
            ("unknown_image_is_reported", unknown_image),
        ]],
    )
}

impl trials::Shared for Ctx {}

fn start() -> Result<Ctx> {
    let rt = tokio::runtime::Runtime::new()?;
    let t0 = std::time::Instant::now();
    let cluster = rt.block_on(Cluster::start())?;
    eprintln!(
        "e2e cluster ready in {:.1}s at {} (files: {})",
        t0.elapsed().as_secs_f64(),
        cluster.server_url(),
        cluster.dir().display()
    );
    let images = HashMap::from([
        ("ari-test-shell".to_string(), PathBuf::from("/bin/sh")),
        (
            "ari-test-kubectl".to_string(),
            cluster.bin_dir().join("kubectl"),
        ),
        ("ari-test-python".to_string(), PathBuf::from("/usr/bin/env")),
    ]);
    let node = NodeAgent::start(&cluster, images)?;
    Ok(Ctx { rt, node, cluster })
}

impl Ctx {
    /// Runs a trial body in its own namespace.
    fn in_namespace<F, Fut>(&self, prefix: &str, f: F) -> Result<()>
    where
        F: FnOnce(Client, String) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        self.rt.block_on(async {
            let client = self.cluster.client();
            let ns = self.cluster.new_namespace(prefix).await?;
            f(client, ns).await
        })
    }

    /// Logs of a pod's container, for failure messages.
    fn logs(&self, ns: &str, pod: &str, container: &str) -> String {
        format!(
            "log of {ns}/{pod}/{container} ({}):\n{}",
            self.node
                .log_path(ns, pod, container)
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            self.node.logs(ns, pod, container)
        )
    }
}

fn shell_deployment(name: &str, script: &str) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "main",
                        "image": "ari-test-shell",
                        "command": ["sh", "-c"],
                        "args": [script],
                    }],
                },
            },
        },
    }))?)
}

/// Waits for one pod of `app` that is Running and Ready, and returns it.
async fn ready_pod(client: &Client, ns: &str, app: &str) -> Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("app={app}"));
    let pod = wait::until(&format!("a Ready pod of {ns}/{app}"), wait::DEFAULT, || {
        let (pods, lp) = (pods.clone(), lp.clone());
        async move {
            let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
                .ok_or_else(|| "no Ready pod yet".to_string())
        }
    })
    .await?;
    Ok(pod)
}

fn is_ready(p: &Pod) -> bool {
    let st = p.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn finished_pod(client: &Client, ns: &str, name: &str) -> Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(
        wait::until(&format!("pod {ns}/{name} to finish"), wait::DEFAULT, || {
            let pods = pods.clone();
            async move {
                let p = pods.get(name).await.map_err(|e| e.to_string())?;
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                if phase == "Succeeded" || phase == "Failed" {
                    Ok(p)
                } else {
                    Err(format!("phase {phase}"))
                }
            }
        })
        .await?,
    )
}

fn control_plane_version(ctx: &Ctx) -> Result<()> {
    let out = ctx.cluster.kubectl(["version", "-o", "json"])?;
    ensure!(
        out.status.success(),
        "kubectl version: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        v["serverVersion"]["gitVersion"] == "v1.35.4",
        "server version: {v}"
    );
    ensure!(
        v["clientVersion"]["gitVersion"] == "v1.35.4",
        "client version: {v}"
    );
    let nodes = ctx.cluster.kubectl([
        "get",
        "node",
        ctx.node.name(),
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])?;
    ensure!(
        String::from_utf8_lossy(&nodes.stdout) == "True",
        "node not Ready: {nodes:?}"
    );
    Ok(())
}

fn deployment_pod_runs(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("smoke", |client, ns| async move {
        let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deps.create(
            &PostParams::default(),
            &shell_deployment("hello", "echo hi; exec sleep 3600")?,
        )
        .await?;
        let pod = ready_pod(&client, &ns, "hello").await?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref().context("spec")?;
        ensure!(
            spec.node_name.as_deref() == Some(ctx.node.name()),
            "scheduled to {:?}",
            spec.node_name
        );
        wait::until("log line", wait::DEFAULT, || async {
            let l = ctx.node.logs(&ns, &name, "main");
            if l.contains("hi") { Ok(()) } else { Err(l) }
        })
        .await?;
        Ok(())
    })
}

fn env_and_volumes(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("env", |client, ns| async move {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": "creds" }, "stringData": { "token": "s3cret", "file.txt": "from-secret" },
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "settings" }, "data": { "level": "debug", "mode": "fast" },
        }))?;
        Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "envpod", "labels": { "tier": "e2e" } },
            "spec": {
                "restartPolicy": "Never",
                "volumes": [
                    { "name": "data", "emptyDir": {} },
                    { "name": "sec", "secret": { "secretName": "creds" } },
                ],
                "containers": [{
                    "name": "main",
                    "image": "ari-test-shell",
                    "command": ["sh", "-c"],
                    "args": ["env > /data/env; cat /etc/creds/file.txt > /data/secret-file; echo $(GREETING) > /data/args"],
                    "env": [
                        { "name": "PLAIN", "value": "v1" },
                        { "name": "GREETING", "value": "hello-$(PLAIN)" },
                        { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                        { "name": "POD_NS", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                        { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                        { "name": "SA", "valueFrom": { "fieldRef": { "fieldPath": "spec.serviceAccountName" } } },
                        { "name": "NODE", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } },
                        { "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "creds", "key": "token" } } },
                        { "name": "LEVEL", "valueFrom": { "configMapKeyRef": { "name": "settings", "key": "level" } } },
                        { "name": "CREDS_DIR", "value": "/etc/creds" },
                    ],
                    "envFrom": [{ "prefix": "CFG_", "configMapRef": { "name": "settings" } }],
                    "volumeMounts": [
                        { "name": "data", "mountPath": "/data" },
                        { "name": "sec", "mountPath": "/etc/creds", "readOnly": true },
                    ],
                }],
            },
        }))?;
        Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await?;
        let done = finished_pod(&client, &ns, "envpod").await?;
        let phase = done.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        ensure!(phase == "Succeeded", "phase {phase}; {}", ctx.logs(&ns, "envpod", "main"));
        let data = ctx.node.volume_path(&ns, "envpod", "data").context("no pod dir")?;
        let env = std::fs::read_to_string(data.join("env"))?;
        let pod_ip = done.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        ensure!(pod_ip.starts_with("127."), "pod IP {pod_ip}");
        let creds_dir = ctx.node.volume_path(&ns, "envpod", "sec").context("no pod dir")?;
        for want in [
            "PLAIN=v1".to_string(),
            "GREETING=hello-v1".to_string(),
            "POD_NAME=envpod".to_string(),
            format!("POD_NS={ns}"),
            format!("POD_IP={pod_ip}"),
            "SA=default".to_string(),
            format!("NODE={}", ctx.node.name()),
            "TOKEN=s3cret".to_string(),
            "LEVEL=debug".to_string(),
            "CFG_mode=fast".to_string(),
            format!("CREDS_DIR={}", creds_dir.display()),
        ] {
            ensure!(env.lines().any(|l| l == want), "missing {want:?} in env:\n{env}");
        }
        ensure!(std::fs::read_to_string(data.join("secret-file"))? == "from-secret");
        ensure!(std::fs::read_to_string(data.join("args"))?.trim() == "hello-v1");
        Ok(())
    })
}

fn service_account_identity(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("sa", |client, ns| async move {
        let sa: ServiceAccount =
            serde_json::from_value(json!({ "metadata": { "name": "tester" } }))?;
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &sa)
            .await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "whoami" },
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "tester",
                "containers": [
                    { "name": "whoami", "image": "ari-test-kubectl",
                      "args": ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"] },
                    { "name": "cani", "image": "ari-test-kubectl",
                      "args": ["auth", "can-i", "list", "secrets"] },
                ],
            },
        }))?;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pod)
            .await?;
        let done = finished_pod(&client, &ns, "whoami").await?;
        let who = ctx.node.logs(&ns, "whoami", "whoami");
        ensure!(
            who.trim() == format!("system:serviceaccount:{ns}:tester"),
            "{}",
            ctx.logs(&ns, "whoami", "whoami")
        );
        // RBAC is real: the fresh ServiceAccount may not list secrets.
        let cani = ctx.node.logs(&ns, "whoami", "cani");
        ensure!(cani.trim() == "no", "{}", ctx.logs(&ns, "whoami", "cani"));
        let statuses = done
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default();
        let code = statuses
            .iter()
            .find(|c| c.name == "cani")
            .and_then(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
        ensure!(code == Some(1), "can-i exit code {code:?}");
        Ok(())
    })
}

fn own_ips_and_probes(ctx: &Ctx) -> Result<()> {
    if !std::path::Path::new("/usr/bin/env").is_file() || which("python3").is_none() {
        bail!("python3 is needed for this trial");
    }
    ctx.in_namespace("ips", |client, ns| async move {
        let dep: Deployment = serde_json::from_value(json!({
            "metadata": { "name": "web" },
            "spec": {
                "replicas": 2,
                "selector": { "matchLabels": { "app": "web" } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": "main",
                            "image": "ari-test-python",
                            "command": ["env"],
                            "args": ["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
                            "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }],
                            "ports": [{ "name": "http", "containerPort": 8080 }],
                            "readinessProbe": { "httpGet": { "path": "/", "port": "http" }, "periodSeconds": 1 },
                        }],
                    },
                },
            },
        }))?;
        Api::<Deployment>::namespaced(client.clone(), &ns).create(&PostParams::default(), &dep).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let ready = wait::until("two Ready web pods", wait::DEFAULT, || async {
            let l = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?;
            let ready: Vec<Pod> = l.items.into_iter().filter(is_ready).collect();
            if ready.len() == 2 { Ok(ready) } else { Err(format!("{} ready", ready.len())) }
        })
        .await?;
        let ips: Vec<String> = ready
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        ensure!(ips.len() == 2 && ips[0] != ips[1], "pod IPs {ips:?}");
        Ok(())
    })
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    })
}

fn deletion_gc(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gc", |client, ns| async move {
        let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deps.create(
            &PostParams::default(),
            &shell_deployment("doomed", "exec sleep 3600")?,
        )
        .await?;
        let pod = ready_pod(&client, &ns, "doomed").await?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pids = ctx.node.pod_pids(&ns, &name);
        let pid = *pids.get("main").context("no pid for main")?;
        deps.delete("doomed", &DeleteParams::background()).await?;
        let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        wait::until(
            "ReplicaSet and Pod garbage-collected",
            wait::DEFAULT,
            || async {
                let r = rss
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                let p = pods
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                if r == 0 && p == 0 {
                    Ok(())
                } else {
                    Err(format!("{r} replicasets, {p} pods left"))
                }
            },
        )
        .await?;
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok();
        ensure!(!alive, "process {pid} of the deleted pod still runs");
        Ok(())
    })
}

fn killed_process_restarts(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("restart", |client, ns| async move {
        let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deps.create(
            &PostParams::default(),
            &shell_deployment("phoenix", "echo started; exec sleep 3600")?,
        )
        .await?;
        let pod = ready_pod(&client, &ns, "phoenix").await?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let before = ctx.node.pod_pids(&ns, &name);
        ctx.node.kill_pod_process(&ns, &name)?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        wait::until("restartCount 1 and Ready again", wait::DEFAULT, || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            let cs = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default();
            let restarts = cs.first().map(|c| c.restart_count).unwrap_or(0);
            let last_code = cs.first().and_then(|c| {
                c.last_state
                    .as_ref()?
                    .terminated
                    .as_ref()
                    .map(|t| t.exit_code)
            });
            if restarts == 1 && is_ready(&p) && last_code == Some(137) {
                Ok(())
            } else {
                Err(format!(
                    "restarts {restarts}, last exit {last_code:?}, ready {}",
                    is_ready(&p)
                ))
            }
        })
        .await?;
        let after = ctx.node.pod_pids(&ns, &name);
        ensure!(
            after.contains_key("main") && after.get("main") != before.get("main"),
            "pids {before:?} -> {after:?}"
        );
        let log = ctx.node.logs(&ns, &name, "main");
        ensure!(
            log.matches("started").count() == 2,
            "{}",
            ctx.logs(&ns, &name, "main")
        );
        Ok(())
    })
}

fn graceful_termination(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("term", |client, ns| async move {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "graceful" },
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "volumes": [{ "name": "data", "emptyDir": {} }],
                "containers": [{
                    "name": "main",
                    "image": "ari-test-shell",
                    "command": ["sh", "-c"],
                    "args": ["trap 'echo got-term > /data/term; exit 0' TERM; echo up; while true; do sleep 0.1; done"],
                    "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
                }],
            },
        }))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &pod).await?;
        wait::until("shell trap installed", wait::DEFAULT, || async {
            let l = ctx.node.logs(&ns, "graceful", "main");
            if l.contains("up") { Ok(()) } else { Err(l) }
        })
        .await?;
        pods.delete("graceful", &DeleteParams::default()).await?;
        wait::until("pod gone", wait::DEFAULT, || async {
            match pods.get_opt("graceful").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        })
        .await?;
        let data = ctx.node.volume_path(&ns, "graceful", "data").context("no pod dir")?;
        let term = std::fs::read_to_string(data.join("term")).unwrap_or_default();
        ensure!(term.trim() == "got-term", "no SIGTERM seen; {}", ctx.logs(&ns, "graceful", "main"));
        Ok(())
    })
}

fn unknown_image(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("image", |client, ns| async move {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "nginx" },
            "spec": { "containers": [{ "name": "web", "image": "docker.io/library/nginx:1.27" }] },
        }))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &pod).await?;
        wait::until(
            "ErrImagePull with a readable message",
            wait::DEFAULT,
            || async {
                let p = pods.get("nginx").await.map_err(|e| e.to_string())?;
                let waiting = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|c| c.into_iter().next())
                    .and_then(|c| c.state?.waiting);
                match waiting {
                    Some(w)
                        if w.reason.as_deref() == Some("ErrImagePull")
                            && w.message.as_deref().is_some_and(|m| {
                                m.contains("nginx:1.27") && m.contains("ari-test-shell")
                            }) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("waiting state {other:?}")),
                }
            },
        )
        .await?;
        Ok(())
    })
}
