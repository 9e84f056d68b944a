//! Records of model calls, and their replay. Each call's request (as sent: the budget's
//! `max_tokens` included, no credentials) and its whole outcome, answer or error, become one
//! [`CallRecord`]; a [`Replayer`] serves the outcomes back in order and fails on the first
//! request that differs from its record, so a replay contacts no model.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::endpoint::EndpointId;
use crate::error::ModelError;
use crate::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse};

/// What a call ended with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome<T> {
    Answer(T),
    Error(ModelError),
}

impl<T> From<Result<T, ModelError>> for Outcome<T> {
    fn from(result: Result<T, ModelError>) -> Self {
        match result {
            Ok(answer) => Outcome::Answer(answer),
            Err(error) => Outcome::Error(error),
        }
    }
}

impl<T> From<Outcome<T>> for Result<T, ModelError> {
    fn from(outcome: Outcome<T>) -> Self {
        match outcome {
            Outcome::Answer(answer) => Ok(answer),
            Outcome::Error(error) => Err(error),
        }
    }
}

/// One call of either kind.
// One per model call, each costing a provider round trip: boxing the larger variant would
// save nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "call")]
pub enum Call {
    Chat {
        request: ChatRequest,
        outcome: Outcome<ChatResponse>,
    },
    Embed {
        request: EmbeddingRequest,
        outcome: Outcome<EmbeddingResponse>,
    },
}

/// One model call as the trace keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// Which endpoint and model id answered (the attestation names them).
    pub endpoint: EndpointId,
    #[serde(flatten)]
    pub call: Call,
}

impl CallRecord {
    /// The record's canonical bytes (its JSON, fields in declaration order): what the trace
    /// digests and what its size bound counts.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Bytes kept for the record of a call whose own record would not fit: room enough for the
/// request's stand-in error.
pub const RESERVE_BYTES: usize = 1024;

/// The records of one task, under a ceiling on their canonical bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    records: Vec<CallRecord>,
    bytes: usize,
    ceiling: usize,
}

impl Recording {
    pub fn new(ceiling: usize) -> Recording {
        Recording {
            records: Vec::new(),
            bytes: 0,
            ceiling,
        }
    }

    pub fn records(&self) -> &[CallRecord] {
        &self.records
    }

    pub fn into_records(self) -> Vec<CallRecord> {
        self.records
    }

    /// Canonical bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes left under the ceiling.
    pub fn room(&self) -> usize {
        self.ceiling.saturating_sub(self.bytes)
    }

    /// Keeps `record`. One that does not fit is kept with its answer replaced by an error
    /// saying so (the guest gets that error too, and a replay serves it the same way); that
    /// stand-in fits when the request left [`RESERVE_BYTES`] of room, which
    /// [`Recording::admits`] checks before the call. Returns the outcome as kept.
    pub fn push(&mut self, mut record: CallRecord) -> CallRecord {
        let mut size = record.canonical_bytes().len();
        if size > self.room() {
            let error = ModelError::provider(
                200,
                format!(
                    "the answer does not fit in the {} bytes left for the task's trace",
                    self.room()
                ),
            );
            match &mut record.call {
                Call::Chat { outcome, .. } => *outcome = Outcome::Error(error),
                Call::Embed { outcome, .. } => *outcome = Outcome::Error(error),
            }
            size = record.canonical_bytes().len();
        }
        self.bytes += size;
        self.records.push(record.clone());
        record
    }

    /// Whether a call whose request takes `request_bytes` may start: its record must at
    /// least fit with a short error in place of the answer.
    pub fn admits(&self, request_bytes: usize) -> bool {
        request_bytes.saturating_add(RESERVE_BYTES) <= self.room()
    }
}

/// Why a replay stopped: the run asked for something the record does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model call {index} differs from the recorded run: {what}")]
pub struct Divergence {
    /// 0-based position of the call in the run.
    pub index: usize,
    pub what: String,
}

