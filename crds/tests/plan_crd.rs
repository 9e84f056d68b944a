//! The Plan CRD: the checked-in YAML is what the types generate, its names and columns are
//! what `kubectl get plans` shows, and its CEL rules hold and fit the API server's cost budget.

use ari_crds::Plan;
use kube::CustomResourceExt;
use kube::core::cel::{WarningKind, compile_schema, estimate_rule_cost};
use serde_json::{Value, json};

fn plan(spec: Value) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": "p", "namespace": "n"}, "spec": spec
    }))
    .unwrap_or_else(|e| panic!("plan JSON: {e}"))
}

fn errors(p: &Plan) -> String {
    match p.validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

fn steps() -> Value {
    json!([{"name": "a", "agentRef": {"name": "echo"}, "input": "x"}])
}

#[test]
fn plans_yaml_matches_the_types() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ari.dev_plans.yaml");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    let want = ari_crds::plan_crd_yaml().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        have == want,
        "CRD YAML drifted from the Rust types: run `cargo run -p ari-crds --bin crdgen`"
    );
}

#[test]
fn the_plan_crd_has_a_short_name_columns_and_a_status_subresource() {
    let crd = Plan::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["pl".to_owned()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["ari".to_owned()]));
    let v = &crd.spec.versions[0];
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Phase", "Reason", "Steps", "Duration", "Age"]);
}

#[test]
fn a_plan_has_exactly_one_of_steps_and_planner() {
    assert_eq!(errors(&plan(json!({"steps": steps()}))), "");
    assert_eq!(
        errors(&plan(
            json!({"planner": {"agentRef": {"name": "p"}, "input": "go"}})
        )),
        ""
    );
    assert!(errors(&plan(json!({}))).contains("exactly one of steps and planner"));
    let both = json!({"steps": steps(), "planner": {"agentRef": {"name": "p"}}});
    assert!(errors(&plan(both)).contains("exactly one of steps and planner"));
}

#[test]
fn a_plan_spec_is_immutable_but_cancelled_may_be_set_once() {
    let old = plan(json!({"steps": steps()}));
    let changed = plan(json!({"steps": [{"name": "b", "agentRef": {"name": "echo"}}]}));
    let err = changed.validate_cel_update(&old).map(|_| ()).unwrap_err();
    assert!(format!("{err:?}").contains("immutable"), "{err:?}");
    let cancelled = plan(json!({"steps": steps(), "cancelled": true}));
    assert!(cancelled.validate_cel_update(&old).is_ok());
    let uncancelled = plan(json!({"steps": steps(), "cancelled": false}));
    assert!(uncancelled.validate_cel_update(&cancelled).is_err());
}

#[test]
fn every_plan_rule_compiles_within_the_cost_budget() {
    let crd = Plan::crd();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap_or_default();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    let compiled = compile_schema(spec);
    assert!(
        compiled.compilation_errors().is_empty(),
        "{:?}",
        compiled.compilation_errors()
    );
    let rules: Vec<&str> = spec["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["rule"].as_str())
        .collect();
    assert_eq!(rules.len(), 2);
    for rule in rules {
        let over: Vec<_> = estimate_rule_cost(rule, &compiled)
            .into_iter()
            .filter(|w| matches!(w.kind, WarningKind::CostExceeded))
            .collect();
        assert!(over.is_empty(), "{rule}: {over:?}");
    }
}

#[test]
fn allowed_agents_cannot_change_once_the_plan_exists_not_even_while_cancelling() {
    let old = plan(json!({"steps": steps(), "allowedAgents": ["echo"]}));
    let widened = plan(json!({"steps": steps(), "allowedAgents": ["echo", "admin"],
                              "cancelled": true}));
    let err = widened.validate_cel_update(&old).map(|_| ()).unwrap_err();
    assert!(format!("{err:?}").contains("immutable"), "{err:?}");
    let cancelled = plan(json!({"steps": steps(), "allowedAgents": ["echo"], "cancelled": true}));
    assert!(cancelled.validate_cel_update(&old).is_ok());
}

#[test]
fn docs_name_every_history_event_and_plan_step_reason() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/plans.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    for event in ari_crds::HistoryEvent::ALL {
        assert!(
            doc.contains(&format!("`{}`", event.as_str())),
            "docs/plans.md does not name history event {event}"
        );
    }
    for reason in ari_crds::plan::PlanStepReason::ALL {
        let reason = reason.as_str();
        assert!(
            doc.contains(&format!("`{reason}`")),
            "docs/plans.md does not name step reason {reason}"
        );
    }
    let schema = ari_plan::schema::proposal_schema_text();
    assert!(
        schema.contains("<plan>-<step>.<attempt>") && !schema.contains("<plan>-<step>-<n>"),
        "the proposal schema names retries as the operator does"
    );
    assert_eq!(
        ari_crds::plan_view::step_task_name("p", "s", 2),
        "p-s.2",
        "docs/plans.md: a retry is <plan>-<step>.2"
    );
    assert!(doc.contains("`<plan>-<step>.2`"));
}
