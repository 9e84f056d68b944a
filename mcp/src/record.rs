//! Records of tools exchanges, and their replay. Each exchange's request (the server, the
//! tool and its arguments as sent, no credentials) and its whole outcome, answer or error,
//! become one [`CallRecord`]; a [`Replayer`] serves the outcomes back in order and fails on the
//! first request that differs from its record, so a replay contacts no server.

use ari_model::record::{self, Replay, clip};
use serde::{Deserialize, Serialize};

use crate::error::ToolError;
use crate::server::ServerId;
use crate::types::{Arguments, ToolInfo, ToolResult};

pub use ari_model::record::{Divergence, RESERVE_BYTES, Record};

/// What an exchange ended with.
pub type Outcome<T> = record::Outcome<T, ToolError>;

/// One exchange of either kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "call")]
pub enum Call {
    /// `tools/list`, every page.
    List { outcome: Outcome<Vec<ToolInfo>> },
    /// `tools/call`.
    Tool {
        tool: String,
        arguments: Arguments,
        outcome: Outcome<ToolResult>,
    },
}

/// One exchange as the trace keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// Which server answered (its name and URL, never its credentials).
    pub server: ServerId,
    #[serde(flatten)]
    pub call: Call,
}

impl Record for CallRecord {
    const KIND: &'static str = "tools exchange";

    /// A `too-large` error in place of the answer.
    fn replace_answer(&mut self, message: String) {
        let error = ToolError::too_large(message);
        match &mut self.call {
            Call::List { outcome } => *outcome = Outcome::Error(error),
            Call::Tool { outcome, .. } => *outcome = Outcome::Error(error),
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

    /// The recorded outcome of listing `server`'s tools, if that is what the record holds next.
    pub fn list(&mut self, server: &ServerId) -> Result<Outcome<Vec<ToolInfo>>, Divergence> {
        match self.next(server)? {
            Call::List { outcome } => Ok(outcome),
            Call::Tool { tool, .. } => Err(self.diverged(&format!(
                "the run listed the tools where the record called `{tool}`"
            ))),
        }
    }

    /// The recorded outcome of this call, if it is the call the record holds next.
    pub fn call(
        &mut self,
        server: &ServerId,
        tool: &str,
        arguments: &Arguments,
    ) -> Result<Outcome<ToolResult>, Divergence> {
        match self.next(server)? {
            Call::Tool {
                tool: recorded,
                arguments: recorded_arguments,
                outcome,
            } => {
                if recorded != tool {
                    return Err(self.diverged(&format!(
                        "the run called `{}`, the record `{recorded}`",
                        clip(tool)
                    )));
                }
                if &recorded_arguments != arguments {
                    return Err(self.diverged(&format!(
                        "the arguments of `{recorded}` differ from the record's"
                    )));
                }
                Ok(outcome)
            }
            Call::List { .. } => Err(self.diverged(&format!(
                "the run called `{}` where the record listed the tools",
                clip(tool)
            ))),
        }
    }

    /// Fails when recorded exchanges were never made (a replay that ended early).
    pub fn finish(&self) -> Result<(), Divergence> {
        self.0.finish()
    }

    fn next(&mut self, server: &ServerId) -> Result<Call, Divergence> {
        let record = self.0.take()?;
        if &record.server != server {
            return Err(self.diverged(&format!(
                "recorded server `{}` at {}, asked `{}` at {}",
                record.server.name, record.server.url, server.name, server.url
            )));
        }
        Ok(record.call)
    }

    fn diverged(&self, what: &str) -> Divergence {
        self.0.diverged(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server() -> ServerId {
        ServerId {
            name: "docs".into(),
            url: "http://127.0.0.1:9/mcp".into(),
        }
    }

    fn args(v: serde_json::Value) -> Arguments {
        v.as_object().cloned().expect("object")
    }

    fn call(text: &str) -> CallRecord {
        CallRecord {
            server: server(),
            call: Call::Tool {
                tool: "echo".into(),
                arguments: args(json!({"text": text})),
                outcome: Outcome::Answer(ToolResult {
                    content: vec![json!({"type": "text", "text": text})],
                    structured: None,
                    is_error: false,
                }),
            },
        }
    }

    #[test]
    fn a_record_round_trips_through_its_canonical_json() {
        let listed = CallRecord {
            server: server(),
            call: Call::List {
                outcome: Outcome::Error(ToolError::unavailable("refused")),
            },
        };
        for record in [call("hello"), listed] {
            let bytes = record.canonical_bytes();
            let back: CallRecord = serde_json::from_slice(&bytes).expect("parses");
            assert_eq!(back, record);
            assert_eq!(back.canonical_bytes(), bytes, "stable");
        }
        let text = String::from_utf8(call("hi").canonical_bytes()).expect("utf-8");
        assert!(
            text.starts_with(r#"{"server":{"name":"docs","url":"http://127.0.0.1:9/mcp"},"call":"tool","tool":"echo""#),
            "{text}"
        );
    }

    #[test]
    fn replay_serves_in_order_and_stops_at_the_first_difference() {
        let mut replay = Replayer::new([call("one"), call("two")]);
        let first = replay
            .call(&server(), "echo", &args(json!({"text": "one"})))
            .expect("same");
        assert!(matches!(first, Outcome::Answer(r) if r.text() == "one"));
        assert!(replay.finish().is_err(), "one exchange not made yet");
        let err = replay
            .call(&server(), "echo", &args(json!({"text": "changed"})))
            .expect_err("differs");
        assert_eq!(err.index, 1);
        assert!(err.what.contains("arguments"), "{err}");

        let mut replay = Replayer::new([call("one")]);
        let err = replay
            .call(&server(), "add", &args(json!({"text": "one"})))
            .expect_err("tool");
        assert!(err.what.contains("`add`"), "{err}");

        let mut replay = Replayer::new([call("one")]);
        let other = ServerId {
            name: "other".into(),
            ..server()
        };
        assert!(replay.list(&other).is_err(), "server differs");
        let mut replay = Replayer::new([call("one")]);
        assert!(replay.list(&server()).is_err(), "kind differs");
        let mut replay = Replayer::new([]);
        assert_eq!(replay.list(&server()).expect_err("none").index, 0);
    }

    #[test]
    fn the_recording_stays_under_its_ceiling() {
        let one = call("hello").canonical_bytes().len();
        let mut recording = Recording::new(one + RESERVE_BYTES);
        assert!(recording.admits(10));
        assert_eq!(recording.push(call("hello")), call("hello"));
        assert!(!recording.admits(10));

        let mut tight = Recording::new(RESERVE_BYTES);
        let kept = tight.push(call(&"x".repeat(2000)));
        let Call::Tool {
            outcome: Outcome::Error(ToolError::TooLarge { message }),
            ..
        } = &kept.call
        else {
            panic!("the answer is replaced: {kept:?}");
        };
        assert!(message.contains("does not fit"), "{message}");
    }
}
