//! Reconcile logic against a mocked API server (tower-test).

use std::sync::Arc;

use ari_crds::{Agent, Task};
use serde_json::{Value, json};

use crate::config::Settings;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::task::controller::{Seen, TaskContext};
use crate::testutil::{Log, find, mock_client, status};

fn ctx(client: kube::Client) -> Arc<Context> {
    ctx_with_registry(client, Arc::new(FakeRegistry::default()))
}

fn ctx_with_registry(
    client: kube::Client,
    registry: Arc<dyn crate::agent::image::Registry>,
) -> Arc<Context> {
    ctx_with(client, registry, Settings::default())
}

fn ctx_with(
    client: kube::Client,
    registry: Arc<dyn crate::agent::image::Registry>,
    settings: Settings,
) -> Arc<Context> {
    let metrics = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}")));
    Arc::new(Context::new(
        client,
        settings,
        metrics,
        Some("test".into()),
        registry,
    ))
}

fn agent_json() -> Value {
    json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "echo", "namespace": "demo", "uid": "agent-uid", "generation": 3,
                     "resourceVersion": "10"},
        "spec": {"module": {"configMap": {"name": "echo-module", "key": "echo.wasm"}},
                 "capabilities": {"storage": {"maxBytes": 1024}},
                 "executor": {"replicas": 3, "concurrency": 8}}
    })
}

/// The real echo component (the operator checks that a module is an agent component), built
/// by `scripts/build-agents.sh`, which the test command runs first.
fn echo_component() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/agents/echo.wasm");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/build-agents.sh first)",
            path.display()
        )
    })
}

fn echo_component_base64() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(echo_component())
}

fn echo_component_sha256() -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(echo_component()))
}

fn echo_body(body: &Value) -> (u16, Value) {
    (200, body.clone())
}

/// Routes for a healthy namespace: module present, no key yet, Deployment fully available.
fn agent_routes(method: &str, path: &str, body: &Value) -> (u16, Value) {
    match (method, path) {
        ("GET", "/api/v1/namespaces/demo/configmaps/echo-module") => (
            200,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "echo-module"},
                "binaryData": {"echo.wasm": echo_component_base64()}
            }),
        ),
        ("GET", "/api/v1/namespaces/demo/secrets/ari-attestation-key") => status(404, "NotFound"),
        ("GET", "/api/v1/namespaces/ari-system/secrets/ari-attestation-key.demo") => {
            status(404, "NotFound")
        }
        ("POST", "/api/v1/namespaces/demo/secrets") => (201, body.clone()),
        ("POST", "/api/v1/namespaces/ari-system/secrets") => (201, body.clone()),
        ("PATCH", "/apis/apps/v1/namespaces/demo/deployments/echo-executor") => {
            let mut d = body.clone();
            d["status"] = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1});
            (200, d)
        }
        ("PATCH", "/apis/ari.dev/v1alpha1/namespaces/demo/agents/echo/status") => {
            let mut a = agent_json();
            a["status"] = body["status"].clone();
            (200, a)
        }
        ("POST", p) if p.ends_with("/events") => (201, body.clone()),
        ("PATCH", _) => echo_body(body),
        _ => status(404, "NotFound"),
    }
}

fn one(log: &Log, method: &str, path: &str) -> crate::testutil::Recorded {
    let found = find(log, method, path);
    assert_eq!(found.len(), 1, "{method} {path}: {found:?}");
    found[0].clone()
}

/// Routes of a healthy namespace whose module ConfigMap is at `resourceVersion` 7.
fn versioned_module_routes(method: &str, path: &str, body: &Value) -> (u16, Value) {
    match (method, path) {
        ("GET", "/api/v1/namespaces/demo/configmaps/echo-module") => (
            200,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "echo-module", "resourceVersion": "7"},
                "binaryData": {"echo.wasm": echo_component_base64()}
            }),
        ),
        _ => agent_routes(method, path, body),
    }
}

#[tokio::test]
async fn agents_of_one_module_read_its_configmap_whole_once_per_version() {
    let (client, log) = mock_client(versioned_module_routes);
    let ctx = ctx(client);
    for _ in 0..3 {
        let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
        let res = crate::agent::controller::reconcile(Arc::new(agent), ctx.clone()).await;
        assert!(res.is_ok(), "{res:?}");
    }
    let reads = find(&log, "GET", "configmaps/echo-module");
    let whole = reads
        .iter()
        .filter(|r| {
            !r.accept
                .as_deref()
                .is_some_and(|a| a.contains("PartialObjectMetadata"))
        })
        .count();
    assert_eq!(whole, 1, "the module's bytes read again: {reads:?}");
    assert_eq!(
        reads.len(),
        4,
        "one metadata read per reconcile, one whole read"
    );
}

#[tokio::test]
async fn agent_reconcile_applies_everything_and_reports_ready() {
    let (client, log) = mock_client(agent_routes);
    let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");

    for kind in [
        "serviceaccounts/ari-executor",
        "roles/ari-executor",
        "rolebindings/ari-executor",
    ] {
        let r = one(&log, "PATCH", kind);
        assert!(
            r.uri.contains("fieldManager=ari-operator") && r.uri.contains("force=true"),
            "{}",
            r.uri
        );
        assert!(
            r.body["metadata"].get("ownerReferences").is_none(),
            "shared objects have no owner"
        );
    }
    // The key's source lives in the operator's namespace; the tenant gets a copy.
    let source = one(&log, "POST", "namespaces/ari-system/secrets");
    assert_eq!(source.body["metadata"]["name"], "ari-attestation-key.demo");
    let priv_hex = source.body["data"]["private-key"]
        .as_str()
        .unwrap_or_default();
    assert!(!priv_hex.is_empty());
    let copy = one(&log, "POST", "namespaces/demo/secrets");
    assert_eq!(copy.body["metadata"]["name"], "ari-attestation-key");
    assert_eq!(copy.body["data"], source.body["data"]);

    let dep = one(&log, "PATCH", "deployments/echo-executor").body;
    assert_eq!(dep["metadata"]["ownerReferences"][0]["uid"], "agent-uid");
    assert_eq!(dep["metadata"]["ownerReferences"][0]["controller"], true);
    // Storage granted and no Redis configured: embedded store, one replica.
    assert_eq!(dep["spec"]["replicas"], 1);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ari-executor");
    let c = &pod["containers"][0];
    assert_eq!(c["args"], json!(["worker"]));
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env = c["env"].as_array().cloned().unwrap_or_default();
    let by = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(by("ARI_AGENT_NAME")["value"], "echo");
    assert_eq!(by("ARI_CONCURRENCY")["value"], "8");
    assert_eq!(
        by("POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    assert_eq!(
        by("ARI_ATTESTATION_KEY")["valueFrom"]["secretKeyRef"]["name"],
        "ari-attestation-key"
    );
    assert!(by("ARI_REDIS_URL").is_null());
    let sha_echo = format!("sha256:{}", echo_component_sha256());
    assert_eq!(
        dep["spec"]["template"]["metadata"]["annotations"]["ari.dev/module-digest"],
        sha_echo
    );

    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    assert_eq!(st["moduleDigest"], sha_echo);
    assert_eq!(st["observedGeneration"], 3);
    assert_eq!(st["readyReplicas"], 1);
    assert_eq!(st["attestationPublicKey"].as_str().map(str::len), Some(64));
    for ty in ["Valid", "ModuleResolved", "Ready"] {
        let c = st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty).cloned());
        let c = c.unwrap_or_else(|| panic!("condition {ty} missing: {st}"));
        assert_eq!(c["status"], "True", "{ty}: {c}");
        assert_eq!(c["observedGeneration"], 3);
    }
    assert_eq!(
        find(&log, "POST", "/events").len(),
        3,
        "one Event per condition change"
    );
}

