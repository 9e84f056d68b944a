//! Plan reconcile: observe the Plan's Tasks, [`decide`], then create and cancel Tasks and write
//! status (with its history) in one guarded write, and publish an Event per stage reached.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ari_crds::plan_view::{LABEL_PLAN_STEP, LABEL_PLAN_UID, agent_views, task_requirements};
use ari_crds::{Agent, Plan, Task, TaskPhase};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::decide::{NewTask, Observed, decide};
use super::history;
use super::observe::{TaskObs, Tasks};
use crate::context::Context;
use crate::error::Error;

/// Context of the Plan controller.
pub struct PlanContext {
    pub base: Arc<Context>,
    /// Agents as the operator's watch last saw them (the validator's view).
    pub agents: Store<Agent>,
    /// Task names a Plan could not create because a Task it does not own has them, by Plan
    /// uid: the next pass fails those steps `NameConflict` instead of retrying forever.
    pub foreign: Mutex<HashMap<String, Vec<String>>>,
}

impl PlanContext {
    pub fn new(base: Arc<Context>, agents: Store<Agent>) -> Self {
        Self {
            base,
            agents,
            foreign: Mutex::default(),
        }
    }

    fn foreign_of(&self, uid: &str) -> Vec<String> {
        self.foreign
            .lock()
            .map(|m| m.get(uid).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    fn add_foreign(&self, uid: &str, name: String) {
        if let Ok(mut m) = self.foreign.lock() {
            let names = m.entry(uid.to_owned()).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        }
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
    if plan.phase().is_finished() {
        if let (Some(uid), Ok(mut m)) = (plan.uid(), ctx.foreign.lock()) {
            m.remove(&uid);
        }
        return Ok(Action::await_change());
    }
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let uid = plan.uid().ok_or(Error::NoNamespace)?;
    let name = plan.name_any();
    let client = ctx.base.client.clone();
    let tasks_api = Api::<Task>::namespaced(client.clone(), &ns);

    let tasks = observe_tasks(&tasks_api, &client, &ns, &uid).await?;
    let agents = agent_views(
        ctx.agents
            .state()
            .iter()
            .filter(|a| a.metadata.namespace.as_deref() == Some(ns.as_str()))
            .map(|a| a.as_ref()),
    );
    let foreign = ctx.foreign_of(&uid);
    let now = Timestamp::now();
    let mut outcome = decide(&Observed {
        plan: &plan,
        agents: &agents,
        tasks: &tasks,
        foreign: &foreign,
        now,
    });

    for new in &outcome.create {
        match tasks_api
            .create(&PostParams::default(), &task_object(&plan, &ns, new)?)
            .await
        {
            Ok(_) => {}
            // Made by an earlier pass (or an earlier operator): exists, nothing to do. Unless
            // it is not the Plan's: then that step fails NameConflict on the next pass.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let owned = tasks_api
                    .get_opt(&new.name)
                    .await?
                    .is_some_and(|t| TaskObs::of(&t, &uid).is_some());
                if !owned {
                    warn!(plan = %name, namespace = %ns, task = %new.name, "task name taken by a Task this Plan does not own");
                    ctx.add_foreign(&uid, new.name.clone());
                    return Ok(Action::requeue(Duration::from_millis(200)));
                }
            }
            Err(e) => return Err(e.into()),
        }
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
        // look again; the Tasks already created are found by name.
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
            info!(plan = %name, namespace = %ns, event = s.event, "{note}");
            crate::cache::clip(&mut note, crate::task::controller::NOTE_MAX);
            (s, note)
        })
        .collect();
    futures::future::join_all(
        notes
            .into_iter()
            .map(|(s, note)| ctx.base.event(&*plan, s.warning, s.event, "Plan", note)),
    )
    .await;
    Ok(action)
}

/// The Plan's own Tasks, with every succeeded Task's output at hand (a large one is read
/// from its ConfigMap).
async fn observe_tasks(
    tasks_api: &Api<Task>,
    client: &kube::Client,
    ns: &str,
    uid: &str,
) -> Result<Tasks, Error> {
    let list = tasks_api
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN_UID}={uid}")))
        .await?;
    let mut tasks: Tasks = list
        .items
        .iter()
        .filter_map(|t| TaskObs::of(t, uid))
        .collect();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for obs in tasks.values_mut() {
        let (TaskPhase::Succeeded, None, Some(cm)) = (obs.phase, &obs.output, &obs.output_ref)
        else {
            continue;
        };
        if let Some(c) = configmaps.get_opt(cm).await? {
            obs.output = c
                .binary_data
                .and_then(|d| d.get(ari_crds::names::OUTPUT_KEY).map(|b| b.0.clone()));
        }
    }
    Ok(tasks)
}

/// The Task of a step attempt (or the planner), owned by the Plan and labelled with its uid.
fn task_object(plan: &Plan, ns: &str, new: &NewTask) -> Result<Task, Error> {
    // Built from JSON so fields added to TaskSpec later take their defaults here.
    let mut spec = json!({"agentRef": {"name": new.agent}});
    match std::str::from_utf8(&new.input) {
        Ok(text) => spec["input"] = json!(text),
        Err(_) => {
            use base64::Engine as _;
            spec["inputBase64"] =
                json!(base64::engine::general_purpose::STANDARD.encode(&new.input));
        }
    }
    if let Some(r) = &new.requirements {
        spec["requirements"] = json!(task_requirements(r));
    }
    if let Some(f) = new.fuel {
        spec["fuel"] = json!(f);
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
