//! `ari plan verify`: check a whole Plan from its status and its Tasks, offline.
//!
//! For every step that recorded an attestation: the Task is the one the Plan recorded (its
//! uid), runs the step's Agent, and (with `--agents`) ran that Agent's module; the Task's
//! attestation is signed by the trusted key and is the one the Plan recorded (digest), names
//! this Task, and states the output the Plan and the Task record; and its input digest is the
//! digest of the step's literal input, or of the input re-derived from its dependencies'
//! outputs — nothing was changed on the way from one step to the next, and no Task someone
//! else made under the step's name passes for it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use ari_crds::plan_view::planner_task_name;
use ari_crds::{Plan, StepStatus, Task};
use ari_plan::{Proposal, Step, compose_input};
use ari_runtime::attestation::{parse_public_key, sha256_hex};
use clap::Args;
use kube::ResourceExt;
use serde_json::Value;

/// Verify a Plan: every step's attestation (signature, the digest the Plan recorded, output)
/// and that each step's input is what its dependencies' outputs make. Exits 0 when every check
/// passes, 3 when one fails.
#[derive(Args)]
pub struct VerifyArgs {
    /// The Plan as JSON (`kubectl get plan NAME -o json`).
    plan: PathBuf,
    /// Its Tasks as JSON (`kubectl get tasks -l ari.dev/plan-uid=UID -o json`).
    #[arg(long)]
    tasks: PathBuf,
    /// The namespace's attestation key (an Agent's `status.attestationPublicKey`).
    #[arg(long)]
    public_key: String,
    /// The namespace's Agents as JSON (`kubectl get agents -o json`): each step's attestation
    /// must then name its Agent's module (`status.moduleDigest`).
    #[arg(long)]
    agents: Option<PathBuf>,
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<u8> {
    let plan: Plan = serde_json::from_str(
        &std::fs::read_to_string(&args.plan)
            .with_context(|| format!("cannot read {}", args.plan.display()))?,
    )
    .with_context(|| format!("{} is not a Plan", args.plan.display()))?;
    let tasks = read_tasks(&args.tasks)?;
    let modules = match &args.agents {
        Some(path) => Some(read_modules(path)?),
        None => None,
    };
    let key = parse_public_key(&args.public_key)?;
    let name = plan.name_any();
    let verdict = check_plan(&plan, &tasks, &key, modules.as_ref());
    for line in &verdict.checked {
        println!("{line}");
    }
    if verdict.failures.is_empty() {
        println!(
            "ari plan verify: OK: plan {name}: {} step(s) verified, signed by {}",
            verdict.checked.len(),
            args.public_key
        );
        Ok(0)
    } else {
        for f in &verdict.failures {
            println!("ari plan verify: FAILED: {f}");
        }
        Ok(super::super::EXIT_VERIFY_FAILED)
    }
}

/// What checking a Plan found: a line for each step verified, and every failure.
pub(crate) struct PlanVerdict {
    pub checked: Vec<String>,
    pub failures: Vec<String>,
}

/// Checks every step of `plan` that recorded an attestation against `tasks` (its Tasks, by
/// name), the namespace's `key` and, when given, each Agent's module digest.
pub(crate) fn check_plan(
    plan: &Plan,
    tasks: &BTreeMap<String, Task>,
    key: &ed25519_dalek::VerifyingKey,
    modules: Option<&BTreeMap<String, String>>,
) -> PlanVerdict {
    let status = plan.status.clone().unwrap_or_default();
    let steps = match steps_of(plan, tasks) {
        Ok(s) => s,
        Err(why) => {
            return PlanVerdict {
                checked: Vec::new(),
                failures: vec![why],
            };
        }
    };
    let outputs: BTreeMap<String, Vec<u8>> = status
        .steps
        .iter()
        .filter_map(|s| {
            // Only the Task the Plan recorded: another under the same name feeds nothing.
            let task = tasks
                .get(s.task.as_deref()?)
                .filter(|t| t.uid() == s.task_uid)?;
            let out = task.status.clone()?.output?;
            Some((s.name.clone(), out.into_bytes()))
        })
        .collect();
    let mut verdict = PlanVerdict {
        checked: Vec::new(),
        failures: Vec::new(),
    };
    for st in status
        .steps
        .iter()
        .filter(|s| s.attestation_sha256.is_some())
    {
        match check_step(st, &steps, tasks, &outputs, key, modules) {
            Ok(ran) => verdict.checked.push(format!("step {}: {ran}", st.name)),
            Err(why) => verdict.failures.push(format!("step {}: {why}", st.name)),
        }
    }
    verdict
}

/// The steps that ran: the spec's, or the planner's output, which must be what was validated.
fn steps_of(plan: &Plan, tasks: &BTreeMap<String, Task>) -> Result<Vec<Step>, String> {
    if let Some(steps) = &plan.spec.steps {
        return Ok(steps.clone());
    }
    let status = plan.status.clone().unwrap_or_default();
    let planner = status
        .planner_task
        .clone()
        .unwrap_or_else(|| planner_task_name(&plan.name_any()));
    let task = tasks
        .get(&planner)
        .ok_or_else(|| format!("the planner Task {planner} is not in the tasks file"))?;
    if status.planner_task_uid.is_none() || task.uid() != status.planner_task_uid {
        return Err(format!(
            "the planner Task {planner} is not the one the Plan recorded (uid {:?})",
            status.planner_task_uid
        ));
    }
    let wanted = plan
        .spec
        .planner
        .as_ref()
        .map(|p| p.agent_ref.name.as_str());
    if Some(task.spec.agent_ref.name.as_str()) != wanted {
        return Err(format!(
            "the planner Task ran agent {}, not the Plan's planner",
            task.spec.agent_ref.name
        ));
    }
    let output = task
        .status
        .clone()
        .and_then(|s| s.output)
        .ok_or_else(|| format!("the planner Task {planner} has no inline output"))?;
    let recorded = status.proposal_sha256.clone();
    if recorded.as_deref() != Some(sha256_hex(output.as_bytes()).as_str()) {
        return Err("the planner's output is not the proposal the Plan validated".into());
    }
    serde_json::from_str::<Proposal>(&output)
        .map(|p| p.steps)
        .map_err(|e| format!("the planner's output is not a proposal: {e}"))
}

/// Checks one step; says which Task, Agent and module ran it.
fn check_step(
    st: &StepStatus,
    steps: &[Step],
    tasks: &BTreeMap<String, Task>,
    outputs: &BTreeMap<String, Vec<u8>>,
    key: &ed25519_dalek::VerifyingKey,
    modules: Option<&BTreeMap<String, String>>,
) -> Result<String, String> {
    let task_name = st.task.as_deref().ok_or("no Task recorded")?;
    let task = tasks
        .get(task_name)
        .ok_or_else(|| format!("Task {task_name} is not in the tasks file"))?;
    let uid = task.uid().unwrap_or_default();
    if st.task_uid.as_deref() != Some(uid.as_str()) {
        return Err(format!(
            "Task {task_name} (uid {uid}) is not the Task the Plan created (uid {:?})",
            st.task_uid
        ));
    }
    let step = steps
        .iter()
        .find(|s| s.name == st.name)
        .ok_or("the step is not in the plan")?;
    let agent = &task.spec.agent_ref.name;
    if *agent != step.agent_ref.name {
        return Err(format!(
            "Task {task_name} ran agent {agent}, not the step's {}",
            step.agent_ref.name
        ));
    }
    let ts = task.status.clone().unwrap_or_default();
    let envelope = ts.attestation.ok_or("the Task has no attestation")?;
    let att = envelope
        .verify(Some(key))
        .map_err(|e| format!("attestation: {e}"))?
        .predicate;
    if st.attestation_sha256.as_deref() != Some(envelope.sha256().as_str()) {
        return Err("its attestation is not the one the Plan recorded".into());
    }
    if att.task.name != task_name || uid != att.task.uid {
        return Err(format!("the attestation is for Task {:?}", att.task));
    }
    let module = format!("sha256:{}", att.module_sha256);
    if let Some(modules) = modules {
        let want = modules
            .get(agent)
            .ok_or_else(|| format!("agent {agent} is not in the agents file"))?;
        if *want != module {
            return Err(format!(
                "it ran module {module}, not agent {agent}'s {want}"
            ));
        }
    }
    if st.output_sha256.as_deref() != Some(att.output_sha256.as_str())
        || ts.output_sha256.as_deref() != Some(att.output_sha256.as_str())
    {
        return Err("the output digests of Plan, Task and attestation differ".into());
    }
    if let Some(out) = &ts.output
        && sha256_hex(out.as_bytes()) != att.output_sha256
    {
        return Err("its output is not the output its attestation signs: changed".into());
    }
    let input = compose_input(step, outputs).map_err(|e| {
        format!("cannot re-derive its input ({e}); an output kept in a ConfigMap cannot be checked offline")
    })?;
    if sha256_hex(&input) != att.input_sha256 {
        return Err(if step.input_from.is_empty() {
            "its input is not the step's input".into()
        } else {
            "its input is not what its dependencies' outputs make: changed between steps".into()
        });
    }
    Ok(format!(
        "Task {task_name} (uid {uid}), agent {agent}, module {module}"
    ))
}

/// `status.moduleDigest` of each Agent of a List (`kubectl get agents -o json`), by name.
fn read_modules(path: &PathBuf) -> anyhow::Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let items = match doc {
        Value::Object(ref o) if o.contains_key("items") => o
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        one => vec![one],
    };
    Ok(items
        .into_iter()
        .filter_map(|a| {
            let name = a.pointer("/metadata/name")?.as_str()?.to_owned();
            let digest = a.pointer("/status/moduleDigest")?.as_str()?.to_owned();
            Some((name, digest))
        })
        .collect())
}

/// Tasks by name from a List (`kubectl get tasks -o json`), an array, or one Task.
fn read_tasks(path: &PathBuf) -> anyhow::Result<BTreeMap<String, Task>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let items = match doc {
        Value::Array(items) => items,
        Value::Object(ref o) if o.contains_key("items") => o
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        one => vec![one],
    };
    items
        .into_iter()
        .map(|v| {
            let t: Task = serde_json::from_value(v)
                .with_context(|| format!("{}: a Task that does not decode", path.display()))?;
            Ok((t.name_any(), t))
        })
        .collect()
}
