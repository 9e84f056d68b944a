//! The history a guest read, as a trace event: a replay serves it without the cluster.

use ari_model::Turn;
use serde::{Deserialize, Serialize};

use crate::trace::{CapabilityEvent, put_bytes};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum ConversationEvent {
    /// The earlier turns `history` returned (read once per task; later reads repeat it).
    #[serde(rename = "history")]
    History { turns: Vec<Turn> },
}

impl ConversationEvent {
    pub const HISTORY: &'static str = "history";
}

impl CapabilityEvent for ConversationEvent {
    const KINDS: &'static [(u8, &'static str)] = &[(20, Self::HISTORY)];

    fn kind(&self) -> &'static str {
        Self::HISTORY
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        let Self::History { turns } = self;
        out.extend_from_slice(&(turns.len() as u64).to_le_bytes());
        for turn in turns {
            out.extend_from_slice(&turn.number.to_le_bytes());
            put_bytes(out, turn.task.as_bytes());
            put_bytes(out, &turn.input);
            put_bytes(out, &turn.output);
        }
    }

    fn heap_bytes(&self) -> usize {
        let Self::History { turns } = self;
        turns
            .iter()
            .map(|t| t.task.len() + t.input.len() + t.output.len())
            .sum()
    }
}
