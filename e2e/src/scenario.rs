//! What the e2e scenarios share: one cluster with a node agent and the CRDs per test
//! binary ([`Ctx`]), `kubectl` as a user runs it, Agent/Task manifests, and waits on Agent,
//! Task and pod conditions. Used by `tests/*.rs` and the benchmark binaries.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::{Cluster, NodeAgent, wait};

/// Namespace the operator is installed into.
pub const OPERATOR_NS: &str = "ari-system";

/// One control plane with a node agent; shared by the trials of a test binary.
pub struct Ctx {
    pub rt: tokio::runtime::Runtime,
    // Dropped in field order: node agent before the cluster it talks to.
    pub node: NodeAgent,
    pub cluster: Cluster,
    pub work: tempfile::TempDir,
}

/// The repository root.
pub fn repo() -> PathBuf {
    crate::repo_root()
}

/// `target/agents/<name>.wasm`, built by `scripts/build-agents.sh`.
pub fn agent_wasm(name: &str) -> PathBuf {
    crate::target_dir()
        .join("agents")
        .join(format!("{name}.wasm"))
}

impl Ctx {
    /// A real control plane and a node agent running ari's binaries; no CRDs (the chart
    /// tests install them with helm).
    pub fn bare() -> Result<Ctx> {
        for bin in ["ari", "ari-operator"] {
            ensure!(
                crate::built_binary(bin).is_some(),
                "{bin} is not built: run `cargo build --bins` first"
            );
        }
        ensure!(
            agent_wasm("echo").is_file(),
            "example agents are missing: run scripts/build-agents.sh first"
        );
        // The operator and executors are handed it as their images carry it (`ARI_STOCK_AGENT`);
        // without it every declarative Agent would only report StockAgentMissing.
        ensure!(
            crate::stock_agent().is_file(),
            "the stock agent component {} is missing: run scripts/build-agents.sh first",
            crate::stock_agent().display()
        );
        let rt = tokio::runtime::Runtime::new()?;
        let cluster = rt.block_on(Cluster::start())?;
        let node = NodeAgent::start(&cluster, crate::ari_images())?;
        Ok(Ctx {
            rt,
            node,
            cluster,
            work: tempfile::tempdir()?,
        })
    }

    /// [`Ctx::start`] plus the operator from `deploy/operator.yaml`, Ready.
    pub fn start_with_operator() -> Result<Ctx> {
        let ctx = Ctx::start()?;
        ctx.install_operator_manifest()?;
        Ok(ctx)
    }

    /// [`Ctx::bare`] with the CRDs installed and Established. The operator is not installed:
    /// see [`Ctx::install_operator_manifest`].
    pub fn start() -> Result<Ctx> {
        let ctx = Ctx::bare()?;
        ctx.kubectl_ok(["apply", "-f", &repo().join("crds").display().to_string()])?;
        ctx.kubectl_ok([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/agents.ari.dev",
            "crd/tasks.ari.dev",
        ])?;
        Ok(ctx)
    }

    /// Deploys the operator from `deploy/operator.yaml` into [`OPERATOR_NS`] with a short
    /// heartbeat timeout (so executor loss is noticed within a test's patience) and waits
    /// for its pod to be Ready.
    pub fn install_operator_manifest(&self) -> Result<()> {
        self.kubectl_ok([
            "apply",
            "-f",
            &repo().join("deploy/operator.yaml").display().to_string(),
        ])?;
        self.kubectl_ok([
            "set",
            "env",
            "-n",
            OPERATOR_NS,
            "deployment/ari-operator",
            "ARI_HEARTBEAT_TIMEOUT_SECONDS=4",
        ])?;
        self.wait_operator_env("ARI_HEARTBEAT_TIMEOUT_SECONDS", "4")
    }

    /// Sets `vars` on the operator's Deployment and waits until its one Ready pod runs with
    /// them (the last checked; one pod carries all).
    pub fn set_operator_env(&self, vars: &[(&str, &str)]) -> Result<()> {
        let assignments: Vec<String> = vars.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let mut args = vec!["set", "env", "-n", OPERATOR_NS, "deployment/ari-operator"];
        args.extend(assignments.iter().map(String::as_str));
        self.kubectl_ok(args)?;
        match vars.last() {
            Some((name, value)) => self.wait_operator_env(name, value),
            None => Ok(()),
        }
    }

