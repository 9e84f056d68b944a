//! The `delegation` capability: a task runs tasks on other Agents, within its grant and out of
//! its own budget.
//!
//! Deny by default. The grant names the Agents a task may call, how deep a tree may grow and
//! how many children one task may start; a call outside it is refused before anything starts,
//! and the guest gets the refusal as an error it can handle (the task still ends
//! `CapabilityDenied`, as every denial does). Fuel and time for a child are taken from the
//! parent when it starts (unused fuel returns when it is awaited; a message's is spent), so a
//! tree never uses more than its root was given. What each start answered and what each
//! awaited child returned is recorded, so a replay of the parent runs no child.

mod backend;
mod events;
mod grant;
mod link;

pub use backend::{ChildFailure, ChildOutcome, ChildRequest, Delegator, RunningChild};
pub use events::DelegationEvent;
pub use grant::{
    DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH, DelegationGrant, MAX_CHILDREN_CEILING,
    MAX_DEPTH_CEILING, grant_from_cli,
};
pub use link::FUEL;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use ari_model::CapabilityName;
use ari_model::approval::CallSubject;

use super::approval::{ApprovalGate, Verdict};
use super::{CapError, CapUsage, Capability, Grants, TaskSetup};
use crate::attestation::sha256_hex;
use crate::cancel::CancelToken;
use crate::host::HostFunctions;
use crate::trace::{Recorder, internal_kind_mismatch, mismatch};

/// Where this task sits in a tree and what runs its children.
#[derive(Clone)]
pub struct DelegationContext {
    pub delegator: Arc<dyn Delegator>,
    /// This task's depth (the root is 0).
    pub depth: u32,
}

/// Why a delegation call was refused or failed, before the WIT's `delegation-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelegationFailure {
    /// Outside the grant (a denial: the task ends `CapabilityDenied`).
    Denied(String),
    /// The grant's depth or children limit (counted, not a denial).
    LimitReached(String),
    Unavailable(String),
    BudgetExhausted(String),
    Failed(ChildFailure),
    InvalidHandle(String),
    /// A person rejected the delegation, which needed approval (who, which call, why).
    /// Nothing was started; not a denial.
    Rejected(String),
    /// The host itself failed (a diverged replay), or the task's deadline passed or it was
    /// cancelled while the delegation waited for a decision.
    Host(CapError),
}

/// One child as the parent's outcome lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildSummary {
    pub child: u32,
    pub agent: String,
    /// The child task's name; empty when it never started.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task: String,
    /// A one-way message (never awaited).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub message: bool,
    /// How it ended: `Completed`, a failure reason, or absent while not awaited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fuel it took out of the parent (for a message: its whole budget).
    pub fuel: u64,
    /// Model tokens it took out of the parent, as `fuel`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attestation_sha256: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ChildSummary {
    /// The child as its parent's attestation names it: only one awaited to its end has an
    /// attestation of its own.
    pub fn attested(&self) -> Option<ari_model::attestation::ChildAttestation> {
        (!self.attestation_sha256.is_empty()).then(|| ari_model::attestation::ChildAttestation {
            agent: self.agent.clone(),
            task: self.task.clone(),
            attestation_sha256: self.attestation_sha256.clone(),
        })
    }
}

/// What a child is given out of its parent's budgets when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub fuel: u64,
    /// Model tokens (0: the child may call no model).
    pub tokens: u64,
    pub timeout: Duration,
}

/// A started child not collected yet.
struct Pending {
    reserved: Share,
    /// The child's own token: cancelled if the parent ends without awaiting it.
    token: CancelToken,
    /// `None` in a replay: the result comes from the trace.
    running: Option<Box<dyn RunningChild>>,
}

/// What a child cost once awaited: the parent gets `reserved - used` of each budget back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    pub reserved: u64,
    pub used: u64,
    pub reserved_tokens: u64,
    pub used_tokens: u64,
}

pub struct TaskDelegation {
    grant: Option<DelegationGrant>,
    context: Option<DelegationContext>,
    task: String,
    cancel: CancelToken,
    memory_bytes: u64,
    deadline: Option<Instant>,
    started: u32,
    pending: BTreeMap<u32, Pending>,
    children: Vec<ChildSummary>,
    refused: u32,
    /// Delegations that wait for a person's decision.
    approvals: ApprovalGate,
}

impl TaskDelegation {
    pub fn new(grant: Option<DelegationGrant>) -> Self {
        Self {
            approvals: ApprovalGate::new(None, CancelToken::new()),
            grant,
            context: None,
            task: String::new(),
            cancel: CancelToken::new(),
            memory_bytes: 0,
            deadline: None,
            started: 0,
            pending: BTreeMap::new(),
            children: Vec::new(),
            refused: 0,
        }
    }

