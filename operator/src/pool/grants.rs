//! What a pool's pods are handed: the models, MCP servers, signing keys and pull secrets
//! granted to any Agent of the pool (their union, and nothing no pooled Agent is granted), each
//! resolved under the same marked-Secret rule as for a dedicated Agent's executors (signing
//! keys and pull secrets: see [`super::secrets`]). The pod then hands each hosted Agent only what its own spec grants
//! (the executor's `WorkerConfig::for_pooled`).
//!
//! The pool's Deployment depends on its Agents' grants, so the pool controller is woken when
//! they change ([`PoolWake`], fed by the Agent watch) and when a granted ModelConfig or
//! MCPServer changes (see `run.rs`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use ari_crds::{Agent, ExecutorPool, SecretKeyRef};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// The ModelConfig and MCPServer names, signing Secret keys and pull secrets granted, each once
/// and sorted:
/// the pool Deployment's variables follow this order, so it does not roll when only the order
/// of grants (or of Agents) changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    pub models: BTreeSet<String>,
    pub tools: BTreeSet<String>,
    /// The `signing.secretRef`s: Agents naming one pair share its variable.
    pub signing: BTreeSet<SecretKeyRef>,
    /// The `module.imagePullSecrets` (their `.dockerconfigjson`): Agents naming one share it.
    pub pull_secrets: BTreeSet<SecretKeyRef>,
}

impl Granted {
    /// What `agent` is granted, or nothing when the operator refuses its spec (an Agent it
    /// does not run gets no credential into a pod).
    pub fn of(agent: &Agent) -> Self {
        if crate::agent::controller::validate(agent).is_err() {
            return Self::default();
        }
        let caps = &agent.spec.capabilities;
        Self {
            models: caps.models.iter().flat_map(|g| g.allowed.clone()).collect(),
            tools: caps
                .tools
                .iter()
                .flat_map(|g| g.servers.iter().map(|s| s.name.clone()))
                .collect(),
            signing: caps.signing.iter().map(|g| g.secret_ref.clone()).collect(),
            pull_secrets: agent
                .spec
                .module
                .pull_secret_names()
                .map(ari_crds::pool::pull_secret_ref)
                .collect(),
        }
    }

    fn add(mut self, other: Self) -> Self {
        self.models.extend(other.models);
        self.tools.extend(other.tools);
        self.signing.extend(other.signing);
        self.pull_secrets.extend(other.pull_secrets);
        self
    }

    pub fn models(&self) -> Vec<String> {
        self.models.iter().cloned().collect()
    }

    pub fn tools(&self) -> Vec<String> {
        self.tools.iter().cloned().collect()
    }
}

/// The Agents of `namespace` naming pool `pool`.
pub fn pooled<'a>(
    agents: &'a [std::sync::Arc<Agent>],
    namespace: &'a str,
    pool: &'a str,
) -> impl Iterator<Item = &'a Agent> + 'a {
    agents.iter().map(AsRef::as_ref).filter(move |a| {
        a.metadata.namespace.as_deref() == Some(namespace)
            && a.spec.executor.pool.as_deref() == Some(pool)
    })
}

/// What the Agents of `namespace` naming `pool` are granted, together.
pub fn union(agents: &[std::sync::Arc<Agent>], namespace: &str, pool: &str) -> Granted {
    pooled(agents, namespace, pool)
        .map(Granted::of)
        .fold(Granted::default(), Granted::add)
}

/// The pools of `namespace` with an Agent for which `grants` holds: those whose Deployment
/// carries a ModelConfig or MCPServer that changed.
pub fn pools_granting(
    agents: &[std::sync::Arc<Agent>],
    namespace: &str,
    grants: impl Fn(&Granted) -> bool,
) -> Vec<ObjectRef<ExecutorPool>> {
    let pools: BTreeSet<&str> = agents
        .iter()
        .filter(|a| a.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|a| Some((a.spec.executor.pool.as_deref()?, a)))
        .filter(|(_, a)| grants(&Granted::of(a)))
        .map(|(pool, _)| pool)
        .collect();
    pools
        .into_iter()
        .map(|p| ObjectRef::new(p).within(namespace))
        .collect()
}

/// What of a pooled Agent its pool's Deployment depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    pool: String,
    granted: Granted,
}

impl Membership {
    fn of(agent: &Agent) -> Option<Self> {
        Some(Self {
            pool: agent.spec.executor.pool.clone()?,
            granted: Granted::of(agent),
        })
    }
}

/// Wakes a pool when one of its Agents joins, leaves, or changes what it is granted, and the
/// pool an Agent left as well as the one it joined. It follows the operator's Agent watch
/// (no second watch of Agents) and remembers only pooled Agents. An Agent deleted while the
/// watch was down is seen by the pool's periodic pass instead.
pub struct PoolWake {
    seen: Mutex<HashMap<(String, String), Membership>>,
    wake: UnboundedSender<ObjectRef<ExecutorPool>>,
}

impl PoolWake {
    /// The observer, and the pools to reconcile for the pool controller.
    pub fn new() -> (Self, UnboundedReceiver<ObjectRef<ExecutorPool>>) {
        let (wake, woken) = unbounded();
        let seen = Mutex::default();
        (Self { seen, wake }, woken)
    }

