//! Whether a Task's attestation vouches for the Task, checked against what its Agent publishes:
//! the Agent's key signed it, and it names this Task, the output and ending its status shows,
//! and the Agent's module and config. `kubectl ari verify` and the e2e suite ask this one
//! question. (Replaying the run needs its trace, which the cluster does not keep yet.)

use ari_model::Attestation;
use ari_model::attestation::{AttestationError, RunPredicate, parse_public_key, sha256_hex};
use kube::ResourceExt;

use crate::{Agent, Task};

/// Why a Task's attestation does not vouch for it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unverified {
    #[error("the Task has no attestation (it has not ended, or ended before it ran)")]
    NoAttestation,
    #[error("the Agent publishes no attestation key (status.attestationPublicKey)")]
    NoKey,
    #[error(transparent)]
    Signature(#[from] AttestationError),
    #[error("the attestation is for Task {0}, not this one")]
    OtherTask(String),
    #[error("the attestation's output {attested} differs from status.outputSha256 {shown:?}")]
    Output {
        attested: String,
        shown: Option<String>,
    },
    #[error("the attestation's ending {attested} differs from the status's {shown}")]
    Ending { attested: String, shown: String },
    #[error(
        "the attestation's module {attested} is not the Agent's current module {current} (changed since the run?)"
    )]
    Module { attested: String, current: String },
    #[error(
        "the attestation's config {attested} is not the digest {current} of the Agent's current spec.config or declaration (changed since the run?)"
    )]
    Config { attested: String, current: String },
    #[error("the attestation's input {attested} is not the digest of spec.items[{item}]")]
    Input { attested: String, item: usize },
}

/// A Task's attestation that holds, and the run it vouches for.
#[derive(Debug)]
pub struct Verified<'a> {
    pub envelope: &'a Attestation,
    pub run: RunPredicate,
}

/// The Task's attestation, once every check holds.
pub fn attestation<'a>(task: &'a Task, agent: &Agent) -> Result<Verified<'a>, Unverified> {
    let status = task.status.as_ref().ok_or(Unverified::NoAttestation)?;
    let envelope = status
        .attestation
        .as_ref()
        .ok_or(Unverified::NoAttestation)?;
    let shown = Shown {
        name: task.name_any(),
        output_sha256: status.output_sha256.clone(),
        phase: status.phase,
        reason: status.reason,
    };
    let run = vouches(envelope, task, agent, &shown)?;
    Ok(Verified { envelope, run })
}

/// Item `result` of a Task of items, once every check holds: its own envelope names the item
/// (`task/index`), its input is that item of `spec.items`, and its output and ending are the
/// line's.
pub fn item<'a>(
    task: &Task,
    agent: &Agent,
    result: &'a crate::items::ItemResult,
) -> Result<Verified<'a>, Unverified> {
    let index = usize::try_from(result.index).unwrap_or(usize::MAX);
    let shown = Shown {
        name: crate::items::item_id(&task.name_any(), index),
        output_sha256: Some(result.output_sha256.clone()),
        phase: Some(result.phase),
        reason: Some(result.reason),
    };
    let run = vouches(&result.attestation, task, agent, &shown)?;
    let input = task.spec.items.as_ref().and_then(|items| items.get(index));
    let expected = input.map(|i| sha256_hex(i.as_bytes())).unwrap_or_default();
    if run.input_sha256 != expected {
        return Err(Unverified::Input {
            attested: run.input_sha256.clone(),
            item: index,
        });
    }
    Ok(Verified {
        envelope: &result.attestation,
        run,
    })
}

/// What the status shows of the run an envelope must vouch for.
struct Shown {
    name: String,
    output_sha256: Option<String>,
    phase: Option<crate::TaskPhase>,
    reason: Option<crate::TaskReason>,
}

/// The checks every envelope passes: the Agent's key signed it, it names this run of this
/// Task, the output and ending shown, and the Agent's module and config.
fn vouches(
    envelope: &Attestation,
    task: &Task,
    agent: &Agent,
    shown: &Shown,
) -> Result<RunPredicate, Unverified> {
    let published = agent
        .status
        .as_ref()
        .and_then(|s| s.attestation_public_key.as_deref())
        .ok_or(Unverified::NoKey)?;
    let att = envelope
        .verify(Some(&parse_public_key(published)?))?
        .predicate;
    let same_task = att.task.namespace == task.namespace().unwrap_or_default()
        && att.task.name == shown.name
        && Some(&att.task.uid) == task.uid().as_ref();
    if !same_task {
        return Err(Unverified::OtherTask(format!(
            "{}/{}",
            att.task.namespace, att.task.name
        )));
    }
    if Some(&att.output_sha256) != shown.output_sha256.as_ref() {
        return Err(Unverified::Output {
            attested: att.output_sha256.clone(),
            shown: shown.output_sha256.clone(),
        });
    }
    if Some(att.ending.phase) != shown.phase || Some(att.ending.reason) != shown.reason {
        return Err(Unverified::Ending {
            attested: format!("{:?}/{:?}", att.ending.phase, att.ending.reason),
            shown: format!("{:?}/{:?}", shown.phase, shown.reason),
        });
    }
    check_agent(&att, agent)?;
    Ok(att)
}

/// The run's module and config are the Agent's current ones.
fn check_agent(att: &RunPredicate, agent: &Agent) -> Result<(), Unverified> {
    let module = agent
        .status
        .as_ref()
        .and_then(|s| s.module_digest.clone())
        .unwrap_or_default();
    if !module.ends_with(&att.module_sha256) {
        return Err(Unverified::Module {
            attested: att.module_sha256.clone(),
            current: module,
        });
    }
    // The executor signs the config it handed the guest: the Agent's `spec.config`, or for a
    // declarative Agent its declaration's canonical bytes, whose digest the operator publishes
    // (the system prompt may come from a ConfigMap, so the spec alone does not fix it).
    let config = match &agent.spec.declarative {
        Some(_) => agent
            .status
            .as_ref()
            .and_then(|s| s.declaration_digest.as_deref())
            .map(|d| d.trim_start_matches("sha256:").to_owned())
            .unwrap_or_default(),
        None => sha256_hex(agent.spec.config.as_deref().unwrap_or_default().as_bytes()),
    };
    if att.config_sha256 != config {
        return Err(Unverified::Config {
            attested: att.config_sha256.clone(),
            current: config,
        });
    }
    Ok(())
}