#[tokio::test]
async fn agent_with_missing_configmap_is_not_resolved_and_gets_no_deployment() {
    let (client, log) = mock_client(|m, p, b| match (m, p) {
        ("GET", "/api/v1/namespaces/demo/configmaps/echo-module") => status(404, "NotFound"),
        _ => agent_routes(m, p, b),
    });
    let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "deployments").is_empty());
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    let cond = |ty: &str| {
        st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(cond("ModuleResolved")["status"], "False");
    assert_eq!(cond("ModuleResolved")["reason"], "ConfigMapNotFound");
    assert_eq!(cond("Ready")["status"], "False");
}

/// The condition `ty` of the status the reconcile wrote.
fn written_condition(log: &Log, ty: &str) -> Value {
    let st = one(log, "PATCH", "agents/echo/status").body["status"].clone();
    st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty).cloned())
        .unwrap_or(Value::Null)
}

fn signing_agent(secret: &str) -> Agent {
    let mut a = agent_json();
    a["spec"]["capabilities"]["signing"] =
        json!({"keyId": "k", "secretRef": {"name": secret, "key": "private-key"}});
    serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn an_agent_naming_the_attestation_key_for_signing_is_invalid_and_gets_no_executors() {
    let (client, log) = mock_client(|m, p, b| match (m, p) {
        ("DELETE", "/apis/apps/v1/namespaces/demo/deployments/echo-executor") => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        _ => agent_routes(m, p, b),
    });
    let agent = signing_agent("ari-attestation-key");
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(
        find(&log, "PATCH", "deployments").is_empty(),
        "no executor may get the key"
    );
    assert_eq!(find(&log, "DELETE", "deployments/echo-executor").len(), 1);
    assert!(
        find(&log, "GET", "secrets/ari-attestation-key").is_empty()
            || find(&log, "GET", "demo/secrets/ari-attestation-key").len() == 1,
        "read only to re-assert the copy"
    );
    let valid = written_condition(&log, "Valid");
    assert_eq!(valid["status"], "False");
    assert_eq!(valid["reason"], "SigningSecretRejected");
    assert!(
        valid["message"]
            .as_str()
            .unwrap_or("")
            .contains("attestation key")
    );
    let events = find(&log, "POST", "/events");
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "SigningSecretRejected" && e.body["type"] == "Warning"),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_unmarked_signing_secret_is_refused_and_a_marked_key_is_deployed() {
    let secret = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sig", "labels": labels},
               "data": {"private-key": "OWQ2MWIxOWRlZmZkNWE2MGJhODQ0YWY0OTJlYzJjYzQ0NDQ5YzU2OTdiMzI2OTE5NzAzYmFjMDMxY2FlN2Y2MA=="}})
    };
    let (client, log) = mock_client(move |m, p, b| match (m, p) {
        ("GET", "/api/v1/namespaces/demo/secrets/sig") => (200, secret(json!({}))),
        ("DELETE", _) => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        _ => agent_routes(m, p, b),
    });
    let res =
        crate::agent::controller::reconcile(Arc::new(signing_agent("sig")), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "deployments").is_empty());
    let valid = written_condition(&log, "Valid");
    assert!(
        valid["message"]
            .as_str()
            .unwrap_or("")
            .contains("ari.dev/signing-key=true"),
        "{valid}"
    );

    let (client, log) = mock_client(move |m, p, b| match (m, p) {
        ("GET", "/api/v1/namespaces/demo/secrets/sig") => {
            (200, secret(json!({"ari.dev/signing-key": "true"})))
        }
        _ => agent_routes(m, p, b),
    });
    let res =
        crate::agent::controller::reconcile(Arc::new(signing_agent("sig")), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(find(&log, "PATCH", "deployments/echo-executor").len(), 1);
    assert_eq!(written_condition(&log, "Valid")["status"], "True");
}

#[tokio::test]
async fn a_deployment_the_api_server_refuses_is_reported_with_its_message() {
    let (client, log) = mock_client(|m, p, b| match (m, p) {
        ("PATCH", "/apis/apps/v1/namespaces/demo/deployments/echo-executor") => (
            422,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Deployment.apps \"echo-executor\" is invalid: spec.template.spec.containers[0].resources.requests[cpu]: Invalid value: \"lots\"",
                   "reason": "Invalid", "code": 422}),
        ),
        _ => agent_routes(m, p, b),
    });
    let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(
        res.is_ok(),
        "a refusal is reported, not retried as an error: {res:?}"
    );
    let ready = written_condition(&log, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "DeploymentRejected");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or("")
            .contains("requests[cpu]"),
        "{ready}"
    );
    let events = find(&log, "POST", "/events");
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "DeploymentRejected" && e.body["type"] == "Warning"),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_agent_name_too_long_to_label_its_pods_is_invalid() {
    let (client, log) = mock_client(|m, p, b| match (m, p) {
        ("DELETE", _) => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        ("PATCH", p) if p.ends_with("/status") => {
            let mut a = agent_json();
            a["status"] = b["status"].clone();
            (200, a)
        }
        _ => agent_routes(m, p, b),
    });
    let mut a = agent_json();
    a["metadata"]["name"] = json!("a".repeat(64));
    let agent: Agent = serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "deployments").is_empty());
    let st = find(&log, "PATCH", "/status");
    assert_eq!(st.len(), 1);
    let valid = st[0].body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Valid").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(valid["status"], "False");
    assert!(
        valid["message"]
            .as_str()
            .unwrap_or("")
            .contains("at most 63"),
        "{valid}"
    );
}

