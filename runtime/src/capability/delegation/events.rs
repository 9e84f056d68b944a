//! Delegation as trace events: what starting a child answered and what each awaited child
//! returned, so a replay of the parent needs no other Agent and no cluster.

use ari_model::approval::ApprovalRecord;
use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// One delegation fact the parent consumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum DelegationEvent {
    /// A child (or message) was asked for: the host's answer. `error` is set when no child was
    /// started for a reason outside the task (the Agent is unavailable).
    #[serde(rename = "childStarted")]
    Started {
        child: u32,
        agent: String,
        input_sha256: String,
        fuel: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// An awaited child ended: its output or failure, what it spent and the digest of its
    /// signed attestation (which the parent's attestation thereby covers).
    #[serde(rename = "childFinished")]
    Finished {
        child: u32,
        task: String,
        #[serde(with = "crate::trace::b64_opt")]
        output: Option<Vec<u8>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
        fuel: u64,
        attestation_sha256: String,
    },
    /// What an awaited child took out of the model tokens it was given (`reserved`, taken
    /// out of the parent's budget when it started): the parent gets the rest back. Recorded
    /// after `childFinished` when the child was given tokens, so a replay charges the parent
    /// alike without the child.
    #[serde(rename = "childTokens")]
    Tokens {
        child: u32,
        reserved: u64,
        used: u64,
    },
    /// A person's decision about a delegation that needed approval, made before the child was
    /// asked for.
    #[serde(rename = "childApproval")]
    Approval { record: ApprovalRecord },
    /// The task's deadline passed while a delegation waited for a decision: the task ended
    /// `DeadlineExceeded` there.
    #[serde(rename = "childApprovalDeadline")]
    ApprovalDeadline,
}

impl DelegationEvent {
    pub const STARTED: &'static str = "childStarted";
    pub const FINISHED: &'static str = "childFinished";
    pub const TOKENS: &'static str = "childTokens";
    pub const APPROVAL: &'static str = "childApproval";
    pub const APPROVAL_DEADLINE: &'static str = "childApprovalDeadline";
}

fn put_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_bytes(out, v.as_bytes());
        }
    }
}

impl CapabilityEvent for DelegationEvent {
    const KINDS: &'static [(u8, &'static str)] = &[
        (8, Self::STARTED),
        (9, Self::FINISHED),
        (12, Self::TOKENS),
        (16, Self::APPROVAL),
        (17, Self::APPROVAL_DEADLINE),
    ];

    fn kind(&self) -> &'static str {
        match self {
            Self::Started { .. } => Self::STARTED,
            Self::Finished { .. } => Self::FINISHED,
            Self::Tokens { .. } => Self::TOKENS,
            Self::Approval { .. } => Self::APPROVAL,
            Self::ApprovalDeadline => Self::APPROVAL_DEADLINE,
        }
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        match self {
            Self::Started {
                child,
                agent,
                input_sha256,
                fuel,
                error,
            } => {
                out.extend_from_slice(&child.to_le_bytes());
                put_bytes(out, agent.as_bytes());
                put_bytes(out, input_sha256.as_bytes());
                out.extend_from_slice(&fuel.to_le_bytes());
                put_opt_str(out, error.as_deref());
            }
            Self::Finished {
                child,
                task,
                output,
                reason,
                message,
                fuel,
                attestation_sha256,
            } => {
                out.extend_from_slice(&child.to_le_bytes());
                put_bytes(out, task.as_bytes());
                match output {
                    None => out.push(0),
                    Some(o) => {
                        out.push(1);
                        put_bytes(out, o);
                    }
                }
                put_opt_str(out, reason.as_deref());
                put_bytes(out, message.as_bytes());
                out.extend_from_slice(&fuel.to_le_bytes());
                put_bytes(out, attestation_sha256.as_bytes());
            }
            Self::Tokens {
                child,
                reserved,
                used,
            } => {
                out.extend_from_slice(&child.to_le_bytes());
                out.extend_from_slice(&reserved.to_le_bytes());
                out.extend_from_slice(&used.to_le_bytes());
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
            Self::Started {
                agent,
                input_sha256,
                error,
                ..
            } => agent.len() + input_sha256.len() + error.as_ref().map_or(0, String::len),
            Self::Finished {
                task,
                output,
                reason,
                message,
                attestation_sha256,
                ..
            } => {
                task.len()
                    + output.as_ref().map_or(0, Vec::len)
                    + reason.as_ref().map_or(0, String::len)
                    + message.len()
                    + attestation_sha256.len()
            }
            Self::Tokens { .. } | Self::ApprovalDeadline => 0,
            Self::Approval { record } => crate::capability::approval::record_heap_bytes(record),
        }
    }
}

impl crate::capability::approval::ApprovalEvents for DelegationEvent {
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
