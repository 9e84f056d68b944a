//! The `delegation` grant: which Agents a task may call, how deep and how many.

use crate::capability::GrantError;

pub use ari_model::limits::{DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH};
/// No grant can raise the depth past this: every level holds a waiting parent.
pub const MAX_DEPTH_CEILING: u32 = 16;
/// No grant can raise one task's children past this.
pub const MAX_CHILDREN_CEILING: u32 = 1024;

/// Agents this one may delegate to. `*` matches any Agent, and only when written deliberately
/// (never implied by an empty list, which grants nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationGrant {
    pub agents: Vec<String>,
    /// Deepest level a child of this Agent's task may sit at (root = 0, its children = 1).
    pub max_depth: u32,
    /// Children one task of this Agent may start.
    pub max_children: u32,
}

impl DelegationGrant {
    /// A grant with the limits clamped to their ceilings.
    pub fn new(agents: Vec<String>, max_depth: u32, max_children: u32) -> Self {
        Self {
            agents,
            max_depth: max_depth.min(MAX_DEPTH_CEILING),
            max_children: max_children.min(MAX_CHILDREN_CEILING),
        }
    }

    /// Whether `agent` is named (or `*` was granted).
    pub fn allows(&self, agent: &str) -> bool {
        ari_model::limits::delegation_allows(&self.agents, agent)
    }

    /// `--grant delegation=AGENT[,AGENT...][;maxDepth=N][;maxChildren=N]`.
    pub fn from_cli(value: &str) -> Result<Self, GrantError> {
        let invalid = |reason: String| GrantError::Invalid {
            grant: "delegation",
            reason,
        };
        let mut parts = value.split(';');
        let agents: Vec<String> = parts
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if agents.is_empty() {
            return Err(invalid("expected delegation=AGENT[,AGENT...]".into()));
        }
        let (mut depth, mut children) = (DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN);
        for part in parts {
            let (key, number) = part.split_once('=').ok_or_else(|| {
                invalid(format!("`{part}`: expected maxDepth=N or maxChildren=N"))
            })?;
            let number: u32 = number
                .trim()
                .parse()
                .map_err(|_| invalid(format!("`{part}`: not a number")))?;
            match key.trim() {
                "maxDepth" => depth = number,
                "maxChildren" => children = number,
                other => return Err(invalid(format!("unknown setting `{other}`"))),
            }
        }
        Ok(Self::new(agents, depth, children))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_grant_names_agents_and_may_set_limits() {
        let g = DelegationGrant::from_cli("summarize, translate;maxDepth=2;maxChildren=4").unwrap();
        assert_eq!(g.agents, ["summarize", "translate"]);
        assert_eq!((g.max_depth, g.max_children), (2, 4));
        assert!(g.allows("translate") && !g.allows("other"));
        let d = DelegationGrant::from_cli("a").unwrap();
        assert_eq!(
            (d.max_depth, d.max_children),
            (DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN)
        );
    }

    #[test]
    fn only_a_written_wildcard_allows_any_agent_and_limits_are_clamped() {
        assert!(DelegationGrant::from_cli("*").unwrap().allows("anyone"));
        let g = DelegationGrant::from_cli("a;maxDepth=999;maxChildren=99999").unwrap();
        assert_eq!(
            (g.max_depth, g.max_children),
            (MAX_DEPTH_CEILING, MAX_CHILDREN_CEILING)
        );
        for bad in ["", " , ", "a;maxDepth", "a;maxDepth=x", "a;color=3"] {
            assert!(DelegationGrant::from_cli(bad).is_err(), "{bad:?}");
        }
    }
}
