//! The checked-in CRD YAML must be exactly what the types generate.

use std::path::Path;

fn checked_in(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

const HINT: &str = "CRD YAML drifted from the Rust types: run `cargo run -p ari-crds --bin crdgen`";

#[test]
fn agents_yaml_matches_types() {
    let generated = ari_crds::agent_crd_yaml().expect("serialize Agent CRD");
    assert!(generated == checked_in("ari.dev_agents.yaml"), "{HINT}");
}

#[test]
fn tasks_yaml_matches_types() {
    let generated = ari_crds::task_crd_yaml().expect("serialize Task CRD");
    assert!(generated == checked_in("ari.dev_tasks.yaml"), "{HINT}");
}

#[test]
fn crds_declare_names_columns_subresources_and_selectable_field() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let agents: CustomResourceDefinition =
        serde_yaml::from_str(&checked_in("ari.dev_agents.yaml")).expect("parse agents CRD");
    let tasks: CustomResourceDefinition =
        serde_yaml::from_str(&checked_in("ari.dev_tasks.yaml")).expect("parse tasks CRD");

    for (crd, short) in [(&agents, "ag"), (&tasks, "tk")] {
        assert_eq!(crd.spec.group, "ari.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_owned()][..])
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["ari".to_owned()][..])
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
    let cols = |crd: &CustomResourceDefinition| -> Vec<String> {
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(cols(&agents), ["Ready", "Replicas", "Module digest", "Age"]);
    assert_eq!(
        cols(&tasks),
        [
            "Agent",
            "Phase",
            "Reason",
            "Fuel",
            "Tokens In",
            "Tokens Out",
            "Duration",
            "Verified",
            "Parent",
            "Age"
        ]
    );
    let selectable: Vec<String> = tasks.spec.versions[0]
        .selectable_fields
        .iter()
        .flatten()
        .map(|f| f.json_path.clone())
        .collect();
    assert_eq!(selectable, [".spec.agentRef.name"]);
}

#[test]
fn a_task_may_require_every_capability_there_is() {
    let crd: serde_json::Value =
        serde_yaml::from_str(&checked_in("ari.dev_tasks.yaml")).expect("tasks CRD parses");
    let caps = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["requirements"]["properties"]["capabilities"];
    assert_eq!(
        caps["maxItems"].as_u64(),
        Some(ari_crds::CapabilityName::ALL.len() as u64),
        "{caps}"
    );
    assert_eq!(
        caps["items"]["enum"].as_array().map(Vec::len),
        Some(ari_crds::CapabilityName::ALL.len())
    );
}

/// Every CRD file crdgen writes.
const CRD_FILES: [&str; 6] = [
    "ari.dev_agents.yaml",
    "ari.dev_tasks.yaml",
    "ari.dev_plans.yaml",
    "ari.dev_modelconfigs.yaml",
    "ari.dev_mcpservers.yaml",
    "ari.dev_executorpools.yaml",
];

#[test]
fn chart_carries_the_same_crds() {
    for name in CRD_FILES {
        let chart = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../charts/ari/crds")
            .join(name);
        let copy = std::fs::read_to_string(&chart)
            .unwrap_or_else(|e| panic!("read {}: {e}", chart.display()));
        assert!(
            copy == checked_in(name),
            "charts/ari/crds/{name} differs from crds/{name}: run `cargo run -p ari-crds --bin crdgen -- charts/ari/crds`"
        );
    }
}

/// Every `(path, format, minimum, maximum)` of an integer in a schema, nested fields included.
fn integers(v: &serde_json::Value, path: &str, out: &mut Vec<(String, String, f64, f64)>) {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("type").and_then(|t| t.as_str()) == Some("integer") {
                let num = |k: &str| m.get(k).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
                let format = m.get("format").and_then(|f| f.as_str()).unwrap_or("");
                out.push((
                    path.to_owned(),
                    format.to_owned(),
                    num("minimum"),
                    num("maximum"),
                ));
            }
            for (k, child) in m {
                integers(child, &format!("{path}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                integers(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A value the API server accepts but the Rust type cannot hold makes every typed list that
/// contains the object fail to decode (issue 13, item 3): the schema must refuse it instead.
#[test]
fn every_integer_field_is_bounded_to_what_its_rust_type_holds() {
    for name in CRD_FILES {
        let crd: serde_json::Value = serde_yaml::from_str(&checked_in(name)).expect("parse CRD");
        let mut found = Vec::new();
        integers(&crd["spec"]["versions"][0]["schema"], "", &mut found);
        assert!(!found.is_empty(), "{name}: no integer fields found");
        for (path, format, min, max) in found {
            let (lo, hi) = match format.as_str() {
                "uint32" => (0.0, f64::from(u32::MAX)),
                "int32" => (f64::from(i32::MIN), f64::from(i32::MAX)),
                "uint64" | "uint" => (0.0, f64::INFINITY),
                // int64 holds whatever the API server stores.
                "int64" | "int" => continue,
                other => panic!("{name}{path}: integer of unknown format {other:?}"),
            };
            assert!(
                min >= lo,
                "{name}{path} ({format}): minimum {min} below {lo}"
            );
            assert!(
                max <= hi || (max.is_nan() && hi.is_infinite()),
                "{name}{path} ({format}): maximum {max} missing or above {hi}"
            );
        }
    }
}

/// Issue 26 item 11: `spec.parent`'s name, agent and uid are patterned as the names and uid
/// they copy (a name ends up in request paths), as `agentRef.name` is.
#[test]
fn a_parent_reference_is_patterned_like_the_names_and_uid_it_copies() {
    let crd: serde_json::Value =
        serde_yaml::from_str(&checked_in("ari.dev_tasks.yaml")).expect("tasks CRD parses");
    let parent = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["parent"]["properties"];
    let long = "a".repeat(300);
    let cases: [(&str, &[&str], &[&str]); 3] = [
        (
            "name",
            &["doc", "doc-1.v2"],
            &["../x", "a/b", "Doc", "-x", &long],
        ),
        (
            "agent",
            &["research"],
            &["../x", "x/../../secrets", "", &long],
        ),
        (
            "uid",
            &["0b5e2f8c-9a1d-4c3e-8f7a-6d5c4b3a2f10"],
            &["0000", "../x", "0B5E2F8C-9A1D-4C3E-8F7A-6D5C4B3A2F10"],
        ),
    ];
    for (field, good, bad) in cases {
        let schema = &parent[field];
        let pattern = schema["pattern"]
            .as_str()
            .unwrap_or_else(|| panic!("spec.parent.{field} has no pattern: {schema}"));
        let re = regex::Regex::new(pattern).expect("pattern compiles");
        let max = schema["maxLength"].as_u64().expect("maxLength") as usize;
        let admitted = |v: &str| re.is_match(v) && v.len() <= max;
        for v in good {
            assert!(admitted(v), "spec.parent.{field} refuses {v:?}");
        }
        for v in bad {
            assert!(!admitted(v), "spec.parent.{field} admits {v:?}");
        }
    }
}
