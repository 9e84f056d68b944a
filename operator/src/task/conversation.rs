//! Labels on the turns of a conversation, so `kubectl get tasks -l ari.dev/conversation=NAME`
//! lists them: a reply (`spec.continues`) gets its conversation and turn number, its
//! conversation's first Task the conversation label. The A2A gateway labels the replies it
//! creates itself; this covers replies created with kubectl. Whether a reply may continue at
//! all is the executor's check ([`ari_crds::conversation::admit_turn`]), made when it claims.

use ari_crds::Task;
use ari_crds::conversation::admit_turn;
use ari_crds::names::{LABEL_CONVERSATION, LABEL_TURN};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::debug;

use crate::error::Error;

/// Labels `cached`, a reply, when it is not labelled yet and may continue what it names, and
/// its conversation's first Task. A refused reply is left to its executor, which ends it
/// `ConversationRefused` with the reason. `cached` is the trimmed copy the controller sees (no
/// labels or annotations), so the reply is read whole: the controller calls this once per
/// reply and process.
pub async fn label_turn(tasks: &Api<Task>, cached: &Task) -> Result<(), Error> {
    let Some(previous) = cached.spec.continues.as_deref() else {
        return Ok(());
    };
    let Some(task) = tasks.get_opt(&cached.name_any()).await? else {
        return Ok(());
    };
    // Replies the gateway made carry their labels already; the first Task still needs its own.
    let conversation = match task.labels().get(LABEL_CONVERSATION) {
        Some(c) if task.labels().contains_key(LABEL_TURN) => c.clone(),
        _ => {
            let previous = tasks.get_opt(previous).await?;
            let place = match admit_turn(&task, previous.as_ref()) {
                Ok(place) => place,
                Err(refusal) => {
                    debug!(task = %task.name_any(), why = %refusal.message, "not labelling a refused reply");
                    return Ok(());
                }
            };
            let labels: serde_json::Map<_, _> = place
                .labels()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), json!(v)))
                .collect();
            patch_labels(tasks, &task.name_any(), labels).await?;
            place.conversation
        }
    };
    // Only ever the first Task's own name on it, so a reply's labels (anyone's to write) can
    // mislabel nothing.
    let first = tasks.get_opt(&conversation).await?;
    if first.is_some_and(|f| f.labels().get(LABEL_CONVERSATION) != Some(&conversation)) {
        let label = json!({ LABEL_CONVERSATION: conversation })
            .as_object()
            .cloned()
            .unwrap_or_default();
        patch_labels(tasks, &conversation, label).await?;
    }
    Ok(())
}

async fn patch_labels(
    tasks: &Api<Task>,
    name: &str,
    labels: serde_json::Map<String, serde_json::Value>,
) -> Result<(), Error> {
    let patch = json!({"metadata": {"labels": labels}});
    match tasks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // The first Task may be gone (its TTL): the reply keeps its labels.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
