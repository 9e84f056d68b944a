//! Each model call as a trace event: its whole record (the request as sent, without
//! credentials, and the answer or error), so a replay contacts no model.

use ari_llm::record::{CallRecord, Record as _};
use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// One model call the task made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum ModelEvent {
    /// A call and what came of it (an answer, or a typed error the guest was given).
    #[serde(rename = "modelCall")]
    Call { record: Recorded },
    /// A call the task's deadline cut short: the task ended `DeadlineExceeded` there.
    #[serde(rename = "modelDeadline")]
    Deadline,
}

/// A call's record, compared by its canonical bytes (answers hold floats: an embedding's
/// vector compares equal to itself only as bytes).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Recorded(pub Box<CallRecord>);

impl PartialEq for Recorded {
    fn eq(&self, other: &Self) -> bool {
        self.0.canonical_bytes() == other.0.canonical_bytes()
    }
}

impl Eq for Recorded {}

impl ModelEvent {
    pub const CALL: &'static str = "modelCall";
    pub const DEADLINE: &'static str = "modelDeadline";
    /// The kinds a replay asks for at a call.
    pub const ASKED: &'static [&'static str] = &[Self::CALL, Self::DEADLINE];

    pub fn call(record: CallRecord) -> Self {
        Self::Call {
            record: Recorded(Box::new(record)),
        }
    }
}

impl CapabilityEvent for ModelEvent {
    const KINDS: &'static [(u8, &'static str)] = &[(10, Self::CALL), (11, Self::DEADLINE)];

    fn kind(&self) -> &'static str {
        match self {
            Self::Call { .. } => Self::CALL,
            Self::Deadline => Self::DEADLINE,
        }
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        if let Self::Call { record } = self {
            put_bytes(out, &record.0.canonical_bytes());
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            // The record's JSON size stands for its heap size (strings and vectors dominate).
            Self::Call { record } => record.0.canonical_bytes().len(),
            Self::Deadline => 0,
        }
    }
}
