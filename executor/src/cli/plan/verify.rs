//! `ari plan verify`: check a whole Plan from its status and its Tasks, offline.
//!
//! For every step that recorded an attestation: the Task's attestation is signed by the
//! trusted key and is the one the Plan recorded (digest), names this Task, and states the
//! output the Plan and the Task record; and, for a step fed by earlier steps, its input digest
//! is the digest of the input re-derived from those steps' outputs — nothing was changed on
//! the way from one step to the next.

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
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<u8> {
    let plan: Plan = serde_json::from_str(
        &std::fs::read_to_string(&args.plan)
            .with_context(|| format!("cannot read {}", args.plan.display()))?,
    )
    .with_context(|| format!("{} is not a Plan", args.plan.display()))?;
    let tasks = read_tasks(&args.tasks)?;
    let key = parse_public_key(&args.public_key)?;
    let name = plan.name_any();
    let status = plan.status.clone().unwrap_or_default();
    let steps = match steps_of(&plan, &tasks) {
        Ok(s) => s,
        Err(why) => {
            println!("ari plan verify: FAILED: {why}");
            return Ok(super::super::EXIT_VERIFY_FAILED);
        }
    };
    let outputs: BTreeMap<String, Vec<u8>> = status
        .steps
        .iter()
        .filter_map(|s| {
            let out = tasks.get(s.task.as_deref()?)?.status.clone()?.output?;
            Some((s.name.clone(), out.into_bytes()))
        })
        .collect();
    let mut failures = Vec::new();
    let mut verified = 0;
    for st in &status.steps {
        if st.attestation_sha256.is_none() {
            continue;
        }
        match check_step(st, &steps, &tasks, &outputs, &key) {
            Ok(()) => verified += 1,
            Err(why) => failures.push(format!("step {}: {why}", st.name)),
        }
    }
    if failures.is_empty() {
        println!(
            "ari plan verify: OK: plan {name}: {verified} step(s) verified, signed by {}",
            args.public_key
        );
        Ok(0)
    } else {
        for f in &failures {
            println!("ari plan verify: FAILED: {f}");
        }
        Ok(super::super::EXIT_VERIFY_FAILED)
    }
}

/// The steps that ran: the spec's, or the planner's output, which must be what was validated.
fn steps_of(plan: &Plan, tasks: &BTreeMap<String, Task>) -> Result<Vec<Step>, String> {
    if let Some(steps) = &plan.spec.steps {
        return Ok(steps.clone());
    }
    let planner = planner_task_name(&plan.name_any());
    let output = tasks
        .get(&planner)
        .and_then(|t| t.status.clone())
        .and_then(|s| s.output)
        .ok_or_else(|| format!("the planner Task {planner} or its inline output is missing"))?;
    let recorded = plan.status.as_ref().and_then(|s| s.proposal_sha256.clone());
    if recorded.as_deref() != Some(sha256_hex(output.as_bytes()).as_str()) {
        return Err("the planner's output is not the proposal the Plan validated".into());
    }
    serde_json::from_str::<Proposal>(&output)
        .map(|p| p.steps)
        .map_err(|e| format!("the planner's output is not a proposal: {e}"))
}

fn check_step(
    st: &StepStatus,
    steps: &[Step],
    tasks: &BTreeMap<String, Task>,
    outputs: &BTreeMap<String, Vec<u8>>,
    key: &ed25519_dalek::VerifyingKey,
) -> Result<(), String> {
    let task_name = st.task.as_deref().ok_or("no Task recorded")?;
    let task = tasks
        .get(task_name)
        .ok_or_else(|| format!("Task {task_name} is not in the tasks file"))?;
    let ts = task.status.clone().unwrap_or_default();
    let att = ts.attestation.ok_or("the Task has no attestation")?;
    att.verify_signature(Some(key))
        .map_err(|e| format!("attestation: {e}"))?;
    if st.attestation_sha256.as_deref() != Some(att.sha256().as_str()) {
        return Err("its attestation is not the one the Plan recorded".into());
    }
    if att.task.name != task_name || task.uid().as_deref() != Some(att.task.uid.as_str()) {
        return Err(format!("the attestation is for Task {:?}", att.task));
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
    let step = steps
        .iter()
        .find(|s| s.name == st.name)
        .ok_or("the step is not in the plan")?;
    if step.input_from.is_empty() {
        return Ok(());
    }
    let input = compose_input(step, outputs).map_err(|e| {
        format!("cannot re-derive its input ({e}); an output kept in a ConfigMap cannot be checked offline")
    })?;
    if sha256_hex(&input) != att.input_sha256 {
        return Err(
            "its input is not what its dependencies' outputs make: changed between steps".into(),
        );
    }
    Ok(())
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
