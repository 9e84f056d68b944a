//! Plan reconcile: observe the Plan's Tasks (from the trimmed cache), [`decide`], then create
//! and cancel Tasks and write status (with its history) in one guarded write, and publish an
//! Event per stage reached.
//!
//! Bytes are read only when needed and once: the planner's output when it has succeeded (kept
//! parsed, a bounded number of Plans at a time), a dependency's output when a step that takes
//! it is about to start (its input is composed with a running size check), and a finished
//! Task found missing from the cache by a metadata read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ari_crds::plan_view::{LABEL_PLAN_STEP, LABEL_PLAN_UID, agent_views};
use ari_crds::{Agent, Plan, Task, TaskPhase};
use ari_plan::input::{Object, Shape, single};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::decide::{
    Created, Input, MAX_TASK_INPUT, NewTask, Observed, ProposalRead, Record, decide, record_created,
};
use super::history;
use super::observe::{TaskObs, Tasks};
use crate::context::Context;
use crate::error::Error;

/// Most planner proposals kept parsed at once (each at most 1 MiB of JSON); past it, a Plan
/// whose proposal was dropped reads it again.
const MAX_PROPOSALS_KEPT: usize = 32;

/// What the controller remembers between passes, by Plan uid.
#[derive(Default)]
struct Memory {
    /// Task names a Plan could not create because a Task it did not create has them.
    foreign: HashMap<String, Vec<String>>,
    /// Tasks created (or found to be this operator's) before a status write recorded them.
    created: HashMap<String, Created>,
    /// Planner proposals, parsed.
    proposals: HashMap<String, ProposalRead>,
}

/// Context of the Plan controller.
pub struct PlanContext {
    pub base: Arc<Context>,
    /// Agents as the operator's watch last saw them (the validator's view).
    pub agents: Store<Agent>,
    /// The Tasks labelled with a Plan's uid, trimmed ([`super::observe::trim_plan_task`]).
    pub tasks: Store<Task>,
    memory: Mutex<Memory>,
}

