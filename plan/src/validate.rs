//! The deterministic validator: whether a proposal may run, with every reason it may not.
//!
//! Pure: the same proposal, Agents and limits give the same violations in the same order
//! (plan-wide rules, then each step in declaration order, then cycles, then the fuel total),
//! whether the operator or `ari plan validate` asks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agents::{AgentMode, AgentView, Agents};
use crate::bounds::{cut, first_breach};
use crate::graph::Graph;
use crate::model::{
    Limits, MAX_DEADLINE_SECONDS, MAX_FUEL, MAX_PARALLEL, MAX_RETRY, MAX_STEP_NAME, MAX_STEPS,
    PLANNER_STEP, Proposal, Step,
};
use crate::names::{MAX_TASK_NAME, longest_step_task_name};

/// The rule a violation breaks; its id (`unknown-agent`, …) is stable, for scripts and alerts.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// The proposal has no step.
    NoSteps,
    /// More steps than `limits.maxSteps` (or the hard cap of 128).
    TooManySteps,
    /// `maxParallel` above the Plan's limit (or the hard cap of 64).
    ParallelOverLimit,
    /// Total fuel of the steps (retries included) above `limits.fuel`, or a proposal asking
    /// for more fuel than the Plan allows.
    FuelOverLimit,
    /// Total model tokens of the steps (retries included) above `limits.tokens`, or a proposal
    /// asking for more tokens than the Plan allows.
    TokensOverLimit,
    /// A deadline above the Plan's `limits.deadlineSeconds`.
    DeadlineOverLimit,
    /// Not a DNS label, too long for its Task name, or the reserved name `planner`.
    InvalidName,
    /// Two steps share a name.
    DuplicateStep,
    /// The step's Agent does not exist.
    UnknownAgent,
    /// The step's Agent is not in the Plan's `allowedAgents`.
    AgentNotAllowed,
    /// The step's Agent is not Ready.
    AgentNotReady,
    /// The step's Agent is in mode `subagent`: it takes only delegated Tasks.
    ModeRefused,
    /// A requirement outside the Agent's grants.
    NotGranted,
    /// A step's fuel budget above its Agent's `limits.fuel`.
    FuelOverAgentLimit,
    /// A step's token budget above its Agent's `limits.tokens`.
    TokensOverAgentLimit,
    /// More re-runs than 5.
    RetryOverLimit,
    /// Both `input` and `inputFrom`.
    InputConflict,
    /// `dependsOn` or `inputFrom` names a step the plan does not have.
    UnknownStep,
    /// `inputFrom.field` is not among the outputs the named step declares.
    UnknownField,
    /// Two inputs of a step would get the same key.
    DuplicateInputKey,
    /// Steps wait for each other in a ring.
    Cycle,
    /// A value outside the bounds the schema sets (a proposal never went through it).
    OutOfRange,
}

impl Rule {
    /// The stable kebab-case id.
    pub fn id(self) -> &'static str {
        match self {
            Rule::NoSteps => "no-steps",
            Rule::TooManySteps => "too-many-steps",
            Rule::ParallelOverLimit => "parallel-over-limit",
            Rule::FuelOverLimit => "fuel-over-limit",
            Rule::TokensOverLimit => "tokens-over-limit",
            Rule::DeadlineOverLimit => "deadline-over-limit",
            Rule::InvalidName => "invalid-name",
            Rule::DuplicateStep => "duplicate-step",
            Rule::UnknownAgent => "unknown-agent",
            Rule::AgentNotAllowed => "agent-not-allowed",
            Rule::AgentNotReady => "agent-not-ready",
            Rule::ModeRefused => "mode-refused",
            Rule::NotGranted => "not-granted",
            Rule::FuelOverAgentLimit => "fuel-over-agent-limit",
            Rule::TokensOverAgentLimit => "tokens-over-agent-limit",
            Rule::RetryOverLimit => "retry-over-limit",
            Rule::InputConflict => "input-conflict",
            Rule::UnknownStep => "unknown-step",
            Rule::UnknownField => "unknown-field",
            Rule::DuplicateInputKey => "duplicate-input-key",
            Rule::Cycle => "cycle",
            Rule::OutOfRange => "out-of-range",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One reason a proposal may not run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The step it is about; absent for plan-wide rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub rule: Rule,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.step {
            Some(step) => write!(f, "step {step}: {}: {}", self.rule, self.message),
            None => write!(f, "plan: {}: {}", self.rule, self.message),
        }
    }
}

