//! A Task that continues a conversation (`spec.continues`): whether it may
//! ([`ari_crds::conversation::admit_turn`], checked against the API, not a cache), where it
//! sits, and the earlier turns its guest reads, newest first back to the bounds of
//! [`ari_crds::conversation`] or a turn no longer in the cluster.

use ari_crds::conversation::{
    ConversationLink, MAX_HISTORY_BYTES, MAX_HISTORY_TURNS, Turn, admit_turn, bounded,
};
use ari_crds::{Task, TaskReason};
use kube::ResourceExt;

use super::Worker;

/// The earlier turns and the link the attestation signs.
pub(super) struct Continued {
    pub history: Vec<Turn>,
    pub link: ConversationLink,
}

impl Worker {
    /// `None` for a Task that continues nothing; the reason and message it fails with when it
    /// may not continue what it names, or the history cannot be read.
    pub(super) async fn conversation(
        &self,
        task: &Task,
    ) -> Result<Option<Continued>, (TaskReason, String)> {
        let Some(name) = task.spec.continues.as_deref() else {
            return Ok(None);
        };
        let host = |m: String| (TaskReason::HostError, m);
        let previous = self
            .tasks
            .get_opt(name)
            .await
            .map_err(|e| host(format!("reading Task {name} (spec.continues): {e}")))?;
        let place = admit_turn(task, previous.as_ref()).map_err(|r| (r.reason, r.message))?;
        let Some(previous) = previous else {
            return Ok(None);
        };
        let link = place.link(&previous);
        let mut turns = Vec::new();
        let mut bytes = 0;
        let mut number = place.turn;
        let mut cur = Some(previous);
        while let Some(t) = cur.take() {
            if turns.len() == MAX_HISTORY_TURNS || bytes > MAX_HISTORY_BYTES || number <= 1 {
                break;
            }
            number -= 1;
            let input = self.resolve_input(&t).await.map_err(|(_, m)| {
                host(format!(
                    "the input of turn {number} ({}): {m}",
                    t.name_any()
                ))
            })?;
            let status = t.status.clone().unwrap_or_default();
            let output = super::output::read(&self.writer.configmaps, &status)
                .await
                .map_err(|m| host(format!("turn {number} ({}): {m}", t.name_any())))?;
            bytes += input.len() + output.len();
            turns.push(Turn {
                number,
                task: t.name_any(),
                input,
                output,
            });
            // An older turn deleted since (its TTL) leaves the history starting later.
            if let Some(older) = t.spec.continues.as_deref() {
                cur = self
                    .tasks
                    .get_opt(older)
                    .await
                    .map_err(|e| host(format!("reading Task {older}: {e}")))?;
            }
        }
        turns.reverse();
        Ok(Some(Continued {
            history: bounded(turns),
            link,
        }))
    }
}
