//! A claimed Task of items (`spec.items`, see [`ari_crds::items`]): each item runs in turn as
//! its own instance, under the claim's heartbeat, and the one final write carries the results
//! document (a line per item: output, usage, signed attestation) and the counts.
//!
//! Why in turn on one slot: the Task is one unit of this executor's concurrency, as a Job's
//! pod is; many such Tasks run side by side. A lost attempt writes nothing, so a retry runs
//! every item again and no item's result is ever recorded twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ari_crds::items::{self, ItemResult};
use ari_crds::{ModelCalls, OutputRef, ResourcesUsed, TaskReason, TaskStatus};
use ari_runtime::TaskOutcome;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::Worker;
use super::convert::{self, OutputPlacement};
use super::slots::Slot;
use super::status::Attempt;

/// What the items' runs came to, all together.
#[derive(Default)]
struct Tally {
    results: Vec<ItemResult>,
    used: ResourcesUsed,
    models: Vec<ModelCalls>,
    limits: Option<ari_crds::LimitsApplied>,
    cancelled: bool,
}

impl Tally {
    fn add(&mut self, index: usize, outcome: &TaskOutcome) {
        self.used.add(&outcome.resources_used);
        items::merge_calls(&mut self.models, &outcome.models);
        self.limits
            .get_or_insert_with(|| outcome.limits_applied.clone());
        self.results.push(item_result(index, outcome));
    }
}

/// One item's line of the results document.
fn item_result(index: usize, outcome: &TaskOutcome) -> ItemResult {
    let ending = ari_crds::Ending::of(
        outcome.failure.as_ref().map(|f| f.kind),
        outcome.input_required,
    );
    let (output, output_base64) = match std::str::from_utf8(&outcome.output) {
        _ if outcome.output.is_empty() => (None, None),
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&outcome.output)),
        ),
    };
    ItemResult {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        phase: ending.phase,
        reason: ending.reason,
        message: outcome.failure.as_ref().map(|f| f.message.clone()),
        output,
        output_base64,
        output_sha256: outcome.output_sha256.clone(),
        resources_used: outcome.resources_used,
        attestation: outcome.attestation.clone(),
        completion_time: convert::now(),
    }
}

impl Worker {
    /// Runs every item of the claimed Task in turn, then writes its ending once. Cancelled
    /// between or during items, the Task ends `Cancelled` with no output, as a Task does.
    pub(super) async fn run_items(
        &self,
        attempt: &mut Attempt,
        inputs: &[String],
        slot: Arc<Slot>,
    ) {
        let seed = match convert::seed(&attempt.current) {
            Ok(seed) => seed,
            Err(message) => {
                return self
                    .finish_failed(attempt, TaskReason::HostError, message)
                    .await;
            }
        };
        let cancel = self
            .cancels
            .register(&attempt.uid, attempt.current.is_cancelled());
        self.live.register(&attempt.uid, &attempt.current);
        let lost = AtomicBool::new(false);
        let mut tally = Tally::default();
        for (index, input) in inputs.iter().enumerate() {
            if cancel.is_cancelled() {
                tally.cancelled = true;
                break;
            }
            let since = convert::since_created(&attempt.current);
            let mut req =
                match self.request(attempt, input.as_bytes().to_vec(), since, slot.clone()) {
                    Ok(req) => req,
                    Err(message) => {
                        self.cancels.unregister(&attempt.uid);
                        self.live.unregister(&attempt.uid);
                        return self
                            .finish_failed(attempt, TaskReason::HostError, message)
                            .await;
                    }
                };
            req.id = items::item_id(&attempt.name, index);
            req.seed = seed.map(|s| items::item_seed(&s, index));
            // An item never waits for a person: a call that needs approval is rejected.
            req.approver = None;
            req.cancel = Some(cancel.clone());
            let ran = self.run_with_heartbeat(req, attempt, &lost).await;
            if lost.load(Ordering::Acquire) {
                // Logged by the heartbeat that found out: nothing of this attempt is written.
                break;
            }
            match ran {
                Ok(outcome)
                    if outcome.failure.as_ref().map(|f| f.kind)
                        == Some(ari_runtime::FailureKind::Cancelled) =>
                {
                    tally.cancelled = true;
                    break;
                }
                Ok(outcome) => {
                    self.metrics.record_models(&outcome.models);
                    tally.add(index, &outcome);
                }
                Err(e) => {
                    warn!(task = %attempt.name, item = index, error = %e, "item run failed");
                    self.cancels.unregister(&attempt.uid);
                    self.live.unregister(&attempt.uid);
                    return self
                        .finish_failed(attempt, TaskReason::HostError, e.to_string())
                        .await;
                }
            }
        }
        self.cancels.unregister(&attempt.uid);
        self.live.unregister(&attempt.uid);
        if lost.load(Ordering::Acquire) {
            return;
        }
        self.finish_items(attempt, tally).await;
    }

