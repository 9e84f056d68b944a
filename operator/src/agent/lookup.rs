//! `module.image` lookups, run in the background and shared fairly between namespaces.
//!
//! An Agent reconcile holds one of the controller's few places (`AGENT_RECONCILES`) while it
//! runs, so it must not wait on a registry: one namespace's Agents pointing at registries that
//! accept connections and never answer held every place, and every other namespace's Agents
//! waited. A reconcile only asks [`Lookups`]: it gets the registry's last answer for its
//! namespace, reference and credentials ([`Key`]), or a lookup starts and the reconcile
//! returns. The lookup's end wakes the Agents of that namespace and reference ([`Woken`], fed
//! to the controller), whose next reconcile finds the answer.
//!
//! Fair and bounded whatever a namespace writes:
//! - at most [`AT_ONCE`] lookups run at once, at most [`AT_ONCE_PER_NAMESPACE`] of them for
//!   one namespace, and at most [`PULLS_PER_NAMESPACE`] of those pull: a namespace's stuck
//!   registry leaves the other places to other namespaces, which queue first come first served;
//! - a namespace has at most [`BUSY_PER_NAMESPACE`] lookups running or waiting; past that its
//!   Agents are told so (`ImageLookupsOverBound`) and ask again later;
//! - at most [`ANSWERS`] answers are remembered; past that the least recently asked idle one
//!   of the namespace holding the most goes first, and answers nobody asked for in
//!   [`FORGET_AFTER`] go.
//!
//! An answer stands as the client's remembered failures do: a failure until its backoff ends
//! (5 s doubling to 5 min), a success for [`REFRESH_AFTER`]. Past that the last answer is
//! still given while a lookup asks again, and only a changed answer wakes the Agents, so a tag
//! asked again every few minutes neither flaps the status nor wakes every Agent using it.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ari_crds::Agent;
use ari_oci::{Credentials, Reference};
use futures::FutureExt as _;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::image::{Finder, LookupError, Outcome};

/// Most lookups running at once: the registry client's manifest reads.
pub const AT_ONCE: usize = 8;
/// Most lookups of one namespace running at once.
pub const AT_ONCE_PER_NAMESPACE: usize = 2;
/// Most pulls of one namespace at once: the client has few (`maxConcurrentPulls`, default 2).
pub const PULLS_PER_NAMESPACE: usize = 1;
/// Most lookups of one namespace running or waiting.
pub const BUSY_PER_NAMESPACE: usize = 64;
/// Most answers remembered.
pub const ANSWERS: usize = 4096;
/// How long a success is given without asking the registry again.
pub const REFRESH_AFTER: Duration = Duration::from_secs(5);
/// An answer nobody asked for in this long is forgotten when room is needed (Agents ask at
/// least every 5 minutes).
pub const FORGET_AFTER: Duration = Duration::from_secs(900);

/// What a lookup is for: the namespace asking, the reference, and whose credentials (a wrong
/// pull secret is never masked by another Agent's right one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub namespace: String,
    pub reference: Reference,
    pub credentials: Credentials,
}

/// A lookup ended with a new answer: the Agents of `namespace` using `reference` run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Woken {
    pub namespace: String,
    pub reference: Reference,
}

/// What asking gives a reconcile.
#[derive(Debug)]
pub enum Asked {
    /// The registry's last answer (perhaps being asked again).
    Answered(Outcome),
    /// No answer yet: a lookup is running or waiting, and its end wakes the Agent.
    Pending,
    /// No answer yet, and the namespace has [`BUSY_PER_NAMESPACE`] lookups busy.
    OverBound,
}

/// Where the last answer for a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    None,
    Current,
    Due,
}

/// What asking for a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Give the last answer.
    Answer,
    /// Give the last answer and start a lookup to ask the registry again.
    AnswerAndRefresh,
    /// No answer yet: start a lookup.
    Start,
    /// No answer yet; a lookup is already running or waiting.
    Wait,
    /// No answer yet and no room for a lookup.
    OverBound,
}

