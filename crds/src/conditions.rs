//! Condition bookkeeping in the `metav1.Condition` shape shared by Agent and Task status.
//!
//! Kept here, next to the types, so the operator and the executor set conditions the same way:
//! `lastTransitionTime` moves only when `status` flips, as `kubectl wait` and GitOps tools expect.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Agent: the Deployment has at least one available executor and the module is resolved.
pub const READY: &str = "Ready";
/// Agent: the module source was found and its digest recorded.
pub const MODULE_RESOLVED: &str = "ModuleResolved";
/// Agent: the spec passed the operator's semantic checks (beyond what the schema can say).
pub const VALID: &str = "Valid";
/// Task: `True` once finished successfully, `False` once failed, absent or `Unknown` before.
pub const SUCCEEDED: &str = "Succeeded";
/// Task: `True` while a call waits for a person's decision (`status.pendingApproval`);
/// `False` once decided, with the decision as its reason.
pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
/// Task with `spec.verification.replicas` > 1: `Unknown` while replicas run, `True` once all
/// agreed, `False` when they disagreed (the Task then fails `VerificationMismatch`).
pub const VERIFIED: &str = "Verified";

/// Tri-state of a condition (`True`, `False`, `Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Sets (inserts or updates) a condition; returns whether anything but the timestamp changed.
///
/// `lastTransitionTime` is kept when the status does not flip, so repeated reconciles do not
/// churn the object or trigger needless watch events.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> bool {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let flipped = existing.status != status.as_str();
            let changed = flipped
                || existing.reason != reason
                || existing.message != message
                || existing.observed_generation != observed_generation;
            if flipped {
                existing.last_transition_time = now;
            }
            existing.status = status.as_str().to_owned();
            existing.reason = reason.to_owned();
            existing.message = message;
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.as_str().to_owned(),
                reason: reason.to_owned(),
                message,
                observed_generation,
                last_transition_time: now,
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    #[test]
    fn set_inserts_then_keeps_transition_time_when_status_is_unchanged() {
        let mut cs = Vec::new();
        assert!(set(
            &mut cs,
            READY,
            ConditionStatus::False,
            "Waiting",
            "x",
            Some(1),
            t(10)
        ));
        assert!(set(
            &mut cs,
            READY,
            ConditionStatus::False,
            "Waiting",
            "y",
            Some(2),
            t(20)
        ));
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].last_transition_time, t(10));
        assert_eq!(cs[0].message, "y");
        assert_eq!(cs[0].observed_generation, Some(2));
    }

    #[test]
    fn set_moves_transition_time_on_flip_and_reports_no_change_when_identical() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            READY,
            ConditionStatus::False,
            "Waiting",
            "",
            Some(1),
            t(10),
        );
        assert!(set(
            &mut cs,
            READY,
            ConditionStatus::True,
            "Available",
            "",
            Some(1),
            t(30)
        ));
        assert_eq!(cs[0].last_transition_time, t(30));
        assert!(is_true(&cs, READY));
        assert!(!set(
            &mut cs,
            READY,
            ConditionStatus::True,
            "Available",
            "",
            Some(1),
            t(40)
        ));
        assert_eq!(cs[0].last_transition_time, t(30));
        assert!(!is_true(&cs, VALID));
    }
}
