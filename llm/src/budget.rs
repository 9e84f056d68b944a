//! The token budget: decided before each call, charged after it.
//!
//! A task has a token limit (input and output tokens together). Before a call the prompt is
//! estimated ([`estimate_prompt`]); a prompt that leaves no room for a single output token is
//! refused without contacting the provider, and otherwise the call's `max_tokens` is clipped to
//! the room left ([`admit`]). After the call the provider's reported usage is charged
//! ([`Budget::charge`]), not the estimate.

use serde::{Deserialize, Serialize};

use crate::types::{ChatRequest, Message, ResponseFormat};

/// How the prompt's size in tokens is estimated before the call. There is no tokenizer here
/// (each provider has its own, and many are not public), so the estimate counts bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimator {
    /// Bytes counted as one token. 1 (the default) is an upper bound for every byte-level
    /// tokenizer (each token covers at least one byte), so a call never uses more input tokens
    /// than estimated unless the provider adds a hidden prompt; larger values admit longer
    /// prompts at the price of a budget that may end overspent by the last call's error.
    pub bytes_per_token: u32,
    /// Tokens added per message and per tool for the chat template's markers.
    pub tokens_per_item: u32,
    /// Tokens added once (the template's start and the assistant's header).
    pub tokens_per_request: u32,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator {
            bytes_per_token: 1,
            tokens_per_item: 8,
            tokens_per_request: 16,
        }
    }
}

/// The prompt's tokens as `estimator` counts them: every byte of text the request carries
/// (contents, tool calls and results, tool definitions, the response schema, stop strings) plus
/// the template's overheads.
pub fn estimate_prompt(request: &ChatRequest, estimator: Estimator) -> u64 {
    let bytes = request_bytes(request) as u64;
    let items = (request.messages.len() + request.tools.len()) as u64;
    bytes.div_ceil(u64::from(estimator.bytes_per_token.max(1)))
        + items * u64::from(estimator.tokens_per_item)
        + u64::from(estimator.tokens_per_request)
}

/// Bytes of text a request carries: its messages, tool definitions, response schema and stop
/// strings (what the budget estimates from, and what the runtime charges fuel for).
pub fn request_bytes(request: &ChatRequest) -> usize {
    let message_bytes: usize = request.messages.iter().map(message_bytes).sum();
    let tool_bytes: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.as_ref().map_or(0, String::len) + t.parameters.len())
        .sum();
    let schema_bytes = match &request.response_format {
        Some(ResponseFormat::JsonSchema(f)) => f.name.len() + f.schema.len(),
        _ => 0,
    };
    let stop_bytes: usize = request.stop.iter().map(String::len).sum();
    message_bytes + tool_bytes + schema_bytes + stop_bytes
}

/// Bytes of text one message carries: content, tool calls and the call it answers.
pub fn message_bytes(m: &Message) -> usize {
    m.content.as_ref().map_or(0, String::len)
        + m.tool_call_id.as_ref().map_or(0, String::len)
        + m.tool_calls
            .iter()
            .map(|c| c.id.len() + c.name.len() + c.arguments.len())
            .sum::<usize>()
}

/// The output limits a model's configuration sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputLimits {
    /// `max_tokens` when the guest sets none.
    pub default_max_tokens: Option<u32>,
    /// The most the model may be asked for.
    pub max_output_tokens: Option<u32>,
}

/// Why a call was refused before it was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the prompt needs about {estimate} tokens and {remaining} remain in the budget")]
    PromptTooLarge { estimate: u64, remaining: u64 },
    #[error("max tokens must be at least 1")]
    ZeroMaxTokens,
    #[error("a child cannot have {asked} tokens: {remaining} remain in the budget")]
    ChildTooLarge { asked: u64, remaining: u64 },
}

