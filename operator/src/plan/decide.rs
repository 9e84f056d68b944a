//! What to do with a Plan, as a pure function of the Plan, its Tasks and the Agents.
//!
//! Everything is derived again on every pass from the Tasks that exist (their names are
//! deterministic), so an operator that restarts, or loses a race, recomputes the same state:
//! a step whose Task exists is never started again, and one whose Task is missing is started.
//! Only what no Task records (a step that never ran: `DependencyFailed`, `InputUnavailable`,
//! `Cancelled`) is carried over from the previous status.

use std::collections::BTreeMap;
use std::time::Duration;

use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::plan::MAX_VIOLATIONS;
use ari_crds::plan_view::{CrdHosts, planner_task_name, step_task_name};
use ari_crds::{
    Plan, PlanPhase, PlanReason, PlanStatus, StepPhase, StepStatus, TaskPhase, TaskReason,
    format_duration_millis,
};
use ari_model::sha256_hex;
use ari_plan::graph::Graph;
use ari_plan::{Agents, Limits, Proposal, Step, compose_input, validate, validate_planner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::observe::Tasks;

/// `status.conditions` type: the validator's verdict.
pub const VALIDATED: &str = "Validated";
/// Step reason: a step it depends on failed, so it never ran.
pub const DEPENDENCY_FAILED: &str = "DependencyFailed";
/// Step reason: its input could not be built from its dependencies' outputs.
pub const INPUT_UNAVAILABLE: &str = "InputUnavailable";
/// Step reason: its Task was deleted (by hand) before the Plan finished.
pub const TASK_DELETED: &str = "TaskDeleted";
/// Step reason: its Task name belongs to a Task the Plan does not own.
pub const NAME_CONFLICT: &str = "NameConflict";
/// Largest input a step Task may carry inline (the Task schema's bound).
pub const MAX_TASK_INPUT: usize = 1_048_576;

/// A Task the Plan needs created.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub name: String,
    /// The step, or `None` for the planner.
    pub step: Option<String>,
    pub agent: String,
    pub input: Vec<u8>,
    pub requirements: Option<ari_plan::Requirements>,
    pub fuel: Option<u64>,
    pub deadline_seconds: Option<u32>,
    pub retries: Option<u32>,
}

/// The decision of one pass.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    pub status: PlanStatus,
    pub create: Vec<NewTask>,
    /// Tasks to cancel (`spec.cancelled: true`).
    pub cancel: Vec<String>,
    /// Look again after this long (the plan's deadline), if nothing else wakes the Plan.
    pub requeue: Option<Duration>,
}

/// What the pass sees.
pub struct Observed<'a> {
    pub plan: &'a Plan,
    pub agents: &'a Agents,
    /// The Plan's own Tasks by name.
    pub tasks: &'a Tasks,
    /// Names of Tasks that exist but are not the Plan's (a create would collide).
    pub foreign: &'a [String],
    pub now: Timestamp,
}

