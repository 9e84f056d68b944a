//! Delegation in the cluster: a guest's child is a Task object, created by this executor.
//!
//! The runtime's `delegation` capability has already checked the grant, depth, children and
//! budget; this module only makes the child real. The child is named after its parent and its
//! index (so a parent that runs again after losing its executor adopts the child it started
//! instead of starting another), owned by its parent (deleting the parent deletes the tree),
//! and carries `spec.parent`, which the child's executor checks and the chart's admission
//! policy lets only executors write. While the parent waits, it lends its executor slot
//! ([`super::slots`]); when its cancel token fires, the child Task is marked cancelled.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ari_crds::names::{self, LABEL_PARENT};
use ari_crds::{Agent, AgentRef, ParentRef, Task, TaskOrigin, TaskPhase, TaskSpec, TaskStatus};
use ari_runtime::cancel::CancelToken;
use ari_runtime::capability::delegation::{
    ChildFailure, ChildOutcome, ChildRequest, Delegator, RunningChild,
};
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Resource, ResourceExt};
use tokio::runtime::Handle;
use tracing::{info, warn};

use super::slots::Slot;
use super::status::label_value;

/// Past the child's own deadline, how long a parent still waits for the child's executor or
/// the operator to record its end before giving up on it.
const GRACE: Duration = Duration::from_secs(5);
/// Pause before watching a child again after the watch failed (an API server restart).
const REWATCH: Duration = Duration::from_millis(500);

/// The parent task, as its children name it.
#[derive(Debug, Clone)]
pub struct Parent {
    pub name: String,
    pub uid: String,
    pub agent: String,
    pub namespace: String,
    /// Its retries after executor loss; its children get as many.
    pub retries: Option<u32>,
    /// The `ExecutorPool` this pod belongs to, when it is a pool pod: written on each child,
    /// where the admission policy checks it against the pod's name.
    pub pool: Option<String>,
}

/// Creates and follows one parent task's children.
pub struct KubeDelegator {
    pub handle: Handle,
    pub tasks: Api<Task>,
    pub agents: Api<Agent>,
    pub configmaps: Api<ConfigMap>,
    pub parent: Parent,
    /// The parent's executor slot, lent out while it waits.
    pub slot: Arc<Slot>,
}

impl Delegator for KubeDelegator {
    fn start(&self, request: ChildRequest) -> Result<Box<dyn RunningChild>, String> {
        // Called on the parent's blocking thread, never inside the async runtime. Bounded by
        // the parent's time left and its cancellation: an API server that does not answer
        // never holds the parent past either.
        let name = self.handle.block_on(bounded(
            request.timeout,
            &request.cancel,
            self.create(&request),
        ))?;
        let (tasks, handle, child) = (self.tasks.clone(), self.handle.clone(), name.clone());
        request.cancel.on_cancel(move || {
            handle.spawn(async move { mark_cancelled(&tasks, &child).await });
        });
        info!(parent = %self.parent.name, child = %name, agent = %request.agent, message = request.message, "child started");
        Ok(Box::new(KubeChild {
            name,
            handle: self.handle.clone(),
            tasks: self.tasks.clone(),
            configmaps: self.configmaps.clone(),
            slot: self.slot.clone(),
            cancel: request.cancel,
            patience: request.timeout + GRACE,
            memory_bytes: request.memory_bytes,
        }))
    }
}

