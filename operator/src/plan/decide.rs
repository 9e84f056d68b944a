//! What to do with a Plan, as a pure function of the Plan, its Tasks and the Agents.
//!
//! A step's Task is the one whose uid the Plan recorded when the operator created it
//! (`status.steps[].taskUid`, or, before that status write succeeded, [`Created`]): a Task
//! merely named, labelled or owned like one is never taken as a step's result. Everything else
//! is derived again on every pass, so an operator that restarts, or loses a race, recomputes
//! the same state. Only what no Task records (a step that never ran: `DependencyFailed`,
//! `InputUnavailable`, `Cancelled`) is carried over from the previous status.
//!
//! No output is read here: a step about to start names the Tasks whose outputs make its input
//! ([`Source`]), and the controller reads them then, once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::plan::MAX_VIOLATIONS;
use ari_crds::plan_view::{planner_task_name, step_task_name, taken_name};
use ari_crds::{
    Plan, PlanPhase, PlanReason, PlanStatus, PlanStepReason, StepPhase, StepReason, StepStatus,
    TaskPhase, TaskReason, format_duration_millis,
};
use ari_model::sha256_hex;
use ari_plan::graph::Graph;
use ari_plan::{Agents, Limits, Proposal, Step, Unreadable, validate, validate_planner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::observe::{TaskObs, Tasks};

/// `status.conditions` type: the validator's verdict.
pub const VALIDATED: &str = "Validated";
/// Largest input a step Task may carry inline (the Task schema's bound).
pub const MAX_TASK_INPUT: usize = 1_048_576;

/// A Task this operator created (or found it had created) for a step (`None`: the planner),
/// known before the status write that records it succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub attempt: u32,
    pub name: String,
    pub uid: String,
}

/// Records by step (`None`: the planner).
pub type Created = BTreeMap<Option<String>, Record>;

/// Where an input comes from: a succeeded step's Task and the digest of its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub task: String,
    pub uid: String,
    pub output_sha256: Option<String>,
}

/// A step Task's input: literal, or made from earlier steps' outputs when it starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Bytes(Vec<u8>),
    /// Made by `ari_plan::input` from the step and its sources' outputs, by step name.
    Composed {
        step: Box<Step>,
        sources: BTreeMap<String, Source>,
    },
}

/// A Task the Plan needs created.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub name: String,
    /// The step, or `None` for the planner.
    pub step: Option<String>,
    pub attempt: u32,
    pub agent: String,
    pub input: Input,
    pub requirements: Option<ari_plan::TaskRequirements>,
    pub fuel: Option<u64>,
    pub tokens: Option<u64>,
    pub deadline_seconds: Option<u32>,
    /// The longest deadline this step's Task can have been given (an earlier pass gave more
    /// of the Plan's time): a Task found with a longer one is not the operator's.
    pub deadline_cap: Option<u32>,
    pub retries: Option<u32>,
    /// No Task of the operator's for this attempt can be older: made after its
    /// dependencies ended (or the previous attempt, or the verdict).
    pub not_before: Option<Timestamp>,
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

/// The planner's output, read by the controller once the planner's Task succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalRead {
    pub sha256: String,
    pub parsed: Result<Arc<Proposal>, Unreadable>,
}

/// What the pass sees.
pub struct Observed<'a> {
    pub plan: &'a Plan,
    pub agents: &'a Agents,
    /// Tasks by name (the recorded ones; which is the step's is decided by uid).
    pub tasks: &'a Tasks,
    /// Tasks created by this operator whose uid the status may not record yet.
    pub created: &'a Created,
    /// Names held by Tasks the Plan did not create (a create met them).
    pub foreign: &'a [String],
    /// The planner's output, once read.
    pub proposal: Option<&'a ProposalRead>,
    /// Five random lowercase letters and digits, for a name a foreign Task holds.
    pub nonce: &'a str,
    pub now: Timestamp,
}

