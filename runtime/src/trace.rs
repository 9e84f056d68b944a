//! The host-call trace: every piece of outside data a task consumed, in order.
//!
//! Recording what came *in* (storage reads, HTTP responses, time, random
//! bytes) is what makes a run replayable: a replay feeds the same values back
//! to the guest without touching storage or the network. The trace digest
//! (`Trace::sha256`) goes into the attestation, over a canonical byte encoding
//! documented in `docs/capabilities.md`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capability::CapError;

/// An ordered list of recorded host-call results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    pub events: Vec<TraceEvent>,
}

/// A capability's own trace events. The capability names their JSON kinds and canonical tags,
/// encodes their fields and says how much memory they hold; [`TraceEvent`] only gathers every
/// capability's type (see `trace_events!` below), from the one list of capabilities.
pub trait CapabilityEvent:
    Clone + Into<TraceEvent> + TryFrom<TraceEvent, Error = TraceEvent>
{
    /// Every `(tag, kind)` this type produces: the tag byte of the canonical encoding and the
    /// `kind` of the JSON form. Both are unique across all capabilities (tested).
    const KINDS: &'static [(u8, &'static str)];

    /// This event's kind, one of [`CapabilityEvent::KINDS`].
    fn kind(&self) -> &'static str;

    /// Appends the canonical bytes of the fields (the tag is written by the trace).
    fn encode_fields(&self, out: &mut Vec<u8>);

    /// Heap bytes this event holds, for the trace ceiling.
    fn heap_bytes(&self) -> usize;

    /// The tag of [`CapabilityEvent::kind`].
    fn tag(&self) -> u8 {
        let kind = self.kind();
        Self::KINDS
            .iter()
            .find(|(_, k)| *k == kind)
            .map_or(0, |(tag, _)| *tag)
    }
}

/// Declares [`TraceEvent`] as the union of the capabilities' event types (called by
/// `capabilities!`, the one list). The JSON form is the capability's own (each is internally
/// tagged by `kind`), so the union adds no nesting.
macro_rules! trace_events {
    ($($variant:ident($ty:ty)),+ $(,)?) => {
        /// One recorded host-call result, of whichever capability made it.
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(untagged)]
        pub enum TraceEvent {
            $($variant($ty)),+
        }

        impl TraceEvent {
            /// The event's kind, as used in JSON and in divergence messages.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(e) => $crate::trace::CapabilityEvent::kind(e)),+
                }
            }

            pub(crate) fn encode(&self, out: &mut Vec<u8>) {
                match self {
                    $(Self::$variant(e) => {
                        out.push($crate::trace::CapabilityEvent::tag(e));
                        $crate::trace::CapabilityEvent::encode_fields(e, out);
                    }),+
                }
            }

            pub(crate) fn heap_bytes(&self) -> usize {
                match self {
                    $(Self::$variant(e) => $crate::trace::CapabilityEvent::heap_bytes(e)),+
                }
            }

            /// Every `(tag, kind)` of every capability.
            pub fn all_kinds() -> Vec<(u8, &'static str)> {
                [$(<$ty as $crate::trace::CapabilityEvent>::KINDS),+].concat()
            }
        }

        $(
            impl From<$ty> for TraceEvent {
                fn from(event: $ty) -> Self {
                    Self::$variant(event)
                }
            }

            impl TryFrom<TraceEvent> for $ty {
                type Error = TraceEvent;

                fn try_from(event: TraceEvent) -> Result<Self, TraceEvent> {
                    match event {
                        TraceEvent::$variant(e) => Ok(e),
                        other => Err(other),
                    }
                }
            }
        )+
    };
}

pub(crate) use trace_events;

/// The union itself is declared with the capabilities (`capabilities!` in `capability/mod.rs`).
pub use crate::capability::TraceEvent;

