//! Approval of risky calls: a tool call the grant marks (or of a tool the server marks
//! destructive), a delegation to an Agent the delegation grant marks, a request to a host the
//! network grant marks. Each waits for a person's decision before anything is sent.
//!
//! One mechanism for every kind of call. The capability that makes the call holds an
//! [`ApprovalGate`]; the gate names the call ([`ari_model::approval::call_id_of`]), asks its
//! [`Approver`] (the executor pauses the Task and lends its slot until a decision is in
//! `spec.approvals`; `ari run` decides by its flags), and records the decision in the trace as
//! the capability's own event ([`ApprovalEvents`]), so a replay reads it instead of asking, and
//! the attestation says who decided what. A rejection is the guest's error (each capability
//! says which); the task's deadline bounds the wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ari_model::approval::{ApprovalRecord, CallSubject, Decision};

use super::{CapError, TaskSetup};
use crate::cancel::CancelToken;
use crate::trace::{CapabilityEvent, Recorder, TraceEvent};

/// A call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The call's id ([`ari_model::approval::call_id_of`]): what a decision names.
    pub call: String,
    /// What the call does.
    pub subject: CallSubject,
    /// What it sends, as text for a person to read: a tool's arguments (JSON text), a child's
    /// input, a request's body (lossy UTF-8). Whoever shows it bounds it.
    pub arguments: String,
}

/// A person's decision, as the approver got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub decision: Decision,
    pub approver: String,
    pub reason: Option<String>,
}

/// How a wait for a decision ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Decided(Decided),
    /// The task's deadline passed first: the task ends `DeadlineExceeded`.
    Deadline,
    /// The task was cancelled first.
    Cancelled,
    /// No one could be asked (the message says why): the task ends `HostError`.
    Failed(String),
}

/// Asks a person to decide a call, and waits. Called on the guest's blocking thread, never
/// inside an async runtime; never called in a replay.
pub trait Approver: Send + Sync {
    /// Blocks until a decision, `until`, or `cancel`, whichever comes first.
    fn decide(&self, request: &ApprovalRequest, until: Instant, cancel: &CancelToken) -> Waited;
}

/// The approver of a host that has no one to ask: every call is rejected, saying so.
pub struct NoOneToAsk;

impl Approver for NoOneToAsk {
    fn decide(&self, _: &ApprovalRequest, _: Instant, _: &CancelToken) -> Waited {
        Waited::Decided(Decided {
            decision: Decision::Rejected,
            approver: "ari".into(),
            reason: Some("the call needs approval and this host has no one to ask".into()),
        })
    }
}

/// The trace events a capability records a decision (or the deadline that cut the wait) as.
/// Each capability keeps its own, so its replay reads its events in their order.
pub(crate) trait ApprovalEvents:
    CapabilityEvent + Into<TraceEvent> + std::fmt::Debug
{
    /// The kinds a replay asks for where a call waited for a decision.
    const DECIDED: &'static [&'static str];
    fn decided(record: ApprovalRecord) -> Self;
    fn deadline() -> Self;
    /// The recorded decision (`Ok(None)`: the deadline cut the wait), or the event when it is
    /// neither.
    fn read(self) -> Result<Option<ApprovalRecord>, Self>;
}

/// How asking for a decision ended, for the capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Approved,
    /// The guest's error message: who rejected which call, and why.
    Rejected(String),
    /// The task's deadline passed first: the task ends `DeadlineExceeded`.
    Deadline,
}

/// One capability's approvals in one task: who decides, the task's deadline and cancellation,
/// and how many calls of this capability asked so far (the next one's index).
pub(crate) struct ApprovalGate {
    /// `None`: no one to ask (every call is rejected), or a replay, whose trace has the
    /// decisions.
    approver: Option<Arc<dyn Approver>>,
    cancel: CancelToken,
    deadline: Option<Instant>,
    asked: u32,
}

impl ApprovalGate {
    /// A gate asking `approver` (`None`: rejecting every call), interrupted by `cancel`.
    pub(crate) fn new(approver: Option<Arc<dyn Approver>>, cancel: CancelToken) -> Self {
        Self {
            approver,
            cancel,
            deadline: None,
            asked: 0,
        }
    }