    /// Waits until the only operator pod left is Ready and runs with `name=value`. The pod
    /// from before `kubectl set env` must not be the one that answers: it wrote executor
    /// Deployments with its own settings (a 10 s heartbeat instead of 1 s), which its
    /// successor then rewrote, rolling every executor just created and losing Tasks to
    /// heartbeats an operator with a 4 s timeout called late.
    pub fn wait_operator_env(&self, name: &str, value: &str) -> Result<()> {
        self.rt.block_on(async {
            let pods: Api<Pod> = Api::namespaced(self.cluster.client(), OPERATOR_NS);
            let lp = ListParams::default().labels("app.kubernetes.io/name=ari-operator");
            wait::until(
                &format!("the operator with {name}={value} the only one, Ready"),
                wait::DEFAULT,
                || async {
                    let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                    let names: Vec<String> = list.items.iter().map(|p| p.name_any()).collect();
                    match list.items.as_slice() {
                        [only] if pod_has_env(only, name, value) && pod_ready(only) => Ok(()),
                        _ => Err(format!("operator pods: {names:?}")),
                    }
                },
            )
            .await
        })?;
        Ok(())
    }

    /// Sets environment variables (`NAME=value`) on the A2A gateway's Deployment and waits
    /// for the rollout, so the pod serving afterwards has them.
    pub fn set_gateway_env(&self, vars: &[&str]) -> Result<()> {
        let mut args = vec!["set", "env", "-n", OPERATOR_NS, "deployment/ari-gateway"];
        args.extend_from_slice(vars);
        let out = self.kubectl(&args)?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl set env: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.kubectl_ok([
            "rollout",
            "status",
            "-n",
            OPERATOR_NS,
            "deployment/ari-gateway",
            "--timeout=180s",
        ])?;
        Ok(())
    }

    /// Waits until one operator pod in [`OPERATOR_NS`] is Ready.
    pub fn wait_operator_ready(&self) -> Result<()> {
        self.rt.block_on(async {
            let client = self.cluster.client();
            wait::until("operator pod Ready", wait::DEFAULT, || {
                ready_pods(
                    &client,
                    OPERATOR_NS,
                    "app.kubernetes.io/name=ari-operator",
                    1,
                )
            })
            .await
        })?;
        Ok(())
    }

