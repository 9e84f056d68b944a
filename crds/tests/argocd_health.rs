//! The Argo CD health checks shipped in `docs/argocd/` run (Lua 5.1, the dialect Argo CD's
//! gopher-lua speaks) against Agents, Tasks and Plans built from the Rust types, so a renamed status
//! field or condition breaks this test rather than every user's dashboard. Also checks that
//! the `argocd-cm` snippet embeds the scripts verbatim.

use std::path::{Path, PathBuf};

use ari_crds::conditions::{self, ConditionStatus};
use ari_crds::{
    Agent, AgentStatus, MCPServer, MCPServerStatus, ModelConfig, ModelConfigStatus, Plan,
    PlanPhase, PlanReason, PlanStatus, Task, TaskPhase, TaskReason, TaskStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use mlua::serde::SerializeOptions;
use mlua::{Lua, LuaSerdeExt, Table};
use serde_json::json;

fn argocd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/argocd")
}

fn script(name: &str) -> String {
    let path = argocd_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Runs a health script with `obj` bound as Argo CD binds it (JSON nulls become nil).
fn health(script: &str, obj: &serde_json::Value) -> (String, String) {
    let lua = Lua::new();
    let opts = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    let value = lua.to_value_with(obj, opts).expect("object as Lua value");
    lua.globals().set("obj", value).expect("set obj");
    let hs: Table = lua.load(script).eval().expect("health script runs");
    let status: String = hs.get("status").expect("hs.status");
    let message: String = hs.get("message").unwrap_or_default();
    (status, message)
}

/// Each object gets the health status wanted, with a message containing the fragment.
fn expect_health(script: &str, cases: &[(serde_json::Value, &str, &str)]) {
    for (obj, want, fragment) in cases {
        let (status, message) = health(script, obj);
        assert_eq!(status, *want, "{message} for {obj}");
        assert!(
            message.contains(fragment),
            "message {message:?} lacks {fragment:?}"
        );
    }
}

fn agent(generation: i64, status: Option<AgentStatus>) -> serde_json::Value {
    let mut a: Agent = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "echo", "namespace": "n", "generation": generation},
        "spec": {"module": {"configMap": {"name": "echo-module", "key": "module.wasm"}}}
    }))
    .expect("agent");
    a.status = status;
    serde_json::to_value(&a).expect("agent JSON")
}

fn agent_status(
    observed: i64,
    conds: &[(&str, ConditionStatus, &str, &str)],
    ready_replicas: i32,
) -> AgentStatus {
    let mut s = AgentStatus {
        observed_generation: Some(observed),
        ready_replicas: Some(ready_replicas),
        replicas: Some(1),
        ..Default::default()
    };
    for (ty, st, reason, msg) in conds {
        conditions::set(
            &mut s.conditions,
            ty,
            *st,
            reason,
            (*msg).to_owned(),
            Some(observed),
            Time(Timestamp::UNIX_EPOCH),
        );
    }
    s
}

use ConditionStatus::{False, True};

#[test]
fn agent_health_follows_generation_validity_module_and_readiness() {
    let lua = script("agent-health.lua");
    let ok = [
        (conditions::VALID, True, "Valid", ""),
        (conditions::MODULE_RESOLVED, True, "Resolved", "sha256:ab"),
    ];
    let cases = [
        (agent(1, None), "Progressing", "operator"),
        (
            agent(2, Some(agent_status(1, &ok, 1))),
            "Progressing",
            "generation 2",
        ),
        (
            agent(
                1,
                Some(agent_status(
                    1,
                    &[(
                        conditions::VALID,
                        False,
                        "Invalid",
                        "network.allowedHosts ftp://x: bad scheme",
                    )],
                    0,
                )),
            ),
            "Degraded",
            "bad scheme",
        ),
        (
            agent(
                1,
                Some(agent_status(
                    1,
                    &[
                        (conditions::VALID, True, "Valid", ""),
                        (
                            conditions::MODULE_RESOLVED,
                            False,
                            "ConfigMapNotFound",
                            "ConfigMap echo-module not found",
                        ),
                        (
                            conditions::READY,
                            False,
                            "ModuleNotResolved",
                            "module not resolved",
                        ),
                    ],
                    0,
                )),
            ),
            "Degraded",
            "ConfigMapNotFound",
        ),
        (
            agent(
                1,
                Some(agent_status(
                    1,
                    &[
                        ok[0],
                        ok[1],
                        (
                            conditions::READY,
                            False,
                            "NoExecutorAvailable",
                            "waiting for an available executor",
                        ),
                    ],
                    0,
                )),
            ),
            "Progressing",
            "NoExecutorAvailable",
        ),
        (
            agent(
                1,
                Some(agent_status(
                    1,
                    &[
                        ok[0],
                        ok[1],
                        (
                            conditions::READY,
                            True,
                            "ExecutorsAvailable",
                            "2 executor(s) available",
                        ),
                    ],
                    2,
                )),
            ),
            "Healthy",
            "2 executor(s)",
        ),
    ];
    expect_health(&lua, &cases);
}

