//! A declarative agent: an Agent written as a system prompt, a model, tools and subagents
//! instead of code (the Agent's `spec.declarative`). The stock agent component runs it.
//!
//! One type serves everyone: the CRD embeds it, the operator checks it against the grants and
//! signs its digest into status, the executor hands its canonical bytes to the stock
//! component's `initialize` (so the attestation's `configSha256` is the declaration's digest),
//! and the stock component parses the same bytes back.
//!
//! Grants are not implied: a declaration can only *use* what `spec.capabilities` grants
//! ([`Declaration::ungranted`] lists what it names beyond them), and may only make the grants
//! stricter — the approvals it declares are added to the tools grant
//! ([`Declaration::narrow`]).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::approval::ApprovalRule;
use crate::grant::{ALL_TOOLS, GrantSet};
use crate::limits::delegation_allows;

/// Model calls per task when the declaration does not say.
pub const DEFAULT_MAX_TURNS: u32 = 8;
/// No declaration may ask for more model calls per task than this.
pub const MAX_TURNS_CEILING: u32 = 64;
/// Largest inline (or resolved) system prompt, in bytes.
pub const MAX_INSTRUCTIONS_BYTES: usize = 65_536;

/// An agent declared, not coded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Declaration {
    /// The system prompt, inline. Exactly one of `instructions` and `instructionsFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 65536)))]
    pub instructions: Option<String>,
    /// The system prompt from a key of a ConfigMap of the Agent's namespace (its `data`).
    /// Resolved by the operator and the executor; its text is part of the signed declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_from: Option<ConfigMapKeyRef>,
    /// The ModelConfig the agent asks, by name; it must be granted
    /// (`capabilities.models.allowed`).
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
    )]
    pub model: String,
    /// What the model may call: tools of the namespace's MCP servers, and other Agents as
    /// tools (a call is a delegated child Task whose output is the tool's result). Each must
    /// be granted (`capabilities.tools`, `capabilities.delegation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 16)))]
    pub tools: Vec<DeclaredTool>,
    /// Agents the model may hand the whole request to: the subagent's answer is this agent's
    /// answer (a delegated child Task). Each must be granted (`capabilities.delegation`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 16)))]
    pub subagents: Vec<DeclaredAgent>,
    /// Model calls per task (default 8, at most 64); a model still calling tools after the
    /// last one ends the task `AgentError`. The task's token budget is `limits.tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 64)))]
    pub max_turns: Option<u32>,
    /// Most output tokens of one model call (the host lowers it to what the budget has left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1_000_000)))]
    pub max_tokens_per_turn: Option<u32>,
    /// The shape of the final answer; absent: free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<DeclaredFormat>,
}

/// A key of a ConfigMap in the Agent's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
    )]
    pub name: String,
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[-._a-zA-Z0-9]{1,253}$"))
    )]
    pub key: String,
}

/// One entry of a declaration's tools: exactly one of `mcpServer` and `agent`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeclaredTool {
    /// Tools of an MCP server of the namespace (an `MCPServer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<DeclaredServer>,
    /// Another Agent, called as a tool with one string argument, `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<DeclaredAgent>,
}

/// An MCP server's tools the model is offered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeclaredServer {
    /// The `MCPServer`'s name.
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
    )]
    pub name: String,
    /// Tool names as the server lists them; `*` offers every tool the grant allows. Each
    /// tool's description and input schema are the server's.
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = 32), inner(length(min = 1, max = 128)))
    )]
    pub tools: Vec<String>,
    /// Tools whose every call waits for a person's decision (`*`: all of them), added to the
    /// grant's `approval.tools` for this Agent's tasks: a declaration can only add approvals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 32), inner(length(min = 1, max = 128)))
    )]
    pub require_approval: Vec<String>,
}

/// Another Agent of the namespace, and what it is for (the model reads the description).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeclaredAgent {
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"))
    )]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 1024)))]
    pub description: Option<String>,
}

/// The final answer's shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeclaredFormat {
    /// `JsonObject` (any JSON object) or `JsonSchema` (one matching `schema`).
    #[serde(rename = "type")]
    pub kind: FormatKind,
    /// The JSON Schema, as JSON text (with `type: JsonSchema` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 65536)))]
    pub schema: Option<String>,
    /// The schema's name as the provider is told it (default `answer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-zA-Z0-9_-]{1,64}$"))
    )]
    pub name: Option<String>,
}