#[tokio::test]
async fn a_replaced_attestation_key_copy_is_restored_from_the_operator_namespace() {
    let source = crate::agent::key::new_secret("ari-system", "demo");
    let source_json = serde_json::to_value(&source).unwrap_or_default();
    let public = crate::agent::key::public_key_hex(&source).unwrap_or_default();
    let planted = crate::agent::key::new_secret("demo", "demo");
    let mut planted_json = serde_json::to_value(&planted).unwrap_or_default();
    planted_json["metadata"]["name"] = json!("ari-attestation-key");
    let (client, log) = mock_client(move |m, p, b| match (m, p) {
        ("GET", "/api/v1/namespaces/ari-system/secrets/ari-attestation-key.demo") => {
            (200, source_json.clone())
        }
        ("GET", "/api/v1/namespaces/demo/secrets/ari-attestation-key") => {
            (200, planted_json.clone())
        }
        ("DELETE", "/api/v1/namespaces/demo/secrets/ari-attestation-key") => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        _ => agent_routes(m, p, b),
    });
    let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(
        find(&log, "DELETE", "demo/secrets/ari-attestation-key").len(),
        1
    );
    let copy = one(&log, "POST", "namespaces/demo/secrets").body;
    assert_eq!(
        copy["data"],
        serde_json::to_value(&source.data).unwrap_or_default()
    );
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    assert_eq!(
        st["attestationPublicKey"],
        public.as_str(),
        "published key comes from the source"
    );
    let dep = one(&log, "PATCH", "deployments/echo-executor").body;
    let env = dep["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    assert!(
        env.as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "ARI_ATTESTATION_PUBLIC_KEY" && e["value"] == public.as_str()),
        "{env}"
    );
    let events = find(&log, "POST", "/events");
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "AttestationKeyRestored"),
        "{events:?}"
    );
}

/// Reconciles `agent` as the operator caches it (trimmed), the API server holding it whole,
/// with the gateway's public URL set; returns the status written.
async fn reconcile_with_public_url(agent: &Agent, public_url: &str) -> ari_crds::AgentStatus {
    let whole = serde_json::to_value(agent).unwrap_or_default();
    let (client, log) = mock_client(move |m, p, b| match (m, p) {
        ("GET", "/apis/ari.dev/v1alpha1/namespaces/demo/agents/echo") => (200, whole.clone()),
        _ => agent_routes(m, p, b),
    });
    let settings = Settings {
        gateway_public_url: public_url.to_owned(),
        ..Settings::default()
    };
    let context = ctx_with(client, Arc::new(FakeRegistry::default()), settings);
    let mut cached = agent.clone();
    crate::cache::trim_agent(&mut cached);
    let res = crate::agent::controller::reconcile(Arc::new(cached), context).await;
    assert!(res.is_ok(), "{res:?}");
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    serde_json::from_value(st).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn an_exposed_agent_gets_the_card_the_gateway_serves_signed_by_its_attestation_key() {
    use ari_crds::card::{Exposed, served};
    let url = "https://agents.example.com";
    let mut a = agent_json();
    a["spec"]["a2a"] =
        json!({"exposed": true, "skills": [{"id": "echo", "name": "Echo", "tags": ["text"]}]});
    let mut agent: Agent = serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"));
    let status = reconcile_with_public_url(&agent, url).await;
    let key = ari_model::attestation::parse_public_key(
        status.attestation_public_key.as_deref().unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.a2a_card.is_some(), "{status:?}");
    // The gateway, reading the Agent as written, serves the card with a signature that holds.
    agent.status = Some(status);
    let exposed = Exposed::of(&agent).unwrap_or_else(|| panic!("exposed"));
    assert_eq!(
        ari_model::card::verify(&served(&exposed, url), &key),
        Ok(())
    );
    // A gateway given another public URL builds another card, and serves it unsigned.
    assert!(served(&exposed, "").get("signatures").is_none());

    // An Agent that is not exposed gets no signature.
    let hidden: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reconcile_with_public_url(&hidden, url).await.a2a_card, None);
}

fn task_json(status: Value, extra_spec: Value) -> Task {
    let mut spec = json!({"agentRef": {"name": "echo"}, "input": "hi"});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "t1", "namespace": "demo", "uid": "task-uid", "generation": 1,
                     "resourceVersion": "42", "creationTimestamp": "2020-01-01T00:00:00Z"},
        "spec": spec, "status": status
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn task_ctx(client: kube::Client) -> Arc<TaskContext> {
    task_ctx_with(client, None)
}

/// A Task context whose Agent cache holds `cached` (the caches are empty otherwise).
fn task_ctx_with(client: kube::Client, cached: Option<Agent>) -> Arc<TaskContext> {
    task_ctx_full(client, cached, Vec::new())
}

/// A Task context whose Task cache (and child index) holds `tasks`.
fn task_ctx_full(
    client: kube::Client,
    cached: Option<Agent>,
    tasks: Vec<Task>,
) -> Arc<TaskContext> {
    use kube::runtime::watcher::Event;
    let (agents, mut writer) = kube::runtime::reflector::store();
    if let Some(a) = cached {
        writer.apply_watcher_event(&Event::Apply(a));
    }
    let (pods, _) = kube::runtime::reflector::store();
    let (task_store, mut task_writer) = kube::runtime::reflector::store();
    let children = Arc::new(crate::task::children::ChildIndex::default());
    for t in tasks {
        let event = Event::Apply(t);
        children.observe(&event);
        task_writer.apply_watcher_event(&event);
    }
    Arc::new(TaskContext {
        base: ctx(client),
        seen: Seen::default(),
        announced: Seen::default(),
        labelled: Seen::default(),
        started: k8s_openapi::jiff::Timestamp::now(),
        agents,
        pods,
        tasks: task_store,
        children,
    })
}

fn task_routes(
    agent: Option<Value>,
) -> impl Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static {
    move |m, p, b| match (m, p) {
        ("GET", "/apis/ari.dev/v1alpha1/namespaces/demo/agents/echo") => match &agent {
            Some(a) => (200, a.clone()),
            None => status(404, "NotFound"),
        },
        ("PUT", "/apis/ari.dev/v1alpha1/namespaces/demo/tasks/t1/status") => (200, b.clone()),
        ("DELETE", "/apis/ari.dev/v1alpha1/namespaces/demo/tasks/t1") => (
            200,
            json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}),
        ),
        ("PATCH", p) if p.starts_with("/apis/ari.dev/v1alpha1/namespaces/demo/tasks/") => (
            200,
            json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
                   "metadata": {"name": p.rsplit('/').next(), "namespace": "demo"},
                   "spec": {"agentRef": {"name": "echo"}, "input": "x", "cancelled": true}}),
        ),
        ("POST", p) if p.ends_with("/events") => (201, b.clone()),
        _ => status(404, "NotFound"),
    }
}

/// Task `name` (uid `<name>-uid`) in `phase`, a child of `p` when `parent` says so.
fn family_task(name: &str, phase: &str, parent: bool) -> Task {
    let mut t = json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name, "namespace": "demo", "uid": format!("{name}-uid"),
                     "resourceVersion": "7", "creationTimestamp": "2020-01-01T00:00:00Z"},
        "spec": {"agentRef": {"name": "echo"}},
        "status": if phase == "Running" { running(1) } else { json!({"phase": phase}) },
    });
    if parent {
        t["spec"]["parent"] =
            json!({"name": "p", "uid": "p-uid", "agent": "relay", "depth": 1, "index": 0});
    }
    serde_json::from_value(t).unwrap_or_else(|e| panic!("{e}"))
}