impl KubeDelegator {
    /// Creates the child Task (or finds the one an earlier attempt created); its name.
    async fn create(&self, request: &ChildRequest) -> Result<String, String> {
        let agent = match self.agents.get_opt(&request.agent).await {
            Ok(Some(agent)) => agent,
            Ok(None) => {
                return Err(format!(
                    "no Agent `{}` in namespace {}",
                    request.agent, self.parent.namespace
                ));
            }
            Err(e) => return Err(format!("cannot read Agent `{}`: {e}", request.agent)),
        };
        if !agent
            .spec
            .mode
            .unwrap_or_default()
            .accepts(TaskOrigin::Delegation)
        {
            return Err(format!(
                "Agent `{}` is in mode primary: it takes no delegated Tasks",
                request.agent
            ));
        }
        if !agent.spec.accepts_caller(&self.parent.agent) {
            return Err(format!(
                "Agent `{}` takes no delegated Tasks from Agent `{}` (its spec.callers)",
                request.agent, self.parent.agent
            ));
        }
        let child = self.child_task(request, &agent);
        let name = child.metadata.name.clone().unwrap_or_default();
        match self.tasks.create(&PostParams::default(), &child).await {
            Ok(created) => {
                self.record(request.index, &name, created.uid().as_deref())
                    .await;
                Ok(name)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => self.adopt(&name, request).await,
            Err(e) => Err(format!("cannot create child Task {name}: {e}")),
        }
    }

    /// Writes the child's uid into the parent's `status.childUids`, so that a re-run of the
    /// parent can tell its own child from a Task someone else created under the same name.
    /// Not conditional on the attempt: the record is true whichever attempt reads it.
    async fn record(&self, index: u32, name: &str, uid: Option<&str>) {
        let Some(uid) = uid else {
            warn!(parent = %self.parent.name, child = %name, "the created child has no uid; not recorded");
            return;
        };
        let patch = match TaskStatus::default().patch(None, |s| {
            s.record_child(index, uid);
            Ok(())
        }) {
            Ok(patch) => patch,
            Err(e) => {
                warn!(parent = %self.parent.name, child = %name, error = %e, "the child's uid is not recorded");
                return;
            }
        };
        if let Err(e) = self
            .tasks
            .patch_status(
                &self.parent.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            warn!(parent = %self.parent.name, child = %name, error = %e, "the child's uid is not recorded: a re-run of the parent will not adopt it");
        }
    }

    /// A Task of the child's name exists: follow it only if this parent created it (an earlier
    /// attempt of it, which recorded the child's uid in the parent's status).
    async fn adopt(&self, name: &str, request: &ChildRequest) -> Result<String, String> {
        let existing = self
            .tasks
            .get(name)
            .await
            .map_err(|e| format!("child Task {name} exists but cannot be read: {e}"))?;
        let parent = self
            .tasks
            .get_status(&self.parent.name)
            .await
            .map_err(|e| format!("cannot read this Task's own status: {e}"))?;
        let recorded = parent
            .status
            .as_ref()
            .and_then(|s| s.child_uids.get(&request.index.to_string()))
            .cloned();
        match adoption(&existing, &self.parent.uid, recorded.as_deref(), request) {
            Ok(()) => {
                info!(parent = %self.parent.name, child = %name, "adopting the child an earlier attempt started");
                Ok(name.to_owned())
            }
            Err(why) => {
                warn!(parent = %self.parent.name, child = %name, %why, "refusing a Task this parent did not create");
                Err(format!(
                    "a Task named {name} exists and is not this Task's child #{}: {why}",
                    request.index
                ))
            }
        }
    }

    fn child_task(&self, request: &ChildRequest, agent: &Agent) -> Task {
        let limits = agent.spec.limits.effective();
        let name = names::child_task_name(&self.parent.name, &self.parent.uid, request.index);
        let (input, input_base64) = match std::str::from_utf8(&request.input) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&request.input)),
            ),
        };
        let deadline = u32::try_from(request.timeout.as_millis().div_ceil(1000))
            .unwrap_or(u32::MAX)
            .clamp(1, 604_800);
        Task {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.parent.namespace.clone()),
                labels: Some(
                    [(
                        LABEL_PARENT.to_owned(),
                        label_value(&self.parent.name, Some(&self.parent.uid)),
                    )]
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: Task::api_version(&()).into_owned(),
                    kind: Task::kind(&()).into_owned(),
                    name: self.parent.name.clone(),
                    uid: self.parent.uid.clone(),
                    controller: None,
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            spec: TaskSpec {
                agent_ref: AgentRef {
                    name: request.agent.clone(),
                },
                input,
                input_base64,
                input_from: None,
                requirements: None,
                deadline_seconds: Some(deadline),
                fuel: Some(request.fuel.min(limits.fuel).max(1)),
                tokens: Some(request.tokens.min(limits.tokens)),
                seed: None,
                retries: self.parent.retries,
                ttl_seconds_after_finished: None,
                cancelled: None,
                // A child keeps its trace when its own Agent says so.
                trace: None,
                approvals: None,
                verification: None,
                continues: None,
                items: None,
                parent: Some(ParentRef {
                    name: self.parent.name.clone(),
                    uid: self.parent.uid.clone(),
                    agent: self.parent.agent.clone(),
                    depth: request.depth,
                    index: request.index,
                    message: request.message.then_some(true),
                    memory_bytes: Some(request.memory_bytes).filter(|m| *m > 0),
                    pool: self.parent.pool.clone(),
                }),
            },
            status: None,
        }
    }
}