/// Serves recorded outcomes in order.
#[derive(Debug, Clone)]
pub struct Replayer {
    left: VecDeque<CallRecord>,
    served: usize,
}

impl Replayer {
    pub fn new(records: impl IntoIterator<Item = CallRecord>) -> Replayer {
        Replayer {
            left: records.into_iter().collect(),
            served: 0,
        }
    }

    /// Adds a record to serve after those already held.
    pub fn push(&mut self, record: CallRecord) {
        self.left.push_back(record);
    }

    /// The recorded outcome of this chat call, if it is the call the record holds next.
    pub fn chat(
        &mut self,
        endpoint: &EndpointId,
        request: &ChatRequest,
    ) -> Result<Outcome<ChatResponse>, Divergence> {
        match self.next(endpoint)? {
            Call::Chat {
                request: recorded,
                outcome,
            } => {
                self.same(differences_chat(&recorded, request))?;
                Ok(outcome)
            }
            Call::Embed { .. } => Err(self.diverged("a chat call where an embedding was recorded")),
        }
    }

    /// The recorded outcome of this embedding call, if it is the call the record holds next.
    pub fn embed(
        &mut self,
        endpoint: &EndpointId,
        request: &EmbeddingRequest,
    ) -> Result<Outcome<EmbeddingResponse>, Divergence> {
        match self.next(endpoint)? {
            Call::Embed {
                request: recorded,
                outcome,
            } => {
                let mut diffs = Vec::new();
                if recorded.inputs != request.inputs {
                    diffs.push("inputs");
                }
                if recorded.dimensions != request.dimensions {
                    diffs.push("dimensions");
                }
                self.same(diffs)?;
                Ok(outcome)
            }
            Call::Chat { .. } => Err(self.diverged("an embedding where a chat call was recorded")),
        }
    }

    /// Fails when recorded calls were never made (a replay that ended early).
    pub fn finish(&self) -> Result<(), Divergence> {
        match self.left.len() {
            0 => Ok(()),
            n => Err(Divergence {
                index: self.served,
                what: format!("the run ended with {n} recorded model calls not made"),
            }),
        }
    }

    fn next(&mut self, endpoint: &EndpointId) -> Result<Call, Divergence> {
        let Some(record) = self.left.pop_front() else {
            return Err(self.diverged("no recorded call is left"));
        };
        self.served += 1;
        if &record.endpoint != endpoint {
            return Err(self.diverged(&format!(
                "recorded {} model {:?}, asked {} model {:?}",
                record.endpoint.base_url, record.endpoint.model, endpoint.base_url, endpoint.model
            )));
        }
        Ok(record.call)
    }

    fn same(&self, diffs: Vec<&str>) -> Result<(), Divergence> {
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(self.diverged(&format!("the request's {} differ", diffs.join(", "))))
        }
    }

    /// A divergence at the call just taken (or the next one, when none was).
    fn diverged(&self, what: &str) -> Divergence {
        Divergence {
            index: self.served.saturating_sub(1),
            what: what.to_string(),
        }
    }
}

