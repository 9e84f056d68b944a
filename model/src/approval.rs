//! Human approval of risky calls (tool calls, delegation to named Agents, requests to named
//! hosts): which calls a grant makes wait for a person, how a waiting call is named, and what
//! was decided.
//!
//! A call that needs approval pauses its Task (the executor lends its slot) until a person
//! with the right to update the Task adds a decision to `spec.approvals`, naming the call by the
//! id its status shows. The id binds the decision to the call's content (server, tool and
//! arguments; Agent and input; method, URL, headers and body), so a Task run again after its
//! executor was lost cannot apply a decision to a different call it happens to make at the
//! same place.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Which calls of a server's tools wait for a person's decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRule {
    /// Tools every call of which waits for a decision; `*` for all of the server's tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 256), inner(length(min = 1, max = 128)))
    )]
    pub tools: Vec<String>,
    /// Whether calls of tools the server marks destructive (MCP's `destructiveHint: true`)
    /// wait too: `Required` (the default) or `NotRequired`.
    #[serde(default, skip_serializing_if = "DestructivePolicy::is_default")]
    pub destructive: DestructivePolicy,
}

/// Whether tools a server marks destructive need approval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum DestructivePolicy {
    #[default]
    Required,
    NotRequired,
}

impl DestructivePolicy {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl ApprovalRule {
    /// Whether a call of `tool`, which the server marks destructive or not (`destructive`:
    /// its `destructiveHint`, `None` when it says nothing), waits for a decision. Only an
    /// explicit mark counts: the hints are the server's word, and a tool with none is
    /// approved by naming it here.
    pub fn needs_approval(&self, tool: &str, destructive: Option<bool>) -> bool {
        let named = self
            .tools
            .iter()
            .any(|t| t == tool || t == crate::grant::ALL_TOOLS);
        named || (destructive == Some(true) && self.destructive == DestructivePolicy::Required)
    }
}

/// Which of the network grant's hosts wait for a person's decision before each request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HostsApproval {
    /// Origins of `allowedHosts` (the same `scheme://host[:port]` entries, written the same
    /// way) every request to which, redirect hops included, waits for a decision.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))
    )]
    pub hosts: Vec<String>,
}

/// Which of the delegation grant's Agents wait for a person's decision before each child
/// (awaited, started or a message) is created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentsApproval {
    /// Agents of `agents` whose delegations wait for a decision; `*` for every granted one.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 64),
            inner(regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$"))
        )
    )]
    pub agents: Vec<String>,
}

impl AgentsApproval {
    /// Whether delegating to `agent` waits for a decision.
    pub fn needs_approval(&self, agent: &str) -> bool {
        crate::limits::delegation_allows(&self.agents, agent)
    }
}

/// What kind of call waits for (or got) a decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum CallKind {
    /// A tool of an MCP server (`tools` grant).
    #[default]
    Tool,
    /// A child Task on another Agent (`delegation` grant).
    Delegation,
    /// An HTTP request (`network` grant).
    Network,
}

impl std::fmt::Display for CallKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallKind::Tool => "Tool",
            CallKind::Delegation => "Delegation",
            CallKind::Network => "Network",
        })
    }
}

/// What a waiting call does, as its record names it. Untagged, so a tool call's record keeps
/// the shape (and signed bytes) it had before other kinds of call could wait.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum CallSubject {
    /// Tool `tool` of MCP server `server`.
    Tool { server: String, tool: String },
    /// A child Task on Agent `agent`.
    Delegation { agent: String },
    /// A `method` request to `url` (without user or password).
    Network { method: String, url: String },
}

impl CallSubject {
    pub fn kind(&self) -> CallKind {
        match self {
            CallSubject::Tool { .. } => CallKind::Tool,
            CallSubject::Delegation { .. } => CallKind::Delegation,
            CallSubject::Network { .. } => CallKind::Network,
        }
    }
}

impl std::fmt::Display for CallSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clip = |s: &str| s.chars().take(128).collect::<String>();
        match self {
            CallSubject::Tool { server, tool } => {
                write!(f, "tool `{}` of server `{}`", clip(tool), clip(server))
            }
            CallSubject::Delegation { agent } => {
                write!(f, "delegation to Agent `{}`", clip(agent))
            }
            CallSubject::Network { method, url } => {
                write!(f, "request {} {}", clip(method), clip(url))
            }
        }
    }
}

/// A person's decision about one waiting call.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Decision {
    Approved,
    Rejected,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Approved => "Approved",
            Decision::Rejected => "Rejected",
        })
    }
}

/// A decision as a Task's `spec.approvals` lists it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// The waiting call's id, as `status.pendingApproval.call` shows it.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 64)))]
    pub call: String,
    pub decision: Decision,
    /// Who decided: the admission policy admits only the requesting user's own name.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 256)))]
    pub approver: String,
    /// Why, for the guest (a rejection's message) and the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 1024)))]
    pub reason: Option<String>,
}

/// Most decisions a Task holds (the CRD's bound on `spec.approvals`).
pub const MAX_APPROVALS: usize = 64;

/// Why a decision cannot be added to a Task's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAdded {
    #[error("call {call} was already decided: {decision} by {approver}")]
    AlreadyDecided {
        call: String,
        decision: Decision,
        approver: String,
    },
    #[error("the Task holds {MAX_APPROVALS} decisions, as many as it may")]
    Full,
}

/// `approvals` with `approval` added: each call is decided once, and the first decision
/// stands (the list only grows). `kubectl ari approve` and the A2A gateway both decide so.
pub fn add_decision(approvals: &[Approval], approval: Approval) -> Result<Vec<Approval>, NotAdded> {
    if let Some(done) = approvals.iter().find(|a| a.call == approval.call) {
        return Err(NotAdded::AlreadyDecided {
            call: done.call.clone(),
            decision: done.decision,
            approver: done.approver.clone(),
        });
    }
    if approvals.len() >= MAX_APPROVALS {
        return Err(NotAdded::Full);
    }
    let mut all = approvals.to_vec();
    all.push(approval);
    Ok(all)
}

