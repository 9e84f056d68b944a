//! The Plan reconcile against a mocked API server and a filled Plan Task cache: what it
//! creates, reads, cancels and writes.

use std::sync::Arc;

use ari_crds::{Agent, Plan, Task};
use serde_json::{Value, json};

use super::controller::{PlanContext, reconcile};
use crate::config::Settings;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::testutil::{Log, find, mock_client, status};

const TASKS: &str = "/apis/ari.dev/v1alpha1/namespaces/demo/tasks";

fn ctx(client: kube::Client, agents: &[Value]) -> Arc<PlanContext> {
    ctx_with(client, agents, &[])
}

/// A context whose Plan Task cache holds `tasks` (trimmed, as the watch stores them).
fn ctx_with(client: kube::Client, agents: &[Value], tasks: &[Value]) -> Arc<PlanContext> {
    let metrics = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}")));
    let registry = Arc::new(
        crate::agent::image::registry_client(&Settings::default())
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let base = Arc::new(Context::new(
        client,
        Settings::default(),
        metrics,
        Some("test".into()),
        registry,
    ));
    let (store, mut writer) = kube::runtime::reflector::store();
    for a in agents {
        let a: Agent = serde_json::from_value(a.clone()).unwrap_or_else(|e| panic!("{e}"));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(a));
    }
    let (task_store, mut task_writer) = kube::runtime::reflector::store();
    for t in tasks {
        let mut t: Task = serde_json::from_value(t.clone()).unwrap_or_else(|e| panic!("{e}"));
        super::observe::trim_plan_task(&mut t);
        task_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(t));
    }
    Arc::new(PlanContext::new(base, store, task_store))
}

fn agent(name: &str) -> Value {
    json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"module": {"configMap": {"name": "m", "key": "k"}}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    })
}

fn plan(spec: Value) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": "p", "namespace": "demo", "uid": "plan-uid", "generation": 1,
                     "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn chain() -> Value {
    json!({"steps": [
        {"name": "a", "agentRef": {"name": "echo"}, "input": "hello"},
        {"name": "b", "agentRef": {"name": "echo"}, "inputFrom": [{"step": "a"}]}
    ]})
}

fn owned_task(name: &str, phase: &str, output: Option<&str>) -> Value {
    let mut t = json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
            "labels": {"ari.dev/plan-uid": "plan-uid"},
            "ownerReferences": [{"apiVersion": "ari.dev/v1alpha1", "kind": "Plan", "name": "p",
                                 "uid": "plan-uid", "controller": true}]},
        "spec": {"agentRef": {"name": "echo"}, "input": "hello"},
        "status": {"phase": phase}
    });
    if let Some(o) = output {
        t["status"]["output"] = json!(o);
        t["status"]["outputSha256"] = json!(ari_model::sha256_hex(o.as_bytes()));
        t["status"]["reason"] = json!("Completed");
        t["status"]["completionTime"] = json!("2026-01-01T00:00:05Z");
    }
    t
}

