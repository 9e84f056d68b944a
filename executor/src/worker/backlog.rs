//! The claimable Tasks this executor knows of, in the order it should try them.
//!
//! Fed by the Task watch, drained by the dispatcher as slots free up. A Task this pod owns
//! (see [`super::peers`]) is offered at once; a peer's Task only after `steal_after`, and only
//! if by then no watch event has shown it claimed. Holding only claimable Tasks (never
//! finished ones) keeps the memory of an executor flat however many Tasks the Agent has, and
//! each is held slimmed ([`slim`]): without its inline input, annotations, labels and managed
//! fields, so a backlog of Tasks with 1 MiB inputs stays small. The claim needs only the
//! name, uid, resourceVersion and status, and the claim's reply carries the whole Task.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use ari_crds::Task;
use kube::ResourceExt;
use tokio::sync::Notify;
use tokio::time::Instant;

/// See the module docs.
pub struct Backlog {
    state: Mutex<State>,
    wake: Notify,
    steal_after: Duration,
}

#[derive(Default)]
struct State {
    /// Latest claimable version of each known Task, by name.
    pending: HashMap<String, Task>,
    /// Names of owned Tasks, first come first served.
    now: VecDeque<String>,
    /// Names of peers' Tasks with the time they may be taken (pushed in time order).
    later: VecDeque<(Instant, String)>,
}

impl Backlog {
    pub fn new(steal_after: Duration) -> Self {
        Self {
            state: Mutex::default(),
            wake: Notify::new(),
            steal_after,
        }
    }

    /// Records the latest version of a Task seen on the watch.
    pub fn offer(&self, task: Task, claimable: bool, owned: bool) {
        if claimable {
            self.queue(slim(task), owned);
        } else if let Ok(mut s) = self.state.lock() {
            s.pending.remove(&task.name_any());
        }
    }