/// The latest attempt of a step as recorded: in the status, or newer in `created`.
fn recorded(st: Option<&StepStatus>, created: Option<&Record>) -> Option<(u32, String, String)> {
    let from_status = st.and_then(|s| {
        Some((
            s.attempts.unwrap_or(1),
            s.task.clone()?,
            s.task_uid.clone()?,
        ))
    });
    let from_created = created.map(|r| (r.attempt, r.name.clone(), r.uid.clone()));
    match (from_status, from_created) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The Task the Plan recorded, if it is there with that uid.
fn recorded_task<'a>(o: &'a Observed, name: &str, uid: &str) -> Option<&'a TaskObs> {
    o.tasks.get(name).filter(|t| t.uid == uid)
}

/// A name for a new Task: `name`, or, when a Task the Plan did not create holds it, `name`
/// with a random suffix.
fn free_name(o: &Observed, name: String) -> String {
    if o.foreign.contains(&name) {
        taken_name(&name, o.nonce)
    } else {
        name
    }
}

/// Why a step's Task is not named `canonical`, when it is not.
fn held(canonical: &str, actual: &str) -> Option<String> {
    (canonical != actual).then(|| {
        format!(
            "Task name {canonical} is held by a Task this Plan did not create; it runs as {actual}"
        )
    })
}