/// The decision for a key asked for, from its last answer, whether a lookup of it is busy
/// and how many of the namespace's are. A stale answer is given while it is asked again;
/// when the namespace has no room, it stands until there is.
fn step(last: Last, busy: bool, namespace_busy: usize) -> Step {
    let room = namespace_busy < BUSY_PER_NAMESPACE;
    match (last, busy, room) {
        (Last::Current, _, _) | (Last::Due, true, _) | (Last::Due, false, false) => Step::Answer,
        (Last::Due, false, true) => Step::AnswerAndRefresh,
        (Last::None, true, _) => Step::Wait,
        (Last::None, false, true) => Step::Start,
        (Last::None, false, false) => Step::OverBound,
    }
}

/// Whether an answer `age` old is due to be asked again: a success after [`REFRESH_AFTER`], a
/// failure (the `failures`th in a row) once its backoff ends.
fn due(ok: bool, failures: u32, age: Duration) -> bool {
    let wait = if ok {
        REFRESH_AFTER
    } else {
        ari_oci::backoff(failures)
    };
    age >= wait
}

/// Whether two answers say the same (a new one wakes the Agents only if not).
fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => a.same(b),
        _ => false,
    }
}

struct Answer {
    outcome: Outcome,
    at: Instant,
    /// Failures in a row (0 after a success).
    failures: u32,
}

struct Entry {
    answer: Option<Answer>,
    /// A lookup of this key is running or waiting.
    busy: bool,
    asked: Instant,
}

impl Entry {
    fn last(&self, now: Instant) -> Last {
        match &self.answer {
            None => Last::None,
            Some(a) if due(a.outcome.is_ok(), a.failures, now - a.at) => Last::Due,
            Some(_) => Last::Current,
        }
    }
}

/// A namespace with lookups busy, and the gates they pass.
struct Namespace {
    busy: usize,
    running: Arc<Semaphore>,
    pulls: Arc<Semaphore>,
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    namespaces: HashMap<String, Namespace>,
}

/// The gates a lookup of one namespace passes.
#[derive(Clone)]
struct Gates {
    running: Arc<Semaphore>,
    pulls: Arc<Semaphore>,
}

/// The lookups, shared by every reconcile (cheap to clone).
#[derive(Clone)]
pub struct Lookups {
    shared: Arc<Shared>,
}

struct Shared {
    finder: Finder,
    state: Mutex<State>,
    running: Semaphore,
    woken: UnboundedSender<Woken>,
    /// Taken once, by the controller.
    woken_rx: Mutex<Option<UnboundedReceiver<Woken>>>,
    /// Lookups running or waiting, in all.
    busy: watch::Sender<usize>,
}

impl Lookups {
    pub fn new(finder: Finder) -> Self {
        let (woken, woken_rx) = unbounded();
        Lookups {
            shared: Arc::new(Shared {
                finder,
                state: Mutex::default(),
                running: Semaphore::new(AT_ONCE),
                woken,
                woken_rx: Mutex::new(Some(woken_rx)),
                busy: watch::Sender::new(0),
            }),
        }
    }

