//! Children run in this process: how `ari run --agent NAME=FILE` gives a task other Agents to
//! delegate to, with the grant, budget, trace and cancellation rules of the cluster, so a
//! multi-agent system can be developed without one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ed25519_dalek::SigningKey;

use crate::capability::delegation::{
    ChildFailure, ChildOutcome, ChildRequest, Delegator, RunningChild,
};
use crate::capability::{DelegationContext, Grants};
use crate::limits::Limits;
use crate::runtime::LoadedAgent;
use crate::task::{TaskOutcome, TaskRequest};

/// A delegator with no Agents: every start is refused. What a replay uses (children are served
/// from the trace there) and what a task gets when nothing else is reachable.
pub struct NoChildren;

impl Delegator for NoChildren {
    fn start(&self, request: ChildRequest) -> Result<Box<dyn RunningChild>, String> {
        Err(format!(
            "no Agent `{}` is reachable from here",
            request.agent
        ))
    }
}

/// An Agent children can be delegated to: its component, grants and per-task limits.
#[derive(Clone)]
pub struct LocalAgent {
    pub agent: LoadedAgent,
    pub grants: Grants,
    pub limits: Limits,
    /// Handed to its `initialize`.
    pub config: Vec<u8>,
}

/// One child run, kept so the whole tree can be reported and verified.
#[derive(Debug, Clone)]
pub struct ChildRun {
    pub parent: String,
    pub agent: String,
    pub input: Vec<u8>,
    pub outcome: TaskOutcome,
}

/// Runs children on threads of this process, each in its own fresh instance.
#[derive(Clone)]
pub struct LocalDelegator {
    inner: Arc<Inner>,
}

struct Inner {
    agents: BTreeMap<String, LocalAgent>,
    key: Arc<SigningKey>,
    runs: Mutex<Vec<ChildRun>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    started: AtomicUsize,
}

impl LocalDelegator {
    /// Children are attested with `key`, like the root task.
    pub fn new(agents: BTreeMap<String, LocalAgent>, key: Arc<SigningKey>) -> Self {
        Self {
            inner: Arc::new(Inner {
                agents,
                key,
                runs: Mutex::new(Vec::new()),
                threads: Mutex::new(Vec::new()),
                started: AtomicUsize::new(0),
            }),
        }
    }

    /// The context a root task gets: this delegator, at depth 0.
    pub fn root_context(&self) -> DelegationContext {
        DelegationContext {
            delegator: Arc::new(self.clone()),
            depth: 0,
        }
    }

    /// Children started so far (for tests and progress).
    pub fn started(&self) -> usize {
        self.inner.started.load(Ordering::SeqCst)
    }

    /// Waits for every child, messages included, and returns them all in the order they
    /// ended.
    pub fn finish(&self) -> Vec<ChildRun> {
        loop {
            let threads = std::mem::take(&mut *lock(&self.inner.threads));
            if threads.is_empty() {
                break;
            }
            for thread in threads {
                let _ = thread.join();
            }
        }
        std::mem::take(&mut *lock(&self.inner.runs))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child running on its own thread; its outcome arrives on the channel.
struct LocalChild {
    result: std::sync::mpsc::Receiver<ChildOutcome>,
    task: String,
}

impl RunningChild for LocalChild {
    fn wait(self: Box<Self>) -> ChildOutcome {
        self.result.recv().unwrap_or_else(|_| ChildOutcome {
            task: self.task.clone(),
            result: Err(ChildFailure {
                reason: "HostError".into(),
                message: "the child's thread ended without an outcome".into(),
            }),
            fuel: 0,
            tokens: 0,
            attestation_sha256: String::new(),
        })
    }
}

impl Delegator for LocalDelegator {
    fn start(&self, request: ChildRequest) -> Result<Box<dyn RunningChild>, String> {
        let Some(target) = self.inner.agents.get(&request.agent).cloned() else {
            let known: Vec<&str> = self.inner.agents.keys().map(String::as_str).collect();
            return Err(format!(
                "no Agent `{}` (given with --agent: [{}])",
                request.agent,
                known.join(", ")
            ));
        };
        let task = format!("{}-{}", request.parent, request.index);
        let mut req = TaskRequest::new(task.clone(), request.input.clone(), self.inner.key.clone());
        req.grants = target.grants.clone();
        req.config = target.config.clone();
        req.limits = Limits {
            fuel: target.limits.fuel.min(request.fuel),
            tokens: target.limits.tokens.min(request.tokens),
            memory_bytes: target.limits.memory_bytes.min(request.memory_bytes),
            timeout: target.limits.timeout.min(request.timeout),
            ..target.limits.clone()
        };
        req.cancel = Some(request.cancel.clone());
        req.delegation = Some(DelegationContext {
            delegator: Arc::new(self.clone()),
            depth: request.depth,
        });
        let (send, result) = std::sync::mpsc::channel();
        let inner = self.inner.clone();
        let parent = request.parent.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ari-child-{task}"))
            .spawn(move || {
                let input = req.input.clone();
                let outcome = target.agent.run(req);
                let _ = send.send(child_outcome(&outcome));
                lock(&inner.runs).push(ChildRun {
                    parent,
                    agent: request.agent,
                    input,
                    outcome,
                });
            })
            .map_err(|e| format!("cannot start a thread for the child: {e}"))?;
        lock(&self.inner.threads).push(thread);
        self.inner.started.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(LocalChild { result, task }))
    }
}

/// What the parent learns of a finished child.
pub fn child_outcome(outcome: &TaskOutcome) -> ChildOutcome {
    ChildOutcome {
        task: outcome.task_id.clone(),
        result: match &outcome.failure {
            None => Ok(outcome.output.clone()),
            Some(f) => Err(ChildFailure {
                reason: f.kind.as_str().to_owned(),
                message: f.message.clone(),
            }),
        },
        fuel: outcome.resources_used.fuel,
        tokens: outcome.resources_used.tokens_spent(),
        attestation_sha256: outcome.attestation.sha256(),
    }
}