/// Records the uid of a Task just created for `new` in `status` (the controller calls it on
/// each successful create, before its status write).
pub fn record_created(status: &mut PlanStatus, new: &NewTask, uid: &str) {
    match &new.step {
        None => {
            status.planner_task = Some(new.name.clone());
            status.planner_task_uid = Some(uid.to_owned());
        }
        Some(step) => {
            if let Some(st) = status.steps.iter_mut().find(|s| &s.name == step)
                && st.task.as_deref() == Some(new.name.as_str())
            {
                st.task_uid = Some(uid.to_owned());
            }
        }
    }
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
    let (steps, proposed, sha): (&[Step], Option<&Proposal>, Option<String>) =
        match (&plan.spec.steps, &plan.spec.planner, o.proposal) {
            (Some(steps), _, _) => (steps, None, None),
            (None, Some(planner), read) => match planner_pass(&mut out, o, &name, planner, read) {
                Some(p) => (&p.steps, Some(p), read.map(|r| r.sha256.clone())),
                None => return out,
            },
            (None, None, _) => {
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
    let asked = proposed.and_then(|p| p.limits.clone()).unwrap_or_default();
    let limits = limits.tightest(&asked);

    // Validation, once, before any step runs.
    let judged = if conditions::is_true(&old.conditions, VALIDATED) {
        still_judged(&mut out, o, sha)
    } else {
        validate_once(&mut out, o, steps, proposed, sha, &name)
    };
    if !judged {
        return out;
    }
    out.status.phase = Some(PlanPhase::Running);
    run_steps(&mut out, o, steps, &limits, &name);
    out
}

/// The first pass that has steps judges them: `true` when they are admitted (the Plan runs),
/// `false` when it ended here (rejected, or cancelled before it was judged).
fn validate_once(
    out: &mut Outcome,
    o: &Observed,
    steps: &[Step],
    proposed: Option<&Proposal>,
    sha: Option<String>,
    name: &str,
) -> bool {
    let plan = o.plan;
    let sha = sha.unwrap_or_else(|| sha256_hex(&serde_json::to_vec(steps).unwrap_or_default()));
    out.status.proposal_sha256 = Some(sha);
    if plan.is_cancelled() {
        end(
            &mut out.status,
            o,
            PlanPhase::Cancelled,
            PlanReason::Cancelled,
            "cancelled before it was validated",
        );
        return false;
    }
    let from_spec;
    let proposal = match proposed {
        Some(p) => p,
        None => {
            from_spec = Proposal {
                steps: steps.to_vec(),
                ..Default::default()
            };
            &from_spec
        }
    };
    let limits = plan
        .spec
        .limits
        .as_ref()
        .unwrap_or(&Limits::default())
        .clone();
    let violations = validate(proposal, &context(o, &limits, name));
    if !violations.is_empty() {
        reject(out, o, violations);
        return false;
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
    true
}

/// A later pass runs only the steps that were judged: the planner's output read now must be
/// the proposal that was validated (`sha`), or the Plan fails.
fn still_judged(out: &mut Outcome, o: &Observed, sha: Option<String>) -> bool {
    match sha {
        Some(sha) if out.status.proposal_sha256.as_deref() != Some(sha.as_str()) => {
            end(
                &mut out.status,
                o,
                PlanPhase::Failed,
                PlanReason::InvalidProposal,
                "the steps differ from the proposal that was validated",
            );
            false
        }
        _ => true,
    }
}

/// The planner's part of a pass: create it, wait for it, read its proposal. `Some` with the
/// proposal once there is one to validate or run; `None` when this pass ends here.
fn planner_pass<'a>(
    out: &mut Outcome,
    o: &Observed,
    name: &str,
    planner: &ari_crds::Planner,
    read: Option<&'a ProposalRead>,
) -> Option<&'a Proposal> {
    let plan = o.plan;
    let old = plan.status.clone().unwrap_or_default();
    let limits = plan.spec.limits.clone().unwrap_or_default();
    // Judged already: only the proposal matters now (the controller reads it again if it was
    // dropped from memory; the planner Task is no longer looked at).
    if conditions::is_true(&old.conditions, VALIDATED) {
        if let Some(Ok(p)) = read.map(|r| &r.parsed) {
            return Some(p);
        }
        end(
            &mut out.status,
            o,
            PlanPhase::Failed,
            PlanReason::PlannerFailed,
            "the validated proposal can no longer be read (was the planner's Task deleted?)",
        );
        return None;
    }
    let from_status = old.planner_task.clone().zip(old.planner_task_uid.clone());
    let rec = o
        .created
        .get(&None)
        .map(|r| (r.name.clone(), r.uid.clone()))
        .or(from_status);
    let Some((task, uid)) = rec else {
        start_planner(out, o, name, planner, &limits);
        return None;
    };
    out.status.planner_task = Some(task.clone());
    out.status.planner_task_uid = Some(uid.clone());
    let Some(t) = recorded_task(o, &task, &uid) else {
        // It ran (or runs) and is gone: never run a planner twice.
        let why = format!("the planner Task {task} was deleted");
        end(
            &mut out.status,
            o,
            PlanPhase::Failed,
            PlanReason::PlannerFailed,
            &why,
        );
        return None;
    };
    match t.phase {
        TaskPhase::Pending | TaskPhase::Running => {
            out.status.phase = Some(PlanPhase::Planning);
            if (plan.is_cancelled() || deadline_passed(plan, &limits, o.now)) && !t.cancelled {
                out.cancel.push(task);
            }
            out.requeue = deadline_wake(plan, &limits, o.now);
            None
        }
        TaskPhase::Failed | TaskPhase::Cancelled => {
            planner_failed(out, o, &limits, &task, t);
            None
        }
        TaskPhase::Succeeded => proposal_of(out, o, read),
    }
}

/// The planner is judged before it runs, as steps are; then its Task is made.
fn start_planner(
    out: &mut Outcome,
    o: &Observed,
    name: &str,
    planner: &ari_crds::Planner,
    limits: &Limits,
) {
    let plan = o.plan;
    let violations = validate_planner(&planner.agent_ref.name, &context(o, limits, name));
    if !violations.is_empty() {
        reject(out, o, violations);
        return;
    }
    if plan.is_cancelled() {
        end(
            &mut out.status,
            o,
            PlanPhase::Cancelled,
            PlanReason::Cancelled,
            "cancelled before the planner ran",
        );
        return;
    }
    let task = free_name(o, planner_task_name(name));
    out.create.push(NewTask {
        name: task.clone(),
        step: None,
        attempt: 1,
        agent: planner.agent_ref.name.clone(),
        input: Input::Bytes(planner.input.clone().unwrap_or_default().into_bytes()),
        requirements: None,
        fuel: planner.fuel,
        tokens: planner.tokens,
        deadline_seconds: remaining_seconds(plan, limits, o.now),
        deadline_cap: limits.deadline_seconds,
        retries: None,
        not_before: None,
    });
    out.status.phase = Some(PlanPhase::Planning);
    out.status.planner_task = Some(task);
    out.status.planner_task_uid = None;
    out.requeue = deadline_wake(plan, limits, o.now);
}

/// The planner's Task failed or was cancelled: the Plan ends, saying why.
fn planner_failed(out: &mut Outcome, o: &Observed, limits: &Limits, task: &str, t: &TaskObs) {
    let plan = o.plan;
    let (phase, reason) = if plan.is_cancelled() {
        (PlanPhase::Cancelled, PlanReason::Cancelled)
    } else if deadline_passed(plan, limits, o.now) {
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
}

/// The proposal of a planner that succeeded, once the controller has read it; a proposal
/// too large or not a proposal at all ends the Plan.
fn proposal_of<'a>(
    out: &mut Outcome,
    o: &Observed,
    read: Option<&'a ProposalRead>,
) -> Option<&'a Proposal> {
    let Some(read) = read else {
        // Its output could not be read yet.
        out.requeue = Some(Duration::from_secs(5));
        return None;
    };
    match &read.parsed {
        Ok(p) => Some(p),
        Err(Unreadable::TooLarge(v)) => {
            out.status.proposal_sha256 = Some(read.sha256.clone());
            reject(out, o, vec![v.clone()]);
            None
        }
        Err(Unreadable::NotAProposal(e)) => {
            out.status.proposal_sha256 = Some(read.sha256.clone());
            let why = format!("the planner's output is not a plan proposal: {e}");
            end(
                &mut out.status,
                o,
                PlanPhase::Failed,
                PlanReason::InvalidProposal,
                &why,
            );
            None
        }
    }
}