impl PlanContext {
    pub fn new(base: Arc<Context>, agents: Store<Agent>, tasks: Store<Task>) -> Self {
        Self {
            base,
            agents,
            tasks,
            memory: Mutex::default(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Memory) -> T) -> Option<T> {
        self.memory.lock().ok().map(|mut m| f(&mut m))
    }

    fn forget(&self, uid: &str) {
        self.with(|m| {
            m.foreign.remove(uid);
            m.created.remove(uid);
            m.proposals.remove(uid);
        });
    }
}

/// Reconciles one Plan.
pub async fn reconcile(plan: Arc<Plan>, ctx: Arc<PlanContext>) -> Result<Action, Error> {
    let metrics = &ctx.base.metrics;
    metrics.reconciles.with_label_values(&["plan"]).inc();
    let _timer = metrics
        .reconcile_duration
        .with_label_values(&["plan"])
        .start_timer();
    sync_plan(plan, ctx.clone()).await
}

async fn sync_plan(plan: Arc<Plan>, ctx: Arc<PlanContext>) -> Result<Action, Error> {
    let uid = plan.uid().ok_or(Error::NoNamespace)?;
    if plan.phase().is_finished() {
        ctx.forget(&uid);
        return Ok(Action::await_change());
    }
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let name = plan.name_any();
    let client = ctx.base.client.clone();
    let tasks_api = Api::<Task>::namespaced(client.clone(), &ns);

    let created = ctx
        .with(|m| m.created.get(&uid).cloned().unwrap_or_default())
        .unwrap_or_default();
    let tasks = observe_tasks(&ctx, &tasks_api, &plan, &created).await?;
    let proposal = planner_output(&ctx, &client, &plan, &created, &tasks).await?;
    let agents = agent_views(
        ctx.agents
            .state()
            .iter()
            .filter(|a| a.metadata.namespace.as_deref() == Some(ns.as_str()))
            .map(|a| a.as_ref()),
    );
    let foreign = ctx
        .with(|m| m.foreign.get(&uid).cloned().unwrap_or_default())
        .unwrap_or_default();
    let now = Timestamp::now();
    let nonce = nonce();
    let mut outcome = decide(&Observed {
        plan: &plan,
        agents: &agents,
        tasks: &tasks,
        created: &created,
        foreign: &foreign,
        proposal: proposal.as_ref(),
        nonce: &nonce,
        now,
    });

    for new in &outcome.create {
        let input = match compose(&client, &ns, new).await? {
            Ok(input) => input,
            Err(why) => {
                fail_input(&mut outcome.status, new, why);
                continue;
            }
        };
        let task = task_object(&plan, &ns, new, input)?;
        let made = match tasks_api.create(&PostParams::default(), &task).await {
            Ok(t) => t.uid(),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Made by an earlier pass or operator (then the same Task, made after it could
                // start), or by someone else: never taken as the step's then.
                let existing = tasks_api.get_opt(&new.name).await?;
                let ours = existing
                    .as_ref()
                    .filter(|t| adoptable(t, &task, new))
                    .and_then(|t| t.uid());
                if ours.is_none() {
                    warn!(plan = %name, namespace = %ns, task = %new.name, "task name held by a Task this Plan did not create");
                    ctx.with(|m| push_once(m.foreign.entry(uid.clone()).or_default(), &new.name));
                    return Ok(Action::requeue(Duration::from_millis(200)));
                }
                ours
            }
            Err(e) => return Err(e.into()),
        };
        let Some(task_uid) = made else { continue };
        record_created(&mut outcome.status, new, &task_uid);
        let record = Record {
            attempt: new.attempt,
            name: new.name.clone(),
            uid: task_uid,
        };
        ctx.with(|m| {
            m.created
                .entry(uid.clone())
                .or_default()
                .insert(new.step.clone(), record)
        });
    }
    for task in &outcome.cancel {
        let patch = Patch::Merge(json!({"spec": {"cancelled": true}}));
        match tasks_api.patch(task, &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let old = plan.status.clone().unwrap_or_default();
    let stopping = plan.is_cancelled() || !outcome.cancel.is_empty();
    let stages = history::stages(&old, &outcome.status, stopping);
    history::append(&mut outcome.status, &stages, now);
    let action = outcome
        .requeue
        .map_or_else(Action::await_change, Action::requeue);
    if outcome.status == old {
        return Ok(action);
    }
    let mut updated = (*plan).clone();
    updated.status = Some(outcome.status);
    match Api::<Plan>::namespaced(client, &ns)
        .replace_status(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => {}
        // Someone wrote since this pass looked (often this controller's own earlier write):
        // look again; the Tasks created are remembered until a status write records them.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Ok(Action::requeue(Duration::from_millis(100)));
        }
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    }
    // One Event per stage, sent together: the history in status is the ordered log, and a
    // step's successor should not wait for a round trip per Event.
    let notes: Vec<(&history::Stage, String)> = stages
        .iter()
        .map(|s| {
            let mut note = match &s.step {
                Some(step) => format!("step {step}: {}", s.message),
                None => s.message.clone(),
            };
            info!(plan = %name, namespace = %ns, event = %s.event, "{note}");
            crate::cache::clip(&mut note, crate::task::controller::NOTE_MAX);
            (s, note)
        })
        .collect();
    futures::future::join_all(notes.into_iter().map(|(s, note)| {
        ctx.base
            .event(&*plan, s.warning, s.event.as_str(), "Plan", note)
    }))
    .await;
    Ok(action)
}

fn push_once(names: &mut Vec<String>, name: &str) {
    if !names.iter().any(|n| n == name) {
        names.push(name.to_owned());
    }
}

/// Five random lowercase letters and digits.
fn nonce() -> String {
    use rand_core::RngCore as _;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..ari_plan::names::TAKEN_SUFFIX_CHARS)
        .map(|_| ALPHABET[rand_core::OsRng.next_u32() as usize % ALPHABET.len()] as char)
        .collect()
}

/// The Tasks the Plan recorded (the planner until its proposal is judged, each unfinished
/// step's latest attempt, and those created but not yet recorded), from the cache. One
/// the cache does not have yet (just created) is looked up by a metadata read: there with the
/// recorded uid, it counts as Pending; gone, the decision calls it deleted.
async fn observe_tasks(
    ctx: &PlanContext,
    tasks_api: &Api<Task>,
    plan: &Plan,
    created: &Created,
) -> Result<Tasks, Error> {
    let ns = plan.namespace().unwrap_or_default();
    let status = plan.status.clone().unwrap_or_default();
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    // The planner matters until its proposal is judged; a finished step's status says all.
    let judged = ari_crds::conditions::find(&status.conditions, super::decide::VALIDATED).is_some();
    if let (Some(n), Some(u), false) = (status.planner_task, status.planner_task_uid, judged) {
        wanted.insert(n, u);
    }
    for s in status.steps.into_iter().filter(|s| !s.phase.is_finished()) {
        if let (Some(n), Some(u)) = (s.task, s.task_uid) {
            wanted.insert(n, u);
        }
    }
    for r in created.values() {
        wanted.insert(r.name.clone(), r.uid.clone());
    }
    let mut tasks = Tasks::new();
    for (name, uid) in wanted {
        let cached = ctx.tasks.get(&ObjectRef::new(&name).within(&ns));
        match cached.filter(|t| t.uid().as_deref() == Some(uid.as_str())) {
            Some(t) => {
                let (n, obs) = TaskObs::of(&t);
                tasks.insert(n, obs);
            }
            None => {
                let meta = tasks_api.get_metadata_opt(&name).await?;
                if meta.and_then(|m| m.metadata.uid).as_deref() == Some(uid.as_str()) {
                    let pending = TaskObs {
                        uid,
                        ..Default::default()
                    };
                    tasks.insert(name, pending);
                }
            }
        }
    }
    Ok(tasks)
}

/// The planner's proposal once its recorded Task succeeded: kept parsed, else read once.
async fn planner_output(
    ctx: &PlanContext,
    client: &kube::Client,
    plan: &Plan,
    created: &Created,
    tasks: &Tasks,
) -> Result<Option<ProposalRead>, Error> {
    if plan.spec.planner.is_none() || plan.spec.steps.is_some() {
        return Ok(None);
    }
    let uid = plan.uid().unwrap_or_default();
    let status = plan.status.clone().unwrap_or_default();
    let recorded = created
        .get(&None)
        .map(|r| (r.name.clone(), r.uid.clone()))
        .or(status.planner_task.zip(status.planner_task_uid));
    let Some((name, task_uid)) = recorded else {
        return Ok(None);
    };
    let succeeded = tasks
        .get(&name)
        .is_some_and(|t| t.uid == task_uid && t.phase == TaskPhase::Succeeded);
    let judged = ari_crds::conditions::find(&status.conditions, super::decide::VALIDATED)
        .is_some_and(|c| c.status == "True");
    if !succeeded && !judged {
        return Ok(None);
    }
    if let Some(kept) = ctx.with(|m| m.proposals.get(&uid).cloned()).flatten() {
        return Ok(Some(kept));
    }
    let ns = plan.namespace().unwrap_or_default();
    let Some(bytes) = output_of(client, &ns, &name, &task_uid, None).await? else {
        return Ok(None);
    };
    let read = ProposalRead {
        sha256: ari_model::sha256_hex(&bytes),
        parsed: ari_plan::parse_proposal(&bytes).map(Arc::new),
    };
    drop(bytes);
    ctx.with(|m| {
        if m.proposals.len() >= MAX_PROPOSALS_KEPT
            && let Some(any) = m.proposals.keys().next().cloned()
        {
            m.proposals.remove(&any);
        }
        m.proposals.insert(uid, read.clone());
    });
    Ok(Some(read))
}

/// The output of Task `name` (with uid `uid`): inline in its status, or in its ConfigMap.
/// `None` when it is not there (or not that Task any more), or not the output `sha256` says.
async fn output_of(
    client: &kube::Client,
    ns: &str,
    name: &str,
    uid: &str,
    sha256: Option<&str>,
) -> Result<Option<Vec<u8>>, Error> {
    let Some(task) = Api::<Task>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .filter(|t| t.uid().as_deref() == Some(uid))
    else {
        return Ok(None);
    };
    let s = task.status.unwrap_or_default();
    let bytes = match (s.output, s.output_base64, s.output_ref) {
        (Some(text), _, _) => Some(text.into_bytes()),
        (None, Some(b64), _) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(b64).ok()
        }
        (None, None, Some(r)) => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(&r.config_map)
            .await?
            .and_then(|c| c.binary_data)
            .and_then(|mut d| d.remove(ari_crds::names::OUTPUT_KEY).map(|b| b.0)),
        (None, None, None) => Some(Vec::new()),
    };
    let expected = sha256.or(s.output_sha256.as_deref());
    Ok(bytes.filter(|b| expected.is_none_or(|e| ari_model::sha256_hex(b) == e)))
}