    /// `kubectl` with the admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Result<std::process::Output> {
        Ok(self.cluster.kubectl(args)?)
    }

    /// `kubectl ari ARGS`: the target directory's `ari` linked as `kubectl-ari` on kubectl's
    /// `PATH`, as the README's set-up installs the plugin.
    pub fn kubectl_ari(&self, args: &[&str]) -> Result<std::process::Output> {
        let plugins = self.work.path().join("plugins");
        let link = plugins.join("kubectl-ari");
        if !link.exists() {
            std::fs::create_dir_all(&plugins)?;
            std::os::unix::fs::symlink(crate::target_dir().join("debug/ari"), &link)?;
        }
        let mut all = vec!["ari"];
        all.extend_from_slice(args);
        Ok(self.cluster.kubectl_with_plugins(&plugins, &all)?)
    }

    /// `kubectl` that must succeed; returns its stdout.
    pub fn kubectl_ok<'a>(&self, args: impl AsRef<[&'a str]>) -> Result<String> {
        let args = args.as_ref();
        let out = self.kubectl(args)?;
        ensure!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -n NS -f -` of a YAML document, as a user would.
    pub fn apply(&self, ns: &str, yaml: &str) -> Result<std::process::Output> {
        let file = self.work.path().join(format!("{}.yaml", unique()));
        std::fs::write(&file, yaml)?;
        self.kubectl(&["apply", "-n", ns, "-f", &file.display().to_string()])
    }

    pub fn apply_ok(&self, ns: &str, yaml: &str) -> Result<()> {
        let out = self.apply(ns, yaml)?;
        ensure!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// A token of ServiceAccount `sa` of `ns` for the gateway's audience (the gateway refuses
    /// tokens made for the API server).
    pub fn gateway_token(&self, ns: &str, sa: &str) -> Result<String> {
        let token = self.kubectl_ok([
            "create",
            "token",
            sa,
            "-n",
            ns,
            "--duration=1h",
            "--audience=ari-gateway",
        ])?;
        Ok(token.trim().to_owned())
    }

    /// An A2A or MCP caller of the gateway: ServiceAccount `name` of `ns` bound to a Role of
    /// the same name granting each `(resources, verbs)` of `ari.dev`, and `get` on Agents (to
    /// read cards); its token for the gateway.
    pub fn gateway_caller(
        &self,
        ns: &str,
        name: &str,
        rules: &[(&[&str], &[&str])],
    ) -> Result<String> {
        let list = |xs: &[&str]| xs.join(", ");
        let rules: String = rules
            .iter()
            .map(|(resources, verbs)| {
                format!(
                    "  - apiGroups: [ari.dev]\n    resources: [{}]\n    verbs: [{}]\n",
                    list(resources),
                    list(verbs)
                )
            })
            .collect();
        self.apply_ok(
            ns,
            &format!(
                "apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}}}
rules:
{rules}  - apiGroups: [ari.dev]
    resources: [agents]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects: [{{kind: ServiceAccount, name: {name}}}]
"
            ),
        )?;
        self.gateway_token(ns, name)
    }

    /// The component of an example agent as a ConfigMap (binaryData), as docs/operator.md shows.
    pub fn module_configmap(&self, ns: &str, name: &str, agent: &str) -> Result<()> {
        let from = format!("--from-file=module.wasm={}", agent_wasm(agent).display());
        self.kubectl_ok(["create", "configmap", name, "-n", ns, &from])?;
        Ok(())
    }

    /// Runs `f` in a fresh namespace; on failure prints the executors' logs.
    pub fn in_namespace<F, Fut>(&self, prefix: &str, f: F) -> Result<()>
    where
        F: FnOnce(Client, String) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        self.rt.block_on(async {
            let client = self.cluster.client();
            let ns = self.cluster.new_namespace(prefix).await?;
            let result = f(client.clone(), ns.clone()).await;
            if result.is_err() {
                eprintln!("{}", self.executor_logs(&client, &ns).await);
            }
            result
        })
    }

    /// The tail of every operator pod's log, for failure messages.
    pub fn operator_logs(&self) -> String {
        let pods: Vec<String> = self.rt.block_on(async {
            Api::<Pod>::namespaced(self.cluster.client(), OPERATOR_NS)
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().map(|p| p.name_any()).collect())
                .unwrap_or_default()
        });
        pods.iter()
            .map(|p| {
                format!(
                    "--- operator {p}:\n{}",
                    tail(&self.node.logs(OPERATOR_NS, p, "operator"), 30)
                )
            })
            .collect()
    }

    /// The tail of every executor pod's log in `ns`.
    pub async fn executor_logs(&self, client: &Client, ns: &str) -> String {
        let pods = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        pods.iter()
            .map(|p| {
                let name = p.name_any();
                format!(
                    "--- executor {name}:\n{}",
                    tail(&self.node.logs(ns, &name, "executor"), 30)
                )
            })
            .collect()
    }
}

/// The last `lines` lines of `s`.
pub fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs one scenario of e2e/a2a/drive.py with the official A2A Python SDK (installed on first
/// use, cached under ~/.cache/ari); its checks are the trial's.
pub fn drive_a2a(scenario: &str, env: &[(&str, String)]) -> Result<()> {
    let mut cmd = std::process::Command::new(installed_python("ARI_A2A_PYTHON", "a2a-sdk.sh")?);
    cmd.arg(repo().join("e2e/a2a/drive.py")).arg(scenario);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().context("running e2e/a2a/drive.py")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    ensure!(
        out.status.success(),
        "drive.py {scenario} failed:\n{stdout}\n{}",
        tail(&String::from_utf8_lossy(&out.stderr), 40)
    );
    Ok(())
}

/// A name unique within this process.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("doc-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// An Agent whose module is `module.wasm` of ConfigMap `configmap`; `extra` is appended
/// to `spec` (indent it by two spaces).
pub fn agent_yaml(name: &str, configmap: &str, replicas: u32, extra: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  module:
    configMap:
      name: {configmap}
      key: module.wasm
  executor:
    replicas: {replicas}
    concurrency: 4
{extra}"
    )
}

/// An ExecutorPool `name` of `replicas` pods, each running `concurrency` Tasks at once.
pub fn pool_yaml(name: &str, replicas: u32, concurrency: u32) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: ExecutorPool
metadata:
  name: {name}
spec:
  replicas: {replicas}
  concurrency: {concurrency}
"
    )
}

/// An Agent of ConfigMap module `configmap` in pool `pool`; `extra` is appended to `spec`.
pub fn pooled_yaml(
    name: &str,
    configmap: &str,
    pool: &str,
    concurrency: u32,
    extra: &str,
) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  module:
    configMap:
      name: {configmap}
      key: module.wasm
  executor:
    pool: {pool}
    concurrency: {concurrency}
{extra}"
    )
}

/// A Task for `agent` with UTF-8 `input`; `extra` is appended to `spec`.
pub fn task_yaml(name: &str, agent: &str, input: &str, extra: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Task
metadata:
  name: {name}
spec:
  agentRef:
    name: {agent}
  input: {input:?}
{extra}"
    )
}

/// A Task of items (`spec.items`) for `agent`; `extra` is appended to `spec`.
pub fn items_task_yaml(name: &str, agent: &str, items: &[String], extra: &str) -> String {
    let list: String = items.iter().map(|i| format!("    - {i:?}\n")).collect();
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Task
metadata:
  name: {name}
spec:
  agentRef:
    name: {agent}
  items:
{list}{extra}"
    )
}

/// The results document of a finished Task of items: inline, or from its output ConfigMap.
pub async fn items_results(client: &Client, task: &Task) -> Result<Vec<u8>> {
    let s = task.status.clone().unwrap_or_default();
    if let Some(text) = s.output {
        return Ok(text.into_bytes());
    }
    let r = s.output_ref.context("neither output nor outputRef")?;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        client.clone(),
        &task.namespace().unwrap_or_default(),
    )
    .get(&r.config_map)
    .await?;
    cm.binary_data
        .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
        .context("the output ConfigMap has no such key")
}

/// Label selector of the A2A gateway's pods (deploy/operator.yaml).
pub const GATEWAY_SELECTOR: &str = "app.kubernetes.io/name=ari-gateway";

/// `http://<gateway pod IP>:8080`, once one gateway pod is Ready: the gateway's address on the
/// local cluster, which has no Service routing and no port-forward (scripts/cluster.sh prints
/// it as `ARI_GATEWAY`).
pub async fn gateway_url(client: &Client) -> Result<String> {
    let pods = wait::until("a gateway pod Ready", wait::DEFAULT, || {
        ready_pods(client, OPERATOR_NS, GATEWAY_SELECTOR, 1)
    })
    .await?;
    let ip = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("the gateway pod has no IP")?;
    Ok(format!("http://{ip}:8080"))
}

/// The Ready pods matching `selector`, or an error until there are `want` of them.
pub async fn ready_pods(
    client: &Client,
    ns: &str,
    selector: &str,
    want: usize,
) -> std::result::Result<Vec<Pod>, String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    let ready: Vec<Pod> = pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(pod_ready)
        .collect();
    if ready.len() >= want {
        Ok(ready)
    } else {
        Err(format!("{} of {want} pods Ready ({selector})", ready.len()))
    }
}

