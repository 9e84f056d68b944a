//! The Task watch that keeps the backlog in step with the Agent's Tasks.
//!
//! Watched untyped (`DynamicObject`) and decoded one object at a time: a typed list fails as a
//! whole when one Task does not decode (e.g. an integer the API server stores as int64 but the
//! Rust type holds as u32), which would leave this Agent's executors blind to every Task. An
//! undecodable Task is skipped, counted and logged, and — when it is still claimable and this
//! pod is its first choice — failed with a message saying why, guarded by its
//! resourceVersion.

use std::sync::Arc;

use ari_crds::{Task, TaskReason, TaskStatus};
use futures::TryStreamExt;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use super::backlog::Backlog;
use super::cancels::Cancels;
use super::convert;
use super::livelog::LiveLogs;
use super::metrics::Metrics;
use super::peers::Peers;

/// The Tasks API, untyped (see the module docs).
pub fn dynamic_tasks(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client, namespace, &ApiResource::erase::<Task>(&()))
}

/// Where a Task's events go: the backlog of its Agent, when this pod serves that Agent.
/// Each call changes a backlog under the route's own lock, so a pool cannot let an Agent go
/// between finding its backlog and filling it.
pub trait Route: Send + Sync {
    /// Whether this pod serves `agent`'s Tasks.
    fn serves(&self, agent: &str) -> bool;
    /// Records the latest version of one of `agent`'s Tasks (see [`Backlog::offer`]). A
    /// claimable Task makes the pod ready for its Agent (a pool hosts it); any other changes
    /// only a backlog that exists, so a finished Task never loads a module.
    fn offer(&self, agent: &str, task: Task, claimable: bool, owned: bool);
    /// Forgets one of `agent`'s Tasks (deleted, or no longer decodable).
    fn remove(&self, agent: &str, name: &str);
    /// Empties every backlog (the watch is listing again).
    fn clear(&self);
}

/// A dedicated pod: its one Agent (the watch's field selector already keeps to it).
pub struct OneAgent(pub Arc<Backlog>);

impl Route for OneAgent {
    fn serves(&self, _agent: &str) -> bool {
        true
    }

    fn offer(&self, _agent: &str, task: Task, claimable: bool, owned: bool) {
        self.0.offer(task, claimable, owned);
    }

    fn remove(&self, _agent: &str, name: &str) {
        self.0.remove(name);
    }

    fn clear(&self) {
        self.0.clear();
    }
}

/// What the feed updates besides the backlogs.
pub struct Context<'a> {
    pub peers: &'a Peers,
    pub metrics: &'a Metrics,
    pub cancels: &'a Cancels,
    pub live: &'a LiveLogs,
}

/// The Agent a Task names, read from the untyped object (an undecodable Task has one too).
fn agent_of(o: &DynamicObject) -> Option<&str> {
    o.data.get("spec")?.get("agentRef")?.get("name")?.as_str()
}

/// Feeds the backlogs from the watch of the Tasks `selector` picks, until the watch ends.
pub async fn feed(
    api: Api<DynamicObject>,
    selector: Option<&str>,
    route: &dyn Route,
    cx: &Context<'_>,
) {
    let mut config = watcher::Config::default();
    if let Some(selector) = selector {
        config = config.fields(selector);
    }
    let stream = watcher(api.clone(), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                offer(&api, &o, route, cx).await;
            }
            Ok(Some(watcher::Event::Delete(o))) => {
                if let Some(uid) = o.uid() {
                    cx.cancels.deleted(&uid);
                }
                if let Some(agent) = agent_of(&o) {
                    route.remove(agent, &o.name_any());
                }
            }
            Ok(Some(watcher::Event::Init)) => route.clear(),
            Ok(Some(watcher::Event::InitDone)) => {
                info!(executors = cx.peers.count(), "task watch synced");
            }
            Ok(None) => return,
            Err(e) => warn!(error = %e, "task watch error"),
        }
    }
}