/// The input bytes of a new Task: literal, or read from its sources one output at a time, each
/// checked against the digest the Plan recorded, and refused as soon as it passes the bound.
/// `Ok(Err(why))`: it cannot be made (the step fails); `Err`: the API server failed (retried).
async fn compose(
    client: &kube::Client,
    ns: &str,
    new: &NewTask,
) -> Result<Result<Vec<u8>, String>, Error> {
    let (step, sources) = match &new.input {
        Input::Bytes(b) => return Ok(Ok(b.clone())),
        Input::Composed { step, sources } => (step, sources),
    };
    let too_large =
        |n: usize| format!("the input is {n} bytes, above the {MAX_TASK_INPUT} a Task carries");
    let refs: &[ari_plan::InputRef] = match Shape::of(step) {
        Shape::Literal(b) => return Ok(Ok(b.to_vec())),
        Shape::Single(r) => std::slice::from_ref(r),
        Shape::Object(many) => many,
    };
    let single_ref = matches!(Shape::of(step), Shape::Single(_));
    let mut object = Object::new(MAX_TASK_INPUT);
    for r in refs {
        let Some(source) = sources.get(&r.step) else {
            return Ok(Err(format!("step {} has no output (yet)", r.step)));
        };
        let read = output_of(
            client,
            ns,
            &source.task,
            &source.uid,
            source.output_sha256.as_deref(),
        )
        .await?;
        let Some(out) = read else {
            return Ok(Err(format!(
                "the output of step {} (Task {}) is gone or is not the one recorded",
                r.step, source.task
            )));
        };
        if single_ref {
            return Ok(match single(r, &out) {
                Ok(input) if input.len() > MAX_TASK_INPUT => Err(too_large(input.len())),
                Ok(input) => Ok(input),
                Err(e) => Err(e.to_string()),
            });
        }
        if let Err(e) = object.push(r, &out) {
            return Ok(Err(match e {
                ari_plan::InputError::TooLarge(_) => {
                    format!("the input would pass the {MAX_TASK_INPUT} bytes a Task carries")
                }
                e => e.to_string(),
            }));
        }
    }
    Ok(Ok(object.finish()))
}