    /// What runs children and where this task sits, its name, its cancel token (children are
    /// cancelled with it) and its memory limit (a child never gets more).
    pub fn set_context(
        &mut self,
        context: Option<DelegationContext>,
        task: &str,
        cancel: CancelToken,
        memory_bytes: u64,
    ) {
        self.context = context;
        self.task = task.to_owned();
        self.cancel = cancel;
        self.memory_bytes = memory_bytes;
    }

    /// Time left before the task's deadline (`None`: no deadline known).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Children started so far, in order, with how each ended.
    pub fn children(&self) -> &[ChildSummary] {
        &self.children
    }

    /// Calls refused by the grant or its limits.
    pub fn refused(&self) -> u32 {
        self.refused
    }

    /// Fuel the children took out of this task: used by awaited ones, budget of the rest.
    pub fn children_fuel(&self) -> u64 {
        self.children.iter().map(|c| c.fuel).sum()
    }

    /// Model tokens the children took out of this task, as [`TaskDelegation::children_fuel`].
    pub fn children_tokens(&self) -> u64 {
        self.children.iter().map(|c| c.tokens).sum()
    }

    fn refuse(&mut self, failure: DelegationFailure) -> DelegationFailure {
        self.refused = self.refused.saturating_add(1);
        failure
    }

    /// Checks the name, the grant and its limits; nothing is started or recorded. The name is
    /// checked first: with `agents: ["*"]` it is the guest's alone, and the cluster's host puts
    /// it into a request path.
    pub fn check(&mut self, agent: &str) -> Result<(), DelegationFailure> {
        if !ari_model::names::is_object_name(agent) {
            let shown: String = agent.chars().take(64).collect();
            return Err(DelegationFailure::Unavailable(format!(
                "`{shown}` is not an Agent name (a DNS-1123 subdomain: lowercase letters, \
                 digits, `-` and `.`, at most 253)"
            )));
        }
        let Some(grant) = &self.grant else {
            return Err(self.refuse(DelegationFailure::Denied(
                "capability `delegation` not granted".into(),
            )));
        };
        if !grant.allows(agent) {
            let why = format!("delegation to Agent `{agent}` is not granted");
            return Err(self.refuse(DelegationFailure::Denied(why)));
        }
        let depth = self.context.as_ref().map_or(0, |c| c.depth);
        if depth.saturating_add(1) > grant.depth_limit() {
            let why = format!(
                "delegation depth limit: this task is at depth {depth} and the grant allows {}",
                grant.depth_limit()
            );
            return Err(self.refuse(DelegationFailure::LimitReached(why)));
        }
        if self.started >= grant.children_limit() {
            let why = format!(
                "children limit: this task already started {} (the grant allows {})",
                self.started,
                grant.children_limit()
            );
            return Err(self.refuse(DelegationFailure::LimitReached(why)));
        }
        Ok(())
    }

    /// When the grant marks `agent`, waits for a person's decision about delegating `input` to
    /// it (a replay reads it from the trace); nothing is started before. The caller has run
    /// [`TaskDelegation::check`]. A rejection is the guest's; the deadline or a cancellation
    /// ends the task ([`DelegationFailure::Host`]).
    pub fn approve(
        &mut self,
        agent: &str,
        input: &[u8],
        rec: &mut Recorder,
    ) -> Result<(), DelegationFailure> {
        if !self.grant.as_ref().is_some_and(|g| g.needs_approval(agent)) {
            return Ok(());
        }
        let request = self.approvals.request(
            CallSubject::Delegation {
                agent: agent.to_owned(),
            },
            &[b"delegation", agent.as_bytes(), input],
            String::from_utf8_lossy(input).into_owned(),
        );
        match self
            .approvals
            .decide::<DelegationEvent>(&request, rec)
            .map_err(DelegationFailure::Host)?
        {
            Verdict::Approved => Ok(()),
            Verdict::Rejected(why) => Err(DelegationFailure::Rejected(why)),
            Verdict::Deadline => Err(DelegationFailure::Host(CapError::DeadlineExceeded)),
        }
    }