/// Waits until the Agent's `Ready` condition is True and its executors have settled.
pub async fn agent_ready(client: &Client, ns: &str, name: &str) -> Result<Agent> {
    let agent = agent_ready_within(client, ns, name, wait::DEFAULT).await?;
    executors_settled(client, ns, name).await?;
    Ok(agent)
}

/// Waits up to `timeout` until the Agent's `Ready` condition is True.
pub async fn agent_ready_within(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Agent> {
    let api: Api<Agent> = Api::namespaced(client.clone(), ns);
    Ok(
        wait::until(&format!("Agent {name} Ready"), timeout, || async {
            let a = api.get(name).await.map_err(|e| e.to_string())?;
            if a.is_ready() {
                Ok(a)
            } else {
                Err(format!("status: {:?}", a.status))
            }
        })
        .await?,
    )
}

/// Waits until the Agent's executor Deployment has rolled out its current template and runs
/// no pod of an older one. An Agent is Ready while any executor is available, also during a
/// rollout (as a Deployment is Available); a trial that counts executors or pins a Task to a
/// pod must not start while an earlier template's pods are still going away.
pub async fn executors_settled(client: &Client, ns: &str, agent: &str) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let name = ari_crds::names::executor_deployment_name(agent);
    wait::until(&format!("{name} rolled out"), wait::DEFAULT, || async {
        let d = api.get(&name).await.map_err(|e| e.to_string())?;
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = d.status.clone().unwrap_or_default();
        let observed = s.observed_generation >= d.metadata.generation;
        let settled = observed
            && s.updated_replicas.unwrap_or(0) == want
            && s.replicas.unwrap_or(0) == want
            && s.available_replicas.unwrap_or(0) == want;
        if settled {
            Ok(())
        } else {
            Err(format!("{want} wanted, status {s:?}"))
        }
    })
    .await?;
    Ok(())
}

