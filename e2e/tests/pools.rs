//! Executor pools on a real control plane (issue 29, item 1; docs/operator.md, "Executor
//! pools"): Agents naming an `ExecutorPool` run in its pods, none of their own; each Task is
//! signed and verifies as a dedicated Agent's; a pooled Agent the pool cannot hold apart is
//! refused at apply; a pool pod's guest log lines each name their Agent; a CPU-spinning Agent fills only its own share of a pool pod while
//! its neighbour's Tasks go on; past `hotModules` an Agent waits for room with its Tasks
//! rather than the pod loading one more module; and two pooled Agents of one pod, each granted
//! a model, reach only their own (the other's is refused `CapabilityDenied`), the pool pod
//! holding the granted model's key by reference and no key of a model no pooled Agent is
//! granted; a declarative Agent runs in a pool pod the declaration the operator pinned, and an
//! edited prompt once the operator has resolved it; two pooled Agents of one pod sign each
//! with the key of its own Secret (and the pool pod carries no unmarked one), and the pod's
//! /metrics counts their Tasks apart; two pooled Agents of one pod pull their images from
//! registries wanting different logins, each with its own pull secret, and one naming only
//! its own secret for a neighbour's image is not Ready and runs nothing; a pooled `counter`
//! granted storage is not Ready without the operator's Redis (its neighbour runs on), and with
//! a real `redis-server` counts every increment of Tasks spread over two pool pods.
//! Run: `scripts/build-agents.sh && cargo build --bins && ARI_REGISTRY_BIN="$(scripts/registry.sh
//! --print)" cargo test -p ari-e2e --test pools` (and `redis-server` installed).

use std::ops::Deref;

use anyhow::{Context, Result, bail, ensure};
use ari_crds::names::{EXECUTOR_SERVICE_ACCOUNT, POOL_SERVICE_ACCOUNT};
use ari_crds::{Agent, ExecutorPool, Task, TaskPhase, TaskReason};
use ari_e2e::redis::RedisServer;
use ari_e2e::registry::{self, Registry, registry_bin};
use ari_e2e::scenario::*;
use ari_e2e::{namespace_user, trials, wait};
use ari_testkit::scripted::{Reply, Request, Scripted, chat_answer};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run_phases(
        PoolsCtx::start,
        vec![
            vec![
                (
                    "agents_in_a_pool_share_its_pods_and_each_signs_its_own_runs",
                    shared,
                ),
                (
                    "a_spinning_agent_fills_only_its_own_share_of_a_pool_pod",
                    spinner,
                ),
                (
                    "hostile_neighbours_in_a_pool_end_with_their_own_reasons_and_the_pod_lives_on",
                    hostile,
                ),
                (
                    "past_hot_modules_an_agent_waits_for_room_and_every_task_still_succeeds",
                    hot_bound,
                ),
                (
                    "pooled_agents_of_one_pod_reach_only_the_models_they_are_granted",
                    pooled_models,
                ),
                (
                    "a_declarative_agent_in_a_pool_runs_its_pinned_declaration_in_the_pool_pod",
                    pooled_declarative,
                ),
                (
                    "pooled_agents_each_sign_with_their_own_key_and_are_counted_apart_in_the_pool_pod",
                    pooled_signing,
                ),
                (
                    "pooled_agents_each_pull_their_image_with_their_own_pull_secret_only",
                    pooled_pull_secrets,
                ),
                (
                    "a_pooled_agent_granted_storage_without_redis_is_not_ready_and_its_neighbour_runs",
                    storage_without_redis,
                ),
                (
                    "a_pooled_agent_delegates_to_a_pooled_and_a_dedicated_agent_within_its_budget_and_cancels_its_child",
                    pooled_delegation,
                ),
                (
                    "a_pool_pods_token_creates_and_cancels_only_children_of_its_own_pools_agents",
                    pool_pod_writes,
                ),
                (
                    "a_declarative_agent_with_a_subagent_runs_in_a_pool_and_answers_with_the_subagents_output",
                    pooled_subagent,
                ),
            ],
            // Last: giving the operator a Redis URL restarts it and rolls every pool.
            vec![(
                "a_pooled_counter_on_redis_counts_every_increment_across_two_pool_pods",
                storage_on_redis,
            )],
        ],
    )
}

/// The cluster, and two registries wanting different logins, started before the operator so
/// its plain-HTTP list can name them.
struct PoolsCtx {
    ctx: Ctx,
    /// Wants `a`/[`PASSWORD_A`].
    registry_a: Registry,
    /// Wants `b`/[`PASSWORD_B`].
    registry_b: Registry,
}

const PASSWORD_A: &str = "a-s3cret-e2e";
const PASSWORD_B: &str = "b-s3cret-e2e";

impl Deref for PoolsCtx {
    type Target = Ctx;

    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

impl trials::Shared for PoolsCtx {
    fn failure_context(&self) -> String {
        self.ctx.operator_logs()
    }
}

impl PoolsCtx {
    fn start() -> Result<PoolsCtx> {
        let bin = registry_bin()?;
        let ctx = Ctx::start()?;
        let registry_a = Registry::start(&bin, Some(("a", PASSWORD_A)))?;
        let registry_b = Registry::start(&bin, Some(("b", PASSWORD_B)))?;
        registry::install_operator(&ctx, &[registry_a.host(), registry_b.host()].join(","))?;
        Ok(PoolsCtx {
            ctx,
            registry_a,
            registry_b,
        })
    }
}

/// Waits until the Agent's `Ready` condition is True (a pooled Agent has no Deployment of its
/// own to settle).
async fn pooled_ready(client: &Client, ns: &str, name: &str) -> Result<Agent> {
    agent_ready_within(client, ns, name, wait::DEFAULT).await
}

async fn executor_pods(client: &Client, ns: &str) -> Result<Vec<String>> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=ari-executor"))
        .await?;
    Ok(list.items.iter().map(|p| p.name_any()).collect())
}

fn shared(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pools", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;

        // Named before the pool exists: valid, not Ready, saying why.
        ctx.apply_ok(&ns, &pooled_yaml("early", "echo-module", "shared", 2, ""))?;
        let (reason, message) = wait::until("early says PoolNotFound", wait::DEFAULT, || async {
            let a = Api::<Agent>::namespaced(client.clone(), &ns)
                .get("early")
                .await
                .map_err(|e| e.to_string())?;
            let ready = a
                .status
                .as_ref()
                .and_then(|s| ari_crds::conditions::find(&s.conditions, "Ready").cloned());
            match ready {
                Some(c) if c.reason == "PoolNotFound" => Ok((c.reason, c.message)),
                other => Err(format!("Ready: {other:?}")),
            }
        })
        .await?;
        ensure!(message.contains("shared"), "{reason}: {message}");

        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 8))?;
        let agents: Vec<(String, &str)> = (0..6)
            .map(|i| (format!("echo-{i}"), "echo-module"))
            .chain((0..6).map(|i| (format!("count-{i}"), "wordcount-module")))
            .collect();
        for (name, module) in &agents {
            ctx.apply_ok(&ns, &pooled_yaml(name, module, "shared", 2, ""))?;
        }
        pooled_ready(&client, &ns, "early").await?;
        let mut keys = Vec::new();
        for (name, _) in &agents {
            keys.push(pooled_ready(&client, &ns, name).await?);
        }

        // One pod for thirteen Agents; no Deployment of an Agent's own.
        let pods = wait::until("one pool pod", wait::DEFAULT, || async {
            let pods = executor_pods(&client, &ns)
                .await
                .map_err(|e| e.to_string())?;
            if pods.len() == 1 {
                Ok(pods)
            } else {
                Err(format!("executor pods: {pods:?}"))
            }
        })
        .await?;
        let deps = Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let names: Vec<String> = deps.items.iter().map(|d| d.name_any()).collect();
        ensure!(names == ["shared-pool"], "deployments: {names:?}");
        let pool = Api::<ExecutorPool>::namespaced(client.clone(), &ns)
            .get("shared")
            .await?;
        let agents_counted = wait::until("the pool counts its Agents", wait::DEFAULT, || async {
            let p = Api::<ExecutorPool>::namespaced(client.clone(), &ns)
                .get("shared")
                .await
                .map_err(|e| e.to_string())?;
            match p.status.as_ref().and_then(|s| s.agents) {
                Some(13) => Ok(13),
                other => Err(format!("agents: {other:?}")),
            }
        })
        .await?;
        ensure!(agents_counted == 13, "{pool:?}");

        // Each Agent's Task runs in the pool pod, with its own module, and is signed.
        for (name, _) in &agents {
            ctx.apply_ok(
                &ns,
                &task_yaml(&format!("t-{name}"), name, "one two three", ""),
            )?;
        }
        for ((name, module), agent) in agents.iter().zip(&keys) {
            let t = task_finished(&client, &ns, &format!("t-{name}"), wait::DEFAULT).await?;
            let s = t.status.clone().unwrap_or_default();
            ensure!(s.phase == Some(TaskPhase::Succeeded), "{name}: {s:?}");
            ensure!(
                s.executor.as_deref() == Some(pods[0].as_str()),
                "{name} ran on {:?}, not the pool pod {}",
                s.executor,
                pods[0]
            );
            let out = s.output.clone().unwrap_or_default();
            let want_echo = *module == "echo-module";
            ensure!(
                (out == "one two three") == want_echo,
                "{name} answered {out:?}"
            );
            verify_attestation(&t, agent).with_context(|| format!("{name}'s attestation"))?;
        }

        // Sizing belongs to the pool: a pooled Agent setting it is refused at apply.
        let refused = ctx.apply(
            &ns,
            &pooled_yaml("sized", "echo-module", "shared", 1, "").replace(
                "    concurrency: 1\n",
                "    concurrency: 1\n    replicas: 3\n",
            ),
        )?;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        ensure!(
            !refused.status.success() && stderr.contains("on the ExecutorPool"),
            "a pooled Agent setting replicas was not refused: {stderr}"
        );
        Ok(())
    })
}

