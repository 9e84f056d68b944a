//! `kubectl ari approve|reject task/NAME`: decides the call a Task waits on.
//!
//! The decision goes into the Task's `spec.approvals` under the name the API server knows the
//! caller by (a SelfSubjectReview), which the chart's admission policy requires; the write is
//! conditional on the version read, so two people deciding at once cannot both win.

use anyhow::{Context as _, bail};
use ari_crds::{Approval, Decision, Task};
use clap::Args;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::task_name;

#[derive(Args)]
pub(super) struct DecideArgs {
    /// `task/NAME` (or NAME).
    task: String,
    /// The call to decide (`status.pendingApproval.call`); default: the one it waits on.
    #[arg(long)]
    call: Option<String>,
    /// Why: kept with the decision, and given to the guest on a rejection.
    #[arg(long)]
    reason: Option<String>,
}

/// Writes `decision` about the Task's waiting call in the caller's name.
pub(super) async fn decide(
    client: Client,
    ns: &str,
    args: &DecideArgs,
    decision: Decision,
) -> anyhow::Result<u8> {
    let name = task_name(&args.task)?;
    let api: Api<Task> = Api::namespaced(client.clone(), ns);
    let task = api.get(name).await?;
    let waiting = task
        .status
        .as_ref()
        .and_then(|s| s.pending_approval.as_ref())
        .map(|p| p.call.clone());
    let Some(call) = args.call.clone().or(waiting) else {
        bail!(
            "task/{name} waits for no approval (status.pendingApproval is empty); name one with --call"
        );
    };
    let decided = Approval {
        call: call.clone(),
        decision,
        approver: whoami(client).await?,
        reason: args.reason.clone(),
    };
    let approvals = with_decision(&task, decided).with_context(|| format!("task/{name}"))?;
    let patch = json!({
        "metadata": {"resourceVersion": task.resource_version()},
        "spec": {"approvals": approvals},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("cannot record the decision on task/{name}"))?;
    println!("task/{name}: call {call} {decision}");
    Ok(0)
}

/// The Task's decisions with `decided` added (a call is decided once).
fn with_decision(task: &Task, decided: Approval) -> Result<Vec<Approval>, ari_crds::NotAdded> {
    ari_crds::add_decision(task.spec.approvals.as_deref().unwrap_or_default(), decided)
}

/// The name the API server knows this client by.
async fn whoami(client: Client) -> anyhow::Result<String> {
    let api: Api<SelfSubjectReview> = Api::all(client);
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("cannot ask the API server who this is (SelfSubjectReview)")?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .context("the API server did not say who this is")
}