    /// The task's gate: its approver (none in a replay, which reads the trace) and its
    /// cancellation.
    pub(crate) fn for_task(task: &TaskSetup) -> Self {
        let approver = if task.replay {
            None
        } else {
            task.approver.clone()
        };
        Self::new(approver, task.cancel.clone())
    }

    pub(crate) fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// The next call asking approval: `subject`, named by its place among this capability's
    /// and by `content` (the parts of what it sends, see [`ari_model::approval::call_id_of`]).
    pub(crate) fn request(
        &mut self,
        subject: CallSubject,
        content: &[&[u8]],
        arguments: String,
    ) -> ApprovalRequest {
        let index = self.asked;
        self.asked = self.asked.saturating_add(1);
        ApprovalRequest {
            call: ari_model::approval::call_id_of(index, content),
            subject,
            arguments,
        }
    }

    /// Waits for a person's decision about `request` (a replay reads it from the trace) and
    /// records it as `E`.
    pub(crate) fn decide<E: ApprovalEvents>(
        &self,
        request: &ApprovalRequest,
        recorder: &mut Recorder,
    ) -> Result<Verdict, CapError> {
        let record = if recorder.is_replay() {
            match recorder.replay_next::<E>(E::DECIDED)?.read() {
                Ok(Some(record)) if record.call == request.call => record,
                Ok(None) => return Ok(Verdict::Deadline),
                other => {
                    return Err(CapError::Failed(format!(
                        "replay diverged: call {} asked approval, the trace has {other:?}",
                        request.call
                    )));
                }
            }
        } else {
            let until = self
                .deadline
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let waited = match &self.approver {
                Some(approver) => approver.decide(request, until, &self.cancel),
                None => NoOneToAsk.decide(request, until, &self.cancel),
            };
            match waited {
                Waited::Decided(decided) => {
                    let record = record(request, decided);
                    recorder.record(E::decided(record.clone()));
                    record
                }
                Waited::Deadline => {
                    recorder.record(E::deadline());
                    return Ok(Verdict::Deadline);
                }
                Waited::Cancelled => return Err(CapError::Cancelled),
                Waited::Failed(why) => {
                    return Err(CapError::Failed(format!(
                        "approval could not be asked: {why}"
                    )));
                }
            }
        };
        Ok(match record.decision {
            Decision::Approved => Verdict::Approved,
            Decision::Rejected => Verdict::Rejected(format!(
                "{} rejected call {} ({}){}",
                record.approver,
                record.call,
                record.subject,
                record.reason.map(|r| format!(": {r}")).unwrap_or_default()
            )),
        })
    }
}

/// The record of a decided call.
fn record(request: &ApprovalRequest, decided: Decided) -> ApprovalRecord {
    ApprovalRecord {
        call: request.call.clone(),
        subject: request.subject.clone(),
        decision: decided.decision,
        approver: decided.approver,
        reason: decided.reason,
        decided_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }
}

/// The heap bytes of a record, for the trace's accounting.
pub(crate) fn record_heap_bytes(record: &ApprovalRecord) -> usize {
    let subject = match &record.subject {
        CallSubject::Tool { server, tool } => server.len() + tool.len(),
        CallSubject::Delegation { agent } => agent.len(),
        CallSubject::Network { method, url } => method.len() + url.len(),
    };
    record.call.len()
        + subject
        + record.approver.len()
        + record.reason.as_ref().map_or(0, String::len)
        + record.decided_at.len()
}

/// Who decided which calls of a run, in the order they were decided, from its trace (for its
/// attestation): the decisions every capability recorded.
pub fn approvals_of(trace: &crate::trace::Trace) -> Vec<ApprovalRecord> {
    use super::{delegation::DelegationEvent, http::HttpEvent, tools::ToolEvent};
    trace
        .events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Tools(ToolEvent::Approval { record })
            | TraceEvent::Delegation(DelegationEvent::Approval { record })
            | TraceEvent::Http(HttpEvent::Approval { record }) => Some(record.clone()),
            _ => None,
        })
        .collect()
}
