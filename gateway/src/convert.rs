//! Between A2A and ari: a message becomes a Task's input; a Task becomes an A2A task with its
//! state, its output as an artifact and its attestation and usage as metadata.

use ari_crds::names::{
    ANNOTATION_A2A_CALLER, ANNOTATION_LIVE_LOG, LABEL_A2A_CONTEXT, LABEL_CONVERSATION, LABEL_TURN,
};
use ari_crds::{Task as AriTask, TaskPhase, TaskReason, TaskSpec};
use base64::Engine as _;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::{Map, Value, json};

use crate::a2a::{Artifact, Message, Part, Task, TaskState, TaskStatus};
use crate::error::{Error, Result};

/// Metadata keys ari adds to A2A tasks and events.
pub mod meta {
    /// The Task's attestation: a DSSE envelope any in-toto verifier checks.
    pub const ATTESTATION: &str = "ari.dev/attestation";
    /// Its digest, which ties an answer to a verifiable run (`kubectl ari verify` prints it).
    pub const ATTESTATION_SHA256: &str = "ari.dev/attestationSha256";
    /// The call a paused (`input-required`) task waits on a person's decision for.
    pub const PENDING_APPROVAL: &str = "ari.dev/pendingApproval";
    pub const RESOURCES_USED: &str = "ari.dev/resourcesUsed";
    /// Each model the task called: endpoint, model id, calls and tokens.
    pub const MODELS: &str = "ari.dev/models";
    pub const REASON: &str = "ari.dev/reason";
    pub const MESSAGE: &str = "ari.dev/message";
    pub const EVENT: &str = "ari.dev/event";
}

/// The A2A state of a Task. A refusal of what the Agent may do (a capability it lacks, a mode
/// it is not for) is `rejected`: the agent declined the task rather than failing at it.
pub fn state(task: &AriTask) -> TaskState {
    let status = task.status.as_ref();
    match (status.and_then(|s| s.phase), status.and_then(|s| s.reason)) {
        (None | Some(TaskPhase::Pending), _) => TaskState::Submitted,
        (Some(TaskPhase::Running), _) if status.is_some_and(|s| s.pending_approval.is_some()) => {
            TaskState::InputRequired
        }
        (Some(TaskPhase::Running), _) => TaskState::Working,
        (Some(TaskPhase::Succeeded), Some(TaskReason::InputRequired)) => TaskState::InputRequired,
        (Some(TaskPhase::Succeeded), _) => TaskState::Completed,
        (Some(TaskPhase::Cancelled), _) => TaskState::Canceled,
        (Some(TaskPhase::Failed), Some(TaskReason::CapabilityDenied | TaskReason::ModeRefused)) => {
            TaskState::Rejected
        }
        (Some(TaskPhase::Failed), _) => TaskState::Failed,
    }
}

/// Whether the Task's turn ended asking for input: a reply continues its conversation.
pub fn asked(task: &AriTask) -> bool {
    task.status
        .as_ref()
        .is_some_and(|s| s.reason == Some(TaskReason::InputRequired))
}

/// The output of a turn as text for a message (bytes as base64: a message part is text).
fn output_text(task: &AriTask) -> Option<String> {
    let s = task.status.as_ref()?;
    s.output.clone().or_else(|| s.output_base64.clone())
}

/// The A2A `contextId` of a Task created through the gateway.
pub fn context_id(task: &AriTask) -> String {
    task.labels()
        .get(LABEL_A2A_CONTEXT)
        .cloned()
        .unwrap_or_default()
}

/// When the Task last changed phase, as RFC 3339.
fn timestamp(task: &AriTask) -> Option<String> {
    let s = task.status.as_ref()?;
    s.completion_time
        .as_ref()
        .or(s.start_time.as_ref())
        .map(|t| t.0.to_string())
        .or_else(|| task.creation_timestamp().map(|t| t.0.to_string()))
}

