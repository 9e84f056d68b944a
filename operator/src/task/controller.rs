//! Task reconcile: act on the [`decide`](super::decide::decide) verdict with guarded writes.
//!
//! Every status write is a `replace_status` carrying the resourceVersion the decision was made
//! on, so the operator never overwrites an executor's concurrent claim or result: on a 409 it
//! simply looks again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ari_crds::{Agent, Task, TaskPhase, TaskStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tracing::info;

use super::children::ChildIndex;
use super::decide::{Decision, ExecutorPod, ParentTask, Timing, decide, foreign_child, orphaned};
use crate::context::Context;
use crate::error::Error;

/// Task UIDs already handled once: completions counted in the metrics, failures announced with
/// an Event (bounded; cleared when full).
#[derive(Default)]
pub struct Seen(Mutex<HashSet<String>>);

const SEEN_CAP: usize = 100_000;

impl Seen {
    pub fn first_time(&self, uid: &str) -> bool {
        let Ok(mut set) = self.0.lock() else {
            return false;
        };
        if set.len() >= SEEN_CAP {
            set.clear();
        }
        set.insert(uid.to_owned())
    }
}

/// Context of the Task controller.
pub struct TaskContext {
    pub base: Arc<Context>,
    pub seen: Seen,
    /// Agents and executor pods as the operator's watches last saw them. Every Task event
    /// would otherwise cost a GET of its Agent or executor pod; the cache answers the common
    /// case and only a negative answer (not found) is confirmed against the API server.
    pub agents: Store<Agent>,
    pub pods: Store<Pod>,
    /// The Tasks themselves (trimmed), to see whether a child's parent has ended.
    pub tasks: Store<Task>,
    /// Unfinished children by parent, to cancel them when their parent ends.
    pub children: Arc<ChildIndex>,
    /// Failed Tasks that already have their Event.
    pub announced: Seen,
    /// Replies (`spec.continues`) whose conversation labels were seen to once.
    pub labelled: Seen,
    /// When this process began leading (set after the Lease is won): failures before it were
    /// announced by an earlier leader.
    pub started: Timestamp,
}

impl TaskContext {
    async fn agent(&self, ns: &str, name: &str) -> Result<Option<Agent>, kube::Error> {
        if let Some(a) = self.agents.get(&ObjectRef::new(name).within(ns)) {
            return Ok(Some((*a).clone()));
        }
        Api::<Agent>::namespaced(self.base.client.clone(), ns)
            .get_opt(name)
            .await
    }

    /// The state of `task`'s parent as the Task cache has it.
    fn parent_of(&self, task: &Task) -> ParentTask {
        let (Some(link), Some(ns)) = (&task.spec.parent, task.namespace()) else {
            return ParentTask::Unknown;
        };
        match self.tasks.get(&ObjectRef::new(&link.name).within(&ns)) {
            Some(p) if p.uid().as_deref() == Some(link.uid.as_str()) => {
                if p.is_finished() {
                    ParentTask::Ended(p.phase())
                } else {
                    ParentTask::Active
                }
            }
            _ => ParentTask::Unknown,
        }
    }

    async fn pod(&self, ns: &str, name: &str) -> Result<Option<Pod>, kube::Error> {
        if let Some(p) = self.pods.get(&ObjectRef::new(name).within(ns)) {
            return Ok(Some((*p).clone()));
        }
        Api::<Pod>::namespaced(self.base.client.clone(), ns)
            .get_opt(name)
            .await
    }
}