/// A step's recorded attempt and, when it is there with the recorded uid, its Task.
struct Current<'a> {
    attempt: u32,
    task: String,
    uid: String,
    obs: Option<&'a TaskObs>,
}

/// What every step of one Running pass is judged with.
struct Pass<'a> {
    o: &'a Observed<'a>,
    limits: &'a Limits,
    /// The Plan's name.
    name: &'a str,
    /// Cancelled or past its deadline: start nothing, stop what runs.
    stopping: bool,
    sources: BTreeMap<String, Source>,
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
    let graph = Graph::new(steps);
    let current = current_attempts(o, steps, &old);
    let pass = Pass {
        o,
        limits,
        name,
        stopping: cancelled || late,
        sources: sources(steps, &current, &old),
    };
    let mut states: Vec<StepStatus> = steps
        .iter()
        .zip(&current)
        .map(|(s, c)| pass.step_state(out, s, c.as_ref(), old.get(&s.name)))
        .collect();
    propagate_failures(&mut states, &graph, pass.stopping, late);
    if !pass.stopping {
        pass.start_ready(out, steps, &graph, &current, &mut states);
    }
    let total = states.len();
    let succeeded = states
        .iter()
        .filter(|s| s.phase == StepPhase::Succeeded)
        .count();
    out.status.progress = Some(format!("{succeeded}/{total}"));
    out.status.fuel_used = Some(states.iter().filter_map(|s| s.fuel_used).sum());
    let tokens: u64 = states.iter().filter_map(|s| s.tokens_used).sum();
    out.status.tokens_used = (tokens > 0).then_some(tokens);
    out.status.steps = states;
    out.requeue = deadline_wake(plan, limits, o.now);
    if out.status.steps.iter().all(|s| s.phase.is_finished()) {
        finish(out, o, cancelled, late, limits, succeeded, total);
    }
}