/// The Task's output as an artifact, once it has one. Output kept in a ConfigMap is named, not
/// copied: the gateway may not read ConfigMaps (the caller can, with their own RBAC).
pub fn output_artifact(task: &AriTask) -> Option<Artifact> {
    let s = task.status.as_ref()?;
    let part = if let Some(text) = &s.output {
        Part::text(text.clone())
    } else if let Some(b64) = &s.output_base64 {
        Part {
            raw: Some(b64.clone()),
            media_type: Some("application/octet-stream".into()),
            ..Part::default()
        }
    } else if let Some(r) = &s.output_ref {
        Part {
            data: Some(json!({
                "configMap": r.config_map,
                "key": r.key,
                "sha256": s.output_sha256,
            })),
            media_type: Some("application/json".into()),
            ..Part::default()
        }
    } else {
        return None;
    };
    let mut metadata = Map::new();
    if let Some(sha) = &s.output_sha256 {
        metadata.insert("sha256".into(), Value::String(sha.clone()));
    }
    Some(Artifact {
        artifact_id: format!("{}-output", task.name_any()),
        name: Some("output".into()),
        parts: vec![part],
        metadata: Some(metadata),
    })
}

/// What ari adds to an A2A task: the attestation, resources used, reason and message.
pub fn task_metadata(task: &AriTask) -> Map<String, Value> {
    let mut m = Map::new();
    let Some(s) = task.status.as_ref() else {
        return m;
    };
    if let Some(a) = &s.attestation
        && let Ok(v) = serde_json::to_value(a)
    {
        m.insert(meta::ATTESTATION.into(), v);
        m.insert(meta::ATTESTATION_SHA256.into(), a.sha256().into());
    }
    if let Some(r) = &s.resources_used
        && let Ok(v) = serde_json::to_value(r)
    {
        m.insert(meta::RESOURCES_USED.into(), v);
    }
    if let Some(p) = &s.pending_approval
        && let Ok(v) = serde_json::to_value(p)
    {
        m.insert(meta::PENDING_APPROVAL.into(), v);
    }
    if !s.models.is_empty()
        && let Ok(v) = serde_json::to_value(&s.models)
    {
        m.insert(meta::MODELS.into(), v);
    }
    if let Some(r) = s.reason {
        m.insert(meta::REASON.into(), Value::String(r.as_str().into()));
    }
    if let Some(msg) = &s.message {
        m.insert(meta::MESSAGE.into(), Value::String(msg.clone()));
    }
    m
}

/// The Task's status as A2A shows it; a failure's message rides along as an agent message,
/// and so does the question of a turn that asks for input.
pub fn status(task: &AriTask) -> TaskStatus {
    let state = state(task);
    let text = match state {
        TaskState::Failed | TaskState::Rejected => {
            task.status.as_ref().and_then(|s| s.message.clone())
        }
        TaskState::InputRequired if asked(task) => output_text(task),
        _ => None,
    };
    let message = text.map(|text| Message {
        message_id: format!("{}-status", task.name_any()),
        context_id: Some(context_id(task)),
        task_id: Some(task.name_any()),
        role: "ROLE_AGENT".into(),
        parts: vec![Part::text(text)],
        metadata: None,
    });
    TaskStatus {
        state,
        message,
        timestamp: timestamp(task),
    }
}

/// The whole A2A task. `history` holds the message that created it when asked for.
pub fn task(task: &AriTask, with_history: bool, with_artifacts: bool) -> Task {
    let mut history = Vec::new();
    if with_history && let Some(input) = &task.spec.input {
        history.push(Message {
            message_id: task
                .annotations()
                .get(ANNOTATION_MESSAGE_ID)
                .cloned()
                .unwrap_or_default(),
            context_id: Some(context_id(task)),
            task_id: Some(task.name_any()),
            role: "ROLE_USER".into(),
            parts: vec![Part::text(input.clone())],
            metadata: None,
        });
    }
    let metadata = task_metadata(task);
    Task {
        id: task.name_any(),
        context_id: context_id(task),
        status: status(task),
        artifacts: if with_artifacts {
            output_artifact(task).into_iter().collect()
        } else {
            Vec::new()
        },
        history,
        metadata: (!metadata.is_empty()).then_some(metadata),
    }
}

/// A conversation as one A2A task (`turns`: its first Task, then each reply in order): the id
/// and context of the first, the state, output and metadata of the last, and in `history`
/// each turn's message and the question it ended with.
pub fn conversation(turns: &[AriTask], with_history: bool, with_artifacts: bool) -> Option<Task> {
    let (first, last) = (turns.first()?, turns.last()?);
    let id = first.name_any();
    let context = context_id(first);
    let mut view = task(last, false, with_artifacts);
    view.id = id.clone();
    view.context_id = context.clone();
    if let Some(m) = &mut view.status.message {
        m.task_id = Some(id.clone());
    }
    if with_history {
        for turn in turns {
            let mut asked = task(turn, true, false).history;
            if let Some(question) = output_text(turn).filter(|_| self::asked(turn)) {
                asked.push(Message {
                    message_id: format!("{}-question", turn.name_any()),
                    context_id: None,
                    task_id: None,
                    role: "ROLE_AGENT".into(),
                    parts: vec![Part::text(question)],
                    metadata: None,
                });
            }
            for mut m in asked {
                m.task_id = Some(id.clone());
                m.context_id = Some(context.clone());
                view.history.push(m);
            }
        }
    }
    Some(view)
}

