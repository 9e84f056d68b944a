//! What the model is offered: one function per declared MCP tool, Agent-as-tool and subagent,
//! each under a name providers accept, and what each name runs.

use std::collections::BTreeMap;

use ari_model::Declaration;
use ari_model::grant::ALL_TOOLS;
use ari_sdk::model::Tool;
use ari_sdk::tools::{Tool as McpTool, ToolError};

/// An Agent called as a tool, or a subagent, takes one string: its input.
pub const AGENT_PARAMETERS: &str = r#"{"type":"object","properties":{"input":{"type":"string","description":"the text to hand the agent"}},"required":["input"]}"#;

/// The prefix of a subagent's function: the model hands the request over by calling it.
pub const TRANSFER_PREFIX: &str = "transfer_to_";

/// What calling one of the offered functions does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Tool `tool` of MCP server `server`, with the model's arguments.
    Mcp { server: String, tool: String },
    /// A delegated child Task on `agent`, whose output is the tool's result.
    Agent { agent: String },
    /// A delegated child Task on `agent`, whose output is the final answer.
    Subagent { agent: String },
}

/// The offered functions, in the order the model sees them, and their targets by name.
#[derive(Debug, Default, PartialEq)]
pub struct Toolbox {
    pub tools: Vec<Tool>,
    pub targets: BTreeMap<String, Target>,
}

/// A function name providers accept (`^[a-zA-Z0-9_-]{1,64}$`): other characters become `_`.
pub fn function_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

impl Toolbox {
    /// Adds `tool` for `target`, renaming it `NAME_2`, `NAME_3`... when the name is taken
    /// (two servers may offer a tool of one name).
    fn add(&mut self, mut tool: Tool, target: Target) {
        let base = function_name(&tool.name);
        let mut name = base.clone();
        let mut n = 2;
        while self.targets.contains_key(&name) {
            let suffix = format!("_{n}");
            let keep = base.len().min(64 - suffix.len());
            name = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        tool.name = name.clone();
        self.targets.insert(name, target);
        self.tools.push(tool);
    }

    /// The toolbox of `declaration`. `list` gives a server's tools as the host lists them (only
    /// those the grant allows); a declared tool the server does not list is not offered. A
    /// server that cannot be listed is the error: the declaration promised its tools.
    pub fn build(
        declaration: &Declaration,
        mut list: impl FnMut(&str) -> Result<Vec<McpTool>, ToolError>,
    ) -> Result<Toolbox, ToolError> {
        let mut toolbox = Toolbox::default();
        for entry in &declaration.tools {
            if let Some(server) = &entry.mcp_server {
                let listed = list(&server.name)?;
                let wanted =
                    |t: &McpTool| server.tools.iter().any(|w| w == &t.name || w == ALL_TOOLS);
                for t in listed.into_iter().filter(wanted) {
                    let mut tool = Tool::new(t.name.clone(), t.input_schema.clone());
                    if let Some(d) = t.description.or(t.title) {
                        tool = tool.description(d);
                    }
                    toolbox.add(
                        tool,
                        Target::Mcp {
                            server: server.name.clone(),
                            tool: t.name,
                        },
                    );
                }
            }
            if let Some(agent) = &entry.agent {
                let mut tool = Tool::new(agent.name.clone(), AGENT_PARAMETERS);
                if let Some(d) = &agent.description {
                    tool = tool.description(d.clone());
                }
                toolbox.add(
                    tool,
                    Target::Agent {
                        agent: agent.name.clone(),
                    },
                );
            }
        }
        for sub in &declaration.subagents {
            let what = sub.description.as_deref().unwrap_or("another agent");
            let tool = Tool::new(format!("{TRANSFER_PREFIX}{}", sub.name), AGENT_PARAMETERS)
                .description(format!(
                    "Hand the request over to {}: {what}. Its answer becomes the final answer.",
                    sub.name
                ));
            toolbox.add(
                tool,
                Target::Subagent {
                    agent: sub.name.clone(),
                },
            );
        }
        Ok(toolbox)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_sdk::tools::ToolHints;

    fn mcp(name: &str) -> McpTool {
        McpTool {
            name: name.into(),
            title: None,
            description: Some(format!("{name}s")),
            input_schema: r#"{"type":"object"}"#.into(),
            hints: ToolHints::default(),
        }
    }

    fn declaration(json: serde_json::Value) -> Declaration {
        serde_json::from_value(json).expect("declaration JSON")
    }

    #[test]
    fn declared_tools_agents_and_subagents_are_offered_under_valid_names() {
        let d = declaration(serde_json::json!({
            "instructions": "x", "model": "m",
            "tools": [
                {"mcpServer": {"name": "docs", "tools": ["search", "missing"]}},
                {"agent": {"name": "word.count", "description": "counts words"}}
            ],
            "subagents": [{"name": "expert"}]
        }));
        let toolbox =
            Toolbox::build(&d, |_| Ok(vec![mcp("search"), mcp("delete")])).expect("builds");
        let names: Vec<_> = toolbox.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["search", "word_count", "transfer_to_expert"]);
        assert_eq!(toolbox.tools[0].description.as_deref(), Some("searchs"));
        assert_eq!(
            toolbox.targets["word_count"],
            Target::Agent {
                agent: "word.count".into()
            }
        );
        assert_eq!(
            toolbox.targets["transfer_to_expert"],
            Target::Subagent {
                agent: "expert".into()
            }
        );
    }

    #[test]
    fn a_star_offers_every_listed_tool_and_clashing_names_are_numbered() {
        let d = declaration(serde_json::json!({
            "instructions": "x", "model": "m",
            "tools": [
                {"mcpServer": {"name": "a", "tools": ["*"]}},
                {"mcpServer": {"name": "b", "tools": ["search"]}}
            ]
        }));
        let toolbox =
            Toolbox::build(&d, |_| Ok(vec![mcp("search"), mcp("fetch")])).expect("builds");
        let names: Vec<_> = toolbox.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["search", "fetch", "search_2"]);
        assert_eq!(
            toolbox.targets["search_2"],
            Target::Mcp {
                server: "b".into(),
                tool: "search".into()
            }
        );
    }

    #[test]
    fn a_server_that_cannot_be_listed_fails_the_build() {
        let d = declaration(serde_json::json!({
            "instructions": "x", "model": "m",
            "tools": [{"mcpServer": {"name": "a", "tools": ["*"]}}]
        }));
        let err = Toolbox::build(&d, |_| Err(ToolError::Unavailable("down".into())));
        assert_eq!(err, Err(ToolError::Unavailable("down".into())));
    }

    #[test]
    fn function_names_are_cut_to_64_and_never_empty() {
        assert_eq!(function_name(&"a".repeat(80)).len(), 64);
        assert_eq!(function_name(""), "_");
        assert_eq!(function_name("a b/c"), "a_b_c");
    }
}
