//! Whether a Task may continue the conversation its `spec.continues` names, and where the new
//! turn sits: one rule, used by the executor (read from the API when it claims the reply,
//! before it gathers the history) and by the operator (to label replies made with kubectl).

use kube::ResourceExt;

pub use ari_model::conversation::{MAX_HISTORY_BYTES, MAX_HISTORY_TURNS, MAX_TURNS, bounded};
pub use ari_model::{ConversationLink, Turn};

use crate::admission::Refusal;
use crate::names::{ANNOTATION_A2A_CALLER, LABEL_CONVERSATION, LABEL_TURN};
use crate::task::{Task, TaskPhase, TaskReason};

/// Where a reply sits: its conversation (the first Task's name) and its turn number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub conversation: String,
    pub turn: u32,
}

impl Place {
    /// The labels a turn carries, so `kubectl get tasks -l ari.dev/conversation=NAME` lists
    /// the conversation.
    pub fn labels(&self) -> [(&'static str, String); 2] {
        [
            (LABEL_CONVERSATION, self.conversation.clone()),
            (LABEL_TURN, self.turn.to_string()),
        ]
    }

    /// The link the reply's attestation signs.
    pub fn link(&self, previous: &Task) -> ConversationLink {
        ConversationLink {
            conversation: self.conversation.clone(),
            turn: self.turn,
            previous: previous.name_any(),
            previous_attestation_sha256: previous
                .status
                .as_ref()
                .and_then(|s| s.attestation.as_ref())
                .map(|a| a.sha256())
                .unwrap_or_default(),
        }
    }
}

fn refused(message: String) -> Refusal {
    Refusal {
        reason: TaskReason::ConversationRefused,
        message,
    }
}

/// Whether `task` may continue `previous` (the Task its `spec.continues` names; `None`: not
/// found), and its place. The previous turn must be the same Agent's, have ended asking for
/// input, and have been asked by the same A2A caller (no caller on both, for Tasks created
/// with kubectl): a conversation belongs to whoever started it. Its place comes from the
/// previous turn's signed attestation, not from labels anyone may write.
pub fn admit_turn(task: &Task, previous: Option<&Task>) -> Result<Place, Refusal> {
    let Some(name) = task.spec.continues.as_deref() else {
        return Err(refused("spec.continues is not set".into()));
    };
    let Some(previous) = previous else {
        return Err(refused(format!(
            "spec.continues: Task {name} does not exist"
        )));
    };
    if previous.spec.agent_ref.name != task.spec.agent_ref.name {
        return Err(refused(format!(
            "spec.continues: Task {name} is Agent {}'s, not {}'s",
            previous.spec.agent_ref.name, task.spec.agent_ref.name
        )));
    }
    let status = previous.status.as_ref();
    let ended = (
        status.map(|s| s.current_phase()).unwrap_or_default(),
        status.and_then(|s| s.reason),
    );
    if ended != (TaskPhase::Succeeded, Some(TaskReason::InputRequired)) {
        return Err(refused(format!(
            "spec.continues: Task {name} did not end asking for input (it is {})",
            ended.0
        )));
    }
    let caller = |t: &Task| t.annotations().get(ANNOTATION_A2A_CALLER).cloned();
    if caller(previous) != caller(task) {
        return Err(refused(format!(
            "spec.continues: Task {name} belongs to another caller's conversation"
        )));
    }
    let link = status
        .and_then(|s| s.attestation.as_ref())
        .and_then(|a| a.predicate().ok())
        .and_then(|p| p.conversation);
    let place = match link {
        Some(link) => Place {
            conversation: link.conversation,
            turn: link.turn.saturating_add(1),
        },
        None => Place {
            conversation: name.to_owned(),
            turn: 2,
        },
    };
    if place.turn > MAX_TURNS {
        return Err(refused(format!(
            "the conversation has reached its {MAX_TURNS} turns; start a new one"
        )));
    }
    Ok(place)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{TaskSpec, TaskStatus};
    use kube::api::ObjectMeta;

    fn task(name: &str, agent: &str, caller: Option<&str>) -> Task {
        let mut spec = TaskSpec::for_agent(agent);
        spec.input = Some("hi".into());
        Task {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: caller
                    .map(|c| [(ANNOTATION_A2A_CALLER.to_owned(), c.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    fn asked(mut t: Task) -> Task {
        t.status = Some(TaskStatus {
            phase: Some(TaskPhase::Succeeded),
            reason: Some(TaskReason::InputRequired),
            ..TaskStatus::default()
        });
        t
    }

    fn reply(to: &str, agent: &str, caller: Option<&str>) -> Task {
        let mut t = task("reply", agent, caller);
        t.spec.continues = Some(to.into());
        t
    }

    #[test]
    fn a_reply_to_a_first_turn_that_asked_is_turn_two_of_its_conversation() {
        let first = asked(task("chat-1", "echo", Some("alice")));
        let place =
            admit_turn(&reply("chat-1", "echo", Some("alice")), Some(&first)).expect("admitted");
        assert_eq!(
            place,
            Place {
                conversation: "chat-1".into(),
                turn: 2
            }
        );
        assert_eq!(place.labels()[1], (LABEL_TURN, "2".to_owned()));
    }

    #[test]
    fn a_reply_is_refused_unless_the_turn_exists_asked_and_is_the_same_agent_and_callers() {
        let first = asked(task("chat-1", "echo", Some("alice")));
        let cases = [
            (
                reply("chat-1", "echo", Some("alice")),
                None,
                "does not exist",
            ),
            (
                reply("chat-1", "other", Some("alice")),
                Some(first.clone()),
                "Agent echo's",
            ),
            (
                reply("chat-1", "echo", Some("mallory")),
                Some(first.clone()),
                "another caller",
            ),
            (
                reply("chat-1", "echo", None),
                Some(first.clone()),
                "another caller",
            ),
            (
                reply("chat-1", "echo", Some("alice")),
                Some(task("chat-1", "echo", Some("alice"))),
                "did not end asking",
            ),
        ];
        for (t, previous, why) in cases {
            let refusal = admit_turn(&t, previous.as_ref()).expect_err(why);
            assert_eq!(refusal.reason, TaskReason::ConversationRefused);
            assert!(refusal.message.contains(why), "{why}: {}", refusal.message);
        }
    }
}
