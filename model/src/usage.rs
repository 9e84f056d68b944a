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

    /// Adds another run's figures to these: counts add up, `memoryBytes` is the larger peak.
    /// What a Task of many items used, all items together.
    pub fn add(&mut self, other: &ResourcesUsed) {
        self.fuel = self.fuel.saturating_add(other.fuel);
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        self.storage_bytes = self.storage_bytes.saturating_add(other.storage_bytes);
        self.network_bytes = self.network_bytes.saturating_add(other.network_bytes);
        self.wall_millis = self.wall_millis.saturating_add(other.wall_millis);
        self.children_fuel = self.children_fuel.saturating_add(other.children_fuel);
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.children_tokens = self.children_tokens.saturating_add(other.children_tokens);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
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

/// Adds `calls` to `into`, one entry per (model name, endpoint, model id): usage adds up,
/// and so does the estimated cost while every part has one in the same currency.
pub fn merge_calls(into: &mut Vec<ModelCalls>, calls: &[ModelCalls]) {
    for c in calls {
        let same = |m: &&mut ModelCalls| {
            (m.name.as_str(), m.endpoint.as_str(), m.model.as_str())
                == (c.name.as_str(), c.endpoint.as_str(), c.model.as_str())
        };
        match into.iter_mut().find(same) {
            None => into.push(c.clone()),
            Some(m) => {
                m.usage.calls = m.usage.calls.saturating_add(c.usage.calls);
                m.usage.input_tokens = m.usage.input_tokens.saturating_add(c.usage.input_tokens);
                m.usage.output_tokens = m.usage.output_tokens.saturating_add(c.usage.output_tokens);
                m.usage.cached_input_tokens = m
                    .usage
                    .cached_input_tokens
                    .saturating_add(c.usage.cached_input_tokens);
                m.estimated_cost = match (&m.estimated_cost, &c.estimated_cost) {
                    (Some(a), Some(b)) => a.plus(b),
                    _ => None,
                };
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(name: &str, input: u64, cost: Option<&str>) -> ModelCalls {
        ModelCalls {
            name: name.into(),
            endpoint: "http://m".into(),
            model: "tiny".into(),
            usage: TokenUsage {
                calls: 1,
                input_tokens: input,
                output_tokens: 1,
                cached_input_tokens: 0,
            },
            estimated_cost: cost.map(|a| Cost {
                amount: a.into(),
                currency: "USD".into(),
            }),
        }
    }

    #[test]
    fn merged_calls_add_up_per_model_and_keep_a_cost_only_when_every_part_has_one() {
        let mut all = Vec::new();
        merge_calls(
            &mut all,
            &[calls("a", 10, Some("0.1")), calls("b", 1, None)],
        );
        merge_calls(&mut all, &[calls("a", 5, Some("0.25"))]);
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].usage.calls, all[0].usage.input_tokens), (2, 15));
        assert_eq!(
            all[0].estimated_cost.as_ref().map(|c| c.amount.as_str()),
            Some("0.35")
        );
        merge_calls(&mut all, &[calls("a", 1, None)]);
        assert_eq!(all[0].estimated_cost, None);
    }

    #[test]
    fn added_usage_sums_counts_and_keeps_the_larger_memory_peak() {
        let one = ResourcesUsed {
            fuel: 3,
            memory_bytes: 100,
            tool_calls: 1,
            ..ResourcesUsed::default()
        };
        let mut sum = ResourcesUsed {
            fuel: 2,
            memory_bytes: 300,
            ..ResourcesUsed::default()
        };
        sum.add(&one);
        assert_eq!((sum.fuel, sum.memory_bytes, sum.tool_calls), (5, 300, 1));
    }
}