/// What the executor pod says about the process that claimed a Task at `claimed_at`.
///
/// A pod being deleted still counts as running: it drains (finishes what it runs) within its
/// grace period and the heartbeat timeout covers a drain that hangs. A container that is not
/// running, or that (re)started after the claim, means the claiming process is gone, which is
/// known at once instead of after the heartbeat timeout.
pub fn pod_state(pod: Option<&Pod>, claimed_at: Option<Timestamp>) -> ExecutorPod {
    let Some(p) = pod else {
        return ExecutorPod::Gone;
    };
    let status = p.status.as_ref();
    if !matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Running" | "Pending")
    ) {
        return ExecutorPod::Stopped;
    }
    let containers = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let replaced = containers.iter().any(|c| {
        let running_since = c
            .state
            .as_ref()
            .and_then(|st| st.running.as_ref())
            .map(|r| r.started_at.as_ref().map(|t| t.0));
        match (running_since, claimed_at) {
            // Not running now: the process that claimed is not there.
            (None, _) => status.and_then(|s| s.phase.as_deref()) == Some("Running"),
            (Some(Some(started)), Some(claimed)) => started > claimed,
            _ => false,
        }
    });
    if replaced {
        ExecutorPod::Stopped
    } else {
        ExecutorPod::Running
    }
}

/// The status after a decision (None when the decision writes no status, or when the Task's
/// phase no longer allows it: the transition rules are `ari_crds::lifecycle`'s).
pub fn next_status(task: &Task, decision: &Decision, now: Timestamp) -> Option<TaskStatus> {
    let mut s = task.status.clone().unwrap_or_default();
    let generation = task.metadata.generation;
    let written = match decision {
        Decision::Fail { reason, message } => s.fail(*reason, message, generation, Time(now)),
        Decision::Requeue { message } => s.requeue(message, generation, Time(now)),
        Decision::Cancel { message } => s.cancel(message, generation, Time(now)),
        Decision::Wait(_) | Decision::Delete | Decision::CancelChild { .. } => return None,
    };
    written.ok().map(|()| s)
}

fn observe_finished(ctx: &TaskContext, task: &Task) {
    let Some(uid) = task.uid() else { return };
    let Some(status) = &task.status else { return };
    if !task.is_finished() || !ctx.seen.first_time(&uid) {
        return;
    }
    let m = &ctx.base.metrics;
    let phase = task.phase().as_str();
    let reason = status.reason.map(|r| r.as_str()).unwrap_or("");
    m.task_finished.with_label_values(&[phase, reason]).inc();
    if let Some(used) = &status.resources_used {
        m.task_duration
            .with_label_values(&[reason])
            .observe(used.wall_millis as f64 / 1000.0);
        m.fuel_used
            .with_label_values(&[task.spec.agent_ref.name.as_str()])
            .inc_by(used.fuel);
    }
}

/// Longest Event note: the API server refuses notes over 1 KiB.
pub const NOTE_MAX: usize = 1000;

/// A Warning Event for a Task its executor failed (FuelExhausted, Trap, …), so `kubectl
/// describe` and event-based alerting see executor-decided failures like the operator's own
/// (which are announced where they are written). Only for Tasks finished since this process
/// began leading, so a restarted or newly elected operator does not repeat its predecessor's Events; a failure that
/// happens while no operator runs keeps only its status. Successes get no Event: they are
/// the hot path, and one more write per Task would cost a third of the throughput.
async fn announce_failure(ctx: &TaskContext, task: &Task) {
    let Some(status) = &task.status else { return };
    let Some(uid) = task.uid() else { return };
    let since_start = status
        .completion_time
        .as_ref()
        .is_some_and(|t| t.0 >= ctx.started);
    if task.phase() != TaskPhase::Failed || !since_start || !ctx.announced.first_time(&uid) {
        return;
    }
    let reason = status.reason.map_or("Failed", |r| r.as_str());
    let mut note = status
        .message
        .clone()
        .unwrap_or_else(|| format!("failed: {reason}"));
    crate::cache::clip(&mut note, NOTE_MAX);
    ctx.base.event(task, true, reason, "Run", note).await;
}