/// A step whose input could not be made fails `InputUnavailable` (the decision keeps it so).
pub(crate) fn fail_input(status: &mut ari_crds::PlanStatus, new: &NewTask, why: String) {
    let Some(step) = &new.step else { return };
    if let Some(st) = status.steps.iter_mut().find(|s| &s.name == step) {
        st.phase = ari_crds::StepPhase::Failed;
        st.reason = Some(ari_crds::PlanStepReason::InputUnavailable.into());
        st.message = Some(why);
        // No Task was made for this attempt.
        st.task = None;
        st.task_uid = None;
        st.attempts = (new.attempt > 1).then(|| new.attempt - 1);
    }
}

/// Whether `existing`, met by a create of `wanted`, is the Task this operator would have
/// made: owned by the Plan as its controller, labelled and specified alike (the deadline at
/// most what it could have been given), and made no earlier than the step could start. Only
/// then is it recorded as the step's; anything else is someone else's Task.
pub fn adoptable(existing: &Task, wanted: &Task, new: &NewTask) -> bool {
    let plan_uid = wanted
        .owner_references()
        .first()
        .map(|o| o.uid.clone())
        .unwrap_or_default();
    let owned = existing
        .owner_references()
        .iter()
        .any(|o| o.uid == plan_uid && o.controller == Some(true));
    let spec = |t: &Task| {
        let mut v = serde_json::to_value(&t.spec).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.remove("deadlineSeconds");
            o.remove("cancelled");
        }
        v
    };
    let deadline_ok = match (existing.spec.deadline_seconds, new.deadline_cap) {
        (Some(d), Some(cap)) => d <= cap,
        (None, None) => true,
        _ => false,
    };
    let made = existing.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let late_enough = match (made, new.not_before) {
        // Creation times have whole seconds.
        (Some(made), Some(nb)) => made.as_second() >= nb.as_second(),
        (Some(_), None) => true,
        (None, _) => false,
    };
    owned
        && existing.labels() == wanted.labels()
        && spec(existing) == spec(wanted)
        && deadline_ok
        && late_enough
}

