//! A claimed Task of items (`spec.items`, see [`ari_crds::items`]): each item runs in turn as
//! its own instance, under the claim's heartbeat, and the one final write carries the results
//! document (a line per item: output, usage, signed attestation) and the counts.
//!
//! Why in turn on one slot: the Task is one unit of this executor's concurrency, as a Job's
//! pod is; many such Tasks run side by side. A lost attempt writes nothing, so a retry runs
//! every item again and no item's result is ever recorded twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ari_crds::items::{self, ItemResult, ItemsStatus};
use ari_crds::{ModelCalls, OutputRef, ResourcesUsed, TaskPhase, TaskReason, TaskStatus};
use ari_runtime::TaskOutcome;
use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::Worker;
use super::convert::{self, OutputPlacement};
use super::slots::Slot;
use super::status::{Attempt, CONFIGMAP_MAX_BYTES, WriteError};

/// What the items' runs came to, all together. The results document is written as items end,
/// so an executor holds at most a ConfigMap's worth of results (plus one item's output), not
/// every item's output at once.
#[derive(Default)]
struct Tally {
    doc: Vec<u8>,
    counts: ItemsStatus,
    used: ResourcesUsed,
    models: Vec<ModelCalls>,
    limits: Option<ari_crds::LimitsApplied>,
    cancelled: bool,
}

impl Tally {
    fn add(&mut self, index: usize, outcome: &TaskOutcome) -> Result<(), serde_json::Error> {
        let line = item_result(index, outcome);
        serde_json::to_writer(&mut self.doc, &line)?;
        self.doc.push(b'\n');
        self.counts.count += 1;
        if line.phase == TaskPhase::Succeeded {
            self.counts.succeeded += 1;
        } else {
            self.counts.failed += 1;
        }
        self.used.add(&outcome.resources_used);
        items::merge_calls(&mut self.models, &outcome.models);
        self.limits
            .get_or_insert_with(|| outcome.limits_applied.clone());
        Ok(())
    }

    /// Whether the document already holds more than a ConfigMap can: the Task fails
    /// `OutputTooLarge` without running the rest.
    fn too_large(&self) -> bool {
        self.doc.len() > CONFIGMAP_MAX_BYTES
    }
}

/// Whether a heartbeat is due before the next item: items shorter than the heartbeat interval
/// never beat inside their run, and the operator must still see the Task alive.
fn heartbeat_due(last: Option<&Time>, now: &Time, every: Duration) -> bool {
    let Some(last) = last else { return true };
    let since = now.0.as_millisecond() - last.0.as_millisecond();
    u64::try_from(since).unwrap_or(0) >= u64::try_from(every.as_millis()).unwrap_or(u64::MAX)
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
        let ran = self
            .run_each(attempt, inputs, &slot, seed, &cancel, &lost)
            .await;
        self.cancels.unregister(&attempt.uid);
        self.live.unregister(&attempt.uid);
        if lost.load(Ordering::Acquire) {
            // Logged by whoever found out: nothing of this attempt is written.
            return;
        }
        match ran {
            Ok(tally) => self.finish_items(attempt, tally).await,
            Err(message) => {
                self.finish_failed(attempt, TaskReason::HostError, message)
                    .await;
            }
        }
    }

    /// The items' runs, in turn, until all ran, the Task is cancelled or lost, or the results
    /// pass a ConfigMap's size. `Err` is the HostError message the Task fails with.
    async fn run_each(
        &self,
        attempt: &mut Attempt,
        inputs: &[String],
        slot: &Arc<Slot>,
        seed: Option<[u8; 32]>,
        cancel: &ari_runtime::CancelToken,
        lost: &AtomicBool,
    ) -> Result<Tally, String> {
        let mut tally = Tally::default();
        for (index, input) in inputs.iter().enumerate() {
            if cancel.is_cancelled() {
                tally.cancelled = true;
                break;
            }
            if !self.beat_if_due(attempt, lost).await {
                break;
            }
            let since = convert::since_created(&attempt.current);
            let mut req = self.request(attempt, input.as_bytes().to_vec(), since, slot.clone())?;
            req.id = items::item_id(&attempt.name, index);
            req.seed = seed.map(|s| items::item_seed(&s, index));
            // An item never waits for a person: a call that needs approval is rejected.
            req.approver = None;
            req.cancel = Some(cancel.clone());
            let ran = self.run_with_heartbeat(req, attempt, lost).await;
            if lost.load(Ordering::Acquire) {
                break;
            }
            let outcome = ran.map_err(|e| {
                warn!(task = %attempt.name, item = index, error = %e, "item run failed");
                e.to_string()
            })?;
            if outcome.failure.as_ref().map(|f| f.kind) == Some(ari_runtime::FailureKind::Cancelled)
            {
                tally.cancelled = true;
                break;
            }
            self.metrics.record_models(&outcome.models);
            tally
                .add(index, &outcome)
                .map_err(|e| format!("item {index}'s result could not be encoded: {e}"))?;
            if tally.too_large() {
                break;
            }
        }
        Ok(tally)
    }

    /// Refreshes the heartbeat when the last one is older than the interval. `false` when the
    /// Task is no longer this attempt's (nothing more may run or be written).
    async fn beat_if_due(&self, attempt: &mut Attempt, lost: &AtomicBool) -> bool {
        let status = attempt.current.status.as_ref();
        let last = status.and_then(|s| s.last_heartbeat_time.as_ref().or(s.start_time.as_ref()));
        if !heartbeat_due(last, &convert::now(), self.config.heartbeat) {
            return true;
        }
        match self.writer.heartbeat(attempt).await {
            Ok(()) => true,
            Err(WriteError::NotOurs(why)) => {
                lost.store(true, Ordering::Release);
                warn!(task = %attempt.name, %why, "no longer this executor's; its items' results will be dropped");
                false
            }
            Err(e) => {
                warn!(task = %attempt.name, error = %e, "heartbeat failed");
                true
            }
        }
    }

    /// The one final write: the results document (inline when small, else in the Task's
    /// output ConfigMap), the counts and the summed usage.
    async fn finish_items(&self, attempt: &mut Attempt, tally: Tally) {
        if tally.cancelled {
            let done = tally.counts.count;
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
        if tally.too_large() {
            let message = format!(
                "the results of the first {} of {} items are already over {CONFIGMAP_MAX_BYTES} \
                 bytes, more than a ConfigMap holds; the rest did not run (docs/items.md)",
                tally.counts.count,
                attempt.current.spec.items.as_ref().map_or(0, Vec::len)
            );
            return self
                .finish_failed(attempt, TaskReason::OutputTooLarge, message)
                .await;
        }
        let doc = &tally.doc;
        let output_ref = match convert::placement(doc) {
            OutputPlacement::Inline => None,
            OutputPlacement::ConfigMap => match self.writer.store_output(attempt, doc).await {
                Ok(r) => Some(r),
                Err((reason, message)) => {
                    warn!(task = %attempt.name, %message, "results not stored; failing the task");
                    return self.finish_failed(attempt, reason, message).await;
                }
            },
        };
        let counts = tally.counts.clone();
        let fill = |s: &mut TaskStatus, generation: Option<i64>| {
            let message = format!(
                "{} items ran: {} succeeded, {} failed",
                counts.count, counts.succeeded, counts.failed
            );
            let _ = s.finish(None, &message, generation, convert::now());
            record_items(s, output_ref.clone(), &tally);
            s.items = Some(counts.clone());
        };
        self.write_final(attempt, &fill, tally.used.fuel).await;
    }
}