/// Each step's latest recorded attempt and its Task, if the Plan made one.
fn current_attempts<'a>(
    o: &'a Observed,
    steps: &[Step],
    old: &BTreeMap<String, StepStatus>,
) -> Vec<Option<Current<'a>>> {
    steps
        .iter()
        .map(|s| {
            let (attempt, task, uid) =
                recorded(old.get(&s.name), o.created.get(&Some(s.name.clone())))?;
            let obs = recorded_task(o, &task, &uid);
            Some(Current {
                attempt,
                task,
                uid,
                obs,
            })
        })
        .collect()
}

/// The succeeded steps, whose outputs later inputs are made of: from their Task, or, once
/// the status recorded the success, from the status (the controller no longer looks).
fn sources(
    steps: &[Step],
    current: &[Option<Current>],
    old: &BTreeMap<String, StepStatus>,
) -> BTreeMap<String, Source> {
    steps
        .iter()
        .zip(current)
        .filter_map(|(s, c)| {
            let c = c.as_ref()?;
            let output_sha256 = match c.obs {
                Some(t) if t.phase == TaskPhase::Succeeded => t.output_sha256.clone(),
                Some(_) => return None,
                None => old
                    .get(&s.name)
                    .filter(|p| {
                        p.phase == StepPhase::Succeeded && p.task.as_deref() == Some(&c.task)
                    })?
                    .output_sha256
                    .clone(),
            };
            let source = Source {
                task: c.task.clone(),
                uid: c.uid.clone(),
                output_sha256,
            };
            Some((s.name.clone(), source))
        })
        .collect()
}

