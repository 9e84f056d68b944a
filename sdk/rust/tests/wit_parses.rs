//! The WIT contract parses and has exactly the shape the executor and the SDK rely on.

use std::path::Path;

use wit_parser::{InterfaceId, PackageId, Resolve, TypeDefKind, WorldItem};

fn load() -> (Resolve, PackageId) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_path(&dir).expect("wit/ari.wit parses");
    (resolve, pkg)
}

fn interface(resolve: &Resolve, pkg: PackageId, name: &str) -> InterfaceId {
    *resolve.packages[pkg]
        .interfaces
        .get(name)
        .unwrap_or_else(|| panic!("interface {name} missing"))
}

fn function_names(resolve: &Resolve, id: InterfaceId) -> Vec<&str> {
    resolve.interfaces[id]
        .functions
        .keys()
        .map(String::as_str)
        .collect()
}

fn record_fields(resolve: &Resolve, id: InterfaceId, record: &str) -> Vec<String> {
    let ty = resolve.interfaces[id]
        .types
        .get(record)
        .unwrap_or_else(|| panic!("type {record} missing"));
    match &resolve.types[*ty].kind {
        TypeDefKind::Record(r) => r.fields.iter().map(|f| f.name.clone()).collect(),
        other => panic!("{record} is not a record: {other:?}"),
    }
}

#[test]
fn package_is_ainur_ari_2_0_0() {
    let (resolve, pkg) = load();
    let name = &resolve.packages[pkg].name;
    assert_eq!(name.namespace, "ainur");
    assert_eq!(name.name, "ari");
    assert_eq!(
        name.version.as_ref().map(ToString::to_string).as_deref(),
        Some("2.0.0")
    );
}

#[test]
fn agent_interface_has_lifecycle_functions_and_records() {
    let (resolve, pkg) = load();
    let agent = interface(&resolve, pkg, "agent");
    assert_eq!(
        function_names(&resolve, agent),
        ["initialize", "can-execute", "estimate", "execute"]
    );
    assert_eq!(
        record_fields(&resolve, agent, "task-spec"),
        ["id", "input", "requirements", "deadline-seconds"]
    );
    assert_eq!(
        record_fields(&resolve, agent, "execution-result"),
        ["output", "resources-used", "attestation"]
    );
    assert_eq!(
        record_fields(&resolve, agent, "resource-usage"),
        [
            "cpu-millis",
            "memory-bytes",
            "storage-bytes",
            "network-bytes"
        ]
    );
}

#[test]
fn host_interface_has_every_capability_function() {
    let (resolve, pkg) = load();
    let host = interface(&resolve, pkg, "host");
    let names = function_names(&resolve, host);
    for f in [
        "log",
        "storage-get",
        "storage-set",
        "storage-delete",
        "random-bytes",
        "hash",
        "sign",
        "verify",
        "http-request",
        "now",
    ] {
        assert!(names.contains(&f), "host lacks {f}; has {names:?}");
    }
}

fn variant_cases(resolve: &Resolve, id: InterfaceId, name: &str) -> Vec<String> {
    let ty = resolve.interfaces[id]
        .types
        .get(name)
        .unwrap_or_else(|| panic!("type {name} missing"));
    match &resolve.types[*ty].kind {
        TypeDefKind::Variant(v) => v.cases.iter().map(|c| c.name.clone()).collect(),
        TypeDefKind::Enum(e) => e.cases.iter().map(|c| c.name.clone()).collect(),
        other => panic!("{name} is not a variant or enum: {other:?}"),
    }
}

#[test]
fn errors_are_typed_variants_an_sdk_can_map_case_by_case() {
    let (resolve, pkg) = load();
    let types = interface(&resolve, pkg, "types");
    assert_eq!(
        variant_cases(&resolve, types, "error-code"),
        ["denied", "invalid-input", "unsupported", "failed"]
    );
    assert_eq!(
        variant_cases(&resolve, types, "storage-error"),
        ["denied", "quota-exceeded", "invalid-key", "failed"]
    );
    assert_eq!(
        variant_cases(&resolve, types, "http-error"),
        ["denied", "invalid-request", "failed", "rejected"]
    );
    assert_eq!(
        variant_cases(&resolve, types, "delegation-error"),
        [
            "denied",
            "limit-reached",
            "unavailable",
            "budget-exhausted",
            "failed",
            "invalid-handle",
            "rejected"
        ]
    );
    assert_eq!(
        variant_cases(&resolve, types, "hash-algorithm"),
        ["sha256", "sha384", "sha512"]
    );
    assert_eq!(
        record_fields(&resolve, types, "estimation"),
        ["fuel", "duration-millis", "memory-bytes"]
    );
}

#[test]
fn world_imports_host_and_exports_agent_only() {
    let (resolve, pkg) = load();
    let world = resolve.packages[pkg]
        .worlds
        .get("ari-agent")
        .expect("world ari-agent");
    let world = &resolve.worlds[*world];
    let ids = |items: &wit_parser::IndexMap<_, WorldItem>| -> Vec<InterfaceId> {
        items
            .values()
            .filter_map(|item| match item {
                WorldItem::Interface { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    };
    let mut imports = ids(&world.imports);
    imports.sort();
    let mut expected = [
        interface(&resolve, pkg, "types"),
        interface(&resolve, pkg, "host"),
        interface(&resolve, pkg, "model"),
        interface(&resolve, pkg, "tools"),
        interface(&resolve, pkg, "conversation"),
    ];
    expected.sort();
    assert_eq!(
        imports, expected,
        "the world imports `host`, `model`, `tools`, `conversation` and the shared `types`"
    );
    assert_eq!(ids(&world.exports), [interface(&resolve, pkg, "agent")]);
    assert_eq!(world.exports.len(), 1, "the world exports only `agent`");
}
