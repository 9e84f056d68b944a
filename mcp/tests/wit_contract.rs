//! The host's types mirror `interface tools` of `wit/tools.wit`: every case of `tool-error` is a
//! case of [`ToolError`] and every hint of `tool-hints` a field of [`ToolHints`], by name (the
//! WIT's kebab-case is the JSON's camelCase), so the runtime's translation is case for case.

use std::collections::BTreeSet;
use std::path::Path;

use ari_mcp::{ToolError, ToolHints};
use wit_parser::{Resolve, TypeDefKind};

fn wit_names(name: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_path(&dir).expect("wit/ parses");
    let id = *resolve.packages[pkg]
        .interfaces
        .get("tools")
        .expect("interface tools");
    let ty = resolve.interfaces[id].types.get(name).expect("type");
    let names: Vec<String> = match &resolve.types[*ty].kind {
        TypeDefKind::Record(r) => r.fields.iter().map(|f| f.name.clone()).collect(),
        TypeDefKind::Variant(v) => v.cases.iter().map(|c| c.name.clone()).collect(),
        other => panic!("{name} is {other:?}"),
    };
    names.into_iter().map(|n| camel(&n)).collect()
}

fn camel(kebab: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in kebab.chars() {
        match (c, up) {
            ('-', _) => up = true,
            (c, true) => {
                out.extend(c.to_uppercase());
                up = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

#[test]
fn every_tool_error_case_is_the_wits() {
    let all = [
        ToolError::denied(""),
        ToolError::not_found(""),
        ToolError::invalid(""),
        ToolError::unavailable(""),
        ToolError::timeout(""),
        ToolError::too_large(""),
        ToolError::server(""),
        ToolError::rejected(""),
    ];
    let kinds: BTreeSet<String> = all
        .iter()
        .map(|e| {
            let json = serde_json::to_value(e).expect("json");
            json["kind"].as_str().expect("kind").to_owned()
        })
        .collect();
    assert_eq!(kinds, wit_names("tool-error"));
}

#[test]
fn every_hint_is_the_wits() {
    let all = ToolHints {
        read_only: Some(true),
        destructive: Some(true),
        idempotent: Some(true),
        open_world: Some(true),
    };
    let json = serde_json::to_value(all).expect("json");
    let fields: BTreeSet<String> = json.as_object().expect("object").keys().cloned().collect();
    assert_eq!(fields, wit_names("tool-hints"));
}