/// Issue 26, item 13: a parent the operator failed after its executor died has children
/// nobody cancels. Whichever of the two is reconciled, the child gets `spec.cancelled`.
#[tokio::test]
async fn the_children_of_an_ended_parent_are_cancelled_from_either_side() {
    let parent = family_task("p", "Failed", false);
    let child = family_task("c", "Running", true);
    for reconciled in [parent.clone(), child.clone()] {
        let (client, log) = mock_client(task_routes(None));
        let ctx = task_ctx_full(client, None, vec![parent.clone(), child.clone()]);
        let res = crate::task::controller::reconcile(Arc::new(reconciled), ctx).await;
        assert!(res.is_ok(), "{res:?}");
        let patch = one(&log, "PATCH", "tasks/c").body;
        assert_eq!(patch["spec"], json!({"cancelled": true}));
        assert_eq!(
            patch["metadata"]["uid"], "c-uid",
            "guarded by the child's uid"
        );
        assert_eq!(find(&log, "POST", "/events").len(), 1);
    }
    // A parent still running keeps its children.
    let (client, log) = mock_client(task_routes(None));
    let ctx = task_ctx_full(
        client,
        None,
        vec![family_task("p", "Running", false), child.clone()],
    );
    let res = crate::task::controller::reconcile(Arc::new(child), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "tasks/c").is_empty());
}