/// See [`DeclaredFormat::kind`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FormatKind {
    #[default]
    JsonObject,
    JsonSchema,
}

/// Why a declaration cannot be run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeclarationError {
    #[error("the declaration is not valid JSON of a declaration: {0}")]
    Parse(String),
    #[error("exactly one of declarative.instructions and declarative.instructionsFrom is needed")]
    Instructions,
    #[error("declarative.instructions is {0} bytes; at most {MAX_INSTRUCTIONS_BYTES}")]
    InstructionsTooLarge(usize),
    #[error("{0}")]
    Invalid(String),
}

impl Declaration {
    /// Model calls a task may make.
    pub fn max_turns(&self) -> u32 {
        self.max_turns
            .unwrap_or(DEFAULT_MAX_TURNS)
            .clamp(1, MAX_TURNS_CEILING)
    }

    /// The declaration with its system prompt in place: `text` is the ConfigMap key's
    /// content when `instructionsFrom` is set (`None` for inline instructions). The reference
    /// is kept, so the signed bytes say where the prompt came from.
    pub fn resolved(&self, text: Option<String>) -> Result<Declaration, DeclarationError> {
        let mut out = self.clone();
        match (&self.instructions, &self.instructions_from, text) {
            (Some(_), None, None) => {}
            (None, Some(_), Some(text)) => out.instructions = Some(text),
            _ => return Err(DeclarationError::Instructions),
        }
        out.check()?;
        Ok(out)
    }

