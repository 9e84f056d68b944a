//! The A2A methods, on ari Tasks. Each is called with the caller already authenticated and
//! authorised for it, on an exposed Agent.

use std::sync::Arc;
use std::time::Duration;

use ari_crds::Task as AriTask;
use ari_crds::names::{LABEL_A2A_CONTEXT, LABEL_TURN};
use futures::{Stream, StreamExt};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::a2a::{
    ListTasksRequest, ListTasksResponse, SendMessageRequest, StreamResponse,
    TaskArtifactUpdateEvent, TaskIdRequest, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use crate::auth::Caller;
use crate::conversation::VIEW_TURNS;
use crate::convert::{self, LABEL_A2A_CALLER_ID, meta};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::gateway::Gateway;
use crate::limits::StreamPermit;
use crate::{livelog, stream};

/// Most tasks one `ListTasks` page holds.
const MAX_PAGE: i64 = 100;
const DEFAULT_PAGE: i64 = 50;
/// How long `CancelTask` waits for the task to stop before answering with it as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Where a call is aimed.
pub struct Target<'a> {
    pub namespace: &'a str,
    pub agent: &'a str,
}

/// Whose A2A tasks a caller may see and act on: their own conversations, or, with `get` on
/// `tasks/a2a-all` in the namespace, every caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The caller's [`convert::caller_id`].
    Own(String),
    All,
}

impl Scope {
    pub fn of(caller: &Caller, all: bool) -> Self {
        if all {
            Self::All
        } else {
            Self::Own(convert::caller_id(&caller.username))
        }
    }

    /// The label selector of the tasks in scope (all A2A tasks, or the caller's).
    fn selector(&self) -> String {
        match self {
            Self::All => LABEL_A2A_CONTEXT.to_owned(),
            Self::Own(id) => format!("{LABEL_A2A_CONTEXT},{LABEL_A2A_CALLER_ID}={id}"),
        }
    }
}

/// Whether `task` is served on `agent` to a caller of `scope`: a Task of that Agent made
/// through A2A, and the caller's own unless they may see all. Anything else is answered
/// exactly as a Task that does not exist, so a caller learns nothing of others' tasks.
pub fn visible(task: &AriTask, agent: &str, scope: &Scope) -> bool {
    let labels = task.labels();
    task.spec.agent_ref.name == agent
        && labels.contains_key(LABEL_A2A_CONTEXT)
        && match scope {
            Scope::All => true,
            Scope::Own(id) => labels.get(LABEL_A2A_CALLER_ID) == Some(id),
        }
}

impl Gateway {
    pub(crate) fn tasks(&self, namespace: &str) -> Api<AriTask> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// A Task of this Agent created through A2A and in the caller's scope, or `TaskNotFound`.
    pub(crate) async fn own_task(
        &self,
        t: &Target<'_>,
        scope: &Scope,
        id: &str,
    ) -> Result<AriTask> {
        if !ari_crds::names::is_object_name(id) {
            return Err(Error::TaskNotFound(convert::cut(id, 64).to_owned()));
        }
        let task = self.tasks(t.namespace).get_opt(id).await?;
        task.filter(|task| visible(task, t.agent, scope))
            .ok_or_else(|| Error::TaskNotFound(id.to_owned()))
    }

    /// Creates the Task a message becomes (a new conversation, or the `reply` to one);
    /// `streamed`: a stream follows it from the start (it is created with a live-log lease).
    pub(crate) async fn create(
        &self,
        t: &Target<'_>,
        caller: &Caller,
        req: &SendMessageRequest,
        streamed: bool,
        reply: Option<convert::Reply>,
    ) -> Result<AriTask> {
        if let Some(c) = &req.configuration
            && (c.push_notification_config.is_some() || c.task_push_notification_config.is_some())
        {
            return Err(Error::PushNotSupported);
        }
        let context = match (&reply, &req.message.context_id) {
            (Some(r), _) => r.context.clone(),
            (None, Some(c)) if convert::is_label_value(c) && !c.is_empty() => c.clone(),
            (None, Some(_)) => {
                return Err(Error::InvalidParams(
                    "contextId must be at most 63 letters, digits, '-', '_' or '.'".into(),
                ));
            }
            (None, None) => uuid::Uuid::new_v4().to_string(),
        };
        let input = convert::input(&req.message)?;
        let lease = streamed.then(|| livelog::lease_until(k8s_openapi::jiff::Timestamp::now()));
        let task = convert::new_task(
            t.agent,
            &context,
            &caller.username,
            &req.message,
            input,
            lease,
            reply,
        );
        let created = self
            .tasks(t.namespace)
            .create(&PostParams::default(), &task)
            .await
            .map_err(|e| match e {
                // The API server's refusal of the input (size, schema) is the caller's to fix.
                kube::Error::Api(ae) if ae.code == 422 || ae.code == 400 => {
                    Error::InvalidParams(ae.message.chars().take(300).collect())
                }
                e => Error::Kube(e),
            })?;
        self.metrics
            .tasks_created
            .with_label_values(&[t.namespace])
            .inc();
        Ok(created)
    }

