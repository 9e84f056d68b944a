//! Each tools exchange as a trace event: its whole record (the request as sent, without
//! credentials, and the answer or error), so a replay contacts no server.

use ari_mcp::record::{CallRecord, Record as _};
use ari_model::approval::ApprovalRecord;
use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// One tools exchange the task made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum ToolEvent {
    /// A tool list or a tool call and what came of it (an answer, or a typed error the guest
    /// was given).
    #[serde(rename = "toolCall")]
    Call { record: Recorded },
    /// An exchange the task's deadline cut short: the task ended `DeadlineExceeded` there.
    #[serde(rename = "toolDeadline")]
    Deadline,
    /// A person's decision about a call that needed approval, made before it was sent.
    #[serde(rename = "toolApproval")]
    Approval { record: ApprovalRecord },
}

/// An exchange's record, compared by its canonical bytes (answers hold JSON values, which
/// compare as maps but are signed as bytes).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Recorded(pub Box<CallRecord>);

impl PartialEq for Recorded {
    fn eq(&self, other: &Self) -> bool {
        self.0.canonical_bytes() == other.0.canonical_bytes()
    }
}

impl Eq for Recorded {}

impl ToolEvent {
    pub const CALL: &'static str = "toolCall";
    pub const DEADLINE: &'static str = "toolDeadline";
    pub const APPROVAL: &'static str = "toolApproval";
    /// The kinds a replay asks for at an exchange.
    pub const ASKED: &'static [&'static str] = &[Self::CALL, Self::DEADLINE];
    /// The kinds a replay asks for where a call waited for a decision.
    pub const DECIDED: &'static [&'static str] = &[Self::APPROVAL, Self::DEADLINE];

    pub fn call(record: CallRecord) -> Self {
        Self::Call {
            record: Recorded(Box::new(record)),
        }
    }
}

impl CapabilityEvent for ToolEvent {
    const KINDS: &'static [(u8, &'static str)] =
        &[(13, Self::CALL), (14, Self::DEADLINE), (15, Self::APPROVAL)];

    fn kind(&self) -> &'static str {
        match self {
            Self::Call { .. } => Self::CALL,
            Self::Deadline => Self::DEADLINE,
            Self::Approval { .. } => Self::APPROVAL,
        }
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        match self {
            Self::Call { record } => put_bytes(out, &record.0.canonical_bytes()),
            // Plain strings and an enum: serializing cannot fail.
            Self::Approval { record } => {
                put_bytes(out, &serde_json::to_vec(record).unwrap_or_default())
            }
            Self::Deadline => {}
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            // The record's JSON size stands for its heap size (strings and values dominate).
            Self::Call { record } => record.0.canonical_bytes().len(),
            Self::Deadline => 0,
            Self::Approval { record } => crate::capability::approval::record_heap_bytes(record),
        }
    }
}

impl crate::capability::approval::ApprovalEvents for ToolEvent {
    const DECIDED: &'static [&'static str] = Self::DECIDED;

    fn decided(record: ApprovalRecord) -> Self {
        Self::Approval { record }
    }

    fn deadline() -> Self {
        Self::Deadline
    }

    fn read(self) -> Result<Option<ApprovalRecord>, Self> {
        match self {
            Self::Approval { record } => Ok(Some(record)),
            Self::Deadline => Ok(None),
            other => Err(other),
        }
    }
}