/// Decides one pass.
pub fn decide(o: &Observed) -> Outcome {
    let plan = o.plan;
    let old = plan.status.clone().unwrap_or_default();
    let mut out = Outcome {
        status: old.clone(),
        ..Default::default()
    };
    if old.phase.is_some_and(PlanPhase::is_finished) {
        return out;
    }
    let st = &mut out.status;
    st.observed_generation = plan.metadata.generation;
    st.start_time.get_or_insert(Time(o.now));
    st.phase.get_or_insert(PlanPhase::Pending);
    let name = plan.metadata.name.clone().unwrap_or_default();
    let limits = plan.spec.limits.clone().unwrap_or_default();

    // The steps: the spec's, or the planner's proposal once it has one.
    let (proposal, proposal_bytes) = match (&plan.spec.steps, &plan.spec.planner) {
        (Some(steps), _) => {
            let p = Proposal {
                steps: steps.clone(),
                ..Default::default()
            };
            let bytes = serde_json::to_vec(&p.steps).unwrap_or_default();
            (p, bytes)
        }
        (None, Some(planner)) => {
            let task = planner_task_name(&name);
            let Some(t) = o.tasks.get(&task) else {
                if old.planner_task.is_some() {
                    // It ran (or runs) and is gone: never run a planner twice.
                    let why = format!("the planner Task {task} was deleted");
                    end(
                        &mut out.status,
                        o,
                        PlanPhase::Failed,
                        PlanReason::PlannerFailed,
                        &why,
                    );
                    return out;
                }
                // The planner is judged before it runs, as steps are.
                let violations =
                    validate_planner(&planner.agent_ref.name, &context(o, &limits, &name));
                if !violations.is_empty() {
                    reject(&mut out, o, violations);
                    return out;
                }
                if plan.is_cancelled() {
                    end(
                        &mut out.status,
                        o,
                        PlanPhase::Cancelled,
                        PlanReason::Cancelled,
                        "cancelled before the planner ran",
                    );
                    return out;
                }
                if o.foreign.contains(&task) {
                    end(
                        &mut out.status,
                        o,
                        PlanPhase::Failed,
                        PlanReason::PlannerFailed,
                        &format!("a Task named {task} exists and is not this Plan's"),
                    );
                    return out;
                }
                out.create.push(NewTask {
                    name: task.clone(),
                    step: None,
                    agent: planner.agent_ref.name.clone(),
                    input: planner.input.clone().unwrap_or_default().into_bytes(),
                    requirements: None,
                    fuel: planner.fuel,
                    deadline_seconds: remaining_seconds(plan, &limits, o.now),
                    retries: None,
                });
                out.status.phase = Some(PlanPhase::Planning);
                out.status.planner_task = Some(task);
                out.requeue = deadline_wake(plan, &limits, o.now);
                return out;
            };
            out.status.planner_task = Some(task.clone());
            match t.phase {
                TaskPhase::Pending | TaskPhase::Running => {
                    out.status.phase = Some(PlanPhase::Planning);
                    if (plan.is_cancelled() || deadline_passed(plan, &limits, o.now))
                        && !t.cancelled
                    {
                        out.cancel.push(task);
                    }
                    out.requeue = deadline_wake(plan, &limits, o.now);
                    return out;
                }
                TaskPhase::Failed | TaskPhase::Cancelled => {
                    let (phase, reason) = if plan.is_cancelled() {
                        (PlanPhase::Cancelled, PlanReason::Cancelled)
                    } else if deadline_passed(plan, &limits, o.now) {
                        (PlanPhase::Failed, PlanReason::DeadlineExceeded)
                    } else {
                        (PlanPhase::Failed, PlanReason::PlannerFailed)
                    };
                    let why = format!(
                        "planner Task {task} ended {}: {}",
                        t.reason.map_or("", |r| r.as_str()),
                        t.message.clone().unwrap_or_default()
                    );
                    end(&mut out.status, o, phase, reason, &why);
                    return out;
                }
                TaskPhase::Succeeded => {
                    let Some(bytes) = t.output.clone() else {
                        // Output in a ConfigMap the controller could not read yet.
                        out.requeue = Some(Duration::from_secs(5));
                        return out;
                    };
                    match serde_json::from_slice::<Proposal>(&bytes) {
                        Ok(p) => (p, bytes),
                        Err(e) => {
                            out.status.proposal_sha256 = Some(sha256_hex(&bytes));
                            let why = format!("the planner's output is not a plan proposal: {e}");
                            end(
                                &mut out.status,
                                o,
                                PlanPhase::Failed,
                                PlanReason::InvalidProposal,
                                &why,
                            );
                            return out;
                        }
                    }
                }
            }
        }
        (None, None) => {
            end(
                &mut out.status,
                o,
                PlanPhase::Failed,
                PlanReason::Rejected,
                "the Plan has neither steps nor planner",
            );
            return out;
        }
    };
    let limits = limits.tightest(&proposal.limits.clone().unwrap_or_default());
    let steps = &proposal.steps;

    // Validation, once, before any step runs.
    if !conditions::is_true(&old.conditions, VALIDATED) {
        out.status.proposal_sha256 = Some(sha256_hex(&proposal_bytes));
        if plan.is_cancelled() {
            end(
                &mut out.status,
                o,
                PlanPhase::Cancelled,
                PlanReason::Cancelled,
                "cancelled before it was validated",
            );
            return out;
        }
        let violations = validate(
            &proposal,
            &context(
                o,
                plan.spec.limits.as_ref().unwrap_or(&Limits::default()),
                &name,
            ),
        );
        if !violations.is_empty() {
            reject(&mut out, o, violations);
            return out;
        }
        conditions::set(
            &mut out.status.conditions,
            VALIDATED,
            ConditionStatus::True,
            "Accepted",
            format!("{} steps, within every rule", steps.len()),
            plan.metadata.generation,
            Time(o.now),
        );
        out.status.phase = Some(PlanPhase::Running);
    } else if out.status.proposal_sha256.as_deref() != Some(&sha256_hex(&proposal_bytes)) {
        // The planner's Task was replaced since its output was judged: never run unjudged steps.
        end(
            &mut out.status,
            o,
            PlanPhase::Failed,
            PlanReason::InvalidProposal,
            "the steps differ from the proposal that was validated (was the planner's Task replaced?)",
        );
        return out;
    }
    out.status.phase = Some(PlanPhase::Running);
    run_steps(&mut out, o, steps, &limits, &name);
    out
}