/// Offers one Task (as watched or listed) to its Agent's backlog, when this pod serves it.
pub async fn offer(
    api: &Api<DynamicObject>,
    o: &DynamicObject,
    route: &dyn Route,
    cx: &Context<'_>,
) {
    let Some(agent) = agent_of(o).filter(|a| route.serves(a)) else {
        return;
    };
    let owned = o.uid().is_none_or(|uid| cx.peers.owns(&uid));
    match decode(o) {
        Ok(t) => {
            let ok = t.is_claimable();
            cx.live.seen(&t);
            if t.is_cancelled()
                && let Some(uid) = t.uid()
                && cx.cancels.cancel(&uid)
            {
                info!(task = %t.name_any(), "cancelled while running: stopping it");
            }
            // A replica this pod should leave to a peer waits like a peer's Task.
            let owned = owned && super::replicas::my_turn(&t, cx.peers);
            route.offer(agent, t, ok, owned);
        }
        Err(e) => {
            cx.metrics.undecodable.inc();
            warn!(task = %o.name_any(), error = %e, "skipping a Task this executor cannot decode");
            route.remove(agent, &o.name_any());
            if owned {
                fail_undecodable(api, o, &e).await;
            }
        }
    }
}

/// The status of a Task that does not decode, as far as the state machine needs it: the
/// typed status when that part decodes, else an empty one; `None` when its phase is one the
/// executor must not touch (anything but none or `Pending`).
fn undecodable_status(o: &DynamicObject) -> Option<TaskStatus> {
    let raw = o.data.get("status");
    let phase = raw.and_then(|s| s.get("phase")).and_then(|p| p.as_str());
    if !matches!(phase, None | Some("Pending")) {
        return None;
    }
    Some(
        raw.and_then(|s| serde_json::from_value::<TaskStatus>(s.clone()).ok())
            .unwrap_or_default(),
    )
}

/// The typed Task, or why it does not decode.
fn decode(o: &DynamicObject) -> Result<Task, String> {
    let value = serde_json::to_value(o).map_err(|e| e.to_string())?;
    serde_json::from_value::<Task>(value).map_err(|e| e.to_string())
}