impl Pass<'_> {
    /// One step's state from its latest attempt's Task (and its previous state).
    fn step_state(
        &self,
        out: &mut Outcome,
        s: &Step,
        c: Option<&Current>,
        prev: Option<&StepStatus>,
    ) -> StepStatus {
        // A step whose input could not be built stays failed: nothing would change it.
        if let Some(prev) = prev.filter(|p| {
            p.phase == StepPhase::Failed
                && p.reason == Some(PlanStepReason::InputUnavailable.into())
        }) {
            return prev.clone();
        }
        let Some(c) = c else {
            return match prev {
                // A step that never ran carries its state over: no Task records it.
                Some(prev) if prev.phase.is_finished() && prev.task.is_none() => prev.clone(),
                _ => StepStatus {
                    name: s.name.clone(),
                    phase: StepPhase::Waiting,
                    ..Default::default()
                },
            };
        };
        let mut st = StepStatus {
            name: s.name.clone(),
            task: Some(c.task.clone()),
            task_uid: Some(c.uid.clone()),
            attempts: Some(c.attempt),
            message: held(&step_task_name(self.name, &s.name, c.attempt), &c.task),
            ..Default::default()
        };
        let Some(t) = c.obs else {
            return task_gone(st, c, prev);
        };
        st.fuel_used = t.fuel_used;
        st.tokens_used = t.tokens_used.filter(|t| *t > 0);
        // A digest read once stays: the cache keeps no attestation.
        let kept = prev.filter(|p| p.task.as_deref() == Some(c.task.as_str()));
        let attestation = t
            .attestation_sha256
            .clone()
            .or_else(|| kept.and_then(|p| p.attestation_sha256.clone()));
        match t.phase {
            TaskPhase::Pending | TaskPhase::Running => {
                st.phase = StepPhase::Running;
                if self.stopping && !t.cancelled {
                    out.cancel.push(c.task.clone());
                }
            }
            TaskPhase::Succeeded => {
                st.phase = StepPhase::Succeeded;
                st.reason = Some(TaskReason::Completed.into());
                st.output_sha256 = t.output_sha256.clone();
                st.attestation_sha256 = attestation;
            }
            TaskPhase::Failed | TaskPhase::Cancelled => {
                st.output_sha256 = t.output_sha256.clone();
                st.attestation_sha256 = attestation;
                if self.retries(s, c, t) {
                    self.retry(out, s, c, t, &mut st);
                } else {
                    st.phase = if t.phase == TaskPhase::Cancelled {
                        StepPhase::Cancelled
                    } else {
                        StepPhase::Failed
                    };
                    st.reason = t.reason.map(StepReason::Task);
                    st.message = t.message.clone();
                }
            }
        }
        st
    }

    /// Whether a step whose attempt `c` ended unsuccessfully runs again: attempts left, the
    /// Plan going on, and not a refusal or cancellation (the same Task would end the same).
    fn retries(&self, s: &Step, c: &Current, t: &TaskObs) -> bool {
        let attempts_allowed = s.retry_limit().min(ari_plan::model::MAX_RETRY) + 1;
        let refused = matches!(
            t.reason,
            Some(TaskReason::CapabilityDenied | TaskReason::ModeRefused | TaskReason::Cancelled)
        );
        !refused && c.attempt < attempts_allowed && !self.stopping
    }

    /// The next attempt of a step: a new Task, and the step Running on it.
    fn retry(&self, out: &mut Outcome, s: &Step, c: &Current, t: &TaskObs, st: &mut StepStatus) {
        let attempt = c.attempt + 1;
        let canonical = step_task_name(self.name, &s.name, attempt);
        let next = free_name(self.o, canonical.clone());
        let task = spawn(
            self.o,
            s,
            &self.sources,
            self.limits,
            &next,
            attempt,
            t.completion_time,
        );
        out.create.push(task);
        st.phase = StepPhase::Running;
        st.message = held(&canonical, &next);
        st.task = Some(next);
        st.task_uid = None;
        st.attempts = Some(attempt);
        st.attestation_sha256 = None;
        st.output_sha256 = None;
    }

    /// Starts what may start, in declaration order, up to the parallelism limit.
    fn start_ready(
        &self,
        out: &mut Outcome,
        steps: &[Step],
        graph: &Graph,
        current: &[Option<Current>],
        states: &mut [StepStatus],
    ) {
        let max_parallel = self
            .limits
            .max_parallel()
            .min(ari_plan::model::MAX_PARALLEL) as usize;
        // The earliest a step could have started: the recorded verdict, else the Plan's
        // creation (a pass that validates creates its first steps before its status write
        // records it).
        let plan = self.o.plan;
        let verdict_at = plan
            .status
            .as_ref()
            .and_then(|st| conditions::find(&st.conditions, VALIDATED))
            .map(|c| c.last_transition_time.0)
            .or_else(|| plan.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for i in 0..steps.len() {
            let running = states
                .iter()
                .filter(|s| s.phase == StepPhase::Running)
                .count();
            if running >= max_parallel {
                break;
            }
            let ready = states[i].phase == StepPhase::Waiting
                && graph.deps[i]
                    .iter()
                    .all(|d| states[*d].phase == StepPhase::Succeeded);
            if !ready {
                continue;
            }
            let s = &steps[i];
            let canonical = step_task_name(self.name, &s.name, 1);
            let task_name = free_name(self.o, canonical.clone());
            states[i].message = held(&canonical, &task_name);
            // Made after the verdict and after every dependency ended.
            let deps_done = graph.deps[i]
                .iter()
                .filter_map(|d| current[*d].as_ref()?.obs?.completion_time)
                .max();
            let not_before = deps_done.max(verdict_at);
            out.create.push(spawn(
                self.o,
                s,
                &self.sources,
                self.limits,
                &task_name,
                1,
                not_before,
            ));
            states[i].phase = StepPhase::Running;
            states[i].task = Some(task_name);
            states[i].attempts = Some(1);
        }
    }
}