/// Whether the Task's phase is `phase`.
async fn in_phase(api: &Api<Task>, name: &str, phase: TaskPhase) -> Result<bool> {
    let t = api.get(name).await?;
    Ok(t.status.and_then(|s| s.phase) == Some(phase))
}

fn spinner(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-spin", |client, ns| async move {
        ctx.module_configmap(&ns, "spin-module", "spin")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        // Two places per pod; the spinner may hold one of them.
        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 2))?;
        ctx.apply_ok(
            &ns,
            &pooled_yaml(
                "spinner",
                "spin-module",
                "shared",
                1,
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 300\n",
            ),
        )?;
        ctx.apply_ok(&ns, &pooled_yaml("echo", "echo-module", "shared", 2, ""))?;
        pooled_ready(&client, &ns, "spinner").await?;
        pooled_ready(&client, &ns, "echo").await?;
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);

        // A fork bomb of spinning Tasks: one runs, the rest wait for the spinner's one slot.
        let spins: Vec<String> = (0..4).map(|i| format!("spin-{i}")).collect();
        for s in &spins {
            ctx.apply_ok(&ns, &task_yaml(s, "spinner", "spin", ""))?;
        }
        let first = wait::until("a spinning Task Running", wait::DEFAULT, || async {
            for s in &spins {
                if in_phase(&tasks, s, TaskPhase::Running)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    return Ok(s.clone());
                }
            }
            Err("none Running yet".to_owned())
        })
        .await?;

        // The neighbour's Tasks all finish while that first spin still runs: they had the
        // pod's other place, which the spinner's backlog could not take.
        for i in 0..3 {
            ctx.apply_ok(
                &ns,
                &task_yaml(&format!("echo-{i}"), "echo", "still here", ""),
            )?;
        }
        for i in 0..3 {
            let t = task_finished(&client, &ns, &format!("echo-{i}"), wait::DEFAULT).await?;
            let s = t.status.unwrap_or_default();
            ensure!(
                s.phase == Some(TaskPhase::Succeeded) && s.output.as_deref() == Some("still here"),
                "echo-{i}: {s:?}"
            );
        }
        ensure!(
            in_phase(&tasks, &first, TaskPhase::Running).await?,
            "the first spin is no longer running"
        );
        let mut running = 0;
        for s in &spins {
            if in_phase(&tasks, s, TaskPhase::Running).await? {
                running += 1;
            }
        }
        ensure!(
            running == 1,
            "{running} spinning Tasks run at once; the share is 1"
        );

        // Cancelled, each spin ends (the pool pod stops it).
        for s in &spins {
            ctx.kubectl_ok([
                "patch",
                "task",
                s,
                "-n",
                &ns,
                "--type=merge",
                "-p",
                r#"{"spec":{"cancelled":true}}"#,
            ])?;
        }
        for s in &spins {
            wait::until(&format!("{s} cancelled"), wait::DEFAULT, || async {
                match in_phase(&tasks, s, TaskPhase::Cancelled).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("not yet".to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await?;
        }
        Ok(())
    })
}

/// Hostile example agents as pooled neighbours of `echo` in one pod: a memory balloon past its
/// 32 MiB limit, a log flood, a trap. Each ends with its own reason; `echo` answers between
/// them; the pool pod is the same process throughout (no restart).
fn hostile(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-hostile", |client, ns| async move {
        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 4))?;
        let tight =
            "  limits:\n    fuel: 100000000000\n    memoryBytes: 33554432\n    timeoutSeconds: 5\n";
        for name in ["balloon", "loud-log", "trap", "echo"] {
            ctx.module_configmap(&ns, &format!("{name}-module"), name)?;
            let extra = if name == "echo" { "" } else { tight };
            ctx.apply_ok(
                &ns,
                &pooled_yaml(name, &format!("{name}-module"), "shared", 2, extra),
            )?;
        }
        for name in ["balloon", "loud-log", "trap", "echo"] {
            pooled_ready(&client, &ns, name).await?;
        }
        let pod = wait::until("one pool pod", wait::DEFAULT, || async {
            match executor_pods(&client, &ns).await {
                Ok(p) if p.len() == 1 => Ok(p[0].clone()),
                other => Err(format!("executor pods: {other:?}")),
            }
        })
        .await?;
        // (task, agent, input, Task spec extra, want)
        let small_fuel = "  fuel: 20000000\n";
        let cases: Vec<(String, &str, &str, &str, Option<TaskReason>)> = (0..2)
            .flat_map(|i| {
                [
                    (
                        format!("balloon-{i}"),
                        "balloon",
                        "",
                        "",
                        Some(TaskReason::Trap),
                    ),
                    (format!("echo-a{i}"), "echo", "fine", "", None),
                    (
                        format!("loud-{i}"),
                        "loud-log",
                        "",
                        small_fuel,
                        Some(TaskReason::FuelExhausted),
                    ),
                    (format!("trap-{i}"), "trap", "", "", Some(TaskReason::Trap)),
                    (format!("echo-b{i}"), "echo", "fine", "", None),
                ]
            })
            .collect();
        for (name, agent, input, extra, _) in &cases {
            ctx.apply_ok(&ns, &task_yaml(name, agent, input, extra))?;
        }
        for (name, _, _, _, want) in &cases {
            let t = task_finished(&client, &ns, name, wait::DEFAULT).await?;
            let s = t.status.clone().unwrap_or_default();
            match want {
                None => ensure!(
                    s.phase == Some(TaskPhase::Succeeded) && s.output.as_deref() == Some("fine"),
                    "{name}: {s:?}"
                ),
                Some(reason) => ensure!(
                    s.phase == Some(TaskPhase::Failed) && s.reason == Some(*reason),
                    "{name}: want {reason:?}, got {:?} {:?}: {:?}",
                    s.phase,
                    s.reason,
                    s.message
                ),
            }
            if name.starts_with("balloon") {
                let m = s.message.clone().unwrap_or_default();
                ensure!(m.contains("memory limit"), "{name}: {m}");
            }
        }
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        let p = pods.get(&pod).await?;
        let restarts: i32 = p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum();
        ensure!(restarts == 0, "the pool pod restarted {restarts} times");
        ensure!(
            executor_pods(&client, &ns).await? == [pod.clone()],
            "the pool pod was replaced"
        );
        guest_lines_name_their_agent(&pods, &pod, "loud-", "loud-log").await
    })
}