    /// The lookups' ends with a new answer, for the controller to wake the Agents: the first
    /// call gets them, later ones nothing.
    pub fn woken(&self) -> Option<UnboundedReceiver<Woken>> {
        self.shared
            .woken_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The last answer for `key`, starting a lookup when there is none or it is due; never
    /// waits on a registry.
    pub fn ask(&self, key: Key) -> Asked {
        let now = Instant::now();
        let mut state = self.state();
        let namespace_busy = state.namespaces.get(&key.namespace).map_or(0, |n| n.busy);
        let (last, busy) = state
            .entries
            .get(&key)
            .map_or((Last::None, false), |e| (e.last(now), e.busy));
        let step = step(last, busy, namespace_busy);
        // Nothing is kept for a key refused: a namespace over its bound takes no memory.
        if step == Step::OverBound
            || (step == Step::Start
                && !state.entries.contains_key(&key)
                && !make_room(&mut state, now))
        {
            return Asked::OverBound;
        }
        let entry = state.entries.entry(key.clone()).or_insert(Entry {
            answer: None,
            busy: false,
            asked: now,
        });
        entry.asked = now;
        let answer = entry.answer.as_ref().map(|a| a.outcome.clone());
        if matches!(step, Step::Start | Step::AnswerAndRefresh) {
            entry.busy = true;
            let gates = busy_one(&mut state, &key.namespace);
            drop(state);
            self.shared.busy.send_modify(|n| *n += 1);
            tokio::spawn(self.clone().run(key, gates));
        }
        match answer {
            Some(outcome) => Asked::Answered(outcome),
            None => Asked::Pending,
        }
    }

    /// One lookup: waits for its namespace's place and a place of all, asks, records.
    async fn run(self, key: Key, gates: Gates) {
        let outcome = {
            let _mine = gates.running.acquire().await;
            let _any = self.shared.running.acquire().await;
            AssertUnwindSafe(self.shared.finder.find(&key, &gates.pulls))
                .catch_unwind()
                .await
                .unwrap_or(Err(LookupError::Failed))
        };
        self.record(key, outcome);
    }

    /// Records a lookup's answer, and wakes its Agents when it differs from the last.
    fn record(&self, key: Key, outcome: Outcome) {
        let now = Instant::now();
        let changed = {
            let mut state = self.state();
            if let Some(ns) = state.namespaces.get_mut(&key.namespace) {
                ns.busy = ns.busy.saturating_sub(1);
                if ns.busy == 0 {
                    state.namespaces.remove(&key.namespace);
                }
            }
            let entry = state.entries.entry(key.clone()).or_insert(Entry {
                answer: None,
                busy: false,
                asked: now,
            });
            let failures = match (&entry.answer, &outcome) {
                (_, Ok(_)) => 0,
                (Some(a), Err(_)) if a.outcome.is_err() => a.failures.saturating_add(1),
                (_, Err(_)) => 1,
            };
            let changed = entry
                .answer
                .as_ref()
                .is_none_or(|a| !same(&a.outcome, &outcome));
            entry.answer = Some(Answer {
                outcome,
                at: now,
                failures,
            });
            entry.busy = false;
            changed
        };
        if changed {
            let _ = self.shared.woken.unbounded_send(Woken {
                namespace: key.namespace,
                reference: key.reference,
            });
        }
        self.shared.busy.send_modify(|n| *n = n.saturating_sub(1));
    }

    /// Waits until no lookup is running or waiting.
    #[cfg(test)]
    pub async fn idle(&self) {
        let _ = self.shared.busy.subscribe().wait_for(|n| *n == 0).await;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts one more busy lookup of `namespace`, and gives the gates it passes.
fn busy_one(state: &mut State, namespace: &str) -> Gates {
    let ns = state
        .namespaces
        .entry(namespace.to_owned())
        .or_insert_with(|| Namespace {
            busy: 0,
            running: Arc::new(Semaphore::new(AT_ONCE_PER_NAMESPACE)),
            pulls: Arc::new(Semaphore::new(PULLS_PER_NAMESPACE)),
        });
    ns.busy += 1;
    Gates {
        running: ns.running.clone(),
        pulls: ns.pulls.clone(),
    }
}

/// Room for one more answer: forgets those nobody asked for lately, then the least recently
/// asked idle one of the namespace holding the most. `false` when every one is busy.
fn make_room(state: &mut State, now: Instant) -> bool {
    if state.entries.len() < ANSWERS {
        return true;
    }
    state
        .entries
        .retain(|_, e| e.busy || now - e.asked < FORGET_AFTER);
    if state.entries.len() < ANSWERS {
        return true;
    }
    let mut held: HashMap<&str, usize> = HashMap::new();
    for key in state.entries.keys() {
        *held.entry(key.namespace.as_str()).or_default() += 1;
    }
    let victim = state
        .entries
        .iter()
        .filter(|(_, e)| !e.busy)
        .max_by_key(|(k, e)| (held.get(k.namespace.as_str()).copied(), Reverse(e.asked)))
        .map(|(k, _)| k.clone());
    match victim {
        Some(k) => state.entries.remove(&k).is_some(),
        None => false,
    }
}

/// The Agents of `woken`'s namespace whose `module.image` names its reference.
pub fn agents_to_wake(agents: &[Arc<Agent>], woken: &Woken) -> Vec<ObjectRef<Agent>> {
    agents
        .iter()
        .filter(|a| a.metadata.namespace.as_deref() == Some(woken.namespace.as_str()))
        .filter(|a| {
            a.spec
                .module
                .image
                .as_deref()
                .and_then(|i| Reference::parse(i).ok())
                .is_some_and(|r| r == woken.reference)
        })
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_answered_looked_up_waited_for_or_refused_by_its_answer_and_the_namespaces_load() {
        let full = BUSY_PER_NAMESPACE;
        let cases = [
            // (last answer, this key busy, namespace busy) → step
            (Last::Current, false, 0, Step::Answer),
            (Last::Current, false, full, Step::Answer),
            (Last::Current, true, 1, Step::Answer),
            (Last::Due, false, 0, Step::AnswerAndRefresh),
            (Last::Due, false, full - 1, Step::AnswerAndRefresh),
            (Last::Due, true, 1, Step::Answer),
            (Last::Due, false, full, Step::Answer),
            (Last::None, false, 0, Step::Start),
            (Last::None, false, full - 1, Step::Start),
            (Last::None, true, 1, Step::Wait),
            (Last::None, true, full, Step::Wait),
            (Last::None, false, full, Step::OverBound),
            (Last::None, false, full + 5, Step::OverBound),
        ];
        for (last, busy, ns_busy, want) in cases {
            assert_eq!(step(last, busy, ns_busy), want, "{last:?} {busy} {ns_busy}");
        }
    }

    #[test]
    fn a_success_is_asked_again_after_five_seconds_and_a_failure_after_its_backoff() {
        let s = Duration::from_secs;
        let cases = [
            // (ok, failures in a row, age) → due
            (true, 0, s(0), false),
            (true, 0, s(4), false),
            (true, 0, s(5), true),
            (false, 1, s(4), false),
            (false, 1, s(5), true),
            (false, 2, s(9), false),
            (false, 2, s(10), true),
            (false, 7, s(299), false),
            (false, 7, s(300), true),
            (false, u32::MAX, s(300), true),
        ];
        for (ok, failures, age, want) in cases {
            assert_eq!(due(ok, failures, age), want, "{ok} {failures} {age:?}");
        }
    }

    /// A registry whose resolves all give `answer`, or never answer while it is `None`.
    #[derive(Default)]
    struct Scripted {
        answer: Mutex<Option<ari_oci::Error>>,
        /// Resolves asked, answered or not.
        asked: watch::Sender<usize>,
    }

    impl Scripted {
        fn answering(&self, answer: ari_oci::Error) {
            *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
        }

        fn asked(&self) -> usize {
            *self.asked.borrow()
        }
    }

    impl crate::agent::image::Registry for Scripted {
        fn resolve<'a>(
            &'a self,
            _reference: &'a Reference,
            _credentials: &'a Credentials,
        ) -> futures::future::BoxFuture<'a, Result<String, ari_oci::Error>> {
            Box::pin(async move {
                self.asked.send_modify(|n| *n += 1);
                let answer = self
                    .answer
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                match answer {
                    Some(e) => Err(e),
                    None => std::future::pending().await,
                }
            })
        }

        fn pull<'a>(
            &'a self,
            reference: &'a Reference,
            _credentials: &'a Credentials,
        ) -> futures::future::BoxFuture<'a, Result<ari_oci::PulledModule, ari_oci::Error>> {
            Box::pin(async move { Err(ari_oci::Error::NotFound(reference.to_string())) })
        }
    }

    fn lookups(registry: &Arc<Scripted>) -> Lookups {
        Lookups::new(Finder::new(registry.clone(), Duration::from_secs(3600)))
    }

    fn key(namespace: &str, i: usize) -> Key {
        Key {
            namespace: namespace.into(),
            reference: Reference::parse(&format!("r.example/m{i}:v1"))
                .unwrap_or_else(|e| panic!("{e}")),
            credentials: Credentials::Anonymous,
        }
    }

    #[tokio::test]
    async fn a_namespace_runs_two_lookups_at_once_keeps_sixty_four_busy_and_is_refused_past_that() {
        let registry = Arc::new(Scripted::default());
        let lookups = lookups(&registry);
        for i in 0..BUSY_PER_NAMESPACE {
            assert!(matches!(lookups.ask(key("a", i)), Asked::Pending), "{i}");
        }
        assert!(matches!(lookups.ask(key("a", 999)), Asked::OverBound));
        // A busy key is still waited for; another namespace has its own room.
        assert!(matches!(lookups.ask(key("a", 0)), Asked::Pending));
        assert!(matches!(lookups.ask(key("b", 0)), Asked::Pending));
        let running = AT_ONCE_PER_NAMESPACE + 1;
        let mut asked = registry.asked.subscribe();
        let waited =
            tokio::time::timeout(Duration::from_secs(30), asked.wait_for(|n| *n == running)).await;
        assert!(waited.is_ok(), "asked {} of {running}", registry.asked());
        // The namespace's other lookups wait for its own places, not for everyone's.
        assert_eq!(
            lookups.shared.running.available_permits(),
            AT_ONCE - running
        );
        assert_eq!(
            lookups.state().entries.len(),
            BUSY_PER_NAMESPACE + 1,
            "nothing kept for the key refused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_answered_until_its_backoff_ends_and_only_a_new_answer_wakes_its_agents() {
        use futures::StreamExt as _;
        let registry = Arc::new(Scripted::default());
        registry.answering(ari_oci::Error::NotFound("r.example/m0:v1".into()));
        let lookups = lookups(&registry);
        let mut woken = lookups.woken().unwrap_or_else(|| panic!("woken taken"));
        let reason = |asked: Asked| match asked {
            Asked::Answered(Err(e)) => crate::agent::module::ModuleError::from(e).reason(),
            other => panic!("{other:?}"),
        };

        assert!(matches!(lookups.ask(key("a", 0)), Asked::Pending));
        lookups.idle().await;
        let first = woken.next().await.map(|w| w.namespace);
        assert_eq!(first.as_deref(), Some("a"));
        assert_eq!(reason(lookups.ask(key("a", 0))), "ImageNotFound");
        assert_eq!(registry.asked(), 1, "answered from memory for 5 s");

        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(reason(lookups.ask(key("a", 0))), "ImageNotFound");
        lookups.idle().await;
        assert_eq!(registry.asked(), 2, "asked again once the backoff ended");
        assert!(woken.try_recv().is_err(), "the same answer wakes nobody");

        // A second failure in a row doubles the wait.
        tokio::time::advance(Duration::from_secs(5)).await;
        let _ = lookups.ask(key("a", 0));
        assert_eq!(registry.asked(), 2, "10 s after a second failure");
        tokio::time::advance(Duration::from_secs(5)).await;
        registry.answering(ari_oci::Error::Unauthorized("r.example".into()));
        assert_eq!(reason(lookups.ask(key("a", 0))), "ImageNotFound");
        lookups.idle().await;
        assert_eq!(registry.asked(), 3);
        assert!(
            woken.next().await.is_some(),
            "a new answer wakes the Agents"
        );
        assert_eq!(reason(lookups.ask(key("a", 0))), "Unauthorized");
    }

    fn agent(namespace: &str, name: &str, image: Option<&str>) -> Arc<Agent> {
        let module = match image {
            Some(i) => serde_json::json!({"image": i}),
            None => serde_json::json!({"configMap": {"name": "m", "key": "m.wasm"}}),
        };
        let a = serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"module": module}
        });
        Arc::new(serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn a_lookups_end_wakes_the_agents_of_its_namespace_using_its_reference() {
        let reference = Reference::parse("r.example/a:v1").unwrap_or_else(|e| panic!("{e}"));
        let agents = [
            agent("ns", "same", Some("r.example/a:v1")),
            agent("ns", "other-tag", Some("r.example/a:v2")),
            agent("other", "other-namespace", Some("r.example/a:v1")),
            agent("ns", "configmap", None),
            agent("ns", "unparsable", Some("R.EXAMPLE/A:v1!")),
        ];
        let woken = Woken {
            namespace: "ns".into(),
            reference,
        };
        let names: Vec<_> = agents_to_wake(&agents, &woken)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["same"]);
    }
}