    /// A new message becomes a Task; one naming a task (`taskId`) follows up on it: it
    /// answers the call the task waits on, or replies to the question it asked (`scope`: the
    /// tasks the caller may see).
    pub async fn send_message(
        &self,
        t: &Target<'_>,
        caller: &Caller,
        scope: &Scope,
        params: Value,
    ) -> Result<Value> {
        let req: SendMessageRequest = crate::rpc::params(params)?;
        let (task, decided) = match req.message.task_id.as_deref() {
            Some(id) => self.follow_up(t, caller, scope, &req, id, false).await?,
            None => (self.create(t, caller, &req, false, None).await?, None),
        };
        let config = req.configuration.as_ref();
        let immediately = config
            .map(|c| c.return_immediately == Some(true) || c.blocking == Some(false))
            .unwrap_or(false);
        let history = config.and_then(|c| c.history_length).is_none_or(|n| n > 0);
        let task = if immediately {
            task
        } else {
            // Until it ends or pauses; after a decision, a pause on another call (the decided
            // one is behind it).
            let stop = move |s: TaskState, waits: Option<&str>| match &decided {
                Some(call) => {
                    s.is_terminal() || (s.is_interrupted() && waits != Some(call.as_str()))
                }
                None => s.is_interrupted_or_terminal(),
            };
            self.wait_until(t.namespace, &task.name_any(), self.blocking, stop)
                .await?
        };
        Ok(json!({"task": self.view(t, scope, task, history).await?}))
    }

    /// What a message naming task `id` does: a decision answers the call its latest turn
    /// waits on (the Task as written, and the call); anything else replies to the question
    /// its latest turn asked (the new turn). Otherwise the task takes no further message.
    async fn follow_up(
        &self,
        t: &Target<'_>,
        caller: &Caller,
        scope: &Scope,
        req: &SendMessageRequest,
        id: &str,
        streamed: bool,
    ) -> Result<(AriTask, Option<String>)> {
        // Only the latest turn decides what the message does.
        let turns = self.turns(t, scope, id, 1).await?;
        let latest = turns.latest();
        let waits = latest
            .status
            .as_ref()
            .is_some_and(|s| s.pending_approval.is_some())
            && convert::state(latest).is_interrupted();
        if waits {
            let (task, call) = self.answer(t, caller, req, latest.clone()).await?;
            return Ok((task, Some(call)));
        }
        if convert::asked(latest) {
            let turn = self.reply(t, caller, req, &turns, streamed).await?;
            return Ok((turn, None));
        }
        Err(Error::Unsupported(format!(
            "task {id} waits for no decision and asks no question; send a new message without taskId"
        )))
    }

    /// The A2A task `task` is part of, as the caller sees it: a conversation whole (under
    /// its first Task's id) once someone replied to it, else the Task itself.
    async fn view(
        &self,
        t: &Target<'_>,
        scope: &Scope,
        task: AriTask,
        history: bool,
    ) -> Result<crate::a2a::Task> {
        let continued = task
            .labels()
            .contains_key(ari_crds::names::LABEL_CONVERSATION);
        if convert::asked(&task) || continued {
            let keep = if history { VIEW_TURNS } else { 1 };
            let turns = self.turns(t, scope, &task.name_any(), keep).await?;
            if !turns.replies.is_empty()
                && let Some(view) = convert::conversation(&turns.all(), history, true)
            {
                return Ok(view);
            }
        }
        Ok(convert::task(&task, history, true))
    }

