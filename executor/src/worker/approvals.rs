//! Approvals in the cluster: a call (a tool call, a delegation, a request) that needs a
//! person's decision pauses its Task.
//!
//! The runtime's capability has decided the call needs approval; this module shows the
//! call on the Task (`status.pendingApproval`, condition `AwaitingApproval`), lends the Task's
//! executor slot while it waits (as a waiting parent does, [`super::slots`]), and watches the
//! Task until `spec.approvals` names the call, the Task is cancelled or deleted, or its
//! deadline passes. Who may decide is RBAC's (update on Tasks); that a decision names its
//! writer is the chart's admission policy's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ari_crds::{Approval, PendingApproval, Task, TaskStatus};
use ari_runtime::cancel::CancelToken;
use ari_runtime::capability::{ApprovalRequest, Approver, Decided, Waited};
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Resource};
use tokio::runtime::Handle;
use tracing::{info, warn};

use super::children::cancelled;
use super::convert;
use super::slots::Slot;

/// Pause before watching the Task again after the watch failed (an API server restart).
const REWATCH: Duration = Duration::from_millis(500);

/// Asks the people who may update a Task to decide its calls.
pub struct KubeApprover {
    pub handle: Handle,
    pub tasks: Api<Task>,
    pub task: String,
    /// The Task's executor slot, lent out while it waits.
    pub slot: Arc<Slot>,
    /// The Task's memory limit: what its instance may hold while parked.
    pub memory_bytes: u64,
}

/// How watching the Task for a decision ended.
enum Watched {
    Decided(Approval),
    /// Cancelled, or deleted.
    Gone,
}

impl Approver for KubeApprover {
    fn decide(&self, request: &ApprovalRequest, until: Instant, cancel: &CancelToken) -> Waited {
        // Called on the Task's blocking thread, never inside the async runtime.
        let lent = self.slot.lend(self.handle.clone(), self.memory_bytes);
        let waited = self.handle.block_on(self.wait(request, until, cancel));
        drop(lent);
        waited
    }
}

impl KubeApprover {
    async fn wait(
        &self,
        request: &ApprovalRequest,
        until: Instant,
        cancel: &CancelToken,
    ) -> Waited {
        if let Err(e) = self.show(request).await {
            return Waited::Failed(format!("cannot show the waiting call on the Task: {e}"));
        }
        info!(task = %self.task, call = %request.call, kind = %request.subject.kind(), "a call waits for approval");
        let watched = tokio::select! {
            watched = self.watch(&request.call) => Some(watched),
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => None,
            () = cancelled(cancel) => Some(Watched::Gone),
        };
        let waited = match watched {
            Some(Watched::Decided(approval)) => Waited::Decided(Decided {
                decision: approval.decision,
                approver: approval.approver,
                reason: approval.reason,
            }),
            Some(Watched::Gone) => Waited::Cancelled,
            None => Waited::Deadline,
        };
        let decision = match &waited {
            Waited::Decided(d) => Some(d.decision),
            _ => None,
        };
        if let Err(e) = self
            .record(|s, generation, now| s.approval_decided(decision, generation, now))
            .await
        {
            warn!(task = %self.task, call = %request.call, error = %e, "the decision is not shown on the Task");
        }
        waited
    }

    /// Shows the waiting call on the Task's status.
    async fn show(&self, request: &ApprovalRequest) -> Result<(), String> {
        let pending = PendingApproval::new(
            request.call.clone(),
            &request.subject,
            &request.arguments,
            convert::now(),
        );
        self.record(move |s, generation, now| s.await_approval(pending.clone(), generation, now))
            .await
    }

    /// Patches the Task's status with `transition` (see [`TaskStatus::patch`]).
    async fn record(
        &self,
        transition: impl Fn(
            &mut TaskStatus,
            Option<i64>,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
        ) -> Result<(), ari_crds::lifecycle::NotAllowed>,
    ) -> Result<(), String> {
        let task = self
            .tasks
            .get_status(&self.task)
            .await
            .map_err(|e| e.to_string())?;
        let generation = task.meta().generation;
        let status = task.status.unwrap_or_default();
        let patch = status
            .patch(None, |s| transition(s, generation, convert::now()))
            .map_err(|e| e.to_string())?;
        self.tasks
            .patch_status(&self.task, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// The decision about `call` once the Task has one, or `Gone`. Watch failures are
    /// retried; the caller bounds the whole wait.
    async fn watch(&self, call: &str) -> Watched {
        loop {
            let settled = |t: Option<&Task>| {
                t.is_none_or(|t| t.is_cancelled() || decision_for(t, call).is_some())
            };
            match await_condition(self.tasks.clone(), &self.task, settled).await {
                Ok(Some(task)) => match decision_for(&task, call) {
                    Some(approval) if !task.is_cancelled() => return Watched::Decided(approval),
                    _ => return Watched::Gone,
                },
                Ok(None) => return Watched::Gone,
                Err(e) => {
                    warn!(task = %self.task, error = %e, "watching the Task for a decision failed; watching again");
                    // Backoff before re-watching, not synchronisation.
                    tokio::time::sleep(REWATCH).await;
                }
            }
        }
    }
}

/// The decision `spec.approvals` holds about `call`.
fn decision_for(task: &Task, call: &str) -> Option<Approval> {
    task.spec
        .approvals
        .iter()
        .flatten()
        .find(|a| a.call == call)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_decision_naming_the_call_decides_it() {
        let mut task = Task::new(
            "t",
            serde_json::from_value(serde_json::json!({"agentRef": {"name": "a"}, "input": ""}))
                .expect("spec"),
        );
        task.spec.approvals = Some(vec![Approval {
            call: "0-aaaa".into(),
            decision: ari_crds::Decision::Approved,
            approver: "alice".into(),
            reason: None,
        }]);
        assert!(decision_for(&task, "0-aaaa").is_some());
        assert!(
            decision_for(&task, "0-bbbb").is_none(),
            "another call's decision"
        );
    }
}
