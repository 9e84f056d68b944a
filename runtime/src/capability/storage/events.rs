//! What committed storage showed a task, as trace events: enough to replay every read and
//! every quota decision without the backend.

use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// One storage fact the task consumed. Reads of the task's own writes are not outside data and
/// are not recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum StorageEvent {
    /// A read that reached committed storage.
    #[serde(rename = "storageGet")]
    Get {
        key: String,
        #[serde(with = "crate::trace::b64_opt")]
        value: Option<Vec<u8>>,
    },
    /// Committed size (key + value bytes) of a key the task wrote; needed to replay quota
    /// decisions.
    #[serde(rename = "storageSize")]
    Size { key: String, bytes: Option<u64> },
    /// Committed bytes of the agent's namespace when the task first wrote.
    #[serde(rename = "storageUsed")]
    Used { bytes: u64 },
}

impl StorageEvent {
    pub const GET: &'static str = "storageGet";
    pub const SIZE: &'static str = "storageSize";
    pub const USED: &'static str = "storageUsed";
}

impl CapabilityEvent for StorageEvent {
    const KINDS: &'static [(u8, &'static str)] =
        &[(1, Self::GET), (2, Self::SIZE), (3, Self::USED)];

    fn kind(&self) -> &'static str {
        match self {
            Self::Get { .. } => Self::GET,
            Self::Size { .. } => Self::SIZE,
            Self::Used { .. } => Self::USED,
        }
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        match self {
            Self::Get { key, value } => {
                put_bytes(out, key.as_bytes());
                match value {
                    None => out.push(0),
                    Some(v) => {
                        out.push(1);
                        put_bytes(out, v);
                    }
                }
            }
            Self::Size { key, bytes } => {
                put_bytes(out, key.as_bytes());
                match bytes {
                    None => out.push(0),
                    Some(n) => {
                        out.push(1);
                        out.extend_from_slice(&n.to_le_bytes());
                    }
                }
            }
            Self::Used { bytes } => out.extend_from_slice(&bytes.to_le_bytes()),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Get { key, value } => key.len() + value.as_ref().map_or(0, Vec::len),
            Self::Size { key, .. } => key.len(),
            Self::Used { .. } => 0,
        }
    }
}
