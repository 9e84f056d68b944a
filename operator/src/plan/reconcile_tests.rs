//! The Plan reconcile against a mocked API server: what it creates, cancels and writes.

use std::sync::Arc;

use ari_crds::{Agent, Plan};
use serde_json::{Value, json};

use super::controller::{PlanContext, reconcile};
use crate::config::Settings;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::testutil::{Log, find, mock_client, status};

const TASKS: &str = "/apis/ari.dev/v1alpha1/namespaces/demo/tasks";

fn ctx(client: kube::Client, agents: &[Value]) -> Arc<PlanContext> {
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
    Arc::new(PlanContext::new(base, store))
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

fn task_list(items: Vec<Value>) -> (u16, Value) {
    (
        200,
        json!({"apiVersion": "ari.dev/v1alpha1", "kind": "TaskList", "metadata": {}, "items": items}),
    )
}

fn owned_task(name: &str, phase: &str, output: Option<&str>) -> Value {
    let mut t = json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name, "namespace": "demo",
            "labels": {"ari.dev/plan-uid": "plan-uid"},
            "ownerReferences": [{"apiVersion": "ari.dev/v1alpha1", "kind": "Plan", "name": "p",
                                 "uid": "plan-uid", "controller": true}]},
        "spec": {"agentRef": {"name": "echo"}, "input": "hello"},
        "status": {"phase": phase}
    });
    if let Some(o) = output {
        t["status"]["output"] = json!(o);
        t["status"]["reason"] = json!("Completed");
    }
    t
}

fn routes(tasks: Vec<Value>) -> impl Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static {
    move |method, path, body| match (method, path) {
        ("GET", TASKS) => task_list(tasks.clone()),
        ("POST", TASKS) => (201, body.clone()),
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

#[tokio::test]
async fn a_new_plan_lists_its_tasks_by_uid_creates_the_first_step_owned_and_labelled_and_records_it()
 {
    let (client, log) = mock_client(routes(vec![]));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    let list = find(&log, "GET", TASKS);
    assert!(
        list[0]
            .uri
            .contains("labelSelector=ari.dev%2Fplan-uid%3Dplan-uid"),
        "{}",
        list[0].uri
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
async fn a_task_that_already_exists_is_not_created_again_and_its_output_feeds_the_next_step() {
    let tasks = vec![owned_task("p-a", "Succeeded", Some("from a"))];
    let (client, log) = mock_client(routes(tasks));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    let posts = find(&log, "POST", TASKS);
    let names: Vec<_> = posts
        .iter()
        .map(|p| p.body["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("p-b")]);
    assert_eq!(posts[0].body["spec"]["input"], "from a");
}

#[tokio::test]
async fn a_task_labelled_like_the_plans_but_not_owned_by_it_is_ignored() {
    let mut forged = owned_task("p-a", "Succeeded", Some("forged"));
    forged["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let (client, log) = mock_client(routes(vec![forged]));
    let res = reconcile(Arc::new(plan(chain())), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    let posts = find(&log, "POST", TASKS);
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].body["metadata"]["name"], "p-a",
        "b never gets the forged output"
    );
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
        ..Default::default()
    });
    let (client, log) = mock_client(routes(vec![owned_task("p-a", "Running", None)]));
    let res = reconcile(Arc::new(p), ctx(client, &[agent("echo")])).await;
    assert!(res.is_ok(), "{res:?}");
    let patches = find(&log, "PATCH", "tasks/p-a");
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].body, json!({"spec": {"cancelled": true}}));
    assert!(find(&log, "POST", TASKS).is_empty());
}
