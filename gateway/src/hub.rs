//! One watch of all Agents (the exposed ones, trimmed to what their cards show) and one watch of
//! all Tasks, fanned out to the streams and waits following them.
//!
//! Each followed Task has one `watch` channel holding only its latest version, trimmed to what
//! a stream reads (never its input or output), and the latest version of each of its children:
//! a follower that reads slowly sees the newest state when it looks again, so nothing queues per
//! follower. An entry exists only while someone follows it: the last [`Follower`] dropped
//! removes it, so requests that end (404s, finished waits, closed streams) leave nothing behind.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use ari_crds::decode;
use ari_crds::{Agent, Task, TaskSpec, TaskStatus};
use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use prometheus::IntCounterVec;
use tokio::sync::watch;
use tracing::warn;

use crate::card::Exposed;

/// Children kept per followed Task (a stream reports at most this many; the Task's status
/// lists them all).
pub const MAX_CHILDREN: usize = 256;
/// Objects per page of the initial lists: Agents and Tasks may each be ~1 MiB, and a page is
/// held whole while it is decoded.
const LIST_PAGE: u32 = 20;

/// What a follower sees of a Task: its latest (trimmed) version and its children's.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// `None` until the watch has shown a version since the entry was made.
    pub task: Option<Arc<Task>>,
    pub deleted: bool,
    /// Child name → its latest trimmed version (at most [`MAX_CHILDREN`]).
    pub children: BTreeMap<String, Arc<Task>>,
}

type Key = (String, String);
type Followed = Mutex<HashMap<Key, Weak<Entry>>>;

/// One followed Task: the channel, removed from the map when its last follower goes.
struct Entry {
    key: Key,
    tx: watch::Sender<Snapshot>,
    map: Weak<Followed>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let Some(map) = self.map.upgrade() else {
            return;
        };
        let mut map = lock(&map);
        // A new follower may have replaced this entry already; only a dead one is removed.
        if map.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&self.key);
        }
    }
}

/// A follower of one Task: changes arrive on `rx`; dropping it stops following.
pub struct Follower {
    pub rx: watch::Receiver<Snapshot>,
    _entry: Arc<Entry>,
}

/// The exposed Agents by (namespace, name), with the list in progress during a (re)list.
#[derive(Default)]
struct Agents {
    live: RwLock<HashMap<Key, Arc<Exposed>>>,
    relisting: Mutex<Option<HashMap<Key, Arc<Exposed>>>>,
}

pub struct Hub {
    agents: Agents,
    followed: Arc<Followed>,
    agents_synced: AtomicBool,
    tasks_synced: AtomicBool,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    pub fn new() -> Self {
        Self {
            agents: Agents::default(),
            followed: Arc::new(Mutex::new(HashMap::new())),
            agents_synced: AtomicBool::new(false),
            tasks_synced: AtomicBool::new(false),
        }
    }

    /// Both watches have listed once: cards and streams see the cluster.
    pub fn is_ready(&self) -> bool {
        self.agents_synced.load(Ordering::Relaxed) && self.tasks_synced.load(Ordering::Relaxed)
    }

