//! The JSON Schema of a plan proposal: what a planner Agent must output. Checked in at
//! `plan/proposal.schema.json` (a test fails on drift; `ARI_BLESS=1 cargo test -p ari-plan`
//! rewrites it) so planner authors, and prompts for model-backed planners, can use it as is.

use serde_json::Value;

use crate::model::Proposal;

/// The proposal schema (JSON Schema 2020-12), as checked in.
pub fn proposal_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Proposal)).unwrap_or(Value::Null)
}

/// The checked-in text: the schema, pretty-printed, with a final newline.
pub fn proposal_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&proposal_schema()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_proposal_schema_matches_the_types() {
        // Read at run time: a test binary reused from a checkout elsewhere (a shared target
        // directory) must still compare against this checkout's file.
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
        let path = std::path::Path::new(&dir).join("proposal.schema.json");
        let want = proposal_schema_text();
        if std::env::var_os("ARI_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            got == want,
            "{} is stale: ARI_BLESS=1 cargo test -p ari-plan",
            path.display()
        );
    }

    #[test]
    fn the_schema_requires_steps_and_names_each_step_field() {
        let s = proposal_schema();
        assert_eq!(s["required"], serde_json::json!(["steps"]));
        let step = &s["$defs"]["Step"]["properties"];
        for f in [
            "name",
            "agentRef",
            "input",
            "inputFrom",
            "dependsOn",
            "outputs",
            "fuel",
        ] {
            assert!(step.get(f).is_some(), "Step.{f} missing: {step}");
        }
    }
}