    /// Starts a child with `share` (taken from the parent once it started); returns its
    /// handle. The caller has run [`TaskDelegation::check`] and [`TaskDelegation::approve`].
    pub fn start(
        &mut self,
        agent: &str,
        input: &[u8],
        share: Share,
        message: bool,
        rec: &mut Recorder,
    ) -> Result<u32, DelegationFailure> {
        let Share {
            fuel,
            tokens,
            timeout,
        } = share;
        let index = self.started;
        self.started += 1;
        let input_sha256 = sha256_hex(input);
        let token = self.cancel.child();
        let (running, error) = if rec.is_replay() {
            let event: DelegationEvent = rec
                .replay_next(&[DelegationEvent::STARTED])
                .map_err(DelegationFailure::Host)?;
            let DelegationEvent::Started {
                child,
                agent: recorded_agent,
                input_sha256: recorded_input,
                error,
                ..
            } = event
            else {
                return Err(DelegationFailure::Host(internal_kind_mismatch()));
            };
            if child != index || recorded_agent != agent || recorded_input != input_sha256 {
                return Err(DelegationFailure::Host(mismatch(
                    "child task",
                    &format!("#{child} {recorded_agent} {recorded_input}"),
                    &format!("#{index} {agent} {input_sha256}"),
                )));
            }
            (None, error)
        } else {
            let Some(context) = self.context.clone() else {
                return Err(DelegationFailure::Unavailable(
                    "no other Agents are reachable from here".into(),
                ));
            };
            let request = ChildRequest {
                parent: self.task.clone(),
                index,
                agent: agent.to_owned(),
                input: input.to_vec(),
                fuel,
                tokens,
                timeout,
                memory_bytes: self.memory_bytes,
                depth: context.depth.saturating_add(1),
                message,
                cancel: token.clone(),
            };
            let (running, error) = match context.delegator.start(request) {
                Ok(running) => (Some(running), None),
                Err(why) => (None, Some(why)),
            };
            rec.record(DelegationEvent::Started {
                child: index,
                agent: agent.to_owned(),
                input_sha256,
                fuel,
                error: error.clone(),
            });
            (running, error)
        };
        if let Some(why) = error {
            self.children.push(ChildSummary {
                child: index,
                agent: agent.to_owned(),
                task: String::new(),
                message,
                reason: Some("Unavailable".into()),
                fuel: 0,
                tokens: 0,
                attestation_sha256: String::new(),
            });
            return Err(DelegationFailure::Unavailable(why));
        }
        self.children.push(ChildSummary {
            child: index,
            agent: agent.to_owned(),
            task: String::new(),
            message,
            reason: None,
            fuel,
            tokens,
            attestation_sha256: String::new(),
        });
        if !message {
            self.pending.insert(
                index,
                Pending {
                    reserved: share,
                    token,
                    running,
                },
            );
        }
        Ok(index)
    }

    /// Waits for child `index` (live) or reads its end from the trace (replay). The output, or
    /// the child's failure, and what it cost.
    pub fn await_child(
        &mut self,
        index: u32,
        rec: &mut Recorder,
    ) -> Result<(Result<Vec<u8>, ChildFailure>, Settled), DelegationFailure> {
        let Some(pending) = self.pending.remove(&index) else {
            return Err(DelegationFailure::InvalidHandle(format!(
                "no child #{index} to await (never started, a message, or already collected)"
            )));
        };
        let reserved = pending.reserved;
        let outcome = match pending.running {
            Some(running) => {
                let mut outcome = running.wait();
                outcome.tokens = outcome.tokens.min(reserved.tokens);
                record_finished(index, &outcome, reserved.tokens, rec);
                outcome
            }
            None => {
                let mut outcome = replayed_outcome(index, rec)?;
                if reserved.tokens > 0 {
                    outcome.tokens = replayed_tokens(index, reserved.tokens, rec)?;
                }
                outcome
            }
        };
        let used = outcome.fuel.min(reserved.fuel);
        if let Some(summary) = self.children.get_mut(index as usize) {
            summary.task = outcome.task.clone();
            summary.fuel = used;
            summary.tokens = outcome.tokens;
            summary.reason = Some(match &outcome.result {
                Ok(_) => "Completed".into(),
                Err(f) => f.reason.clone(),
            });
            summary.attestation_sha256 = outcome.attestation_sha256.clone();
        }
        Ok((
            outcome.result,
            Settled {
                reserved: reserved.fuel,
                used,
                reserved_tokens: reserved.tokens,
                used_tokens: outcome.tokens,
            },
        ))
    }

    /// Cancels every child not awaited yet (the parent ended without them). Messages run on;
    /// they are cancelled only with the parent's own token.
    pub fn abandon_pending(&mut self) {
        for (_, pending) in std::mem::take(&mut self.pending) {
            pending.token.cancel();
        }
    }
}

impl Drop for TaskDelegation {
    fn drop(&mut self) {
        self.abandon_pending();
    }
}