/// A Plan validated earlier whose status records step `a` as Task `p-a` (uid `uid-p-a`).
fn running(spec: Value, a_phase: &str) -> Plan {
    let mut p = plan(spec);
    p.status = Some(ari_crds::PlanStatus {
        phase: Some(ari_crds::PlanPhase::Running),
        proposal_sha256: Some(ari_model::sha256_hex(
            &serde_json::to_vec(&p.spec.steps).unwrap_or_default(),
        )),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Validated".into(),
            status: "True".into(),
            reason: "Accepted".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }],
        steps: vec![ari_crds::StepStatus {
            name: "a".into(),
            phase: serde_json::from_value(json!(a_phase)).unwrap_or_default(),
            task: Some("p-a".into()),
            task_uid: Some("uid-p-a".into()),
            attempts: Some(1),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn routes(tasks: Vec<Value>) -> impl Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static {
    move |method, path, body| match (method, path) {
        ("GET", p) if p.starts_with(TASKS) => {
            let name = p.rsplit('/').next().unwrap_or_default();
            match tasks.iter().find(|t| t["metadata"]["name"] == name) {
                Some(t) => (200, t.clone()),
                None => status(404, "NotFound"),
            }
        }
        ("POST", TASKS) => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default();
            if tasks.iter().any(|t| t["metadata"]["name"] == name) {
                return status(409, "AlreadyExists");
            }
            let mut made = body.clone();
            made["metadata"]["uid"] = json!(format!("uid-{name}"));
            (201, made)
        }
        ("PATCH", p) if p.starts_with(TASKS) => {
            let name = p.rsplit('/').next().unwrap_or_default();
            let mut t = owned_task(name, "Running", None);
            t["spec"]["cancelled"] = json!(true);
            (200, t)
        }
        ("PUT", "/apis/ari.dev/v1alpha1/namespaces/demo/plans/p/status") => (200, body.clone()),
        ("POST", p) if p.ends_with("/events") => (201, body.clone()),
        _ => status(404, "NotFound"),
    }
}

fn written_status(log: &Log) -> Value {
    let puts = find(log, "PUT", "plans/p/status");
    assert_eq!(puts.len(), 1, "{puts:?}");
    puts[0].body["status"].clone()
}

fn posted(log: &Log) -> Vec<Value> {
    find(log, "POST", TASKS)
        .iter()
        .map(|p| p.body["metadata"]["name"].clone())
        .collect()
}

#[tokio::test]
async fn a_new_plan_creates_the_first_step_owned_and_labelled_and_records_its_uid() {
    let (client, log) = mock_client(routes(vec![]));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(
        find(&log, "GET", TASKS).is_empty(),
        "a pass reads no Task: the cache has them"
    );
    let posts = find(&log, "POST", TASKS);
    assert_eq!(posts.len(), 1, "only step a may start");
    let t = &posts[0].body;
    assert_eq!(t["metadata"]["name"], "p-a");
    assert_eq!(t["spec"]["input"], "hello");
    assert_eq!(t["metadata"]["labels"]["ari.dev/plan-uid"], "plan-uid");
    assert_eq!(t["metadata"]["labels"]["ari.dev/plan-step"], "a");
    let owner = &t["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["uid"].as_str(), owner["controller"].as_bool()),
        (Some("plan-uid"), Some(true))
    );
    let st = written_status(&log);
    assert_eq!(st["phase"], "Running");
    assert_eq!(
        (
            st["steps"][0]["task"].as_str(),
            st["steps"][0]["taskUid"].as_str()
        ),
        (Some("p-a"), Some("uid-p-a")),
        "the uid the API server gave is recorded"
    );
    let events: Vec<_> = st["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(
        events,
        [json!("Proposed"), json!("Validated"), json!("StepStarted")]
    );
    let put = &find(&log, "PUT", "plans/p/status")[0];
    assert_eq!(
        put.body["metadata"]["resourceVersion"], "7",
        "guarded by resourceVersion"
    );
    assert_eq!(
        find(&log, "POST", "/events").len(),
        3,
        "one Event per stage"
    );
}

#[tokio::test]
async fn a_dependants_input_is_read_once_from_the_recorded_task_when_it_starts() {
    let a = owned_task("p-a", "Succeeded", Some("from a"));
    let (client, log) = mock_client(routes(vec![a.clone()]));
    let ctx = ctx_with(client, &[agent("echo")], &[a]);
    let res = reconcile(Arc::new(running(chain(), "Running")), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(posted(&log), [json!("p-b")]);
    assert_eq!(find(&log, "POST", TASKS)[0].body["spec"]["input"], "from a");
    assert_eq!(
        find(&log, "GET", "tasks/p-a").len(),
        1,
        "read once, to start b"
    );
}

#[tokio::test]
async fn an_output_that_is_not_the_recorded_one_fails_the_dependant_input_unavailable() {
    let a = owned_task("p-a", "Succeeded", Some("from a"));
    let mut changed = a.clone();
    changed["status"]["output"] = json!("changed after the fact");
    let (client, log) = mock_client(routes(vec![changed]));
    let ctx = ctx_with(client, &[agent("echo")], &[a]);
    let res = reconcile(Arc::new(running(chain(), "Running")), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(posted(&log).is_empty());
    let st = written_status(&log);
    assert_eq!(st["steps"][1]["reason"], "InputUnavailable");
}

#[tokio::test]
async fn a_forged_task_under_a_steps_name_is_not_taken_and_the_step_runs_under_another_name() {
    // Someone made p-a first, with the Plan's labels and a forged controller owner reference.
    let mut forged = owned_task("p-a", "Succeeded", Some("forged"));
    forged["spec"]["input"] = json!("not hello");
    forged["metadata"]["uid"] = json!("forged-uid");
    let (client, log) = mock_client(routes(vec![forged.clone()]));
    let ctx = ctx_with(client, &[agent("echo")], &[forged]);
    let res = reconcile(Arc::new(plan(chain())), ctx.clone()).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(
        find(&log, "PUT", "plans/p/status").is_empty(),
        "nothing recorded"
    );
    let res = reconcile(Arc::new(plan(chain())), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    let names = posted(&log);
    assert_eq!(names.len(), 2, "{names:?}");
    let second = names[1].as_str().unwrap_or_default();
    assert!(
        second.starts_with("p-a.") && second.len() == "p-a.xxxxx".len(),
        "{second}"
    );
    let st = written_status(&log);
    assert_eq!(st["steps"][0]["task"], second);
    assert_eq!(st["steps"][0]["taskUid"], format!("uid-{second}"));
    assert_eq!(
        st["steps"][1]["phase"], "Waiting",
        "b never gets the forged output"
    );
}

#[tokio::test]
async fn a_task_this_operator_made_before_it_restarted_is_recognised_not_made_again() {
    // The previous operator created p-a and died before its status write: the same Task.
    let (client, _) = mock_client(routes(vec![]));
    let wanted = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(wanted.is_ok());
    let mut mine = owned_task("p-a", "Running", None);
    mine["metadata"]["labels"] = json!({"ari.dev/plan-uid": "plan-uid", "ari.dev/plan-step": "a",
                                        "ari.dev/plan": "p"});
    mine["metadata"]["ownerReferences"] = json!([{"apiVersion": "ari.dev/v1alpha1",
        "kind": "Plan", "name": "p", "uid": "plan-uid", "controller": true,
        "blockOwnerDeletion": true}]);
    mine["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:01Z");
    let (client, log) = mock_client(routes(vec![mine]));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    let st = written_status(&log);
    assert_eq!(st["steps"][0]["taskUid"], "uid-p-a");
    assert_eq!(posted(&log), [json!("p-a")], "one create, met by its Task");
}

#[tokio::test]
async fn a_plan_naming_a_missing_agent_is_rejected_with_no_task_and_a_warning_event() {
    let (client, log) = mock_client(routes(vec![]));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[])).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "POST", TASKS).is_empty());
    let st = written_status(&log);
    assert_eq!(
        (st["phase"].as_str(), st["reason"].as_str()),
        (Some("Failed"), Some("Rejected"))
    );
    assert_eq!(st["violationCount"], 2);
    assert_eq!(st["violations"][0]["rule"], "unknown-agent");
    let events = find(&log, "POST", "/events");
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "Rejected" && e.body["type"] == "Warning")
    );
}

#[tokio::test]
async fn cancelling_a_plan_patches_its_running_step_cancelled() {
    let mut spec = chain();
    spec["cancelled"] = json!(true);
    let a = owned_task("p-a", "Running", None);
    let (client, log) = mock_client(routes(vec![a.clone()]));
    let ctx = ctx_with(client, &[agent("echo")], &[a]);
    let res = reconcile(Arc::new(running(spec, "Running")), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    let patches = find(&log, "PATCH", "tasks/p-a");
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].body, json!({"spec": {"cancelled": true}}));
    assert!(find(&log, "POST", TASKS).is_empty());
}
