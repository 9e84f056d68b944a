//! Delegation in the cluster: a guest's child is a Task object, created by this executor.
//!
//! The runtime's `delegation` capability has already checked the grant, depth, children and
//! budget; this module only makes the child real. The child is named after its parent and its
//! index (so a parent that runs again after losing its executor adopts the child it started
//! instead of starting another), owned by its parent (deleting the parent deletes the tree),
//! and carries `spec.parent`, which the child's executor checks and the chart's admission
//! policy lets only executors write. While the parent waits, it lends its executor slot
//! ([`super::slots`]); when its cancel token fires, the child Task is marked cancelled.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::names::{self, LABEL_PARENT};
use ari_crds::{Agent, AgentRef, ParentRef, Task, TaskOrigin, TaskPhase, TaskSpec};
use ari_runtime::cancel::CancelToken;
use ari_runtime::capability::delegation::{
    ChildFailure, ChildOutcome, ChildRequest, Delegator, RunningChild,
};
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Resource};
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
        // Called on the parent's blocking thread, never inside the async runtime.
        let name = self.handle.block_on(self.create(&request))?;
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
        let child = self.child_task(request, &agent);
        let name = child.metadata.name.clone().unwrap_or_default();
        match self.tasks.create(&PostParams::default(), &child).await {
            Ok(_) => Ok(name),
            Err(kube::Error::Api(s)) if s.code == 409 => self.adopt(&name, request).await,
            Err(e) => Err(format!("cannot create child Task {name}: {e}")),
        }
    }

    /// An earlier attempt of this parent created the child already: follow that one.
    async fn adopt(&self, name: &str, request: &ChildRequest) -> Result<String, String> {
        let existing = self
            .tasks
            .get(name)
            .await
            .map_err(|e| format!("child Task {name} exists but cannot be read: {e}"))?;
        let ours = existing
            .spec
            .parent
            .as_ref()
            .is_some_and(|p| p.uid == self.parent.uid && p.index == request.index)
            && existing.spec.agent_ref.name == request.agent;
        if !ours {
            return Err(format!(
                "a Task named {name} exists and is not this Task's child #{}",
                request.index
            ));
        }
        info!(parent = %self.parent.name, child = %name, "adopting the child an earlier attempt started");
        Ok(name.to_owned())
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
                seed: None,
                retries: self.parent.retries,
                ttl_seconds_after_finished: None,
                cancelled: None,
                parent: Some(ParentRef {
                    name: self.parent.name.clone(),
                    uid: self.parent.uid.clone(),
                    agent: self.parent.agent.clone(),
                    depth: request.depth,
                    index: request.index,
                    message: request.message.then_some(true),
                    memory_bytes: Some(request.memory_bytes).filter(|m| *m > 0),
                }),
            },
            status: None,
        }
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
}

impl RunningChild for KubeChild {
    fn wait(self: Box<Self>) -> ChildOutcome {
        // The parent does no work while it waits: its slot may run the child.
        let lent = self.slot.lend(self.handle.clone());
        if !lent.is_lent() {
            warn!(child = %self.name, "no room to park the parent: it keeps its slot while it waits");
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
        let fuel = status.resources_used.map_or(0, |u| u.fuel);
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
            attestation_sha256,
        }
    }

    /// A succeeded child's output: inline in its status, or in its output ConfigMap.
    async fn output(&self, status: &ari_crds::TaskStatus) -> Result<Vec<u8>, ChildFailure> {
        let host = |message: String| ChildFailure {
            reason: "HostError".into(),
            message,
        };
        if let Some(text) = &status.output {
            return Ok(text.clone().into_bytes());
        }
        if let Some(b64) = &status.output_base64 {
            return base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| host(format!("the child's outputBase64 is not base64: {e}")));
        }
        let Some(r) = &status.output_ref else {
            return Ok(Vec::new());
        };
        let cm = self.configmaps.get(&r.config_map).await.map_err(|e| {
            host(format!(
                "the child's output ConfigMap {}: {e}",
                r.config_map
            ))
        })?;
        cm.binary_data
            .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
            .or_else(|| {
                cm.data
                    .and_then(|d| d.get(&r.key).map(|s| s.clone().into_bytes()))
            })
            .ok_or_else(|| {
                host(format!(
                    "the child's output ConfigMap {} has no key {}",
                    r.config_map, r.key
                ))
            })
    }

    /// A child given up on: it may have run, so its whole budget counts as spent (the parent
    /// never gets back fuel a child may have used).
    fn failed(&self, reason: &str, message: &str) -> ChildOutcome {
        ChildOutcome {
            task: self.name.clone(),
            result: Err(ChildFailure {
                reason: reason.to_owned(),
                message: message.to_owned(),
            }),
            fuel: u64::MAX,
            attestation_sha256: String::new(),
        }
    }
}

/// Resolves when `token` is cancelled; never when it is not.
async fn cancelled(token: &CancelToken) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    token.on_cancel(move || {
        let _ = tx.send(());
    });
    if rx.await.is_err() {
        std::future::pending::<()>().await;
    }
}
