//! The Task state machine, in one place: every status transition the operator or an executor
//! writes is a method here, and each refuses the phases it does not start from.
//!
//! ```text
//!   Pending ──claim──▶ Running ──finish──▶ Succeeded (Completed | InputRequired) | Failed
//!      │  ▲              │ │
//!      │  ├───requeue────┤ └──fail──▶ Failed
//!      │  └──replicate───┘   (a verified Task's replica recorded; the next one runs)
//!      ├────────fail───────────────▶ Failed
//!      └────────cancel─────────────▶ Cancelled   (Running ──finish──▶ Cancelled, too)
//! ```
//! Both writers race on the same object; the API server's resourceVersion check decides who
//! wins, and these rules decide what the winner may write: a claim only of a Pending Task, a
//! heartbeat, requeue or finish only of a Running one, nothing after the end.
//!
//! A write is either the whole status (`replace_status` of a Task changed by these methods) or
//! a merge patch made by [`TaskStatus::patch`] from one of them: no status bytes are written
//! any other way.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value, json};

use crate::a2a::LiveLog;
use crate::conditions::{self, ConditionStatus};
use crate::replicas::ReplicaRecord;
use crate::task::{Decision, PendingApproval, Task, TaskPhase, TaskReason, TaskStatus};

/// Longest `status.message` (and condition message) written; longer ones end in `…`.
pub const MESSAGE_MAX_BYTES: usize = 1024;

/// The `Succeeded` condition's reason while a Task waits for another claim.
pub const REQUEUED: &str = "Requeued";

/// A transition the Task's current phase does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {event} a Task that is {from}")]
pub struct NotAllowed {
    pub event: &'static str,
    pub from: TaskPhase,
}