/// Every guest line in a pool pod's log names the Agent whose Task wrote it, so one Agent's
/// lines can be told from its neighbours'; the Tasks named `prefix…` wrote some, as `agent`,
/// and the executor's `claimed` and `finished` lines about them name `agent` too.
async fn guest_lines_name_their_agent(
    pods: &Api<Pod>,
    pod: &str,
    prefix: &str,
    agent: &str,
) -> Result<()> {
    let params = kube::api::LogParams {
        container: Some("executor".into()),
        ..Default::default()
    };
    let text = pods.logs(pod, &params).await?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of_prefix = |task: &serde_json::Value| task.as_str().is_some_and(|t| t.starts_with(prefix));
    let guest: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["target"] == "ari::guest")
        .collect();
    let unnamed = guest
        .iter()
        .filter(|v| !v["span"]["agent"].is_string())
        .count();
    ensure!(
        unnamed == 0,
        "{unnamed} of {} guest lines name no Agent",
        guest.len()
    );
    let theirs: Vec<&serde_json::Value> = guest
        .iter()
        .copied()
        .filter(|v| of_prefix(&v["span"]["task"]))
        .collect();
    ensure!(!theirs.is_empty(), "no guest line of the {prefix}* Tasks");
    let wrong: Vec<&serde_json::Value> = theirs
        .iter()
        .copied()
        .filter(|v| v["span"]["agent"] != agent)
        .collect();
    ensure!(
        wrong.is_empty(),
        "{prefix}* lines not named {agent}: {wrong:?}"
    );
    // The executor's own lines about those Tasks name the Agent too.
    let own = |what: &str| {
        lines
            .iter()
            .filter(|v| v["fields"]["message"] == what && of_prefix(&v["fields"]["task"]))
            .map(|v| v["fields"]["agent"] == agent)
            .collect::<Vec<bool>>()
    };
    for what in ["claimed", "finished"] {
        let named = own(what);
        ensure!(
            !named.is_empty() && named.iter().all(|n| *n),
            "{what} lines of {prefix}*: named {agent} {named:?}"
        );
    }
    Ok(())
}

/// Applies Tasks `{prefix}-0..n` of `agent`, each with input "one two three".
fn apply_tasks(ctx: &Ctx, ns: &str, prefix: &str, agent: &str, n: usize) -> Result<Vec<String>> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        ctx.apply_ok(ns, &task_yaml(name, agent, "one two three", ""))?;
    }
    Ok(names)
}

/// Waits for each Task to succeed with what its Agent answers to "one two three" (echo
/// Tasks are named `echo…`, the others count words).
/// On a Task that never finishes, the pool pod's log says why (which Agent waited, which was
/// let go): a failure in a full run is read from that alone.
async fn all_succeed(ctx: &Ctx, client: &Client, ns: &str, names: &[String]) -> Result<()> {
    for name in names {
        let t = match task_finished(client, ns, name, wait::DEFAULT).await {
            Ok(t) => t,
            Err(e) => {
                let log = executor_log(ctx, client, ns).await.unwrap_or_default();
                bail!("{e:#}\nexecutor log:\n{}", tail(&log, 80));
            }
        };
        let s = t.status.unwrap_or_default();
        let out = s.output.clone().unwrap_or_default();
        let answered = match name.starts_with("echo") {
            true => out == "one two three",
            false => out.contains(r#""words":3"#),
        };
        ensure!(
            s.phase == Some(TaskPhase::Succeeded) && answered,
            "{name}: {s:?}"
        );
    }
    Ok(())
}

/// `hotModules: 1` and two Agents of different modules: one is loaded at a time, the other
/// waits with its Tasks (logged, `ari_executor_pool_waiting_agents`) and starts once the
/// first is let go; every Task succeeds, in turns and when both are flooded together.
fn hot_bound(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-hot", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(
            &ns,
            &format!("{}  hotModules: 1\n", pool_yaml("shared", 1, 4)),
        )?;
        for (name, module) in [("echo", "echo-module"), ("count", "wordcount-module")] {
            ctx.apply_ok(&ns, &pooled_yaml(name, module, "shared", 2, ""))?;
        }
        for name in ["echo", "count"] {
            pooled_ready(&client, &ns, name).await?;
        }
        // In turns: each Agent's Tasks wait for the other's module to be let go.
        let echo = apply_tasks(ctx, &ns, "echo-a", "echo", 3)?;
        all_succeed(ctx, &client, &ns, &echo).await?;
        let count = apply_tasks(ctx, &ns, "count-a", "count", 3)?;
        all_succeed(ctx, &client, &ns, &count).await?;
        let echo = apply_tasks(ctx, &ns, "echo-b", "echo", 3)?;
        all_succeed(ctx, &client, &ns, &echo).await?;
        // Both flooded at once, in one apply: one runs its backlog while the other waits.
        let both: Vec<(String, &str)> = (0..8)
            .flat_map(|i| {
                [
                    (format!("echo-c{i}"), "echo"),
                    (format!("count-c{i}"), "count"),
                ]
            })
            .collect();
        let docs: Vec<String> = both
            .iter()
            .map(|(t, agent)| task_yaml(t, agent, "one two three", ""))
            .collect();
        ctx.apply_ok(&ns, &docs.join("---\n"))?;
        let both: Vec<String> = both.into_iter().map(|(t, _)| t).collect();
        all_succeed(ctx, &client, &ns, &both).await?;

        let log = executor_log(ctx, &client, &ns).await?;
        for agent in ["echo", "count"] {
            ensure!(
                log.lines()
                    .any(|l| l.contains("waiting for room") && l.contains(agent)),
                "{agent} never waited for room:\n{}",
                tail(&log, 40)
            );
        }
        let page = pod_metrics(&client, &ns, "ari.dev/pool=shared").await?;
        ensure!(
            page.lines()
                .any(|l| l == "ari_executor_pool_waiting_agents 0"),
            "no Agent should wait once all is done:\n{page}"
        );
        Ok(())
    })
}

/// The key of the model granted in the pool: sent by the pool pod, in no object or log.
const POOL_MODEL_KEY: &str = "sk-e2e-pool-5c2e81";
/// What the scripted model answers.
const POOL_MODEL_ANSWER: &str = "Answered by the pool's model.";

/// The scripted model: a chat answer to any JSON request; nothing else (the operator's probe
/// of this unlisted loopback endpoint never comes).
fn pool_model(request: &Request) -> Reply {
    match serde_json::from_slice::<serde_json::Value>(&request.body) {
        Ok(_) => chat_answer(POOL_MODEL_ANSWER, 12, 6),
        Err(_) => Reply::new(404, "not here"),
    }
}

/// A ModelConfig at `endpoint` whose key is `apiKey` of Secret `secret`, marked for models.
fn keyed_model_yaml(name: &str, endpoint: &str, secret: &str, key: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: {secret}
  labels:
    ari.dev/model-credentials: \"true\"
stringData:
  apiKey: {key}
---
apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: {name}
spec:
  provider: OpenAI
  endpoint: {endpoint:?}
  model: scripted-1
  credentials:
    name: {secret}
    key: apiKey
"
    )
}

