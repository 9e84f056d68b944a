//! Bytes handed out by `random-bytes`, as trace events.

use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

/// The bytes one `random-bytes` call returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum RandomEvent {
    #[serde(rename = "random")]
    Bytes {
        #[serde(with = "crate::trace::b64")]
        bytes: Vec<u8>,
    },
}

impl RandomEvent {
    pub const BYTES: &'static str = "random";
}

impl CapabilityEvent for RandomEvent {
    const KINDS: &'static [(u8, &'static str)] = &[(7, Self::BYTES)];

    fn kind(&self) -> &'static str {
        Self::BYTES
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        let Self::Bytes { bytes } = self;
        put_bytes(out, bytes);
    }

    fn heap_bytes(&self) -> usize {
        let Self::Bytes { bytes } = self;
        bytes.len()
    }
}