    /// Runs `input` as one Task of the Agent for an MCP tool call (a message of one text part,
    /// created as `caller`'s like any A2A message): the Task once it has ended, or as it is
    /// after the gateway's blocking limit.
    pub async fn run_text(
        &self,
        t: &Target<'_>,
        caller: &Caller,
        input: String,
    ) -> Result<AriTask> {
        let req: SendMessageRequest = crate::rpc::params(json!({
            "message": {
                "messageId": uuid::Uuid::new_v4().to_string(),
                "role": "ROLE_USER",
                "parts": [{"text": input}],
            }
        }))?;
        let created = self.create(t, caller, &req, false, None).await?;
        self.wait_for_end(
            t.namespace,
            &created.name_any(),
            self.blocking,
            TaskState::is_interrupted_or_terminal,
        )
        .await
    }

    /// The Task once `stop` says of its state (it ended, or it also paused for a person), or
    /// as it is after `limit`.
    async fn wait_for_end(
        &self,
        namespace: &str,
        name: &str,
        limit: Duration,
        stop: fn(TaskState) -> bool,
    ) -> Result<AriTask> {
        self.wait_until(namespace, name, limit, move |s, _| stop(s))
            .await
    }

    /// The Task once `stop` says so of its state and the call it waits on (if any), or as it
    /// is after `limit`. Read once; after that the hub's watch says when it changes (its
    /// trimmed version keeps both), and the whole Task is read once more for the answer.
    async fn wait_until(
        &self,
        namespace: &str,
        name: &str,
        limit: Duration,
        stop: impl Fn(TaskState, Option<&str>) -> bool,
    ) -> Result<AriTask> {
        let stops = |t: &AriTask| {
            let waits = t.status.as_ref().and_then(|s| s.pending_approval.as_ref());
            stop(convert::state(t), waits.map(|p| p.call.as_str()))
        };
        let api = self.tasks(namespace);
        let not_found = || Error::TaskNotFound(name.to_owned());
        let mut follower = self.hub.follow(namespace, name);
        let deadline = tokio::time::Instant::now() + limit;
        let task = api.get_opt(name).await?.ok_or_else(not_found)?;
        if stops(&task) {
            return Ok(task);
        }
        while let Ok(Ok(())) = tokio::time::timeout_at(deadline, follower.rx.changed()).await {
            let (deleted, ended) = {
                let s = follower.rx.borrow_and_update();
                (s.deleted, s.task.as_ref().is_some_and(|t| stops(t)))
            };
            if deleted {
                return Err(not_found());
            }
            if ended {
                break;
            }
        }
        drop(follower);
        api.get_opt(name).await?.ok_or_else(not_found)
    }

    /// Records the decision `req` carries about the call `task` waits on, in the caller's
    /// name (the router checked they may update Tasks when the message carries a decision);
    /// the Task as written, and the call.
    async fn answer(
        &self,
        t: &Target<'_>,
        caller: &Caller,
        req: &SendMessageRequest,
        task: AriTask,
    ) -> Result<(AriTask, String)> {
        let id = task.name_any();
        let id = id.as_str();
        let waiting = task
            .status
            .as_ref()
            .and_then(|s| s.pending_approval.as_ref())
            .filter(|_| convert::state(&task).is_interrupted());
        let Some(pending) = waiting else {
            return Err(Error::Unsupported(format!(
                "task {id} waits for no decision"
            )));
        };
        let call = pending.call.clone();
        let said = crate::decision::answer(&req.message, &call)?;
        let decided = ari_crds::Approval {
            call: call.clone(),
            decision: said.decision,
            approver: caller.username.clone(),
            reason: said.reason,
        };
        let approvals =
            ari_crds::add_decision(task.spec.approvals.as_deref().unwrap_or_default(), decided)
                .map_err(|e| Error::InvalidParams(e.to_string()))?;
        // Conditional on the version read: of two people deciding at once, one wins.
        let patch = json!({
            "metadata": {"resourceVersion": task.resource_version()},
            "spec": {"approvals": approvals},
        });
        let written = self
            .tasks(t.namespace)
            .patch(id, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| match e {
                kube::Error::Api(ae) if ae.code == 409 => Error::InvalidParams(format!(
                    "task {id} changed while deciding (someone else decided?); read it again"
                )),
                kube::Error::Api(ae) if ae.code == 422 || ae.code == 400 => {
                    Error::InvalidParams(ae.message.chars().take(300).collect())
                }
                e => Error::Kube(e),
            })?;
        self.metrics
            .decisions
            .with_label_values(&[t.namespace])
            .inc();
        Ok((written, call))
    }