/// Two `ask` Agents in one pool pod: `asker` granted model `small` (keyed), `bystander`
/// granted `open` and configured to ask `small`. The asker's Task gets the model's answer,
/// sent with the key; the bystander's is refused `CapabilityDenied` and never reaches the
/// model. The pool pod names the granted models' Secrets only by reference, and not the
/// Secret of `unused`, a model no pooled Agent is granted.
fn pooled_models(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-models", |client, ns| async move {
        let model = Scripted::start(pool_model).await;
        let endpoint = format!("http://{}/v1", model.host());
        ctx.module_configmap(&ns, "ask-module", "ask")?;
        let open = format!(
            "apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: open
spec:
  provider: OpenAI
  endpoint: {:?}
  model: scripted-1
",
            endpoint
        );
        let grant = |m: &str| {
            format!(
                "  capabilities:\n    models:\n      allowed: [{m}]\n  limits:\n    tokens: 2000\n"
            )
        };
        let yaml = [
            keyed_model_yaml("small", &endpoint, "small-key", POOL_MODEL_KEY),
            keyed_model_yaml("unused", &endpoint, "unused-key", "sk-e2e-unused"),
            open,
            pool_yaml("shared", 1, 4),
            pooled_yaml("asker", "ask-module", "shared", 2, &grant("small")),
            pooled_yaml(
                "bystander",
                "ask-module",
                "shared",
                2,
                &format!("  config: small\n{}", grant("open")),
            ),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        let asker = pooled_ready(&client, &ns, "asker").await?;
        pooled_ready(&client, &ns, "bystander").await?;

        // The pool's pod template carries both granted models, and only theirs.
        let template = wait::until(
            "the pool carries its Agents' models",
            wait::DEFAULT,
            || async {
                let d = Api::<Deployment>::namespaced(client.clone(), &ns)
                    .get("shared-pool")
                    .await
                    .map_err(|e| e.to_string())?;
                let t = serde_json::to_string(&d.spec.map(|s| s.template)).unwrap_or_default();
                if t.contains("small-key") && t.contains("ARI_MODELS") {
                    Ok(t)
                } else {
                    Err("not yet".to_owned())
                }
            },
        )
        .await?;
        ensure!(
            !template.contains("unused-key"),
            "the pool names an ungranted model's Secret"
        );
        ensure!(
            !template.contains(POOL_MODEL_KEY),
            "the pool's template holds the key itself"
        );

        let tasks = [
            task_yaml("granted", "asker", "What is ari?", ""),
            task_yaml("not-granted", "bystander", "What is ari?", ""),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &tasks)?;
        let granted = task_finished(&client, &ns, "granted", wait::DEFAULT).await?;
        expect_reason(&granted, TaskPhase::Succeeded, TaskReason::Completed)?;
        let gs = granted.status.clone().unwrap_or_default();
        ensure!(
            gs.output.as_deref() == Some(POOL_MODEL_ANSWER),
            "the asker's answer: {:?}",
            gs.output
        );
        verify_attestation(&granted, &asker)?;
        let refused = task_finished(&client, &ns, "not-granted", wait::DEFAULT).await?;
        expect_reason(&refused, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let rs = refused.status.clone().unwrap_or_default();
        ensure!(
            rs.executor.is_some() && rs.executor == gs.executor,
            "not one pool pod: {:?} and {:?}",
            gs.executor,
            rs.executor
        );
        let pods = executor_pods(&client, &ns).await?;
        ensure!(pods.len() == 1, "executor pods: {pods:?}");

        // One call reached the model, the asker's, with the key from the marked Secret.
        let calls: Vec<_> = model
            .requests()
            .into_iter()
            .filter(|r| !r.body.is_empty())
            .collect();
        ensure!(
            calls.len() == 1,
            "{} model calls, want the asker's one",
            calls.len()
        );
        let auth = calls[0].header("authorization").unwrap_or_default();
        ensure!(
            auth == format!("Bearer {POOL_MODEL_KEY}"),
            "the call's key: {auth:?}"
        );

        // The key is in no object or log a user reads.
        let logs = executor_log(ctx, &client, &ns).await?;
        for (what, text) in [
            ("Tasks", list_json::<Task>(&client, &ns).await?),
            ("Agents", list_json::<Agent>(&client, &ns).await?),
            ("executor logs", logs),
        ] {
            ensure!(
                !text.contains(POOL_MODEL_KEY),
                "{what} hold the model's key"
            );
        }

        // No pooled Agent granted `small` any more: the pool drops its key at once (woken by
        // the Agent's change, well before its periodic pass a minute apart).
        ctx.apply_ok(
            &ns,
            &pooled_yaml("asker", "ask-module", "shared", 2, &grant("open")),
        )?;
        let deadline = std::time::Duration::from_secs(20);
        wait::until("the pool drops the ungranted key", deadline, || async {
            let d = Api::<Deployment>::namespaced(client.clone(), &ns)
                .get("shared-pool")
                .await
                .map_err(|e| e.to_string())?;
            let t = serde_json::to_string(&d.spec.map(|s| s.template)).unwrap_or_default();
            match t.contains("small-key") {
                false => Ok(()),
                true => Err("still names small-key".to_owned()),
            }
        })
        .await?;
        Ok(())
    })
}

/// A declarative Agent in a pool, its prompt in ConfigMap `prompts`, granted model `small`.
fn pooled_declarative_yaml(prompt: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: prompts
data:
  helper: {prompt:?}
---
apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: helper
spec:
  declarative:
    instructionsFrom: {{name: prompts, key: helper}}
    model: small
  capabilities:
    models:
      allowed: [small]
  limits:
    tokens: 2000
  executor:
    pool: shared
"
    )
}

/// The body of the model's last call.
fn last_call(model: &Scripted) -> String {
    let calls = model.requests();
    let body = calls.last().map(|r| r.body.clone()).unwrap_or_default();
    String::from_utf8_lossy(&body).into_owned()
}

/// Runs `task` on `helper`, checks it succeeded in the pool pod with the model's answer, and
/// that its attestation names the stock component and the declaration `helper`'s status pins.
async fn pooled_declarative_run(ctx: &Ctx, client: &Client, ns: &str, task: &str) -> Result<()> {
    ctx.apply_ok(ns, &task_yaml(task, "helper", "What is ari?", ""))?;
    let done = task_finished(client, ns, task, wait::DEFAULT).await?;
    expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
    let s = done.status.clone().unwrap_or_default();
    ensure!(
        s.output.as_deref() == Some(POOL_MODEL_ANSWER),
        "{task}: {:?}",
        s.output
    );
    let pods = executor_pods(client, ns).await?;
    ensure!(
        pods.len() == 1 && s.executor.as_deref() == Some(pods[0].as_str()),
        "{task} ran on {:?}, not the pool pod of {pods:?}",
        s.executor
    );
    let agent = Api::<Agent>::namespaced(client.clone(), ns)
        .get("helper")
        .await?;
    verify_attestation(&done, &agent)?;
    let signed = s.attestation.context("no attestation")?.predicate()?;
    let st = agent.status.unwrap_or_default();
    ensure!(
        Some(format!("sha256:{}", signed.module_sha256)) == st.module_digest,
        "moduleSha256 {} is not status.moduleDigest {:?}",
        signed.module_sha256,
        st.module_digest
    );
    ensure!(
        Some(format!("sha256:{}", signed.config_sha256)) == st.declaration_digest,
        "configSha256 {} is not status.declarationDigest {:?}",
        signed.config_sha256,
        st.declaration_digest
    );
    Ok(())
}

/// A declarative Agent joins a pool: Ready with no Deployment of its own, running the stock
/// component; its Task gets the model's answer in the pool pod, attested with the declaration
/// the operator pinned. Its prompt edited in the ConfigMap, the next Task runs the new one only
/// once the operator has resolved it (the pod rebuilds the Agent's worker for the new digest).
fn pooled_declarative(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-declarative", |client, ns| async move {
        let model = Scripted::start(pool_model).await;
        let endpoint = format!("http://{}/v1", model.host());
        let yaml = [
            keyed_model_yaml("small", &endpoint, "small-key", POOL_MODEL_KEY),
            pool_yaml("shared", 1, 4),
            pooled_declarative_yaml("You answer questions about ari."),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        let agent = pooled_ready(&client, &ns, "helper").await?;
        let stock = format!("sha256:{}", sha256_file(&ari_e2e::stock_agent())?);
        let first = agent.status.clone().unwrap_or_default();
        ensure!(
            first.module_digest.as_deref() == Some(stock.as_str()),
            "moduleDigest {:?} is not the stock component's {stock}",
            first.module_digest
        );
        let deps = Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let names: Vec<String> = deps.items.iter().map(|d| d.name_any()).collect();
        ensure!(names == ["shared-pool"], "deployments: {names:?}");

        pooled_declarative_run(ctx, &client, &ns, "first").await?;
        ensure!(
            last_call(&model).contains("You answer questions about ari."),
            "the prompt did not reach the model: {}",
            last_call(&model)
        );

        // An edited prompt: the operator resolves it on its next pass over the Agent (woken
        // here by an annotation; the spec, and so the generation, is unchanged).
        ctx.apply_ok(&ns, &pooled_declarative_yaml("You answer tersely."))?;
        let out = ctx.kubectl(&[
            "annotate",
            "agent",
            "helper",
            "-n",
            &ns,
            "e2e.ari.dev/poke=1",
            "--overwrite",
        ])?;
        ensure!(out.status.success(), "kubectl annotate: {out:?}");
        let was = first.declaration_digest.clone();
        wait::until(
            "the operator resolves the edited prompt",
            wait::DEFAULT,
            || async {
                let a = Api::<Agent>::namespaced(client.clone(), &ns)
                    .get("helper")
                    .await
                    .map_err(|e| e.to_string())?;
                let now = a.status.and_then(|s| s.declaration_digest);
                if now.is_some() && now != was {
                    Ok(())
                } else {
                    Err(format!("declarationDigest {now:?}"))
                }
            },
        )
        .await?;
        // The pool pod rebuilds the Agent's worker for the new digest (a second `hosting`
        // line); a Task sent before it saw the new status would still run the old prompt.
        let hosted = |log: &str| {
            log.lines()
                .filter(|l| l.contains("hosting") && l.contains("helper"))
                .count()
        };
        wait::until(
            "the pool pod rebuilds the Agent's worker",
            wait::DEFAULT,
            || async {
                let log = executor_log(ctx, &client, &ns)
                    .await
                    .map_err(|e| e.to_string())?;
                match hosted(&log) {
                    n if n >= 2 => Ok(()),
                    n => Err(format!("{n} `hosting` lines for helper")),
                }
            },
        )
        .await?;
        pooled_declarative_run(ctx, &client, &ns, "second").await?;
        ensure!(
            last_call(&model).contains("You answer tersely."),
            "the edited prompt did not reach the model: {}",
            last_call(&model)
        );
        Ok(())
    })
}

