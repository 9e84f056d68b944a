//! Offline verification of a run report: signature, digests, and re-execution from the trace.

use std::sync::Arc;

use ari_model::CapabilityName;
use ed25519_dalek::VerifyingKey;

use crate::attestation::{AttestationError, RunPredicate, generate_signing_key, sha256_hex};
use crate::capability::delegation::DelegationEvent;
use crate::capability::{Grants, LoadedModels, LoadedSigningKey, LoadedTools};
use crate::limits::{Limits, LimitsApplied};
use crate::report::RunReport;
use crate::runtime::{Runtime, RuntimeError};
use crate::task::{TaskOutcome, TaskRequest};
use crate::trace::TraceEvent;
use ari_model::grant::GrantSet;

/// What the verifier brings besides the report and the module.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Require the attestation to be signed by this key.
    pub trusted_key: Option<VerifyingKey>,
    /// Without `trusted_key`, accept the attestation's embedded `publicKey` (the caller then
    /// judges that key itself); without either, verification refuses.
    pub accept_embedded_key: bool,
    /// The agent's signing key, needed to replay a task that used `signing` (signatures are
    /// recomputed, not recorded).
    pub signing: Option<LoadedSigningKey>,
    /// The config the root task's guest was given (the Agent's `spec.config`; empty for none):
    /// checked against the signed `configSha256` and handed to the replay's `initialize`.
    pub config: Vec<u8>,
}

/// Which check failed. The `Display` text names the check first.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "signature check refused: no trusted key given; pin the signer's public key (the Agent's \
         status.attestationPublicKey) or explicitly accept the embedded key {embedded}"
    )]
    NoTrustedKey { embedded: String },
    #[error("signature check failed: {0}")]
    Signature(#[from] AttestationError),
    #[error(
        "module digest check failed: the attestation is for module {attested}, the given module is {actual}"
    )]
    ModuleDigest { attested: String, actual: String },
    #[error(
        "config digest check failed: the guest was given a config hashing to {attested}, the \
         config given to verify hashes to {actual}{hint}",
        hint = config_hint(.actual)
    )]
    ConfigDigest { attested: String, actual: String },
    #[error(
        "{what} digest check failed: the attestation says {attested}, the report's {what} hashes to {actual}"
    )]
    Digest {
        what: &'static str,
        attested: String,
        actual: String,
    },
    #[error("report is malformed: {0}")]
    Malformed(String),
    #[error("module cannot be loaded: {0}")]
    Load(#[from] RuntimeError),
    #[error("replay check failed: {0}")]
    Replay(String),
}

/// Runs every check, cheapest first; returns the replay outcome when all pass. The guest's
/// config is `opts.config`.
pub fn verify_report(
    runtime: &Runtime,
    report: &RunReport,
    module: &[u8],
    opts: &VerifyOptions,
) -> Result<TaskOutcome, VerifyError> {
    verify_one(runtime, report, module, &opts.config, opts).map(|(outcome, _)| outcome)
}

