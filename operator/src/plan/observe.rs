//! What the Plan controller keeps of a Plan's Tasks, reduced to what decisions read: no input,
//! no output, no attestation — their digests only. The operator's cache of Plan Tasks holds
//! them trimmed ([`trim_plan_task`]), so a Plan of 128 steps with 1 MiB inputs and outputs costs
//! a few KiB per step, and a pass reads no Task from the API server.

use std::collections::BTreeMap;

use ari_crds::plan_view::LABEL_PLAN_UID;
use ari_crds::{Plan, PlanStatus, Task, TaskPhase, TaskReason};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Where the trimmed cache keeps a finished Task's attestation digest (the attestation itself
/// is dropped). Only ever in the operator's memory, never written to the API server.
pub const CACHED_ATTESTATION_SHA256: &str = "ari.dev/cached-attestation-sha256";

/// Keeps of a Plan what a pass reads. A finished Plan: its phase and reason (a pass does
/// nothing else with it); any Plan: no managedFields, labels or annotations (`kubectl apply`
/// leaves a whole copy of the spec in one). Safe: the operator writes a Plan only through its
/// status subresource, which ignores everything but the status, and only while it runs.
pub fn trim_plan(p: &mut Plan) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.metadata.labels = None;
    if p.phase().is_finished() {
        p.spec.steps = None;
        p.spec.planner = None;
        p.spec.allowed_agents = None;
        p.status = p.status.take().map(|s| PlanStatus {
            phase: s.phase,
            reason: s.reason,
            ..Default::default()
        });
    }
}

/// Keeps of a Plan's Task only what [`TaskObs::of`] reads.
pub fn trim_plan_task(t: &mut Task) {
    let attestation = t
        .status
        .as_ref()
        .and_then(|s| s.attestation.as_ref())
        .map(|a| a.sha256());
    t.metadata.managed_fields = None;
    t.metadata.annotations =
        attestation.map(|sha| BTreeMap::from([(CACHED_ATTESTATION_SHA256.to_owned(), sha)]));
    // The Plan label is what the watch selects on; the rest is the author's choice of size.
    let plan_uid = t.labels().get(LABEL_PLAN_UID).cloned();
    t.metadata.labels = plan_uid.map(|u| BTreeMap::from([(LABEL_PLAN_UID.to_owned(), u)]));
    t.spec.input = None;
    t.spec.input_base64 = None;
    t.spec.input_from = None;
    if let Some(s) = t.status.as_mut() {
        s.output = None;
        s.output_base64 = None;
        s.attestation = None;
        s.limits_applied = None;
        s.conditions.clear();
        if let Some(m) = s.message.as_mut() {
            crate::cache::clip(m, crate::task::controller::NOTE_MAX);
        }
    }
}

/// One Task of the Plan (a step attempt or the planner).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskObs {
    pub uid: String,
    pub phase: TaskPhase,
    pub reason: Option<TaskReason>,
    pub message: Option<String>,
    /// `spec.cancelled` is already set.
    pub cancelled: bool,
    pub output_sha256: Option<String>,
    pub attestation_sha256: Option<String>,
    pub fuel_used: Option<u64>,
    /// Model tokens it spent, its children's included.
    pub tokens_used: Option<u64>,
    pub completion_time: Option<Timestamp>,
}

/// The Plan's Tasks by name.
pub type Tasks = BTreeMap<String, TaskObs>;

impl TaskObs {
    /// What a Task (trimmed or not) says. Whether it is the Plan's is the decision's question
    /// (its uid must be the recorded one).
    pub fn of(task: &Task) -> (String, TaskObs) {
        let s = task.status.clone().unwrap_or_default();
        let attestation_sha256 = s
            .attestation
            .as_ref()
            .map(|a| a.sha256())
            .or_else(|| task.annotations().get(CACHED_ATTESTATION_SHA256).cloned());
        let obs = TaskObs {
            uid: task.uid().unwrap_or_default(),
            phase: task.phase(),
            reason: s.reason,
            message: s.message.clone(),
            cancelled: task.spec.cancelled == Some(true),
            output_sha256: s.output_sha256.clone(),
            attestation_sha256,
            fuel_used: s.resources_used.as_ref().map(|r| r.fuel),
            tokens_used: s.resources_used.as_ref().map(|r| r.tokens_spent()),
            completion_time: s.completion_time.as_ref().map(|t| t.0),
        };
        (task.name_any(), obs)
    }

    pub fn is_finished(&self) -> bool {
        self.phase.is_finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_finished_plan_is_cached_as_its_phase_and_a_running_one_without_annotations() {
        let big = "x".repeat(60_000);
        let plan = |phase: &str| -> Plan {
            serde_json::from_value(json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
                "metadata": {"name": "p", "namespace": "n", "uid": "u",
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": big.clone()}},
                "spec": {"steps": [{"name": "a", "agentRef": {"name": "echo"}, "input": big.clone()}]},
                "status": {"phase": phase, "history": [{"seq": 1, "time": "2026-01-01T00:00:00Z",
                    "event": "Proposed", "message": big.clone()}]}
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let size = |p: &Plan| serde_json::to_vec(p).map(|v| v.len()).unwrap_or(usize::MAX);
        let mut done = plan("Succeeded");
        trim_plan(&mut done);
        assert!(size(&done) < 1_024, "{} bytes", size(&done));
        assert!(done.phase().is_finished());
        let mut running = plan("Running");
        trim_plan(&mut running);
        assert!(running.metadata.annotations.is_none());
        assert_eq!(running.spec.steps.as_ref().map(Vec::len), Some(1));
        assert_eq!(running.status.map(|s| s.history.len()), Some(1));
    }

    #[test]
    fn a_trimmed_plan_task_keeps_digests_and_drops_input_output_and_attestation() {
        let big = "x".repeat(1 << 20);
        let mut t: Task = serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "p-a", "namespace": "n", "uid": "u1",
                "labels": {LABEL_PLAN_UID: "plan", "other": big.clone()},
                "annotations": {"a": big.clone()}},
            "spec": {"agentRef": {"name": "echo"}, "input": big.clone()},
            "status": {"phase": "Succeeded", "reason": "Completed", "output": big,
                       "outputSha256": "abc"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let (_, before) = TaskObs::of(&t);
        trim_plan_task(&mut t);
        let size = serde_json::to_vec(&t)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        assert!(size < 1_024, "{size} bytes kept");
        let (name, after) = TaskObs::of(&t);
        assert_eq!((name.as_str(), &after), ("p-a", &before));
        assert_eq!(after.output_sha256.as_deref(), Some("abc"));
    }
}