fn task(status: Option<TaskStatus>) -> serde_json::Value {
    let mut t: Task = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "t", "namespace": "n", "generation": 1},
        "spec": {"agentRef": {"name": "echo"}, "input": "hi"}
    }))
    .expect("task");
    t.status = status;
    serde_json::to_value(&t).expect("task JSON")
}

#[test]
fn task_health_follows_phase_and_reason() {
    let lua = script("task-health.lua");
    let phase = |p: TaskPhase, reason: Option<TaskReason>, msg: Option<&str>| TaskStatus {
        phase: Some(p),
        reason,
        message: msg.map(str::to_owned),
        executor: Some("echo-executor-abc".into()),
        ..Default::default()
    };
    let cases = [
        (task(None), "Progressing", "Pending"),
        (
            task(Some(phase(TaskPhase::Pending, None, None))),
            "Progressing",
            "Pending",
        ),
        (
            task(Some(phase(TaskPhase::Running, None, None))),
            "Progressing",
            "echo-executor-abc",
        ),
        (
            task(Some(phase(
                TaskPhase::Succeeded,
                Some(TaskReason::Completed),
                None,
            ))),
            "Healthy",
            "Completed",
        ),
        (
            task(Some(phase(
                TaskPhase::Failed,
                Some(TaskReason::FuelExhausted),
                Some("used 10000000 fuel"),
            ))),
            "Degraded",
            "FuelExhausted: used 10000000 fuel",
        ),
        (
            task(Some(phase(
                TaskPhase::Failed,
                Some(TaskReason::CapabilityDenied),
                None,
            ))),
            "Degraded",
            "CapabilityDenied",
        ),
        (
            task(Some(phase(
                TaskPhase::Cancelled,
                Some(TaskReason::Cancelled),
                Some("spec.cancelled was set"),
            ))),
            "Degraded",
            "Cancelled: spec.cancelled was set",
        ),
    ];
    expect_health(&lua, &cases);
}

fn plan(generation: i64, status: Option<PlanStatus>) -> serde_json::Value {
    let mut p: Plan = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": "p", "namespace": "n", "generation": generation},
        "spec": {"steps": [{"name": "a", "agentRef": {"name": "echo"}, "input": "hi"}]}
    }))
    .expect("plan");
    p.status = status;
    serde_json::to_value(&p).expect("plan JSON")
}

#[test]
fn plan_health_follows_phase_reason_and_progress() {
    let lua = script("plan-health.lua");
    let at = |phase: PlanPhase, reason: Option<PlanReason>, progress: &str| PlanStatus {
        phase: Some(phase),
        reason,
        observed_generation: Some(1),
        progress: Some(progress.into()),
        ..Default::default()
    };
    let rejected = PlanStatus {
        violation_count: Some(3),
        message: Some("the proposal breaks 3 rules".into()),
        ..at(PlanPhase::Failed, Some(PlanReason::Rejected), "0/4")
    };
    let cases = [
        (plan(1, None), "Progressing", "Pending"),
        (
            plan(2, Some(at(PlanPhase::Running, None, "1/4"))),
            "Progressing",
            "generation 2",
        ),
        (
            plan(1, Some(at(PlanPhase::Planning, None, "0/0"))),
            "Progressing",
            "Planning",
        ),
        (
            plan(1, Some(at(PlanPhase::Running, None, "2/4"))),
            "Progressing",
            "Running (2/4 steps)",
        ),
        (
            plan(
                1,
                Some(at(PlanPhase::Succeeded, Some(PlanReason::Completed), "4/4")),
            ),
            "Healthy",
            "Succeeded (4/4 steps)",
        ),
        (
            plan(1, Some(rejected)),
            "Degraded",
            "Rejected (3 rule(s) broken): the proposal breaks 3 rules",
        ),
        (
            plan(
                1,
                Some(at(PlanPhase::Failed, Some(PlanReason::StepFailed), "1/4")),
            ),
            "Degraded",
            "StepFailed",
        ),
        (
            plan(
                1,
                Some(at(PlanPhase::Cancelled, Some(PlanReason::Cancelled), "1/4")),
            ),
            "Degraded",
            "Cancelled: Cancelled",
        ),
    ];
    expect_health(&lua, &cases);
}