/// What a proposal is judged against.
pub struct Context<'a> {
    /// The Agents of the Plan's namespace.
    pub agents: &'a Agents,
    /// The Plan's own limits (a proposal may only lower them).
    pub limits: &'a Limits,
    /// The Plan's name, when known, so step Task names are checked to fit
    /// ([`crate::names::longest_step_task_name`]).
    pub plan_name: Option<&'a str>,
    /// The Plan's `allowedAgents`: when set, the only Agents a step may run on.
    pub allowed_agents: Option<&'a [String]>,
}

/// Most violations listed; past it one more says how many were left out.
pub const MAX_LISTED: usize = 256;
/// Most cycles named (each is one violation).
pub const MAX_CYCLES: usize = 8;
/// Most steps of a cycle named in its message.
pub const MAX_CYCLE_PATH: usize = 8;
/// Most declared outputs named in an `unknown-field` message.
const MAX_OUTPUTS_SHOWN: usize = 8;

/// The violations found, at most [`MAX_LISTED`] kept; `unlisted` counts the rest.
#[derive(Default)]
struct Out {
    listed: Vec<Violation>,
    unlisted: usize,
}

impl Out {
    fn push(&mut self, v: Violation) {
        if self.listed.len() < MAX_LISTED {
            self.listed.push(v);
        } else {
            self.unlisted += 1;
        }
    }

    fn plan(&mut self, rule: Rule, message: String) {
        self.push(Violation {
            step: None,
            rule,
            message,
        });
    }

    fn step(&mut self, step: &str, rule: Rule, message: String) {
        self.push(Violation {
            step: Some(cut(step)),
            rule,
            message,
        });
    }

    fn done(mut self) -> Vec<Violation> {
        if self.unlisted > 0 {
            self.listed.push(Violation {
                step: None,
                rule: Rule::OutOfRange,
                message: format!(
                    "{} more violation(s) not listed (at most {MAX_LISTED} are)",
                    self.unlisted
                ),
            });
        }
        self.listed
    }
}

/// Every violation of `proposal` (empty: admissible). A proposal that breaks a size, count or
/// length bound gets that one violation and nothing else is checked
/// ([`crate::bounds::first_breach`]), so the work and the answer stay small whatever it holds.
pub fn validate(proposal: &Proposal, ctx: &Context) -> Vec<Violation> {
    if let Some(v) = first_breach(proposal) {
        return vec![v];
    }
    let mut out = Out::default();
    let limits = plan_limits(proposal, ctx, &mut out);
    let steps = &proposal.steps;
    let by_name: BTreeMap<&str, &Step> = steps.iter().rev().map(|s| (s.name.as_str(), s)).collect();
    let mut seen = BTreeSet::new();
    for s in steps {
        step_rules(s, ctx, &limits, &by_name, &mut seen, &mut out);
    }
    let cycles = Graph::new(steps).cycles(MAX_CYCLES + 1);
    for cycle in cycles.iter().take(MAX_CYCLES) {
        let first = cycle.first().copied().unwrap_or_default();
        out.step(first, Rule::Cycle, ring(cycle));
    }
    if cycles.len() > MAX_CYCLES {
        out.plan(
            Rule::Cycle,
            format!("more rings than the {MAX_CYCLES} named; break those and validate again"),
        );
    }
    total_fuel(steps, ctx, &limits, &mut out);
    total_tokens(steps, ctx, &limits, &mut out);
    out.done()
}

/// `a → c → b → a`, with at most [`MAX_CYCLE_PATH`] steps named.
fn ring(cycle: &[&str]) -> String {
    let steps = cycle.len().saturating_sub(1);
    let text = if cycle.len() <= MAX_CYCLE_PATH + 1 {
        cycle.join(" → ")
    } else {
        let head = cycle[..MAX_CYCLE_PATH].join(" → ");
        format!("{head} → … ({steps} steps in all)")
    };
    format!("steps wait for each other in a ring: {text}")
}

