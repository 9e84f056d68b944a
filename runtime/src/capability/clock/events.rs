//! Each read of the logical clock as a trace event.

use serde::{Deserialize, Serialize};

use crate::trace::CapabilityEvent;

/// One read of the logical clock (`now` or a WASI clock with `timeAccess`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum ClockEvent {
    #[serde(rename = "time")]
    Time { nanos: u64 },
}

impl ClockEvent {
    pub const TIME: &'static str = "time";
}

impl CapabilityEvent for ClockEvent {
    const KINDS: &'static [(u8, &'static str)] = &[(6, Self::TIME)];

    fn kind(&self) -> &'static str {
        Self::TIME
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        let Self::Time { nanos } = self;
        out.extend_from_slice(&nanos.to_le_bytes());
    }

    fn heap_bytes(&self) -> usize {
        0
    }
}
