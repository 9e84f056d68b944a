//! One watch of all Agents (a cache for cards and routing) and one watch of all Tasks, fanned
//! out to the streams following them. Each followed Task has a bounded broadcast channel: a
//! stream that falls behind skips ahead and re-reads the Task instead of queueing without end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ari_crds::{Agent, Task};
use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use prometheus::IntCounterVec;
use tokio::sync::broadcast;
use tracing::warn;

/// Changes buffered per followed Task before a slow stream has to catch up by re-reading it.
const CHANNEL_CAPACITY: usize = 32;

/// A change a stream following a Task may care about.
#[derive(Clone, Debug)]
pub enum Update {
    /// The Task itself changed.
    Task(Arc<Task>),
    /// One of its children (a Task whose `spec.parent` names it) changed.
    Child(Arc<Task>),
    /// It was deleted.
    Deleted,
}

type Key = (String, String);

pub struct Hub {
    agents: Store<Agent>,
    followed: Mutex<HashMap<Key, broadcast::Sender<Update>>>,
    agents_synced: AtomicBool,
    tasks_synced: AtomicBool,
}

impl Hub {
    pub fn new(agents: Store<Agent>) -> Self {
        Self {
            agents,
            followed: Mutex::new(HashMap::new()),
            agents_synced: AtomicBool::new(false),
            tasks_synced: AtomicBool::new(false),
        }
    }

    /// Both watches have listed once: cards and streams see the cluster.
    pub fn is_ready(&self) -> bool {
        self.agents_synced.load(Ordering::Relaxed) && self.tasks_synced.load(Ordering::Relaxed)
    }

    /// The Agent `namespace/name`, from the cache.
    pub fn agent(&self, namespace: &str, name: &str) -> Option<Arc<Agent>> {
        self.agents.get(&ObjectRef::new(name).within(namespace))
    }

    /// Changes to `namespace/name` from now on. Subscribe before reading the Task, so nothing
    /// between the read and the first change is missed.
    pub fn subscribe(&self, namespace: &str, name: &str) -> broadcast::Receiver<Update> {
        let mut followed = self.lock();
        followed
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    /// Tasks followed right now (a gauge).
    pub fn followed(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, broadcast::Sender<Update>>> {
        // A panic while holding the map cannot leave it inconsistent (single inserts/removes).
        self.followed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a Task's change to whoever follows it or its parent.
    fn dispatch(&self, task: Task, deleted: bool) {
        let ns = task.namespace().unwrap_or_default();
        // `spec.parent`, not the `ari.dev/parent` label: only executors may set the field (the
        // admission policy, and it is immutable), while anyone who may create a Task can label
        // it, which would put made-up delegation events into another Task's stream.
        let parent = task.spec.parent.as_ref().map(|p| p.name.clone());
        let task = Arc::new(task);
        let mut followed = self.lock();
        let mut send = |key: Key, update: Update| {
            if let Some(tx) = followed.get(&key) {
                if tx.receiver_count() == 0 {
                    followed.remove(&key);
                } else {
                    let _ = tx.send(update);
                }
            }
        };
        let own = if deleted {
            Update::Deleted
        } else {
            Update::Task(task.clone())
        };
        send((ns.clone(), task.name_any()), own);
        if let Some(parent) = parent {
            send((ns, parent), Update::Child(task));
        }
    }

    /// Runs both watches until the process ends. Objects that do not decode are skipped and
    /// counted (`skipped`), so one malformed object cannot blind the gateway.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        namespace: Option<String>,
        writer: reflector::store::Writer<Agent>,
        skipped: IntCounterVec,
    ) {
        let agents = ari_operator::decode::watch::<Agent>(
            client.clone(),
            namespace.as_deref(),
            watcher::Config::default(),
            skipped.clone(),
        )
        .reflect(writer);
        let hub = self.clone();
        let agents = agents.for_each(move |ev| {
            match ev {
                Ok(Event::InitDone) => hub.agents_synced.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "agent watch failed; retrying"),
            }
            futures::future::ready(())
        });
        let tasks = ari_operator::decode::watch::<Task>(
            client,
            namespace.as_deref(),
            watcher::Config::default(),
            skipped,
        );
        let hub = self;
        let tasks = tasks.for_each(move |ev| {
            match ev {
                Ok(Event::Apply(t) | Event::InitApply(t)) => hub.dispatch(t, false),
                Ok(Event::Delete(t)) => hub.dispatch(t, true),
                Ok(Event::InitDone) => hub.tasks_synced.store(true, Ordering::Relaxed),
                Ok(Event::Init) => {}
                Err(e) => warn!(error = %e, "task watch failed; retrying"),
            }
            futures::future::ready(())
        });
        futures::join!(agents, tasks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::{ParentRef, TaskSpec};

    fn hub() -> Hub {
        let (store, _writer) = reflector::store();
        Hub::new(store)
    }

    fn task(name: &str, parent: Option<&str>) -> Task {
        let mut t = Task::new(name, TaskSpec::for_agent("a"));
        t.metadata.namespace = Some("ns".into());
        t.spec.parent = parent.map(|p| ParentRef {
            name: p.to_owned(),
            depth: 1,
            ..ParentRef::default()
        });
        t
    }

    #[test]
    fn a_parent_label_alone_does_not_make_a_child() {
        let hub = hub();
        let mut rx = hub.subscribe("ns", "p");
        let mut forged = task("forged", None);
        forged.metadata.labels =
            Some([(ari_crds::names::LABEL_PARENT.to_owned(), "p".to_owned())].into());
        hub.dispatch(forged, false);
        assert!(rx.try_recv().is_err(), "a label is not a delegation");
    }

    #[test]
    fn a_followed_task_and_its_children_reach_the_follower() {
        let hub = hub();
        let mut rx = hub.subscribe("ns", "p");
        hub.dispatch(task("p", None), false);
        hub.dispatch(task("p-0", Some("p")), false);
        hub.dispatch(task("other", None), false);
        hub.dispatch(task("p", None), true);
        assert!(matches!(rx.try_recv(), Ok(Update::Task(_))));
        assert!(matches!(rx.try_recv(), Ok(Update::Child(c)) if c.name_any() == "p-0"));
        assert!(matches!(rx.try_recv(), Ok(Update::Deleted)));
        assert!(rx.try_recv().is_err(), "nothing about other tasks");
    }

    #[test]
    fn a_task_nobody_follows_any_more_is_forgotten() {
        let hub = hub();
        drop(hub.subscribe("ns", "p"));
        assert_eq!(hub.followed(), 1);
        hub.dispatch(task("p", None), false);
        assert_eq!(hub.followed(), 0);
    }

    #[test]
    fn a_slow_follower_lags_instead_of_growing_a_queue() {
        let hub = hub();
        let mut rx = hub.subscribe("ns", "p");
        for _ in 0..(CHANNEL_CAPACITY * 4) {
            hub.dispatch(task("p", None), false);
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }
}