/// A reply's place in its conversation, for [`new_task`].
pub struct Reply {
    /// The conversation's `contextId` (its first Task's).
    pub context: String,
    /// The Task it continues (the latest turn).
    pub continues: String,
    pub conversation: String,
    pub turn: u32,
}

/// Annotation on a Task created from a message: the message's id.
pub const ANNOTATION_MESSAGE_ID: &str = "ari.dev/a2a-message-id";
/// Label on a Task created from a message: [`caller_id`] of who sent it, so each caller's
/// tasks are found (and listed, page by page) by a label selector.
pub const LABEL_A2A_CALLER_ID: &str = "ari.dev/a2a-caller-id";
/// Longest caller name or message id kept on a Task.
const MAX_ANNOTATION: usize = 253;

/// A caller's label value: the first 63 hex digits of the SHA-256 of their user name.
pub fn caller_id(username: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut id = hex::encode(Sha256::digest(username.as_bytes()));
    id.truncate(63);
    id
}

/// At most `max` bytes of `s`, cut on a character boundary (caller text may be any UTF-8).
pub fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The input a message carries: its text parts joined by newlines, a JSON data part as JSON
/// text, or one raw part as bytes. Files by URL are refused: ari does not fetch for a caller.
pub enum Input {
    Text(String),
    Bytes(String),
}

pub fn input(message: &Message) -> Result<Input> {
    if message.parts.is_empty() {
        return Err(Error::InvalidParams("the message has no parts".into()));
    }
    let mut texts = Vec::new();
    let mut raw = None;
    for part in &message.parts {
        if let Some(t) = &part.text {
            texts.push(t.clone());
        } else if let Some(d) = &part.data {
            texts.push(d.to_string());
        } else if let Some(r) = &part.raw {
            if raw.is_some() || message.parts.len() > 1 {
                return Err(Error::InvalidParams(
                    "a raw part must be the message's only part".into(),
                ));
            }
            base64::engine::general_purpose::STANDARD
                .decode(r)
                .map_err(|_| Error::InvalidParams("a raw part is not base64".into()))?;
            raw = Some(r.clone());
        } else if part.url.is_some() || part.file.is_some() {
            return Err(Error::ContentType(
                "file parts by URL are not fetched; send the content as text, data or raw".into(),
            ));
        } else {
            return Err(Error::InvalidParams("a part has no content".into()));
        }
    }
    Ok(match raw {
        Some(r) => Input::Bytes(r),
        None => Input::Text(texts.join("\n")),
    })
}

/// Whether `value` can be a label value (the `contextId` is kept as one).
pub fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && (value.is_empty()
            || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric())
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))))
}

