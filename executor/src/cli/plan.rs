//! `ari plan`: Plans without a cluster. `validate` judges a Plan (or a planner's proposal)
//! against Agent manifests with the operator's own validator; `verify` checks a finished Plan's
//! attestations and the outputs passed between its steps; `schema` prints the proposal schema
//! a planner must follow.

pub(crate) mod verify;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ari_crds::plan_view::agent_view;
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
    /// A Plan manifest (YAML or JSON; the first Plan of a file of several documents), or a
    /// proposal (a planner's output, JSON).
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

/// Largest file read: the API server takes no larger object (3 MiB), and a proposal is at most
/// [`ari_plan::MAX_PROPOSAL_BYTES`].
const MAX_FILE_BYTES: u64 = 3 << 20;

fn validate(args: ValidateArgs) -> anyhow::Result<u8> {
    let agents = read_agents(&args.agents)?;
    let bytes = read_bounded(&args.file)?;
    // A proposal (JSON) is read straight into its types, within its bound; a Plan as YAML.
    /// Only `kind`, read without keeping the rest.
    #[derive(serde::Deserialize)]
    struct Head {
        kind: Option<String>,
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && serde_json::from_slice::<Head>(&bytes)
            .map(|h| h.kind.is_none())
            .unwrap_or(true)
    {
        let limits = Limits::default();
        return match ari_plan::parse_proposal(&bytes) {
            Ok(proposal) => {
                drop(bytes);
                let violations =
                    ari_plan::validate(&proposal, &context(&agents, &limits, None, None));
                report(
                    "proposal",
                    &violations,
                    Some(proposal.steps.len()),
                    args.json,
                )
            }
            Err(ari_plan::Unreadable::TooLarge(v)) => report("proposal", &[v], None, args.json),
            Err(ari_plan::Unreadable::NotAProposal(e)) => {
                bail!("{} is not a plan proposal: {e}", args.file.display())
            }
        };
    }
    // The file's Plan: a manifest may hold the Agents and Secrets it needs beside it.
    let doc = documents(&bytes, &args.file)?
        .into_iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("Plan"))
        .with_context(|| format!("{} is neither a Plan nor a proposal", args.file.display()))?;
    drop(bytes);
    let plan: Plan = serde_json::from_value(doc)
        .with_context(|| format!("{} is not a valid Plan", args.file.display()))?;
    let limits = plan.spec.limits.clone().unwrap_or_default();
    let allowed = plan.spec.allowed_agents.as_deref();
    let name = plan.metadata.name.as_deref();
    let ctx = context(&agents, &limits, name, allowed);
    let label = plan_label(&plan);
    let mut violations = Vec::new();
    let proposal = match (&plan.spec.steps, &plan.spec.planner, &args.proposal) {
        (Some(steps), _, _) => Proposal {
            steps: steps.clone(),
            ..Default::default()
        },
        (None, Some(planner), Some(path)) => {
            violations.extend(ari_plan::validate_planner(&planner.agent_ref.name, &ctx));
            match read_proposal(path)? {
                Ok(p) => p,
                Err(v) => {
                    violations.push(v);
                    return report(&label, &violations, None, args.json);
                }
            }
        }
        (None, Some(planner), None) => {
            violations.extend(ari_plan::validate_planner(&planner.agent_ref.name, &ctx));
            return report(&label, &violations, None, args.json);
        }
        (None, None, _) => bail!("the Plan has neither steps nor planner"),
    };
    violations.extend(ari_plan::validate(&proposal, &ctx));
    report(&label, &violations, Some(proposal.steps.len()), args.json)
}

/// The bytes of `path`, refused unread when larger than [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if len > MAX_FILE_BYTES {
        bail!(
            "{} is {len} bytes, larger than any Plan the API server takes ({MAX_FILE_BYTES})",
            path.display()
        );
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
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
    allowed_agents: Option<&'a [String]>,
) -> ari_plan::Context<'a> {
    ari_plan::Context {
        agents,
        limits,
        plan_name: name,
        allowed_agents,
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

/// A planner's output: the proposal, or its one violation when over the size bound (not
/// read then).
fn read_proposal(path: &Path) -> anyhow::Result<Result<Proposal, Violation>> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("cannot read proposal {}", path.display()))?
        .len();
    if len > ari_plan::MAX_PROPOSAL_BYTES as u64 {
        return Ok(Err(ari_plan::bounds::too_large(
            usize::try_from(len).unwrap_or(usize::MAX),
        )));
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read proposal {}", path.display()))?;
    match ari_plan::parse_proposal(&bytes) {
        Ok(p) => Ok(Ok(p)),
        Err(ari_plan::Unreadable::TooLarge(v)) => Ok(Err(v)),
        Err(ari_plan::Unreadable::NotAProposal(e)) => {
            bail!("{} is not a plan proposal: {e}", path.display())
        }
    }
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
    documents(&read_bounded(path)?, path)
}

/// Every YAML (or JSON) document of `bytes`, read from `path`.
fn documents(bytes: &[u8], path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::str::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
