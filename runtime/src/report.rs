//! The JSON report of one run (`ari run --json`), which is also what `ari verify` checks.
//!
//! It carries everything a verifier needs to re-execute the task: the input, the requirements,
//! the limits and grants that applied, the seed (in the attestation) and the trace.

use ari_model::CapabilityName;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::attestation::Attestation;
use crate::failure::Failure;
use crate::limits::LimitsApplied;
use crate::metering::ResourcesUsed;
use crate::task::TaskOutcome;
use crate::trace::Trace;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    pub task_id: String,
    /// The input when it is UTF-8, else `inputBase64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_base64: Option<String>,
    #[serde(default)]
    pub requirements: Vec<CapabilityName>,
    /// The output when it is UTF-8, else `outputBase64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    pub limits_applied: LimitsApplied,
    /// Each model called: calls, tokens, and the endpoint and model id that answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ari_model::ModelCalls>,
    pub attestation: Attestation,
    pub trace: Trace,
    /// `{kind, message}` when the task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    #[serde(default)]
    pub logs: Vec<String>,
    /// The Agent that ran it, for a child in a delegation tree (the root's is the command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The children it started (capability `delegation`), each a report of its own, in the
    /// order they were started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<RunReport>,
}

/// A report field that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("report field `{field}` is invalid: {reason}")]
pub struct ReportError {
    pub field: &'static str,
    pub reason: String,
}

impl RunReport {
    pub fn new(outcome: TaskOutcome, input: &[u8], requirements: &[CapabilityName]) -> Self {
        let (input, input_base64) = text_or_base64(input);
        let (output, output_base64) = text_or_base64(&outcome.output);
        Self {
            task_id: outcome.task_id,
            input,
            input_base64,
            requirements: requirements.to_vec(),
            output,
            output_base64,
            output_sha256: outcome.output_sha256,
            resources_used: outcome.resources_used,
            limits_applied: outcome.limits_applied,
            models: outcome.models,
            attestation: outcome.attestation,
            trace: outcome.trace,
            error: outcome.failure,
            logs: outcome.logs,
            agent: None,
            children: Vec::new(),
        }
    }

    /// The report of a root task and every child run under it (from
    /// [`crate::local::LocalDelegator::finish`]), children nested under their parents.
    pub fn tree(
        outcome: TaskOutcome,
        input: &[u8],
        requirements: &[CapabilityName],
        runs: Vec<crate::local::ChildRun>,
    ) -> Self {
        let mut root = Self::new(outcome, input, requirements);
        let mut by_parent: std::collections::BTreeMap<String, Vec<crate::local::ChildRun>> =
            std::collections::BTreeMap::new();
        for run in runs {
            by_parent.entry(run.parent.clone()).or_default().push(run);
        }
        attach(&mut root, &mut by_parent);
        root
    }

    pub fn input_bytes(&self) -> Result<Vec<u8>, ReportError> {
        bytes_of("input", self.input.as_deref(), self.input_base64.as_deref())
    }

    pub fn output_bytes(&self) -> Result<Vec<u8>, ReportError> {
        bytes_of(
            "output",
            self.output.as_deref(),
            self.output_base64.as_deref(),
        )
    }
}

/// Nests the runs whose parent is `report` under it, in the order they were started (a child's
/// task id ends with its index), and their own children under them.
fn attach(
    report: &mut RunReport,
    by_parent: &mut std::collections::BTreeMap<String, Vec<crate::local::ChildRun>>,
) {
    let mut runs = by_parent.remove(&report.task_id).unwrap_or_default();
    runs.sort_by_key(|r| child_index(&r.outcome.task_id));
    for run in runs {
        let mut child = RunReport::new(run.outcome, &run.input, &[]);
        child.agent = Some(run.agent);
        attach(&mut child, by_parent);
        report.children.push(child);
    }
}

fn child_index(task: &str) -> u64 {
    task.rsplit('-')
        .next()
        .and_then(|i| i.parse().ok())
        .unwrap_or(u64::MAX)
}

fn text_or_base64(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(text.to_string()), None),
        Err(_) => (None, Some(STANDARD.encode(bytes))),
    }
}

fn bytes_of(
    field: &'static str,
    text: Option<&str>,
    b64: Option<&str>,
) -> Result<Vec<u8>, ReportError> {
    match (text, b64) {
        (Some(text), None) => Ok(text.as_bytes().to_vec()),
        (None, Some(b64)) => STANDARD.decode(b64).map_err(|e| ReportError {
            field,
            reason: e.to_string(),
        }),
        (None, None) => Ok(Vec::new()),
        (Some(_), Some(_)) => Err(ReportError {
            field,
            reason: "both the text and the base64 form are present".into(),
        }),
    }
}