async fn run_task(task: Task, agent: Option<Value>) -> Log {
    let (client, log) = mock_client(task_routes(agent));
    let res = crate::task::controller::reconcile(Arc::new(task), task_ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");
    log
}

fn written_status(log: &Log) -> Value {
    let w = one(log, "PUT", "tasks/t1/status").body;
    assert_eq!(
        w["metadata"]["resourceVersion"], "42",
        "status write must be guarded by resourceVersion"
    );
    w["status"].clone()
}

#[tokio::test]
async fn task_with_missing_agent_is_capability_denied() {
    let log = run_task(task_json(Value::Null, json!({})), None).await;
    let st = written_status(&log);
    assert_eq!(st["phase"], "Failed");
    assert_eq!(st["reason"], "CapabilityDenied");
    assert_eq!(st["conditions"][0]["type"], "Succeeded");
    assert_eq!(st["conditions"][0]["status"], "False");
    assert_eq!(find(&log, "POST", "/events").len(), 1);
}

#[tokio::test]
async fn task_requiring_more_than_granted_is_capability_denied() {
    let extra = json!({"requirements": {"capabilities": ["network"]}});
    let log = run_task(task_json(Value::Null, extra), Some(agent_json())).await;
    let st = written_status(&log);
    assert_eq!(st["reason"], "CapabilityDenied");
    assert!(
        st["message"]
            .as_str()
            .unwrap_or_default()
            .contains("network"),
        "{st}"
    );
}

#[tokio::test]
async fn task_within_grants_is_left_alone() {
    let extra = json!({"requirements": {"capabilities": ["storage"], "storageBytes": 10}});
    let log = run_task(task_json(Value::Null, extra), Some(agent_json())).await;
    assert!(find(&log, "PUT", "status").is_empty());
}

#[tokio::test]
async fn cached_agent_answers_without_an_api_read() {
    let (client, log) = mock_client(task_routes(Some(agent_json())));
    let agent: Agent = serde_json::from_value(agent_json()).unwrap_or_else(|e| panic!("{e}"));
    let extra = json!({"requirements": {"capabilities": ["network"]}});
    let res = crate::task::controller::reconcile(
        Arc::new(task_json(Value::Null, extra)),
        task_ctx_with(client, Some(agent)),
    )
    .await;
    assert!(res.is_ok(), "{res:?}");
    assert!(
        find(&log, "GET", "agents/echo").is_empty(),
        "the cache had it"
    );
    assert_eq!(written_status(&log)["reason"], "CapabilityDenied");
}

#[tokio::test]
async fn task_past_deadline_fails_with_deadline_exceeded() {
    let log = run_task(
        task_json(Value::Null, json!({"deadlineSeconds": 60})),
        Some(agent_json()),
    )
    .await;
    assert_eq!(written_status(&log)["reason"], "DeadlineExceeded");
}

fn running(attempts: u32) -> Value {
    json!({"phase": "Running", "executor": "echo-executor-x", "attempts": attempts,
           "startTime": "2020-01-01T00:00:01Z", "lastHeartbeatTime": "2020-01-01T00:00:02Z"})
}

#[tokio::test]
async fn lost_executor_with_retries_left_goes_back_to_pending() {
    let log = run_task(task_json(running(1), json!({"retries": 2})), None).await;
    let st = written_status(&log);
    assert_eq!(st["phase"], "Pending");
    assert!(
        st.get("executor").is_none() || st["executor"].is_null(),
        "{st}"
    );
    assert_eq!(
        st["attempts"], 1,
        "attempts are counted by the claiming executor"
    );
}

#[tokio::test]
async fn lost_executor_without_retries_fails_with_executor_lost() {
    let log = run_task(task_json(running(3), json!({"retries": 2})), None).await;
    let st = written_status(&log);
    assert_eq!(st["phase"], "Failed");
    assert_eq!(st["reason"], "ExecutorLost");
}

#[tokio::test]
async fn finished_task_past_ttl_is_deleted() {
    let done = json!({"phase": "Succeeded", "reason": "Completed", "completionTime": "2020-01-01T00:00:05Z"});
    let log = run_task(
        task_json(done, json!({"ttlSecondsAfterFinished": 60})),
        None,
    )
    .await;
    let del = one(&log, "DELETE", "tasks/t1");
    assert_eq!(del.body["preconditions"]["uid"], "task-uid");
    assert!(find(&log, "PUT", "status").is_empty());
}

/// A Task its executor failed at `completed`, with a message.
fn failed_by_executor(completed: &str) -> Task {
    task_json(
        json!({"phase": "Failed", "reason": "FuelExhausted", "executor": "exec-1",
               "message": "fuel exhausted after 1000000 units", "completionTime": completed}),
        json!({}),
    )
}

#[tokio::test]
async fn executor_failure_gets_one_warning_event() {
    let (client, log) = mock_client(task_routes(None));
    let ctx = task_ctx(client);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for _ in 0..2 {
        let res =
            crate::task::controller::reconcile(Arc::new(failed_by_executor(&now)), ctx.clone())
                .await;
        assert!(res.is_ok(), "{res:?}");
    }
    let events = find(&log, "POST", "/events");
    assert_eq!(events.len(), 1, "announced once, not per reconcile");
    assert_eq!(events[0].body["reason"], "FuelExhausted");
    assert_eq!(events[0].body["type"], "Warning");
    assert_eq!(events[0].body["note"], "fuel exhausted after 1000000 units");
    assert!(
        find(&log, "PUT", "status").is_empty(),
        "a finished Task is not written"
    );
}

#[tokio::test]
async fn failures_from_before_the_operator_started_are_not_announced_again() {
    let log = run_task(failed_by_executor("2020-01-01T00:00:01Z"), None).await;
    assert!(find(&log, "POST", "/events").is_empty());
}

#[tokio::test]
async fn operator_decided_failure_is_announced_once() {
    let (client, log) = mock_client(task_routes(None));
    let ctx = task_ctx(client);
    let res = crate::task::controller::reconcile(
        Arc::new(task_json(Value::Null, json!({}))),
        ctx.clone(),
    )
    .await;
    assert!(res.is_ok(), "{res:?}");
    // The watch then shows the Task as the operator wrote it.
    let mut failed = task_json(Value::Null, json!({}));
    failed.status = serde_json::from_value(written_status(&log)).ok();
    let res = crate::task::controller::reconcile(Arc::new(failed), ctx).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(find(&log, "POST", "/events").len(), 1);
}

#[tokio::test]
async fn a_failed_reconcile_is_counted_by_kind_and_every_reconcile_is_timed() {
    // The Agent is missing, so the Task is failed; the API server refuses that write.
    let (client, _log) = mock_client(|m, p, _| match (m, p) {
        ("PUT", p) if p.ends_with("/status") => status(500, "InternalError"),
        _ => status(404, "NotFound"),
    });
    let ctx = task_ctx(client);
    let task = Arc::new(task_json(Value::Null, json!({})));
    let err = crate::task::controller::reconcile(task.clone(), ctx.clone())
        .await
        .expect_err("the status write fails");
    assert_eq!(err.metric_label(), "kube_api");
    crate::task::controller::error_policy(task, &err, ctx.clone());
    let metrics = &ctx.base.metrics;
    assert_eq!(
        metrics
            .reconcile_errors
            .with_label_values(&["task", "kube_api"])
            .get(),
        1
    );
    assert_eq!(
        metrics
            .reconcile_duration
            .with_label_values(&["task"])
            .get_sample_count(),
        1
    );
    assert_eq!(
        metrics
            .reconcile_duration
            .with_label_values(&["agent"])
            .get_sample_count(),
        0
    );
}

/// A registry answering from a table: tag or pinned reference → manifest digest, and the
/// component behind each digest; or one error for every call. Records the credentials seen.
#[derive(Default)]
struct FakeRegistry {
    manifests: std::collections::HashMap<String, String>,
    blobs: std::collections::HashMap<String, Vec<u8>>,
    fail: Option<Failure>,
    /// Never answers (a registry that accepts connections and hangs).
    hang: bool,
    /// Never answers for references to this registry (`host[:port]`).
    hang_registry: Option<String>,
    seen: std::sync::Mutex<Vec<(String, ari_oci::Credentials)>>,
    pulls: std::sync::atomic::AtomicUsize,
}

const IMAGE: &str = "registry.example/agents/echo";

/// The error every call of a failing [`FakeRegistry`] returns.
type Failure = fn() -> ari_oci::Error;

impl FakeRegistry {
    /// `IMAGE:v1` → the echo component.
    fn with_echo() -> (FakeRegistry, String) {
        let digest = format!("sha256:{}", "d".repeat(64));
        let mut r = FakeRegistry::default();
        r.manifests.insert(format!("{IMAGE}:v1"), digest.clone());
        r.manifests
            .insert(format!("{IMAGE}@{digest}"), digest.clone());
        r.blobs.insert(digest.clone(), echo_component());
        (r, digest)
    }

    fn failing(fail: Failure) -> FakeRegistry {
        FakeRegistry {
            fail: Some(fail),
            ..FakeRegistry::default()
        }
    }
}

impl crate::agent::image::Registry for FakeRegistry {
    fn resolve<'a>(
        &'a self,
        reference: &'a ari_oci::Reference,
        credentials: &'a ari_oci::Credentials,
    ) -> futures::future::BoxFuture<'a, Result<String, ari_oci::Error>> {
        Box::pin(async move {
            if self.hang || self.hang_registry.as_deref() == Some(reference.registry()) {
                std::future::pending::<()>().await;
            }
            if let Ok(mut s) = self.seen.lock() {
                s.push((reference.to_string(), credentials.clone()));
            }
            if let Some(fail) = self.fail {
                return Err(fail());
            }
            self.manifests
                .get(&reference.to_string())
                .cloned()
                .ok_or_else(|| ari_oci::Error::NotFound(reference.to_string()))
        })
    }

    fn pull<'a>(
        &'a self,
        reference: &'a ari_oci::Reference,
        _credentials: &'a ari_oci::Credentials,
    ) -> futures::future::BoxFuture<'a, Result<ari_oci::PulledModule, ari_oci::Error>> {
        Box::pin(async move {
            self.pulls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let digest = reference.digest().unwrap_or_default().to_owned();
            let bytes = self
                .blobs
                .get(&digest)
                .cloned()
                .ok_or_else(|| ari_oci::Error::NotFound(reference.to_string()))?;
            Ok(ari_oci::PulledModule::new(
                digest,
                ari_oci::sha256_digest(&bytes),
                bytes,
            ))
        })
    }
}

fn image_agent(image: &str, pull_secrets: Value) -> Agent {
    let mut a = agent_json();
    a["spec"]["module"] = json!({"image": image});
    if !pull_secrets.is_null() {
        a["spec"]["module"]["imagePullSecrets"] = pull_secrets;
    }
    serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"))
}

/// Reconciles an image Agent as the controller does: the first pass asks for the registry's
/// answer, says the module is being resolved and returns; the lookup's end wakes the Agent,
/// whose second pass finds the answer. `log` then holds the second pass's requests only.
async fn reconcile_looked_up(
    agent: &Agent,
    ctx: &Arc<Context>,
    log: &Log,
) -> Result<kube::runtime::controller::Action, crate::Error> {
    crate::agent::controller::reconcile(Arc::new(agent.clone()), ctx.clone()).await?;
    let resolved = written_condition(log, "ModuleResolved");
    assert_eq!(
        (&resolved["status"], &resolved["reason"]),
        (&json!("Unknown"), &json!("ResolvingImage")),
        "{resolved}"
    );
    assert_eq!(written_condition(log, "Ready")["reason"], "ResolvingImage");
    assert!(find(log, "PATCH", "deployments").is_empty());
    if let Ok(mut l) = log.lock() {
        l.clear();
    }
    ctx.images.idle().await;
    crate::agent::controller::reconcile(Arc::new(agent.clone()), ctx.clone()).await
}

