//! The A2A v1.0 objects the gateway reads and writes, in their JSON form (the protobuf JSON
//! mapping of `a2a.proto`: camelCase fields, enum values by name). Only what ari serves is
//! modelled; unknown fields of requests are ignored.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The versions and binding the card announces (the card is built in `ari_crds::card`, where
/// the operator signs it); `legacy` serves the pre-1.0 one.
pub use ari_crds::card::{JSONRPC_BINDING, LEGACY_PROTOCOL_VERSION, PROTOCOL_VERSION};

/// Where a task is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Paused: a call waits for a person's approval (the metadata's `ari.dev/pendingApproval`
    /// says which; `kubectl ari approve|reject` decides). Work resumes once decided.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
}

impl TaskState {
    /// No further change will come.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Paused until someone acts (A2A's interrupted states).
    pub fn is_interrupted(self) -> bool {
        self == Self::InputRequired
    }

    /// Ended, or paused until someone acts (A2A's interrupted states): a blocking call returns.
    pub fn is_interrupted_or_terminal(self) -> bool {
        self.is_terminal() || self == Self::InputRequired
    }

    /// Parses a `ListTasks` status filter: the v1.0 name, or the pre-1.0 lowercase one.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "TASK_STATE_SUBMITTED" | "submitted" => Self::Submitted,
            "TASK_STATE_WORKING" | "working" => Self::Working,
            "TASK_STATE_INPUT_REQUIRED" | "input-required" => Self::InputRequired,
            "TASK_STATE_COMPLETED" | "completed" => Self::Completed,
            "TASK_STATE_FAILED" | "failed" => Self::Failed,
            "TASK_STATE_CANCELED" | "canceled" | "cancelled" => Self::Canceled,
            "TASK_STATE_REJECTED" | "rejected" => Self::Rejected,
            _ => return None,
        })
    }
}

/// One piece of a message or artifact: exactly one of `text`, `raw` (base64), `url`, `data`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Pre-1.0 parts carry `kind` and put files under `file`; read so they can be refused
    /// clearly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<Value>,
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            media_type: Some("text/plain".into()),
            ..Self::default()
        }
    }
}

/// A message between a client and an agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default)]
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// `ROLE_USER` or `ROLE_AGENT` (pre-1.0: `user`, `agent`).
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// An A2A task: here, one ari Task created from a message.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    pub last_chunk: bool,
}

/// One item of a streaming response.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// `SendMessage` / `SendStreamingMessage` parameters.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    pub message: Message,
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// v1.0: answer with the submitted task at once instead of waiting for the end.
    #[serde(default)]
    pub return_immediately: Option<bool>,
    /// Pre-1.0: `blocking: false` meant the same.
    #[serde(default)]
    pub blocking: Option<bool>,
    #[serde(default)]
    pub history_length: Option<i64>,
    #[serde(default)]
    pub push_notification_config: Option<Value>,
    #[serde(default)]
    pub task_push_notification_config: Option<Value>,
}

/// `GetTask` / `CancelTask` / `SubscribeToTask` parameters.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    pub id: String,
    #[serde(default)]
    pub history_length: Option<i64>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub page_size: Option<i64>,
    #[serde(default)]
    pub page_token: Option<String>,
    #[serde(default)]
    pub include_artifacts: Option<bool>,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: i64,
    pub total_size: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_serialise_by_their_proto_names() {
        let s = serde_json::to_string(&TaskState::Canceled).expect("serialises");
        assert_eq!(s, "\"TASK_STATE_CANCELED\"");
        assert_eq!(TaskState::parse("canceled"), Some(TaskState::Canceled));
        assert_eq!(TaskState::parse("bogus"), None);
    }

    #[test]
    fn a_stream_response_is_wrapped_in_its_case_name() {
        let v = serde_json::to_value(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            metadata: None,
        }))
        .expect("serialises");
        assert_eq!(v["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING");
    }

    #[test]
    fn a_message_from_an_sdk_parses() {
        let m: SendMessageRequest = serde_json::from_value(serde_json::json!({
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"returnImmediately": true}
        }))
        .expect("parses");
        assert_eq!(m.message.parts[0].text.as_deref(), Some("hi"));
        assert_eq!(
            m.configuration.and_then(|c| c.return_immediately),
            Some(true)
        );
    }
}
