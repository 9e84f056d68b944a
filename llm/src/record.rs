//! Records of model calls, and their replay. Each call's request (as sent: the budget's
//! `max_tokens` included, no credentials) and its whole outcome, answer or error, become one
//! [`CallRecord`]; a [`Replayer`] serves the outcomes back in order and fails on the first
//! request that differs from its record, so a replay contacts no model.

use ari_model::record::{self, Replay};
use serde::{Deserialize, Serialize};

use crate::endpoint::EndpointId;
use crate::error::ModelError;
use crate::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse};

pub use ari_model::record::{Divergence, RESERVE_BYTES, Record};

/// What a call ended with.
pub type Outcome<T> = record::Outcome<T, ModelError>;

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

impl Record for CallRecord {
    const KIND: &'static str = "model call";

    fn replace_answer(&mut self, message: String) {
        let error = ModelError::provider(200, message);
        match &mut self.call {
            Call::Chat { outcome, .. } => *outcome = Outcome::Error(error),
            Call::Embed { outcome, .. } => *outcome = Outcome::Error(error),
        }
    }
}

/// The records of one task, under a ceiling on their canonical bytes.
pub type Recording = record::Recording<CallRecord>;

/// Serves recorded outcomes in order.
#[derive(Debug, Clone, Default)]
pub struct Replayer(Replay<CallRecord>);

impl Replayer {
    pub fn new(records: impl IntoIterator<Item = CallRecord>) -> Replayer {
        Replayer(Replay::new(records))
    }

    /// Adds a record to serve after those already held.
    pub fn push(&mut self, record: CallRecord) {
        self.0.push(record);
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
        self.0.finish()
    }

    fn next(&mut self, endpoint: &EndpointId) -> Result<Call, Divergence> {
        let record = self.0.take()?;
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

    fn diverged(&self, what: &str) -> Divergence {
        self.0.diverged(what)
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