/// [`verify_report`] of a task whose guest was given `config`; also the signed predicate.
fn verify_one(
    runtime: &Runtime,
    report: &RunReport,
    module: &[u8],
    config: &[u8],
    opts: &VerifyOptions,
) -> Result<(TaskOutcome, RunPredicate), VerifyError> {
    if opts.trusted_key.is_none() && !opts.accept_embedded_key {
        return Err(VerifyError::NoTrustedKey {
            embedded: report.attestation.statement()?.predicate.public_key,
        });
    }
    let att = report
        .attestation
        .verify(opts.trusted_key.as_ref())?
        .predicate;

    let module_sha = sha256_hex(module);
    if module_sha != att.module_sha256 {
        return Err(VerifyError::ModuleDigest {
            attested: att.module_sha256.clone(),
            actual: module_sha,
        });
    }
    let config_sha = sha256_hex(config);
    if config_sha != att.config_sha256 {
        return Err(VerifyError::ConfigDigest {
            attested: att.config_sha256.clone(),
            actual: config_sha,
        });
    }
    let input = report
        .input_bytes()
        .map_err(|e| VerifyError::Malformed(e.to_string()))?;
    check_digest("input", &att.input_sha256, &sha256_hex(&input))?;
    let output = report
        .output_bytes()
        .map_err(|e| VerifyError::Malformed(e.to_string()))?;
    check_digest("output", &att.output_sha256, &sha256_hex(&output))?;
    check_digest("trace", &att.trace_sha256, &report.trace.sha256_hex())?;
    // Unsigned report fields a replay or a reader would use must agree with the signed ones.
    if report.limits_applied != att.limits_applied {
        return Err(VerifyError::Digest {
            what: "limitsApplied",
            attested: format!("{:?}", att.limits_applied),
            actual: format!("{:?}", report.limits_applied),
        });
    }
    let expected_kind = att
        .ending
        .failure_kind()
        .map_err(|e| VerifyError::Malformed(format!("ending: {e}")))?;
    if report.error.as_ref().map(|f| f.kind) != expected_kind {
        return Err(VerifyError::Digest {
            what: "ending",
            attested: format!("{}/{}", att.ending.phase, att.ending.reason),
            actual: ending(
                report.error.as_ref().map(|f| f.kind),
                report.error.as_ref().map(|f| f.message.as_str()),
            ),
        });
    }
    if report.resources_used != att.resources_used {
        return Err(VerifyError::Digest {
            what: "resourcesUsed",
            attested: format!("{:?}", att.resources_used),
            actual: format!("{:?}", report.resources_used),
        });
    }

    let seed = parse_seed(&att.seed)?;
    let agent = runtime.load(module)?;
    // Everything below comes from the signed attestation, never from the report's copies.
    let mut req = TaskRequest::new(
        att.task.name.clone(),
        input,
        Arc::new(generate_signing_key()),
    );
    req.config = config.to_vec();
    req.namespace = Some(att.task.namespace.clone()).filter(|n| !n.is_empty());
    req.uid = Some(att.task.uid.clone()).filter(|u| !u.is_empty());
    req.requirements = att.requirements.clone();
    req.grants = replay_grants(&att.limits_applied, opts)?;
    req.limits = replay_limits(&att.limits_applied);
    req.seed = Some(seed);
    req.executor = att.executor.clone();
    req.replay = Some(report.trace.clone());
    req.conversation = att.conversation.clone();
    // The depth decides which calls the grant refuses; the trace serves what children returned.
    if let Some(d) = &att.limits_applied.delegation {
        req.delegation = Some(crate::capability::DelegationContext {
            delegator: Arc::new(crate::local::NoChildren),
            depth: d.depth,
        });
    }
    let replay = agent.run(req);

    if replay.failure_kind() != expected_kind {
        return Err(VerifyError::Replay(format!(
            "the original run ended {}, the replay ended {}",
            ending(expected_kind, None),
            ending(
                replay.failure_kind(),
                replay.failure.as_ref().map(|f| f.message.as_str())
            ),
        )));
    }
    let asked = att.ending.reason == ari_model::TaskReason::InputRequired;
    if replay.input_required != asked {
        return Err(VerifyError::Replay(format!(
            "the original run {} for input, the replay {}",
            if asked { "asked" } else { "did not ask" },
            if replay.input_required {
                "did"
            } else {
                "did not"
            },
        )));
    }
    if replay.output_sha256 != att.output_sha256 {
        return Err(VerifyError::Replay(format!(
            "the replay produced output {}, the attestation says {}",
            replay.output_sha256, att.output_sha256
        )));
    }
    let replay_trace = replay.trace.sha256_hex();
    if replay_trace != att.trace_sha256 {
        return Err(VerifyError::Replay(format!(
            "the replay consumed trace {replay_trace}, the attestation says {}",
            att.trace_sha256
        )));
    }
    if replay.models != att.models {
        return Err(VerifyError::Replay(format!(
            "the replay's model usage {:?} differs from the attested {:?}",
            replay.models, att.models
        )));
    }
    if replay.resources_used.fuel != att.resources_used.fuel {
        return Err(VerifyError::Replay(format!(
            "the replay used {} fuel, the attestation says {}",
            replay.resources_used.fuel, att.resources_used.fuel
        )));
    }
    Ok((replay, att))
}