    /// The one final write: the results document (inline when small, else in the Task's
    /// output ConfigMap), the counts and the summed usage.
    async fn finish_items(&self, attempt: &mut Attempt, tally: Tally) {
        if tally.cancelled {
            let done = tally.results.len();
            let message = format!("cancelled after {done} item(s); their results are dropped");
            let fill = move |s: &mut TaskStatus, generation: Option<i64>| {
                let _ = s.finish(
                    Some(TaskReason::Cancelled),
                    &message,
                    generation,
                    convert::now(),
                );
            };
            return self.write_final(attempt, &fill, tally.used.fuel).await;
        }
        let doc = match items::results_document(&tally.results) {
            Ok(doc) => doc,
            Err(e) => {
                let message = format!("the results document could not be encoded: {e}");
                return self
                    .finish_failed(attempt, TaskReason::HostError, message)
                    .await;
            }
        };
        let output_ref = match convert::placement(&doc) {
            OutputPlacement::Inline => None,
            OutputPlacement::ConfigMap => match self.writer.store_output(attempt, &doc).await {
                Ok(r) => Some(r),
                Err((reason, message)) => {
                    warn!(task = %attempt.name, %message, "results not stored; failing the task");
                    return self.finish_failed(attempt, reason, message).await;
                }
            },
        };
        let counts = items::count(&tally.results);
        let fill = |s: &mut TaskStatus, generation: Option<i64>| {
            let message = format!(
                "{} items ran: {} succeeded, {} failed",
                counts.count, counts.succeeded, counts.failed
            );
            let _ = s.finish(None, &message, generation, convert::now());
            record_items(s, &doc, output_ref.clone(), &tally);
            s.items = Some(counts.clone());
        };
        self.write_final(attempt, &fill, tally.used.fuel).await;
    }
}

/// What a Task of items leaves in status beside its ending: the results document (or where it
/// is), its digest, the summed usage and the models called. No Task-level attestation: each
/// item's is in its line, and the document's digest is `outputSha256`.
fn record_items(s: &mut TaskStatus, doc: &[u8], output_ref: Option<OutputRef>, tally: &Tally) {
    s.output = None;
    s.output_base64 = None;
    s.output_ref = output_ref.clone();
    if output_ref.is_none() {
        // The document is JSON: UTF-8.
        s.output = Some(String::from_utf8_lossy(doc).into_owned());
    }
    s.output_sha256 = Some(hex::encode(Sha256::digest(doc)));
    s.duration = Some(ari_crds::format_duration_millis(tally.used.wall_millis));
    s.resources_used = Some(tally.used);
    s.limits_applied = tally.limits.clone();
    s.attestation = None;
    s.models = tally
        .models
        .iter()
        .take(ari_crds::task::MAX_LISTED_MODELS)
        .cloned()
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::TaskPhase;
    use ari_runtime::{Failure, FailureKind};

    fn outcome(output: &[u8], failure: Option<FailureKind>, fuel: u64) -> TaskOutcome {
        TaskOutcome {
            task_id: "t/0".into(),
            output: output.to_vec(),
            output_sha256: hex::encode(Sha256::digest(output)),
            resources_used: ResourcesUsed {
                fuel,
                memory_bytes: fuel * 10,
                ..ResourcesUsed::default()
            },
            limits_applied: Default::default(),
            models: Vec::new(),
            attestation: ari_crds::Attestation {
                payload: "cA==".into(),
                payload_type: "application/vnd.in-toto+json".into(),
                signatures: Vec::new(),
            },
            failure: failure.map(|k| Failure::new(k, "it trapped")),
            estimate: None,
            trace: Default::default(),
            logs: Vec::new(),
            children: Vec::new(),
            delegations_refused: 0,
            input_required: false,
            output_not_kept: false,
            storage_conflict: false,
        }
    }

    #[test]
    fn each_item_gets_its_line_and_the_task_the_sums_and_the_documents_digest() {
        let mut tally = Tally::default();
        tally.add(0, &outcome(b"hello", None, 5));
        tally.add(1, &outcome(&[0xff, 0xfe], None, 7));
        tally.add(2, &outcome(b"", Some(FailureKind::Trap), 1));
        let lines = &tally.results;
        assert_eq!(lines[0].output.as_deref(), Some("hello"));
        assert_eq!(lines[1].output_base64.as_deref(), Some("//4="));
        assert_eq!(
            (lines[2].phase, lines[2].reason, lines[2].message.as_deref()),
            (TaskPhase::Failed, TaskReason::Trap, Some("it trapped"))
        );
        let doc = items::results_document(&tally.results).expect("encodes");
        let mut s = TaskStatus::default();
        record_items(&mut s, &doc, None, &tally);
        let used = s.resources_used.unwrap_or_default();
        assert_eq!((used.fuel, used.memory_bytes), (13, 70));
        assert_eq!(
            s.output_sha256.as_deref(),
            Some(hex::encode(Sha256::digest(&doc)).as_str())
        );
        // Read back and written again, the document is the same bytes (times are in seconds).
        let back = items::parse_results(s.output.as_deref().unwrap_or("").as_bytes());
        let again = items::results_document(&back.expect("parses")).expect("encodes");
        assert_eq!(again, doc);
        assert!(s.attestation.is_none());
    }
}