fn container_env(log: &Log) -> Vec<Value> {
    let dep = one(log, "PATCH", "deployments/echo-executor").body;
    dep["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn an_image_tag_is_resolved_pinned_in_status_and_handed_to_the_executors() {
    let (registry, digest) = FakeRegistry::with_echo();
    let registry = Arc::new(registry);
    let (client, log) = mock_client(agent_routes);
    let agent = image_agent(&format!("{IMAGE}:v1"), Value::Null);
    let context = ctx_with_registry(client, registry.clone());
    let res = reconcile_looked_up(&agent, &context, &log).await;
    assert!(res.is_ok(), "{res:?}");

    let pinned = format!("{IMAGE}@{digest}");
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    assert_eq!(st["moduleImage"], pinned);
    assert_eq!(
        st["moduleDigest"],
        format!("sha256:{}", echo_component_sha256())
    );
    let resolved = written_condition(&log, "ModuleResolved");
    assert_eq!(resolved["status"], "True", "{resolved}");
    let env = container_env(&log);
    let image_env = env.iter().find(|e| e["name"] == "ARI_MODULE_IMAGE");
    assert_eq!(image_env.map(|e| e["value"].clone()), Some(json!(pinned)));
    assert!(
        !env.iter().any(|e| e["name"] == "ARI_MODULE_PULL_SECRET"),
        "no pull secret named, none passed"
    );

    // The component is checked once per pinned digest; the tag is asked again only once its
    // answer is 5 s old (`lookup::tests`), not by every reconcile.
    let res = crate::agent::controller::reconcile(Arc::new(agent), context).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(registry.pulls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(registry.seen.lock().map(|s| s.len()).unwrap_or(0), 1);
}

#[tokio::test]
async fn an_unresolvable_image_is_reported_with_its_reason_and_gets_no_executors() {
    let cases: [(Failure, &str); 4] = [
        (
            || ari_oci::Error::NotFound("registry.example/agents/echo:v1".into()),
            "ImageNotFound",
        ),
        (
            || ari_oci::Error::DigestMismatch {
                expected: "sha256:aa".into(),
                actual: "sha256:bb".into(),
            },
            "DigestMismatch",
        ),
        (
            || ari_oci::Error::RegistryUnavailable("connection refused".into()),
            "RegistryUnavailable",
        ),
        (
            || ari_oci::Error::NotAWasmArtifact("a container image".into()),
            "NotAWasmArtifact",
        ),
    ];
    for (fail, reason) in cases {
        let (client, log) = mock_client(agent_routes);
        let context = ctx_with_registry(client, Arc::new(FakeRegistry::failing(fail)));
        let agent = image_agent(&format!("{IMAGE}:v1"), Value::Null);
        let res = reconcile_looked_up(&agent, &context, &log).await;
        let action = res.unwrap_or_else(|e| panic!("{reason}: {e}"));
        assert!(
            find(&log, "PATCH", "deployments").is_empty(),
            "{reason}: no executors for an unresolvable module"
        );
        let c = written_condition(&log, "ModuleResolved");
        assert_eq!(c["status"], "False", "{reason}: {c}");
        assert_eq!(c["reason"], reason, "{c}");
        assert_eq!(
            written_condition(&log, "Ready")["reason"],
            "ModuleNotResolved"
        );
        let events = find(&log, "POST", "/events");
        assert!(
            events
                .iter()
                .any(|e| e.body["reason"] == reason && e.body["type"] == "Warning"),
            "{reason}: {events:?}"
        );
        // Tried again soon (backoff starts at 5 s), not after the 5-minute resync.
        assert_eq!(
            action,
            kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(5)),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn a_registry_that_never_answers_is_unavailable_after_the_bound() {
    let (client, log) = mock_client(agent_routes);
    let hanging = FakeRegistry {
        hang: true,
        ..FakeRegistry::default()
    };
    let settings = Settings {
        registry_timeout: std::time::Duration::from_millis(50),
        ..Settings::default()
    };
    let context = ctx_with(client, Arc::new(hanging), settings);
    let agent = image_agent(&format!("{IMAGE}:v1"), Value::Null);
    let res = reconcile_looked_up(&agent, &context, &log).await;
    assert!(res.is_ok(), "{res:?}");
    let c = written_condition(&log, "ModuleResolved");
    assert_eq!(c["reason"], "RegistryUnavailable", "{c}");
    // The fixed text of a refused connection: a silent port reads as a closed one.
    assert!(
        c["message"]
            .as_str()
            .unwrap_or("")
            .ends_with(ari_oci::UNREACHABLE),
        "{c}"
    );
}

/// Routes of any namespace: `echo-module` holds the echo component, executors come up
/// available, statuses are written back, and `ready` hears `namespace/name` of each Agent whose
/// written status is `Ready=True`.
fn tenant_routes(
    ready: futures::channel::mpsc::UnboundedSender<String>,
) -> impl Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static {
    move |method, path, body| {
        let parts: Vec<&str> = path.split('/').collect();
        match (method, parts.as_slice()) {
            (
                "GET",
                [
                    "",
                    "api",
                    "v1",
                    "namespaces",
                    _,
                    "configmaps",
                    "echo-module",
                ],
            ) => (
                200,
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "echo-module"},
                    "binaryData": {"echo.wasm": echo_component_base64()}
                }),
            ),
            ("PATCH", ["", "apis", "apps", "v1", "namespaces", _, "deployments", _]) => {
                let mut d = body.clone();
                d["status"] = json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1});
                (200, d)
            }
            (
                "PATCH",
                [
                    "",
                    "apis",
                    "ari.dev",
                    "v1alpha1",
                    "namespaces",
                    ns,
                    "agents",
                    name,
                    "status",
                ],
            ) => {
                let conditions = body["status"]["conditions"].as_array();
                if conditions.is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                }) {
                    let _ = ready.unbounded_send(format!("{ns}/{name}"));
                }
                let mut a = agent_json();
                a["metadata"]["name"] = json!(name);
                a["metadata"]["namespace"] = json!(ns);
                a["status"] = body["status"].clone();
                (200, a)
            }
            ("POST", _) => (201, body.clone()),
            ("PATCH", _) => echo_body(body),
            _ => status(404, "NotFound"),
        }
    }
}

/// An Agent `name` of `namespace`, its module from `image` or, without one, the ConfigMap.
fn tenant_agent(namespace: &str, name: &str, image: Option<&str>) -> Arc<Agent> {
    let mut a = agent_json();
    a["metadata"]["name"] = json!(name);
    a["metadata"]["namespace"] = json!(namespace);
    a["metadata"]["uid"] = json!(format!("{namespace}-{name}"));
    if let Some(image) = image {
        a["spec"]["module"] = json!({"image": image});
    }
    Arc::new(serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}")))
}