/// The fields in which two chat requests differ, by name.
fn differences_chat(a: &ChatRequest, b: &ChatRequest) -> Vec<&'static str> {
    let checks = [
        ("messages", a.messages == b.messages),
        ("tools", a.tools == b.tools),
        ("tool choice", a.tool_choice == b.tool_choice),
        ("response format", a.response_format == b.response_format),
        ("max tokens", a.max_tokens == b.max_tokens),
        (
            "temperature",
            a.temperature.map(f32::to_bits) == b.temperature.map(f32::to_bits),
        ),
        ("seed", a.seed == b.seed),
        ("stop", a.stop == b.stop),
    ];
    checks
        .into_iter()
        .filter(|(_, same)| !same)
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ModelProvider;
    use crate::types::{FinishReason, Message, Usage};

    fn endpoint() -> EndpointId {
        EndpointId {
            kind: ModelProvider::OpenAI,
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "tiny".into(),
        }
    }

    fn chat(text: &str) -> CallRecord {
        CallRecord {
            endpoint: endpoint(),
            call: Call::Chat {
                request: ChatRequest {
                    messages: vec![Message::user(text)],
                    max_tokens: Some(8),
                    temperature: Some(0.5),
                    ..ChatRequest::default()
                },
                outcome: Outcome::Answer(ChatResponse {
                    message: Message::assistant(format!("re: {text}")),
                    finish_reason: FinishReason::Stop,
                    usage: Usage {
                        input_tokens: 3,
                        output_tokens: 2,
                        cached_input_tokens: 0,
                    },
                    model: "tiny".into(),
                }),
            },
        }
    }

    fn request_of(record: &CallRecord) -> ChatRequest {
        match &record.call {
            Call::Chat { request, .. } => request.clone(),
            Call::Embed { .. } => panic!("chat"),
        }
    }

    #[test]
    fn a_record_round_trips_through_its_canonical_json() {
        let errored = CallRecord {
            call: Call::Embed {
                request: EmbeddingRequest {
                    inputs: vec!["a".into()],
                    dimensions: None,
                },
                outcome: Outcome::Error(ModelError::rate_limited(None, "slow")),
            },
            ..chat("x")
        };
        for record in [chat("hello"), errored] {
            let bytes = record.canonical_bytes();
            let back: CallRecord = serde_json::from_slice(&bytes).expect("parses");
            assert_eq!(back, record);
            assert_eq!(back.canonical_bytes(), bytes, "stable");
        }
    }

    #[test]
    fn replay_serves_in_order_and_stops_at_the_first_difference() {
        let records = vec![chat("one"), chat("two")];
        let mut replay = Replayer::new(records.clone());
        let first = replay
            .chat(&endpoint(), &request_of(&records[0]))
            .expect("same");
        let Outcome::Answer(answer) = first else {
            panic!("answer");
        };
        assert_eq!(answer.message.content.as_deref(), Some("re: one"));
        assert!(replay.finish().is_err(), "one call not made yet");

        let mut changed = request_of(&records[1]);
        changed.temperature = Some(0.6);
        let err = replay.chat(&endpoint(), &changed).expect_err("differs");
        assert_eq!(err.index, 1);
        assert!(err.what.contains("temperature"), "{err}");

        let mut replay = Replayer::new(records.clone());
        let mut other = endpoint();
        other.model = "big".into();
        let err = replay
            .chat(&other, &request_of(&records[0]))
            .expect_err("model");
        assert!(err.to_string().contains("big"), "{err}");

        let mut replay = Replayer::new(records.clone());
        let embed = EmbeddingRequest::default();
        assert!(replay.embed(&endpoint(), &embed).is_err(), "kind differs");

        let mut replay = Replayer::new(Vec::new());
        let err = replay
            .chat(&endpoint(), &request_of(&records[0]))
            .expect_err("none");
        assert_eq!(err.index, 0);
    }

    #[test]
    fn the_recording_stays_under_its_ceiling() {
        let one = chat("hello").canonical_bytes().len();
        let mut recording = Recording::new(one + RESERVE_BYTES);
        assert!(recording.admits(100));
        let kept = recording.push(chat("hello"));
        assert_eq!(kept, chat("hello"));
        assert!(!recording.admits(100), "less than the reserve is left");

        let mut tight = Recording::new(RESERVE_BYTES + 200);
        let big = chat(&"x".repeat(600));
        assert!(big.canonical_bytes().len() > tight.room());
        let kept = tight.push(big);
        let Call::Chat {
            outcome: Outcome::Error(ModelError::Provider { message, .. }),
            ..
        } = &kept.call
        else {
            panic!("the answer is replaced: {kept:?}");
        };
        assert!(message.contains("does not fit"), "{message}");
        assert_eq!(tight.records(), [kept]);
    }
}