    pub async fn get_task(&self, t: &Target<'_>, scope: &Scope, params: Value) -> Result<Value> {
        let req: TaskIdRequest = crate::rpc::params(params)?;
        let task = self.own_task(t, scope, &req.id).await?;
        let history = req.history_length.is_none_or(|n| n > 0);
        let view = self.view(t, scope, task, history).await?;
        Ok(serde_json::to_value(view).unwrap_or_default())
    }

    pub async fn list_tasks(&self, t: &Target<'_>, scope: &Scope, params: Value) -> Result<Value> {
        let req: ListTasksRequest = crate::rpc::params(params)?;
        let page = req.page_size.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&page) {
            return Err(Error::InvalidParams(format!(
                "pageSize must be 1 to {MAX_PAGE}"
            )));
        }
        // A conversation is listed once, as its first Task: replies are its turns.
        let labels = match req.context_id.as_deref().filter(|c| !c.is_empty()) {
            Some(c) if convert::is_label_value(c) => {
                format!("{},{LABEL_A2A_CONTEXT}={c},!{LABEL_TURN}", scope.selector())
            }
            Some(_) => return Err(Error::InvalidParams("contextId is not a valid id".into())),
            None => format!("{},!{LABEL_TURN}", scope.selector()),
        };
        let status = match req
            .status
            .as_deref()
            .filter(|s| !s.is_empty() && *s != "TASK_STATE_UNSPECIFIED")
        {
            Some(s) => Some(
                TaskState::parse(s)
                    .ok_or_else(|| Error::InvalidParams(format!("unknown status {s:.40}")))?,
            ),
            None => None,
        };
        let mut lp = ListParams::default()
            .labels(&labels)
            .fields(&format!("spec.agentRef.name={}", t.agent))
            .limit(page as u32);
        if let Some(token) = req.page_token.as_deref().filter(|p| !p.is_empty()) {
            lp = lp.continue_token(token);
        }
        let list = self
            .tasks(t.namespace)
            .list(&lp)
            .await
            .map_err(|e| match e {
                kube::Error::Api(ae) if ae.code == 410 || ae.code == 400 => {
                    Error::InvalidParams("pageToken is expired or invalid; list again".into())
                }
                e => Error::Kube(e),
            })?;
        let remaining = list.metadata.remaining_item_count.unwrap_or(0);
        let artifacts = req.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::with_capacity(list.items.len());
        for task in list.items {
            // A conversation shows its latest turn (one more read for those that asked).
            let view = if convert::asked(&task) {
                // No history in a listing: the latest turn only, one read per conversation.
                let turns = self.turns(t, scope, &task.name_any(), 1).await?;
                convert::conversation(&turns.all(), false, artifacts)
            } else {
                None
            };
            let view = view.unwrap_or_else(|| convert::task(&task, false, artifacts));
            if status.is_none_or(|s| view.status.state == s) {
                tasks.push(view);
            }
        }
        let total = tasks.len() as i64 + remaining;
        Ok(serde_json::to_value(ListTasksResponse {
            page_size: tasks.len() as i64,
            tasks,
            next_page_token: list.metadata.continue_.unwrap_or_default(),
            total_size: total,
        })
        .unwrap_or_default())
    }

    pub async fn cancel_task(&self, t: &Target<'_>, scope: &Scope, params: Value) -> Result<Value> {
        let req: TaskIdRequest = crate::rpc::params(params)?;
        let task = self.own_task(t, scope, &req.id).await?;
        if convert::state(&task).is_terminal() {
            return Err(Error::NotCancelable(req.id));
        }
        let patch = json!({"spec": {"cancelled": true}});
        self.tasks(t.namespace)
            .patch(&req.id, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let task = self
            .wait_for_end(t.namespace, &req.id, CANCEL_WAIT, TaskState::is_terminal)
            .await?;
        Ok(serde_json::to_value(convert::task(&task, true, true)).unwrap_or_default())
    }

    /// For `SendStreamingMessage`: creates the Task and streams it (or, for a message naming
    /// a task, records the decision it carries and streams that task).
    pub async fn send_streaming(
        self: &Arc<Self>,
        t: &Target<'_>,
        caller: &Caller,
        scope: &Scope,
        params: Value,
        permit: StreamPermit,
    ) -> Result<impl Stream<Item = StreamItem> + Send + 'static + use<>> {
        let req: SendMessageRequest = crate::rpc::params(params)?;
        if let Some(id) = req.message.task_id.as_deref() {
            let (task, decided) = self.follow_up(t, caller, scope, &req, id, true).await?;
            // A reply was just created with a live-log lease, like a new message's Task.
            return self
                .stream_task(t.namespace, &task.name_any(), decided.is_none(), permit)
                .await;
        }
        let created = self.create(t, caller, &req, true, None).await?;
        self.stream_task(t.namespace, &created.name_any(), true, permit)
            .await
    }

    /// For `SubscribeToTask`: streams a task that has not ended.
    pub async fn subscribe(
        self: &Arc<Self>,
        t: &Target<'_>,
        scope: &Scope,
        params: Value,
        permit: StreamPermit,
    ) -> Result<impl Stream<Item = StreamItem> + Send + 'static + use<>> {
        let req: TaskIdRequest = crate::rpc::params(params)?;
        let task = self.own_task(t, scope, &req.id).await?;
        if convert::state(&task).is_terminal() {
            return Err(Error::Unsupported(format!(
                "task {} has already ended",
                req.id
            )));
        }
        self.stream_task(t.namespace, &req.id, false, permit).await
    }

    /// The canonical events of a task (for the plain SSE endpoint). The Task is looked up
    /// (and checked to be the caller's) before it is followed: an id that is not found leaves
    /// nothing behind.
    pub async fn events(
        &self,
        t: &Target<'_>,
        scope: &Scope,
        id: &str,
        permit: StreamPermit,
    ) -> Result<impl Stream<Item = Event> + Send + 'static + use<>> {
        self.own_task(t, scope, id).await?;
        let (first, events) = self.follow(t.namespace, id, permit).await?;
        drop(first);
        Ok(livelog::while_followed(
            self.tasks(t.namespace),
            id,
            false,
            events,
        ))
    }

    /// A Task known to exist, followed: its version read after following began, and its
    /// events from that version on.
    async fn follow(
        &self,
        namespace: &str,
        name: &str,
        permit: StreamPermit,
    ) -> Result<(AriTask, impl Stream<Item = Event> + Send + 'static + use<>)> {
        let follower = self.hub.follow(namespace, name);
        let first = self
            .tasks(namespace)
            .get_opt(name)
            .await?
            .ok_or_else(|| Error::TaskNotFound(name.to_owned()))?;
        let events = stream::follow(name, follower, crate::hub::trim(first.clone()), permit);
        Ok((first, events))
    }

    /// The task first, then one A2A stream item per canonical event. `fresh`: the Task was
    /// just created with a live-log lease.
    async fn stream_task(
        self: &Arc<Self>,
        namespace: &str,
        name: &str,
        fresh: bool,
        permit: StreamPermit,
    ) -> Result<impl Stream<Item = StreamItem> + Send + 'static + use<>> {
        let api = self.tasks(namespace);
        let (first, events) = self.follow(namespace, name, permit).await?;
        // A reply streams under its conversation's id, the A2A task the caller named.
        let shown = first
            .labels()
            .get(ari_crds::names::LABEL_CONVERSATION)
            .cloned()
            .unwrap_or_else(|| name.to_owned());
        let mut head = convert::task(&first, true, false);
        head.id = shown.clone();
        let head = StreamItem::Result(Box::new(StreamResponse::Task(head)));
        let context = convert::context_id(&first);
        drop(first);
        let events = livelog::while_followed(api.clone(), name, fresh, events);
        let name = name.to_owned();
        let mut state = TaskState::Submitted;
        let items = events.then(move |ev| {
            let api = api.clone();
            let name = name.clone();
            let shown = shown.clone();
            let context = context.clone();
            let item = a2a_items(&ev, &mut state, &shown, &context);
            async move {
                match ev {
                    Event::Done { .. } => {
                        // The end carries the output and the attestation: read them once.
                        let task = api.get_opt(&name).await.ok().flatten();
                        final_items(task.as_ref(), &shown, &context)
                    }
                    _ => item,
                }
            }
        });
        Ok(futures::stream::once(async move { head }).chain(items.flat_map(futures::stream::iter)))
    }
}