/// One namespace's Agents on many references of a registry that accepts connections and
/// never answers (and a timeout longer than the test) take every place the Agent controller
/// has, as the controller runs them (`AGENT_RECONCILES` at once, woken Agents run again);
/// another namespace's ConfigMap and image Agents still become Ready.
#[tokio::test]
async fn a_tenant_with_stuck_registry_references_does_not_delay_another_namespace() {
    use futures::StreamExt as _;
    let (registry, _) = FakeRegistry::with_echo();
    let registry = FakeRegistry {
        hang_registry: Some("stuck.example".into()),
        ..registry
    };
    let settings = Settings {
        registry_timeout: std::time::Duration::from_secs(3600),
        ..Settings::default()
    };
    let (ready_tx, mut ready) = futures::channel::mpsc::unbounded();
    let (client, _log) = mock_client(tenant_routes(ready_tx));
    let context = ctx_with(client, Arc::new(registry), settings);

    let places = usize::from(crate::run::AGENT_RECONCILES);
    let mut agents: Vec<Arc<Agent>> = (0..places + 8)
        .map(|i| {
            let image = format!("stuck.example/agents/a{i}:v1");
            tenant_agent("attacker", &format!("a{i}"), Some(&image))
        })
        .collect();
    agents.push(tenant_agent("victim", "from-configmap", None));
    agents.push(tenant_agent(
        "victim",
        "from-image",
        Some(&format!("{IMAGE}:v1")),
    ));
    let woken = woken_agents(&context, agents.clone());
    let runs = futures::stream::select(futures::stream::iter(agents), woken);
    let reconciling = context.clone();
    tokio::spawn(runs.for_each_concurrent(places, move |agent| {
        let ctx = reconciling.clone();
        async move {
            let _ = crate::agent::controller::reconcile(agent, ctx).await;
        }
    }));

    let mut want = std::collections::BTreeSet::from(["victim/from-configmap", "victim/from-image"]);
    let waited = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !want.is_empty() {
            match ready.next().await {
                Some(agent) => {
                    want.remove(agent.as_str());
                }
                None => break,
            }
        }
    })
    .await;
    assert!(
        waited.is_ok() && want.is_empty(),
        "not Ready while another namespace's registry hangs: {want:?}"
    );
}

/// The Agents the controller runs again when an image lookup ends, as `run.rs` finds them.
fn woken_agents(
    ctx: &Arc<Context>,
    agents: Vec<Arc<Agent>>,
) -> impl futures::Stream<Item = Arc<Agent>> + Send + Unpin + 'static {
    use futures::StreamExt as _;
    let woken = ctx.images.woken().unwrap_or_else(|| panic!("woken taken"));
    woken.flat_map(move |w| {
        let refs = crate::agent::lookup::agents_to_wake(&agents, &w);
        let again: Vec<_> = agents
            .iter()
            .filter(|a| refs.contains(&kube::runtime::reflector::ObjectRef::from_obj(a.as_ref())))
            .cloned()
            .collect();
        futures::stream::iter(again)
    })
}

fn pull_secret_json(labels: Value, type_: &str) -> Value {
    use base64::Engine as _;
    let config = json!({"auths": {"registry.example": {"username": "bot", "password": "hunter2"}}});
    let config = base64::engine::general_purpose::STANDARD.encode(config.to_string());
    json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
           "metadata": {"name": "reg", "labels": labels},
           "data": {".dockerconfigjson": config}})
}

#[tokio::test]
async fn a_marked_pull_secret_reaches_the_registry_and_the_executors_by_reference() {
    let (registry, _) = FakeRegistry::with_echo();
    let registry = Arc::new(registry);
    let (client, log) = mock_client(|m, p, b| match (m, p) {
        ("GET", "/api/v1/namespaces/demo/secrets/reg") => (
            200,
            pull_secret_json(
                json!({"ari.dev/pull-secret": "true"}),
                "kubernetes.io/dockerconfigjson",
            ),
        ),
        _ => agent_routes(m, p, b),
    });
    let context = ctx_with_registry(client, registry.clone());
    let agent = image_agent(&format!("{IMAGE}:v1"), json!([{"name": "reg"}]));
    let res = reconcile_looked_up(&agent, &context, &log).await;
    assert!(res.is_ok(), "{res:?}");
    let seen = registry.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen.first().map(|(_, c)| c.clone()),
        Some(ari_oci::Credentials::basic("bot", "hunter2"))
    );
    let env = container_env(&log);
    let secret = env
        .iter()
        .find(|e| e["name"] == "ARI_MODULE_PULL_SECRET")
        .map(|e| e["valueFrom"]["secretKeyRef"].clone());
    assert_eq!(
        secret,
        Some(json!({"name": "reg", "key": ".dockerconfigjson", "optional": false}))
    );
    let written = format!("{:?}{:?}", find(&log, "PATCH", ""), find(&log, "POST", ""));
    assert!(
        !written.contains("hunter2"),
        "the password is never written"
    );
}

#[tokio::test]
async fn an_unmarked_or_opaque_pull_secret_is_refused_before_any_registry_call() {
    for (labels, type_) in [
        (json!({}), "kubernetes.io/dockerconfigjson"),
        (json!({"ari.dev/pull-secret": "true"}), "Opaque"),
    ] {
        let (registry, _) = FakeRegistry::with_echo();
        let registry = Arc::new(registry);
        let (client, log) = mock_client(move |m, p, b| match (m, p) {
            ("GET", "/api/v1/namespaces/demo/secrets/reg") => {
                (200, pull_secret_json(labels.clone(), type_))
            }
            _ => agent_routes(m, p, b),
        });
        let context = ctx_with_registry(client, registry.clone());
        let agent = image_agent(&format!("{IMAGE}:v1"), json!([{"name": "reg"}]));
        let res = crate::agent::controller::reconcile(Arc::new(agent), context).await;
        assert!(res.is_ok(), "{res:?}");
        let c = written_condition(&log, "ModuleResolved");
        assert_eq!(c["reason"], "PullSecretRejected", "{c}");
        assert!(find(&log, "PATCH", "deployments").is_empty());
        assert!(
            registry.seen.lock().map(|s| s.is_empty()).unwrap_or(false),
            "no credentials of a refused secret went anywhere"
        );
    }
}

