//! Attacks on the in-cluster worker (issue 13, items 6, 7 and 15), played by a namespace user
//! who may only create, get and list Agents and Tasks. Each trial also shows the executors
//! still serve: another Task of the same Agent succeeds afterwards.

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::wait;

use crate::namespace_user;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

/// Creates an Agent or Task from YAML as the tenant.
async fn create<K>(client: &Client, ns: &str, yaml: &str) -> Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let obj: K = serde_yaml::from_str(yaml).context("manifest")?;
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating as the tenant:\n{yaml}"))?;
    Ok(())
}

/// A Task of `agent` succeeds: the executors still serve after the attack.
async fn still_serves(client: &Client, ns: &str, agent: &str, name: &str) -> Result<()> {
    create::<Task>(client, ns, &task_yaml(name, agent, "still here", "")).await?;
    let t = task_finished(client, ns, name, wait::DEFAULT).await?;
    expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
}

fn message(t: &Task) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

/// Item 7: an executor paused past the heartbeat timeout, whose Task the operator failed,
/// must not flip that Task when it resumes — neither by a heartbeat nor by its final write.
pub fn stale_executor_cannot_overwrite_a_failed_task(ctx: &Ctx) -> Result<()> {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    ctx.in_namespace("stale", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "loop-module", "sha256-loop")?;
        create::<Agent>(
            &user,
            &ns,
            &agent_yaml(
                "loop",
                "loop-module",
                1,
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 120\n",
            ),
        )
        .await?;
        agent_ready(&admin, &ns, "loop").await?;
        // Seconds of work (see tests/operator.rs LONG_INPUT); no retries: loss means Failed.
        create::<Task>(&user, &ns, &task_yaml("long", "loop", "20000000 abc", "")).await?;
        let tasks: Api<Task> = Api::namespaced(admin.clone(), &ns);
        let pod = wait::until("task Running", wait::DEFAULT, || async {
            let t = tasks.get("long").await.map_err(|e| e.to_string())?;
            let s = t.status.clone().unwrap_or_default();
            match (s.phase, s.executor) {
                (Some(TaskPhase::Running), Some(pod)) => Ok(pod),
                _ => Err(format!("status {:?}", t.status)),
            }
        })
        .await?;
        let pid = *ctx
            .node
            .pod_pids(&ns, &pod)
            .get("executor")
            .context("no executor process")?;
        let group = Pid::from_raw(i32::try_from(pid)?);
        killpg(group, Signal::SIGSTOP)?;
        let lost = wait::until(
            "the operator fails the paused executor's Task",
            wait::DEFAULT,
            || async {
                let t = tasks.get("long").await.map_err(|e| e.to_string())?;
                match phase_reason(&t) {
                    (Some(TaskPhase::Failed), _) => Ok(t),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        killpg(group, Signal::SIGCONT)?;
        let lost = lost?;
        expect_reason(&lost, TaskPhase::Failed, TaskReason::ExecutorLost)?;
        let failed_rv = lost.metadata.resource_version.clone();

        // Resumed, the executor learns the Task is not its own (its log says so) — or, on a
        // broken executor, flips it. Either ends the wait; only the first is allowed.
        let seen = wait::until(
            "the resumed executor drops its result",
            wait::DEFAULT,
            || async {
                let t = tasks.get("long").await.map_err(|e| e.to_string())?;
                if t.metadata.resource_version != failed_rv {
                    return Ok(format!(
                        "the Task changed: {:?} {}",
                        phase_reason(&t),
                        message(&t)
                    ));
                }
                let log = ctx.node.logs(&ns, &pod, "executor");
                let dropped = log
                    .lines()
                    .any(|l| l.contains("no longer this executor") && l.contains("\"long\""));
                if dropped {
                    Ok(String::new())
                } else {
                    Err("no decision yet".into())
                }
            },
        )
        .await?;
        ensure!(
            seen.is_empty(),
            "a stale executor wrote over a failed Task: {seen}"
        );
        let t = tasks.get("long").await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::ExecutorLost)?;
        ensure!(
            t.metadata.resource_version == failed_rv,
            "the failed Task was written again"
        );
        // The same executor, resumed, serves the next Task.
        create::<Task>(&user, &ns, &task_yaml("after", "loop", "1 abc", "")).await?;
        let t = task_finished(&admin, &ns, "after", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
    })
}

/// Item 6: output that cannot be placed ends the Task at once with a clear reason — too large
/// for a ConfigMap, or `<task>-output` already taken by a ConfigMap the Task does not own (which
/// stays untouched) — and a Task name over 63 characters still gets its output stored.
pub fn output_that_cannot_be_stored_ends_the_task(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("output", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "flood-module", "flood")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        create::<Agent>(
            &user,
            &ns,
            &agent_yaml(
                "flood",
                "flood-module",
                1,
                "  limits:\n    maxOutputBytes: 4194304\n",
            ),
        )
        .await?;
        create::<Agent>(&user, &ns, &agent_yaml("echo", "echo-module", 1, "")).await?;
        agent_ready(&admin, &ns, "flood").await?;
        agent_ready(&admin, &ns, "echo").await?;

        // Someone else's ConfigMap where the Task's output would go.
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
        let precious = ConfigMap {
            metadata: ObjectMeta {
                name: Some("taken-output".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("keep".to_string(), "me".to_string())])),
            ..ConfigMap::default()
        };
        cms.create(&PostParams::default(), &precious).await?;

        let big = "y".repeat(8 * 1024);
        let long_name = format!("long-{}", "n".repeat(70));
        create::<Task>(&user, &ns, &task_yaml("huge", "flood", "2", "")).await?;
        create::<Task>(&user, &ns, &task_yaml("taken", "echo", &big, "")).await?;
        create::<Task>(&user, &ns, &task_yaml(&long_name, "echo", &big, "")).await?;

        let t = task_finished(&admin, &ns, "huge", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::OutputTooLarge)?;
        ensure!(
            message(&t).contains("ConfigMap"),
            "unclear: {}",
            message(&t)
        );
        ensure!(
            t.status.as_ref().and_then(|s| s.attempts) == Some(1),
            "re-run: attempts {:?}",
            t.status.as_ref().and_then(|s| s.attempts)
        );

        let t = task_finished(&admin, &ns, "taken", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::HostError)?;
        ensure!(
            message(&t).contains("not owned by this Task"),
            "unclear: {}",
            message(&t)
        );
        let after = cms.get("taken-output").await?;
        ensure!(
            after.data == precious.data && after.binary_data.is_none(),
            "the existing ConfigMap was overwritten: {after:?}"
        );

        let t = task_finished(&admin, &ns, &long_name, wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let r = t
            .status
            .and_then(|s| s.output_ref)
            .context("no outputRef")?;
        let cm = cms.get(&r.config_map).await?;
        let data = cm
            .binary_data
            .and_then(|d| d.get(&r.key).map(|b| b.0.clone()));
        ensure!(
            data.as_deref() == Some(big.as_bytes()),
            "stored output differs"
        );

        still_serves(&user, &ns, "echo", "after").await
    })
}