    /// The exposed Agent `namespace/name`, from the cache.
    pub fn agent(&self, namespace: &str, name: &str) -> Option<Arc<Exposed>> {
        let live = self.agents.live.read().unwrap_or_else(|e| e.into_inner());
        live.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The exposed Agents of `namespace`, by name, at most `max`.
    pub fn agents_in(&self, namespace: &str, max: usize) -> Vec<Arc<Exposed>> {
        let live = self.agents.live.read().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<Arc<Exposed>> = live
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, a)| a.clone())
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.truncate(max);
        found
    }

    /// Exposed Agents in the cache (a gauge).
    pub fn agents_cached(&self) -> usize {
        let live = self.agents.live.read().unwrap_or_else(|e| e.into_inner());
        live.len()
    }

    /// Follows `namespace/name` from now on. Call it only for a Task found to exist (and the
    /// caller's), then read the Task, so nothing between the read and the first change is
    /// missed.
    pub fn follow(&self, namespace: &str, name: &str) -> Follower {
        let key = (namespace.to_owned(), name.to_owned());
        let mut map = lock(&self.followed);
        let entry = match map.get(&key).and_then(Weak::upgrade) {
            Some(e) => e,
            None => {
                let e = Arc::new(Entry {
                    key: key.clone(),
                    tx: watch::channel(Snapshot::default()).0,
                    map: Arc::downgrade(&self.followed),
                });
                map.insert(key, Arc::downgrade(&e));
                e
            }
        };
        Follower {
            rx: entry.tx.subscribe(),
            _entry: entry,
        }
    }

    /// Tasks followed right now (a gauge).
    pub fn followed(&self) -> usize {
        lock(&self.followed).len()
    }

    /// Hands a Task's change to whoever follows it or its parent.
    fn dispatch(&self, task: Task, deleted: bool) {
        let ns = task.namespace().unwrap_or_default();
        let name = task.name_any();
        // `spec.parent`, not the `ari.dev/parent` label: only executors may set the field (the
        // admission policy, and it is immutable), while anyone who may create a Task can label
        // it, which would put made-up delegation events into another Task's stream.
        let parent = task.spec.parent.as_ref().map(|p| p.name.clone());
        let task = Arc::new(trim(task));
        let entry = |key: Key| {
            let map = lock(&self.followed);
            map.get(&key).and_then(Weak::upgrade)
        };
        if let Some(e) = entry((ns.clone(), name.clone())) {
            e.tx.send_modify(|s| {
                s.deleted = deleted;
                s.task = Some(task.clone());
            });
        }
        if let Some(parent) = parent
            && let Some(e) = entry((ns, parent))
        {
            e.tx.send_if_modified(|s| {
                if s.children.len() >= MAX_CHILDREN && !s.children.contains_key(&name) {
                    return false;
                }
                s.children.insert(name, task);
                true
            });
        }
    }

    /// An Agent's change: kept only while it is exposed, and only what its card shows.
    fn agent_event(&self, ev: Event<Agent>) {
        let key = |a: &Agent| (a.namespace().unwrap_or_default(), a.name_any());
        match ev {
            Event::Init => {
                *lock(&self.agents.relisting) = Some(HashMap::new());
            }
            Event::InitApply(a) => {
                if let (Some(list), Some(e)) =
                    (lock(&self.agents.relisting).as_mut(), Exposed::of(&a))
                {
                    list.insert(key(&a), Arc::new(e));
                }
            }
            Event::InitDone => {
                if let Some(list) = lock(&self.agents.relisting).take() {
                    *self.agents.live.write().unwrap_or_else(|e| e.into_inner()) = list;
                }
                self.agents_synced.store(true, Ordering::Relaxed);
            }
            Event::Apply(a) => {
                let mut live = self.agents.live.write().unwrap_or_else(|e| e.into_inner());
                match Exposed::of(&a) {
                    Some(e) => live.insert(key(&a), Arc::new(e)),
                    None => live.remove(&key(&a)),
                };
            }
            Event::Delete(a) => {
                let mut live = self.agents.live.write().unwrap_or_else(|e| e.into_inner());
                live.remove(&key(&a));
            }
        }
    }

    /// Runs both watches until the process ends. Objects that do not decode are skipped and
    /// counted (`skipped`), so one malformed object cannot blind the gateway.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        namespace: Option<String>,
        skipped: IntCounterVec,
    ) {
        let cfg = watcher::Config::default().page_size(LIST_PAGE);
        let count =
            |skipped: IntCounterVec| move |kind: &str| skipped.with_label_values(&[kind]).inc();
        let agents = decode::watch::<Agent>(
            client.clone(),
            namespace.clone(),
            cfg.clone(),
            count(skipped.clone()),
        );
        let hub = self.clone();
        let agents = agents.for_each(move |ev| {
            match ev {
                Ok(ev) => hub.agent_event(ev),
                Err(e) => warn!(error = %e, "agent watch failed; retrying"),
            }
            futures::future::ready(())
        });
        let tasks = decode::watch::<Task>(client, namespace.clone(), cfg, count(skipped));
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

/// What a stream or wait reads of a Task, and nothing else: name, agent, parent, the A2A
/// context label, and the status fields that make events (phase, reason, live log, children,
/// usage, output digest). Input, output, attestation and annotations are dropped, so a
/// followed Task costs a few KiB however large its input is.
pub fn trim(task: Task) -> Task {
    let Task {
        metadata,
        spec,
        status,
        ..
    } = task;
    let mut kept = TaskSpec::for_agent(&spec.agent_ref.name);
    kept.parent = spec.parent;
    let labels = metadata.labels.map(|mut l| {
        l.retain(|k, _| k == ari_crds::names::LABEL_A2A_CONTEXT);
        l
    });
    let status = status.map(|s| TaskStatus {
        phase: s.phase,
        reason: s.reason,
        live_log: s.live_log,
        children: s.children,
        resources_used: s.resources_used,
        models: s.models,
        output_sha256: s.output_sha256,
        pending_approval: s.pending_approval,
        start_time: s.start_time,
        completion_time: s.completion_time,
        ..TaskStatus::default()
    });
    Task {
        metadata: ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            resource_version: metadata.resource_version,
            labels,
            creation_timestamp: metadata.creation_timestamp,
            ..ObjectMeta::default()
        },
        spec: kept,
        status,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it cannot leave it inconsistent (single inserts/removes).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::{LiveLog, ParentRef, TaskPhase};

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
        let hub = Hub::new();
        let f = hub.follow("ns", "p");
        let mut forged = task("forged", None);
        forged.metadata.labels =
            Some([(ari_crds::names::LABEL_PARENT.to_owned(), "p".to_owned())].into());
        hub.dispatch(forged, false);
        assert!(
            !f.rx.has_changed().unwrap_or(true),
            "a label is not a delegation"
        );
    }

    #[test]
    fn a_followed_task_and_its_children_reach_the_follower() {
        let hub = Hub::new();
        let mut f = hub.follow("ns", "p");
        hub.dispatch(task("p", None), false);
        hub.dispatch(task("p-0", Some("p")), false);
        hub.dispatch(task("other", None), false);
        let s = f.rx.borrow_and_update().clone();
        assert_eq!(s.task.map(|t| t.name_any()), Some("p".into()));
        assert_eq!(s.children.keys().collect::<Vec<_>>(), ["p-0"]);
        hub.dispatch(task("p", None), true);
        assert!(f.rx.borrow_and_update().deleted);
    }

    #[test]
    fn the_last_follower_gone_removes_the_entry_even_if_the_task_never_changes() {
        let hub = Hub::new();
        let a = hub.follow("ns", &"x".repeat(30_000));
        let b = hub.follow("ns", &"x".repeat(30_000));
        assert_eq!(hub.followed(), 1, "one entry per Task, shared");
        drop(a);
        assert_eq!(hub.followed(), 1, "b still follows");
        drop(b);
        assert_eq!(hub.followed(), 0, "nothing left behind");
        for i in 0..1_000 {
            drop(hub.follow("ns", &format!("made-up-{i}")));
        }
        assert_eq!(hub.followed(), 0);
    }

    #[test]
    fn a_follower_that_does_not_read_holds_one_version_not_a_queue() {
        let hub = Hub::new();
        let mut f = hub.follow("ns", "p");
        for i in 0..1_000u64 {
            let mut t = task("p", None);
            let mut live = LiveLog::default();
            live.push(&format!("line {i}"));
            live.seq = i + 1;
            t.status = Some(TaskStatus {
                phase: Some(TaskPhase::Running),
                live_log: Some(live),
                ..TaskStatus::default()
            });
            hub.dispatch(t, false);
        }
        let s = f.rx.borrow_and_update().clone();
        let seq = s
            .task
            .and_then(|t| t.status.clone())
            .and_then(|s| s.live_log)
            .map(|l| l.seq);
        assert_eq!(seq, Some(1_000), "only the newest version is kept");
        assert!(!f.rx.has_changed().unwrap_or(true));
    }

    #[test]
    fn children_kept_per_task_are_bounded() {
        let hub = Hub::new();
        let f = hub.follow("ns", "p");
        for i in 0..(MAX_CHILDREN + 50) {
            hub.dispatch(task(&format!("p-{i}"), Some("p")), false);
        }
        assert_eq!(f.rx.borrow().children.len(), MAX_CHILDREN);
    }

    #[test]
    fn a_trimmed_task_keeps_what_events_read_and_drops_input_and_output() {
        let mut t = task("p", Some("q"));
        t.spec.input = Some("x".repeat(1 << 20));
        t.metadata.annotations = Some([("big".to_owned(), "y".repeat(1 << 16))].into());
        t.status = Some(TaskStatus {
            phase: Some(TaskPhase::Succeeded),
            output: Some("z".repeat(1 << 16)),
            output_sha256: Some("abc".into()),
            ..TaskStatus::default()
        });
        let trimmed = trim(t);
        assert!(trimmed.spec.input.is_none() && trimmed.metadata.annotations.is_none());
        assert_eq!(trimmed.spec.parent.map(|p| p.name), Some("q".into()));
        let s = trimmed.status.unwrap_or_default();
        assert_eq!(s.phase, Some(TaskPhase::Succeeded));
        assert_eq!(s.output_sha256.as_deref(), Some("abc"));
        assert!(s.output.is_none());
    }

    #[test]
    fn only_exposed_agents_are_cached_and_a_relist_replaces_the_cache() {
        let hub = Hub::new();
        let agent = |name: &str, exposed: bool| -> Agent {
            let mut a: Agent = serde_json::from_value(serde_json::json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"module": {"configMap": {"name": "m", "key": "k"}},
                         "config": "c".repeat(60_000),
                         "a2a": {"exposed": exposed}},
            }))
            .expect("an agent");
            a.metadata.annotations = Some([("big".to_owned(), "y".repeat(1 << 16))].into());
            a
        };
        hub.agent_event(Event::Init);
        hub.agent_event(Event::InitApply(agent("on", true)));
        hub.agent_event(Event::InitApply(agent("off", false)));
        hub.agent_event(Event::InitDone);
        assert!(hub.agent("ns", "on").is_some() && hub.agent("ns", "off").is_none());
        hub.agent_event(Event::Apply(agent("on", false)));
        assert_eq!(hub.agents_cached(), 0, "unexposed: forgotten");
        hub.agent_event(Event::Apply(agent("off", true)));
        hub.agent_event(Event::Init);
        hub.agent_event(Event::InitDone);
        assert_eq!(hub.agents_cached(), 0, "a relist without it drops it");
    }
}
