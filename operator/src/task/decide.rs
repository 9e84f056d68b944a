//! What the operator should do with a Task, as a pure function of what it observed.

use std::time::Duration;

use ari_crds::{Agent, AgentSpec, Task, TaskPhase, TaskReason, admit};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// What is known about the pod named in `status.executor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorPod {
    /// Exists, Pending or Running, and the process that claimed the Task still runs in it. A
    /// pod being deleted is still this: it drains within its grace period.
    Running,
    /// Not found.
    Gone,
    /// Exists but has finished (Succeeded/Failed), or a container is not running or was
    /// restarted after the claim: the process that claimed the Task is gone.
    Stopped,
    /// Not looked up (the Task is not Running).
    NotChecked,
}

/// Timing knobs of the decisions.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub heartbeat_timeout: Duration,
    pub agent_grace: Duration,
}

/// The operator's move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do now; look again after the duration, if any.
    Wait(Option<Duration>),
    /// Finish the Task as Failed with this reason.
    Fail { reason: TaskReason, message: String },
    /// Executor lost with retries left: back to Pending for another claim.
    Requeue { message: String },
    /// `spec.cancelled` on a Task no executor claimed: it ends Cancelled without running.
    Cancel { message: String },
    /// TTL after finish elapsed.
    Delete,
    /// A child whose parent ended: set its `spec.cancelled` (its executor, or the operator for
    /// a pending one, then ends it Cancelled).
    CancelChild { message: String },
}

/// What the operator's Task cache says of a Task's parent (`spec.parent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentTask {
    /// Not a child, or its parent is not in the cache under that uid (deleted: the garbage
    /// collector removes the children with it).
    Unknown,
    /// Pending or Running: it still follows its children (a requeued parent adopts them).
    Active,
    /// Ended with this phase.
    Ended(TaskPhase),
}

/// Whether to cancel `child` because its parent ended (issue 26, item 13). A parent's executor
/// cancels the children it did not collect when the parent ends; when that executor died
/// the operator ends the parent, and no one else would stop its children. A one-way message
/// outlives a parent that ended normally (that is what a message is), but not a cancelled one.
pub fn orphaned(child: &Task, parent: ParentTask) -> Option<Decision> {
    let ParentTask::Ended(phase) = parent else {
        return None;
    };
    let Some(link) = &child.spec.parent else {
        return None;
    };
    if child.is_finished() || child.spec.cancelled == Some(true) {
        return None;
    }
    if link.message == Some(true) && phase != TaskPhase::Cancelled {
        return None;
    }
    Some(Decision::CancelChild {
        message: format!("its parent {} ended {}", link.name, phase.as_str()),
    })
}

/// Whether to fail a pending child that its parent Agent's pods cannot have created (issue 29,
/// item 1): one naming a pool its parent's Agent is not in, or none when it is pooled
/// ([`ari_crds::pool_binding`]), or whose parent Agent does not exist (`parent_agent` is
/// `None`). The admission policy lets a pool pod create children only under its own pool's
/// name; this makes the name count before any executor runs the child, as the child's own
/// executor checks again before it claims it.
pub fn foreign_child(task: &Task, parent_agent: Option<&AgentSpec>) -> Option<Decision> {
    let link = task.spec.parent.as_ref()?;
    if task.phase() != TaskPhase::Pending || task.spec.cancelled == Some(true) {
        return None;
    }
    let refusal = match parent_agent {
        None => ari_crds::Refusal {
            reason: TaskReason::CapabilityDenied,
            message: format!(
                "spec.parent names Agent {}, which does not exist",
                link.agent
            ),
        },
        Some(spec) => ari_crds::pool_binding(link, spec).err()?,
    };
    Some(Decision::Fail {
        reason: refusal.reason,
        message: refusal.message,
    })
}

