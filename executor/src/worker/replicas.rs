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

#[cfg(test)]
mod tests {
    use ari_crds::conditions::{self, VERIFIED};
    use ari_crds::{Attestation, TaskSpec, Verification};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn task(replicas: u32) -> Task {
        let mut t = Task::new("t", TaskSpec::for_agent("echo"));
        t.spec.verification = Some(Verification { replicas });
        t.metadata.uid = Some("uid-1".into());
        t.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_000).expect("time")));
        t
    }

    fn outcome(output: &[u8]) -> TaskOutcome {
        TaskOutcome {
            task_id: "t".into(),
            output: output.to_vec(),
            output_sha256: hex::encode(Sha256::digest(output)),
            resources_used: Default::default(),
            limits_applied: Default::default(),
            attestation: Attestation {
                payload: String::new(),
                payload_type: String::new(),
                signatures: Vec::new(),
            },
            failure: None,
            estimate: None,
            trace: Default::default(),
            logs: Vec::new(),
            children: Vec::new(),
            delegations_refused: 0,
            models: Vec::new(),
            input_required: false,
            output_not_kept: false,
            storage_conflict: false,
        }
    }

    #[test]
    fn replicas_of_one_task_share_seed_and_start_and_a_plain_task_gets_neither() {
        let verified = task(2);
        assert_eq!(shared_seed(&verified), shared_seed(&verified.clone()));
        assert!(shared_seed(&verified).is_some());
        let mut other = task(2);
        other.metadata.uid = Some("uid-2".into());
        assert_ne!(
            shared_seed(&verified),
            shared_seed(&other),
            "seeds differ per Task"
        );
        assert_eq!(shared_start(&verified), Some(1_000_000_000_000));
        let plain = task(1);
        assert_eq!((shared_seed(&plain), shared_start(&plain)), (None, None));
    }

    /// Two replicas through the real final-write function: the first requeues with its record,
    /// the second (same output) verifies and shows the output; a different output instead
    /// fails the Task and shows none.
    #[test]
    fn the_final_write_requeues_then_verifies_or_fails_on_a_mismatch() {
        let t = task(2);
        let mut s = TaskStatus::default();
        s.claim("exec-a", None, convert::now()).expect("claim");
        let first = outcome(b"same");
        let r = record("exec-a", &first);
        write_ending(&mut s, &t, &r, &first, None, None).expect("replicate");
        assert_eq!(s.current_phase(), TaskPhase::Pending);
        assert_eq!(s.output, None, "a replica that waits shows no output");
        let after_first = s.clone();

        s.claim("exec-b", None, convert::now()).expect("claim");
        let r = record("exec-b", &first);
        write_ending(&mut s, &t, &r, &first, None, None).expect("verify");
        assert_eq!(s.current_phase(), TaskPhase::Succeeded);
        assert_eq!(s.output.as_deref(), Some("same"));
        assert!(conditions::is_true(&s.conditions, VERIFIED));

        let mut s = after_first;
        s.claim("exec-b", None, convert::now()).expect("claim");
        let other = outcome(b"different");
        let r = record("exec-b", &other);
        write_ending(&mut s, &t, &r, &other, None, None).expect("mismatch");
        assert_eq!(s.reason, Some(TaskReason::VerificationMismatch));
        assert_eq!(s.output, None, "which output would be trusted?");
        let message = s.message.clone().unwrap_or_default();
        assert!(
            message.contains("exec-a") && message.contains("exec-b"),
            "{message}"
        );
    }
}
