//! The `delegation` grant is the model's [`DelegationGrant`] (which Agents a task may call, how
//! deep and how many); this is how the CLI writes one.

use crate::capability::GrantError;

pub use ari_model::grant::{DelegationGrant, MAX_CHILDREN_CEILING, MAX_DEPTH_CEILING};
pub use ari_model::limits::{DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH};

/// `--grant delegation=AGENT[,AGENT...][;maxDepth=N][;maxChildren=N]`.
pub fn grant_from_cli(value: &str) -> Result<DelegationGrant, GrantError> {
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
        let (key, number) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("`{part}`: expected maxDepth=N or maxChildren=N")))?;
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
    Ok(DelegationGrant::new(agents, depth, children))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_grant_names_agents_and_may_set_limits() {
        let g = grant_from_cli("summarize, translate;maxDepth=2;maxChildren=4").unwrap();
        assert_eq!(g.agents, ["summarize", "translate"]);
        assert_eq!((g.depth_limit(), g.children_limit()), (2, 4));
        assert!(g.allows("translate") && !g.allows("other"));
        let d = grant_from_cli("a").unwrap();
        assert_eq!(
            (d.depth_limit(), d.children_limit()),
            (DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN)
        );
    }

    #[test]
    fn only_a_written_wildcard_allows_any_agent_and_limits_are_clamped() {
        assert!(grant_from_cli("*").unwrap().allows("anyone"));
        let g = grant_from_cli("a;maxDepth=999;maxChildren=99999").unwrap();
        assert_eq!(
            (g.depth_limit(), g.children_limit()),
            (MAX_DEPTH_CEILING, MAX_CHILDREN_CEILING)
        );
        for bad in ["", " , ", "a;maxDepth", "a;maxDepth=x", "a;color=3"] {
            assert!(grant_from_cli(bad).is_err(), "{bad:?}");
        }
    }
}