#[tokio::test]
async fn granted_models_reach_the_executors_only_with_marked_credentials_and_by_reference() {
    let model = |name: &str, secret: &str| {
        json!({"apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfig",
               "metadata": {"name": name, "namespace": "demo"},
               "spec": {"provider": "OpenAI", "endpoint": "http://m.example:8000/v1",
                        "model": "tiny", "credentials": {"name": secret, "key": "apiKey"}}})
    };
    let meta = |name: &str, labels: Value| {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"name": name, "namespace": "demo", "labels": labels}})
    };
    let (small, stolen) = (model("small", "openai-key"), model("stolen", "plain"));
    let (marked, unmarked) = (
        meta("openai-key", json!({"ari.dev/model-credentials": "true"})),
        meta("plain", json!({})),
    );
    let (client, log) = mock_client(move |m, p, b| match (m, p) {
        ("GET", "/apis/ari.dev/v1alpha1/namespaces/demo/modelconfigs") => (
            200,
            json!({"apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfigList",
                   "metadata": {}, "items": [small.clone(), stolen.clone()]}),
        ),
        ("GET", "/api/v1/namespaces/demo/secrets/openai-key") => (200, marked.clone()),
        ("GET", "/api/v1/namespaces/demo/secrets/plain") => (200, unmarked.clone()),
        _ => agent_routes(m, p, b),
    });
    let mut a = agent_json();
    a["spec"]["capabilities"]["models"] = json!({"allowed": ["small", "stolen", "absent"]});
    let agent: Agent = serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"));
    let res = crate::agent::controller::reconcile(Arc::new(agent), ctx(client)).await;
    assert!(res.is_ok(), "{res:?}");

    let dep = one(&log, "PATCH", "deployments/echo-executor").body;
    let env = dep["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    let var = |name: &str| {
        env.as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    let list: Value = serde_json::from_str(var("ARI_MODELS")["value"].as_str().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("ARI_MODELS: {e}"));
    let names: Vec<_> = list
        .as_array()
        .map(|l| l.iter().map(|m| m["name"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(names, [json!("small")]);
    assert_eq!(
        var("ARI_MODEL_KEY_0")["valueFrom"]["secretKeyRef"],
        json!({"name": "openai-key", "key": "apiKey", "optional": true})
    );
    assert!(!dep.to_string().contains("\"plain\""), "{dep}");
    let available = written_condition(&log, "ModelsAvailable");
    assert_eq!(available["status"], "False");
    let message = available["message"].as_str().unwrap_or("");
    assert!(
        message.contains("model stolen: its credentials Secret is not labelled")
            && message.contains("model absent: no ModelConfig"),
        "{available}"
    );
}

/// A declarative Agent named `echo` (the routes' name) whose prompt is in ConfigMap `prompts`.
fn declarative_agent(model: &str) -> Agent {
    let a = json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "echo", "namespace": "demo", "uid": "agent-uid", "generation": 1},
        "spec": {
            "declarative": {"instructionsFrom": {"name": "prompts", "key": "triage"},
                            "model": model},
            "capabilities": {"models": {"allowed": ["small"]}}
        }
    });
    serde_json::from_value(a).unwrap_or_else(|e| panic!("{e}"))
}

/// `agent_routes` plus the prompt's ConfigMap and an empty list of ModelConfigs.
fn declarative_routes(method: &str, path: &str, body: &Value) -> (u16, Value) {
    match (method, path) {
        ("GET", "/api/v1/namespaces/demo/configmaps/prompts") => (
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompts"},
                   "data": {"triage": "You triage tickets."}}),
        ),
        ("GET", "/apis/ari.dev/v1alpha1/namespaces/demo/modelconfigs") => (
            200,
            json!({"apiVersion": "ari.dev/v1alpha1", "kind": "ModelConfigList",
                   "metadata": {}, "items": []}),
        ),
        _ => agent_routes(method, path, body),
    }
}

fn with_stock(stock: Result<String, String>) -> Settings {
    Settings {
        stock_agent: stock,
        ..Settings::default()
    }
}

#[tokio::test]
async fn a_declarative_agent_runs_the_pinned_stock_component_with_its_declarations_digest() {
    let (client, log) = mock_client(declarative_routes);
    let stock = format!("sha256:{}", "5".repeat(64));
    let context = ctx_with(
        client,
        Arc::new(FakeRegistry::default()),
        with_stock(Ok(stock.clone())),
    );
    let agent = declarative_agent("small");
    let res = crate::agent::controller::reconcile(Arc::new(agent.clone()), context).await;
    assert!(res.is_ok(), "{res:?}");

    // The digest of the declaration with the ConfigMap's prompt in place.
    let declared = agent.spec.declarative.clone().unwrap_or_default();
    let resolved = declared
        .resolved(Some("You triage tickets.".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    let digest = format!("sha256:{}", resolved.sha256());
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    assert_eq!(st["declarationDigest"], digest.as_str(), "{st}");
    assert_eq!(st["moduleDigest"], stock.as_str(), "{st}");

    let dep = one(&log, "PATCH", "deployments/echo-executor").body;
    let env = dep["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    let var = |name: &str| {
        env.as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(var("ARI_MODULE_DIGEST")["value"], stock.as_str());
    assert_eq!(var("ARI_DECLARATION_DIGEST")["value"], digest.as_str());
}

#[tokio::test]
async fn a_pooled_declarative_agent_is_resolved_as_a_dedicated_one_but_gets_no_deployment() {
    let (client, log) = mock_client(declarative_routes);
    let stock = format!("sha256:{}", "5".repeat(64));
    let context = ctx_with(
        client,
        Arc::new(FakeRegistry::default()),
        with_stock(Ok(stock.clone())),
    );
    let mut agent = declarative_agent("small");
    agent.spec.executor.pool = Some("shared".into());
    let res = crate::agent::controller::reconcile(Arc::new(agent.clone()), context).await;
    assert!(res.is_ok(), "{res:?}");

    // The pool pod pins what the status says, as a dedicated pod pins its variables.
    let declared = agent.spec.declarative.clone().unwrap_or_default();
    let resolved = declared
        .resolved(Some("You triage tickets.".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    let st = one(&log, "PATCH", "agents/echo/status").body["status"].clone();
    assert_eq!(
        st["declarationDigest"],
        format!("sha256:{}", resolved.sha256()).as_str(),
        "{st}"
    );
    assert_eq!(st["moduleDigest"], stock.as_str(), "{st}");
    assert!(find(&log, "PATCH", "deployments").is_empty());
}

#[tokio::test]
async fn without_a_stock_component_a_declarative_agent_is_not_resolved_and_gets_no_executors() {
    let (client, log) = mock_client(declarative_routes);
    let context = ctx_with(
        client,
        Arc::new(FakeRegistry::default()),
        with_stock(Err("the stock agent component cannot be read".into())),
    );
    let res =
        crate::agent::controller::reconcile(Arc::new(declarative_agent("small")), context).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "deployments").is_empty());
    let c = written_condition(&log, "ModuleResolved");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "StockAgentMissing", "{c}");
}

#[tokio::test]
async fn a_declaration_naming_an_ungranted_model_is_invalid_and_gets_no_executors() {
    let (client, log) = mock_client(declarative_routes);
    let context = ctx_with(
        client,
        Arc::new(FakeRegistry::default()),
        with_stock(Ok(format!("sha256:{}", "5".repeat(64)))),
    );
    let res =
        crate::agent::controller::reconcile(Arc::new(declarative_agent("large")), context).await;
    assert!(res.is_ok(), "{res:?}");
    assert!(find(&log, "PATCH", "deployments/echo-executor").is_empty());
    let c = written_condition(&log, "Valid");
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("model large: not in capabilities.models.allowed"),
        "{c}"
    );
}