/// The Task a message becomes: named by the API server (`<agent>-a2a-xxxxx`), labelled with
/// its context, annotated with its caller, and with a live-log lease when a stream follows it
/// from the start (`live_log`, see [`crate::livelog`]).
pub fn new_task(
    agent: &str,
    context: &str,
    caller: &str,
    message: &Message,
    input: Input,
    live_log: Option<String>,
    reply: Option<Reply>,
) -> AriTask {
    let mut spec = TaskSpec::for_agent(agent);
    match input {
        Input::Text(t) => spec.input = Some(t),
        Input::Bytes(b) => spec.input_base64 = Some(b),
    }
    let mut annotations: std::collections::BTreeMap<String, String> = [
        (
            ANNOTATION_A2A_CALLER.to_owned(),
            cut(caller, MAX_ANNOTATION).to_owned(),
        ),
        (
            ANNOTATION_MESSAGE_ID.to_owned(),
            cut(&message.message_id, MAX_ANNOTATION).to_owned(),
        ),
    ]
    .into();
    if let Some(lease) = live_log {
        annotations.insert(ANNOTATION_LIVE_LOG.to_owned(), lease);
    }
    let mut labels: std::collections::BTreeMap<String, String> = [
        (LABEL_A2A_CONTEXT.to_owned(), context.to_owned()),
        (LABEL_A2A_CALLER_ID.to_owned(), caller_id(caller)),
    ]
    .into();
    // A reply is named after its conversation and turn: two replies to the same question
    // race for one name, and the second is refused instead of forking the conversation.
    let (name, generate_name) = match reply {
        Some(r) => {
            labels.insert(LABEL_CONVERSATION.to_owned(), r.conversation.clone());
            labels.insert(LABEL_TURN.to_owned(), r.turn.to_string());
            spec.continues = Some(r.continues);
            (Some(format!("{}-{}", r.conversation, r.turn)), None)
        }
        None => (None, Some(format!("{}-a2a-", truncate_name(agent, 40)))),
    };
    AriTask {
        metadata: ObjectMeta {
            name,
            generate_name,
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// `name` cut to `max` bytes without a trailing `-` or `.`.
fn truncate_name(name: &str, max: usize) -> &str {
    cut(name, max).trim_end_matches(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::TaskStatus as AriStatus;

    fn spec() -> TaskSpec {
        TaskSpec::for_agent("a")
    }

    fn with(phase: TaskPhase, reason: Option<TaskReason>) -> AriTask {
        let mut t = AriTask::new("t", spec());
        t.status = Some(AriStatus {
            phase: Some(phase),
            reason,
            ..AriStatus::default()
        });
        t
    }

    #[test]
    fn phases_map_to_a2a_states() {
        assert_eq!(state(&AriTask::new("t", spec())), TaskState::Submitted);
        assert_eq!(state(&with(TaskPhase::Running, None)), TaskState::Working);
        assert_eq!(
            state(&with(TaskPhase::Succeeded, Some(TaskReason::Completed))),
            TaskState::Completed
        );
        assert_eq!(
            state(&with(TaskPhase::Failed, Some(TaskReason::Trap))),
            TaskState::Failed
        );
        assert_eq!(
            state(&with(TaskPhase::Failed, Some(TaskReason::CapabilityDenied))),
            TaskState::Rejected
        );
        assert_eq!(
            state(&with(TaskPhase::Cancelled, Some(TaskReason::Cancelled))),
            TaskState::Canceled
        );
    }

    #[test]
    fn a_task_waiting_for_approval_is_input_required_and_says_which_call() {
        let mut t = with(TaskPhase::Running, None);
        if let Some(s) = t.status.as_mut() {
            s.pending_approval = Some(ari_crds::PendingApproval::new(
                "0-5e1f2ecb0e9169b5".into(),
                &ari_crds::CallSubject::Tool {
                    server: "demo".into(),
                    tool: "delete_everything".into(),
                },
                "{}",
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ));
        }
        let s = state(&t);
        assert_eq!(s, TaskState::InputRequired);
        assert!(s.is_interrupted_or_terminal() && !s.is_terminal());
        let m = task_metadata(&t);
        assert_eq!(m[meta::PENDING_APPROVAL]["call"], "0-5e1f2ecb0e9169b5");
        assert_eq!(m[meta::PENDING_APPROVAL]["kind"], "Tool");
        // Trimmed for followers, it is still paused.
        assert_eq!(state(&crate::hub::trim(t)), TaskState::InputRequired);
    }

    #[test]
    fn text_parts_join_and_url_parts_are_refused() {
        let m = |parts: Vec<Part>| Message {
            parts,
            ..Message::default()
        };
        match input(&m(vec![Part::text("a"), Part::text("b")])) {
            Ok(Input::Text(t)) => assert_eq!(t, "a\nb"),
            _ => panic!("text expected"),
        }
        let url = Part {
            url: Some("https://example.com/x".into()),
            ..Part::default()
        };
        assert!(matches!(input(&m(vec![url])), Err(Error::ContentType(_))));
        assert!(matches!(input(&m(vec![])), Err(Error::InvalidParams(_))));
    }

    #[test]
    fn a_multibyte_message_id_or_caller_is_cut_on_a_character_boundary() {
        let message = Message {
            message_id: "é".repeat(200),
            ..Message::default()
        };
        let caller = "ü".repeat(300);
        let t = new_task(
            "a",
            "c",
            &caller,
            &message,
            Input::Text("x".into()),
            None,
            None,
        );
        let ann = t.metadata.annotations.unwrap_or_default();
        let id = &ann[ANNOTATION_MESSAGE_ID];
        assert!(id.len() <= MAX_ANNOTATION && id.chars().all(|c| c == 'é'));
        assert_eq!(id.len(), 252);
        assert!(ann[ANNOTATION_A2A_CALLER].chars().all(|c| c == 'ü'));
        let labels = t.metadata.labels.unwrap_or_default();
        assert_eq!(labels[LABEL_A2A_CALLER_ID], caller_id(&caller));
        assert!(is_label_value(&labels[LABEL_A2A_CALLER_ID]));
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("", 5), "");
    }

    #[test]
    fn context_ids_must_fit_a_label() {
        assert!(is_label_value("6f1c2a3e-0b7d-4c1e-9f00-1234567890ab"));
        assert!(!is_label_value("has space"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn only_a_streamed_message_asks_for_a_live_log() {
        let m = Message::default();
        let live = |t: &AriTask| t.annotations().get(ANNOTATION_LIVE_LOG).cloned();
        let plain = new_task("a", "c", "u", &m, Input::Text("x".into()), None, None);
        assert_eq!(live(&plain), None, "SendMessage: no stream follows");
        let lease = "2026-01-01T00:00:30Z".to_owned();
        let streamed = new_task(
            "a",
            "c",
            "u",
            &m,
            Input::Text("x".into()),
            Some(lease.clone()),
            None,
        );
        assert_eq!(live(&streamed), Some(lease));
    }

    fn turn(name: &str, input: &str, asked: Option<&str>, output: Option<&str>) -> AriTask {
        let mut spec = TaskSpec::for_agent("intake");
        spec.input = Some(input.into());
        let mut t = AriTask::new(name, spec);
        t.metadata.labels = Some([(LABEL_A2A_CONTEXT.to_owned(), "ctx".to_owned())].into());
        t.status = Some(AriStatus {
            phase: Some(TaskPhase::Succeeded),
            reason: Some(if asked.is_some() {
                TaskReason::InputRequired
            } else {
                TaskReason::Completed
            }),
            output: asked.or(output).map(str::to_owned),
            ..AriStatus::default()
        });
        t
    }

    #[test]
    fn a_turn_that_asks_is_input_required_with_its_question_as_the_status_message() {
        let t = turn("c1", "a laptop", Some("Your name?"), None);
        let s = status(&t);
        assert_eq!(s.state, TaskState::InputRequired);
        let text = s
            .message
            .and_then(|m| m.parts.first().and_then(|p| p.text.clone()));
        assert_eq!(text.as_deref(), Some("Your name?"));
    }

    #[test]
    fn a_conversation_is_one_task_with_the_first_id_the_last_state_and_every_turn_in_history() {
        let turns = [
            turn("c1", "a laptop", Some("Your name?"), None),
            turn("c1-2", "Ada", None, Some("{\"done\":true}")),
        ];
        let view = conversation(&turns, true, true).expect("a view");
        assert_eq!(view.id, "c1");
        assert_eq!(view.context_id, "ctx");
        assert_eq!(view.status.state, TaskState::Completed);
        let said: Vec<(String, String)> = view
            .history
            .iter()
            .map(|m| (m.role.clone(), m.parts[0].text.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            said,
            [
                ("ROLE_USER".to_owned(), "a laptop".to_owned()),
                ("ROLE_AGENT".to_owned(), "Your name?".to_owned()),
                ("ROLE_USER".to_owned(), "Ada".to_owned()),
            ]
        );
        assert!(
            view.history
                .iter()
                .all(|m| m.task_id.as_deref() == Some("c1"))
        );
        assert_eq!(view.artifacts.len(), 1, "the last turn's output");
    }

    #[test]
    fn a_reply_is_named_after_its_conversation_and_turn_and_continues_the_latest() {
        let reply = Reply {
            context: "ctx".into(),
            continues: "c1-2".into(),
            conversation: "c1".into(),
            turn: 3,
        };
        let m = Message::default();
        let t = new_task(
            "intake",
            "ctx",
            "u",
            &m,
            Input::Text("Friday".into()),
            None,
            Some(reply),
        );
        assert_eq!(t.metadata.name.as_deref(), Some("c1-3"));
        assert_eq!(t.metadata.generate_name, None);
        assert_eq!(t.spec.continues.as_deref(), Some("c1-2"));
        let labels = t.metadata.labels.unwrap_or_default();
        assert_eq!(labels[LABEL_CONVERSATION], "c1");
        assert_eq!(labels[LABEL_TURN], "3");
    }
}
