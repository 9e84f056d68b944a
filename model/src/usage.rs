//! What a run used, measured by the host (never taken from the guest's own claims).

use serde::{Deserialize, Serialize};

use crate::price::Cost;

/// Resources a run used; `Task.status.resourcesUsed` and part of the attestation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourcesUsed {
    /// Fuel consumed: Wasm instructions plus host-call charges (deterministic).
    pub fuel: u64,
    /// CPU time of the thread that ran the task (instantiate + calls + host work).
    pub cpu_millis: u64,
    /// Peak total linear memory of the instance.
    pub memory_bytes: u64,
    /// Storage bytes written (committed) by the task.
    pub storage_bytes: u64,
    /// HTTP bytes sent plus received.
    pub network_bytes: u64,
    /// Wall-clock time from accepting the task to its outcome.
    pub wall_millis: u64,
    /// The part of `fuel` the task's children (delegated tasks and messages) took out of its
    /// budget; the task's own work is `fuel - childrenFuel`. Absent when it delegated nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub children_fuel: u64,
    /// Model calls made (chat and embeddings), children's excluded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub model_calls: u64,
    /// Input (prompt) tokens of those calls, as the providers reported them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_tokens: u64,
    /// Output (generated) tokens of those calls.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_tokens: u64,
    /// The part of `inputTokens` served from a provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Tokens the task's children took out of its budget: what awaited ones used (their own
    /// children's included), a message's whole share. Absent when no child was given any.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub children_tokens: u64,
    /// MCP tool calls sent to a server (`call-tool` exchanges, answered or failed; tool lists
    /// and calls refused before sending are not counted), children's excluded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u64,
}

impl ResourcesUsed {
    /// Tokens this task took out of its budget, its children's included: what a parent is
    /// charged for it and what a Plan counts against its budget.
    pub fn tokens_spent(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.children_tokens)
    }

    /// Adds the token totals of `calls` (one entry per model) to these figures.
    pub fn add_tokens<'a>(&mut self, calls: impl IntoIterator<Item = &'a ModelCalls>) {
        for c in calls {
            self.model_calls += c.usage.calls;
            self.input_tokens += c.usage.input_tokens;
            self.output_tokens += c.usage.output_tokens;
            self.cached_input_tokens += c.usage.cached_input_tokens;
        }
    }
}

/// Calls and tokens, as the providers reported them: what a token budget is charged and what
/// usage is billed by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of `inputTokens` served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
}

impl TokenUsage {
    /// Input and output tokens together (what the budget counts).
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One model's share of a run: which ModelConfig, which endpoint and model id answered, and
/// what it used. In the report, `Task.status.models` and the signed attestation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelCalls {
    /// The ModelConfig's name, as the guest called it.
    pub name: String,
    /// The API root that answered, without credentials.
    pub endpoint: String,
    /// The provider's model id that was asked for.
    pub model: String,
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// What the usage costs at the ModelConfig's prices (exact decimal); absent when it sets
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<Cost>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the agent itself expects a task to need (its `estimate` export), in the units the
/// executor limits. Recorded in `Task.status.estimate` next to what was measured; never
/// enforced, never trusted: a planner may read it, the limits still decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub fuel: u64,
    pub duration_millis: u64,
    pub memory_bytes: u64,
}
