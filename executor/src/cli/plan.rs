//! `ari plan`: Plans without a cluster. `validate` judges a Plan (or a planner's proposal)
//! against Agent manifests with the operator's own validator; `verify` checks a finished Plan's
//! attestations and the outputs passed between its steps; `schema` prints the proposal schema
//! a planner must follow.

mod verify;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ari_crds::plan_view::{CrdHosts, agent_view};
use ari_crds::{Agent, Plan};
use ari_plan::{Agents, Limits, Proposal, Violation};
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Args)]
pub struct PlanArgs {
    #[command(subcommand)]
    command: PlanCommand,
}

#[derive(Subcommand)]
enum PlanCommand {
    Validate(ValidateArgs),
    Verify(verify::VerifyArgs),
    /// Print the JSON Schema of a plan proposal (what a planner Agent outputs).
    Schema,
}

/// Validate a Plan, or a planner's proposal, exactly as the operator would before running it:
/// every violation is listed with its step and rule. Exits 0 when the plan may run, 3 when not.
#[derive(Args)]
pub struct ValidateArgs {
    /// A Plan manifest (YAML or JSON), or a proposal (a planner's output, JSON).
    file: PathBuf,
    /// Agent manifests: files or directories of YAML or JSON, several documents each, or a
    /// List such as `kubectl get agents -o yaml` prints; other kinds are skipped. An Agent with a status counts as Ready only when its `Ready`
    /// condition is True; one without (a manifest never applied) counts as Ready.
    #[arg(long = "agents", required = true, value_name = "FILE")]
    agents: Vec<PathBuf>,
    /// For a Plan with a planner: the planner's output to validate against the Plan's limits.
    #[arg(long)]
    proposal: Option<PathBuf>,
    /// Print the verdict as JSON (`{"accepted": bool, "violations": [...]}`).
    #[arg(long)]
    json: bool,
}

pub fn plan(args: PlanArgs) -> anyhow::Result<u8> {
    match args.command {
        PlanCommand::Validate(args) => validate(args),
        PlanCommand::Verify(args) => verify::verify(args),
        PlanCommand::Schema => {
            print!("{}", ari_plan::schema::proposal_schema_text());
            Ok(0)
        }
    }
}

fn validate(args: ValidateArgs) -> anyhow::Result<u8> {
    let agents = read_agents(&args.agents)?;
    let doc = read_documents(&args.file)?
        .into_iter()
        .next()
        .with_context(|| format!("{} is empty", args.file.display()))?;
    let mut violations = Vec::new();
    let (name, plan_name, limits, proposal) =
        if doc.get("kind").and_then(Value::as_str) == Some("Plan") {
            let plan: Plan = serde_json::from_value(doc)
                .with_context(|| format!("{} is not a valid Plan", args.file.display()))?;
            let limits = plan.spec.limits.clone().unwrap_or_default();
            let ctx = context(&agents, &limits, plan.metadata.name.as_deref());
            let proposal = match (&plan.spec.steps, &plan.spec.planner, &args.proposal) {
                (Some(steps), _, _) => Proposal {
                    steps: steps.clone(),
                    ..Default::default()
                },
                (None, Some(planner), Some(path)) => {
                    violations.extend(ari_plan::validate_planner(&planner.agent_ref.name, &ctx));
                    read_proposal(path)?
                }
                (None, Some(planner), None) => {
                    violations.extend(ari_plan::validate_planner(&planner.agent_ref.name, &ctx));
                    return report(&plan_label(&plan), &violations, None, args.json);
                }
                (None, None, _) => bail!("the Plan has neither steps nor planner"),
            };
            (
                plan_label(&plan),
                plan.metadata.name.clone(),
                limits,
                proposal,
            )
        } else {
            let proposal: Proposal = serde_json::from_value(doc)
                .with_context(|| format!("{} is not a plan proposal", args.file.display()))?;
            ("proposal".to_owned(), None, Limits::default(), proposal)
        };
    violations.extend(ari_plan::validate(
        &proposal,
        &context(&agents, &limits, plan_name.as_deref()),
    ));
    report(&name, &violations, Some(proposal.steps.len()), args.json)
}

fn plan_label(plan: &Plan) -> String {
    format!(
        "plan {}",
        plan.metadata.name.as_deref().unwrap_or("(unnamed)")
    )
}

fn context<'a>(
    agents: &'a Agents,
    limits: &'a Limits,
    name: Option<&'a str>,
) -> ari_plan::Context<'a> {
    ari_plan::Context {
        agents,
        limits,
        hosts: &CrdHosts,
        plan_name: name,
    }
}

fn report(
    name: &str,
    violations: &[Violation],
    steps: Option<usize>,
    json: bool,
) -> anyhow::Result<u8> {
    let accepted = violations.is_empty() && steps.is_some();
    if json {
        let verdict = serde_json::json!({"accepted": accepted, "violations": violations});
        println!("{}", serde_json::to_string_pretty(&verdict)?);
    } else if accepted {
        println!("{name}: accepted ({} steps)", steps.unwrap_or_default());
    } else if violations.is_empty() {
        println!(
            "{name}: the planner may run; pass its output with --proposal to validate the steps"
        );
        return Ok(0);
    } else {
        println!("{name}: rejected, {} violation(s):", violations.len());
        for v in violations {
            println!("  {v}");
        }
    }
    Ok(if violations.is_empty() {
        0
    } else {
        super::EXIT_VERIFY_FAILED
    })
}

fn read_proposal(path: &Path) -> anyhow::Result<Proposal> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read proposal {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a plan proposal", path.display()))
}

/// The Agents of every file (or every `.yaml`, `.yml` and `.json` file of a directory), by
/// name; `List`s are opened.
fn read_agents(paths: &[PathBuf]) -> anyhow::Result<Agents> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot list {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                })
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.clone());
        }
    }
    let mut agents = Agents::new();
    for path in &files {
        let mut docs = read_documents(path)?;
        while let Some(doc) = docs.pop() {
            if let Some(items) = doc.get("items").and_then(Value::as_array) {
                docs.extend(items.iter().cloned());
                continue;
            }
            if doc.get("kind").and_then(Value::as_str) != Some("Agent") {
                continue;
            }
            let agent: Agent = serde_json::from_value(doc)
                .with_context(|| format!("{}: an Agent that does not decode", path.display()))?;
            let Some(name) = agent.metadata.name.clone() else {
                bail!("{}: an Agent without a name", path.display());
            };
            let mut view = agent_view(&agent);
            // A manifest never applied has no status: the author means it to be Ready.
            view.ready |= agent.status.is_none();
            agents.insert(name, view);
        }
    }
    Ok(agents)
}

/// Every YAML (or JSON) document of a file.
fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