/// The signing keys of the two pooled signers (Ed25519 seeds, hex).
const KEY_A: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
const KEY_B: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

/// Secret `name` holding `key_hex` in `private-key`, marked for signing use when `marked`.
fn signing_secret_yaml(name: &str, key_hex: &str, marked: bool) -> String {
    let labels = if marked {
        "  labels:\n    ari.dev/signing-key: \"true\"\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n{labels}stringData:\n  private-key: \"{key_hex}\"\n"
    )
}

/// A pooled `signer` Agent granted the key of Secret `secret`.
fn pooled_signer_yaml(name: &str, secret: &str) -> String {
    pooled_yaml(
        name,
        "signer-module",
        "shared",
        2,
        &format!(
            "  capabilities:\n    signing:\n      keyId: {name}\n      secretRef: {{name: {secret}, key: private-key}}\n"
        ),
    )
}

/// Whether `signature_hex` is a guest signature of `input` by the key of seed `key_hex`.
fn signed_by(signature_hex: &str, input: &str, key_hex: &str) -> Result<bool> {
    let seed: [u8; 32] = hex::decode(key_hex)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("key length"))?;
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let Ok(sig) = <[u8; 64]>::try_from(hex::decode(signature_hex)?.as_slice()) else {
        return Ok(false);
    };
    let message = ari_model::attestation::guest_signed_message(input.as_bytes());
    Ok(public
        .verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&sig))
        .is_ok())
}

/// Two pooled signers with keys of their own, in one pool pod: each Task's signature verifies
/// with its own Agent's key and not the other's; the pool's Deployment carries both marked
/// Secrets by reference and not an unmarked one a third Agent names; the pod's /metrics counts
/// each Agent's Tasks under its own name.
fn pooled_signing(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-sign", |client, ns| async move {
        ctx.module_configmap(&ns, "signer-module", "signer")?;
        let secrets = [
            signing_secret_yaml("a-key", KEY_A, true),
            signing_secret_yaml("b-key", KEY_B, true),
            signing_secret_yaml("loose-key", KEY_A, false),
        ];
        ctx.apply_ok(&ns, &secrets.join("---\n"))?;
        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 4))?;
        let agents = [
            pooled_signer_yaml("signer-a", "a-key"),
            pooled_signer_yaml("signer-b", "b-key"),
            // Names a Secret no one marked for signing: refused, and never in the pool pod.
            pooled_signer_yaml("thief", "loose-key"),
        ];
        ctx.apply_ok(&ns, &agents.join("---\n"))?;
        let a = pooled_ready(&client, &ns, "signer-a").await?;
        let b = pooled_ready(&client, &ns, "signer-b").await?;

        // The pool's pods carry both keys, by reference, and roll to one pod that does.
        let pod = pool_rolled_with(&client, &ns, "ARI_SIGNING_KEY_", &["a-key", "b-key"]).await?;

        let tasks = [("sign-a", "signer-a", "sign me, a"), ("sign-b", "signer-b", "sign me, b")];
        let docs: Vec<String> = tasks
            .iter()
            .map(|(t, agent, input)| {
                task_yaml(t, agent, input, "  requirements:\n    capabilities: [signing]\n")
            })
            .collect();
        ctx.apply_ok(&ns, &docs.join("---\n"))?;
        for ((task, _, input), (agent, own, other)) in
            tasks.iter().zip([(&a, KEY_A, KEY_B), (&b, KEY_B, KEY_A)])
        {
            let t = task_finished(&client, &ns, task, wait::DEFAULT).await?;
            expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
            let s = t.status.clone().unwrap_or_default();
            ensure!(
                s.executor.as_deref() == Some(pod.as_str()),
                "{task} ran on {:?}, not the pool pod {pod}",
                s.executor
            );
            let signature = s.output.clone().unwrap_or_default();
            ensure!(
                signed_by(&signature, input, own)?,
                "{task}'s signature does not verify with its own Agent's key"
            );
            ensure!(
                !signed_by(&signature, input, other)?,
                "{task}'s signature verifies with the other Agent's key"
            );
            verify_attestation(&t, agent).with_context(|| format!("{task}'s attestation"))?;
        }

        // The thief is refused by the rule a dedicated Agent's Secret meets.
        wait::until("the thief is refused", wait::DEFAULT, || async {
            let thief = Api::<Agent>::namespaced(client.clone(), &ns)
                .get("thief")
                .await
                .map_err(|e| e.to_string())?;
            let valid = thief
                .status
                .as_ref()
                .and_then(|s| ari_crds::conditions::find(&s.conditions, "Valid").cloned());
            match valid {
                Some(c) if c.reason == "SigningSecretRejected" => Ok(()),
                other => Err(format!("Valid: {other:?}")),
            }
        })
        .await?;

        // Counted apart, each under its own Agent.
        let page = pod_metrics(&client, &ns, "ari.dev/pool=shared").await?;
        for agent in ["signer-a", "signer-b"] {
            let line = format!(
                "ari_executor_tasks_total{{agent=\"{agent}\",namespace=\"{ns}\",phase=\"Succeeded\",reason=\"Completed\"}} 1"
            );
            ensure!(page.lines().any(|l| l == line), "no {line} in\n{page}");
        }
        ensure!(
            !page.contains(KEY_A) && !page.contains(KEY_B),
            "a signing key in the pool pod's metrics"
        );
        Ok(())
    })
}

/// A docker config with `user`/`password` for `host`.
fn docker_config(host: &str, user: &str, password: &str) -> String {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    serde_json::json!({"auths": {host: {"auth": auth}}}).to_string()
}

/// A `kubernetes.io/dockerconfigjson` Secret `name` holding `config`, marked for Agents' use.
fn pull_secret_yaml(name: &str, config: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels:\n    ari.dev/pull-secret: \"true\"\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: {config:?}\n"
    )
}

/// A pooled Agent of `image`, pulled with the Secrets `secrets`.
fn pooled_image_yaml(name: &str, image: &str, secrets: &[&str]) -> String {
    let list: String = secrets
        .iter()
        .map(|s| format!("    - name: {s}\n"))
        .collect();
    format!(
        "apiVersion: ari.dev/v1alpha1\nkind: Agent\nmetadata:\n  name: {name}\nspec:\n  module:\n    image: {image:?}\n    imagePullSecrets:\n{list}  executor:\n    pool: shared\n    concurrency: 2\n"
    )
}

/// The names of the Secrets whose variables start with `prefix` in the pool's pod template,
/// sorted, once the pool has rolled to that template: then its one pod.
async fn pool_rolled_with(
    client: &Client,
    ns: &str,
    prefix: &str,
    want: &[&str],
) -> Result<String> {
    let deps = Api::<Deployment>::namespaced(client.clone(), ns);
    let pod = wait::until("the pool rolled to its Secrets", wait::DEFAULT, || async {
        let d = deps.get("shared-pool").await.map_err(|e| e.to_string())?;
        let env = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.env.clone())
            .unwrap_or_default();
        let mut secrets: Vec<String> = env
            .iter()
            .filter(|e| e.name.starts_with(prefix))
            .filter_map(|e| Some(e.value_from.as_ref()?.secret_key_ref.as_ref()?.name.clone()))
            .collect();
        secrets.sort();
        if secrets != want {
            return Err(format!("{prefix}* Secrets in the pool's pods: {secrets:?}"));
        }
        let st = d.status.clone().unwrap_or_default();
        let rolled = st.observed_generation == d.metadata.generation
            && st.updated_replicas == Some(1)
            && st.available_replicas == Some(1)
            && st.replicas == Some(1);
        let pods = executor_pods(client, ns).await.map_err(|e| e.to_string())?;
        match pods.as_slice() {
            [one] if rolled => Ok(one.clone()),
            _ => Err(format!("rolling: {st:?}, pods {pods:?}")),
        }
    })
    .await?;
    Ok(pod)
}

