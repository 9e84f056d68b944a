//! A planner Agent whose plan comes from a language model. It asks the model for a Plan
//! proposal (docs/plans.md) in the proposal's own JSON schema and returns the answer as is:
//! the model proposes, the operator's deterministic validator disposes. Nothing the model
//! writes runs unless it names only Agents that exist, are Ready and allowed, asks only for
//! what their grants hold and fits the Plan's limits (fuel, tokens, steps, deadline).
//!
//! Config (the Agent's `spec.config`), one setting per line:
//! ```text
//! model=small
//! agent=wordcount: counts the words of a text; its output is {"words": N}
//! agent=echo: returns its input unchanged
//! ```
//! Input: the goal. Output: the proposal (JSON). The planner's own Task succeeds whenever the
//! model answers; whether the plan is admitted is the Plan's `Validated` condition.

use std::sync::OnceLock;

use ari_sdk::model::{self, ChatRequest};
use ari_sdk::{Agent, Error, Output, Task};

/// The proposal's JSON schema, the one `ari-plan` generates and checks in: the model's
/// answer is constrained to the shape the validator reads.
const PROPOSAL_SCHEMA: &str = include_str!("../../../../plan/proposal.schema.json");

/// Room for a plan of a few steps.
const MAX_TOKENS: u32 = 1024;

/// The configured model (none: the first granted) and the Agents a plan may use.
#[derive(Debug, Default, PartialEq)]
pub struct Settings {
    pub model: Option<String>,
    /// (Agent name, what it does).
    pub agents: Vec<(String, String)>,
}

/// Reads the config's `model=` and `agent=NAME: description` lines; blank lines and `#`
/// comments are skipped, anything else is an error.
pub fn settings(config: &str) -> Result<Settings, String> {
    let mut s = Settings::default();
    for line in config.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some(("model", name)) => s.model = Some(name.trim().to_owned()),
            Some(("agent", agent)) => {
                let (name, what) = agent.split_once(':').unwrap_or((agent, ""));
                s.agents
                    .push((name.trim().to_owned(), what.trim().to_owned()));
            }
            _ => return Err(format!("config: cannot read {line:?}")),
        }
    }
    Ok(s)
}

/// What the model is told: the proposal's rules in a few lines and the Agents it may use.
pub fn system_prompt(agents: &[(String, String)]) -> String {
    let mut prompt = String::from(
        "You write plans for ari. A plan is JSON: {\"steps\": [...]}. Each step has a \
         `name` (lowercase letters, digits and '-'), an `agentRef` {\"name\": AGENT}, and \
         either an `input` string or `inputFrom` [{\"step\": EARLIER_STEP, \"field\": \
         FIELD}] taking an earlier step's output (a field it lists in `outputs`). \
         `dependsOn` orders steps. Use only these agents:\n",
    );
    for (name, what) in agents {
        prompt.push_str(&format!("- {name}: {what}\n"));
    }
    prompt.push_str("Answer with the plan only.");
    prompt
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

struct ModelPlanner;

impl Agent for ModelPlanner {
    fn initialize(config: Vec<u8>) -> Result<(), Error> {
        let config = String::from_utf8(config)
            .map_err(|_| Error::Invalid("config: UTF-8 text, one setting a line".into()))?;
        let _ = SETTINGS.set(settings(&config).map_err(Error::Invalid)?);
        Ok(())
    }

    fn execute(task: Task) -> Result<Output, Error> {
        let goal = String::from_utf8(task.input)
            .map_err(|_| Error::Invalid("the goal must be UTF-8 text".into()))?;
        let settings = SETTINGS.get_or_init(Settings::default);
        let name = match &settings.model {
            Some(name) => name.clone(),
            None => model::models()
                .into_iter()
                .next()
                .ok_or_else(|| Error::Denied("no model is granted to this agent".into()))?,
        };
        let answer = ChatRequest::new(name)
            .system(system_prompt(&settings.agents))
            .user(goal)
            .json_schema("plan_proposal", PROPOSAL_SCHEMA)
            .max_tokens(MAX_TOKENS)
            .temperature(0.0)
            .seed(1)
            .send()?;
        let proposal = answer
            .text()
            .ok_or_else(|| Error::Failed("the model answered no plan".into()))?;
        Ok(Output::from(proposal.trim().to_owned()))
    }
}

ari_sdk::export_agent!(ModelPlanner);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_model_and_the_agents_a_plan_may_use() {
        let s = settings("model=small\n# a comment\nagent=wordcount: counts words\nagent=echo\n")
            .expect("reads");
        assert_eq!(s.model.as_deref(), Some("small"));
        assert_eq!(
            s.agents,
            vec![
                ("wordcount".to_owned(), "counts words".to_owned()),
                ("echo".to_owned(), String::new())
            ]
        );
        assert!(settings("steps=3").is_err());
        let prompt = system_prompt(&s.agents);
        assert!(prompt.contains("- wordcount: counts words"), "{prompt}");
    }

    #[test]
    fn the_schema_sent_is_the_proposal_schema() {
        assert!(PROPOSAL_SCHEMA.contains("\"ari plan proposal\""));
    }
}
