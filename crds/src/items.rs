//! A Task of many inputs (`spec.items`): each item runs as its own instance, in turn, on the
//! executor that claimed the Task, so a thousand small inputs cost one create, one claim and
//! one final write instead of a thousand of each (issue 29, item 3; docs/items.md).
//!
//! Why a Task and not a new kind: everything that makes a Task trustworthy — the claim that
//! only one executor wins, heartbeats, `ExecutorLost` and retries, cancellation, deadline,
//! admission against the Agent's grants — applies to the whole as it is. What is per item is
//! the run: its own instance, limits, seed and signed attestation, listed in the results
//! document that is the Task's output (one [`ItemResult`] per line, in item order).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use ari_model::{merge_calls, sha256_hex};

use crate::admission::Refusal;
use crate::agent::AgentSpec;
use crate::task::{Attestation, ResourcesUsed, Task, TaskPhase, TaskReason};

/// Most items one Task may hold: each result line carries a signed attestation (≈ 1.5 KiB), and
/// the results document must fit the 1 MiB a ConfigMap holds.
pub const MAX_ITEMS: usize = 256;
/// Longest item, in bytes of UTF-8: 256 of them fit an object the API server accepts.
pub const ITEM_MAX_BYTES: usize = 4096;
/// Media type of the results document (`status.output` or its ConfigMap).
pub const RESULTS_MEDIA_TYPE: &str = "application/jsonl";

/// What a Task of items ran, counted (`status.items`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ItemsStatus {
    /// Items in `spec.items`.
    #[schemars(range(max = 256))]
    pub count: u32,
    /// Items whose run ended `Succeeded`.
    #[schemars(range(max = 256))]
    pub succeeded: u32,
    /// Items whose run ended otherwise (`Failed` or `Cancelled`): see their lines.
    #[schemars(range(max = 256))]
    pub failed: u32,
}

/// One item's result: a line of the results document. Its `attestation` is the same DSSE
/// envelope a Task's run gets, its identity `task.name` is [`item_id`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ItemResult {
    pub index: u32,
    pub phase: TaskPhase,
    pub reason: TaskReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// UTF-8 output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Output that is not UTF-8, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    pub attestation: Attestation,
    pub completion_time: Time,
}

/// The name item `index` of Task `task` runs under: the guest's `task-spec.id` and the signed
/// `task.name`. A `/` never occurs in a Task's name, so no item is mistaken for a Task.
pub fn item_id(task: &str, index: usize) -> String {
    format!("{task}/{index}")
}

/// Item `index`'s seed when the Task names one: SHA-256 of the Task's seed, `/` and the index,
/// so items differ and each is replayable from what its attestation records.
pub fn item_seed(seed: &[u8; 32], index: usize) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed);
    h.update(b"/");
    h.update(index.to_string().as_bytes());
    h.finalize().into()
}

/// Refuses items on an Agent whose grants tie a run to the Task as a whole: storage (its commit
/// receipt is the Task's) and delegation (children name the Task as their parent). Approvals
/// are not refused: an item never waits for a person, so a call needing one is rejected.
pub fn items_allowed(task: &Task, agent: &AgentSpec) -> Result<(), Refusal> {
    if task.spec.items.is_none() {
        return Ok(());
    }
    let grants = &agent.capabilities;
    let what = if grants.storage.is_some() {
        "an Agent granted storage (a commit is recorded for the Task, not for an item)"
    } else if grants.delegation.is_some() {
        "an Agent granted delegation (children name the Task, not an item, as their parent)"
    } else {
        return Ok(());
    };
    Err(Refusal {
        reason: TaskReason::CapabilityDenied,
        message: format!("spec.items is not supported for {what}; see docs/items.md"),
    })
}

/// The counts of `results`, for `status.items`.
pub fn count(results: &[ItemResult]) -> ItemsStatus {
    let succeeded = results
        .iter()
        .filter(|r| r.phase == TaskPhase::Succeeded)
        .count();
    let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    ItemsStatus {
        count: n(results.len()),
        succeeded: n(succeeded),
        failed: n(results.len() - succeeded),
    }
}

/// The results document: one JSON object per line, in item order.
pub fn results_document(results: &[ItemResult]) -> Result<Vec<u8>, serde_json::Error> {
    let mut doc = Vec::new();
    for r in results {
        serde_json::to_writer(&mut doc, r)?;
        doc.push(b'\n');
    }
    Ok(doc)
}

/// Reads a results document back (the CLI and tests).
pub fn parse_results(doc: &[u8]) -> Result<Vec<ItemResult>, serde_json::Error> {
    doc.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(serde_json::from_slice)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskSpec;

    fn result(index: u32, phase: TaskPhase) -> ItemResult {
        ItemResult {
            index,
            phase,
            reason: if phase == TaskPhase::Succeeded {
                TaskReason::Completed
            } else {
                TaskReason::Trap
            },
            message: None,
            output: Some(format!("out {index}")),
            output_base64: None,
            output_sha256: "00".into(),
            resources_used: ResourcesUsed::default(),
            attestation: Attestation {
                payload: "cA==".into(),
                payload_type: "application/vnd.in-toto+json".into(),
                signatures: Vec::new(),
            },
            completion_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn the_results_document_reads_back_line_by_line_and_is_counted() {
        let results = vec![
            result(0, TaskPhase::Succeeded),
            result(1, TaskPhase::Failed),
            result(2, TaskPhase::Succeeded),
        ];
        let doc = results_document(&results).expect("encodes");
        assert_eq!(doc.iter().filter(|b| **b == b'\n').count(), 3);
        assert_eq!(parse_results(&doc).expect("parses"), results);
        assert_eq!(
            count(&results),
            ItemsStatus {
                count: 3,
                succeeded: 2,
                failed: 1
            }
        );
    }

    #[test]
    fn items_get_distinct_ids_and_seeds_derived_from_the_tasks() {
        let seed = [7u8; 32];
        assert_eq!(item_id("t", 3), "t/3");
        assert_ne!(item_seed(&seed, 0), item_seed(&seed, 1));
        assert_eq!(item_seed(&seed, 1), item_seed(&seed, 1));
        assert_ne!(item_seed(&seed, 1), item_seed(&[8u8; 32], 1));
    }

    #[test]
    fn items_are_refused_for_agents_granted_storage_or_delegation_only() {
        let agent = |caps: serde_json::Value| -> AgentSpec {
            serde_json::from_value(serde_json::json!({
                "module": {"configMap": {"name": "m", "key": "k"}},
                "capabilities": caps,
            }))
            .unwrap_or_else(|e| panic!("agent: {e}"))
        };
        let mut task = Task::new("t", TaskSpec::for_agent("a"));
        task.spec.items = Some(vec!["x".into()]);
        let storage = items_allowed(
            &task,
            &agent(serde_json::json!({"storage": {"maxBytes": 1}})),
        );
        assert!(matches!(&storage, Err(r) if r.message.contains("storage")));
        assert!(items_allowed(&task, &agent(serde_json::json!({}))).is_ok());
        // A Task without items is not this rule's business.
        task.spec.items = None;
        assert!(
            items_allowed(
                &task,
                &agent(serde_json::json!({"storage": {"maxBytes": 1}}))
            )
            .is_ok()
        );
    }
}