fn model_config(
    generation: i64,
    observed: i64,
    ready: Option<(ConditionStatus, &str)>,
) -> serde_json::Value {
    let mut mc: ModelConfig = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfig",
        "metadata": {"name": "m", "namespace": "n", "generation": generation},
        "spec": {"provider": "OpenAI", "endpoint": "http://127.0.0.1:8000/v1", "model": "tiny"}
    }))
    .expect("model config");
    let mut status = ModelConfigStatus {
        observed_generation: Some(observed),
        ..Default::default()
    };
    if let Some((st, reason)) = ready {
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            st,
            reason,
            "text",
            Some(observed),
            Time(Timestamp::now()),
        );
    }
    mc.status = Some(status);
    serde_json::to_value(&mc).expect("model config JSON")
}

#[test]
fn model_config_health_follows_generation_and_readiness() {
    let mut unobserved = model_config(1, 1, None);
    unobserved["status"] = serde_json::Value::Null;
    expect_health(
        &script("probed-health.lua"),
        &[
            (unobserved, "Progressing", "Waiting for the ari operator"),
            (
                model_config(2, 1, Some((ConditionStatus::True, "EndpointAnswered"))),
                "Progressing",
                "generation 2",
            ),
            (model_config(1, 1, None), "Progressing", "first probe"),
            (
                model_config(1, 1, Some((ConditionStatus::True, "EndpointAnswered"))),
                "Healthy",
                "EndpointAnswered: text",
            ),
            (
                model_config(1, 1, Some((ConditionStatus::Unknown, "ProbeNotAllowed"))),
                "Healthy",
                "ProbeNotAllowed",
            ),
            (
                model_config(1, 1, Some((ConditionStatus::False, "Unreachable"))),
                "Degraded",
                "Unreachable: text",
            ),
            (
                model_config(1, 1, Some((ConditionStatus::False, "CredentialsNotMarked"))),
                "Degraded",
                "CredentialsNotMarked",
            ),
        ],
    );
}

fn mcp_server(ready: Option<(ConditionStatus, &str)>) -> serde_json::Value {
    let mut server: MCPServer = serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "MCPServer",
        "metadata": {"name": "docs", "namespace": "n", "generation": 1},
        "spec": {"url": "http://127.0.0.1:8000/mcp"}
    }))
    .expect("MCP server");
    let mut status = MCPServerStatus {
        observed_generation: Some(1),
        ..Default::default()
    };
    if let Some((st, reason)) = ready {
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            st,
            reason,
            "text",
            Some(1),
            Time(Timestamp::now()),
        );
    }
    server.status = Some(status);
    serde_json::to_value(&server).expect("MCP server JSON")
}

/// The same script judges an MCPServer, whose reasons are its own.
#[test]
fn mcp_server_health_follows_readiness() {
    expect_health(
        &script("probed-health.lua"),
        &[
            (mcp_server(None), "Progressing", "first probe"),
            (
                mcp_server(Some((ConditionStatus::True, "ToolsListed"))),
                "Healthy",
                "ToolsListed: text",
            ),
            (
                mcp_server(Some((ConditionStatus::Unknown, "ProbeNotAllowed"))),
                "Healthy",
                "ProbeNotAllowed",
            ),
            (
                mcp_server(Some((ConditionStatus::False, "CredentialsNotMarked"))),
                "Degraded",
                "CredentialsNotMarked: text",
            ),
        ],
    );
}

/// The ConfigMap users merge into `argocd-cm` carries the scripts byte for byte.
#[test]
fn argocd_cm_embeds_the_scripts_verbatim() {
    let cm: serde_yaml::Value =
        serde_yaml::from_str(&script("argocd-cm.yaml")).expect("argocd-cm.yaml parses");
    for (key, file) in [
        (
            "resource.customizations.health.ari.dev_Agent",
            "agent-health.lua",
        ),
        (
            "resource.customizations.health.ari.dev_Task",
            "task-health.lua",
        ),
        (
            "resource.customizations.health.ari.dev_ModelConfig",
            "probed-health.lua",
        ),
        (
            "resource.customizations.health.ari.dev_MCPServer",
            "probed-health.lua",
        ),
        (
            "resource.customizations.health.ari.dev_Plan",
            "plan-health.lua",
        ),
    ] {
        let embedded = cm["data"][key].as_str().unwrap_or_default();
        assert_eq!(
            embedded,
            script(file),
            "argocd-cm.yaml {key} differs from {file}"
        );
    }
    for kind in ["Agent", "Task", "Plan", "ModelConfig", "MCPServer"] {
        let key = format!("resource.customizations.ignoreDifferences.ari.dev_{kind}");
        let v = cm["data"][key.as_str()].as_str().unwrap_or_default();
        assert!(v.contains("/status"), "{key} does not ignore /status");
    }
}