/// A decided call as the trace and the attestation record it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    pub call: String,
    /// The call: a tool's `server` and `tool`, a delegation's `agent`, a request's `method`
    /// and `url`.
    #[serde(flatten)]
    pub subject: CallSubject,
    pub decision: Decision,
    pub approver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the host saw the decision (RFC 3339, UTC).
    pub decided_at: String,
}

/// The id of the `index`-th tool call a task asked approval for: the index and the first 16
/// hex digits of the SHA-256 of server, tool and arguments, so a decision names exactly one
/// call.
pub fn call_id(index: u32, server: &str, tool: &str, arguments: &str) -> String {
    call_id_of(
        index,
        &[server.as_bytes(), tool.as_bytes(), arguments.as_bytes()],
    )
}

/// The id of the `index`-th call of its kind a task asked approval for, from the parts of what
/// it sends (each delimited, so moving a byte between parts changes the id). Other kinds than
/// tools put their kind's name first, so no two kinds share an id.
pub fn call_id_of(index: u32, parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part);
        hash.update([0]);
    }
    format!("{index}-{}", &hex::encode(hash.finalize())[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(call: &str, decision: Decision) -> Approval {
        Approval {
            call: call.into(),
            decision,
            approver: "alice".into(),
            reason: None,
        }
    }

    #[test]
    fn a_call_is_decided_once_and_the_first_decision_stands() {
        let one = add_decision(&[], decided("c1", Decision::Approved)).expect("added");
        let two = add_decision(&one, decided("c2", Decision::Rejected)).expect("another call");
        assert_eq!(two.len(), 2);
        let again = add_decision(&two, decided("c1", Decision::Rejected));
        assert!(matches!(
            again,
            Err(NotAdded::AlreadyDecided {
                decision: Decision::Approved,
                ..
            })
        ));
        let full: Vec<Approval> = (0..MAX_APPROVALS)
            .map(|i| decided(&format!("c{i}x"), Decision::Approved))
            .collect();
        assert_eq!(
            add_decision(&full, decided("new", Decision::Approved)),
            Err(NotAdded::Full)
        );
    }

    #[test]
    fn named_tools_and_marked_destructive_ones_wait_unless_the_rule_says_otherwise() {
        let default = ApprovalRule::default();
        let named = ApprovalRule {
            tools: vec!["write".into()],
            destructive: DestructivePolicy::NotRequired,
        };
        let all = ApprovalRule {
            tools: vec!["*".into()],
            ..ApprovalRule::default()
        };
        // (rule, tool, destructiveHint) -> waits
        let table: [(&ApprovalRule, &str, Option<bool>, bool); 8] = [
            (&default, "read", None, false),
            (&default, "read", Some(false), false),
            (&default, "wipe", Some(true), true),
            (&named, "wipe", Some(true), false),
            (&named, "write", None, true),
            (&named, "write", Some(false), true),
            (&all, "read", Some(false), true),
            (&all, "anything", None, true),
        ];
        for (rule, tool, destructive, waits) in table {
            assert_eq!(
                rule.needs_approval(tool, destructive),
                waits,
                "{rule:?} {tool} {destructive:?}"
            );
        }
    }

    #[test]
    fn a_tool_record_keeps_its_shape_and_other_kinds_read_back_as_themselves() {
        let tool = ApprovalRecord {
            call: "0-a".into(),
            subject: CallSubject::Tool {
                server: "files".into(),
                tool: "wipe".into(),
            },
            decision: Decision::Approved,
            approver: "alice".into(),
            reason: None,
            decided_at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            serde_json::to_string(&tool).expect("json"),
            r#"{"call":"0-a","server":"files","tool":"wipe","decision":"Approved","approver":"alice","decidedAt":"2026-01-01T00:00:00Z"}"#
        );
        for subject in [
            tool.subject.clone(),
            CallSubject::Delegation {
                agent: "deployer".into(),
            },
            CallSubject::Network {
                method: "POST".into(),
                url: "https://api.example.com/x".into(),
            },
        ] {
            let record = ApprovalRecord {
                subject: subject.clone(),
                ..tool.clone()
            };
            let back: ApprovalRecord =
                serde_json::from_slice(&serde_json::to_vec(&record).expect("json")).expect("back");
            assert_eq!(back, record);
            assert_eq!(back.subject.kind(), subject.kind());
        }
    }

    #[test]
    fn named_agents_or_all_of_them_wait() {
        let some = AgentsApproval {
            agents: vec!["deployer".into()],
        };
        assert!(some.needs_approval("deployer") && !some.needs_approval("reader"));
        let all = AgentsApproval {
            agents: vec!["*".into()],
        };
        assert!(all.needs_approval("reader"));
    }

    #[test]
    fn a_call_id_names_one_call_by_its_place_and_content() {
        let id = call_id(0, "files", "wipe", "{\"path\":\"/a\"}");
        assert!(id.starts_with("0-") && id.len() == 18, "{id}");
        assert_eq!(id, call_id(0, "files", "wipe", "{\"path\":\"/a\"}"));
        assert_ne!(id, call_id(0, "files", "wipe", "{\"path\":\"/b\"}"));
        assert_ne!(id, call_id(1, "files", "wipe", "{\"path\":\"/a\"}"));
        // Parts are delimited: moving a byte between them changes the id.
        assert_ne!(call_id(0, "ab", "c", ""), call_id(0, "a", "bc", ""));
    }
}
