//! A namespace user forges a delegation (issue 15, item 4): a Task that names a parent, to run
//! a `subagent`-only Agent or escape a parent's depth and budget. The chart's admission policy
//! refuses it at the API server; with the policy gone, the executor refuses it before it runs.

use anyhow::{Context, Result, ensure};
use ari_crds::{Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::wait;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::namespace_user;

/// The binding the chart installs (`deploy/operator.yaml`).
const BINDING: &str = "ari-operator-task-parent";

pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![(
        "a_forged_parent_is_refused_by_the_api_server_and_again_by_the_executor",
        forged_parent,
    )]
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
        let err = tasks
            .create(&PostParams::default(), &forged("forged", "doc", &uid)?)
            .await
            .err()
            .context("the API server accepted a Task with a forged parent")?;
        ensure!(
            err.to_string().contains("spec.parent is written only by ari executors"),
            "refused for another reason: {err}"
        );

        // 2. Without the policy, the executor refuses it before it runs.
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
        let mut saved = bindings.get(BINDING).await?;
        bindings.delete(BINDING, &DeleteParams::default()).await?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let result = async {
            wait::until("the policy no longer applies", wait::DEFAULT, || async {
                tasks
                    .create(&dry_run, &forged("probe", "doc", &uid).map_err(|e| e.to_string())?)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .await?;
            for (name, parent, uid) in [
                ("no-such-parent", "ghost", "0000"),
                ("wrong-uid", "doc", "0000"),
                ("finished-parent", "doc", uid.as_str()),
            ] {
                tasks.create(&PostParams::default(), &forged(name, parent, uid)?).await?;
            }
            refused_by_executor(&admin, &ns, "no-such-parent", "does not exist").await?;
            refused_by_executor(&admin, &ns, "wrong-uid", "uid").await?;
            refused_by_executor(&admin, &ns, "finished-parent", "only a running Task delegates")
                .await?;
            anyhow::Ok(())
        }
        .await;
        // Restore the policy whatever happened, and wait until it applies again.
        saved.metadata.resource_version = None;
        saved.metadata.uid = None;
        bindings.create(&PostParams::default(), &saved).await?;
        wait::until("the policy applies again", wait::DEFAULT, || async {
            match tasks
                .create(&dry_run, &forged("probe", "doc", &uid).map_err(|e| e.to_string())?)
                .await
            {
                Ok(_) => Err("still accepted".to_owned()),
                Err(_) => Ok(()),
            }
        })
        .await?;
        result?;

        // The subagent still serves its real parent.
        ctx.apply_ok(&ns, &task_yaml("doc2", "research", "a b\nc", ""))?;
        let t = task_finished(&admin, &ns, "doc2", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
    })
}
