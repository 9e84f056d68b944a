//! A namespace user forges a delegation (issue 15, item 4): a Task that names a parent, to run
//! a `subagent`-only Agent or escape a parent's depth and budget. The chart's admission policy
//! refuses it at the API server; with the policy gone, the executor refuses it before it runs.
//! Issue 26: a subagent reached through the user's own delegating Agent (item 12), a guest's
//! Agent name that is no name (item 11), a child's name squatted before its parent creates it
//! (items 5 and 14).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ari_crds::{Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::wait;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::namespace_user;

/// The binding the chart installs (`deploy/operator.yaml`).
const BINDING: &str = "ari-operator-task-parent";

pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![
        (
            "a_forged_parent_is_refused_by_the_api_server_and_again_by_the_executor",
            forged_parent,
        ),
        (
            "a_subagent_is_reached_only_through_the_callers_it_names",
            callers_only,
        ),
        (
            "a_guest_naming_no_agent_name_gets_a_typed_error_before_any_request",
            bad_agent_names,
        ),
        (
            "a_squatted_child_name_with_a_forged_parent_is_refused_never_adopted",
            squatted_child,
        ),
    ]
}

/// A relay Agent (fixtures/agents/relay) that passes its input to `next`, granted `agents`.
fn relay(name: &str, next: &str, agents: &str, concurrency: u32) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  module:
    configMap:
      name: relay-module
      key: module.wasm
  executor:
    replicas: 1
    concurrency: {concurrency}
  config: {next:?}
  capabilities:
    delegation:
      agents: {agents}
"
    )
}

/// The failure message of a finished Task.
fn message(t: &Task) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

/// Issue 26 item 12: `mode: subagent` says where Tasks come from, not who sends them. A
/// namespace user who creates their own Agent granted delegation to a subagent reached it; the
/// subagent now names its callers (`spec.callers`) and the executor refuses every other one
/// before it creates a child Task.
fn callers_only(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("callers", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "wordcount",
                "wordcount-module",
                1,
                "  mode: subagent\n  callers: [research]\n",
            ),
        )?;
        ctx.apply_ok(&ns, &relay("research", "wordcount", "[wordcount]", 2))?;
        // The user's own Agent, granted delegation to the subagent, created with their token.
        let mine: ari_crds::Agent =
            serde_yaml::from_str(&relay("mine", "wordcount", "[wordcount]", 2))?;
        Api::<ari_crds::Agent>::namespaced(user.clone(), &ns)
            .create(&PostParams::default(), &mine)
            .await?;
        for a in ["wordcount", "research", "mine"] {
            agent_ready(&admin, &ns, a).await?;
        }
        let steal: Task = serde_yaml::from_str(&task_yaml("steal", "mine", "pass:one two", ""))?;
        Api::<Task>::namespaced(user.clone(), &ns)
            .create(&PostParams::default(), &steal)
            .await?;
        let t = task_finished(&admin, &ns, "steal", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::AgentError)?;
        ensure!(
            message(&t).contains("spec.callers"),
            "steal: message {:?}",
            message(&t)
        );
        let children = Api::<Task>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default().labels("ari.dev/parent=steal"))
            .await?;
        ensure!(
            children.items.is_empty(),
            "a refused caller created {} child Tasks",
            children.items.len()
        );
        // The caller it names still reaches it.
        ctx.apply_ok(&ns, &task_yaml("legit", "research", "pass:one two", ""))?;
        let t = task_finished(&admin, &ns, "legit", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
    })
}

/// Issue 26 item 11: with `agents: ["*"]` the Agent name is the guest's alone, and the
/// executor puts it into a request path. A name that is no Agent name (`../x`, 300 characters)
/// is refused by the runtime with a typed error before anything leaves the host.
fn bad_agent_names(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("badnames", |admin, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        let long = "a".repeat(300);
        ctx.apply_ok(&ns, &relay("dots", "../x", "[\"*\"]", 2))?;
        ctx.apply_ok(&ns, &relay("long", &long, "[\"*\"]", 2))?;
        for a in ["dots", "long"] {
            agent_ready(&admin, &ns, a).await?;
            ctx.apply_ok(&ns, &task_yaml(&format!("{a}-task"), a, "pass:x", ""))?;
        }
        for a in ["dots", "long"] {
            let name = format!("{a}-task");
            let t = task_finished(&admin, &ns, &name, wait::DEFAULT).await?;
            expect_reason(&t, TaskPhase::Failed, TaskReason::AgentError)?;
            ensure!(
                message(&t).contains("is not an Agent name"),
                "{name}: message {:?}",
                message(&t)
            );
        }
        Ok(())
    })
}