/// Whether the planner Agent may run (its violations are reported on step `planner`).
pub fn validate_planner(agent: &str, ctx: &Context) -> Vec<Violation> {
    let mut out = Out::default();
    if let Some(v) = crate::bounds::agent_breach(agent) {
        out.step(PLANNER_STEP, Rule::OutOfRange, v);
        return out.done();
    }
    agent_rules(PLANNER_STEP, agent, ctx, &mut out);
    out.done()
}

/// Plan-wide rules; returns the limits the steps are held to (the Plan's, lowered by the
/// proposal's).
fn plan_limits(proposal: &Proposal, ctx: &Context, out: &mut Out) -> Limits {
    let plan = ctx.limits;
    if plan.max_steps.is_some_and(|m| m == 0 || m > MAX_STEPS) {
        out.plan(
            Rule::OutOfRange,
            format!("limits.maxSteps must be 1..={MAX_STEPS}"),
        );
    }
    if plan
        .max_parallel
        .is_some_and(|m| m == 0 || m > MAX_PARALLEL)
    {
        out.plan(
            Rule::ParallelOverLimit,
            format!(
                "limits.maxParallel {} is outside 1..={MAX_PARALLEL}",
                plan.max_parallel.unwrap_or_default()
            ),
        );
    }
    let asked = proposal.limits.clone().unwrap_or_default();
    let over = |a: Option<u64>, p: Option<u64>| matches!((a, p), (Some(a), Some(p)) if a > p);
    if over(
        asked.max_steps.map(u64::from),
        Some(u64::from(plan.max_steps())),
    ) {
        out.plan(
            Rule::TooManySteps,
            format!(
                "the proposal asks for maxSteps {}, above the plan's {}",
                asked.max_steps.unwrap_or_default(),
                plan.max_steps()
            ),
        );
    }
    if over(
        asked.max_parallel.map(u64::from),
        Some(u64::from(plan.max_parallel())),
    ) {
        out.plan(
            Rule::ParallelOverLimit,
            format!(
                "the proposal asks for maxParallel {}, above the plan's {}",
                asked.max_parallel.unwrap_or_default(),
                plan.max_parallel()
            ),
        );
    }
    if over(asked.fuel, plan.fuel) {
        out.plan(
            Rule::FuelOverLimit,
            format!(
                "the proposal asks for fuel {}, above the plan's {}",
                asked.fuel.unwrap_or_default(),
                plan.fuel.unwrap_or_default()
            ),
        );
    }
    if over(asked.tokens, plan.tokens) {
        out.plan(
            Rule::TokensOverLimit,
            format!(
                "the proposal asks for tokens {}, above the plan's {}",
                asked.tokens.unwrap_or_default(),
                plan.tokens.unwrap_or_default()
            ),
        );
    }
    if over(
        asked.deadline_seconds.map(u64::from),
        plan.deadline_seconds.map(u64::from),
    ) {
        out.plan(
            Rule::DeadlineOverLimit,
            format!(
                "the proposal asks for deadlineSeconds {}, above the plan's {}",
                asked.deadline_seconds.unwrap_or_default(),
                plan.deadline_seconds.unwrap_or_default()
            ),
        );
    }
    let limits = plan.tightest(&asked);
    let n = proposal.steps.len();
    let max = limits.max_steps().min(MAX_STEPS) as usize;
    if n == 0 {
        out.plan(Rule::NoSteps, "the plan has no step".into());
    } else if n > max {
        out.plan(
            Rule::TooManySteps,
            format!("{n} steps, above the limit of {max}"),
        );
    }
    limits
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= MAX_STEP_NAME
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `s` in quotes, cut to a readable length (names in messages come from a guest).
fn shown(s: &str) -> String {
    format!("{:?}", cut(s))
}

fn step_rules(
    s: &Step,
    ctx: &Context,
    limits: &Limits,
    by_name: &BTreeMap<&str, &Step>,
    seen: &mut BTreeSet<String>,
    out: &mut Out,
) {
    let name = s.name.as_str();
    if !is_dns_label(name) {
        out.step(
            name,
            Rule::InvalidName,
            format!(
                "step name {} is not a DNS label (lowercase letters, digits and '-', at most {MAX_STEP_NAME})",
                shown(name)
            ),
        );
    } else if name == PLANNER_STEP {
        out.step(
            name,
            Rule::InvalidName,
            "the step name planner is reserved for the planner's Task".into(),
        );
    } else if let Some(plan) = ctx.plan_name {
        let longest = longest_step_task_name(plan, name, s.retry_limit().min(MAX_RETRY));
        if longest > MAX_TASK_NAME {
            out.step(
                name,
                Rule::InvalidName,
                format!(
                    "the step's Task name may reach {longest} bytes, above {MAX_TASK_NAME}: {}-{name}, with {}",
                    cut(plan),
                    crate::names::SUFFIXES_EXPLAINED
                ),
            );
        }
    }
    if !seen.insert(s.name.clone()) {
        out.step(
            name,
            Rule::DuplicateStep,
            format!("another step is already named {}", shown(name)),
        );
    }
    if let Some(allowed) = ctx.allowed_agents
        && !allowed.contains(&s.agent_ref.name)
    {
        out.step(
            name,
            Rule::AgentNotAllowed,
            format!(
                "agent {} is not in the Plan's allowedAgents",
                shown(&s.agent_ref.name)
            ),
        );
    }
    let agent = agent_rules(name, &s.agent_ref.name, ctx, out);
    if let (Some(agent), Some(req)) = (agent, &s.requirements) {
        for denial in agent.denials(req) {
            out.step(name, Rule::NotGranted, denial);
        }
    }
    if let Some(fuel) = s.fuel {
        if fuel == 0 || fuel > MAX_FUEL {
            out.step(
                name,
                Rule::OutOfRange,
                format!("fuel {fuel} is outside 1..={MAX_FUEL}"),
            );
        } else if let Some(a) = agent
            && fuel > a.fuel_limit
        {
            out.step(
                name,
                Rule::FuelOverAgentLimit,
                format!(
                    "fuel {fuel} exceeds agent {}'s limits.fuel {}",
                    s.agent_ref.name, a.fuel_limit
                ),
            );
        }
    }
    if let Some(tokens) = s.tokens {
        if tokens > MAX_FUEL {
            out.step(
                name,
                Rule::OutOfRange,
                format!("tokens {tokens} is outside 0..={MAX_FUEL}"),
            );
        } else if let Some(a) = agent
            && tokens > a.tokens_limit
        {
            out.step(
                name,
                Rule::TokensOverAgentLimit,
                format!(
                    "tokens {tokens} exceeds agent {}'s limits.tokens {}",
                    s.agent_ref.name, a.tokens_limit
                ),
            );
        }
    }
    if let Some(d) = s.deadline_seconds {
        if d == 0 || d > MAX_DEADLINE_SECONDS {
            out.step(
                name,
                Rule::OutOfRange,
                format!("deadlineSeconds {d} is outside 1..={MAX_DEADLINE_SECONDS}"),
            );
        } else if let Some(plan) = limits.deadline_seconds
            && d > plan
        {
            out.step(
                name,
                Rule::DeadlineOverLimit,
                format!("deadlineSeconds {d} is above the plan's deadlineSeconds {plan}"),
            );
        }
    }
    if s.retry_limit() > MAX_RETRY {
        out.step(
            name,
            Rule::RetryOverLimit,
            format!("retry.limit {} is above {MAX_RETRY}", s.retry_limit()),
        );
    }
    if s.input.is_some() && !s.input_from.is_empty() {
        out.step(
            name,
            Rule::InputConflict,
            "both input and inputFrom are set; a step takes one".into(),
        );
    }
    reference_rules(s, by_name, out);
}

/// `dependsOn` and `inputFrom` against the plan's steps and their declared outputs.
fn reference_rules(s: &Step, by_name: &BTreeMap<&str, &Step>, out: &mut Out) {
    let name = s.name.as_str();
    let mut unknown = BTreeSet::new();
    let mut report_unknown = |dep: &str, out: &mut Out| {
        if !by_name.contains_key(dep) && unknown.insert(dep.to_owned()) {
            out.step(
                name,
                Rule::UnknownStep,
                format!(
                    "depends on step {}, which the plan does not have",
                    shown(dep)
                ),
            );
        }
    };
    for dep in &s.depends_on {
        report_unknown(dep, out);
    }
    for r in &s.input_from {
        report_unknown(&r.step, out);
        let (Some(field), Some(from)) = (&r.field, by_name.get(r.step.as_str())) else {
            continue;
        };
        if !from.outputs.contains(field) {
            let declared = if from.outputs.is_empty() {
                "declares no outputs".to_owned()
            } else {
                let shown: Vec<String> = from
                    .outputs
                    .iter()
                    .take(MAX_OUTPUTS_SHOWN)
                    .map(|f| cut(f))
                    .collect();
                let more = from.outputs.len().saturating_sub(MAX_OUTPUTS_SHOWN);
                let more = if more > 0 {
                    format!(", … {more} more")
                } else {
                    String::new()
                };
                format!("declares outputs [{}{more}]", shown.join(", "))
            };
            out.step(
                name,
                Rule::UnknownField,
                format!(
                    "takes field {} of step {}, which {declared}",
                    shown(field),
                    r.step
                ),
            );
        }
    }
    let combined = s.input_from.len() > 1 || s.input_from.iter().any(|r| r.key.is_some());
    if combined {
        let mut keys = BTreeSet::new();
        for r in &s.input_from {
            if !keys.insert(r.key()) {
                out.step(
                    name,
                    Rule::DuplicateInputKey,
                    format!(
                        "two inputs would both be named {}; set inputFrom.key",
                        shown(r.key())
                    ),
                );
            }
        }
    }
}

/// The rules about the Agent a step (or the planner) runs on; returns it when it exists.
fn agent_rules<'a>(
    step: &str,
    agent: &str,
    ctx: &Context<'a>,
    out: &mut Out,
) -> Option<&'a crate::agents::AgentView> {
    let Some(view) = ctx.agents.get(agent) else {
        out.step(
            step,
            Rule::UnknownAgent,
            format!("agent {} does not exist", shown(agent)),
        );
        return None;
    };
    if !view.ready {
        out.step(
            step,
            Rule::AgentNotReady,
            format!("agent {agent} is not Ready"),
        );
    }
    if view.mode == AgentMode::Subagent {
        out.step(
            step,
            Rule::ModeRefused,
            format!(
                "agent {agent} is in mode subagent: it takes only Tasks another agent delegates, not plan steps"
            ),
        );
    }
    Some(view)
}