/// What a child's Agent ran: its component and the config its guest was given (empty for
/// none), by Agent name.
pub type AgentOf<'a> = &'a dyn Fn(&str) -> Option<(Vec<u8>, Vec<u8>)>;

/// Verifies a delegation tree: the root as [`verify_report`], then every child report under it
/// with its own module and config (`agent_of(agent)`), checking that each child is the one its
/// parent's signed trace names: an awaited child by its attestation digest, a message by its
/// Agent and input. Every awaited child of the trace must be in the report. Returns how many
/// tasks were verified.
pub fn verify_tree(
    runtime: &Runtime,
    report: &RunReport,
    module: &[u8],
    agent_of: AgentOf,
    opts: &VerifyOptions,
) -> Result<usize, VerifyError> {
    verify_node(runtime, report, module, &opts.config, agent_of, opts)
}

fn verify_node(
    runtime: &Runtime,
    report: &RunReport,
    module: &[u8],
    config: &[u8],
    agent_of: AgentOf,
    opts: &VerifyOptions,
) -> Result<usize, VerifyError> {
    let (_, attested) = verify_one(runtime, report, module, config, opts)?;
    let mut finished = std::collections::BTreeMap::new();
    let mut started = Vec::new();
    // Child index → task name, and task name → (tokens given, tokens the parent was charged).
    let mut task_of = std::collections::BTreeMap::new();
    let mut tokens = std::collections::BTreeMap::new();
    for event in &report.trace.events {
        match event {
            TraceEvent::Delegation(DelegationEvent::Finished {
                child,
                task,
                attestation_sha256,
                ..
            }) => {
                task_of.insert(*child, task.clone());
                if !attestation_sha256.is_empty() {
                    finished.insert(task.clone(), attestation_sha256.clone());
                }
            }
            TraceEvent::Delegation(DelegationEvent::Tokens {
                child,
                reserved,
                used,
            }) => {
                if let Some(task) = task_of.get(child) {
                    tokens.insert(task.clone(), (*reserved, *used));
                }
            }
            TraceEvent::Delegation(DelegationEvent::Started {
                agent,
                input_sha256,
                error: None,
                ..
            }) => started.push((agent.clone(), input_sha256.clone())),
            _ => {}
        }
    }
    let signed: std::collections::BTreeMap<_, _> = attested
        .children
        .iter()
        .map(|c| (c.task.clone(), c.attestation_sha256.clone()))
        .collect();
    if signed != finished {
        return Err(VerifyError::Replay(format!(
            "the attestation names the awaited children {signed:?}, the trace {finished:?}"
        )));
    }
    let mut verified = 1;
    for child in &report.children {
        let agent = child.agent.as_deref().ok_or_else(|| {
            VerifyError::Malformed(format!("child {} names no agent", child.task_id))
        })?;
        // Decoded once here; verify_node checks its signature below.
        let attested = child.attestation.predicate()?;
        match finished.remove(&child.task_id) {
            Some(named) => check_digest("child attestation", &named, &child.attestation.sha256())?,
            None if started.contains(&(agent.to_owned(), attested.input_sha256.clone())) => {}
            None => {
                return Err(VerifyError::Replay(format!(
                    "child {} ({agent}) is not one the parent's trace started",
                    child.task_id
                )));
            }
        }
        if let Some(&(reserved, used)) = tokens.get(&child.task_id) {
            let spent = attested.resources_used.tokens_spent();
            let given = attested.limits_applied.tokens.unwrap_or(0);
            child_tokens(&child.task_id, (reserved, used), (given, spent))?;
        }
        let (child_module, child_config) = agent_of(agent).ok_or_else(|| {
            VerifyError::Malformed(format!(
                "no module for Agent `{agent}` of child {} (pass --agent {agent}=FILE)",
                child.task_id
            ))
        })?;
        verified += verify_node(runtime, child, &child_module, &child_config, agent_of, opts)
            .map_err(|e| VerifyError::Replay(format!("child {} ({agent}): {e}", child.task_id)))?;
    }
    if let Some((task, _)) = finished.into_iter().next() {
        return Err(VerifyError::Replay(format!(
            "the parent awaited child {task}, whose report is missing"
        )));
    }
    Ok(verified)
}

