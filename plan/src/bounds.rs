//! The bounds a proposal must keep before any rule reads it: its size, its step count and the
//! length of every name and list. A proposal is a guest's output and never went through the
//! API server's schema, so these are checked first, and the first one broken is the only
//! violation reported: every later rule (and every message) then works on small inputs.

use crate::model::{
    AgentRef, InputRef, MAX_FIELD_NAME, MAX_LITERAL_INPUT, MAX_REFS, MAX_STEP_NAME, MAX_STEPS,
    Proposal, Step,
};
use crate::validate::{Rule, Violation};
use ari_model::TaskRequirements;

/// Largest proposal read, in bytes: a Task's output is at most this (it must fit in a
/// ConfigMap), so no planner can produce a longer one.
pub const MAX_PROPOSAL_BYTES: usize = 1_048_576;
/// Longest Agent name (a DNS subdomain).
pub const MAX_AGENT_NAME: usize = 253;
/// Longest `summary`.
pub const MAX_SUMMARY: usize = 4096;
/// Most capabilities, hosts, and longest host and signing key id in `requirements`.
const MAX_CAPABILITIES: usize = 6;
const MAX_HOST: usize = 512;
const MAX_KEY_ID: usize = 253;
/// Longest name shown in a message or in `Violation::step`.
pub const SHOWN_NAME: usize = 80;

/// `s` cut to [`SHOWN_NAME`] bytes at a character boundary, with `…` when cut.
pub fn cut(s: &str) -> String {
    if s.len() <= SHOWN_NAME {
        return s.to_owned();
    }
    let mut end = SHOWN_NAME;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The first bound the proposal breaks, if any.
pub fn first_breach(proposal: &Proposal) -> Option<Violation> {
    let n = proposal.steps.len();
    if n > MAX_STEPS as usize {
        return Some(plan_wide(
            Rule::TooManySteps,
            format!("{n} steps, above the hard cap of {MAX_STEPS}"),
        ));
    }
    if let Some(len) = too_long(proposal.summary.as_deref(), MAX_SUMMARY) {
        return Some(plan_wide(
            Rule::OutOfRange,
            format!("summary is {len} bytes, above {MAX_SUMMARY}"),
        ));
    }
    proposal
        .steps
        .iter()
        .enumerate()
        .find_map(|(i, s)| step_breach(s).map(|what| at_step(i, s, what)))
}

/// What the first bound step `s` breaks.
fn step_breach(s: &Step) -> Option<String> {
    let checks = [
        name_len("name", &s.name, MAX_STEP_NAME),
        agent(&s.agent_ref),
        too_long(s.input.as_deref(), MAX_LITERAL_INPUT)
            .map(|n| format!("input is {n} bytes, above {MAX_LITERAL_INPUT}")),
        count("dependsOn", s.depends_on.len()),
        count("inputFrom", s.input_from.len()),
        count("outputs", s.outputs.len()),
        s.depends_on
            .iter()
            .find_map(|d| name_len("a dependsOn entry", d, MAX_STEP_NAME)),
        s.input_from.iter().find_map(input_ref),
        s.outputs
            .iter()
            .find_map(|f| name_len("an outputs entry", f, MAX_FIELD_NAME)),
        s.requirements.as_ref().and_then(requirements),
    ];
    checks.into_iter().flatten().next()
}

fn agent(a: &AgentRef) -> Option<String> {
    agent_breach(&a.name)
}

/// What is wrong with an Agent name's length, if anything.
pub fn agent_breach(name: &str) -> Option<String> {
    name_len("agentRef.name", name, MAX_AGENT_NAME)
}

fn input_ref(r: &InputRef) -> Option<String> {
    name_len("inputFrom.step", &r.step, MAX_STEP_NAME)
        .or_else(|| {
            r.field
                .as_deref()
                .and_then(|f| name_len("inputFrom.field", f, MAX_FIELD_NAME))
        })
        .or_else(|| {
            r.key
                .as_deref()
                .and_then(|k| name_len("inputFrom.key", k, MAX_FIELD_NAME))
        })
}

fn requirements(r: &TaskRequirements) -> Option<String> {
    if r.capabilities.len() > MAX_CAPABILITIES {
        return Some(format!(
            "requirements.capabilities has {} entries, above {MAX_CAPABILITIES}",
            r.capabilities.len()
        ));
    }
    count("requirements.hosts", r.hosts.len())
        .or_else(|| {
            r.hosts
                .iter()
                .find_map(|h| name_len("a requirements.hosts entry", h, MAX_HOST))
        })
        .or_else(|| {
            r.signing_key_id
                .as_deref()
                .and_then(|k| name_len("requirements.signingKeyId", k, MAX_KEY_ID))
        })
}

/// A message when `value` is empty or longer than `max` bytes.
fn name_len(what: &str, value: &str, max: usize) -> Option<String> {
    (value.is_empty() || value.len() > max)
        .then(|| format!("{what} is {} bytes, outside 1..={max}", value.len()))
}

fn too_long(value: Option<&str>, max: usize) -> Option<usize> {
    value.map(str::len).filter(|n| *n > max)
}

fn count(what: &str, n: usize) -> Option<String> {
    (n > MAX_REFS).then(|| format!("{what} has {n} entries, above {MAX_REFS}"))
}

fn plan_wide(rule: Rule, message: String) -> Violation {
    Violation {
        step: None,
        rule,
        message,
    }
}

fn at_step(index: usize, s: &Step, what: String) -> Violation {
    Violation {
        step: Some(cut(&s.name)),
        rule: Rule::OutOfRange,
        message: format!(
            "step #{} breaks a bound the proposal schema sets ({what}); nothing else was checked",
            index + 1
        ),
    }
}

/// Why a planner's output is not a proposal to validate.
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// Larger than [`MAX_PROPOSAL_BYTES`]: not read; this is its one violation.
    TooLarge(Violation),
    /// Not JSON of the proposal schema; the parser's message, cut to [`MAX_PARSE_MESSAGE`].
    NotAProposal(String),
}

/// Longest parser message kept (it may quote the guest's keys).
pub const MAX_PARSE_MESSAGE: usize = 512;

/// The proposal in `bytes`, read only when it is within [`MAX_PROPOSAL_BYTES`].
pub fn parse_proposal(bytes: &[u8]) -> Result<Proposal, Unreadable> {
    if bytes.len() > MAX_PROPOSAL_BYTES {
        return Err(Unreadable::TooLarge(too_large(bytes.len())));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let mut message = e.to_string();
        if message.len() > MAX_PARSE_MESSAGE {
            let mut end = MAX_PARSE_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        Unreadable::NotAProposal(message)
    })
}

/// The violation of a proposal of `len` bytes, above [`MAX_PROPOSAL_BYTES`].
pub fn too_large(len: usize) -> Violation {
    plan_wide(
        Rule::OutOfRange,
        format!("the proposal is {len} bytes, above {MAX_PROPOSAL_BYTES}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proposal_over_the_size_bound_is_not_parsed() {
        let big = vec![b' '; MAX_PROPOSAL_BYTES + 1];
        match parse_proposal(&big) {
            Err(Unreadable::TooLarge(v)) => assert!(v.message.contains("1048577 bytes")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_parser_message_quoting_a_huge_key_is_cut() {
        let key = "k".repeat(100_000);
        let text = format!(r#"{{"steps":[],"{key}":1}}"#);
        match parse_proposal(text.as_bytes()) {
            Err(Unreadable::NotAProposal(m)) => assert!(m.len() <= MAX_PARSE_MESSAGE + 3, "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