/// The fuel all steps may burn (each at its budget, times its attempts) against the limit.
fn total_fuel(steps: &[Step], ctx: &Context, limits: &Limits, out: &mut Out) {
    let Some(limit) = limits.fuel else { return };
    let total = worst_case(steps, |s| {
        s.fuel
            .or_else(|| ctx.agents.get(&s.agent_ref.name).map(|a| a.fuel_limit))
    });
    if total > limit {
        out.plan(
            Rule::FuelOverLimit,
            format!(
                "the steps may burn up to {total} fuel (each at its budget, retries included), above limits.fuel {limit}"
            ),
        );
    }
}

/// The model tokens all steps may spend (each at its budget, else its Agent's ceiling, times
/// its attempts) against the limit: a step's Task can spend no more than its `spec.tokens`,
/// so the Plan cannot either.
fn total_tokens(steps: &[Step], ctx: &Context, limits: &Limits, out: &mut Out) {
    let Some(limit) = limits.tokens else { return };
    let total = worst_case(steps, |s| {
        s.tokens.or_else(|| {
            ctx.agents
                .get(&s.agent_ref.name)
                .map(AgentView::token_ceiling)
        })
    });
    if total > limit {
        out.plan(
            Rule::TokensOverLimit,
            format!(
                "the steps may spend up to {total} tokens (each at its budget, retries included), above limits.tokens {limit}"
            ),
        );
    }
}

/// The sum over steps of a budget (`budget`, 0 for a step whose Agent is unknown) times the
/// step's attempts.
fn worst_case(steps: &[Step], budget: impl Fn(&Step) -> Option<u64>) -> u64 {
    steps.iter().fold(0u64, |sum, s| {
        let attempts = u64::from(s.retry_limit().min(MAX_RETRY)) + 1;
        sum.saturating_add(budget(s).unwrap_or(0).saturating_mul(attempts))
    })
}
