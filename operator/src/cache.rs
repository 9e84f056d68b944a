//! What the operator keeps of each watched object.
//!
//! The operator caches every Task of the cluster, so its memory grows with their number. It
//! decides from phase, timings, requirements and the executor's name; it never needs a Task's
//! input, output, attestation or managedFields, nor an executor pod's spec. Dropping them
//! before they are stored keeps the cache to a fraction of the objects' size.
//!
//! Safe because the operator writes only through the `status` subresource (the API server
//! ignores `spec` there) and only for Tasks that are not finished, whose output and
//! attestation do not exist yet; finished Tasks are only ever deleted.

use ari_crds::{Task, TaskPhase};
use k8s_openapi::api::core::v1::Pod;

pub fn trim_task(t: &mut Task) {
    t.metadata.managed_fields = None;
    // No decision reads a Task's labels or annotations, and their size is the author's choice.
    t.metadata.labels = None;
    t.metadata.annotations = None;
    t.spec.input = None;
    t.spec.input_base64 = None;
    if t.is_finished()
        && let Some(s) = t.status.as_mut()
    {
        s.output = None;
        s.output_base64 = None;
        s.attestation = None;
        s.limits_applied = None;
        // A failure's message becomes its Event's note (see task::controller).
        match (s.phase, s.message.as_mut()) {
            (Some(TaskPhase::Failed), Some(m)) => clip(m, crate::task::controller::NOTE_MAX),
            _ => s.message = None,
        }
        s.conditions.clear();
    }
}

/// Shortens `s` to at most `max` bytes, at a character boundary.
pub fn clip(s: &mut String, max: usize) {
    if s.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        s.truncate(cut);
    }
}

pub fn trim_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.spec = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Annotation `kubectl apply` leaves with a full copy of the object.
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

    fn task(phase: &str) -> Task {
        serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "n",
                "annotations": {LAST_APPLIED: "{...}", "keep": "me"}, "labels": {"big": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"agentRef": {"name": "a"}, "input": "x".repeat(10_000), "deadlineSeconds": 9},
            "status": {"phase": phase, "output": "out", "executor": "exec-1",
                "resourcesUsed": {"fuel": 5, "cpuMillis": 1, "memoryBytes": 1, "storageBytes": 0,
                                  "networkBytes": 0, "wallMillis": 2}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keeps_what_decisions_and_metrics_read_and_drops_labels_and_annotations() {
        let mut t = task("Succeeded");
        trim_task(&mut t);
        assert!(t.metadata.managed_fields.is_none() && t.spec.input.is_none());
        assert_eq!(t.spec.deadline_seconds, Some(9));
        assert!(t.metadata.annotations.is_none() && t.metadata.labels.is_none());
        let s = t.status.clone().unwrap_or_default();
        assert!(s.output.is_none());
        assert_eq!(s.resources_used.map(|r| r.fuel), Some(5));
        assert_eq!(s.executor.as_deref(), Some("exec-1"));
    }

    #[test]
    fn running_tasks_keep_their_status() {
        let mut t = task("Running");
        trim_task(&mut t);
        assert_eq!(
            t.status.and_then(|s| s.output).as_deref(),
            Some("out"),
            "the operator may write this status back"
        );
    }

    #[test]
    fn a_failure_keeps_a_clipped_message_for_its_event() {
        let mut t = task("Failed");
        if let Some(s) = t.status.as_mut() {
            s.message = Some("é".repeat(2_000));
        }
        trim_task(&mut t);
        let m = t.status.and_then(|s| s.message).unwrap_or_default();
        assert!(m.len() <= crate::task::controller::NOTE_MAX && m.starts_with("éé"));
        let mut ok = task("Succeeded");
        if let Some(s) = ok.status.as_mut() {
            s.message = Some("done".into());
        }
        trim_task(&mut ok);
        assert_eq!(ok.status.and_then(|s| s.message), None);
    }
}