/// Records how an awaited child ended and, when it was given tokens, what it used of them.
fn record_finished(index: u32, outcome: &ChildOutcome, reserved_tokens: u64, rec: &mut Recorder) {
    let (output, reason, message) = match &outcome.result {
        Ok(output) => (Some(output.clone()), None, String::new()),
        Err(f) => (None, Some(f.reason.clone()), f.message.clone()),
    };
    rec.record(DelegationEvent::Finished {
        child: index,
        task: outcome.task.clone(),
        output,
        reason,
        message,
        fuel: outcome.fuel,
        attestation_sha256: outcome.attestation_sha256.clone(),
    });
    if reserved_tokens > 0 {
        rec.record(DelegationEvent::Tokens {
            child: index,
            reserved: reserved_tokens,
            used: outcome.tokens,
        });
    }
}

/// The tokens the trace says child `index` used of the `reserved` it was given.
fn replayed_tokens(
    index: u32,
    reserved: u64,
    rec: &mut Recorder,
) -> Result<u64, DelegationFailure> {
    let event: DelegationEvent = rec
        .replay_next(&[DelegationEvent::TOKENS])
        .map_err(DelegationFailure::Host)?;
    let DelegationEvent::Tokens {
        child,
        reserved: recorded,
        used,
    } = event
    else {
        return Err(DelegationFailure::Host(internal_kind_mismatch()));
    };
    if child != index || recorded != reserved {
        return Err(DelegationFailure::Host(mismatch(
            "child's tokens",
            &format!("#{child} given {recorded}"),
            &format!("#{index} given {reserved}"),
        )));
    }
    Ok(used.min(reserved))
}

fn replayed_outcome(index: u32, rec: &mut Recorder) -> Result<ChildOutcome, DelegationFailure> {
    let event: DelegationEvent = rec
        .replay_next(&[DelegationEvent::FINISHED])
        .map_err(DelegationFailure::Host)?;
    let DelegationEvent::Finished {
        child,
        task,
        output,
        reason,
        message,
        fuel,
        attestation_sha256,
    } = event
    else {
        return Err(DelegationFailure::Host(internal_kind_mismatch()));
    };
    if child != index {
        return Err(DelegationFailure::Host(mismatch(
            "awaited child",
            &format!("#{child}"),
            &format!("#{index}"),
        )));
    }
    let result = match (output, reason) {
        (Some(output), None) => Ok(output),
        (_, reason) => Err(ChildFailure {
            reason: reason.unwrap_or_else(|| "HostError".into()),
            message,
        }),
    };
    Ok(ChildOutcome {
        task,
        result,
        fuel,
        tokens: 0,
        attestation_sha256,
    })
}

impl Capability for TaskDelegation {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Delegation);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        let mut delegation = Self::new(grants.spec().delegation.clone());
        delegation.approvals = ApprovalGate::for_task(task);
        delegation.set_context(
            task.delegation.take(),
            &task.task,
            task.cancel.clone(),
            task.memory_bytes,
        );
        delegation
    }

    fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        self.approvals.set_deadline(deadline);
    }

    fn add_usage(&self, usage: &mut CapUsage) {
        usage.children_fuel = self.children_fuel();
        usage.children_tokens = self.children_tokens();
        usage.delegations_refused = self.refused();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A host that counts every child it is asked to start.
    #[derive(Default)]
    struct Counting(AtomicU32);

    impl Delegator for Counting {
        fn start(&self, _: ChildRequest) -> Result<Box<dyn RunningChild>, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err("not in this test".into())
        }
    }

    /// Issue 26 item 11: with `agents: ["*"]` the name is the guest's alone, and the cluster's
    /// host puts it into a request path.
    #[test]
    fn a_name_that_is_no_agent_name_is_refused_before_anything_leaves_the_host() {
        let host = Arc::new(Counting::default());
        let mut cap = TaskDelegation::new(Some(DelegationGrant::new(vec!["*".into()], 3, 16)));
        cap.set_context(
            Some(DelegationContext {
                delegator: host.clone(),
                depth: 0,
            }),
            "parent",
            CancelToken::new(),
            0,
        );
        let long = "a".repeat(300);
        for bad in ["../x", "x/../../secrets", "Upper", "", "a b", long.as_str()] {
            match cap.check(bad) {
                Err(DelegationFailure::Unavailable(why)) => {
                    assert!(why.contains("is not an Agent name"), "{bad:?}: {why}");
                    assert!(why.len() < 300, "the name is cut in the message: {why}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(cap.refused(), 0, "a malformed name is not a denial");
        assert_eq!(host.0.load(Ordering::SeqCst), 0);
        assert_eq!(cap.check("wordcount"), Ok(()));
    }
}
