//! Attacks on Plans by a namespace user (issue 26, items 3, 5, 14, 15): a planner proposing
//! step names of 60 KB, a Task forged under a step's name (Plan labels and a controller owner
//! reference to the Plan) that also squats that name, and a proposal naming an Agent outside
//! the Plan's `allowedAgents`. The user acts with its own token (Agents, Tasks and Plans of its
//! namespace); module ConfigMaps are put in place by the admin. Every trial ends by proving
//! the operator still serves another namespace.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ari_crds::plan_view::{LABEL_PLAN_STEP, LABEL_PLAN_UID};
use ari_crds::{Agent, Plan, PlanPhase, PlanReason, Task};
use ari_e2e::scenario::*;
use ari_e2e::wait;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::operator_attacks::{agent_json, create, serves_elsewhere};
use ari_e2e::namespace_user;

/// The trials of this module, for `main.rs`.
pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![
        (
            "an_echo_planner_proposing_60_kb_step_names_ends_rejected_in_one_short_write",
            huge_names,
        ),
        (
            "a_task_forged_under_a_steps_name_is_neither_taken_nor_blocking",
            forged_step,
        ),
        (
            "a_proposal_naming_an_agent_outside_allowed_agents_is_rejected",
            outside_allow_list,
        ),
    ]
}

/// Waits until the Agent's executor pod is Ready and then the Agent: an Agent can report
/// `Ready` once before its first executor pod exists and turn not Ready while that pod starts,
/// and a validator seeing that moment would reject with `agent-not-ready` instead.
async fn settled(admin: &Client, ns: &str, agent: &str) -> Result<()> {
    let selector = format!("ari.dev/agent={agent}");
    wait::until(&format!("{agent}'s executor Ready"), wait::DEFAULT, || {
        ready_pods(admin, ns, &selector, 1)
    })
    .await?;
    agent_ready(admin, ns, agent).await?;
    Ok(())
}

fn plan_json(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
           "metadata": {"name": name}, "spec": spec})
}

/// Waits until the Plan has finished, and returns it.
async fn finished(client: &Client, ns: &str, name: &str, timeout: Duration) -> Result<Plan> {
    let api: Api<Plan> = Api::namespaced(client.clone(), ns);
    Ok(
        wait::until(&format!("Plan {name} finished"), timeout, || async {
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            if p.phase().is_finished() {
                Ok(p)
            } else {
                Err(format!(
                    "status: {:?}",
                    p.status.map(|s| (s.phase, s.message))
                ))
            }
        })
        .await?,
    )
}

fn ended(p: &Plan, phase: PlanPhase, reason: PlanReason) -> Result<()> {
    let s = p.status.clone().unwrap_or_default();
    ensure!(
        (s.phase, s.reason) == (Some(phase), Some(reason)),
        "plan {} ended {:?}/{:?}: {:?}",
        p.name_any(),
        s.phase,
        s.reason,
        s.message
    );
    Ok(())
}

/// Item 3: the stock echo as planner, its input a proposal whose one step has a 63 KB name,
/// needs 6 capabilities and waits for 64 missing steps. The old validator put the name into
/// each of its 71 violations (4.5 MB of status the API server refused, every 5 s, forever); now
/// the bounds are checked first: one violation, names cut, the Plan Rejected in one write.
fn huge_names(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-plan-names", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        create::<Agent>(&user, &ns, agent_json("echo", json!({}))).await?;
        settled(&admin, &ns, "echo").await?;
        let name = "中".repeat(21_000);
        let missing: Vec<String> = (0..64).map(|i| format!("m{i}")).collect();
        let proposal = json!({"steps": [{
            "name": name, "agentRef": {"name": "echo"}, "dependsOn": missing,
            "requirements": {"capabilities": ["storage", "network", "randomness", "signing",
                                              "timeAccess", "delegation"]}}]});
        let spec =
            json!({"planner": {"agentRef": {"name": "echo"}, "input": proposal.to_string()}});
        create::<Plan>(&user, &ns, plan_json("names", spec)).await?;
        let plan = finished(&admin, &ns, "names", wait::DEFAULT).await?;
        ended(&plan, PlanPhase::Failed, PlanReason::Rejected)?;
        let status = plan.status.clone().unwrap_or_default();
        ensure!(
            status.violations.len() == 1 && status.violation_count == Some(1),
            "violations: {}",
            status.violations.len()
        );
        let v = &status.violations[0];
        ensure!(v.rule.id() == "out-of-range", "{v}");
        let shown = v.step.clone().unwrap_or_default();
        ensure!(
            shown.len() <= 84 && shown.ends_with('…'),
            "step {}",
            shown.len()
        );
        let size = serde_json::to_vec(&status)?.len();
        ensure!(size < 16_384, "status is {size} bytes");
        let validated = ari_crds::conditions::find(&status.conditions, "Validated")
            .context("no Validated condition")?;
        ensure!(
            validated.message.len() <= 1_100,
            "{}",
            validated.message.len()
        );
        serves_elsewhere(ctx, &admin, "t-plan-names-other").await
    })
}