/// Item 15: a Task cannot read a ConfigMap that is not marked for Task input.
pub fn task_cannot_read_unmarked_configmaps(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("cm-input", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
        let cm = |name: &str, labels: Option<BTreeMap<String, String>>| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels,
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("k".to_string(), format!("contents of {name}"))])),
            ..ConfigMap::default()
        };
        cms.create(&PostParams::default(), &cm("db-settings", None)).await?;
        let marked = BTreeMap::from([("ari.dev/task-input".to_string(), "true".to_string())]);
        cms.create(&PostParams::default(), &cm("shared-input", Some(marked))).await?;
        create::<Agent>(&user, &ns, &agent_yaml("echo", "echo-module", 1, "")).await?;
        agent_ready(&admin, &ns, "echo").await?;

        let from = |name: &str| format!("  inputFrom:\n    configMapKeyRef: {{name: {name}, key: k}}\n");
        let steal = format!(
            "apiVersion: ari.dev/v1alpha1\nkind: Task\nmetadata:\n  name: steal\nspec:\n  agentRef:\n    name: echo\n{}",
            from("db-settings")
        );
        create::<Task>(&user, &ns, &steal).await?;
        let t = task_finished(&admin, &ns, "steal", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.output.is_none() && s.output_ref.is_none(),
            "the unmarked ConfigMap leaked: {:?}",
            s.output
        );
        ensure!(message(&t).contains("ari.dev/task-input"), "unclear: {}", message(&t));
        ensure!(
            s.resources_used.is_none_or(|u| u.fuel == 0),
            "an instance ran for a denied input"
        );

        let allowed = steal.replace("name: steal", "name: allowed").replace("db-settings", "shared-input");
        create::<Task>(&user, &ns, &allowed).await?;
        let t = task_finished(&admin, &ns, "allowed", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            t.status.and_then(|s| s.output).as_deref() == Some("contents of shared-input"),
            "marked input not read"
        );
        still_serves(&user, &ns, "echo", "after").await
    })
}

/// The worker-side trials, for the suite's `main`.
pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![
        (
            "stale_executor_cannot_overwrite_a_failed_task",
            stale_executor_cannot_overwrite_a_failed_task,
        ),
        (
            "output_that_cannot_be_stored_ends_the_task",
            output_that_cannot_be_stored_ends_the_task,
        ),
        (
            "task_cannot_read_unmarked_configmaps",
            task_cannot_read_unmarked_configmaps,
        ),
    ]
}