    /// Takes one event of the Agent watch.
    pub fn observe(&self, event: &watcher::Event<Agent>) {
        match event {
            watcher::Event::Apply(a) | watcher::Event::InitApply(a) => {
                self.update(a, Membership::of(a));
            }
            watcher::Event::Delete(a) => self.update(a, None),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn update(&self, agent: &Agent, now: Option<Membership>) {
        let ns = agent.namespace().unwrap_or_default();
        let key = (ns.clone(), agent.name_any());
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let before = match &now {
            Some(m) => seen.insert(key, m.clone()),
            None => seen.remove(&key),
        };
        drop(seen);
        if before == now {
            return;
        }
        let pools: BTreeSet<String> = before.into_iter().chain(now).map(|m| m.pool).collect();
        for pool in pools {
            // The receiver goes only with the controllers, when nothing needs waking.
            let _ = self.wake.unbounded_send(ObjectRef::new(&pool).within(&ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn agent(name: &str, pool: Option<&str>, caps: serde_json::Value) -> Arc<Agent> {
        let mut executor = serde_json::json!({});
        if let Some(p) = pool {
            executor["pool"] = p.into();
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": name, "namespace": "n"},
                "spec": {"module": {"configMap": {"name": "m", "key": "module.wasm"}},
                         "executor": executor, "capabilities": caps}
            }))
            .unwrap_or_else(|e| panic!("agent: {e}")),
        )
    }

    fn models(names: &[&str]) -> serde_json::Value {
        serde_json::json!({"models": {"allowed": names}})
    }

    fn signing(secret: &str, key: &str) -> serde_json::Value {
        serde_json::json!({"signing": {"keyId": "k", "secretRef": {"name": secret, "key": key}}})
    }

    fn woken(rx: &mut UnboundedReceiver<ObjectRef<ExecutorPool>>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            out.push(r.name);
        }
        out
    }

    #[test]
    fn a_pool_carries_what_its_valid_agents_are_granted_and_nothing_else() {
        let agents = [
            agent("a", Some("shared"), models(&["small", "large"])),
            agent(
                "b",
                Some("shared"),
                serde_json::json!({"models": {"allowed": ["small"]},
                                   "tools": {"servers": [{"name": "docs", "tools": ["*"]}]},
                                   "signing": {"keyId": "b", "secretRef": {"name": "b-key", "key": "k"}}}),
            ),
            // Two Agents naming one key share it.
            agent("b2", Some("shared"), signing("b-key", "k")),
            agent("a2", Some("shared"), signing("a-key", "k")),
            // Another pool's, a dedicated one's and a refused one's grants stay out.
            agent("c", Some("other"), models(&["secret-model"])),
            agent("c2", Some("other"), signing("other-key", "k")),
            agent("d", None, models(&["dedicated-model"])),
            agent("d2", None, signing("dedicated-key", "k")),
            // Invalid: no host in allowedHosts.
            agent(
                "e",
                Some("shared"),
                serde_json::json!({"models": {"allowed": ["refused-model"]},
                                   "network": {"allowedHosts": [""]}}),
            ),
        ];
        let u = union(&agents, "n", "shared");
        assert_eq!(u.models(), ["large", "small"]);
        assert_eq!(u.tools(), ["docs"]);
        let keys: Vec<(&str, &str)> = u
            .signing
            .iter()
            .map(|r| (r.name.as_str(), r.key.as_str()))
            .collect();
        assert_eq!(keys, [("a-key", "k"), ("b-key", "k")]);
        assert_eq!(union(&agents, "elsewhere", "shared"), Granted::default());
        let granting_small = pools_granting(&agents, "n", |g| g.models.contains("small"));
        assert_eq!(granting_small, [ObjectRef::new("shared").within("n")]);
        assert!(pools_granting(&agents, "n", |g| g.models.contains("dedicated-model")).is_empty());
    }

    #[test]
    fn a_pool_is_woken_when_an_agent_joins_changes_its_grants_or_leaves_and_not_otherwise() {
        let (wake, mut rx) = PoolWake::new();
        let joined = agent("a", Some("shared"), models(&["small"]));
        wake.observe(&watcher::Event::Apply((*joined).clone()));
        assert_eq!(woken(&mut rx), ["shared"]);
        // A status update leaves the grants as they were: no pass.
        wake.observe(&watcher::Event::Apply((*joined).clone()));
        assert!(woken(&mut rx).is_empty());
        let more = agent("a", Some("shared"), models(&["small", "large"]));
        wake.observe(&watcher::Event::Apply((*more).clone()));
        assert_eq!(woken(&mut rx), ["shared"]);
        // Moving wakes both pools: the one it left drops its credentials.
        let moved = agent("a", Some("other"), models(&["small", "large"]));
        wake.observe(&watcher::Event::Apply((*moved).clone()));
        assert_eq!(woken(&mut rx), ["other", "shared"]);
        // A signing key granted instead is a change of what the pool carries too.
        let signs = agent("a", Some("other"), signing("a-key", "k"));
        wake.observe(&watcher::Event::Apply((*signs).clone()));
        assert_eq!(woken(&mut rx), ["other"]);
        wake.observe(&watcher::Event::Delete((*signs).clone()));
        assert_eq!(woken(&mut rx), ["other"]);
        let dedicated = agent("d", None, models(&["small"]));
        wake.observe(&watcher::Event::Apply((*dedicated).clone()));
        assert!(woken(&mut rx).is_empty());
    }
}