/// One SSE item of an A2A stream: a result, or an error that ends it.
pub enum StreamItem {
    Result(Box<StreamResponse>),
    Error(String),
}

fn status_update(
    name: &str,
    context: &str,
    state: TaskState,
    metadata: Option<serde_json::Map<String, Value>>,
) -> StreamItem {
    StreamItem::Result(Box::new(StreamResponse::StatusUpdate(
        TaskStatusUpdateEvent {
            task_id: name.to_owned(),
            context_id: context.to_owned(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: Some(chrono::Utc::now().to_rfc3339()),
            },
            metadata,
        },
    )))
}

/// The A2A items of one canonical event: a status change is a status update; a log line,
/// model text, a tool call or result, delegation or usage rides on a status update (same state) as `ari.dev/event`
/// metadata.
fn a2a_items(ev: &Event, state: &mut TaskState, name: &str, context: &str) -> Vec<StreamItem> {
    match ev {
        Event::Status { state: s, .. } => {
            *state = *s;
            if s.is_terminal() {
                Vec::new() // told with the output by the `done` event
            } else {
                vec![status_update(name, context, *s, None)]
            }
        }
        Event::Log { .. }
        | Event::ModelText { .. }
        | Event::ToolCall { .. }
        | Event::ToolResult { .. }
        | Event::Delegation { .. }
        | Event::Usage { .. } => {
            if state.is_terminal() {
                return Vec::new(); // usage of the end: in the final metadata
            }
            let mut m = serde_json::Map::new();
            m.insert(
                meta::EVENT.into(),
                serde_json::to_value(ev).unwrap_or_default(),
            );
            vec![status_update(name, context, *state, Some(m))]
        }
        Event::Done { .. } => Vec::new(),
        Event::Error { message, .. } => vec![StreamItem::Error(message.clone())],
    }
}