/// Length-prefixed (u64 little-endian) byte string.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod gzip_tests {
    use super::*;

    #[test]
    fn a_kept_trace_reads_back_to_the_same_digest_and_a_bomb_is_refused() {
        let trace = Trace::default();
        let gz = trace.to_gzip().expect("gzip");
        let back = Trace::from_gzip(&gz, 1 << 20).expect("reads back");
        assert_eq!(back.sha256_hex(), trace.sha256_hex());
        // A megabyte of zeros compresses to about a kilobyte.
        let bomb = {
            use std::io::Write as _;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(&vec![b' '; 1 << 20]).expect("write");
            gz.finish().expect("finish")
        };
        let err = Trace::from_gzip(&bomb, 64 << 10).expect_err("too large");
        assert!(err.to_string().contains("expands past"), "{err}");
        assert!(Trace::from_gzip(b"not gzip", 1 << 20).is_err());
    }
}

/// Magic prefix of the canonical encoding; bump the version when the layout changes.
pub const CANONICAL_MAGIC: &[u8] = b"ari.trace.v1\0";

impl Trace {
    /// The canonical, unambiguous byte encoding the digest is taken over.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.events.len() * 32);
        out.extend_from_slice(CANONICAL_MAGIC);
        out.extend_from_slice(&(self.events.len() as u64).to_le_bytes());
        for event in &self.events {
            event.encode(&mut out);
        }
        out
    }

    /// SHA-256 of [`Trace::canonical_bytes`].
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(self.canonical_bytes()).into()
    }

    /// Hex form of [`Trace::sha256`], as written into attestations.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256())
    }

    /// The trace's JSON, gzip-compressed: how a Task keeps it beside itself (`spec.trace:
    /// Keep`). The digest is over the canonical encoding, so the JSON's form does not matter.
    pub fn to_gzip(&self) -> Result<Vec<u8>, TraceCodecError> {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        serde_json::to_writer(&mut gz, self).map_err(|e| TraceCodecError(e.to_string()))?;
        gz.flush().map_err(|e| TraceCodecError(e.to_string()))?;
        gz.finish().map_err(|e| TraceCodecError(e.to_string()))
    }

    /// A trace from [`Trace::to_gzip`]'s bytes, reading at most `max_json` bytes of JSON (a
    /// small archive must not expand without bound).
    pub fn from_gzip(gz: &[u8], max_json: u64) -> Result<Trace, TraceCodecError> {
        use std::io::Read as _;
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .take(max_json.saturating_add(1))
            .read_to_end(&mut json)
            .map_err(|e| TraceCodecError(format!("not gzip: {e}")))?;
        if json.len() as u64 > max_json {
            return Err(TraceCodecError(format!(
                "the trace expands past {max_json} bytes"
            )));
        }
        serde_json::from_slice(&json).map_err(|e| TraceCodecError(format!("not a trace: {e}")))
    }
}

/// A trace that could not be compressed or read back.
#[derive(Debug, thiserror::Error)]
#[error("trace encoding: {0}")]
pub struct TraceCodecError(String);

/// Hands recorded events back, in order, checking each is what the guest asks for now.
#[derive(Debug, Clone)]
pub struct ReplayCursor {
    events: Vec<TraceEvent>,
    pos: usize,
}

fn diverged(msg: String) -> CapError {
    CapError::Failed(format!("replay diverged: {msg}"))
}

impl ReplayCursor {
    pub fn new(trace: Trace) -> Self {
        Self {
            events: trace.events,
            pos: 0,
        }
    }

    /// Events not consumed yet; a faithful replay ends with none.
    pub fn remaining(&self) -> usize {
        self.events.len() - self.pos
    }

    /// The next event, which must be of `kind`.
    pub fn next(&mut self, kind: &str) -> Result<TraceEvent, CapError> {
        self.next_any(&[kind])
    }