/// Fails a claimable Task that does not decode, so its author learns why it never runs.
/// Only a Task with no phase or `Pending` is touched (the state machine's `fail` from the
/// status as far as it decodes), and the merge patch carries its resourceVersion, so nothing
/// another writer did is overwritten.
async fn fail_undecodable(api: &Api<DynamicObject>, o: &DynamicObject, error: &str) {
    if o.metadata.deletion_timestamp.is_some() {
        return;
    }
    let Some(status) = undecodable_status(o) else {
        return;
    };
    let message = format!(
        "the executor cannot read this Task ({error}); a field is outside the range the \
         executor accepts — fix the value and create the Task again"
    );
    let rv = o.resource_version();
    let patch = match status.patch(rv.as_deref(), |s| {
        s.fail(
            TaskReason::HostError,
            &message,
            o.metadata.generation,
            convert::now(),
        )
    }) {
        Ok(patch) => patch,
        Err(e) => {
            warn!(task = %o.name_any(), error = %e, "not failing an undecodable Task");
            return;
        }
    };
    let name = o.name_any();
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => warn!(task = %name, "failed an undecodable Task"),
        Err(e) => warn!(task = %name, error = %e, "cannot fail an undecodable Task"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::worker::testutil::{find, mock_client_with_query as mock_client, status};

    const TASKS: &str = "/apis/ari.dev/v1alpha1/namespaces/demo/tasks";

    fn task(name: &str, ttl: Value) -> Value {
        json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
               "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
                            "resourceVersion": "5"},
               "spec": {"agentRef": {"name": "echo"}, "input": "x",
                        "ttlSecondsAfterFinished": ttl}})
    }

    #[tokio::test]
    async fn one_undecodable_task_is_skipped_counted_and_failed_while_the_others_are_served() {
        let (client, log) = mock_client(|method, uri, body| match method {
            "GET" if uri.starts_with(TASKS) && !uri.contains("watch=") => (
                200,
                json!({"apiVersion": "ari.dev/v1alpha1", "kind": "TaskList",
                       "metadata": {"resourceVersion": "10"},
                       "items": [task("poison", json!(4_294_967_296u64)), task("fine", json!(60))]}),
            ),
            // The watch after the list: no events.
            "GET" => (200, Value::Null),
            "PATCH" if uri.starts_with(&format!("{TASKS}/poison/status")) => (200, body.clone()),
            _ => status(404, "NotFound"),
        });
        // A typed list of the same body does not decode at all: the bug this guards against.
        let typed = Api::<Task>::namespaced(client.clone(), "demo")
            .list(&Default::default())
            .await;
        assert!(typed.is_err(), "the typed list decoded: {typed:?}");

        let backlog = Arc::new(Backlog::new(Duration::from_millis(0)));
        let peers = Peers::alone("echo-executor-a");
        let metrics = Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}"));
        let api = dynamic_tasks(client, "demo");
        let fed = async {
            let until = tokio::time::Instant::now() + Duration::from_secs(20);
            while backlog.len() != 1 || find(&log, "PATCH", "/poison/status").is_empty() {
                assert!(
                    tokio::time::Instant::now() < until,
                    "backlog {}",
                    backlog.len()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let cancels = Cancels::default();
        let live = LiveLogs::new(Default::default());
        let cx = Context {
            peers: &peers,
            metrics: &metrics,
            cancels: &cancels,
            live: &live,
        };
        let route = OneAgent(backlog.clone());
        tokio::select! {
            _ = feed(api, Some("spec.agentRef.name=echo"), &route, &cx) => panic!("the watch ended"),
            _ = fed => {}
        }
        let next = tokio::time::timeout(Duration::from_secs(1), backlog.next())
            .await
            .map(|t| t.name_any());
        assert_eq!(next.ok().as_deref(), Some("fine"));
        assert!(metrics.undecodable.get() >= 1);
        let patch = &find(&log, "PATCH", "/poison/status")[0];
        assert_eq!(patch.body["metadata"]["resourceVersion"], "5", "guarded");
        assert_eq!(patch.body["status"]["phase"], "Failed");
        let message = patch.body["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("4294967296"), "{message}");
    }

    #[test]
    fn only_an_undecodable_task_with_no_phase_or_pending_is_failed_from_what_of_its_status_decodes()
    {
        let object = |status: Option<Value>| {
            let mut t = task("poison", json!(4_294_967_296u64));
            if let Some(s) = status {
                t["status"] = s;
            }
            serde_json::from_value::<DynamicObject>(t).expect("a dynamic object")
        };
        // (status, Some(attempts of the status failed) or None: left alone)
        let table: Vec<(Option<Value>, Option<Option<u32>>)> = vec![
            (None, Some(None)),
            (Some(json!({})), Some(None)),
            (
                Some(json!({"phase": "Pending", "attempts": 2})),
                Some(Some(2)),
            ),
            // The status itself does not decode: failed from an empty one.
            (
                Some(json!({"phase": "Pending", "attempts": -1})),
                Some(None),
            ),
            (Some(json!({"phase": "Running", "attempts": 1})), None),
            (Some(json!({"phase": "Failed"})), None),
            (Some(json!({"phase": "Succeeded"})), None),
            (Some(json!({"phase": "Cancelled"})), None),
            (Some(json!({"phase": "Bogus"})), None),
        ];
        for (status, want) in table {
            let got = undecodable_status(&object(status.clone()));
            assert_eq!(got.as_ref().map(|s| s.attempts), want, "{status:?}");
            if let Some(s) = got {
                let patch = s
                    .patch(Some("5"), |s| {
                        s.fail(TaskReason::HostError, "why", Some(1), convert::now())
                    })
                    .expect("a Pending Task may fail");
                assert_eq!(patch["status"]["phase"], "Failed", "{status:?}");
                assert_eq!(patch["status"]["reason"], "HostError", "{status:?}");
            }
        }
    }
}
