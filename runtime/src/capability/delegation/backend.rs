//! What the host behind `delegation` provides: a way to run a task on another Agent. `ari run`
//! runs children in this process ([`crate::local::LocalDelegator`]); the in-cluster worker
//! creates child Task objects. Either way the capability decides first (grant, depth,
//! children, budget) and records what came back.

use std::time::Duration;

use crate::cancel::CancelToken;

/// A child task, as the parent's capability asks for it.
#[derive(Debug, Clone)]
pub struct ChildRequest {
    /// The parent's task id (a child is named after it).
    pub parent: String,
    /// The child's index among its parent's children, in the order they were started.
    pub index: u32,
    /// The Agent to run it on.
    pub agent: String,
    pub input: Vec<u8>,
    /// Fuel taken out of the parent's for the child; the child's Agent may allow less.
    pub fuel: u64,
    /// Model tokens taken out of the parent's budget for the child; its Agent may allow less.
    pub tokens: u64,
    /// Wall time the child has: at most what the parent has left.
    pub timeout: Duration,
    /// The parent's memory limit; a child never gets more.
    pub memory_bytes: u64,
    /// The child's depth in the tree (the root task is 0).
    pub depth: u32,
    /// A one-way message: nobody awaits it.
    pub message: bool,
    /// Cancelled with the parent, or when the parent ends without awaiting the child.
    pub cancel: CancelToken,
}

/// How a child ended, as its parent learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildOutcome {
    /// The child task's name.
    pub task: String,
    /// Its output, or its failure.
    pub result: Result<Vec<u8>, ChildFailure>,
    /// Fuel it used (at most what it was given).
    pub fuel: u64,
    /// Model tokens it took out of its budget, its own children's included
    /// ([`ari_model::ResourcesUsed::tokens_spent`]).
    pub tokens: u64,
    /// Digest of its signed attestation ([`crate::attestation::Attestation::sha256`]); empty
    /// when it never ran.
    pub attestation_sha256: String,
}

/// A child's failure: its Task reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildFailure {
    pub reason: String,
    pub message: String,
}

/// Runs tasks on other Agents for the `delegation` capability.
pub trait Delegator: Send + Sync {
    /// Starts the child and returns at once. `Err` says why no task could be started (no such
    /// Agent, not ready, its mode refuses delegated tasks); nothing ran then.
    fn start(&self, request: ChildRequest) -> Result<Box<dyn RunningChild>, String>;
}

/// A started child.
pub trait RunningChild: Send {
    /// Blocks until the child ends. When the child's cancel token fires it must return soon
    /// after, with the child cancelled.
    fn wait(self: Box<Self>) -> ChildOutcome;
}
