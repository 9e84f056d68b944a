//! The Plan's event log: each stage the new status reached since the old one becomes a
//! history entry (and a Kubernetes Event). Derived from the two statuses, so an entry is
//! written exactly when the status write that makes it true succeeds, and a restarted operator
//! neither repeats nor skips one.

use ari_crds::conditions;
use ari_crds::plan::{HISTORY_MESSAGE_MAX, MAX_HISTORY};
use ari_crds::{HistoryEntry, HistoryEvent, PlanStatus, StepPhase, StepStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::decide::VALIDATED;

/// A stage reached: `(event, step, message, warning)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub event: HistoryEvent,
    pub step: Option<String>,
    pub message: String,
    pub warning: bool,
}

fn stage(event: HistoryEvent, step: Option<&str>, message: String, warning: bool) -> Stage {
    Stage {
        event,
        step: step.map(str::to_owned),
        message,
        warning,
    }
}

/// The stages between `old` and `new`, in the order they happened: planner, proposal,
/// verdict, each step (declaration order), cancellation, the end.
pub fn stages(old: &PlanStatus, new: &PlanStatus, cancelling: bool) -> Vec<Stage> {
    let mut out = Vec::new();
    if let (None, Some(task)) = (&old.planner_task, &new.planner_task) {
        out.push(stage(
            HistoryEvent::PlannerStarted,
            None,
            format!("planner Task {task} created"),
            false,
        ));
    }
    if let (None, Some(sha)) = (&old.proposal_sha256, &new.proposal_sha256) {
        let n = new.steps.len();
        let what = if n > 0 || new.violation_count.is_none() {
            format!("proposal sha256:{sha}")
        } else {
            format!("proposal sha256:{sha} (not run)")
        };
        out.push(stage(HistoryEvent::Proposed, None, what, false));
    }
    let verdict =
        |s: &PlanStatus| conditions::find(&s.conditions, VALIDATED).map(|c| c.status.clone());
    if verdict(old).is_none()
        && let Some(c) = conditions::find(&new.conditions, VALIDATED)
    {
        let (event, warning) = if c.status == "True" {
            (HistoryEvent::Validated, false)
        } else {
            (HistoryEvent::Rejected, true)
        };
        out.push(stage(event, None, c.message.clone(), warning));
    }
    for s in &new.steps {
        let before = old.steps.iter().find(|o| o.name == s.name);
        out.extend(step_stages(before, s));
    }
    let stopping_before = old
        .history
        .iter()
        .any(|e| e.event == HistoryEvent::Cancelling);
    if cancelling && !stopping_before && !old.phase.is_some_and(|p| p.is_finished()) {
        out.push(stage(
            HistoryEvent::Cancelling,
            None,
            "no step starts any more; running steps are cancelled".into(),
            true,
        ));
    }
    if let (false, Some(phase)) = (
        old.phase.is_some_and(|p| p.is_finished()),
        new.phase.filter(|p| p.is_finished()),
    ) {
        let reason = new.reason.map_or("", |r| r.as_str());
        let message = new.message.clone().unwrap_or_default();
        let warning = phase != ari_crds::PlanPhase::Succeeded;
        out.push(stage(
            HistoryEvent::PlanFinished,
            None,
            format!("{}/{reason}: {message}", phase.as_str()),
            warning,
        ));
    }
    out
}

fn step_stages(before: Option<&StepStatus>, now: &StepStatus) -> Vec<Stage> {
    let mut out = Vec::new();
    let name = Some(now.name.as_str());
    let was = before.map(|b| b.phase).unwrap_or_default();
    let attempts_before = before.and_then(|b| b.attempts).unwrap_or(0);
    let attempts = now.attempts.unwrap_or(0);
    let task = now.task.clone().unwrap_or_default();
    if was == StepPhase::Waiting && attempts > 0 {
        // A step running under another name says why (its name was taken).
        let why = match (&now.message, now.phase) {
            (Some(m), StepPhase::Running) => format!(": {m}"),
            _ => String::new(),
        };
        out.push(stage(
            HistoryEvent::StepStarted,
            name,
            format!("Task {task}{why}"),
            false,
        ));
    } else if attempts > attempts_before && attempts_before > 0 {
        out.push(stage(
            HistoryEvent::StepRetried,
            name,
            format!("attempt {attempts}: Task {task}"),
            true,
        ));
    }
    if !was.is_finished() && now.phase.is_finished() {
        let reason = now.reason.map_or("", ari_crds::StepReason::as_str);
        let message = now.message.clone().unwrap_or_default();
        let sep = if message.is_empty() { "" } else { ": " };
        let warning = now.phase != StepPhase::Succeeded;
        out.push(stage(
            HistoryEvent::StepFinished,
            name,
            format!("{:?}/{reason}{sep}{message}", now.phase),
            warning,
        ));
    }
    out
}

/// Appends `stages` to `status.history`, numbered after the last entry. Past [`MAX_HISTORY`]
/// the oldest step entries are dropped (the plan-level ones are few and say how it went).
pub fn append(status: &mut PlanStatus, stages: &[Stage], now: Timestamp) {
    let mut seq = status.history.last().map_or(0, |e| e.seq);
    for s in stages {
        seq = seq.saturating_add(1);
        let mut message = s.message.clone();
        crate::cache::clip(&mut message, HISTORY_MESSAGE_MAX);
        status.history.push(HistoryEntry {
            seq,
            time: Time(now),
            event: s.event,
            step: s.step.clone(),
            message,
        });
    }
    while status.history.len() > MAX_HISTORY {
        let at = status
            .history
            .iter()
            .position(|e| e.step.is_some())
            .unwrap_or(0);
        status.history.remove(at);
        status.history_dropped = Some(status.history_dropped.unwrap_or(0).saturating_add(1));
    }
}
