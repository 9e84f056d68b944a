//! How an Agent may be used, and who asked for a Task: the rule the operator, the executor
//! and the Plan validator share.

use serde::{Deserialize, Serialize};

/// How the agent may be used.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AgentMode {
    Primary,
    Subagent,
    #[default]
    All,
}

/// Who asked for a Task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOrigin {
    /// A user (or their GitOps tool) created it.
    User,
    /// An executor created it for a parent Task that delegated to this Agent.
    Delegation,
}

impl AgentMode {
    /// Whether an Agent in this mode takes Tasks of `origin`: `primary` only users', `subagent`
    /// only delegated ones, `all` both.
    pub fn accepts(self, origin: TaskOrigin) -> bool {
        matches!(
            (self, origin),
            (AgentMode::All, _)
                | (AgentMode::Primary, TaskOrigin::User)
                | (AgentMode::Subagent, TaskOrigin::Delegation)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_takes_exactly_the_origins_it_names() {
        use AgentMode::*;
        use TaskOrigin::*;
        let table = [
            (Primary, User, true),
            (Primary, Delegation, false),
            (Subagent, User, false),
            (Subagent, Delegation, true),
            (All, User, true),
            (All, Delegation, true),
        ];
        for (mode, origin, takes) in table {
            assert_eq!(mode.accepts(origin), takes, "{mode:?} {origin:?}");
        }
    }
}
