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
        ["Agent", "Phase", "Reason", "Fuel", "Duration", "Age"]
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
fn chart_carries_the_same_crds() {
    for name in ["ari.dev_agents.yaml", "ari.dev_tasks.yaml"] {
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
