//! N-way verification in the executor (docs/verification.md, "N-way verification"): the same
//! seed and logical start for every replica, whose turn a replica is, and the final write that
//! records a replica, verifies the Task or fails it `VerificationMismatch`. The rules are
//! [`ari_crds::replicas`]'; this module applies them.

use ari_crds::lifecycle::NotAllowed;
use ari_crds::{OutputRef, ReplicaRecord, Task, TaskPhase, TaskReason, TaskStatus, Verdict};
use ari_runtime::TaskOutcome;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::convert;
use super::peers::Peers;

/// The seed every replica of a verified Task without `spec.seed` uses: derived from its uid,
/// so no replica has to hand it to the next (the attestation records it, as always).
pub fn shared_seed(task: &Task) -> Option<[u8; 32]> {
    if task.spec.replicas() <= 1 {
        return None;
    }
    let uid = task.uid()?;
    let mut h = Sha256::new();
    h.update(b"ari.dev/verification-seed\0");
    h.update(uid.as_bytes());
    Some(h.finalize().into())
}

/// The logical start of every replica's clock: the Task's creation, in Unix nanoseconds.
pub fn shared_start(task: &Task) -> Option<u64> {
    if task.spec.replicas() <= 1 {
        return None;
    }
    let created = task.metadata.creation_timestamp.as_ref()?;
    u64::try_from(created.0.as_nanosecond()).ok()
}

/// Whether this executor may claim `task` now: always for a plain Task, and for a verified one
/// unless a Ready peer has run fewer of its replicas (see [`ari_crds::may_run_next`]).
pub fn my_turn(task: &Task, peers: &Peers) -> bool {
    task.spec.replicas() <= 1
        || ari_crds::may_run_next(task.replicas_run(), peers.me(), &peers.ready())
}

/// What `status.replicas` lists of this run.
pub fn record(executor: &str, outcome: &TaskOutcome) -> ReplicaRecord {
    let reason = outcome
        .failure
        .as_ref()
        .map_or(TaskReason::Completed, |f| f.kind.into());
    ReplicaRecord {
        executor: executor.to_owned(),
        phase: if reason == TaskReason::Completed {
            TaskPhase::Succeeded
        } else {
            TaskPhase::Failed
        },
        reason,
        output_sha256: outcome.output_sha256.clone(),
        trace_sha256: outcome.trace.sha256_hex(),
        attestation_sha256: outcome.attestation.sha256(),
        fuel: outcome.resources_used.fuel,
    }
}

/// The verdict on this run, from the replicas `status` holds.
pub fn judge(task: &Task, status: &TaskStatus, record: &ReplicaRecord) -> Verdict {
    ari_crds::verdict(task.spec.replicas(), &status.replicas, record)
}

/// Whether the run's output (and trace) is the Task's: not for a replica that only waits for
/// the next one, nor for one that disagreed (no output is shown then).
pub fn keeps_output(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Ends | Verdict::Verified(_))
}

/// Writes the run's ending into the Running `status` as its verdict says: a plain ending (the
/// replica listed when the Task is verified), the next replica's turn, `Verified`, or
/// `VerificationMismatch` with the run's usage and attestation but no output.
pub fn write_ending(
    s: &mut TaskStatus,
    task: &Task,
    record: &ReplicaRecord,
    outcome: &TaskOutcome,
    output_ref: Option<OutputRef>,
    generation: Option<i64>,
) -> Result<(), NotAllowed> {
    let now = convert::now();
    match judge(task, s, record) {
        Verdict::Ends => {
            if task.spec.replicas() > 1 {
                s.replicas.push(record.clone());
            }
            convert::finish_with_outcome(s, generation, outcome, output_ref)
        }
        Verdict::Next => s.replicate(record.clone(), task.spec.replicas(), generation, now),
        Verdict::Verified(message) => s
            .verified(record.clone(), &message, generation, now)
            .map(|()| convert::record_outcome(s, outcome, output_ref)),
        Verdict::Mismatch(message) => s
            .mismatch(record.clone(), &message, generation, now)
            .map(|()| convert::record_usage(s, outcome)),
    }
}
