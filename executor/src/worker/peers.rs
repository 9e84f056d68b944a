//! Which executor pod of an Agent (or of a pool) should claim a Task first.
//!
//! Every executor of an Agent sees every Task. If all of them raced for each one, every Task
//! would cost one winning claim plus a losing, 409-ed claim per peer on the API server. Instead
//! each Task has an owner, picked by rendezvous hashing over the Agent's Ready executor pods:
//! the owner claims at once, the others only after a short delay if the Task is still
//! unclaimed (owner busy, gone or not yet aware of it). Peers are learnt from a watch on the
//! Agent's executor pods; when that watch is not allowed or not synced, every executor acts as
//! the owner, which is the plain race and still correct.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};
use tracing::warn;

/// The Ready executor pods of this Agent, this pod always included.
#[derive(Clone)]
pub struct Peers {
    me: String,
    others: Arc<RwLock<BTreeSet<String>>>,
}

impl Peers {
    /// A peer set that knows only this pod (every Task is ours).
    pub fn alone(me: &str) -> Self {
        Self {
            me: me.to_owned(),
            others: Arc::default(),
        }
    }

    /// Starts watching the executor pods carrying label `(key, value)`: an Agent's own
    /// (`ari.dev/agent`) or a pool's (`ari.dev/pool`); the set follows their readiness.
    pub fn watch(client: Client, namespace: &str, (key, value): (&str, &str), me: &str) -> Self {
        let peers = Self::alone(me);
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let selector = format!("app.kubernetes.io/name=ari-executor,{key}={value}");
        let (store, writer) = reflector::store();
        let stream = reflector(
            writer,
            watcher(api, watcher::Config::default().labels(&selector)),
        )
        .default_backoff()
        .touched_objects();
        let update = peers.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    warn!(error = %e, "executor pod watch failed; claiming every task at once");
                    continue;
                }
                let ready: BTreeSet<String> = store
                    .state()
                    .iter()
                    .filter(|p| is_ready(p))
                    .map(|p| p.name_any())
                    .collect();
                update.set(ready);
            }
        });
        peers
    }

    fn set(&self, ready: BTreeSet<String>) {
        if let Ok(mut others) = self.others.write() {
            *others = ready.into_iter().filter(|n| *n != self.me).collect();
        }
    }

    /// Whether this pod is the first choice for the Task with this uid.
    pub fn owns(&self, task_uid: &str) -> bool {
        let Ok(others) = self.others.read() else {
            return true;
        };
        let mine = score(&self.me, task_uid);
        others.iter().all(|p| score(p, task_uid) < mine)
    }

    /// This pod's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The Ready executors of the Agent as far as known, this one included.
    pub fn ready(&self) -> BTreeSet<String> {
        let mut all = self.others.read().map(|o| o.clone()).unwrap_or_default();
        all.insert(self.me.clone());
        all
    }

    /// How many executors share the work, this one included.
    pub fn count(&self) -> usize {
        self.others.read().map_or(1, |o| o.len() + 1)
    }
}

fn score(pod: &str, task_uid: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(pod.as_bytes());
    h.update([0]);
    h.update(task_uid.as_bytes());
    h.finalize().into()
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(me: &str, all: &[&str]) -> Peers {
        let p = Peers::alone(me);
        p.set(all.iter().map(|s| s.to_string()).collect());
        p
    }

    #[test]
    fn alone_owns_everything() {
        let p = Peers::alone("a");
        assert!((0..100).all(|i| p.owns(&format!("uid-{i}"))));
        assert_eq!(p.count(), 1);
    }

    #[test]
    fn exactly_one_owner_per_task_and_the_work_is_spread() {
        let names = ["exec-a", "exec-b", "exec-c"];
        let sets: Vec<Peers> = names.iter().map(|n| peers(n, &names)).collect();
        let mut per_pod = [0usize; 3];
        for i in 0..3000 {
            let uid = format!("uid-{i}");
            let owners: Vec<usize> = (0..3).filter(|&k| sets[k].owns(&uid)).collect();
            assert_eq!(owners.len(), 1, "{uid}: {owners:?}");
            per_pod[owners[0]] += 1;
        }
        assert!(per_pod.iter().all(|&n| n > 800), "{per_pod:?}");
    }

    #[test]
    fn a_departed_peer_hands_its_tasks_to_the_rest() {
        let uid = (0..1000)
            .map(|i| format!("uid-{i}"))
            .find(|u| peers("exec-b", &["exec-a", "exec-b"]).owns(u))
            .expect("b owns some task");
        assert!(!peers("exec-a", &["exec-a", "exec-b"]).owns(&uid));
        assert!(peers("exec-a", &["exec-a"]).owns(&uid));
    }
}
