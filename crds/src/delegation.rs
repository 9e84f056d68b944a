//! Delegated Tasks: the `spec.parent` an executor writes on a child Task, the child list a
//! parent's status gets, and the check that a child's parent is real.
//!
//! Only an executor creates a child Task (a ValidatingAdmissionPolicy in the chart refuses
//! anyone else who sets `spec.parent`). The executor that runs a child checks again, with
//! [`admit_child`], that the parent exists, is running, and that its Agent grants this
//! delegation at this depth: a forged parent is refused even where the policy is not installed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admission::Refusal;
use crate::agent::AgentSpec;
use crate::task::{Task, TaskPhase, TaskReason};

/// The grant's defaults, the same figures the runtime uses.
pub use ari_model::limits::{DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH};
/// Most children listed in a parent's `status.children` (the rest are counted only).
pub const MAX_LISTED_CHILDREN: usize = 64;

/// The Task that delegated this one (set by its executor at creation; immutable).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// The parent Task's name (same namespace): a DNS subdomain, as every Task name is (it ends
    /// up in request paths).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The parent Task's uid (a UUID, as the API server writes it): a re-created parent of the
    /// same name is another parent.
    #[schemars(
        length(min = 36, max = 36),
        regex(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    )]
    pub uid: String,
    /// The parent's Agent, whose delegation grant must name this Task's Agent: a DNS
    /// subdomain, as every Agent name is.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub agent: String,
    /// This Task's depth in the tree (the root Task is 0, so a child is at least 1).
    #[schemars(range(min = 1, max = 16))]
    pub depth: u32,
    /// This Task's index among its parent's children, in the order they were started.
    #[schemars(range(min = 0, max = 1024))]
    pub index: u32,
    /// A one-way message: the parent does not wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<bool>,
    /// The parent's memory limit; the child never gets more than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// The `ExecutorPool` whose pod created this child: the parent Agent's
    /// `spec.executor.pool`, absent when that Agent has pods of its own. The chart's admission
    /// policy lets a pool pod write only children naming its own pool, and the child's executor
    /// and the operator refuse a child whose parent Agent is not in the pool named here.
    /// Patterned as `spec.executor.pool` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$"))]
    pub pool: Option<String>,
}

/// One child in its parent's `status.children`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ChildStatus {
    /// The child Task's name; absent when it never started (its Agent was unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub agent: String,
    /// `Succeeded`, `Failed` or `Cancelled` once awaited; `Running` for a message nobody
    /// awaited (it may still run).
    pub phase: TaskPhase,
    /// Its reason once awaited (`Completed`, a failure reason, `Unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fuel it took out of the parent's budget.
    pub fuel: u64,
    /// A one-way message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub message: bool,
    /// Digest of its attestation, as the parent's own attestation covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation_sha256: Option<String>,
}

/// Whether the pods that may have created `claimed`'s Task are the parent Agent's: its pool's
/// when it is pooled (the admission policy binds a pool pod's writes to `claimed.pool`), its
/// own Deployment's when not. So a pool pod, which holds the keys of its pool's Agents only,
/// cannot start a child for an Agent of another pool or a dedicated one, and a dedicated pod
/// none for a pooled Agent. Checked by the child's executor before it claims the child and by
/// the operator on a pending child.
pub fn pool_binding(claimed: &ParentRef, parent_agent: &AgentSpec) -> Result<(), Refusal> {
    let pooled = parent_agent.executor.pool.as_deref();
    if pooled == claimed.pool.as_deref() {
        return Ok(());
    }
    let created_by = match &claimed.pool {
        Some(pool) => format!("a pod of ExecutorPool {pool}"),
        None => "a dedicated executor".to_owned(),
    };
    let runs_in = match pooled {
        Some(pool) => format!("runs in ExecutorPool {pool}"),
        None => "has executors of its own".to_owned(),
    };
    Err(Refusal {
        reason: TaskReason::CapabilityDenied,
        message: format!(
            "spec.parent names Task {} of Agent {}, which {runs_in}: a child created by \
             {created_by} is not its child",
            claimed.name, claimed.agent
        ),
    })
}

