//! What the Plan controller observed of a Plan's Tasks, reduced to what decisions read.

use std::collections::BTreeMap;

use ari_crds::{Task, TaskPhase, TaskReason};
use kube::ResourceExt;

/// One Task of the Plan (a step attempt or the planner).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskObs {
    pub phase: TaskPhase,
    pub reason: Option<TaskReason>,
    pub message: Option<String>,
    /// `spec.cancelled` is already set.
    pub cancelled: bool,
    /// The output bytes, when known (inline in status, or read from its ConfigMap).
    pub output: Option<Vec<u8>>,
    /// The output is in a ConfigMap, not inline (the controller reads it when needed).
    pub output_ref: Option<String>,
    pub output_sha256: Option<String>,
    pub attestation_sha256: Option<String>,
    pub fuel_used: Option<u64>,
}

/// The Plan's Tasks by name.
pub type Tasks = BTreeMap<String, TaskObs>;

impl TaskObs {
    /// What a Task says, when it is owned by the Plan of `plan_uid` (a Task merely labelled
    /// like one is not the Plan's: anyone may set labels).
    pub fn of(task: &Task, plan_uid: &str) -> Option<(String, TaskObs)> {
        let owned = task
            .owner_references()
            .iter()
            .any(|o| o.uid == plan_uid && o.controller == Some(true));
        if !owned {
            return None;
        }
        let s = task.status.clone().unwrap_or_default();
        let output = match (&s.output, &s.output_base64) {
            (Some(text), _) => Some(text.clone().into_bytes()),
            (None, Some(b64)) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b64).ok()
            }
            (None, None) if task.phase() == TaskPhase::Succeeded && s.output_ref.is_none() => {
                Some(Vec::new())
            }
            _ => None,
        };
        let obs = TaskObs {
            phase: task.phase(),
            reason: s.reason,
            message: s.message.clone(),
            cancelled: task.spec.cancelled == Some(true),
            output,
            output_ref: s.output_ref.as_ref().map(|r| r.config_map.clone()),
            output_sha256: s.output_sha256.clone(),
            attestation_sha256: s.attestation.as_ref().map(|a| a.sha256()),
            fuel_used: s.resources_used.as_ref().map(|r| r.fuel),
        };
        Some((task.name_any(), obs))
    }

    pub fn is_finished(&self) -> bool {
        self.phase.is_finished()
    }
}
