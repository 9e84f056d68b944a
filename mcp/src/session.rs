//! A task's tools exchanges: each made live or served from a record, and recorded. The
//! runtime holds one per task; it decides grants, this decides everything the server's
//! answers decide (which tools exist) and everything bounded (arguments, records).

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::client::{Client, Connection};
use crate::error::ToolError;
use crate::record::{Call, CallRecord, Divergence, Outcome, Recording, Replayer};
use crate::server::ToolServer;
use crate::types::{Arguments, ToolInfo, ToolResult};
use ari_model::record::clip;

/// Where answers come from.
pub enum Source {
    /// The servers.
    Live(Client),
    /// A recorded run (`ari verify`): no server is contacted.
    Replay(Replayer),
}

/// Why an exchange returned no outcome for the guest.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The guest's error: the WIT's `tool-error`.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A replay met a request its record does not hold: the replay has failed.
    #[error(transparent)]
    Diverged(#[from] Divergence),
}

pub struct Session {
    source: Source,
    recording: Recording,
    /// What each server listed last, by server name.
    listed: BTreeMap<String, Vec<ToolInfo>>,
    /// Open client sessions, by server name (live only).
    connections: BTreeMap<String, Connection>,
    max_arguments_bytes: usize,
}

impl Session {
    /// Records kept under `trace_ceiling` bytes; arguments of at most `max_arguments_bytes`.
    pub fn new(source: Source, trace_ceiling: usize, max_arguments_bytes: usize) -> Session {
        Session {
            source,
            recording: Recording::new(trace_ceiling),
            listed: BTreeMap::new(),
            connections: BTreeMap::new(),
            max_arguments_bytes,
        }
    }

    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// The record of the last exchange, as kept (what a host's trace should hold).
    pub fn last_record(&self) -> Option<&CallRecord> {
        self.recording.records().last()
    }

    /// Ends the session: its records, or the divergence of a replay that ended early.
    pub fn finish(self) -> Result<Vec<CallRecord>, Divergence> {
        if let Source::Replay(replayer) = &self.source {
            replayer.finish()?;
        }
        Ok(self.recording.records().to_vec())
    }

    /// Hands a replay session the next recorded exchange (a host whose trace holds the records
    /// passes them on one at a time). A live session ignores it.
    pub fn queue_recorded(&mut self, record: CallRecord) {
        if let Source::Replay(replayer) = &mut self.source {
            replayer.push(record);
        }
    }

    /// What `server` listed last in this task, if it was listed.
    pub fn listed(&self, server: &str) -> Option<&[ToolInfo]> {
        self.listed.get(server).map(Vec::as_slice)
    }