/// Issue 26 items 5 and 14: a child's name is predictable (`<parent>-<index>`). Where the
/// admission policy is not installed, a namespace user creates it first with a forged
/// `spec.parent` naming the real parent: the parent used to adopt it as its own child. Now it
/// follows only a child whose uid it recorded when it created it; the squat is a typed error.
fn squatted_child(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("squat", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml("wordcount", "wordcount-module", 1, "  mode: subagent\n"),
        )?;
        // One slot, so the victim waits (Pending) while `busy` spins.
        // Fuel for minutes of spinning: busy must still hold the slot when the squat is placed.
        let research = relay("research", "wordcount", "[wordcount]", 1)
            + "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 300\n";
        ctx.apply_ok(&ns, &research)?;
        agent_ready(&admin, &ns, "wordcount").await?;
        agent_ready(&admin, &ns, "research").await?;
        let tasks: Api<Task> = Api::namespaced(user.clone(), &ns);
        let probe = forged("probe", "doc", "00000000-0000-0000-0000-000000000000")?;
        without_policy(&admin, BINDING, &tasks, &probe, || async {
            ctx.apply_ok(
                &ns,
                &task_yaml("busy", "research", "spin", "  deadlineSeconds: 300\n"),
            )?;
            wait::until("busy runs", wait::DEFAULT, || async {
                let t = tasks.get("busy").await.map_err(|e| e.to_string())?;
                match t.phase() {
                    TaskPhase::Running => Ok(()),
                    p => Err(format!("busy {p:?}")),
                }
            })
            .await?;
            ctx.apply_ok(&ns, &task_yaml("victim", "research", "pass:one two", ""))?;
            let victim = tasks.get("victim").await?;
            ensure!(
                victim.phase() == TaskPhase::Pending,
                "victim {:?}",
                victim.phase()
            );
            let uid = victim.uid().context("victim has a uid")?;
            // The squat: victim's child #0, with victim's uid, before victim runs.
            tasks
                .create(&PostParams::default(), &forged("victim-0", "victim", &uid)?)
                .await?;
            // Only now does the slot free up: busy ends by cancel, not by a deadline a slow
            // machine could reach before the squat is in place.
            let cancel = serde_json::json!({"spec": {"cancelled": true}});
            Api::<Task>::namespaced(admin.clone(), &ns)
                .patch("busy", &PatchParams::default(), &Patch::Merge(&cancel))
                .await?;
            let t = task_finished(&admin, &ns, "victim", Duration::from_secs(120)).await?;
            expect_reason(&t, TaskPhase::Failed, TaskReason::AgentError)?;
            ensure!(
                message(&t).contains("is not this Task's child"),
                "victim: message {:?}",
                message(&t)
            );
            let listed = t.status.clone().unwrap_or_default().children;
            ensure!(
                listed.len() == 1 && listed[0].name.is_none(),
                "victim followed a child it did not create: {listed:?}"
            );
            anyhow::Ok(())
        })
        .await?;
        // A parent that creates its own children still gets their answers.
        ctx.apply_ok(&ns, &task_yaml("honest", "research", "pass:a b c", ""))?;
        let t = task_finished(&admin, &ns, "honest", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let uids = t.status.clone().unwrap_or_default().child_uids;
        ensure!(uids.len() == 1, "honest recorded {uids:?}");
        Ok(())
    })
}

/// Held for reading while a trial checks that a chart policy refuses something, and for
/// writing while [`without_policy`] has a binding removed: trials run in parallel, and one
/// trial's unbound policy must not make another's refusal check pass or fail by chance.
pub(crate) static POLICIES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Runs `body` with the chart's policy binding `binding` removed, then binds it again
/// (whatever `body` returned) and waits until the API server applies it again. `probe` is a
/// Task the policy refuses, created only as a dry run to tell.
pub(crate) async fn without_policy<F, Fut>(
    admin: &Client,
    binding: &str,
    tasks: &Api<Task>,
    probe: &Task,
    body: F,
) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let _unbound = POLICIES.write().await;
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    let mut saved = bindings.get(binding).await?;
    bindings.delete(binding, &DeleteParams::default()).await?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let result = async {
        wait::until("the policy no longer applies", wait::DEFAULT, || async {
            tasks
                .create(&dry_run, probe)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await?;
        body().await
    }
    .await;
    saved.metadata.resource_version = None;
    saved.metadata.uid = None;
    bindings.create(&PostParams::default(), &saved).await?;
    wait::until("the policy applies again", wait::DEFAULT, || async {
        match tasks.create(&dry_run, probe).await {
            Ok(_) => Err("still accepted".to_owned()),
            Err(_) => Ok(()),
        }
    })
    .await?;
    result
}

/// A Task for the subagent `wordcount` that claims `parent` (name, uid) delegated it.
fn forged(name: &str, parent: &str, uid: &str) -> Result<Task> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name},
        "spec": {
            "agentRef": {"name": "wordcount"},
            "input": "one two three",
            "parent": {"name": parent, "uid": uid, "agent": "research", "depth": 1, "index": 0},
        },
    }))?)
}