/// The tokens a child task gets out of a parent's `remaining`: what the guest `asked`, or half
/// of what remains. An ask the parent cannot afford is refused whole, never cut down to
/// something the guest did not ask for (as with fuel). The parent is charged the share when
/// the child starts ([`Budget::charge`]) and refunded what the child did not use
/// ([`Budget::refund`]), so a delegation tree never spends more than its root was given.
pub fn child_tokens(asked: Option<u64>, remaining: u64) -> Result<u64, Refusal> {
    let tokens = asked.unwrap_or(remaining / 2);
    if tokens == 0 || tokens > remaining {
        return Err(Refusal::ChildTooLarge {
            asked: tokens,
            remaining,
        });
    }
    Ok(tokens)
}

/// Decides a call: the `max_tokens` to send, or why it is refused. `remaining` is what the
/// budget has left, `estimate` the prompt's [`estimate_prompt`], `requested` the guest's
/// `max_tokens`.
pub fn admit(
    remaining: u64,
    estimate: u64,
    requested: Option<u32>,
    limits: OutputLimits,
) -> Result<u32, Refusal> {
    if requested == Some(0) {
        return Err(Refusal::ZeroMaxTokens);
    }
    let room = remaining.saturating_sub(estimate);
    if room == 0 {
        return Err(Refusal::PromptTooLarge {
            estimate,
            remaining,
        });
    }
    let asked = requested
        .or(limits.default_max_tokens)
        .unwrap_or(u32::MAX)
        .min(limits.max_output_tokens.unwrap_or(u32::MAX));
    Ok(asked.min(u32::try_from(room).unwrap_or(u32::MAX)).max(1))
}

/// Decides an embedding call, which generates no tokens: its inputs must fit in what remains.
pub fn admit_input(remaining: u64, estimate: u64) -> Result<(), Refusal> {
    if estimate > remaining {
        return Err(Refusal::PromptTooLarge {
            estimate,
            remaining,
        });
    }
    Ok(())
}

/// The inputs' tokens as `estimator` counts them.
pub fn estimate_inputs(inputs: &[String], estimator: Estimator) -> u64 {
    let bytes: usize = inputs.iter().map(String::len).sum();
    (bytes as u64).div_ceil(u64::from(estimator.bytes_per_token.max(1)))
        + inputs.len() as u64 * u64::from(estimator.tokens_per_item)
}