/// Why [`TaskStatus::patch`] made no patch.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error(transparent)]
    NotAllowed(#[from] NotAllowed),
    /// The status does not encode as JSON (cannot happen with these types; not panicking).
    #[error("cannot encode the Task status: {0}")]
    Encode(#[from] serde_json::Error),
}

impl Task {
    /// An executor may claim the Task: it is Pending, not cancelled and not being deleted.
    pub fn is_claimable(&self) -> bool {
        !self.is_cancelled() && self.phase() == TaskPhase::Pending
    }
}

impl TaskStatus {
    /// The phase, `Pending` when none was written yet.
    pub fn current_phase(&self) -> TaskPhase {
        self.phase.unwrap_or_default()
    }

    fn require(&self, event: &'static str, from: &[TaskPhase]) -> Result<(), NotAllowed> {
        let phase = self.current_phase();
        if from.contains(&phase) {
            Ok(())
        } else {
            Err(NotAllowed { event, from: phase })
        }
    }

    /// Pending → Running on `executor`; returns the attempt number (1 on the first run).
    pub fn claim(
        &mut self,
        executor: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<u32, NotAllowed> {
        self.require("claim", &[TaskPhase::Pending])?;
        let attempt = self.attempts.unwrap_or(0).saturating_add(1);
        self.phase = Some(TaskPhase::Running);
        self.reason = None;
        self.message = Some(format!("running on {executor}"));
        self.executor = Some(executor.to_owned());
        self.attempts = Some(attempt);
        self.start_time = Some(now.clone());
        self.last_heartbeat_time = Some(now);
        self.observed_generation = generation;
        Ok(attempt)
    }

    /// Whether this is attempt `attempt` on `executor`, still Running: the only state in which
    /// that executor may write.
    pub fn is_attempt(&self, executor: &str, attempt: u32) -> bool {
        self.current_phase() == TaskPhase::Running
            && self.executor.as_deref() == Some(executor)
            && self.attempts == Some(attempt)
    }

    /// Running: the executor is alive.
    pub fn heartbeat(&mut self, now: Time) -> Result<(), NotAllowed> {
        self.require("heartbeat", &[TaskPhase::Running])?;
        self.last_heartbeat_time = Some(now);
        Ok(())
    }

    /// Running: the newest guest log lines, for live readers (`status.liveLog`).
    pub fn publish_live_log(&mut self, log: &LiveLog) -> Result<(), NotAllowed> {
        self.require("publish the live log of", &[TaskPhase::Running])?;
        self.live_log = Some(log.clone());
        Ok(())
    }

    /// Running: a call waits for a person's decision (`status.pendingApproval`).
    pub fn await_approval(
        &mut self,
        pending: PendingApproval,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("await an approval for", &[TaskPhase::Running])?;
        let message = clip(&format!(
            "{} waits for approval (kubectl ari approve|reject)",
            pending.describe()
        ));
        self.pending_approval = Some(pending);
        conditions::set(
            &mut self.conditions,
            conditions::AWAITING_APPROVAL,
            ConditionStatus::True,
            "ApprovalRequested",
            message,
            generation,
            now,
        );
        Ok(())
    }

    /// Running: the waiting call was decided (or the wait ended without a decision: `None`).
    pub fn approval_decided(
        &mut self,
        decision: Option<Decision>,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("record an approval for", &[TaskPhase::Running])?;
        let call = self
            .pending_approval
            .take()
            .map(|p| p.call)
            .unwrap_or_default();
        let reason = decision.map_or("NotDecided".to_owned(), |d| d.to_string());
        conditions::set(
            &mut self.conditions,
            conditions::AWAITING_APPROVAL,
            ConditionStatus::False,
            &reason,
            format!("call {call}: {reason}"),
            generation,
            now,
        );
        Ok(())
    }

    /// Records that child `index` of this (parent) Task is the Task with `uid`. Any phase: the
    /// record is true whichever attempt reads it, so it is not a transition.
    pub fn record_child(&mut self, index: u32, uid: &str) {
        self.child_uids.insert(index.to_string(), uid.to_owned());
    }

    /// The JSON merge patch that makes `transition` of this status: the fields it changed
    /// (a removed one as `null`), guarded by `resource_version` when given (the API server
    /// then answers 409 if the Task changed since the version the transition was decided on).
    /// The one place status patches are made, so no writer can skip the state machine.
    pub fn patch(
        &self,
        resource_version: Option<&str>,
        transition: impl FnOnce(&mut TaskStatus) -> Result<(), NotAllowed>,
    ) -> Result<Value, PatchError> {
        let mut next = self.clone();
        transition(&mut next)?;
        let status = merge_diff(&serde_json::to_value(self)?, &serde_json::to_value(&next)?);
        Ok(match resource_version {
            Some(rv) => json!({"metadata": {"resourceVersion": rv}, "status": status}),
            None => json!({"status": status}),
        })
    }

    /// Running → Pending after the executor was lost with retries left.
    pub fn requeue(
        &mut self,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("requeue", &[TaskPhase::Running])?;
        let message = clip(message);
        self.phase = Some(TaskPhase::Pending);
        self.executor = None;
        self.last_heartbeat_time = None;
        self.message = Some(message.clone());
        self.observed_generation = generation;
        conditions::set(
            &mut self.conditions,
            conditions::SUCCEEDED,
            ConditionStatus::Unknown,
            REQUEUED,
            message,
            generation,
            now,
        );
        Ok(())
    }

    /// Running → Pending with replica `record` of `wanted` recorded, for the next replica's
    /// claim (`spec.verification`). The run's output is not kept: only the last replica's is.
    pub fn replicate(
        &mut self,
        record: ReplicaRecord,
        wanted: u32,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("replicate", &[TaskPhase::Running])?;
        let message = format!(
            "replica {} of {wanted} ran on {}; waiting for the next",
            self.replicas.len() + 1,
            record.executor
        );
        self.replicas.push(record);
        self.phase = Some(TaskPhase::Pending);
        self.executor = None;
        self.last_heartbeat_time = None;
        self.pending_approval = None;
        self.message = Some(message.clone());
        self.observed_generation = generation;
        conditions::set(
            &mut self.conditions,
            conditions::VERIFIED,
            ConditionStatus::Unknown,
            "Replicating",
            message,
            generation,
            now,
        );
        Ok(())
    }

    /// Running → Succeeded/`Completed`, replicas agreeing: replica `record` (the last) is
    /// recorded and `Verified=True` names them (`message`). The output is the caller's to set.
    pub fn verified(
        &mut self,
        record: ReplicaRecord,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("verify", &[TaskPhase::Running])?;
        self.replicas.push(record);
        self.end(
            TaskPhase::Succeeded,
            TaskReason::Completed,
            "completed",
            generation,
            now.clone(),
        );
        conditions::set(
            &mut self.conditions,
            conditions::VERIFIED,
            ConditionStatus::True,
            "ReplicasAgree",
            clip(message),
            generation,
            now,
        );
        Ok(())
    }

    /// Running → Failed `VerificationMismatch`: replica `record` disagreed with the earlier
    /// ones (`message` names the executors on each side). No output is shown: which would be
    /// trusted?
    pub fn mismatch(
        &mut self,
        record: ReplicaRecord,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("fail", &[TaskPhase::Running])?;
        self.replicas.push(record);
        self.end(
            TaskPhase::Failed,
            TaskReason::VerificationMismatch,
            message,
            generation,
            now.clone(),
        );
        conditions::set(
            &mut self.conditions,
            conditions::VERIFIED,
            ConditionStatus::False,
            TaskReason::VerificationMismatch.as_str(),
            clip(message),
            generation,
            now,
        );
        Ok(())
    }

    /// Pending or Running → Failed with `reason`, without (or instead of) a run's result.
    pub fn fail(
        &mut self,
        reason: TaskReason,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("fail", &[TaskPhase::Pending, TaskPhase::Running])?;
        self.end(TaskPhase::Failed, reason, message, generation, now);
        Ok(())
    }

    /// Running → the run's ending: `Succeeded`/`Completed` or `Failed`/its reason. The output,
    /// usage and attestation are the caller's to set beside it.
    pub fn finish(
        &mut self,
        failure: Option<TaskReason>,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("finish", &[TaskPhase::Running])?;
        match failure {
            None => self.end(
                TaskPhase::Succeeded,
                TaskReason::Completed,
                message,
                generation,
                now,
            ),
            Some(TaskReason::Cancelled) => self.end(
                TaskPhase::Cancelled,
                TaskReason::Cancelled,
                message,
                generation,
                now,
            ),
            // The turn succeeded and asks for input: a reply is a new Task (`spec.continues`).
            Some(TaskReason::InputRequired) => self.end(
                TaskPhase::Succeeded,
                TaskReason::InputRequired,
                message,
                generation,
                now,
            ),
            Some(reason) => self.end(TaskPhase::Failed, reason, message, generation, now),
        }
        Ok(())
    }

    /// Pending → Cancelled: cancelled before any executor claimed it (a Running Task is the
    /// executor's to stop; it ends through [`TaskStatus::finish`]).
    pub fn cancel(
        &mut self,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Result<(), NotAllowed> {
        self.require("cancel", &[TaskPhase::Pending])?;
        self.end(
            TaskPhase::Cancelled,
            TaskReason::Cancelled,
            message,
            generation,
            now,
        );
        Ok(())
    }

    fn end(
        &mut self,
        phase: TaskPhase,
        reason: TaskReason,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) {
        let message = clip(message);
        self.phase = Some(phase);
        self.reason = Some(reason);
        // A call still waiting waits no more: the run is over.
        self.pending_approval = None;
        self.message = Some(message.clone());
        self.completion_time = Some(now.clone());
        self.observed_generation = generation;
        conditions::set(
            &mut self.conditions,
            conditions::SUCCEEDED,
            ConditionStatus::from(phase == TaskPhase::Succeeded),
            reason.as_str(),
            message,
            generation,
            now,
        );
    }
}

/// The merge patch (RFC 7386) that turns `before` into `after`: changed and new fields, removed
/// ones as `null`, objects recursively; anything else (arrays included) is replaced whole.
fn merge_diff(before: &Value, after: &Value) -> Value {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        return after.clone();
    };
    let mut out = Map::new();
    for (key, new) in a {
        match b.get(key) {
            Some(old) if old == new => {}
            Some(old) => {
                out.insert(key.clone(), merge_diff(old, new));
            }
            None => {
                out.insert(key.clone(), new.clone());
            }
        }
    }
    for key in b.keys().filter(|k| !a.contains_key(*k)) {
        out.insert(key.clone(), Value::Null);
    }
    Value::Object(out)
}

/// `message`, cut to [`MESSAGE_MAX_BYTES`] on a character boundary.
fn clip(message: &str) -> String {
    if message.len() <= MESSAGE_MAX_BYTES {
        return message.to_owned();
    }
    let mut end = MESSAGE_MAX_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn now() -> Time {
        Time(Timestamp::UNIX_EPOCH)
    }

    fn status(phase: TaskPhase) -> TaskStatus {
        let mut s = TaskStatus::default();
        if phase != TaskPhase::Pending {
            s.claim("pod-a", Some(1), now())
                .expect("claim a pending task");
        }
        match phase {
            TaskPhase::Succeeded => s.finish(None, "done", Some(1), now()),
            TaskPhase::Failed => s.fail(TaskReason::Trap, "boom", Some(1), now()),
            TaskPhase::Cancelled => s.finish(Some(TaskReason::Cancelled), "stop", Some(1), now()),
            _ => Ok(()),
        }
        .expect("reach the phase");
        s
    }

    type Event = (&'static str, fn(&mut TaskStatus) -> Result<(), NotAllowed>);

    fn pending() -> PendingApproval {
        PendingApproval::new(
            "0-abc".into(),
            &crate::task::CallSubject::Tool {
                server: "files".into(),
                tool: "wipe".into(),
            },
            "{}",
            now(),
        )
    }

    fn record() -> ReplicaRecord {
        ReplicaRecord {
            executor: "pod-a".into(),
            phase: TaskPhase::Succeeded,
            reason: TaskReason::Completed,
            output_sha256: "o".into(),
            trace_sha256: "t".into(),
            attestation_sha256: "a".into(),
            fuel: 1,
        }
    }

    const EVENTS: [Event; 13] = [
        ("replicate", |s| s.replicate(record(), 2, Some(1), now())),
        ("verify", |s| s.verified(record(), "agree", Some(1), now())),
        ("mismatch", |s| {
            s.mismatch(record(), "disagree", Some(1), now())
        }),
        ("await approval", |s| {
            s.await_approval(pending(), Some(1), now())
        }),
        ("approval decided", |s| {
            s.approval_decided(Some(Decision::Approved), Some(1), now())
        }),
        ("claim", |s| s.claim("pod-b", Some(1), now()).map(|_| ())),
        ("heartbeat", |s| s.heartbeat(now())),
        ("requeue", |s| s.requeue("lost", Some(1), now())),
        ("fail", |s| {
            s.fail(TaskReason::ExecutorLost, "lost", Some(1), now())
        }),
        ("finish", |s| s.finish(None, "completed", Some(1), now())),
        ("finish failed", |s| {
            s.finish(Some(TaskReason::FuelExhausted), "out", Some(1), now())
        }),
        ("finish cancelled", |s| {
            s.finish(Some(TaskReason::Cancelled), "stopped", Some(1), now())
        }),
        ("cancel", |s| s.cancel("cancelled", Some(1), now())),
    ];

    #[test]
    fn every_event_from_every_phase_goes_where_the_table_says_or_is_refused() {
        use TaskPhase::*;
        // (from, event, Some(to) or None for refused)
        let mut table: Vec<(TaskPhase, &str, Option<TaskPhase>)> = vec![
            (Pending, "claim", Some(Running)),
            (Pending, "heartbeat", None),
            (Pending, "requeue", None),
            (Pending, "fail", Some(Failed)),
            (Pending, "finish", None),
            (Pending, "finish failed", None),
            (Pending, "finish cancelled", None),
            (Pending, "cancel", Some(Cancelled)),
            (Pending, "await approval", None),
            (Pending, "approval decided", None),
            (Pending, "replicate", None),
            (Pending, "verify", None),
            (Pending, "mismatch", None),
            (Running, "replicate", Some(Pending)),
            (Running, "verify", Some(Succeeded)),
            (Running, "mismatch", Some(Failed)),
            (Running, "claim", None),
            (Running, "await approval", Some(Running)),
            (Running, "approval decided", Some(Running)),
            (Running, "heartbeat", Some(Running)),
            (Running, "requeue", Some(Pending)),
            (Running, "fail", Some(Failed)),
            (Running, "finish", Some(Succeeded)),
            (Running, "finish failed", Some(Failed)),
            (Running, "finish cancelled", Some(Cancelled)),
            // The executor stops a running Task; the operator only cancels unclaimed ones.
            (Running, "cancel", None),
        ];
        // Nothing moves a finished Task.
        for end in [Succeeded, Failed, Cancelled] {
            for (name, _) in EVENTS {
                table.push((end, name, None));
            }
        }
        assert_eq!(
            table.len(),
            5 * EVENTS.len(),
            "every event from every phase"
        );
        for (from, name, to) in table {
            let (_, event) = EVENTS
                .iter()
                .find(|(n, _)| *n == name)
                .expect("event in the list");
            let mut s = status(from);
            let before = s.clone();
            match (event(&mut s), to) {
                (Ok(()), Some(to)) => assert_eq!(s.current_phase(), to, "{from:?} + {name}"),
                (Err(e), None) => {
                    assert_eq!(e.from, from, "{name}");
                    assert_eq!(
                        s, before,
                        "a refused {name} from {from:?} changed the status"
                    );
                }
                (got, want) => panic!("{from:?} + {name}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn later() -> Time {
        Time(Timestamp::from_second(60).expect("a time"))
    }

    type Transition = fn(&mut TaskStatus) -> Result<(), NotAllowed>;
    /// (write, from, resourceVersion, transition, the patch or None for refused)
    type PatchRow = (
        &'static str,
        TaskPhase,
        Option<&'static str>,
        Transition,
        Option<Value>,
    );

    /// The patch of each status write, from the phases it may and may not start from.
    #[test]
    fn every_status_patch_is_made_by_a_transition_and_holds_only_what_it_changed() {
        use TaskPhase::*;
        let at = "1970-01-01T00:01:00Z";
        let failed = json!({"type": "Succeeded", "status": "False", "reason": "HostError",
                            "message": "bad value", "lastTransitionTime": at,
                            "observedGeneration": 2});
        let requeued = json!({"type": "Succeeded", "status": "Unknown", "reason": REQUEUED,
                              "message": "lost", "lastTransitionTime": at,
                              "observedGeneration": 1});
        let table: Vec<PatchRow> = vec![
            (
                "heartbeat",
                Running,
                Some("7"),
                |s| s.heartbeat(later()),
                Some(json!({"metadata": {"resourceVersion": "7"},
                         "status": {"lastHeartbeatTime": at}})),
            ),
            (
                "heartbeat",
                Pending,
                Some("7"),
                |s| s.heartbeat(later()),
                None,
            ),
            (
                "heartbeat",
                Succeeded,
                Some("7"),
                |s| s.heartbeat(later()),
                None,
            ),
            (
                "live log",
                Running,
                Some("8"),
                |s| {
                    let mut log = LiveLog::default();
                    log.push("INFO hi");
                    s.publish_live_log(&log)
                },
                Some(json!({"metadata": {"resourceVersion": "8"},
                           "status": {"liveLog": {"seq": 1, "lines": ["INFO hi"]}}})),
            ),
            (
                "live log",
                Failed,
                Some("8"),
                |s| s.publish_live_log(&LiveLog::default()),
                None,
            ),
            (
                "fail",
                Pending,
                Some("3"),
                |s| s.fail(TaskReason::HostError, "bad value", Some(2), later()),
                Some(json!({"metadata": {"resourceVersion": "3"},
                         "status": {"phase": "Failed", "reason": "HostError", "message": "bad value",
                                    "completionTime": at, "observedGeneration": 2,
                                    "conditions": [failed]}})),
            ),
            (
                "fail",
                Cancelled,
                Some("3"),
                |s| s.fail(TaskReason::HostError, "x", Some(2), later()),
                None,
            ),
            (
                "requeue",
                Running,
                Some("9"),
                |s| s.requeue("lost", Some(1), later()),
                Some(json!({"metadata": {"resourceVersion": "9"},
                         "status": {"phase": "Pending", "message": "lost", "executor": null,
                                    "lastHeartbeatTime": null, "conditions": [requeued]}})),
            ),
            (
                "record child",
                Pending,
                None,
                |s| {
                    s.record_child(0, "uid-c");
                    Ok(())
                },
                Some(json!({"status": {"childUids": {"0": "uid-c"}}})),
            ),
            (
                "record child",
                Succeeded,
                None,
                |s| {
                    s.record_child(1, "uid-d");
                    Ok(())
                },
                Some(json!({"status": {"childUids": {"1": "uid-d"}}})),
            ),
        ];
        for (write, from, rv, transition, want) in table {
            let s = status(from);
            match (s.patch(rv, transition), want) {
                (Ok(patch), Some(want)) => {
                    assert_eq!(patch, want, "{write} from {from:?}");
                    // Applied as the API server applies a merge patch, it makes the transition.
                    let mut next = s.clone();
                    transition(&mut next).expect("allowed");
                    let mut applied = serde_json::to_value(&s).expect("encode");
                    apply_merge(&mut applied, &patch["status"]);
                    assert_eq!(
                        applied,
                        serde_json::to_value(&next).expect("encode"),
                        "{write}"
                    );
                }
                (Err(PatchError::NotAllowed(e)), None) => assert_eq!(e.from, from, "{write}"),
                (got, want) => panic!("{write} from {from:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// RFC 7386, as the API server applies a merge patch.
    fn apply_merge(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        if let Value::Object(t) = target {
            for (k, v) in patch {
                if v.is_null() {
                    t.remove(k);
                } else {
                    apply_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
    }

    #[test]
    fn replicas_are_recorded_and_the_verified_condition_follows_them() {
        let mut s = status(TaskPhase::Running);
        s.replicate(record(), 2, Some(1), now()).expect("replicate");
        assert_eq!(s.executor, None);
        assert_eq!(s.replicas.len(), 1);
        let c = conditions::find(&s.conditions, conditions::VERIFIED).expect("Verified");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "Replicating")
        );
        assert_eq!(
            s.claim("pod-b", Some(1), now()),
            Ok(2),
            "the next replica's claim"
        );
        s.mismatch(
            record(),
            "replicas disagree: [pod-a] vs [pod-b]",
            Some(1),
            now(),
        )
        .expect("mismatch");
        assert_eq!(s.reason, Some(TaskReason::VerificationMismatch));
        assert_eq!(s.replicas.len(), 2);
        let c = conditions::find(&s.conditions, conditions::VERIFIED).expect("Verified");
        assert_eq!(c.status, "False");
        assert!(c.message.contains("pod-b"), "{}", c.message);

        let mut s = status(TaskPhase::Running);
        s.verified(record(), "2 replicas agree", Some(1), now())
            .expect("verified");
        assert_eq!(s.current_phase(), TaskPhase::Succeeded);
        assert!(conditions::is_true(&s.conditions, conditions::VERIFIED));
    }

    #[test]
    fn a_claim_counts_the_attempt_and_names_the_executor() {
        let mut s = TaskStatus::default();
        assert_eq!(s.claim("pod-a", Some(3), now()), Ok(1));
        assert!(s.is_attempt("pod-a", 1));
        s.requeue("executor lost", Some(3), now()).expect("requeue");
        assert_eq!(s.executor, None);
        assert_eq!(s.last_heartbeat_time, None);
        assert_eq!(s.conditions[0].reason, REQUEUED);
        assert_eq!(s.claim("pod-b", Some(3), now()), Ok(2));
        assert!(s.is_attempt("pod-b", 2));
        assert!(!s.is_attempt("pod-a", 1));
    }

    #[test]
    fn the_executor_finishing_after_the_operator_failed_it_lost_is_refused() {
        // The race: the operator decided ExecutorLost (no retries left) while the run went on.
        let mut s = status(TaskPhase::Running);
        s.fail(TaskReason::ExecutorLost, "no heartbeat", Some(1), now())
            .expect("the operator's write");
        let refused = s.finish(None, "completed", Some(1), now());
        assert_eq!(
            refused,
            Err(NotAllowed {
                event: "finish",
                from: TaskPhase::Failed
            })
        );
        assert_eq!(s.reason, Some(TaskReason::ExecutorLost));
    }

    #[test]
    fn a_heartbeat_after_the_operator_requeued_the_task_is_refused_and_a_second_claim_wins_alone() {
        let mut s = status(TaskPhase::Running);
        s.requeue("executor lost", Some(1), now()).expect("requeue");
        assert!(s.heartbeat(now()).is_err(), "the old executor may not beat");
        assert_eq!(s.claim("pod-b", Some(1), now()), Ok(2));
        assert!(s.claim("pod-c", Some(1), now()).is_err(), "one claim wins");
        assert!(
            !s.is_attempt("pod-a", 1),
            "the first attempt is no longer the owner"
        );
    }

    #[test]
    fn an_ending_sets_the_succeeded_condition_and_clips_long_messages() {
        let mut s = status(TaskPhase::Running);
        let long = "é".repeat(MESSAGE_MAX_BYTES);
        s.finish(Some(TaskReason::Trap), &long, Some(2), now())
            .expect("finish");
        let message = s.message.clone().unwrap_or_default();
        assert!(message.len() <= MESSAGE_MAX_BYTES + '…'.len_utf8());
        assert!(message.ends_with('…'));
        let c = &s.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (conditions::SUCCEEDED, "False", "Trap")
        );
        assert_eq!(s.completion_time, Some(now()));
        let mut ok = status(TaskPhase::Running);
        ok.finish(None, "completed", Some(2), now())
            .expect("finish");
        assert_eq!(ok.reason, Some(TaskReason::Completed));
        assert_eq!(ok.conditions[0].status, "True");
    }

    #[test]
    fn a_task_being_deleted_is_not_claimable() {
        let mut t = Task::new(
            "t",
            crate::task::TaskSpec {
                input: Some("x".into()),
                ..crate::task::TaskSpec::for_agent("a")
            },
        );
        assert!(t.is_claimable());
        t.metadata.deletion_timestamp = Some(now());
        assert!(!t.is_claimable());
    }

    #[test]
    fn a_waiting_call_shows_until_decided_and_never_outlives_the_run() {
        let mut s = status(TaskPhase::Running);
        s.await_approval(pending(), Some(1), now())
            .expect("running");
        assert_eq!(
            s.pending_approval.as_ref().map(|p| p.call.as_str()),
            Some("0-abc")
        );
        let waiting = |s: &TaskStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == conditions::AWAITING_APPROVAL)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        assert_eq!(
            waiting(&s),
            Some(("True".into(), "ApprovalRequested".into()))
        );
        s.approval_decided(Some(Decision::Rejected), Some(1), now())
            .expect("running");
        assert_eq!(s.pending_approval, None);
        assert_eq!(waiting(&s), Some(("False".into(), "Rejected".into())));
        s.await_approval(pending(), Some(1), now())
            .expect("running");
        s.fail(TaskReason::DeadlineExceeded, "late", Some(1), now())
            .expect("running");
        assert_eq!(s.pending_approval, None, "an ended Task waits for nothing");
    }

    #[test]
    fn a_waiting_delegation_or_request_says_what_kind_of_call_it_is_within_bounds() {
        use crate::task::{CallKind, CallSubject};
        let long = "é".repeat(400);
        let child = PendingApproval::new(
            "0-d".into(),
            &CallSubject::Delegation {
                agent: "deployer".into(),
            },
            &long,
            now(),
        );
        assert_eq!(child.kind, CallKind::Delegation);
        assert_eq!(child.agent.as_deref(), Some("deployer"));
        assert!(
            child.arguments.len() <= crate::task::PREVIEW_BYTES
                && long.starts_with(&child.arguments)
        );
        let json = serde_json::to_value(&child).expect("json");
        assert_eq!(json["kind"], "Delegation");
        assert!(json.get("server").is_none() && json.get("tool").is_none());
        let request = PendingApproval::new(
            "1-n".into(),
            &CallSubject::Network {
                method: "POST".into(),
                url: format!("https://api.example.com/{long}"),
            },
            "{}",
            now(),
        );
        assert!(
            request
                .url
                .as_ref()
                .is_some_and(|u| u.len() <= crate::task::URL_PREVIEW_BYTES)
        );
        let mut s = status(TaskPhase::Running);
        s.await_approval(request, Some(1), now()).expect("running");
        let message = s
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::AWAITING_APPROVAL)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            message.contains("request POST https://api.example.com/"),
            "{message}"
        );
        // A status written before `kind` existed reads back as a tool call.
        let old: PendingApproval = serde_json::from_value(serde_json::json!({
            "call": "0-abc", "server": "files", "tool": "wipe", "arguments": "{}",
            "since": "2026-01-01T00:00:00Z"
        }))
        .expect("old status");
        assert_eq!(old.kind, CallKind::Tool);
    }
}