/// Whether `existing` is the child #`request.index` this parent (uid `parent_uid`) created:
/// it names this parent and index, runs the Agent asked for, and its own uid is the one the
/// parent recorded when it created it (`recorded`). Anyone who may create Tasks can make one of
/// that name, with a forged `spec.parent` where the admission policy is not installed; only
/// the recorded uid tells the parent's own child apart.
fn adoption(
    existing: &Task,
    parent_uid: &str,
    recorded: Option<&str>,
    request: &ChildRequest,
) -> Result<(), String> {
    let names_us = existing
        .spec
        .parent
        .as_ref()
        .is_some_and(|p| p.uid == parent_uid && p.index == request.index);
    if !names_us {
        return Err("its spec.parent does not name this Task and index".into());
    }
    if existing.spec.agent_ref.name != request.agent {
        return Err(format!(
            "it runs on Agent {}, not {}",
            existing.spec.agent_ref.name, request.agent
        ));
    }
    match (recorded, existing.metadata.uid.as_deref()) {
        (Some(recorded), Some(uid)) if recorded == uid => Ok(()),
        (None, _) => Err("this Task never recorded creating a child of that index".into()),
        _ => Err("its uid is not the one this Task recorded when it created its child".into()),
    }
}

/// Runs `work` unless `timeout` passes or `cancel` fires first.
async fn bounded<T>(
    timeout: Duration,
    cancel: &CancelToken,
    work: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::select! {
        done = tokio::time::timeout(timeout, work) => done.unwrap_or_else(|_| {
            Err("the parent's time ran out while its child was being started".into())
        }),
        () = cancelled(cancel) => Err("cancelled while its child was being started".into()),
    }
}

/// Marks a child Task cancelled (its parent was cancelled, or ended without awaiting it).
async fn mark_cancelled(tasks: &Api<Task>, name: &str) {
    let patch = serde_json::json!({"spec": {"cancelled": true}});
    match tasks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => info!(child = %name, "child cancelled with its parent"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => warn!(child = %name, error = %e, "cannot cancel the child Task"),
    }
}

/// A child Task its parent may wait for.
struct KubeChild {
    name: String,
    handle: Handle,
    tasks: Api<Task>,
    configmaps: Api<ConfigMap>,
    slot: Arc<Slot>,
    cancel: CancelToken,
    /// How long to wait before giving up on the child.
    patience: Duration,
    /// The parent's memory limit: what its instance may hold while parked.
    memory_bytes: u64,
}

impl RunningChild for KubeChild {
    fn wait(self: Box<Self>) -> ChildOutcome {
        // The parent does no work while it waits: its slot may run the child.
        let lent = self.slot.lend(self.handle.clone(), self.memory_bytes);
        if !lent.is_lent() {
            warn!(child = %self.name, memory_bytes = self.memory_bytes, "no room to park the parent (parked parents' count or memory budget is full): it keeps its slot while it waits");
        }
        let outcome = self.handle.block_on(self.until_finished());
        drop(lent);
        outcome
    }
}

impl KubeChild {
    async fn until_finished(&self) -> ChildOutcome {
        let cancelled = cancelled(&self.cancel);
        tokio::select! {
            ended = tokio::time::timeout(self.patience, self.watch()) => match ended {
                Ok(Some(task)) => self.outcome_of(&task).await,
                Ok(None) => self.failed("Cancelled", "the child Task was deleted"),
                Err(_) => {
                    mark_cancelled(&self.tasks, &self.name).await;
                    self.failed(
                        "DeadlineExceeded",
                        "the child Task did not end within its deadline",
                    )
                }
            },
            () = cancelled => self.failed("Cancelled", "cancelled with its parent"),
        }
    }

    /// The child once it has ended (`None`: it was deleted). Watch failures (an API server
    /// restarting) are retried; the caller bounds the whole wait.
    async fn watch(&self) -> Option<Task> {
        loop {
            let ended = |t: Option<&Task>| t.is_none_or(Task::is_finished);
            match await_condition(self.tasks.clone(), &self.name, ended).await {
                Ok(task) => return task,
                Err(e) => {
                    warn!(child = %self.name, error = %e, "watching the child failed; watching again");
                    // Backoff before re-watching, not synchronisation.
                    tokio::time::sleep(REWATCH).await;
                }
            }
        }
    }