/// A task's tokens: its limit and what its calls have been charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    pub limit: u64,
    pub spent: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget { limit, spent: 0 }
    }

    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.spent)
    }

    /// Charges what a call really used; returns the tokens spent beyond the limit (0 unless
    /// the provider used more input than estimated).
    pub fn charge(&mut self, tokens: u64) -> u64 {
        let overspent = tokens.saturating_sub(self.remaining());
        self.spent = self.spent.saturating_add(tokens);
        overspent
    }

    /// Gives back tokens charged ahead (a child's unused share).
    pub fn refund(&mut self, tokens: u64) {
        self.spent = self.spent.saturating_sub(tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{JsonSchemaFormat, ToolCall, ToolDefinition};

    /// What, remaining, estimate, requested, limits, decision.
    type Case = (
        &'static str,
        u64,
        u64,
        Option<u32>,
        OutputLimits,
        Result<u32, Refusal>,
    );

    #[test]
    fn admission_table() {
        let none = OutputLimits::default();
        let capped = OutputLimits {
            default_max_tokens: Some(256),
            max_output_tokens: Some(1024),
        };
        let too_large = |estimate, remaining| {
            Err(Refusal::PromptTooLarge {
                estimate,
                remaining,
            })
        };
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // what,                                  remaining, estimate, requested, limits, decision
            ("asks for less than remains",            1000, 100, Some(50),   none,   Ok(50)),
            ("clipped to what remains",               1000, 900, Some(500),  none,   Ok(100)),
            ("no request takes all that remains",     1000, 100, None,       none,   Ok(900)),
            ("no request takes the model's default",  1000, 100, None,       capped, Ok(256)),
            ("request above the model's ceiling",     5000, 100, Some(4000), capped, Ok(1024)),
            ("default clipped by the budget",         300,  100, None,       capped, Ok(200)),
            ("room for exactly one token",            101,  100, Some(10),   none,   Ok(1)),
            ("prompt fills the budget exactly",       100,  100, Some(10),   none,   too_large(100, 100)),
            ("prompt larger than the budget",         50,   100, None,       none,   too_large(100, 50)),
            ("budget already spent",                  0,    1,   Some(1),    none,   too_large(1, 0)),
            ("zero max tokens",                       1000, 1,   Some(0),    none,   Err(Refusal::ZeroMaxTokens)),
            ("room beyond u32 is clipped",            u64::MAX, 0, None,     none,   Ok(u32::MAX)),
        ];
        for (what, remaining, estimate, requested, limits, want) in cases {
            assert_eq!(
                &admit(*remaining, *estimate, *requested, *limits),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn embeddings_need_room_for_their_inputs_only() {
        assert_eq!(admit_input(10, 10), Ok(()));
        assert_eq!(
            admit_input(9, 10),
            Err(Refusal::PromptTooLarge {
                estimate: 10,
                remaining: 9
            })
        );
        let inputs = ["abc".to_string(), "de".to_string()];
        assert_eq!(estimate_inputs(&inputs, Estimator::default()), 5 + 2 * 8);
    }

    /// What, asked, remaining, decision.
    type ChildCase = (&'static str, Option<u64>, u64, Result<u64, Refusal>);

    #[test]
    fn children_draw_from_what_remains() {
        let too_large = |asked, remaining| Err(Refusal::ChildTooLarge { asked, remaining });
        #[rustfmt::skip]
        let cases: &[ChildCase] = &[
            ("an ask that fits",           Some(300), 1000, Ok(300)),
            ("all that remains",           Some(1000), 1000, Ok(1000)),
            ("no ask takes half",          None,      1000, Ok(500)),
            ("an ask beyond what remains", Some(1001), 1000, too_large(1001, 1000)),
            ("a zero ask",                 Some(0),   1000, too_large(0, 1000)),
            ("nothing left to halve",      None,      1,    too_large(0, 1)),
        ];
        for (what, asked, remaining, want) in cases {
            assert_eq!(&child_tokens(*asked, *remaining), want, "{what}");
        }
        // A parent of 1000 gives a child 400, the child uses 150: the parent has 850 left.
        let mut parent = Budget::new(1000);
        let share = child_tokens(Some(400), parent.remaining()).expect("fits");
        parent.charge(share);
        let mut child = Budget::new(share);
        child.charge(150);
        parent.refund(child.remaining());
        assert_eq!(parent.remaining(), 850);
    }

    #[test]
    fn charging_uses_actual_usage_and_reports_overspending() {
        let mut budget = Budget::new(1000);
        assert_eq!(budget.charge(400), 0);
        assert_eq!(budget.remaining(), 600);
        assert_eq!(
            budget.charge(700),
            100,
            "the provider used more than estimated"
        );
        assert_eq!(budget.remaining(), 0);
        assert_eq!(budget.spent, 1100, "what was really used is kept");
    }

    #[test]
    fn the_estimate_counts_every_byte_sent_and_the_template() {
        let e = Estimator::default();
        let empty = ChatRequest::default();
        assert_eq!(estimate_prompt(&empty, e), 16);
        let mut req = ChatRequest {
            messages: vec![Message::system("abcd"), Message::user("efgh")],
            ..ChatRequest::default()
        };
        assert_eq!(estimate_prompt(&req, e), 8 + 2 * 8 + 16);
        req.messages.push(Message {
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            content: None,
            ..Message::assistant("")
        });
        req.messages.push(Message::tool("c1", "ok"));
        req.tools.push(ToolDefinition {
            name: "f".into(),
            description: Some("dd".into()),
            parameters: "{}".into(),
        });
        req.response_format = Some(ResponseFormat::JsonSchema(JsonSchemaFormat {
            name: "n".into(),
            schema: "{}".into(),
            strict: true,
        }));
        req.stop.push("X".into());
        // 8 text + 5 call + 4 result + 5 tool + 3 schema + 1 stop; 5 items.
        assert_eq!(estimate_prompt(&req, e), 26 + 5 * 8 + 16);
        let loose = Estimator {
            bytes_per_token: 4,
            ..e
        };
        assert_eq!(estimate_prompt(&req, loose), 7 + 5 * 8 + 16, "rounded up");
    }
}