async fn refused_by_executor(admin: &Client, ns: &str, name: &str, says: &str) -> Result<()> {
    let t = task_finished(admin, ns, name, wait::DEFAULT).await?;
    expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
    let s = t.status.clone().unwrap_or_default();
    let message = s.message.unwrap_or_default();
    ensure!(
        message.contains(says),
        "{name}: message {message:?}, want {says:?}"
    );
    ensure!(s.attempts.unwrap_or(0) == 0, "{name} ran");
    Ok(())
}

/// A child naming a parent that already ended meets two defences, whichever comes first: its
/// executor refuses it (only a running Task delegates), or the operator cancels it as the
/// child of an ended parent (`ParentEnded`). Either way it never runs.
async fn refused_or_cancelled_as_orphan(admin: &Client, ns: &str, name: &str) -> Result<()> {
    let t = task_finished(admin, ns, name, wait::DEFAULT).await?;
    if t.phase() != TaskPhase::Cancelled {
        return refused_by_executor(admin, ns, name, "only a running Task delegates").await;
    }
    event_with_reason(admin, ns, name, "ParentEnded").await?;
    let attempts = t.status.and_then(|s| s.attempts).unwrap_or(0);
    ensure!(attempts == 0, "{name} ran ({attempts} attempts)");
    Ok(())
}

fn forged_parent(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("forge", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml("wordcount", "wordcount-module", 1, "  mode: subagent\n"),
        )?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "research",
                "fanout-module",
                1,
                "  mode: primary\n  config: wordcount\n  capabilities:\n    delegation:\n      agents: [wordcount]\n",
            ),
        )?;
        agent_ready(&admin, &ns, "wordcount").await?;
        agent_ready(&admin, &ns, "research").await?;
        // A real parent, finished: its uid is what a forger would copy.
        ctx.apply_ok(&ns, &task_yaml("doc", "research", "one two", ""))?;
        let doc = task_finished(&admin, &ns, "doc", wait::DEFAULT).await?;
        expect_reason(&doc, TaskPhase::Succeeded, TaskReason::Completed)?;
        let uid = doc.uid().context("doc has a uid")?;

        // 1. The API server refuses it, for the user and for the admin alike.
        let tasks: Api<Task> = Api::namespaced(user.clone(), &ns);
        let bound = POLICIES.read().await;
        let err = tasks
            .create(&PostParams::default(), &forged("forged", "doc", &uid)?)
            .await
            .err()
            .context("the API server accepted a Task with a forged parent")?;
        ensure!(
            err.to_string().contains("spec.parent is written only by ari executors"),
            "refused for another reason: {err}"
        );
        drop(bound);

        // 2. Without the policy, the executor refuses it before it runs.
        let probe = forged("probe", "doc", &uid)?;
        without_policy(&admin, BINDING, &tasks, &probe, || async {
            for (name, parent, uid) in [
                ("no-such-parent", "ghost", "00000000-0000-0000-0000-000000000000"),
                ("wrong-uid", "doc", "00000000-0000-0000-0000-000000000000"),
                ("finished-parent", "doc", uid.as_str()),
            ] {
                tasks.create(&PostParams::default(), &forged(name, parent, uid)?).await?;
            }
            refused_by_executor(&admin, &ns, "no-such-parent", "does not exist").await?;
            refused_by_executor(&admin, &ns, "wrong-uid", "uid").await?;
            refused_or_cancelled_as_orphan(&admin, &ns, "finished-parent").await
        })
        .await?;

        // The subagent still serves its real parent.
        ctx.apply_ok(&ns, &task_yaml("doc2", "research", "a b\nc", ""))?;
        let t = task_finished(&admin, &ns, "doc2", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
    })
}
