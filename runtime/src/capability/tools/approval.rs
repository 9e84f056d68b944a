//! Approval of tool calls: a call the grant marks (or of a tool the server marks destructive)
//! waits for a person's decision before anything is sent.
//!
//! The host asks its [`Approver`] (the executor pauses the Task and lends its slot until a
//! decision is in `spec.approvals`; `ari run` decides by its flags) and records the decision in
//! the trace, so a replay reads it instead of asking, and the attestation says who decided
//! what. A rejection is the guest's `rejected` error; the task's deadline bounds the wait.

use std::time::Instant;

use ari_model::approval::{ApprovalRecord, Decision};

use crate::cancel::CancelToken;

/// A call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The call's id ([`ari_model::approval::call_id`]): what a decision names.
    pub call: String,
    pub server: String,
    pub tool: String,
    /// The arguments as the guest wrote them (JSON text).
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

/// The record of a decided call.
pub(crate) fn record(request: &ApprovalRequest, decided: Decided) -> ApprovalRecord {
    ApprovalRecord {
        call: request.call.clone(),
        server: request.server.clone(),
        tool: request.tool.clone(),
        decision: decided.decision,
        approver: decided.approver,
        reason: decided.reason,
        decided_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }
}
