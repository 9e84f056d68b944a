//! `ari run --continues REPORT`: a local conversation. Each earlier turn is the JSON report of
//! a run that ended asking for input (`ari run --json`), oldest first; the new run is the
//! reply, with those turns as its history and its place signed in its attestation, as an
//! executor does for a Task with `spec.continues`.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use ari_crds::TaskReason;
use ari_crds::conversation::{ConversationLink, MAX_TURNS, Turn, bounded};
use ari_runtime::RunReport;

/// The history and link of a reply to the turns in `reports` (oldest first); `None` for none.
pub fn continued(reports: &[PathBuf]) -> anyhow::Result<Option<(Vec<Turn>, ConversationLink)>> {
    if reports.len() >= MAX_TURNS as usize {
        bail!("--continues: a conversation has at most {MAX_TURNS} turns");
    }
    let mut turns = Vec::with_capacity(reports.len());
    let mut last: Option<RunReport> = None;
    for (i, path) in reports.iter().enumerate() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--continues: cannot read {}", path.display()))?;
        let report: RunReport = serde_json::from_str(&text).with_context(|| {
            format!(
                "--continues: {} is not an `ari run --json` report",
                path.display()
            )
        })?;
        let predicate = report
            .attestation
            .predicate()
            .with_context(|| format!("--continues: {}: its attestation", path.display()))?;
        if predicate.ending.reason != TaskReason::InputRequired {
            bail!(
                "--continues: {} did not end asking for input (it ended {}/{})",
                path.display(),
                predicate.ending.phase,
                predicate.ending.reason
            );
        }
        if let Some(before) = &last {
            let linked = predicate
                .conversation
                .as_ref()
                .map(|l| &l.previous_attestation_sha256);
            if linked != Some(&before.attestation.sha256()) {
                bail!(
                    "--continues: {} does not continue the report before it (give the turns oldest first)",
                    path.display()
                );
            }
        }
        turns.push(Turn {
            number: i as u32 + 1,
            task: report.task_id.clone(),
            input: report.input_bytes()?,
            output: report.output_bytes()?,
        });
        last = Some(report);
    }
    let (Some(first), Some(last)) = (turns.first(), last) else {
        return Ok(None);
    };
    let link = ConversationLink {
        conversation: first.task.clone(),
        turn: turns.len() as u32 + 1,
        previous: last.task_id.clone(),
        previous_attestation_sha256: last.attestation.sha256(),
    };
    Ok(Some((bounded(turns), link)))
}