/// Reconciles one Task.
pub async fn reconcile(task: Arc<Task>, ctx: Arc<TaskContext>) -> Result<Action, Error> {
    let metrics = &ctx.base.metrics;
    metrics.reconciles.with_label_values(&["task"]).inc();
    let _timer = metrics
        .reconcile_duration
        .with_label_values(&["task"])
        .start_timer();
    sync_task(task, ctx.clone()).await
}

/// One pass over a Task: count and announce its ending, then decide and act.
async fn sync_task(task: Arc<Task>, ctx: Arc<TaskContext>) -> Result<Action, Error> {
    let base = &ctx.base;
    observe_finished(&ctx, &task);
    announce_failure(&ctx, &task).await;
    let ns = task.namespace().ok_or(Error::NoNamespace)?;
    let name = task.name_any();
    let client = base.client.clone();
    let tasks = Api::<Task>::namespaced(client.clone(), &ns);

    // A pending child is checked against its parent's Agent first: one its parent's pods
    // cannot have created fails as such, whatever its parent is doing.
    let foreign = match (&task.spec.parent, task.phase()) {
        (Some(link), TaskPhase::Pending) => {
            let parent_agent = ctx.agent(&ns, &link.agent).await?;
            foreign_child(&task, parent_agent.as_ref().map(|a| &a.spec))
        }
        _ => None,
    };
    if foreign.is_none()
        && let Some(decision) = orphaned(&task, ctx.parent_of(&task))
    {
        cancel_child(&ctx, &tasks, &task, &decision).await?;
        return Ok(Action::await_change());
    }
    if task.is_finished() {
        cancel_children(&ctx, &tasks, &task).await?;
    }
    if task.spec.continues.is_some()
        && let Some(uid) = task.uid()
        && ctx.labelled.first_time(&uid)
    {
        super::conversation::label_turn(&tasks, &task).await?;
    }

    let agent = match task.phase() {
        TaskPhase::Pending => ctx.agent(&ns, &task.spec.agent_ref.name).await?,
        _ => None,
    };
    let pod = match (
        task.phase(),
        task.status.as_ref().and_then(|s| s.executor.as_deref()),
    ) {
        (TaskPhase::Running, Some(exec)) => pod_state(
            ctx.pod(&ns, exec).await?.as_ref(),
            task.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
        ),
        (TaskPhase::Running, None) => ExecutorPod::Gone,
        _ => ExecutorPod::NotChecked,
    };
    let timing = Timing {
        heartbeat_timeout: base.settings.heartbeat_timeout,
        agent_grace: base.settings.agent_grace,
    };
    let now = Timestamp::now();
    let decision = foreign.unwrap_or_else(|| decide(&task, agent.as_ref(), pod, now, timing));

    match &decision {
        Decision::Wait(after) => {
            return Ok(after.map_or_else(Action::await_change, Action::requeue));
        }
        Decision::Delete => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: task.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match tasks.delete(&name, &dp).await {
                Ok(_) => {
                    info!(task = %name, namespace = %ns, "deleted after ttlSecondsAfterFinished")
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::await_change());
        }
        Decision::Fail { .. } | Decision::Requeue { .. } | Decision::Cancel { .. } => {}
        Decision::CancelChild { .. } => {
            cancel_child(&ctx, &tasks, &task, &decision).await?;
            return Ok(Action::await_change());
        }
    }
    let Some(status) = next_status(&task, &decision, now) else {
        return Ok(Action::await_change());
    };
    let mut updated = (*task).clone();
    updated.status = Some(status);
    match tasks
        .replace_status(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => {}
        // The executor (or another write) got there first: decide again on the new state.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    }
    let (warning, reason, note, action) = match &decision {
        Decision::Fail { reason, message } => (true, reason.as_str(), message.clone(), "Fail"),
        Decision::Requeue { message } => (true, "Requeued", message.clone(), "Requeue"),
        Decision::Cancel { message } => (false, "Cancelled", message.clone(), "Cancel"),
        _ => (false, "", String::new(), ""),
    };
    info!(task = %name, namespace = %ns, reason, "{note}");
    if let (Decision::Fail { .. }, Some(uid)) = (&decision, task.uid()) {
        ctx.announced.first_time(&uid); // announced here, not again by announce_failure
    }
    base.event(&*task, warning, reason, action, note).await;
    Ok(Action::await_change())
}

/// Cancels the unfinished children of `parent`, which has ended (see
/// [`orphaned`](super::decide::orphaned)).
async fn cancel_children(ctx: &TaskContext, tasks: &Api<Task>, parent: &Task) -> Result<(), Error> {
    for child in ctx.children.of(parent) {
        let Some(child) = ctx.tasks.get(&child) else {
            continue;
        };
        let linked =
            child.spec.parent.as_ref().map(|p| p.uid.as_str()) == parent.metadata.uid.as_deref();
        if !linked {
            continue;
        }
        if let Some(decision) = orphaned(&child, ParentTask::Ended(parent.phase())) {
            cancel_child(ctx, tasks, &child, &decision).await?;
        }
    }
    Ok(())
}

/// Sets `spec.cancelled` on `child` (a merge patch that names its uid, so a re-created Task of
/// the same name is left alone) and says why in an Event.
async fn cancel_child(
    ctx: &TaskContext,
    tasks: &Api<Task>,
    child: &Task,
    decision: &Decision,
) -> Result<(), Error> {
    let Decision::CancelChild { message } = decision else {
        return Ok(());
    };
    let name = child.name_any();
    let patch = serde_json::json!({
        "metadata": {"uid": child.uid()},
        "spec": {"cancelled": true},
    });
    match tasks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let ns = child.namespace().unwrap_or_default();
    info!(task = %name, namespace = %ns, "cancelled: {message}");
    ctx.base
        .event(child, false, "ParentEnded", "Cancel", message.clone())
        .await;
    Ok(())
}

/// Backoff on errors.
pub fn error_policy(_task: Arc<Task>, err: &Error, ctx: Arc<TaskContext>) -> Action {
    ctx.base
        .metrics
        .reconcile_errors
        .with_label_values(&["task", err.metric_label()])
        .inc();
    tracing::warn!(error = %err, "task reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, deleting: bool, container: serde_json::Value) -> Pod {
        let mut p = serde_json::json!({
            "metadata": {"name": "exec-1"},
            "status": {"phase": phase, "containerStatuses": [container]}
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z".into();
        }
        serde_json::from_value(p).unwrap_or_else(|e| panic!("{e}"))
    }

    fn running_since(t: &str) -> serde_json::Value {
        serde_json::json!({"name": "executor", "image": "i", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": t}}})
    }

    fn claimed() -> Option<Timestamp> {
        "2026-01-01T00:00:10Z".parse().ok()
    }

    #[test]
    fn a_draining_pod_still_runs_its_tasks() {
        let p = pod("Running", true, running_since("2026-01-01T00:00:00Z"));
        assert_eq!(pod_state(Some(&p), claimed()), ExecutorPod::Running);
    }

    #[test]
    fn a_container_restarted_after_the_claim_lost_the_task() {
        let p = pod("Running", false, running_since("2026-01-01T00:00:20Z"));
        assert_eq!(pod_state(Some(&p), claimed()), ExecutorPod::Stopped);
        let waiting = serde_json::json!({"name": "executor", "image": "i", "imageID": "",
            "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        assert_eq!(
            pod_state(Some(&pod("Running", false, waiting)), claimed()),
            ExecutorPod::Stopped
        );
    }

    #[test]
    fn finished_or_missing_pods_are_not_running() {
        let p = pod("Failed", false, running_since("2026-01-01T00:00:00Z"));
        assert_eq!(pod_state(Some(&p), claimed()), ExecutorPod::Stopped);
        assert_eq!(pod_state(None, claimed()), ExecutorPod::Gone);
    }
}