/// The Running phase: step states from their Tasks, starts, failures, cancellation, the end.
fn run_steps(out: &mut Outcome, o: &Observed, steps: &[Step], limits: &Limits, name: &str) {
    let plan = o.plan;
    let old: BTreeMap<String, StepStatus> = out
        .status
        .steps
        .iter()
        .map(|s| (s.name.clone(), s.clone()))
        .collect();
    let cancelled = plan.is_cancelled();
    let late = deadline_passed(plan, limits, o.now);
    let stopping = cancelled || late;
    let graph = Graph::new(steps);
    let mut states: Vec<StepStatus> = Vec::with_capacity(steps.len());
    let mut outputs: BTreeMap<String, Vec<u8>> = BTreeMap::new();

    for s in steps {
        let attempts_allowed = s.retry_limit().min(ari_plan::model::MAX_RETRY) + 1;
        let latest = (1..=attempts_allowed)
            .rev()
            .find(|n| o.tasks.contains_key(&step_task_name(name, &s.name, *n)));
        let mut st = StepStatus {
            name: s.name.clone(),
            ..Default::default()
        };
        match latest {
            None => match old.get(&s.name) {
                // A step that never ran carries its state over: no Task records it.
                Some(prev) if prev.phase.is_finished() && prev.task.is_none() => st = prev.clone(),
                // Its Task existed and is gone (deleted by hand): never run a step twice.
                Some(prev) if prev.task.is_some() => {
                    let why = format!(
                        "its Task {} was deleted",
                        prev.task.clone().unwrap_or_default()
                    );
                    // A finished step keeps its result (a dependant not yet started then lacks
                    // its output: InputUnavailable); an unfinished one fails.
                    st = prev.clone();
                    if !st.phase.is_finished() {
                        fail_step(&mut st, TASK_DELETED, why);
                    }
                }
                _ => st.phase = StepPhase::Waiting,
            },
            Some(n) => {
                let task_name = step_task_name(name, &s.name, n);
                let t = o.tasks.get(&task_name).cloned().unwrap_or_default();
                st.task = Some(task_name.clone());
                st.attempts = Some(n);
                st.fuel_used = t.fuel_used;
                match t.phase {
                    TaskPhase::Pending | TaskPhase::Running => {
                        st.phase = StepPhase::Running;
                        if stopping && !t.cancelled {
                            out.cancel.push(task_name);
                        }
                    }
                    TaskPhase::Succeeded => {
                        st.phase = StepPhase::Succeeded;
                        st.reason = Some(TaskReason::Completed.as_str().into());
                        st.output_sha256 = t.output_sha256.clone();
                        st.attestation_sha256 = t.attestation_sha256.clone();
                        if let Some(bytes) = &t.output {
                            outputs.insert(s.name.clone(), bytes.clone());
                        }
                    }
                    TaskPhase::Failed | TaskPhase::Cancelled => {
                        let retryable = !matches!(
                            t.reason,
                            Some(
                                TaskReason::CapabilityDenied
                                    | TaskReason::ModeRefused
                                    | TaskReason::Cancelled
                            )
                        );
                        st.output_sha256 = t.output_sha256.clone();
                        st.attestation_sha256 = t.attestation_sha256.clone();
                        if retryable && n < attempts_allowed && !stopping {
                            let next = step_task_name(name, &s.name, n + 1);
                            if o.foreign.contains(&next) {
                                fail_step(
                                    &mut st,
                                    NAME_CONFLICT,
                                    format!("a Task named {next} exists and is not this Plan's"),
                                );
                            } else {
                                match spawn(o, s, &outputs_of_deps(o, s, name), limits, &next) {
                                    Ok(task) => {
                                        out.create.push(task);
                                        st.phase = StepPhase::Running;
                                        st.task = Some(next);
                                        st.attempts = Some(n + 1);
                                        st.attestation_sha256 = None;
                                        st.output_sha256 = None;
                                    }
                                    Err(why) => fail_step(&mut st, INPUT_UNAVAILABLE, why),
                                }
                            }
                        } else {
                            st.phase = if t.phase == TaskPhase::Cancelled {
                                StepPhase::Cancelled
                            } else {
                                StepPhase::Failed
                            };
                            st.reason = t.reason.map(|r| r.as_str().to_owned());
                            st.message = t.message.clone();
                        }
                    }
                }
            }
        }
        states.push(st);
    }

    // Start what may start, in declaration order, up to the parallelism limit; a step whose
    // input cannot be built fails, which may fail others: repeat until nothing changes.
    let max_parallel = limits.max_parallel().min(ari_plan::model::MAX_PARALLEL) as usize;
    loop {
        propagate_failures(&mut states, &graph, stopping, late);
        let mut changed = false;
        if !stopping {
            for i in 0..steps.len() {
                let running = states
                    .iter()
                    .filter(|s| s.phase == StepPhase::Running)
                    .count();
                if running >= max_parallel {
                    break;
                }
                if states[i].phase != StepPhase::Waiting {
                    continue;
                }
                let ready = graph.deps[i]
                    .iter()
                    .all(|d| states[*d].phase == StepPhase::Succeeded);
                if !ready {
                    continue;
                }
                let s = &steps[i];
                let task_name = step_task_name(name, &s.name, 1);
                if o.foreign.contains(&task_name) {
                    fail_step(
                        &mut states[i],
                        NAME_CONFLICT,
                        format!("a Task named {task_name} exists and is not this Plan's"),
                    );
                    changed = true;
                    continue;
                }
                match spawn(o, s, &outputs, limits, &task_name) {
                    Ok(task) => {
                        out.create.push(task);
                        states[i].phase = StepPhase::Running;
                        states[i].task = Some(task_name);
                        states[i].attempts = Some(1);
                    }
                    Err(why) => {
                        fail_step(&mut states[i], INPUT_UNAVAILABLE, why);
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }

    let total = states.len();
    let succeeded = states
        .iter()
        .filter(|s| s.phase == StepPhase::Succeeded)
        .count();
    out.status.progress = Some(format!("{succeeded}/{total}"));
    out.status.fuel_used = Some(o.tasks.values().filter_map(|t| t.fuel_used).sum());
    out.status.steps = states;
    out.requeue = deadline_wake(plan, limits, o.now);

    if out.status.steps.iter().all(|s| s.phase.is_finished()) {
        let failed: Vec<String> = out
            .status
            .steps
            .iter()
            .filter(|s| {
                s.phase == StepPhase::Failed && s.reason.as_deref() != Some(DEPENDENCY_FAILED)
            })
            .map(|s| format!("{} ({})", s.name, s.reason.clone().unwrap_or_default()))
            .collect();
        let skipped = out
            .status
            .steps
            .iter()
            .filter(|s| s.reason.as_deref() == Some(DEPENDENCY_FAILED))
            .count();
        let (phase, reason, message) = if cancelled {
            (
                PlanPhase::Cancelled,
                PlanReason::Cancelled,
                "cancelled; running steps were stopped".to_owned(),
            )
        } else if late && succeeded < total {
            (
                PlanPhase::Failed,
                PlanReason::DeadlineExceeded,
                format!(
                    "not finished within limits.deadlineSeconds={}; {succeeded}/{total} steps succeeded",
                    limits.deadline_seconds.unwrap_or_default()
                ),
            )
        } else if succeeded == total {
            (
                PlanPhase::Succeeded,
                PlanReason::Completed,
                format!("{total} steps succeeded"),
            )
        } else {
            (
                PlanPhase::Failed,
                PlanReason::StepFailed,
                format!(
                    "step(s) failed: {}; {skipped} dependant(s) did not run",
                    failed.join(", ")
                ),
            )
        };
        end(&mut out.status, o, phase, reason, &message);
        out.requeue = None;
    }
}

/// Outputs of a step's dependencies (for a retry, which starts outside the start loop).
fn outputs_of_deps(o: &Observed, s: &Step, plan: &str) -> BTreeMap<String, Vec<u8>> {
    s.dependencies()
        .into_iter()
        .filter_map(|d| {
            // The dependency succeeded (or the step would not have run): find its last attempt.
            (1..=ari_plan::model::MAX_RETRY + 1).rev().find_map(|n| {
                let t = o.tasks.get(&step_task_name(plan, d, n))?;
                (t.phase == TaskPhase::Succeeded)
                    .then(|| t.output.clone())
                    .flatten()
                    .map(|bytes| (d.to_owned(), bytes))
            })
        })
        .collect()
}

/// When the Plan stops, waiting steps are cancelled; otherwise waiting steps behind a failed
/// or cancelled one fail `DependencyFailed`, transitively.
fn propagate_failures(states: &mut [StepStatus], graph: &Graph, stopping: bool, late: bool) {
    if stopping {
        for s in states.iter_mut().filter(|s| s.phase == StepPhase::Waiting) {
            s.phase = StepPhase::Cancelled;
            s.reason = Some(
                if late {
                    "DeadlineExceeded"
                } else {
                    "Cancelled"
                }
                .into(),
            );
            s.message = Some("the Plan stopped before this step ran".into());
        }
        return;
    }
    loop {
        let mut changed = false;
        for i in 0..states.len() {
            if states[i].phase != StepPhase::Waiting {
                continue;
            }
            let failed_dep = graph.deps[i]
                .iter()
                .find(|d| matches!(states[**d].phase, StepPhase::Failed | StepPhase::Cancelled));
            if let Some(d) = failed_dep {
                let why = format!(
                    "step {} did not succeed, so this step never ran",
                    states[*d].name
                );
                fail_step(&mut states[i], DEPENDENCY_FAILED, why);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

fn fail_step(st: &mut StepStatus, reason: &str, message: String) {
    st.phase = StepPhase::Failed;
    st.reason = Some(reason.to_owned());
    st.message = Some(message);
}

/// The Task of a step attempt, its input built from its dependencies' outputs.
fn spawn(
    o: &Observed,
    s: &Step,
    outputs: &BTreeMap<String, Vec<u8>>,
    limits: &Limits,
    task_name: &str,
) -> Result<NewTask, String> {
    let input = compose_input(s, outputs).map_err(|e| e.to_string())?;
    if input.len() > MAX_TASK_INPUT {
        return Err(format!(
            "the input is {} bytes, above the {MAX_TASK_INPUT} a Task carries",
            input.len()
        ));
    }
    let plan_left = remaining_seconds(o.plan, limits, o.now);
    let deadline = match (s.deadline_seconds, plan_left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(NewTask {
        name: task_name.to_owned(),
        step: Some(s.name.clone()),
        agent: s.agent_ref.name.clone(),
        input,
        requirements: s.requirements.clone(),
        fuel: s.fuel,
        deadline_seconds: deadline,
        retries: (s.retry_limit() > 0).then(|| s.retry_limit()),
    })
}

fn context<'b>(o: &'b Observed, limits: &'b Limits, name: &'b str) -> ari_plan::Context<'b> {
    ari_plan::Context {
        agents: o.agents,
        limits,
        hosts: &CrdHosts,
        plan_name: Some(name),
    }
}

/// Validation failed: nothing runs, every violation goes into status.
fn reject(out: &mut Outcome, o: &Observed, violations: Vec<ari_plan::Violation>) {
    let st = &mut out.status;
    let count = violations.len();
    let first = violations
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    st.violation_count = u32::try_from(count).ok();
    st.violations = violations.into_iter().take(MAX_VIOLATIONS).collect();
    let message = format!("{count} violation(s); the first: {first}");
    conditions::set(
        &mut st.conditions,
        VALIDATED,
        ConditionStatus::False,
        PlanReason::Rejected.as_str(),
        message.clone(),
        o.plan.metadata.generation,
        Time(o.now),
    );
    end(st, o, PlanPhase::Failed, PlanReason::Rejected, &message);
}

/// The Plan's end: phase, reason, the `Succeeded` condition and the times.
fn end(st: &mut PlanStatus, o: &Observed, phase: PlanPhase, reason: PlanReason, message: &str) {
    let mut message = message.to_owned();
    crate::cache::clip(&mut message, ari_crds::lifecycle::MESSAGE_MAX_BYTES);
    st.phase = Some(phase);
    st.reason = Some(reason);
    st.message = Some(message.clone());
    st.completion_time = Some(Time(o.now));
    let started = st.start_time.as_ref().map_or(o.now, |t| t.0);
    let millis = o.now.duration_since(started).as_millis().max(0);
    st.duration = Some(format_duration_millis(u64::try_from(millis).unwrap_or(0)));
    conditions::set(
        &mut st.conditions,
        conditions::SUCCEEDED,
        ConditionStatus::from(phase == PlanPhase::Succeeded),
        reason.as_str(),
        message,
        o.plan.metadata.generation,
        Time(o.now),
    );
}

fn deadline_at(plan: &Plan, limits: &Limits) -> Option<Timestamp> {
    let created = plan.metadata.creation_timestamp.as_ref()?.0;
    created
        .checked_add(SignedDuration::from_secs(i64::from(
            limits.deadline_seconds?,
        )))
        .ok()
}

fn deadline_passed(plan: &Plan, limits: &Limits, now: Timestamp) -> bool {
    deadline_at(plan, limits).is_some_and(|d| d <= now)
}

/// Whole seconds left before the plan's deadline (at least 1), if it has one.
fn remaining_seconds(plan: &Plan, limits: &Limits, now: Timestamp) -> Option<u32> {
    let left = deadline_at(plan, limits)?.duration_since(now).as_secs();
    Some(u32::try_from(left.max(1)).unwrap_or(u32::MAX))
}

fn deadline_wake(plan: &Plan, limits: &Limits, now: Timestamp) -> Option<Duration> {
    let at = deadline_at(plan, limits)?;
    let d = at.duration_since(now).as_secs_f64().max(0.0);
    Some(Duration::from_secs_f64(d) + Duration::from_millis(100))
}