/// The Task of a step attempt (or the planner), owned by the Plan and labelled with its uid.
fn task_object(plan: &Plan, ns: &str, new: &NewTask, input: Vec<u8>) -> Result<Task, Error> {
    // Built from JSON so fields added to TaskSpec later take their defaults here.
    let mut spec = json!({"agentRef": {"name": new.agent}});
    match String::from_utf8(input) {
        Ok(text) => spec["input"] = json!(text),
        Err(e) => {
            use base64::Engine as _;
            spec["inputBase64"] =
                json!(base64::engine::general_purpose::STANDARD.encode(e.as_bytes()));
        }
    }
    if let Some(r) = &new.requirements {
        spec["requirements"] = json!(r);
    }
    if let Some(f) = new.fuel {
        spec["fuel"] = json!(f);
    }
    if let Some(t) = new.tokens {
        spec["tokens"] = json!(t);
    }
    if let Some(d) = new.deadline_seconds {
        spec["deadlineSeconds"] = json!(d);
    }
    if let Some(r) = new.retries {
        spec["retries"] = json!(r);
    }
    let mut labels = BTreeMap::from([
        (LABEL_PLAN_UID.to_owned(), plan.uid().unwrap_or_default()),
        (
            LABEL_PLAN_STEP.to_owned(),
            new.step
                .clone()
                .unwrap_or_else(|| ari_plan::PLANNER_STEP.into()),
        ),
    ]);
    let plan_name = plan.name_any();
    if plan_name.len() <= 63 {
        labels.insert("ari.dev/plan".to_owned(), plan_name);
    }
    let task = json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": new.name, "namespace": ns, "labels": labels,
                     "ownerReferences": plan.controller_owner_ref(&()).into_iter().collect::<Vec<_>>()},
        "spec": spec,
    });
    // Every field above is one TaskSpec has: a failure here is a programming error.
    serde_json::from_value(task).map_err(|e| Error::Kube(kube::Error::SerdeError(e)))
}

/// Backoff on errors.
pub fn error_policy(_plan: Arc<Plan>, err: &Error, ctx: Arc<PlanContext>) -> Action {
    ctx.base
        .metrics
        .reconcile_errors
        .with_label_values(&["plan", err.metric_label()])
        .inc();
    warn!(error = %err, "plan reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_five_lowercase_letters_or_digits() {
        let n = nonce();
        assert_eq!(n.len(), 5);
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }
}
