//! Conversations over A2A: a task whose turn ended asking for input (`input-required`) takes
//! a reply on the same `taskId`, which becomes the next turn, a Task that continues the last
//! one (`spec.continues`). The A2A task keeps its first Task's id through every turn; its
//! state and output are the last turn's (docs/conversations.md).

use ari_crds::Task as AriTask;
use ari_crds::names::{LABEL_CONVERSATION, LABEL_TURN};
use kube::ResourceExt;
use kube::api::ListParams;

use crate::a2a::SendMessageRequest;
use crate::convert::{self, LABEL_A2A_CALLER_ID};
use crate::error::{Error, Result};
use crate::gateway::Gateway;
use crate::methods::{Scope, Target};

/// Turns whose messages an A2A view of a conversation holds (the most recent): each is read
/// whole, so this bounds what one view costs the gateway.
pub const VIEW_TURNS: usize = 8;

/// A conversation as far as the gateway shows it: its first Task and its most recent turns
/// (at most [`VIEW_TURNS`], in order; the first when it has no reply).
pub struct Turns {
    pub first: AriTask,
    /// Replies, oldest first, the most recent [`VIEW_TURNS`] of them (may be empty).
    pub replies: Vec<AriTask>,
    /// Every reply's number so far (the last one's).
    pub count: u32,
}

impl Turns {
    /// The latest turn: the last reply, or the first Task.
    pub fn latest(&self) -> &AriTask {
        self.replies.last().unwrap_or(&self.first)
    }

    /// Every turn held, first Task included, for [`convert::conversation`].
    pub fn all(&self) -> Vec<AriTask> {
        std::iter::once(self.first.clone())
            .chain(self.replies.iter().cloned())
            .collect()
    }
}

impl Gateway {
    /// The conversation A2A task `id` names, in the caller's scope: the Task itself and the
    /// most recent `keep` replies to it (1 where only the latest turn matters, at most
    /// [`VIEW_TURNS`]). A reply's own name leads to its conversation's first Task.
    pub(crate) async fn turns(
        &self,
        t: &Target<'_>,
        scope: &Scope,
        id: &str,
        keep: usize,
    ) -> Result<Turns> {
        let task = self.own_task(t, scope, id).await?;
        let first = match task.labels().get(LABEL_CONVERSATION) {
            Some(root) if root != id => self.own_task(t, scope, &root.clone()).await?,
            _ => task,
        };
        let name = first.name_any();
        if !convert::asked(&first) || !convert::is_label_value(&name) {
            return Ok(Turns {
                first,
                replies: Vec::new(),
                count: 1,
            });
        }
        // Names and numbers first (metadata only: a conversation may be long), then the most
        // recent turns whole.
        let mut selector = format!("{LABEL_CONVERSATION}={name}");
        if let Some(caller) = first.labels().get(LABEL_A2A_CALLER_ID) {
            selector.push_str(&format!(",{LABEL_A2A_CALLER_ID}={caller}"));
        }
        let list = self
            .tasks(t.namespace)
            .list_metadata(&ListParams::default().labels(&selector))
            .await?;
        let mut numbered: Vec<(u32, String)> = list
            .items
            .iter()
            .filter_map(|m| {
                let n = m.labels().get(LABEL_TURN)?.parse().ok()?;
                Some((n, m.name_any()))
            })
            .collect();
        numbered.sort();
        let count = numbered.last().map_or(1, |(n, _)| *n);
        let mut replies = Vec::new();
        for (_, reply) in numbered.iter().rev().take(keep.min(VIEW_TURNS)).rev() {
            if let Some(task) = self.tasks(t.namespace).get_opt(reply).await?
                && task.spec.agent_ref.name == t.agent
            {
                replies.push(task);
            }
        }
        Ok(Turns {
            first,
            replies,
            count,
        })
    }

    /// The next turn of `turns`, whose latest turn asked for input: a Task with the message as
    /// its input, continuing that turn. Two replies to one question race for one name; the
    /// second is refused.
    pub(crate) async fn reply(
        &self,
        t: &Target<'_>,
        caller: &crate::auth::Caller,
        req: &SendMessageRequest,
        turns: &Turns,
        streamed: bool,
    ) -> Result<AriTask> {
        let latest = turns.latest();
        if let Some(c) = req.message.context_id.as_deref()
            && !c.is_empty()
            && c != convert::context_id(&turns.first)
        {
            return Err(Error::InvalidParams(format!(
                "contextId {} is not task {}'s context",
                convert::cut(c, 64),
                turns.first.name_any()
            )));
        }
        let reply = convert::Reply {
            context: convert::context_id(&turns.first),
            continues: latest.name_any(),
            conversation: turns.first.name_any(),
            turn: turns.count.saturating_add(1),
        };
        self.create(t, caller, req, streamed, Some(reply))
            .await
            .map_err(|e| match e {
                Error::Kube(kube::Error::Api(ae)) if ae.code == 409 => {
                    Error::InvalidParams(format!(
                        "task {} was answered meanwhile; read it again",
                        turns.first.name_any()
                    ))
                }
                e => e,
            })
    }
}