    async fn outcome_of(&self, task: &Task) -> ChildOutcome {
        let status = task.status.clone().unwrap_or_default();
        let (fuel, tokens) = status
            .resources_used
            .as_ref()
            .map_or((0, 0), |u| (u.fuel, u.tokens_spent()));
        let attestation_sha256 = status
            .attestation
            .as_ref()
            .map(|a| a.sha256())
            .unwrap_or_default();
        let result = match task.phase() {
            TaskPhase::Succeeded => self.output(&status).await,
            _ => Err(ChildFailure {
                reason: status.reason.map_or("HostError", |r| r.as_str()).to_owned(),
                message: status.message.clone().unwrap_or_default(),
            }),
        };
        ChildOutcome {
            task: self.name.clone(),
            result,
            fuel,
            tokens,
            attestation_sha256,
        }
    }

    /// A succeeded child's output: inline in its status, or in its output ConfigMap.
    async fn output(&self, status: &ari_crds::TaskStatus) -> Result<Vec<u8>, ChildFailure> {
        super::output::read(&self.configmaps, status)
            .await
            .map_err(|message| ChildFailure {
                reason: "HostError".into(),
                message: format!("the child's {message}"),
            })
    }

    /// A child given up on: it may have run, so its whole budget counts as spent (the parent
    /// never gets back fuel or tokens a child may have used).
    fn failed(&self, reason: &str, message: &str) -> ChildOutcome {
        ChildOutcome {
            task: self.name.clone(),
            result: Err(ChildFailure {
                reason: reason.to_owned(),
                message: message.to_owned(),
            }),
            fuel: u64::MAX,
            tokens: u64::MAX,
            attestation_sha256: String::new(),
        }
    }
}

/// Resolves when `token` is cancelled; never when it is not.
pub(super) async fn cancelled(token: &CancelToken) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    token.on_cancel(move || {
        let _ = tx.send(());
    });
    if rx.await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT_UID: &str = "0b5e2f8c-9a1d-4c3e-8f7a-6d5c4b3a2f10";

    fn request(index: u32) -> ChildRequest {
        ChildRequest {
            parent: "p".into(),
            index,
            agent: "wordcount".into(),
            input: Vec::new(),
            fuel: 1,
            tokens: 0,
            timeout: Duration::from_secs(1),
            memory_bytes: 0,
            depth: 1,
            message: false,
            cancel: CancelToken::new(),
        }
    }

    fn existing(uid: &str, parent_uid: &str, index: u32, agent: &str) -> Task {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "p-0", "namespace": "ns", "uid": uid},
            "spec": {"agentRef": {"name": agent}, "input": "x",
                     "parent": {"name": "p", "uid": parent_uid, "agent": "research",
                                "depth": 1, "index": index}},
        }))
        .unwrap_or_else(|e| panic!("task: {e}"))
    }

    /// Issue 26 items 5 and 14: a Task of the child's name is followed only when this parent
    /// recorded creating it; a squatter with a perfect forged `spec.parent` is refused.
    #[test]
    fn a_parent_adopts_only_the_child_whose_uid_it_recorded() {
        let ours = existing("child-uid", PARENT_UID, 0, "wordcount");
        assert_eq!(
            adoption(&ours, PARENT_UID, Some("child-uid"), &request(0)),
            Ok(())
        );
        let cases = [
            (ours.clone(), None, "never recorded"),
            (
                ours.clone(),
                Some("another-uid"),
                "not the one this Task recorded",
            ),
            (
                existing("child-uid", "other-parent", 0, "wordcount"),
                Some("child-uid"),
                "does not name",
            ),
            (
                existing("child-uid", PARENT_UID, 1, "wordcount"),
                Some("child-uid"),
                "does not name",
            ),
            (
                existing("child-uid", PARENT_UID, 0, "echo"),
                Some("child-uid"),
                "Agent echo",
            ),
        ];
        for (task, recorded, says) in cases {
            let why = adoption(&task, PARENT_UID, recorded, &request(0)).expect_err("refused");
            assert!(why.contains(says), "{why}: want {says:?}");
        }
    }

    #[tokio::test]
    async fn starting_a_child_gives_up_when_the_parent_is_cancelled_or_out_of_time() {
        let never = std::future::pending::<Result<(), String>>;
        let cancel = CancelToken::new();
        cancel.cancel();
        let why = bounded(Duration::from_secs(3600), &cancel, never())
            .await
            .expect_err("cancelled");
        assert!(why.contains("cancelled"), "{why}");
        let why = bounded(Duration::from_millis(1), &CancelToken::new(), never())
            .await
            .expect_err("out of time");
        assert!(why.contains("time ran out"), "{why}");
        assert_eq!(
            bounded(Duration::from_secs(1), &CancelToken::new(), async { Ok(7) }).await,
            Ok(7)
        );
    }
}