/// A step whose Task existed and is gone (deleted by hand): never run a step twice. A
/// finished step keeps its result (a dependant not yet started then lacks its output:
/// InputUnavailable); an unfinished one fails.
fn task_gone(mut st: StepStatus, c: &Current, prev: Option<&StepStatus>) -> StepStatus {
    if let Some(prev) = prev.filter(|p| p.task.as_deref() == Some(c.task.as_str())) {
        st = prev.clone();
    }
    if !st.phase.is_finished() {
        fail_step(
            &mut st,
            PlanStepReason::TaskDeleted,
            format!("its Task {} was deleted", c.task),
        );
    }
    st
}

/// Every step is finished: the Plan's end, from how they ended.
fn finish(
    out: &mut Outcome,
    o: &Observed,
    cancelled: bool,
    late: bool,
    limits: &Limits,
    succeeded: usize,
    total: usize,
) {
    let failed: Vec<String> = out
        .status
        .steps
        .iter()
        .filter(|s| s.phase == StepPhase::Failed && s.reason != Some(DEPENDENCY_FAILED))
        .map(|s| format!("{} ({})", s.name, s.reason.map_or("", StepReason::as_str)))
        .collect();
    let skipped = out
        .status
        .steps
        .iter()
        .filter(|s| s.reason == Some(DEPENDENCY_FAILED))
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

/// When the Plan stops, waiting steps are cancelled; otherwise waiting steps behind a failed
/// or cancelled one fail `DependencyFailed`, transitively.
fn propagate_failures(states: &mut [StepStatus], graph: &Graph, stopping: bool, late: bool) {
    if stopping {
        for s in states.iter_mut().filter(|s| s.phase == StepPhase::Waiting) {
            s.phase = StepPhase::Cancelled;
            s.reason = Some(
                if late {
                    TaskReason::DeadlineExceeded
                } else {
                    TaskReason::Cancelled
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
                fail_step(&mut states[i], PlanStepReason::DependencyFailed, why);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// The reason of a step that never ran because one it depends on did not succeed.
const DEPENDENCY_FAILED: StepReason = StepReason::Plan(PlanStepReason::DependencyFailed);

fn fail_step(st: &mut StepStatus, reason: PlanStepReason, message: String) {
    st.phase = StepPhase::Failed;
    st.reason = Some(reason.into());
    st.message = Some(message);
}

/// The Task of a step attempt; its input is made from `sources` when it is created.
fn spawn(
    o: &Observed,
    s: &Step,
    sources: &BTreeMap<String, Source>,
    limits: &Limits,
    task_name: &str,
    attempt: u32,
    not_before: Option<Timestamp>,
) -> NewTask {
    let input = if s.input_from.is_empty() {
        Input::Bytes(s.input.clone().unwrap_or_default().into_bytes())
    } else {
        let deps = s
            .dependencies()
            .into_iter()
            .filter_map(|d| Some((d.to_owned(), sources.get(d)?.clone())))
            .collect();
        Input::Composed {
            step: Box::new(s.clone()),
            sources: deps,
        }
    };
    let plan_left = remaining_seconds(o.plan, limits, o.now);
    let deadline = match (s.deadline_seconds, plan_left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    NewTask {
        name: task_name.to_owned(),
        step: Some(s.name.clone()),
        attempt,
        agent: s.agent_ref.name.clone(),
        input,
        requirements: s.requirements.clone(),
        fuel: s.fuel,
        tokens: s.tokens,
        deadline_seconds: deadline,
        deadline_cap: s.deadline_seconds.or(limits.deadline_seconds),
        retries: (s.retry_limit() > 0).then(|| s.retry_limit()),
        not_before,
    }
}

fn context<'b>(o: &'b Observed, limits: &'b Limits, name: &'b str) -> ari_plan::Context<'b> {
    ari_plan::Context {
        agents: o.agents,
        limits,
        plan_name: Some(name),
        allowed_agents: o.plan.spec.allowed_agents.as_deref(),
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
    let mut message = format!("{count} violation(s); the first: {first}");
    crate::cache::clip(&mut message, ari_crds::lifecycle::MESSAGE_MAX_BYTES);
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