/// Two pooled Agents with images in registries wanting different logins, each naming its own
/// pull secret, run in one pool pod: each worker pulled with its own secret (the other's
/// login is refused by the other registry). A third names only B's secret for A's image: it is
/// not Ready (its image does not resolve with its own credentials) and its Task never runs,
/// while A's do. The pool pod carries both secrets by reference, no password.
fn pooled_pull_secrets(p: &PoolsCtx) -> Result<()> {
    let ctx = &p.ctx;
    ctx.in_namespace("pool-pull", |client, ns| async move {
        let (host_a, host_b) = (p.registry_a.host(), p.registry_b.host());
        let (config_a, config_b) = (
            docker_config(&host_a, "a", PASSWORD_A),
            docker_config(&host_b, "b", PASSWORD_B),
        );
        let push = |agent: &str, repo: &str, config: &str| -> Result<()> {
            let path = ctx
                .work
                .path()
                .join(format!("{ns}-{agent}-docker-config.json"));
            std::fs::write(&path, config)?;
            registry::ari_push(&agent_wasm(agent), &format!("{repo}:v1"), Some(&path))?;
            Ok(())
        };
        let (image_a, image_b) = (
            format!("{host_a}/agents/echo"),
            format!("{host_b}/agents/wordcount"),
        );
        push("echo", &image_a, &config_a)?;
        push("wordcount", &image_b, &config_b)?;
        ctx.apply_ok(
            &ns,
            &[
                pull_secret_yaml("a-pull", &config_a),
                pull_secret_yaml("b-pull", &config_b),
            ]
            .join("---\n"),
        )?;
        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 4))?;
        let agents = [
            pooled_image_yaml("puller-a", &format!("{image_a}:v1"), &["a-pull"]),
            pooled_image_yaml("puller-b", &format!("{image_b}:v1"), &["b-pull"]),
            // A's image with only B's secret: B's login is not A's registry's.
            pooled_image_yaml("borrower", &format!("{image_a}:v1"), &["b-pull"]),
        ];
        ctx.apply_ok(&ns, &agents.join("---\n"))?;
        pooled_ready(&client, &ns, "puller-a").await?;
        pooled_ready(&client, &ns, "puller-b").await?;
        let pod = pool_rolled_with(&client, &ns, "ARI_PULL_SECRET_", &["a-pull", "b-pull"]).await?;

        let tasks = [
            // (Task, Agent, input, whether its module echoes)
            ("pull-a", "puller-a", "one two three", true),
            ("pull-b", "puller-b", "one two three", false),
            ("pull-borrowed", "borrower", "never run", true),
        ];
        let docs: Vec<String> = tasks
            .iter()
            .map(|(t, agent, input, _)| task_yaml(t, agent, input, ""))
            .collect();
        ctx.apply_ok(&ns, &docs.join("---\n"))?;
        for (task, _, _, echoes) in &tasks[..2] {
            let t = task_finished(&client, &ns, task, wait::DEFAULT).await?;
            expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
            let s = t.status.clone().unwrap_or_default();
            ensure!(
                s.executor.as_deref() == Some(pod.as_str()),
                "{task} ran on {:?}, not the pool pod {pod}",
                s.executor
            );
            let out = s.output.clone().unwrap_or_default();
            ensure!(
                (out == "one two three") == *echoes,
                "{task} answered {out:?}: not its own module"
            );
        }

        // The borrower: its image resolves with none of its own credentials.
        let agents_api = Api::<Agent>::namespaced(client.clone(), &ns);
        let wanted = wait::Wanted {
            type_: "ModuleResolved",
            status: "False",
            reason: Some("Unauthorized"),
        };
        let (borrower, _) = wait::condition(&agents_api, "borrower", wanted, |a: &Agent| {
            a.status.clone().map(|s| s.conditions).unwrap_or_default()
        })
        .await?;
        let ready = borrower
            .status
            .as_ref()
            .and_then(|s| ari_crds::conditions::find(&s.conditions, "Ready").cloned());
        ensure!(
            ready.as_ref().is_some_and(|c| c.status == "False"),
            "the borrower is Ready: {ready:?}"
        );
        let borrowed = Api::<Task>::namespaced(client.clone(), &ns)
            .get("pull-borrowed")
            .await?;
        let s = borrowed.status.clone().unwrap_or_default();
        ensure!(
            s.phase != Some(TaskPhase::Succeeded) && s.executor.is_none(),
            "the borrower's Task ran: {s:?}"
        );
        let template =
            ctx.kubectl_ok(["get", "deployment", "shared-pool", "-n", &ns, "-o", "yaml"])?;
        ensure!(
            !template.contains(PASSWORD_A) && !template.contains(PASSWORD_B),
            "a password was copied into the pool's Deployment"
        );
        Ok(())
    })
}

/// A pooled storage Agent `name` (the `counter` module) and its ConfigMap.
fn pooled_counter_yaml(name: &str, concurrency: u32) -> String {
    pooled_yaml(
        name,
        "counter-module",
        "shared",
        concurrency,
        "  capabilities:\n    storage:\n      maxBytes: 4096\n",
    )
}

/// Without the operator's Redis, a pooled `counter` is valid but `Ready=False` with
/// `PoolStorageNeedsRedis`, and its Task never runs while its neighbour's does.
fn storage_without_redis(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-store-none", |client, ns| async move {
        ctx.module_configmap(&ns, "counter-module", "counter")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &pool_yaml("shared", 1, 4))?;
        ctx.apply_ok(
            &ns,
            &[
                pooled_counter_yaml("counter", 2),
                pooled_yaml("echo", "echo-module", "shared", 2, ""),
            ]
            .join("---\n"),
        )?;
        let api = Api::<Agent>::namespaced(client.clone(), &ns);
        let wanted = wait::Wanted {
            type_: "Ready",
            status: "False",
            reason: Some("PoolStorageNeedsRedis"),
        };
        let (_, message) = wait::condition(&api, "counter", wanted, |a: &Agent| {
            a.status.clone().map(|s| s.conditions).unwrap_or_default()
        })
        .await?;
        ensure!(
            message.contains("Redis URL") && message.contains("remove spec.executor.pool"),
            "{message}"
        );
        pooled_ready(&client, &ns, "echo").await?;
        ctx.apply_ok(
            &ns,
            &[
                task_yaml("count", "counter", "hits", ""),
                task_yaml("echoed", "echo", "still here", ""),
            ]
            .join("---\n"),
        )?;
        let t = task_finished(&client, &ns, "echoed", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let count = Api::<Task>::namespaced(client.clone(), &ns)
            .get("count")
            .await?;
        let s = count.status.clone().unwrap_or_default();
        ensure!(
            s.phase != Some(TaskPhase::Succeeded) && s.executor.is_none(),
            "the counter ran on a pod's own store: {s:?}"
        );
        Ok(())
    })
}