/// Waits until the Task is `Succeeded` or `Failed`.
pub async fn task_finished(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Task> {
    let api: Api<Task> = Api::namespaced(client.clone(), ns);
    Ok(
        wait::until(&format!("Task {name} finished"), timeout, || async {
            let t = api.get(name).await.map_err(|e| e.to_string())?;
            if t.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|p| p.is_finished())
            {
                Ok(t)
            } else {
                Err(format!("status: {:?}", t.status))
            }
        })
        .await?,
    )
}

/// The Task's phase and reason.
pub fn phase_reason(t: &Task) -> (Option<TaskPhase>, Option<TaskReason>) {
    let s = t.status.clone().unwrap_or_default();
    (s.phase, s.reason)
}

/// Fails unless the Task ended with `phase` and `reason`.
pub fn expect_reason(t: &Task, phase: TaskPhase, reason: TaskReason) -> Result<()> {
    ensure!(
        phase_reason(t) == (Some(phase), Some(reason)),
        "task {} ended {:?}, want {phase:?}/{reason:?}; message: {:?}",
        t.name_any(),
        phase_reason(t),
        t.status.as_ref().and_then(|s| s.message.clone())
    );
    Ok(())
}

/// Verifies the Task's attestation against the key the Agent publishes in its status.
pub fn verify_attestation(task: &Task, agent: &Agent) -> Result<()> {
    ari_crds::verify::attestation(task, agent)?;
    Ok(())
}

/// Lower-case hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    Ok(ari_model::attestation::sha256_hex(&std::fs::read(path)?))
}

/// Events about the object `name` in `ns` (the core/v1 view, which includes events.k8s.io
/// Events).
pub async fn events_for(client: &Client, ns: &str, name: &str) -> Result<Vec<Event>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await?
        .items)
}

/// Waits for an Event about `name` with `reason`, and returns it.
pub async fn event_with_reason(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> Result<Event> {
    let found = wait::until(
        &format!("an Event about {name} with reason {reason}"),
        wait::DEFAULT,
        || async {
            let events = events_for(client, ns, name)
                .await
                .map_err(|e| e.to_string())?;
            let reasons: Vec<_> = events.iter().map(|e| e.reason.clone()).collect();
            events
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
                .ok_or_else(|| format!("events: {reasons:?}"))
        },
    )
    .await?;
    Ok(found)
}

/// Whether a container of `pod` sets `name` to `value`.
fn pod_has_env(pod: &Pod, name: &str, value: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .flat_map(|c| c.env.iter().flatten())
            .any(|e| e.name == name && e.value.as_deref() == Some(value))
    })
}