    /// The next event, which must be of one of `kinds`.
    pub fn next_any(&mut self, kinds: &[&str]) -> Result<TraceEvent, CapError> {
        let want = kinds.join("` or `");
        let Some(event) = self.events.get(self.pos) else {
            return Err(diverged(format!(
                "expected a `{want}` event at #{}, but the trace has ended",
                self.pos
            )));
        };
        if !kinds.contains(&event.kind()) {
            return Err(diverged(format!(
                "expected a `{want}` event at #{}, found `{}`",
                self.pos,
                event.kind()
            )));
        }
        self.pos += 1;
        Ok(event.clone())
    }
}

/// Most host memory one task's trace may take (events plus their data). Cheap recorded calls
/// (`now`, WASI clock reads) are millions a second; without a ceiling a loop on them grows
/// host memory until the deadline (400 MB in 2 s was measured).
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// The task recorded more than [`MAX_TRACE_BYTES`]: the host traps the guest at that call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "trace limit hit: the task recorded more than {0} bytes of outside data (storage reads, \
     HTTP responses, clock reads, random bytes)"
)]
pub struct TraceLimitHit(pub u64);

impl TraceEvent {
    /// Host memory this event takes in a trace (the enum plus its heap data).
    fn footprint(&self) -> u64 {
        (std::mem::size_of::<Self>() + self.heap_bytes()) as u64
    }
}

/// Either records events (live) or serves them from a trace (replay); in both
/// cases the events the task consumed end up in `recorded`, so a faithful
/// replay yields the same trace digest as the original run.
///
/// Recording stops at [`MAX_TRACE_BYTES`]: the event that would pass it is dropped and
/// [`Recorder::overflowed`] turns true, which the host turns into a trap before the guest
/// sees the value. A replay re-records the same events, so it overflows at the same call.
#[derive(Debug)]
pub struct Recorder {
    cursor: Option<ReplayCursor>,
    recorded: Trace,
    bytes: u64,
    limit: u64,
    overflowed: bool,
}

impl Recorder {
    pub fn live() -> Self {
        Self::with_limit(None, MAX_TRACE_BYTES)
    }

    pub fn replay(trace: Trace) -> Self {
        Self::with_limit(Some(ReplayCursor::new(trace)), MAX_TRACE_BYTES)
    }

    fn with_limit(cursor: Option<ReplayCursor>, limit: u64) -> Self {
        Self {
            cursor,
            recorded: Trace::default(),
            bytes: 0,
            limit,
            overflowed: false,
        }
    }

    /// Whether an event was refused because the trace reached its ceiling.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn push(&mut self, event: TraceEvent) {
        let size = event.footprint();
        if self.overflowed || self.bytes.saturating_add(size) > self.limit {
            self.overflowed = true;
            return;
        }
        self.bytes += size;
        self.recorded.events.push(event);
    }

    pub fn is_replay(&self) -> bool {
        self.cursor.is_some()
    }

    /// Records an event observed live.
    pub fn record(&mut self, event: impl Into<TraceEvent>) {
        self.push(event.into());
    }

    /// In replay: the next event, which must be of one of `kinds` of the capability's own
    /// event type `E` (recorded again). Live: an error, because a capability must not ask for
    /// replay data in a live run.
    pub fn replay_next<E: CapabilityEvent>(&mut self, kinds: &[&str]) -> Result<E, CapError> {
        let Some(cursor) = self.cursor.as_mut() else {
            return Err(CapError::Failed(
                "internal: replay data requested in a live run".into(),
            ));
        };
        let event = cursor.next_any(kinds)?;
        self.push(event.clone());
        E::try_from(event).map_err(|other| {
            diverged(format!(
                "a `{}` event is not one of the asking capability's",
                other.kind()
            ))
        })
    }

    /// Replay events not consumed (zero for live runs).
    pub fn remaining(&self) -> usize {
        self.cursor.as_ref().map_or(0, ReplayCursor::remaining)
    }

    /// The recorded trace so far; leaves an empty one behind.
    pub fn take(&mut self) -> Trace {
        std::mem::take(&mut self.recorded)
    }
}