    /// The arguments of a call as the guest wrote them (JSON text), checked: a JSON object, at
    /// most the bound, and room for its record. Nothing is sent.
    pub fn admit_arguments(&self, arguments: &str) -> Result<Arguments, ToolError> {
        if arguments.len() > self.max_arguments_bytes {
            return Err(ToolError::invalid(format!(
                "the arguments are {} bytes, more than the {} allowed",
                arguments.len(),
                self.max_arguments_bytes
            )));
        }
        let text = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| ToolError::invalid(format!("the arguments are not JSON: {e}")))?;
        let serde_json::Value::Object(arguments) = value else {
            return Err(ToolError::invalid("the arguments must be a JSON object"));
        };
        self.room_for(text.len())?;
        Ok(arguments)
    }

    /// Whether the task's records have room for one more exchange.
    pub fn room_for(&self, request_bytes: usize) -> Result<(), ToolError> {
        if self.recording.admits(request_bytes) {
            Ok(())
        } else {
            Err(ToolError::too_large(
                "the task's trace has no room left for another tools exchange",
            ))
        }
    }

    /// `tool` as `server` listed it (its hints decide approval); a call on a server not listed yet must
    /// list it first (the host does, recording it), so that a tool it does not offer is
    /// refused without a call.
    pub fn find(&self, server: &str, tool: &str) -> Result<&ToolInfo, ToolError> {
        match self
            .listed(server)
            .and_then(|tools| tools.iter().find(|t| t.name == tool))
        {
            Some(info) => Ok(info),
            None => Err(ToolError::not_found(format!(
                "server `{}` offers no tool `{}`",
                clip(server),
                clip(tool)
            ))),
        }
    }

    /// Every tool `server` lists.
    pub async fn list(
        &mut self,
        server: &ToolServer,
        deadline: Instant,
    ) -> Result<Vec<ToolInfo>, CallError> {
        let id = server.id();
        let outcome = match &mut self.source {
            Source::Replay(replayer) => replayer.list(&id)?,
            Source::Live(client) => {
                let client = client.clone();
                match self.connection(&client, server, deadline).await {
                    Ok(connection) => Outcome::from(connection.list(server, deadline).await),
                    Err(error) => Outcome::Error(error),
                }
            }
        };
        let kept = self.keep(CallRecord {
            server: id,
            call: Call::List { outcome },
        });
        let Call::List { outcome } = kept.call else {
            unreachable!("a list record stays a list record")
        };
        if let Outcome::Answer(tools) = &outcome {
            self.listed.insert(server.name.clone(), tools.clone());
        }
        Ok(Result::from(outcome)?)
    }

    /// One call of `tool` (which [`Session::find`] found) with `arguments`.
    pub async fn call(
        &mut self,
        server: &ToolServer,
        tool: &str,
        arguments: Arguments,
        deadline: Instant,
    ) -> Result<ToolResult, CallError> {
        let id = server.id();
        let outcome = match &mut self.source {
            Source::Replay(replayer) => replayer.call(&id, tool, &arguments)?,
            Source::Live(client) => {
                let client = client.clone();
                match self.connection(&client, server, deadline).await {
                    Ok(connection) => {
                        Outcome::from(connection.call(server, tool, &arguments, deadline).await)
                    }
                    Err(error) => Outcome::Error(error),
                }
            }
        };
        let kept = self.keep(CallRecord {
            server: id,
            call: Call::Tool {
                tool: tool.to_owned(),
                arguments,
                outcome,
            },
        });
        let Call::Tool { outcome, .. } = kept.call else {
            unreachable!("a tool record stays a tool record")
        };
        Ok(Result::from(outcome)?)
    }

    /// Keeps a record; an exchange that found the server gone, or whose answer broke the
    /// transport, closes its connection (the next one reconnects).
    fn keep(&mut self, record: CallRecord) -> CallRecord {
        let gone = matches!(
            &record.call,
            Call::List {
                outcome: Outcome::Error(
                    ToolError::Unavailable { .. }
                        | ToolError::Timeout { .. }
                        | ToolError::TooLarge { .. }
                )
            } | Call::Tool {
                outcome: Outcome::Error(
                    ToolError::Unavailable { .. }
                        | ToolError::Timeout { .. }
                        | ToolError::TooLarge { .. }
                ),
                ..
            }
        );
        if gone {
            self.connections.remove(&record.server.name);
        }
        self.recording.push(record)
    }

    /// The open client session with `server`, opened if there is none.
    async fn connection(
        &mut self,
        client: &Client,
        server: &ToolServer,
        deadline: Instant,
    ) -> Result<&Connection, ToolError> {
        if !self.connections.contains_key(&server.name) {
            let connection = client.connect(server, deadline).await?;
            self.connections.insert(server.name.clone(), connection);
        }
        self.connections
            .get(&server.name)
            .ok_or_else(|| ToolError::unavailable("the connection was lost"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new(Source::Replay(Replayer::default()), 1 << 20, 64)
    }

    #[test]
    fn arguments_must_be_a_json_object_within_the_bound() {
        let s = session();
        assert!(s.admit_arguments(r#"{"a":1}"#).is_ok());
        assert_eq!(s.admit_arguments("").expect("empty is {}").len(), 0);
        for bad in [
            "[1]",
            "\"x\"",
            "{",
            &format!(r#"{{"a":"{}"}}"#, "x".repeat(100)),
        ] {
            let err = s.admit_arguments(bad).expect_err(bad);
            assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
        }
    }

    #[test]
    fn a_tool_is_found_only_among_what_its_server_listed() {
        let mut s = session();
        assert!(matches!(
            s.find("docs", "echo"),
            Err(ToolError::NotFound { .. })
        ));
        s.listed.insert(
            "docs".into(),
            vec![ToolInfo {
                name: "echo".into(),
                title: None,
                description: None,
                input_schema: serde_json::json!({"type": "object"}),
                hints: Default::default(),
            }],
        );
        assert!(s.find("docs", "echo").is_ok());
        assert!(s.find("docs", "delete").is_err());
    }
}