    /// The bytes handed to the stock component's `initialize`, whose SHA-256 the attestation
    /// signs as `configSha256`: the JSON of the resolved declaration, fields in declaration
    /// order, absent ones left out (serde_json writes a struct's fields in order and escapes
    /// strings one way, and the type holds no maps, so equal declarations give equal bytes).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // A struct of strings, numbers and lists always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Lowercase hex SHA-256 of [`Self::canonical_bytes`].
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_bytes()))
    }

    /// The declaration the stock component was handed (its `initialize` config), checked.
    pub fn parse(config: &[u8]) -> Result<Declaration, DeclarationError> {
        let d: Declaration =
            serde_json::from_slice(config).map_err(|e| DeclarationError::Parse(e.to_string()))?;
        if d.instructions.is_none() {
            return Err(DeclarationError::Instructions);
        }
        d.check()?;
        Ok(d)
    }

    /// What the schema cannot say: the resolved prompt's size, one kind per tool entry,
    /// approvals only of declared tools, a schema only with `JsonSchema` and valid JSON.
    pub fn check(&self) -> Result<(), DeclarationError> {
        if let Some(text) = &self.instructions
            && text.len() > MAX_INSTRUCTIONS_BYTES
        {
            return Err(DeclarationError::InstructionsTooLarge(text.len()));
        }
        let bad = |m: String| Err(DeclarationError::Invalid(m));
        for (i, t) in self.tools.iter().enumerate() {
            match (&t.mcp_server, &t.agent) {
                (Some(s), None) => {
                    let offered = |n: &str| s.tools.iter().any(|t| t == n || t == ALL_TOOLS);
                    if let Some(n) = s
                        .require_approval
                        .iter()
                        .find(|n| n.as_str() != ALL_TOOLS && !offered(n.as_str()))
                    {
                        return bad(format!(
                            "declarative.tools[{i}]: requireApproval names {n:?}, which mcpServer.tools does not offer"
                        ));
                    }
                }
                (None, Some(_)) => {}
                _ => {
                    return bad(format!(
                        "declarative.tools[{i}]: exactly one of mcpServer and agent is needed"
                    ));
                }
            }
        }
        if let Some(f) = &self.response_format {
            match (f.kind, &f.schema) {
                (FormatKind::JsonObject, None) => {}
                (FormatKind::JsonSchema, Some(s)) => {
                    if serde_json::from_str::<serde_json::Value>(s).is_err() {
                        return bad("declarative.responseFormat.schema is not JSON".into());
                    }
                }
                (FormatKind::JsonObject, Some(_)) => {
                    return bad("declarative.responseFormat.schema needs type JsonSchema".into());
                }
                (FormatKind::JsonSchema, None) => {
                    return bad("declarative.responseFormat type JsonSchema needs a schema".into());
                }
            }
        }
        Ok(())
    }

    /// Everything the declaration names that `grants` does not grant, one phrase each; empty
    /// when it stays within them. A declaration never grants anything itself.
    pub fn ungranted(&self, grants: &GrantSet) -> Vec<String> {
        let mut out = Vec::new();
        if !grants
            .models
            .as_ref()
            .is_some_and(|m| m.allows(&self.model))
        {
            out.push(format!(
                "model {}: not in capabilities.models.allowed",
                self.model
            ));
        }
        for s in self.tools.iter().filter_map(|t| t.mcp_server.as_ref()) {
            let Some(entry) = grants.tools.as_ref().and_then(|g| g.server(&s.name)) else {
                out.push(format!(
                    "MCP server {}: not in capabilities.tools.servers",
                    s.name
                ));
                continue;
            };
            for tool in &s.tools {
                // `*` offers what the grant allows, so it asks for nothing beyond it.
                if tool != ALL_TOOLS && !entry.allows(tool) {
                    out.push(format!(
                        "tool {tool} of MCP server {}: not in capabilities.tools",
                        s.name
                    ));
                }
            }
        }
        let agents = self
            .tools
            .iter()
            .filter_map(|t| t.agent.as_ref())
            .chain(&self.subagents);
        for a in agents {
            let granted = grants
                .delegation
                .as_ref()
                .is_some_and(|d| delegation_allows(&d.agents, &a.name));
            if !granted {
                out.push(format!(
                    "Agent {}: not in capabilities.delegation.agents",
                    a.name
                ));
            }
        }
        out
    }

    /// `grants` with the declaration's approvals added to each server's `approval.tools`: what
    /// the host enforces for this Agent's tasks. Nothing is removed, so this only narrows.
    pub fn narrow(&self, mut grants: GrantSet) -> GrantSet {
        let Some(tools) = grants.tools.as_mut() else {
            return grants;
        };
        for s in self.tools.iter().filter_map(|t| t.mcp_server.as_ref()) {
            let Some(entry) = tools.servers.iter_mut().find(|e| e.name == s.name) else {
                continue;
            };
            let rule = entry.approval.get_or_insert_with(ApprovalRule::default);
            for tool in &s.require_approval {
                if !rule.tools.contains(tool) {
                    rule.tools.push(tool.clone());
                }
            }
        }
        grants
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::{DelegationGrant, ModelsGrant, ToolServerGrant, ToolsGrant};

    fn declaration() -> Declaration {
        serde_json::from_value(serde_json::json!({
            "instructions": "You triage tickets.",
            "model": "small",
            "tools": [
                {"mcpServer": {"name": "tracker", "tools": ["search", "close"],
                               "requireApproval": ["close"]}},
                {"agent": {"name": "summarize", "description": "summarises a text"}}
            ],
            "subagents": [{"name": "escalate"}],
            "maxTurns": 4
        }))
        .expect("declaration JSON")
    }

    fn grants() -> GrantSet {
        GrantSet {
            models: Some(ModelsGrant {
                allowed: vec!["small".into()],
            }),
            tools: Some(ToolsGrant {
                servers: vec![ToolServerGrant {
                    name: "tracker".into(),
                    tools: vec!["search".into(), "close".into()],
                    approval: None,
                }],
            }),
            delegation: Some(DelegationGrant {
                agents: vec!["summarize".into(), "escalate".into()],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_declaration_within_its_grants_has_nothing_ungranted() {
        assert_eq!(declaration().ungranted(&grants()), Vec::<String>::new());
    }

    #[test]
    fn each_thing_named_beyond_the_grants_is_listed() {
        let mut g = grants();
        g.models = None;
        if let Some(t) = g.tools.as_mut() {
            t.servers[0].tools = vec!["search".into()];
        }
        g.delegation = Some(DelegationGrant {
            agents: vec!["summarize".into()],
            ..Default::default()
        });
        assert_eq!(
            declaration().ungranted(&g),
            vec![
                "model small: not in capabilities.models.allowed".to_owned(),
                "tool close of MCP server tracker: not in capabilities.tools".to_owned(),
                "Agent escalate: not in capabilities.delegation.agents".to_owned(),
            ]
        );
        assert_eq!(
            declaration().ungranted(&GrantSet::default()).len(),
            4,
            "nothing granted: model, server, agent tool and subagent"
        );
    }

    #[test]
    fn a_star_tool_list_asks_only_for_the_server() {
        let mut d = declaration();
        if let Some(s) = d.tools[0].mcp_server.as_mut() {
            s.tools = vec!["*".into()];
            s.require_approval.clear();
        }
        assert_eq!(d.ungranted(&grants()), Vec::<String>::new());
    }

    #[test]
    fn declared_approvals_are_added_to_the_grant_and_nothing_is_removed() {
        let narrowed = declaration().narrow(grants());
        let entry = narrowed
            .tools
            .as_ref()
            .and_then(|t| t.server("tracker"))
            .expect("server kept");
        assert!(entry.needs_approval("close", None));
        assert!(!entry.needs_approval("search", None));
        assert_eq!(entry.tools, vec!["search".to_owned(), "close".to_owned()]);
        assert_eq!(narrowed.models, grants().models);
        assert_eq!(narrowed.delegation, grants().delegation);
    }

    #[test]
    fn the_canonical_bytes_parse_back_and_their_digest_is_stable() {
        let d = declaration().resolved(None).expect("resolves");
        let bytes = d.canonical_bytes();
        assert_eq!(Declaration::parse(&bytes).expect("parses"), d);
        assert_eq!(d.sha256(), hex::encode(Sha256::digest(&bytes)));
        assert!(
            bytes.starts_with(br#"{"instructions":"You triage tickets.","model":"small","#),
            "fields in declaration order: {}",
            String::from_utf8_lossy(&bytes)
        );
        let mut other = d.clone();
        other.max_turns = Some(5);
        assert_ne!(other.sha256(), d.sha256());
    }

    #[test]
    fn instructions_from_a_config_map_are_resolved_into_the_signed_bytes() {
        let mut d = declaration();
        d.instructions = None;
        d.instructions_from = Some(ConfigMapKeyRef {
            name: "prompts".into(),
            key: "triage".into(),
        });
        assert_eq!(d.resolved(None), Err(DeclarationError::Instructions));
        let r = d.resolved(Some("Be terse.".into())).expect("resolves");
        assert_eq!(r.instructions.as_deref(), Some("Be terse."));
        let again = d.resolved(Some("Be verbose.".into())).expect("resolves");
        assert_ne!(r.sha256(), again.sha256(), "the prompt's text is signed");
        // An unresolved reference is no runnable declaration.
        assert_eq!(
            Declaration::parse(&d.canonical_bytes()),
            Err(DeclarationError::Instructions)
        );
    }

    #[test]
    fn checks_refuse_what_the_schema_cannot() {
        let mut d = declaration();
        if let Some(s) = d.tools[0].mcp_server.as_mut() {
            s.require_approval = vec!["delete".into()];
        }
        assert!(matches!(d.check(), Err(DeclarationError::Invalid(m)) if m.contains("delete")));
        let mut d = declaration();
        d.tools.push(DeclaredTool::default());
        assert!(d.check().is_err(), "an entry with neither kind");
        let mut d = declaration();
        d.response_format = Some(DeclaredFormat {
            kind: FormatKind::JsonSchema,
            schema: Some("{not json".into()),
            name: None,
        });
        assert!(d.check().is_err());
        let mut d = declaration();
        d.instructions = Some("x".repeat(MAX_INSTRUCTIONS_BYTES + 1));
        assert!(matches!(
            d.check(),
            Err(DeclarationError::InstructionsTooLarge(_))
        ));
        assert!(matches!(
            Declaration::parse(b"not json"),
            Err(DeclarationError::Parse(_))
        ));
    }

    #[test]
    fn turns_default_to_eight_and_stay_within_the_ceiling() {
        let mut d = declaration();
        d.max_turns = None;
        assert_eq!(d.max_turns(), DEFAULT_MAX_TURNS);
        d.max_turns = Some(1000);
        assert_eq!(d.max_turns(), MAX_TURNS_CEILING);
    }
}