    /// Forgets a deleted Task.
    pub fn remove(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.pending.remove(name);
        }
    }

    /// Forgets everything (the watch is relisting; what is still claimable comes again).
    pub fn clear(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.pending.clear();
        }
    }

    /// Puts a Task back to be tried again after `steal_after` (its claim failed for a reason
    /// other than losing it).
    pub fn retry_later(&self, task: Task) {
        self.queue(task, false);
    }

    /// Keeps `task` as the latest version of its name; a name not queued yet goes to `now`
    /// (owned) or to `later` (after `steal_after`), and wakes the dispatcher.
    fn queue(&self, task: Task, owned: bool) {
        let name = task.name_any();
        let Ok(mut s) = self.state.lock() else { return };
        if s.pending.insert(name.clone(), task).is_some() {
            return; // already queued; only its version changed
        }
        if owned {
            s.now.push_back(name);
        } else {
            let at = Instant::now() + self.steal_after;
            s.later.push_back((at, name));
        }
        drop(s);
        self.wake.notify_one();
    }

    /// The next Task to claim: owned ones first, then peers' ones whose delay has passed.
    /// Names whose Task is no longer claimable are skipped.
    pub async fn next(&self) -> Task {
        loop {
            let wait = {
                let Ok(mut s) = self.state.lock() else {
                    return std::future::pending().await;
                };
                if let Some(task) = s.pop_ready(Instant::now()) {
                    return task;
                }
                s.later.front().map(|(at, _)| *at)
            };
            match wait {
                Some(at) => {
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Bytes the held Tasks take as JSON (an estimate of the backlog's memory).
    #[cfg(test)]
    pub fn held_bytes(&self) -> usize {
        self.state.lock().map_or(0, |s| {
            s.pending
                .values()
                .map(|t| serde_json::to_vec(t).map_or(0, |v| v.len()))
                .sum()
        })
    }

    /// How many Tasks wait (for the metrics).
    pub fn len(&self) -> usize {
        self.state.lock().map_or(0, |s| s.pending.len())
    }
}

/// What the backlog keeps of a Task: what deciding and claiming need (name, uid,
/// resourceVersion, generation, timestamps, status, and the spec without its inline input).
/// A status replace ignores everything but status, and returns the whole Task.
pub fn slim(mut task: Task) -> Task {
    let m = &mut task.metadata;
    m.managed_fields = None;
    m.annotations = None;
    m.labels = None;
    m.owner_references = None;
    m.finalizers = None;
    task.spec.input = task.spec.input.map(|_| String::new());
    task.spec.input_base64 = task.spec.input_base64.map(|_| String::new());
    if let Some(s) = task.status.as_mut() {
        // A claimable Task has no result; never carry one into the claim.
        s.output = None;
        s.output_base64 = None;
        s.message = s.message.take().map(|m| m.chars().take(256).collect());
    }
    task
}

impl State {
    fn pop_ready(&mut self, now: Instant) -> Option<Task> {
        while let Some(name) = self.now.pop_front() {
            if let Some(t) = self.pending.remove(&name) {
                return Some(t);
            }
        }
        while self.later.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, name)) = self.later.pop_front()
                && let Some(t) = self.pending.remove(&name)
            {
                return Some(t);
            }
        }
        // Drop peers' names already claimed elsewhere so `later` stays short.
        while let Some((_, name)) = self.later.front() {
            if self.pending.contains_key(name) {
                break;
            }
            self.later.pop_front();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(name: &str) -> Task {
        Task::new(
            name,
            serde_json::from_value(serde_json::json!({"agentRef": {"name": "a"}, "input": "x"}))
                .expect("spec"),
        )
    }

    async fn next_now(b: &Backlog) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(0), b.next())
            .await
            .ok()
            .map(|t| t.name_any())
    }

    #[tokio::test(start_paused = true)]
    async fn owned_first_peers_only_after_the_delay() {
        let b = Backlog::new(Duration::from_millis(200));
        b.offer(task("theirs"), true, false);
        b.offer(task("mine"), true, true);
        assert_eq!(next_now(&b).await.as_deref(), Some("mine"));
        assert_eq!(next_now(&b).await, None, "a peer's task waits");
        tokio::time::advance(Duration::from_millis(201)).await;
        assert_eq!(next_now(&b).await.as_deref(), Some("theirs"));
    }

    #[tokio::test(start_paused = true)]
    async fn claimed_elsewhere_is_skipped_and_duplicates_collapse() {
        let b = Backlog::new(Duration::from_millis(200));
        b.offer(task("a"), true, false);
        b.offer(task("a"), true, false);
        b.offer(task("b"), true, true);
        b.offer(task("b"), false, true); // seen Running: claimed by someone
        assert_eq!(b.len(), 1);
        tokio::time::advance(Duration::from_millis(201)).await;
        assert_eq!(next_now(&b).await.as_deref(), Some("a"));
        assert_eq!(next_now(&b).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_of_tasks_with_1_mib_inputs_stays_small() {
        let b = Backlog::new(Duration::from_millis(200));
        let input = "x".repeat(1024 * 1024);
        for i in 0..64 {
            let mut t = task(&format!("big-{i}"));
            t.spec.input = Some(input.clone());
            t.metadata.annotations = Some(
                [(
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    input.clone(),
                )]
                .into(),
            );
            b.offer(t, true, i % 2 == 0);
        }
        assert_eq!(b.len(), 64);
        let held = b.held_bytes();
        assert!(held < 64 * 1024, "64 Tasks of 2 MiB each hold {held} bytes");
        // What comes out still claims the right Task.
        let t = next_now(&b).await;
        assert!(t.is_some_and(|n| n.starts_with("big-")));
    }

    #[tokio::test(start_paused = true)]
    async fn retried_task_comes_back_later() {
        let b = Backlog::new(Duration::from_millis(50));
        b.offer(task("a"), true, true);
        let t = b.next().await;
        b.retry_later(t);
        assert_eq!(next_now(&b).await, None);
        tokio::time::advance(Duration::from_millis(51)).await;
        assert_eq!(next_now(&b).await.as_deref(), Some("a"));
    }
}