/// The cursor served an event of another kind than a capability asked for. The cursor checks
/// kinds, so this is a bug, not a divergence; shared by the capabilities.
pub(crate) fn internal_kind_mismatch() -> CapError {
    CapError::Failed("replay: internal kind mismatch".into())
}

/// Diverged-replay error for a mismatching field, shared by the capabilities.
pub(crate) fn mismatch(what: &str, expected: &str, found: &str) -> CapError {
    diverged(format!(
        "{what}: the guest asked for `{found}`, the trace has `{expected}`"
    ))
}

/// Base64 (standard alphabet, padded) for byte fields in JSON.
pub(crate) mod b64 {
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

pub(crate) mod b64_opt {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_some(&STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| STANDARD.decode(t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_stops_at_its_ceiling_in_live_and_replay_alike() {
        let event: TraceEvent = ClockEvent::Time { nanos: 1 }.into();
        let limit = event.footprint() * 3;
        let mut live = Recorder::with_limit(None, limit);
        for _ in 0..5 {
            live.record(event.clone());
        }
        assert!(live.overflowed());
        let trace = live.take();
        assert_eq!(trace.events.len(), 3);
        let mut replay = Recorder::with_limit(Some(ReplayCursor::new(trace)), limit);
        for _ in 0..3 {
            replay
                .replay_next::<ClockEvent>(&[ClockEvent::TIME])
                .expect("recorded");
        }
        assert!(!replay.overflowed());
        assert!(
            replay
                .replay_next::<ClockEvent>(&[ClockEvent::TIME])
                .is_err(),
            "the trace has ended"
        );
    }

    use crate::capability::clock::ClockEvent;
    use crate::capability::delegation::DelegationEvent;
    use crate::capability::http::HttpEvent;
    use crate::capability::model::ModelEvent;
    use crate::capability::random::RandomEvent;
    use crate::capability::storage::StorageEvent;
    use crate::capability::tools::ToolEvent;

    fn sample() -> Trace {
        Trace {
            events: vec![
                StorageEvent::Get {
                    key: "count".into(),
                    value: Some(b"41".to_vec()),
                }
                .into(),
                StorageEvent::Get {
                    key: "missing".into(),
                    value: None,
                }
                .into(),
                StorageEvent::Size {
                    key: "count".into(),
                    bytes: Some(7),
                }
                .into(),
                StorageEvent::Used { bytes: 7 }.into(),
                HttpEvent::Exchange {
                    method: "GET".into(),
                    url: "https://api.example.com/x".into(),
                    status: 200,
                    headers: vec![("content-type".into(), "text/plain".into())],
                    body: b"hello".to_vec(),
                }
                .into(),
                HttpEvent::Error {
                    method: "GET".into(),
                    url: "https://api.example.com/y".into(),
                    error: "connection refused".into(),
                }
                .into(),
                ClockEvent::Time {
                    nanos: 1_700_000_000_000_000_000,
                }
                .into(),
                RandomEvent::Bytes {
                    bytes: vec![0, 1, 2, 255],
                }
                .into(),
            ],
        }
    }

    #[test]
    fn every_event_kind_has_one_tag_and_one_name_across_capabilities() {
        let kinds = TraceEvent::all_kinds();
        let mut tags: Vec<u8> = kinds.iter().map(|(t, _)| *t).collect();
        let mut names: Vec<&str> = kinds.iter().map(|(_, k)| *k).collect();
        tags.sort_unstable();
        tags.dedup();
        names.sort_unstable();
        names.dedup();
        assert_eq!(tags.len(), kinds.len(), "a tag used twice: {kinds:?}");
        assert_eq!(names.len(), kinds.len(), "a kind used twice: {kinds:?}");
        assert!(!tags.contains(&0), "tag 0 is never a kind's");
        for event in sample().events {
            assert!(
                kinds.contains(&(event_tag(&event), event.kind())),
                "{event:?}"
            );
        }
    }

    fn event_tag(event: &TraceEvent) -> u8 {
        let mut out = Vec::new();
        event.encode(&mut out);
        out[0]
    }

    /// A model call is tag 10 and its record's canonical JSON as one byte string (the record's
    /// own fields, in declaration order); a deadline is tag 11 alone.
    #[test]
    fn a_model_call_is_encoded_as_its_records_canonical_json() {
        use ari_llm::record::{Call, CallRecord, Outcome, Record as _};
        use ari_llm::types::{ChatRequest, Message};
        let record = CallRecord {
            endpoint: ari_llm::EndpointId {
                kind: ari_llm::ModelProvider::OpenAI,
                base_url: "http://127.0.0.1:1/v1".into(),
                model: "m".into(),
            },
            call: Call::Chat {
                request: ChatRequest {
                    messages: vec![Message::user("hi")],
                    ..ChatRequest::default()
                },
                outcome: Outcome::Error(ari_llm::ModelError::Unavailable {
                    message: "closed".into(),
                }),
            },
        };
        let json = record.canonical_bytes();
        let event: TraceEvent = ModelEvent::call(record).into();
        let mut out = Vec::new();
        event.encode(&mut out);
        let mut want = vec![10u8];
        want.extend_from_slice(&(json.len() as u64).to_le_bytes());
        want.extend_from_slice(&json);
        assert_eq!(out, want);
        let mut deadline = Vec::new();
        TraceEvent::from(ModelEvent::Deadline).encode(&mut deadline);
        assert_eq!(deadline, [11]);
        // The JSON form round-trips, record and all.
        let trace = Trace {
            events: vec![event, ModelEvent::Deadline.into()],
        };
        let text = serde_json::to_string(&trace).expect("json");
        assert!(text.contains(r#""kind":"modelCall""#), "{text}");
        assert_eq!(serde_json::from_str::<Trace>(&text).expect("parses"), trace);
    }

    /// A tools exchange is tag 13 and its record's canonical JSON as one byte string; a
    /// deadline is tag 14 alone.
    #[test]
    fn a_tools_exchange_is_encoded_as_its_records_canonical_json() {
        use ari_mcp::record::{Call, CallRecord, Outcome, Record as _};
        let record = CallRecord {
            server: ari_mcp::ServerId {
                name: "docs".into(),
                url: "http://127.0.0.1:1/mcp".into(),
            },
            call: Call::Tool {
                tool: "echo".into(),
                arguments: serde_json::Map::new(),
                outcome: Outcome::Error(ari_mcp::ToolError::unavailable("closed")),
            },
        };
        let json = record.canonical_bytes();
        let event: TraceEvent = ToolEvent::call(record).into();
        let mut out = Vec::new();
        event.encode(&mut out);
        let mut want = vec![13u8];
        want.extend_from_slice(&(json.len() as u64).to_le_bytes());
        want.extend_from_slice(&json);
        assert_eq!(out, want);
        let mut deadline = Vec::new();
        TraceEvent::from(ToolEvent::Deadline).encode(&mut deadline);
        assert_eq!(deadline, [14]);
        let trace = Trace {
            events: vec![event, ToolEvent::Deadline.into()],
        };
        let text = serde_json::to_string(&trace).expect("json");
        assert!(text.contains(r#""kind":"toolCall""#), "{text}");
        assert_eq!(serde_json::from_str::<Trace>(&text).expect("parses"), trace);
    }

    #[test]
    fn an_unknown_kind_is_refused_when_a_trace_is_read() {
        let err = serde_json::from_str::<Trace>(r#"{"events":[{"kind":"teleport"}]}"#);
        assert!(err.is_err(), "{err:?}");
    }

    #[test]
    fn a_replay_asking_for_another_capabilitys_event_diverges() {
        let mut r = Recorder::replay(sample());
        let err = r
            .replay_next::<ClockEvent>(&[StorageEvent::GET])
            .unwrap_err();
        assert!(
            matches!(&err, CapError::Failed(m) if m.starts_with("replay diverged")),
            "{err:?}"
        );
    }

    #[test]
    fn trace_digest_is_stable() {
        // Pinned: a change here means every existing attestation stops verifying.
        assert_eq!(
            sample().sha256_hex(),
            "59856e91777023c749910b98ec906b098a9c8c2de430988f262f470e61314bdf",
            "canonical encoding changed; bump CANONICAL_MAGIC and update docs"
        );
    }

    #[test]
    fn trace_digest_changes_with_any_field() {
        let base = sample().sha256();
        let mut t = sample();
        if let TraceEvent::Http(HttpEvent::Exchange { body, .. }) = &mut t.events[4] {
            body.push(b'!');
        }
        assert_ne!(t.sha256(), base);
        let mut t = sample();
        t.events.swap(0, 1);
        assert_ne!(t.sha256(), base);
        // `Some(empty)` and `None` must not collide.
        let a = Trace {
            events: vec![
                StorageEvent::Get {
                    key: "k".into(),
                    value: None,
                }
                .into(),
            ],
        };
        let b = Trace {
            events: vec![
                StorageEvent::Get {
                    key: "k".into(),
                    value: Some(vec![]),
                }
                .into(),
            ],
        };
        assert_ne!(a.sha256(), b.sha256());
    }

    #[test]
    fn trace_json_round_trips_with_base64_and_camel_case() {
        let t = sample();
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains(r#""kind":"storageGet""#), "{json}");
        assert!(json.contains(r#""value":"NDE=""#), "{json}");
        assert!(json.contains(r#""body":"aGVsbG8=""#), "{json}");
        assert!(json.contains(r#""kind":"httpError""#), "{json}");
        let back: Trace = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.sha256(), t.sha256());
    }

    #[test]
    fn trace_cursor_returns_in_order_and_detects_divergence() {
        let mut c = ReplayCursor::new(sample());
        assert_eq!(c.next("storageGet").unwrap().kind(), "storageGet");
        let err = c.next("time").unwrap_err();
        assert!(
            matches!(&err, CapError::Failed(m) if m.starts_with("replay diverged") && m.contains("storageGet")),
            "{err:?}"
        );
        // A mismatch does not consume.
        assert_eq!(c.next("storageGet").unwrap().kind(), "storageGet");
        assert_eq!(c.remaining(), 6);
        let mut end = ReplayCursor::new(Trace::default());
        assert!(matches!(end.next("time"), Err(CapError::Failed(m)) if m.contains("ended")));
    }

    #[test]
    fn trace_recorder_rerecords_replayed_events() {
        let mut r = Recorder::replay(sample());
        for e in sample().events {
            let kind = e.kind();
            match e {
                TraceEvent::Storage(_) => r.replay_next::<StorageEvent>(&[kind]).map(|_| ()),
                TraceEvent::Http(_) => r.replay_next::<HttpEvent>(&[kind]).map(|_| ()),
                TraceEvent::Clock(_) => r.replay_next::<ClockEvent>(&[kind]).map(|_| ()),
                TraceEvent::Random(_) => r.replay_next::<RandomEvent>(&[kind]).map(|_| ()),
                TraceEvent::Delegation(_) => r.replay_next::<DelegationEvent>(&[kind]).map(|_| ()),
                TraceEvent::Model(_) => r.replay_next::<ModelEvent>(&[kind]).map(|_| ()),
                TraceEvent::Tools(_) => r.replay_next::<ToolEvent>(&[kind]).map(|_| ()),
                TraceEvent::Conversation(_) => r
                    .replay_next::<crate::capability::conversation::ConversationEvent>(&[kind])
                    .map(|_| ()),
            }
            .unwrap();
        }
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.take().sha256(), sample().sha256());
        let mut live = Recorder::live();
        assert!(live.replay_next::<ClockEvent>(&[ClockEvent::TIME]).is_err());
    }
}