/// The end of an A2A stream: the output artifact, then the final status with the task's
/// attestation and usage.
fn final_items(task: Option<&AriTask>, name: &str, context: &str) -> Vec<StreamItem> {
    let Some(task) = task else {
        return vec![StreamItem::Error("the task was deleted".into())];
    };
    let mut out = Vec::new();
    if let Some(artifact) = convert::output_artifact(task) {
        out.push(StreamItem::Result(Box::new(
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: name.to_owned(),
                context_id: context.to_owned(),
                artifact,
                last_chunk: true,
            }),
        )));
    }
    let mut status = convert::status(task);
    if let Some(m) = &mut status.message {
        m.task_id = Some(name.to_owned());
    }
    status.timestamp = status
        .timestamp
        .or_else(|| Some(chrono::Utc::now().to_rfc3339()));
    let metadata = convert::task_metadata(task);
    out.push(StreamItem::Result(Box::new(StreamResponse::StatusUpdate(
        TaskStatusUpdateEvent {
            task_id: name.to_owned(),
            context_id: context.to_owned(),
            status,
            metadata: (!metadata.is_empty()).then_some(metadata),
        },
    ))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a2a_task(agent: &str, context: bool, caller: Option<&str>) -> AriTask {
        let mut t = AriTask::new("t", ari_crds::TaskSpec::for_agent(agent));
        let mut labels = std::collections::BTreeMap::new();
        if context {
            labels.insert(LABEL_A2A_CONTEXT.to_owned(), "c".to_owned());
        }
        if let Some(c) = caller {
            labels.insert(LABEL_A2A_CALLER_ID.to_owned(), convert::caller_id(c));
        }
        t.metadata.labels = Some(labels);
        t
    }

    fn caller(name: &str) -> Caller {
        Caller {
            username: name.to_owned(),
            uid: String::new(),
            groups: Vec::new(),
            extra: Default::default(),
        }
    }

    #[test]
    fn a_caller_sees_only_their_own_conversations_unless_allowed_all() {
        let alice = Scope::of(&caller("alice"), false);
        let all = Scope::of(&caller("bob"), true);
        let cases = [
            // (task, scope, visible)
            (a2a_task("echo", true, Some("alice")), &alice, true),
            (a2a_task("echo", true, Some("bob")), &alice, false),
            (a2a_task("echo", true, None), &alice, false),
            (a2a_task("echo", true, Some("bob")), &all, true),
            (a2a_task("echo", true, None), &all, true),
            (a2a_task("other", true, Some("alice")), &alice, false),
            (a2a_task("echo", false, Some("alice")), &alice, false),
            (a2a_task("echo", false, Some("alice")), &all, false),
        ];
        for (i, (task, scope, want)) in cases.iter().enumerate() {
            assert_eq!(visible(task, "echo", scope), *want, "case {i}");
        }
    }

    #[test]
    fn the_list_selector_is_scoped_like_get() {
        let alice = Scope::of(&caller("alice"), false);
        assert_eq!(
            alice.selector(),
            format!(
                "{LABEL_A2A_CONTEXT},{LABEL_A2A_CALLER_ID}={}",
                convert::caller_id("alice")
            )
        );
        assert_eq!(Scope::All.selector(), LABEL_A2A_CONTEXT);
    }
}