/// With a real `redis-server` given to the operator, a pooled `counter` in two pool pods:
/// Tasks incrementing one key, spread over both pods, one of which is killed as they run, all
/// succeed and count 1..=N exactly (no lost update, none counted twice; a Task whose attempt
/// committed before the kill finishes from its receipt on the other pod, its value known by
/// its digest): each pod's store is the one Redis, scoped to the Agent, with its conflict check
/// and receipts.
fn storage_on_redis(ctx: &PoolsCtx) -> Result<()> {
    let redis = RedisServer::start()?;
    let url = redis.url();
    ctx.set_operator_env(&[("ARI_REDIS_URL", &url)])?;
    let outcome = ctx.in_namespace("pool-store-redis", |client, ns| async move {
        ctx.module_configmap(&ns, "counter-module", "counter")?;
        ctx.apply_ok(&ns, &pool_yaml("shared", 2, 8))?;
        ctx.apply_ok(&ns, &pooled_counter_yaml("counter", 4))?;
        pooled_ready(&client, &ns, "counter").await?;
        let deps = Api::<Deployment>::namespaced(client.clone(), &ns);
        wait::until(
            "two pool pods with the Redis URL",
            wait::DEFAULT,
            || async {
                let d = deps.get("shared-pool").await.map_err(|e| e.to_string())?;
                let has_url = d
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .and_then(|p| p.containers.first())
                    .and_then(|c| c.env.as_ref())
                    .is_some_and(|env| {
                        env.iter()
                            .any(|e| e.name == "ARI_REDIS_URL" && e.value.as_deref() == Some(&url))
                    });
                let st = d.status.clone().unwrap_or_default();
                let pods = executor_pods(&client, &ns)
                    .await
                    .map_err(|e| e.to_string())?;
                if has_url
                    && st.observed_generation == d.metadata.generation
                    && st.updated_replicas == Some(2)
                    && st.available_replicas == Some(2)
                    && pods.len() == 2
                {
                    Ok(())
                } else {
                    Err(format!(
                        "pool: {st:?}, pods {pods:?}, Redis URL set: {has_url}"
                    ))
                }
            },
        )
        .await?;

        const N: usize = 60;
        let names: Vec<String> = (0..N).map(|i| format!("inc-{i:02}")).collect();
        let docs: Vec<String> = names
            .iter()
            .map(|n| task_yaml(n, "counter", "hits", "  retries: 3\n"))
            .collect();
        ctx.apply_ok(&ns, &docs.join("---\n"))?;
        // A pool pod killed as the Tasks run: what it held is taken again by a pool pod, and
        // a retry of a Task whose increment was committed finds its receipt in Redis.
        let tasks = Api::<Task>::namespaced(client.clone(), &ns);
        let victim = wait::until("a Task done on a pool pod", wait::DEFAULT, || async {
            let list = tasks
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .filter_map(|t| t.status.as_ref())
                .find(|s| s.phase == Some(TaskPhase::Succeeded))
                .and_then(|s| s.executor.clone())
                .ok_or_else(|| "none done yet".to_owned())
        })
        .await?;
        ctx.node.kill_pod_process(&ns, &victim)?;
        let mut counts = Vec::new();
        // Finished from the receipt of an attempt that committed before its pod was killed:
        // the receipt keeps the output's digest, not its bytes (docs/capabilities.md).
        let mut from_receipts = Vec::new();
        let mut executors = std::collections::BTreeSet::new();
        let mut retried = 0;
        for n in &names {
            let t = task_finished(&client, &ns, n, wait::DEFAULT).await?;
            expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
            let s = t.status.clone().unwrap_or_default();
            executors.extend(s.executor.clone());
            retried += usize::from(s.attempts.unwrap_or(1) > 1);
            match (
                s.output.as_deref().filter(|o| !o.is_empty()),
                &s.output_sha256,
            ) {
                (Some(out), _) => counts.push(
                    out.trim()
                        .parse::<usize>()
                        .with_context(|| format!("{n}: {out:?}"))?,
                ),
                (None, Some(sha)) => from_receipts.push((n.clone(), sha.clone())),
                (None, None) => anyhow::bail!("{n} succeeded with no output and no digest"),
            }
        }
        // An output known only by its digest is the value never returned with that digest.
        let digest = |v: &usize| ari_model::attestation::sha256_hex(v.to_string().as_bytes());
        for (n, sha) in &from_receipts {
            let value = (1..=N)
                .find(|v| !counts.contains(v) && digest(v) == *sha)
                .with_context(|| format!("{n}: its output's digest {sha} is no value missing"))?;
            counts.push(value);
        }
        counts.sort_unstable();
        ensure!(
            counts == (1..=N).collect::<Vec<_>>(),
            "increments lost or counted twice ({retried} Tasks retried after the kill of \
             {victim}, {} finished from receipts): {counts:?}",
            from_receipts.len()
        );
        ensure!(
            executors.len() == 2,
            "the Tasks ran on {executors:?}, not on both pool pods"
        );
        Ok(())
    });
    outcome.with_context(|| format!("redis-server log:\n{}", tail(&redis.log(), 20)))
}

/// A pooled relay Agent (fixtures/agents/relay) that calls `next` and may delegate to it.
fn pooled_relay_yaml(name: &str, next: &str) -> String {
    pooled_yaml(
        name,
        "relay-module",
        "shared",
        1,
        &format!(
            "  config: {next}\n  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 120\n  capabilities:\n    delegation:\n      agents: [{next}]\n"
        ),
    )
}

/// The one ready pod matching `selector`.
async fn one_pod(client: &Client, ns: &str, selector: &str) -> Result<Pod> {
    let pods = wait::until(&format!("a ready pod {selector}"), wait::DEFAULT, || {
        ready_pods(client, ns, selector, 1)
    })
    .await?;
    pods.into_iter().next().context("no pod")
}

/// Issue 29 item 1: a pooled Agent delegates as a dedicated one does. In a pool of one pod with
/// one place, a relay's child on a pooled echo runs in that pod while its parent waits (the
/// parent lends its place), and a relay's child on a dedicated echo runs in that Agent's own
/// pod; each parent answers with its child's output, the child's fuel within the parent's
/// budget and its attestation covered. A cancelled pooled parent has its pod cancel its
/// pooled child (the pool's token may patch its own pool's children).
fn pooled_delegation(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-delegation", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let yaml = [
            pool_yaml("shared", 1, 1),
            pooled_yaml("pecho", "echo-module", "shared", 1, ""),
            agent_yaml("solo", "echo-module", 1, ""),
            pooled_relay_yaml("to-pool", "pecho"),
            pooled_relay_yaml("to-solo", "solo"),
            pooled_relay_yaml("waiter", "spinner"),
            pooled_relay_yaml("spinner", "spinner"),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        agent_ready(&client, &ns, "solo").await?;
        let mut parents = Vec::new();
        for name in ["pecho", "to-pool", "to-solo", "waiter", "spinner"] {
            parents.push(pooled_ready(&client, &ns, name).await?);
        }
        let pool_pod = one_pod(&client, &ns, "ari.dev/pool=shared")
            .await?
            .name_any();
        let solo_pod = one_pod(&client, &ns, "ari.dev/agent=solo")
            .await?
            .name_any();
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);

        // (parent Task, its Agent, child Agent, pod the child runs in)
        let cases = [
            ("via-pool", &parents[1], "pecho", pool_pod.as_str()),
            ("via-solo", &parents[2], "solo", solo_pod.as_str()),
        ];
        for (task, agent, _, _) in &cases {
            ctx.apply_ok(&ns, &task_yaml(task, &agent.name_any(), "pass:hello", ""))?;
        }
        for (task, agent, child_agent, child_pod) in &cases {
            let parent = task_finished(&client, &ns, task, wait::DEFAULT).await?;
            expect_reason(&parent, TaskPhase::Succeeded, TaskReason::Completed)?;
            let s = parent.status.clone().unwrap_or_default();
            ensure!(
                s.output.as_deref() == Some("got(hello)")
                    && s.executor.as_deref() == Some(pool_pod.as_str()),
                "{task}: {:?} on {:?}",
                s.output,
                s.executor
            );
            verify_attestation(&parent, agent).with_context(|| format!("{task}'s attestation"))?;
            let [listed] = s.children.as_slice() else {
                bail!("{task} children: {:?}", s.children);
            };
            ensure!(
                listed.agent == *child_agent && listed.phase == TaskPhase::Succeeded,
                "{task}: {listed:?}"
            );
            let child = tasks
                .get(listed.name.as_deref().context("child name")?)
                .await?;
            let cs = child.status.clone().unwrap_or_default();
            ensure!(
                cs.output.as_deref() == Some("hello") && cs.executor.as_deref() == Some(*child_pod),
                "{task}'s child: {:?} on {:?}, want {child_pod}",
                cs.output,
                cs.executor
            );
            let link = child.spec.parent.clone().context("spec.parent")?;
            ensure!(
                link.pool.as_deref() == Some("shared") && link.agent == agent.name_any(),
                "{task}'s child names {link:?}"
            );
            // Within budget: the child ran on what the parent reserved, and the parent's usage
            // covers it.
            let used = s.resources_used.context("resourcesUsed")?;
            let child_used = cs.resources_used.context("child resourcesUsed")?;
            ensure!(
                child_used.fuel == listed.fuel
                    && listed.fuel > 0
                    && child.spec.fuel.is_some_and(|f| child_used.fuel <= f)
                    && used.children_fuel == listed.fuel
                    && used.fuel > used.children_fuel,
                "{task}: parent {used:?}, child {child_used:?} of {:?}",
                child.spec.fuel
            );
            ensure!(
                cs.attestation.as_ref().map(|a| a.sha256()) == listed.attestation_sha256,
                "{task}'s attestation does not cover its child's"
            );
        }

        // Cancellation: the waiting parent is cancelled, and its pool pod cancels its child.
        ctx.apply_ok(&ns, &task_yaml("tree", "waiter", "wait", ""))?;
        let child = wait::until("the spinning child runs", wait::DEFAULT, || async {
            let t = tasks.get_opt("tree-0").await.map_err(|e| e.to_string())?;
            match t {
                Some(t) if t.status.as_ref().and_then(|s| s.phase) == Some(TaskPhase::Running) => {
                    Ok(t)
                }
                other => Err(format!("tree-0: {:?}", other.map(|t| t.status))),
            }
        })
        .await?;
        ensure!(
            child.status.as_ref().and_then(|s| s.executor.as_deref()) == Some(pool_pod.as_str()),
            "the child runs in the pool pod beside its waiting parent"
        );
        ctx.kubectl_ok([
            "patch",
            "task",
            "tree",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":true}}"#,
        ])?;
        for name in ["tree", "tree-0"] {
            let t = task_finished(&client, &ns, name, wait::DEFAULT).await?;
            ensure!(
                t.status.as_ref().and_then(|s| s.phase) == Some(TaskPhase::Cancelled),
                "{name}: {:?}",
                t.status
            );
        }
        let log = ctx.node.logs(&ns, &pool_pod, "executor");
        ensure!(
            log.lines()
                .any(|l| l.contains("child cancelled with its parent") && l.contains("tree-0")),
            "the pool pod did not cancel the child itself:\n{}",
            tail(&log, 30)
        );
        Ok(())
    })
}

