//! Conversations: a Task may end its turn asking for input (it ends `Succeeded`, reason
//! `InputRequired`, its output the question), and a later Task that names it
//! (`spec.continues`) is the next turn, with the earlier turns available to its guest.
//!
//! The turns form a chain by name; each turn's attestation signs where it sits
//! ([`ConversationLink`]): the turn before it and that turn's attestation digest, so a
//! verifier walks a whole conversation from its last attestation back to its first.

use serde::{Deserialize, Serialize};

/// The most recent turns a guest is given; older ones are left out (the guest sees which
/// turn its history starts at).
pub const MAX_HISTORY_TURNS: usize = 32;
/// Input and output bytes of the turns a guest is given, together; the oldest are left out
/// first.
pub const MAX_HISTORY_BYTES: usize = 256 * 1024;
/// Turns one conversation may have: past it a reply is refused, so no chain grows without
/// bound (each turn is a Task the cluster keeps).
pub const MAX_TURNS: u32 = 1_000;

/// One earlier turn, as the guest sees it: what was asked of the Agent and what it answered
/// (the question it ended that turn with).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// 1 for the conversation's first Task.
    pub number: u32,
    /// The turn's Task.
    pub task: String,
    #[serde(with = "b64")]
    pub input: Vec<u8>,
    #[serde(with = "b64")]
    pub output: Vec<u8>,
}

impl Turn {
    fn bytes(&self) -> usize {
        self.input.len() + self.output.len()
    }
}

/// The most recent of `turns` (oldest first) within [`MAX_HISTORY_TURNS`] and
/// [`MAX_HISTORY_BYTES`], oldest first.
pub fn bounded(mut turns: Vec<Turn>) -> Vec<Turn> {
    let mut keep = 0;
    let mut bytes = 0;
    for turn in turns.iter().rev() {
        if keep == MAX_HISTORY_TURNS || bytes + turn.bytes() > MAX_HISTORY_BYTES {
            break;
        }
        bytes += turn.bytes();
        keep += 1;
    }
    turns.drain(..turns.len() - keep);
    turns
}

/// Where a turn sits in its conversation, as its attestation signs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationLink {
    /// The conversation's first Task (its name is the conversation's).
    pub conversation: String,
    /// This turn's number: 2 for the first reply.
    pub turn: u32,
    /// The turn this one continues.
    pub previous: String,
    /// Hex SHA-256 of that turn's attestation envelope ([`crate::Attestation::sha256`]).
    pub previous_attestation_sha256: String,
}

mod b64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(number: u32, bytes: usize) -> Turn {
        Turn {
            number,
            task: format!("t-{number}"),
            input: vec![b'i'; bytes / 2],
            output: vec![b'o'; bytes - bytes / 2],
        }
    }

    #[test]
    fn history_keeps_the_most_recent_turns_within_both_bounds() {
        let many: Vec<_> = (1..=40).map(|n| turn(n, 10)).collect();
        let kept = bounded(many);
        assert_eq!(kept.len(), MAX_HISTORY_TURNS);
        assert_eq!(kept.first().map(|t| t.number), Some(9));
        assert_eq!(kept.last().map(|t| t.number), Some(40));

        let big = vec![turn(1, 200_000), turn(2, 100_000), turn(3, 100_000)];
        let kept = bounded(big);
        assert_eq!(kept.iter().map(|t| t.number).collect::<Vec<_>>(), [2, 3]);

        assert_eq!(bounded(vec![turn(1, MAX_HISTORY_BYTES + 1)]), Vec::new());
    }

    #[test]
    fn a_turn_round_trips_through_json_as_base64() {
        let t = turn(3, 4);
        let json = serde_json::to_string(&t).expect("json");
        assert!(json.contains("\"input\":\"aWk=\""), "{json}");
        assert_eq!(serde_json::from_str::<Turn>(&json).expect("back"), t);
    }
}