/// Checks a child Task against its parent, the parent's Agent, as they are now, and the
/// child's own Agent (`own`), which may name the callers it takes (`spec.callers`).
pub fn admit_child(
    task: &Task,
    parent: &Task,
    parent_agent: &AgentSpec,
    own: &AgentSpec,
) -> Result<(), Refusal> {
    let Some(claimed) = &task.spec.parent else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Refusal {
            reason: TaskReason::CapabilityDenied,
            message: format!("spec.parent names Task {}: {why}", claimed.name),
        })
    };
    if !own.accepts_caller(&claimed.agent) {
        return refuse(format!(
            "its Agent {} is not among the callers Agent {} takes (spec.callers)",
            claimed.agent, task.spec.agent_ref.name
        ));
    }
    if parent.metadata.uid.as_deref() != Some(claimed.uid.as_str()) {
        return refuse("no Task of that name has that uid".into());
    }
    pool_binding(claimed, parent_agent)?;
    if parent.spec.agent_ref.name != claimed.agent {
        return refuse(format!(
            "it runs on Agent {}, not {}",
            parent.spec.agent_ref.name, claimed.agent
        ));
    }
    let delegating = match parent.phase() {
        TaskPhase::Running => true,
        // Requeued after losing its executor: its next attempt adopts this child.
        TaskPhase::Pending => parent.attempts() > 0,
        // A message outlives its parent, if the parent started it before it ended.
        _ => claimed.message == Some(true) && created_before_end(task, parent),
    };
    if !delegating {
        return refuse(format!(
            "it is {}, and only a running Task delegates",
            parent.phase().as_str()
        ));
    }
    let parent_depth = parent.spec.parent.as_ref().map_or(0, |p| p.depth);
    if claimed.depth != parent_depth.saturating_add(1) {
        return refuse(format!(
            "it is at depth {parent_depth}, so its children are at depth {}, not {}",
            parent_depth.saturating_add(1),
            claimed.depth
        ));
    }
    let Some(grant) = &parent_agent.capabilities.delegation else {
        return refuse(format!(
            "its Agent {} is not granted delegation",
            claimed.agent
        ));
    };
    let child_agent = &task.spec.agent_ref.name;
    if !ari_model::limits::delegation_allows(&grant.agents, child_agent) {
        return refuse(format!(
            "its Agent {} is not granted delegation to Agent {child_agent}",
            claimed.agent
        ));
    }
    let max_depth = grant.depth_limit();
    if claimed.depth > max_depth {
        return refuse(format!(
            "depth {} is beyond its Agent's maxDepth {max_depth}",
            claimed.depth
        ));
    }
    let max_children = grant.children_limit();
    if claimed.index >= max_children {
        return refuse(format!(
            "child #{} is beyond its Agent's maxChildren {max_children}",
            claimed.index
        ));
    }
    Ok(())
}