/// Issue 29 item 1, the compromised pool pod: with the token the kubelet gives a pod of pool
/// `shared` (`ari-pool-executor`, bound to the pod), a child naming another pool or none is
/// refused by the admission policy; a child of a dedicated Agent's Task under the pool's own
/// name is admitted but fails `CapabilityDenied` before it runs (the parent's Agent is not in
/// the pool); a dedicated executor's child cannot name a pool, and its children cannot be
/// cancelled by the pool's pod. What delegation needs (a child of the pool's own Agent, and
/// its cancel) goes through.
fn pool_pod_writes(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-writes", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let yaml = [
            pool_yaml("shared", 1, 2),
            pooled_yaml("mine", "echo-module", "shared", 1, ""),
            agent_yaml("solo", "echo-module", 1, ""),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        agent_ready(&admin, &ns, "solo").await?;
        pooled_ready(&admin, &ns, "mine").await?;
        ctx.apply_ok(&ns, &task_yaml("root", "solo", "hi", ""))?;
        ctx.apply_ok(&ns, &task_yaml("mine-root", "mine", "hi", ""))?;
        let root = task_finished(&admin, &ns, "root", wait::DEFAULT).await?;
        let mine_root = task_finished(&admin, &ns, "mine-root", wait::DEFAULT).await?;
        let pool_pod = one_pod(&admin, &ns, "ari.dev/pool=shared").await?;
        let solo_pod = one_pod(&admin, &ns, "ari.dev/agent=solo").await?;
        let pool_client =
            namespace_user::pod_client(ctx, &admin, &ns, POOL_SERVICE_ACCOUNT, &pool_pod).await?;
        let solo_client =
            namespace_user::pod_client(ctx, &admin, &ns, EXECUTOR_SERVICE_ACCOUNT, &solo_pod)
                .await?;
        let (pool_tasks, solo_tasks) = (
            Api::<Task>::namespaced(pool_client, &ns),
            Api::<Task>::namespaced(solo_client, &ns),
        );
        let pp = PostParams::default();

        // (what, whose token, the child, what the API server says)
        let refused = [
            (
                "a pool pod creates a child under another pool's name",
                &pool_tasks,
                child_task("c-other", "mine", &root, "solo", Some("other"), true)?,
                "is not a pod of ExecutorPool other",
            ),
            (
                "a pool pod creates a child naming no pool",
                &pool_tasks,
                child_task("c-none", "mine", &root, "solo", None, true)?,
                "names its pool",
            ),
            (
                "a dedicated executor creates a child under a pool's name",
                &solo_tasks,
                child_task("c-solo-pool", "solo", &root, "solo", Some("shared"), true)?,
                "names no pool",
            ),
        ];
        for (what, api, child, says) in refused {
            let m = forbidden(what, api.create(&pp, &child).await)?;
            ensure!(m.contains(says), "{what}: {m}");
        }

        // Under its own pool's name, for a dedicated Agent's parent: admitted by the API
        // server, failed before any executor runs it.
        pool_tasks
            .create(
                &pp,
                &child_task("c-foreign", "mine", &root, "solo", Some("shared"), true)?,
            )
            .await
            .context("the API server admits a child under the pod's own pool name")?;
        let foreign = task_finished(&admin, &ns, "c-foreign", wait::DEFAULT).await?;
        expect_reason(&foreign, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let fs = foreign.status.clone().unwrap_or_default();
        let message = fs.message.clone().unwrap_or_default();
        ensure!(
            message.contains("has executors of its own")
                && fs.executor.is_none()
                && fs.start_time.is_none(),
            "c-foreign ran or failed otherwise: {fs:?}"
        );

        // What delegation needs: a child of its own pool's Agent, and its cancel; a dedicated
        // executor's child is not the pool's to cancel.
        pool_tasks
            .create(
                &pp,
                &child_task("c-mine", "mine", &mine_root, "mine", Some("shared"), true)?,
            )
            .await
            .context("a pool pod creates a child of its own Agent's parent")?;
        solo_tasks
            .create(
                &pp,
                &child_task("c-solo", "solo", &root, "solo", None, true)?,
            )
            .await
            .context("a dedicated executor creates a child of its own Agent's parent")?;
        let cancel = Patch::Merge(serde_json::json!({"spec": {"cancelled": true}}));
        let params = PatchParams::default();
        forbidden(
            "a pool pod cancels a dedicated Agent's child",
            pool_tasks.patch("c-solo", &params, &cancel).await,
        )?;
        forbidden(
            "a pool pod cancels a root Task",
            pool_tasks.patch("root", &params, &cancel).await,
        )?;
        pool_tasks
            .patch("c-mine", &params, &cancel)
            .await
            .context("a pool pod cancels its own pool's child")?;
        only_tasks(
            &admin,
            &ns,
            &["root", "mine-root", "c-foreign", "c-mine", "c-solo"],
        )
        .await?;
        Ok(())
    })
}

/// The scripted model of the pooled declarative triage: it hands every question to its
/// subagent `pecho`.
fn handing_model(request: &Request) -> Reply {
    if serde_json::from_slice::<serde_json::Value>(&request.body).is_err() {
        return Reply::new(404, "not here");
    }
    let body = serde_json::json!({
        "id": "c1", "model": "scripted-1",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call-1",
                "type": "function", "function": {"name": "transfer_to_pecho",
                "arguments": "{\"input\":\"handed over\"}"}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    });
    Reply::new(200, body.to_string()).header("content-type", "application/json")
}

/// Issue 29 item 1: a declarative Agent with a subagent (so granted delegation) joins a pool:
/// accepted at apply, Ready with no Deployment of its own, and its Task, run in the pool pod,
/// answers with what its pooled subagent answered (the model handed it over), the child
/// naming the pool.
fn pooled_subagent(ctx: &PoolsCtx) -> Result<()> {
    ctx.in_namespace("pool-subagent", |client, ns| async move {
        let model = Scripted::start(handing_model).await;
        let endpoint = format!("http://{}/v1", model.host());
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let triage = "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: triage
spec:
  declarative:
    instructions: Hand every question to pecho.
    model: small
    subagents: [{name: pecho}]
  capabilities:
    models:
      allowed: [small]
    delegation:
      agents: [pecho]
  limits:
    tokens: 2000
  executor:
    pool: shared
";
        let yaml = [
            keyed_model_yaml("small", &endpoint, "small-key", POOL_MODEL_KEY),
            pool_yaml("shared", 1, 2),
            pooled_yaml("pecho", "echo-module", "shared", 1, "  mode: subagent\n"),
            triage.to_owned(),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        pooled_ready(&client, &ns, "pecho").await?;
        let agent = pooled_ready(&client, &ns, "triage").await?;
        let deps = Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let names: Vec<String> = deps.items.iter().map(|d| d.name_any()).collect();
        ensure!(names == ["shared-pool"], "deployments: {names:?}");

        ctx.apply_ok(&ns, &task_yaml("ask", "triage", "Where is my order?", ""))?;
        let done = task_finished(&client, &ns, "ask", wait::DEFAULT).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = done.status.clone().unwrap_or_default();
        let pods = executor_pods(&client, &ns).await?;
        ensure!(
            s.output.as_deref() == Some("handed over")
                && pods.len() == 1
                && s.executor.as_deref() == Some(pods[0].as_str()),
            "ask: {:?} on {:?} (pool pods {pods:?})",
            s.output,
            s.executor
        );
        verify_attestation(&done, &agent)?;
        let [listed] = s.children.as_slice() else {
            bail!("children: {:?}", s.children);
        };
        let child = Api::<Task>::namespaced(client.clone(), &ns)
            .get(listed.name.as_deref().context("child name")?)
            .await?;
        let cs = child.status.clone().unwrap_or_default();
        ensure!(
            listed.agent == "pecho"
                && cs.executor == s.executor
                && child.spec.parent.as_ref().and_then(|p| p.pool.as_deref()) == Some("shared"),
            "the subagent's Task: {:?} on {:?}, parent {:?}",
            listed,
            cs.executor,
            child.spec.parent
        );
        Ok(())
    })
}