/// Items 5 and 14: while step `a` runs, the user creates `hijack-b` as step `b`'s result: the
/// Plan's labels, a controller owner reference to the Plan, another Agent, another input. The
/// old operator took it as `b`'s result (before `a` had even ended); now `b` runs as a Task of
/// its own (`hijack-b.xxxxx`, its uid recorded) on `a`'s output, and says why it is not named
/// `hijack-b`.
fn forged_step(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-plan-forge", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.module_configmap(&ns, "loop-module", "sha256-loop")?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        create::<Agent>(&user, &ns, agent_json("echo", json!({}))).await?;
        create::<Agent>(&user, &ns, agent_json("evil", json!({}))).await?;
        let mut slow = agent_json(
            "loop",
            json!({"limits": {"fuel": 1_000_000_000_000u64, "timeoutSeconds": 120}}),
        );
        slow["spec"]["module"]["configMap"]["name"] = json!("loop-module");
        create::<Agent>(&user, &ns, slow).await?;
        for a in ["echo", "evil", "loop"] {
            settled(&admin, &ns, a).await?;
        }
        let spec = json!({"steps": [
            {"name": "a", "agentRef": {"name": "loop"}, "input": "4000000 plan"},
            {"name": "b", "agentRef": {"name": "echo"}, "inputFrom": [{"step": "a"}]}]});
        create::<Plan>(&user, &ns, plan_json("hijack", spec)).await?;
        let uid = Api::<Plan>::namespaced(user.clone(), &ns)
            .get("hijack")
            .await?
            .uid()
            .context("no uid")?;
        let forged = json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "hijack-b",
                "labels": {LABEL_PLAN_UID: uid, LABEL_PLAN_STEP: "b", "ari.dev/plan": "hijack"},
                "ownerReferences": [{"apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
                    "name": "hijack", "uid": uid, "controller": true}]},
            "spec": {"agentRef": {"name": "evil"}, "input": "forged"}});
        create::<Task>(&user, &ns, forged).await?;
        let plan = finished(&admin, &ns, "hijack", Duration::from_secs(240)).await?;
        ended(&plan, PlanPhase::Succeeded, PlanReason::Completed)?;
        let status = plan.status.clone().unwrap_or_default();
        let step = |n: &str| status.steps.iter().find(|s| s.name == n).cloned();
        let (a, b) = (step("a").context("no a")?, step("b").context("no b")?);
        let b_task = b.task.clone().unwrap_or_default();
        ensure!(
            b_task.starts_with("hijack-b.") && b_task.len() == "hijack-b.xxxxx".len(),
            "b ran as {b_task}"
        );
        let real = Api::<Task>::namespaced(admin.clone(), &ns)
            .get(&b_task)
            .await?;
        ensure!(real.uid() == b.task_uid, "b's recorded uid is its Task's");
        ensure!(
            real.spec.agent_ref.name == "echo",
            "b ran on {}",
            real.spec.agent_ref.name
        );
        ensure!(
            b.output_sha256 == a.output_sha256,
            "b echoes a's output, not the forged one"
        );
        let started = status
            .history
            .iter()
            .find(|e| e.event == "StepStarted" && e.step.as_deref() == Some("b"))
            .map(|e| e.message.clone())
            .unwrap_or_default();
        ensure!(
            started.contains("hijack-b is held by a Task this Plan did not create"),
            "{started}"
        );
        serves_elsewhere(ctx, &admin, "t-plan-forge-other").await
    })
}

/// Item 15: with `allowedAgents: [echo]`, the echo planner's proposal naming `other` is
/// rejected (`agent-not-allowed`) and no step Task is created.
fn outside_allow_list(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-plan-allow", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        create::<Agent>(&user, &ns, agent_json("echo", json!({}))).await?;
        create::<Agent>(&user, &ns, agent_json("other", json!({}))).await?;
        settled(&admin, &ns, "echo").await?;
        settled(&admin, &ns, "other").await?;
        let proposal = json!({"steps": [
            {"name": "fine", "agentRef": {"name": "echo"}, "input": "hi"},
            {"name": "sneaky", "agentRef": {"name": "other"}, "input": "hi"}]});
        let spec = json!({"allowedAgents": ["echo"],
            "planner": {"agentRef": {"name": "echo"}, "input": proposal.to_string()}});
        create::<Plan>(&user, &ns, plan_json("allow", spec)).await?;
        let plan = finished(&admin, &ns, "allow", wait::DEFAULT).await?;
        ended(&plan, PlanPhase::Failed, PlanReason::Rejected)?;
        let status = plan.status.clone().unwrap_or_default();
        let rules: Vec<(Option<&str>, &str)> = status
            .violations
            .iter()
            .map(|v| (v.step.as_deref(), v.rule.id()))
            .collect();
        ensure!(
            rules == [(Some("sneaky"), "agent-not-allowed")],
            "{rules:?}"
        );
        let tasks = Api::<Task>::namespaced(admin.clone(), &ns)
            .list(&Default::default())
            .await?;
        let names: Vec<String> = tasks.items.iter().map(|t| t.name_any()).collect();
        ensure!(
            names == ["allow-planner"],
            "only the planner ran: {names:?}"
        );
        serves_elsewhere(ctx, &admin, "t-plan-allow-other").await
    })
}
