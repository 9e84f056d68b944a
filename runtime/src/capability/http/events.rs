//! Every HTTP hop as a trace event: the response (or transport error) the guest was given, so a
//! replay needs no network.

use ari_model::approval::ApprovalRecord;
use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// One hop of an HTTP request (a redirect chain is several events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum HttpEvent {
    /// One HTTP exchange.
    #[serde(rename = "http")]
    Exchange {
        method: String,
        url: String,
        status: u16,
        headers: Vec<(String, String)>,
        #[serde(with = "crate::trace::b64")]
        body: Vec<u8>,
    },
    /// One hop that failed at transport level (refused, timed out, too large).
    #[serde(rename = "httpError")]
    Error {
        method: String,
        url: String,
        error: String,
    },
    /// A person's decision about a hop to a host that needed approval, made before it was
    /// sent.
    #[serde(rename = "httpApproval")]
    Approval { record: ApprovalRecord },
    /// The task's deadline passed while a hop waited for a decision: the task ended
    /// `DeadlineExceeded` there.
    #[serde(rename = "httpApprovalDeadline")]
    ApprovalDeadline,
}

impl HttpEvent {
    pub const EXCHANGE: &'static str = "http";
    pub const ERROR: &'static str = "httpError";
    pub const APPROVAL: &'static str = "httpApproval";
    pub const APPROVAL_DEADLINE: &'static str = "httpApprovalDeadline";
}

impl CapabilityEvent for HttpEvent {
    const KINDS: &'static [(u8, &'static str)] = &[
        (4, Self::EXCHANGE),
        (5, Self::ERROR),
        (18, Self::APPROVAL),
        (19, Self::APPROVAL_DEADLINE),
    ];

    fn kind(&self) -> &'static str {
        match self {
            Self::Exchange { .. } => Self::EXCHANGE,
            Self::Error { .. } => Self::ERROR,
            Self::Approval { .. } => Self::APPROVAL,
            Self::ApprovalDeadline => Self::APPROVAL_DEADLINE,
        }
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        match self {
            Self::Exchange {
                method,
                url,
                status,
                headers,
                body,
            } => {
                put_bytes(out, method.as_bytes());
                put_bytes(out, url.as_bytes());
                out.extend_from_slice(&status.to_le_bytes());
                out.extend_from_slice(&(headers.len() as u64).to_le_bytes());
                for (name, value) in headers {
                    put_bytes(out, name.as_bytes());
                    put_bytes(out, value.as_bytes());
                }
                put_bytes(out, body);
            }
            Self::Error { method, url, error } => {
                put_bytes(out, method.as_bytes());
                put_bytes(out, url.as_bytes());
                put_bytes(out, error.as_bytes());
            }
            // Plain strings and enums: serializing cannot fail.
            Self::Approval { record } => {
                put_bytes(out, &serde_json::to_vec(record).unwrap_or_default())
            }
            Self::ApprovalDeadline => {}
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Exchange {
                method,
                url,
                headers,
                body,
                ..
            } => {
                method.len()
                    + url.len()
                    + body.len()
                    + headers
                        .iter()
                        .map(|(n, v)| n.len() + v.len() + 48)
                        .sum::<usize>()
            }
            Self::Error { method, url, error } => method.len() + url.len() + error.len(),
            Self::Approval { record } => crate::capability::approval::record_heap_bytes(record),
            Self::ApprovalDeadline => 0,
        }
    }
}

impl crate::capability::approval::ApprovalEvents for HttpEvent {
    const DECIDED: &'static [&'static str] = &[Self::APPROVAL, Self::APPROVAL_DEADLINE];

    fn decided(record: ApprovalRecord) -> Self {
        Self::Approval { record }
    }

    fn deadline() -> Self {
        Self::ApprovalDeadline
    }

    fn read(self) -> Result<Option<ApprovalRecord>, Self> {
        match self {
            Self::Approval { record } => Ok(Some(record)),
            Self::ApprovalDeadline => Ok(None),
            other => Err(other),
        }
    }
}