/// Whether `child` was created no later than `parent` ended (to the second, as the API server
/// records both).
fn created_before_end(child: &Task, parent: &Task) -> bool {
    let ended = parent
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref());
    match (child.metadata.creation_timestamp.as_ref(), ended) {
        (Some(created), Some(ended)) => created.0 <= ended.0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::DelegationGrant;

    fn task(name: &str, uid: &str, agent: &str, parent: Option<ParentRef>) -> Task {
        let mut t: Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"agentRef": {"name": agent}, "input": "x"},
        }))
        .unwrap_or_else(|e| panic!("task: {e}"));
        t.spec.parent = parent;
        t
    }

    fn running(mut t: Task) -> Task {
        let mut status = crate::task::TaskStatus::default();
        status
            .claim(
                "pod",
                None,
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ),
            )
            .unwrap_or_else(|e| panic!("claim: {e}"));
        t.status = Some(status);
        t
    }

    fn granting(agents: &[&str]) -> AgentSpec {
        let mut spec: AgentSpec = serde_json::from_value(serde_json::json!({
            "module": {"configMapRef": {"name": "m", "key": "k"}},
        }))
        .unwrap_or_else(|e| panic!("agent: {e}"));
        spec.capabilities.delegation = Some(DelegationGrant {
            agents: agents.iter().map(|a| (*a).to_owned()).collect(),
            max_depth: Some(2),
            max_children: Some(4),
            approval: None,
        });
        spec
    }

    /// A child's own Agent that names no callers (takes any).
    fn open() -> AgentSpec {
        granting(&[])
    }

    fn child_of(depth: u32, index: u32) -> ParentRef {
        ParentRef {
            name: "p".into(),
            uid: "uid-p".into(),
            agent: "research".into(),
            depth,
            index,
            message: None,
            memory_bytes: None,
            pool: None,
        }
    }

    #[test]
    fn a_child_of_a_running_parent_whose_agent_grants_it_is_admitted() {
        let parent = running(task("p", "uid-p", "research", None));
        let child = task("c", "uid-c", "wordcount", Some(child_of(1, 0)));
        assert_eq!(
            admit_child(&child, &parent, &granting(&["wordcount"]), &open()),
            Ok(())
        );
        assert_eq!(
            admit_child(&child, &parent, &granting(&["*"]), &open()),
            Ok(())
        );
    }

    #[test]
    fn a_forged_parent_is_refused_with_what_does_not_hold() {
        let parent = running(task("p", "uid-p", "research", None));
        let grant = granting(&["wordcount"]);
        let cases = [
            (
                task(
                    "c",
                    "u",
                    "wordcount",
                    Some(ParentRef {
                        uid: "other".into(),
                        ..child_of(1, 0)
                    }),
                ),
                "uid",
            ),
            (
                task(
                    "c",
                    "u",
                    "wordcount",
                    Some(ParentRef {
                        agent: "x".into(),
                        ..child_of(1, 0)
                    }),
                ),
                "runs on Agent research",
            ),
            (
                task("c", "u", "summarize", Some(child_of(1, 0))),
                "not granted delegation to Agent summarize",
            ),
            (
                task("c", "u", "wordcount", Some(child_of(2, 0))),
                "children are at depth 1",
            ),
            (
                task("c", "u", "wordcount", Some(child_of(1, 4))),
                "maxChildren 4",
            ),
        ];
        for (child, expected) in cases {
            let refusal = admit_child(&child, &parent, &grant, &open()).expect_err("refused");
            assert_eq!(refusal.reason, TaskReason::CapabilityDenied);
            assert!(
                refusal.message.contains(expected),
                "{}: {expected}",
                refusal.message
            );
        }
        let pending = task("p", "uid-p", "research", None);
        let refusal = admit_child(
            &task("c", "u", "wordcount", Some(child_of(1, 0))),
            &pending,
            &grant,
            &open(),
        )
        .expect_err("a parent that is not running delegates nothing");
        assert!(refusal.message.contains("Pending"), "{}", refusal.message);
        let refusal = admit_child(
            &task("c", "u", "wordcount", Some(child_of(1, 0))),
            &parent,
            &AgentSpec {
                capabilities: Default::default(),
                ..grant.clone()
            },
            &open(),
        )
        .expect_err("no grant");
        assert!(
            refusal.message.contains("not granted delegation"),
            "{}",
            refusal.message
        );
    }

    /// Issue 29 item 1: a pool pod may name only its own pool in `spec.parent.pool` (the
    /// admission policy), so a child is its parent's only when the parent's Agent runs in that
    /// pool, or, with no pool named, has executors of its own: a compromised pool pod starts no
    /// child for an Agent of another pool or a dedicated one, and a dedicated pod none for a
    /// pooled Agent.
    #[test]
    fn a_child_is_admitted_only_from_the_pool_its_parents_agent_runs_in() {
        let parent = running(task("p", "uid-p", "research", None));
        let child = |pool: Option<&str>| {
            task(
                "c",
                "uid-c",
                "wordcount",
                Some(ParentRef {
                    pool: pool.map(str::to_owned),
                    ..child_of(1, 0)
                }),
            )
        };
        let in_pool = |pool: Option<&str>| {
            let mut spec = granting(&["wordcount"]);
            spec.executor.pool = pool.map(str::to_owned);
            spec
        };
        // (pool the child names, pool the parent's Agent is in, admitted?, message has)
        let table = [
            (Some("shared"), Some("shared"), None),
            (None, None, None),
            (
                Some("shared"),
                Some("other"),
                Some("runs in ExecutorPool other: a child created by a pod of ExecutorPool shared"),
            ),
            (
                Some("shared"),
                None,
                Some("has executors of its own: a child created by a pod of ExecutorPool shared"),
            ),
            (
                None,
                Some("shared"),
                Some("runs in ExecutorPool shared: a child created by a dedicated executor"),
            ),
        ];
        for (named, runs_in, refused) in table {
            let got = admit_child(&child(named), &parent, &in_pool(runs_in), &open());
            match refused {
                None => assert_eq!(got, Ok(()), "{named:?} {runs_in:?}"),
                Some(why) => {
                    let r = got.expect_err("refused");
                    assert_eq!(r.reason, TaskReason::CapabilityDenied);
                    assert!(r.message.contains(why), "{}: {why}", r.message);
                }
            }
            let claimed = child(named).spec.parent.unwrap_or_default();
            assert_eq!(
                pool_binding(&claimed, &in_pool(runs_in)).is_ok(),
                refused.is_none()
            );
        }
    }

    #[test]
    fn depth_is_counted_from_the_parents_own_depth_and_capped_by_its_grant() {
        let parent = running(task(
            "p",
            "uid-p",
            "research",
            Some(ParentRef {
                name: "root".into(),
                uid: "r".into(),
                ..child_of(2, 0)
            }),
        ));
        let child = task("c", "u", "wordcount", Some(child_of(3, 0)));
        let refusal =
            admit_child(&child, &parent, &granting(&["wordcount"]), &open()).expect_err("too deep");
        assert!(
            refusal.message.contains("maxDepth 2"),
            "{}",
            refusal.message
        );
    }

    /// Issue 26 item 12: the callee has a say. A child whose parent runs on an Agent the
    /// child's own Agent does not list in `spec.callers` is refused, even from a running
    /// parent whose grant names it; `*` and an absent list take any caller.
    #[test]
    fn a_child_from_a_caller_its_agent_does_not_list_is_refused() {
        let parent = running(task("p", "uid-p", "research", None));
        let child = task("c", "uid-c", "wordcount", Some(child_of(1, 0)));
        let grant = granting(&["wordcount"]);
        let taking = |callers: &[&str]| AgentSpec {
            callers: Some(callers.iter().map(|c| (*c).to_owned()).collect()),
            ..open()
        };
        for callers in [&["other"][..], &[]] {
            let refusal =
                admit_child(&child, &parent, &grant, &taking(callers)).expect_err("refused");
            assert_eq!(refusal.reason, TaskReason::CapabilityDenied);
            assert!(
                refusal.message.contains("spec.callers"),
                "{}",
                refusal.message
            );
        }
        for callers in [&["research"][..], &["*"], &["other", "research"]] {
            assert_eq!(
                admit_child(&child, &parent, &grant, &taking(callers)),
                Ok(())
            );
        }
        assert_eq!(admit_child(&child, &parent, &grant, &open()), Ok(()));
    }
}