fn at(t: Timestamp, secs: u64) -> Option<Timestamp> {
    t.checked_add(SignedDuration::from_secs(i64::try_from(secs).ok()?))
        .ok()
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    let d = then.duration_since(now);
    Duration::from_secs_f64(d.as_secs_f64().max(0.0)) + Duration::from_millis(100)
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Decides; `agent` is `None` when the Agent does not exist.
pub fn decide(
    task: &Task,
    agent: Option<&Agent>,
    pod: ExecutorPod,
    now: Timestamp,
    timing: Timing,
) -> Decision {
    let status = task.status.clone().unwrap_or_default();
    let created = task
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);

    if task.is_finished() {
        let Some(ttl) = task.spec.ttl_seconds_after_finished else {
            return Decision::Wait(None);
        };
        let done = status
            .completion_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(created);
        return match at(done, u64::from(ttl)) {
            Some(expiry) if expiry > now => Decision::Wait(Some(until(now, expiry))),
            _ => Decision::Delete,
        };
    }

    let mut wake = None;
    if let Some(deadline) = task.spec.deadline_seconds {
        match at(created, u64::from(deadline)) {
            Some(end) if end > now => wake = Some(until(now, end)),
            _ => {
                return Decision::Fail {
                    reason: TaskReason::DeadlineExceeded,
                    message: format!("not finished within deadlineSeconds={deadline}"),
                };
            }
        }
    }

    match task.phase() {
        TaskPhase::Pending if task.spec.cancelled == Some(true) => Decision::Cancel {
            message: "cancelled before it ran".into(),
        },
        TaskPhase::Pending => {
            let Some(agent) = agent else {
                let grace_end = created
                    .checked_add(SignedDuration::try_from(timing.agent_grace).unwrap_or_default())
                    .unwrap_or(created);
                if grace_end > now {
                    return Decision::Wait(earliest(wake, Some(until(now, grace_end))));
                }
                return Decision::Fail {
                    reason: TaskReason::CapabilityDenied,
                    message: format!("agent {} not found", task.spec.agent_ref.name),
                };
            };
            if let Err(refusal) = admit(task, &agent.spec) {
                return Decision::Fail {
                    reason: refusal.reason,
                    message: refusal.message,
                };
            }
            Decision::Wait(wake)
        }
        TaskPhase::Running => {
            let beat = status
                .last_heartbeat_time
                .or(status.start_time)
                .map(|t| t.0)
                .unwrap_or(created);
            let stale_at = beat
                .checked_add(SignedDuration::try_from(timing.heartbeat_timeout).unwrap_or_default())
                .unwrap_or(beat);
            let executor = status.executor.clone().unwrap_or_default();
            let lost = match pod {
                ExecutorPod::Gone => Some(format!("executor pod {executor} is gone")),
                ExecutorPod::Stopped => Some(format!(
                    "executor pod {executor} stopped or restarted since it claimed the task"
                )),
                _ if stale_at <= now => Some(format!(
                    "no heartbeat from executor {executor} for {}s",
                    timing.heartbeat_timeout.as_secs()
                )),
                _ => None,
            };
            match lost {
                None => Decision::Wait(earliest(wake, Some(until(now, stale_at)))),
                // No executor will stop it any more: back to Pending, where it is cancelled.
                Some(why) if task.spec.cancelled == Some(true) => Decision::Requeue {
                    message: format!("{why}; cancelled"),
                },
                // A verified Task's finished replicas were claims too; they are not retries.
                Some(why) if task.attempts_against_retries() > task.spec.retries() => {
                    Decision::Fail {
                        reason: TaskReason::ExecutorLost,
                        message: format!(
                            "{why}; {} attempt(s), retries={}",
                            task.attempts_against_retries(),
                            task.spec.retries()
                        ),
                    }
                }
                Some(why) => Decision::Requeue {
                    message: format!("{why}; requeued"),
                },
            }
        }
        TaskPhase::Succeeded | TaskPhase::Failed | TaskPhase::Cancelled => Decision::Wait(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::agent::ConfigMapModule;
    use ari_crds::{
        AgentSpec, CapabilityName, ModuleSource, TaskRequirements, TaskSpec, TaskStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }
    const TIMING: Timing = Timing {
        heartbeat_timeout: Duration::from_secs(30),
        agent_grace: Duration::from_secs(5),
    };

    fn task(status: Option<TaskStatus>) -> Task {
        let mut t = Task::new(
            "t",
            TaskSpec {
                input: Some("x".into()),
                ..TaskSpec::for_agent("echo")
            },
        );
        t.metadata.creation_timestamp = Some(Time(ts(1_000)));
        t.status = status;
        t
    }

    fn agent() -> Agent {
        Agent::new(
            "echo",
            AgentSpec {
                module: ModuleSource {
                    config_map: Some(ConfigMapModule {
                        name: "m".into(),
                        key: "k".into(),
                    }),
                    ..Default::default()
                },
                capabilities: Default::default(),
                limits: Default::default(),
                executor: Default::default(),
                description: None,
                mode: None,
                callers: None,
                config: None,
                declarative: None,
                a2a: None,
                trace: None,
            },
        )
    }

    fn running(attempts: u32, beat: i64) -> TaskStatus {
        TaskStatus {
            phase: Some(TaskPhase::Running),
            executor: Some("echo-executor-abc".into()),
            attempts: Some(attempts),
            start_time: Some(Time(ts(1_001))),
            last_heartbeat_time: Some(Time(ts(beat))),
            ..Default::default()
        }
    }

    #[test]
    fn a_cancelled_pending_task_is_cancelled_and_a_cancelled_running_one_is_left_to_its_executor() {
        let mut pending = task(None);
        pending.spec.cancelled = Some(true);
        assert!(matches!(
            decide(
                &pending,
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_010),
                TIMING
            ),
            Decision::Cancel { .. }
        ));
        let mut running = task(Some(running(1, 1_005)));
        running.spec.cancelled = Some(true);
        assert!(matches!(
            decide(
                &running,
                Some(&agent()),
                ExecutorPod::Running,
                ts(1_010),
                TIMING
            ),
            Decision::Wait(_)
        ));
        // Its executor gone, it goes back to Pending (where it is cancelled), retries or not.
        assert!(matches!(
            decide(
                &running,
                Some(&agent()),
                ExecutorPod::Gone,
                ts(1_010),
                TIMING
            ),
            Decision::Requeue { .. }
        ));
    }

    #[test]
    fn pending_task_with_granted_needs_waits() {
        assert_eq!(
            decide(
                &task(None),
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_010),
                TIMING
            ),
            Decision::Wait(None)
        );
    }

    #[test]
    fn missing_agent_is_denied_after_grace() {
        let t = task(None);
        assert!(matches!(
            decide(&t, None, ExecutorPod::NotChecked, ts(1_002), TIMING),
            Decision::Wait(Some(_))
        ));
        match decide(&t, None, ExecutorPod::NotChecked, ts(1_010), TIMING) {
            Decision::Fail { reason, message } => {
                assert_eq!(reason, TaskReason::CapabilityDenied);
                assert!(message.contains("agent echo not found"), "{message}");
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn a_pending_task_for_a_subagent_mode_agent_fails_mode_refused() {
        let mut sub = agent();
        sub.spec.mode = Some(ari_crds::AgentMode::Subagent);
        let decision = decide(
            &task(None),
            Some(&sub),
            ExecutorPod::NotChecked,
            ts(1_001),
            TIMING,
        );
        assert!(
            matches!(&decision, Decision::Fail { reason: TaskReason::ModeRefused, message } if message.contains("subagent")),
            "{decision:?}"
        );
        let mut primary = agent();
        primary.spec.mode = Some(ari_crds::AgentMode::Primary);
        assert!(matches!(
            decide(
                &task(None),
                Some(&primary),
                ExecutorPod::NotChecked,
                ts(1_001),
                TIMING
            ),
            Decision::Wait(_)
        ));
    }

    #[test]
    fn requirement_beyond_grants_is_denied() {
        let mut t = task(None);
        t.spec.requirements = Some(TaskRequirements {
            capabilities: vec![CapabilityName::Network],
            ..Default::default()
        });
        assert!(matches!(
            decide(
                &t,
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_001),
                TIMING
            ),
            Decision::Fail {
                reason: TaskReason::CapabilityDenied,
                ..
            }
        ));
        let mut t = task(None);
        t.spec.fuel = Some(ari_crds::agent::DEFAULT_FUEL + 1);
        assert!(matches!(
            decide(
                &t,
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_001),
                TIMING
            ),
            Decision::Fail {
                reason: TaskReason::CapabilityDenied,
                ..
            }
        ));
    }

    #[test]
    fn deadline_fails_pending_and_running_tasks_and_sets_a_timer_before() {
        let mut t = task(None);
        t.spec.deadline_seconds = Some(60);
        assert_eq!(
            decide(
                &t,
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_030),
                TIMING
            ),
            Decision::Wait(Some(Duration::from_millis(30_100)))
        );
        assert!(matches!(
            decide(
                &t,
                Some(&agent()),
                ExecutorPod::NotChecked,
                ts(1_060),
                TIMING
            ),
            Decision::Fail {
                reason: TaskReason::DeadlineExceeded,
                ..
            }
        ));
        t.status = Some(running(1, 1_059));
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Running, ts(1_061), TIMING),
            Decision::Fail {
                reason: TaskReason::DeadlineExceeded,
                ..
            }
        ));
    }

    #[test]
    fn a_lost_replica_is_rerun_because_finished_replicas_are_not_retries() {
        let record = ari_crds::ReplicaRecord {
            executor: "echo-executor-abc".into(),
            phase: TaskPhase::Succeeded,
            reason: TaskReason::Completed,
            output_sha256: "o".into(),
            trace_sha256: "t".into(),
            attestation_sha256: "a".into(),
            fuel: 1,
        };
        // The second replica's claim is attempt 2, with no retries asked for.
        let mut status = running(2, 1_001);
        status.replicas = vec![record];
        let mut t = task(Some(status));
        t.spec.verification = Some(ari_crds::Verification { replicas: 2 });
        t.spec.retries = Some(1);
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Gone, ts(1_005), TIMING),
            Decision::Requeue { .. }
        ));
        t.spec.retries = None;
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Gone, ts(1_005), TIMING),
            Decision::Fail {
                reason: TaskReason::ExecutorLost,
                ..
            }
        ));
    }

    #[test]
    fn lost_executor_requeues_while_retries_remain_then_fails() {
        let mut t = task(Some(running(1, 1_001)));
        t.spec.retries = Some(1);
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Gone, ts(1_005), TIMING),
            Decision::Requeue { .. }
        ));
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Stopped, ts(1_005), TIMING),
            Decision::Requeue { .. }
        ));
        // Stale heartbeat with a live pod counts as lost too.
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Running, ts(1_032), TIMING),
            Decision::Requeue { .. }
        ));
        assert_eq!(
            decide(&t, Some(&agent()), ExecutorPod::Running, ts(1_011), TIMING),
            Decision::Wait(Some(Duration::from_millis(20_100)))
        );
        t.status = Some(running(2, 1_001));
        assert!(matches!(
            decide(&t, Some(&agent()), ExecutorPod::Gone, ts(1_005), TIMING),
            Decision::Fail {
                reason: TaskReason::ExecutorLost,
                ..
            }
        ));
    }

    #[test]
    fn a_child_is_cancelled_when_its_parent_has_ended() {
        use ari_crds::delegation::ParentRef;
        let child = |phase: Option<TaskPhase>, message: bool, cancelled: bool| {
            let mut t = task(phase.map(|p| TaskStatus {
                phase: Some(p),
                ..Default::default()
            }));
            t.spec.parent = Some(ParentRef {
                name: "p".into(),
                uid: "u".into(),
                agent: "a".into(),
                depth: 1,
                index: 0,
                message: message.then_some(true),
                memory_bytes: None,
                pool: None,
            });
            t.spec.cancelled = cancelled.then_some(true);
            t
        };
        use ParentTask::{Active, Ended, Unknown};
        use TaskPhase::{Cancelled, Failed, Pending, Running, Succeeded};
        // (child phase, message, already cancelled, parent, cancel it?)
        let table = [
            (Some(Running), false, false, Ended(Failed), true),
            (None, false, false, Ended(Failed), true),
            (Some(Pending), false, false, Ended(Succeeded), true),
            (Some(Running), false, false, Ended(Cancelled), true),
            (Some(Running), false, false, Active, false),
            (Some(Running), false, false, Unknown, false),
            (Some(Running), false, true, Ended(Failed), false),
            (Some(Succeeded), false, false, Ended(Failed), false),
            (Some(Cancelled), false, false, Ended(Cancelled), false),
            (Some(Running), true, false, Ended(Succeeded), false),
            (Some(Running), true, false, Ended(Failed), false),
            (Some(Running), true, false, Ended(Cancelled), true),
        ];
        for (phase, message, cancelled, parent, want) in table {
            let got = orphaned(&child(phase, message, cancelled), parent);
            assert_eq!(
                got.is_some(),
                want,
                "child {phase:?} message={message} cancelled={cancelled}, parent {parent:?}: {got:?}"
            );
            if let Some(Decision::CancelChild { message }) = got {
                assert!(message.contains("parent p ended"), "{message}");
            }
        }
        // Not a child at all.
        assert_eq!(orphaned(&task(None), Ended(Failed)), None);
    }

    /// Issue 29 item 1: a pending child created under a pool's name (what a compromised pool
    /// pod can write) whose parent Agent is not in that pool, or a dedicated one's child whose
    /// parent Agent is pooled, fails `CapabilityDenied` before any executor runs it; the child
    /// of an Agent of that very pool waits for its executor as any Task.
    #[test]
    fn a_pending_child_whose_parent_agent_is_not_in_the_pool_it_names_fails_before_it_runs() {
        use ari_crds::delegation::ParentRef;
        let child = |pool: Option<&str>, status: Option<TaskStatus>| {
            let mut t = task(status);
            t.spec.parent = Some(ParentRef {
                name: "p".into(),
                uid: "u".into(),
                agent: "a".into(),
                depth: 1,
                pool: pool.map(str::to_owned),
                ..ParentRef::default()
            });
            t
        };
        let in_pool = |pool: Option<&str>| {
            let mut spec = agent().spec;
            spec.executor.pool = pool.map(str::to_owned);
            spec
        };
        // (pool the child names, pool the parent's Agent is in, message when it fails)
        let table = [
            (Some("shared"), Some("shared"), None),
            (None, None, None),
            (
                Some("shared"),
                Some("other"),
                Some("runs in ExecutorPool other"),
            ),
            (Some("shared"), None, Some("has executors of its own")),
            (
                None,
                Some("shared"),
                Some("a child created by a dedicated executor"),
            ),
        ];
        for (named, runs_in, fails) in table {
            let got = foreign_child(&child(named, None), Some(&in_pool(runs_in)));
            match (fails, got) {
                (None, None) => {}
                (
                    Some(why),
                    Some(Decision::Fail {
                        reason: TaskReason::CapabilityDenied,
                        message,
                    }),
                ) => assert!(message.contains(why), "{message}: {why}"),
                (want, got) => panic!("{named:?} in {runs_in:?}: want {want:?}, got {got:?}"),
            }
        }
        let gone = foreign_child(&child(Some("shared"), None), None);
        assert!(
            matches!(&gone, Some(Decision::Fail { message, .. }) if message.contains("does not exist")),
            "{gone:?}"
        );
        // A child already claimed is its executor's (it checked before it claimed); not a child
        // at all is none of this.
        let claimed = child(Some("shared"), Some(running(1, 1_001)));
        assert_eq!(foreign_child(&claimed, Some(&in_pool(None))), None);
        assert_eq!(foreign_child(&task(None), None), None);
    }

    #[test]
    fn finished_task_is_deleted_after_ttl() {
        let done = TaskStatus {
            phase: Some(TaskPhase::Succeeded),
            completion_time: Some(Time(ts(1_010))),
            ..Default::default()
        };
        let mut t = task(Some(done));
        assert_eq!(
            decide(&t, None, ExecutorPod::NotChecked, ts(5_000), TIMING),
            Decision::Wait(None)
        );
        t.spec.ttl_seconds_after_finished = Some(60);
        assert!(matches!(
            decide(&t, None, ExecutorPod::NotChecked, ts(1_020), TIMING),
            Decision::Wait(Some(_))
        ));
        assert_eq!(
            decide(&t, None, ExecutorPod::NotChecked, ts(1_070), TIMING),
            Decision::Delete
        );
    }
}