/// What a Task of items leaves in status beside its ending: the results document (or where it
/// is), its digest, the summed usage and the models called. No Task-level attestation: each
/// item's is in its line, and the document's digest is `outputSha256`.
fn record_items(s: &mut TaskStatus, output_ref: Option<OutputRef>, tally: &Tally) {
    let doc = &tally.doc;
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
        for (i, o) in [
            outcome(b"hello", None, 5),
            outcome(&[0xff, 0xfe], None, 7),
            outcome(b"", Some(FailureKind::Trap), 1),
        ]
        .iter()
        .enumerate()
        {
            tally.add(i, o).expect("encodes");
        }
        let lines = items::parse_results(&tally.doc).expect("parses");
        assert_eq!(lines[0].output.as_deref(), Some("hello"));
        assert_eq!(lines[1].output_base64.as_deref(), Some("//4="));
        assert_eq!(
            (lines[2].phase, lines[2].reason, lines[2].message.as_deref()),
            (TaskPhase::Failed, TaskReason::Trap, Some("it trapped"))
        );
        assert_eq!(tally.counts, items::count(&lines));
        let mut s = TaskStatus::default();
        record_items(&mut s, None, &tally);
        let used = s.resources_used.unwrap_or_default();
        assert_eq!((used.fuel, used.memory_bytes), (13, 70));
        assert_eq!(
            s.output_sha256.as_deref(),
            Some(hex::encode(Sha256::digest(&tally.doc)).as_str())
        );
        // Read back and written again, the document is the same bytes (times are in seconds).
        let back = items::parse_results(s.output.as_deref().unwrap_or("").as_bytes());
        let again = items::results_document(&back.expect("parses")).expect("encodes");
        assert_eq!(again, tally.doc);
        assert!(s.attestation.is_none());
    }

    #[test]
    fn results_past_a_configmaps_size_stop_the_items_that_would_follow() {
        let mut tally = Tally::default();
        let big = vec![b'x'; 600 * 1024];
        tally.add(0, &outcome(&big, None, 1)).expect("encodes");
        assert!(!tally.too_large());
        tally.add(1, &outcome(&big, None, 1)).expect("encodes");
        assert!(tally.too_large());
    }

    #[test]
    fn a_heartbeat_is_due_between_items_once_the_last_is_an_interval_old() {
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).expect("time"));
        let every = Duration::from_secs(10);
        assert!(heartbeat_due(None, &at(100), every));
        assert!(!heartbeat_due(Some(&at(95)), &at(100), every));
        assert!(heartbeat_due(Some(&at(90)), &at(100), every));
        // A clock that went back is not a reason to beat on every item.
        assert!(!heartbeat_due(Some(&at(105)), &at(100), every));
    }
}