/// The parent's trace (`reserved`, `used`) and the child's signed attestation (`given`,
/// `spent`) agree on the child's tokens: it had no more than it was given and the parent was
/// charged what it spent (a parent host that under-charged itself is caught here).
fn child_tokens(
    task: &str,
    (reserved, used): (u64, u64),
    (given, spent): (u64, u64),
) -> Result<(), VerifyError> {
    if spent.min(reserved) != used || given > reserved {
        return Err(VerifyError::Replay(format!(
            "child {task}: the parent's trace gave it {reserved} tokens and was charged {used}; \
             its attestation says it had {given} and spent {spent}"
        )));
    }
    Ok(())
}

/// Why a config digest differs: none given (the usual mistake), or another one.
fn config_hint(actual: &str) -> &'static str {
    if actual == sha256_hex(b"") {
        " (no config was given: pass the Agent's spec.config)"
    } else {
        " (not the config the task ran with)"
    }
}

fn ending(kind: Option<crate::FailureKind>, message: Option<&str>) -> String {
    match (kind, message) {
        (None, _) => "successfully".to_string(),
        (Some(k), Some(m)) => format!("with {k} ({m})"),
        (Some(k), None) => format!("with {k}"),
    }
}

fn check_digest(what: &'static str, attested: &str, actual: &str) -> Result<(), VerifyError> {
    if attested == actual {
        Ok(())
    } else {
        Err(VerifyError::Digest {
            what,
            attested: attested.to_string(),
            actual: actual.to_string(),
        })
    }
}

fn parse_seed(hex_seed: &str) -> Result<[u8; 32], VerifyError> {
    let bytes = hex::decode(hex_seed).map_err(|e| VerifyError::Malformed(format!("seed: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| VerifyError::Malformed("seed: expected 32 bytes".into()))
}

/// The grants the original run had, rebuilt from the signed `limitsApplied`.
fn replay_grants(applied: &LimitsApplied, opts: &VerifyOptions) -> Result<Grants, VerifyError> {
    let key = match applied.capabilities.contains(&CapabilityName::Signing) {
        false => None,
        true => Some(opts.signing.clone().ok_or_else(|| {
            VerifyError::Replay(
                "the task used `signing`; pass the agent's signing key to replay it".into(),
            )
        })?),
    };
    let models = applied.models.iter().filter_map(|m| {
        let endpoint = m.endpoint.as_ref()?;
        crate::capability::model::replayed(&m.name, endpoint)
    });
    Ok(Grants::load(GrantSet::replayed(applied), key)
        .map_err(|e| VerifyError::Malformed(format!("limitsApplied: {e}")))?
        .with_models(LoadedModels::replayed(models))
        .with_tools(LoadedTools::replayed(
            applied
                .tools
                .iter()
                .filter_map(crate::capability::tools::replayed),
        )))
}

fn replay_limits(a: &LimitsApplied) -> Limits {
    Limits {
        fuel: a.fuel,
        memory_bytes: a.memory_bytes,
        timeout: std::time::Duration::from_millis(a.timeout_millis),
        max_output_bytes: a.max_output_bytes,
        max_input_bytes: a.max_input_bytes,
        tokens: a.tokens.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::child_tokens;

    #[test]
    fn a_parent_charged_other_than_its_child_spent_fails_verification() {
        // (given to the child, charged to the parent) against (its budget, what it spent).
        let cases = [
            ((500, 33), (500, 33), true),
            ((500, 500), (500, 900), true),
            ((500, 0), (500, 33), false),
            ((500, 33), (600, 33), false),
            ((500, 33), (0, 0), false),
        ];
        for (parent, child, ok) in cases {
            assert_eq!(
                child_tokens("t", parent, child).is_ok(),
                ok,
                "{parent:?} {child:?}"
            );
        }
    }
}