/// Whether `pod`'s Ready condition is True.
fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits for the Agent's condition `type_` to have `status`; its message.
pub async fn agent_condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
) -> Result<String> {
    let api: Api<Agent> = Api::namespaced(client.clone(), ns);
    let wanted = wait::Wanted {
        type_,
        status,
        reason: None,
    };
    let (_, message) = wait::condition(&api, name, wanted, agent_conditions).await?;
    Ok(message)
}

pub fn agent_conditions(
    a: &Agent,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    a.status.clone().map(|s| s.conditions).unwrap_or_default()
}

/// The whole logs of every executor pod in `ns`.
pub async fn executor_log(ctx: &Ctx, client: &Client, ns: &str) -> Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items;
    Ok(pods
        .iter()
        .map(|p| ctx.node.logs(ns, &p.name_any(), "executor"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `/metrics` of the first pod in `ns` that `labels` select and that has an IP (the node
/// agent runs pods as host processes, so the pod IP is reachable from the test).
pub async fn pod_metrics(client: &Client, ns: &str, labels: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(labels))
        .await?
        .items;
    let ip = pods
        .iter()
        .find_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .with_context(|| format!("no pod {labels} with an IP"))?;
    let addr = format!("{ip}:8080");
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf))
        .await
        .context("GET /metrics: no answer in 10 s")??;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A Task `name` on Agent `agent` naming `parent` (of Agent `parent_agent`) as its parent,
/// created by a pod of ExecutorPool `pool` (none: a dedicated executor), owned by the parent
/// when `owned`: what an executor writes when its guest delegates.
pub fn child_task(
    name: &str,
    agent: &str,
    parent: &Task,
    parent_agent: &str,
    pool: Option<&str>,
    owned: bool,
) -> Result<Task> {
    let uid = parent.uid().context("parent uid")?;
    let mut t = serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name},
        "spec": {"agentRef": {"name": agent}, "input": "x",
                 "parent": {"name": parent.name_any(), "uid": uid, "agent": parent_agent,
                            "depth": 1, "index": 0}},
    });
    if let Some(pool) = pool {
        t["spec"]["parent"]["pool"] = pool.into();
    }
    if owned {
        t["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "name": parent.name_any(), "uid": uid}]);
    }
    Ok(serde_json::from_value(t)?)
}

/// Fails unless every Task of `ns` is one of `allowed`: refused writes left nothing behind.
pub async fn only_tasks(client: &Client, ns: &str, allowed: &[&str]) -> Result<()> {
    let names: Vec<String> = Api::<Task>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|t| t.name_any())
        .collect();
    ensure!(
        names.iter().all(|n| allowed.contains(&n.as_str())),
        "refused writes left Tasks behind: {names:?}"
    );
    Ok(())
}

/// A real request that must be refused with 403 Forbidden: the API server's message.
pub fn forbidden<T: std::fmt::Debug>(
    what: &str,
    r: std::result::Result<T, kube::Error>,
) -> Result<String> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(s.message),
        other => anyhow::bail!("{what}: want 403 Forbidden, got {other:?}"),
    }
}

/// The whole log of the operator pod.
pub async fn operator_log(ctx: &Ctx, client: &Client) -> Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=ari-operator"))
        .await?;
    let pod = pods.items.first().context("no operator pod")?;
    Ok(ctx.node.logs(OPERATOR_NS, &pod.name_any(), "operator"))
}

/// Every `K` of `ns` as JSON text: what a test searches for a secret that must not be there.
pub async fn list_json<K>(client: &Client, ns: &str) -> Result<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let items = Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items;
    Ok(serde_json::to_string(&items)?)
}

/// The python of a virtualenv an install script of `scripts/` sets up (cached under
/// ~/.cache/ari, installed on first use): `$var` when set (as `scripts/test.sh` sets it), else
/// the last line `script` prints.
pub fn installed_python(var: &str, script: &str) -> Result<String> {
    if let Ok(p) = std::env::var(var) {
        return Ok(p);
    }
    let out = std::process::Command::new(crate::repo_root().join("scripts").join(script))
        .output()
        .with_context(|| format!("scripts/{script}"))?;
    ensure!(
        out.status.success(),
        "scripts/{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
}
