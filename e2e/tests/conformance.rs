//! The guest conformance suite in the cluster: each language's conformance agent pushed to a
//! real OCI registry (the CNCF distribution registry, `ARI_REGISTRY_BIN`, on 127.0.0.1) with
//! `ari push`, run as Agents with `spec.module.image` by tag, and every case of
//! `conformance/cases.json` run as a Task and judged by the same code as under `ari run`
//! (`ari_testkit::conformance`, shared with `executor/tests/conformance.rs`).
//!
//! **Agents and grants.** A case carries the grants it runs with, and a Task cannot narrow its
//! Agent's grants (requirements only check that they are there), so which Agent a case runs on
//! decides what it means. Two kinds of Agent, made from the table, not written down here:
//! - A case about something *absent* (no grants at all, an expected "not granted" message, or a
//!   requirement it does not grant) runs on an Agent with exactly its grants: here, the Agent
//!   with none, where every capability is refused as under `ari run` without `--grant`.
//! - Every other case runs on an Agent that grants, for each capability the case names, exactly
//!   the case's value (the same quota, key, hosts); cases share such an Agent unless they give
//!   one capability different values (`network={server}` and `network={closed}` do, so there
//!   are two). Capabilities a case does not name may be granted too: such a case calls only the
//!   host functions of the capabilities it names, so a grant it never uses cannot change its
//!   ending — which is why the cases about absence are kept apart.
//!
//! So 3 Agents per language instead of one per distinct grant set (7): Python and JavaScript
//! components are 12–18 MiB and each executor pod compiles its Agent's component once (tens of
//! seconds on 2 cores), so fewer Agents keep the suite in minutes. Each Task also declares the
//! case's grants as `spec.requirements.capabilities` (plus its `require`), so a case placed on
//! the wrong Agent fails at admission instead of passing by accident.
//!
//! **The rest of the mapping.** `storage=1KiB` → `storage.maxBytes: 1024`; `network=URL` →
//! `network.allowedHosts`; `signing={key}` → `signing` with a Secret (labelled
//! `ari.dev/signing-key=true`) holding the table's test key; the seed → `spec.seed`; a
//! language's `fuel`/`memory` → `spec.limits` (else the defaults, 10⁹ fuel and 64 MiB, which fit
//! the interpreters, docs/agents.md). The ending is `Succeeded` or the Task's `status.reason`,
//! the message `status.message`, the usage `status.resourcesUsed`, and the task log the
//! executor pod's JSON log lines of target `ari::guest` inside the span naming the Task.
//! The HTTP cases reach a real server the test starts on 127.0.0.1 (executor pods are host
//! processes, so it is reachable from them), and `{closed}` is a loopback port nothing listens
//! on. Tasks that ran must carry an attestation that verifies against their Agent.
//!
//! A language whose component is not built prints `SKIPPED <lang> cluster conformance suite: …`
//! on stderr and its trial passes, unless `ARI_CONFORMANCE_REQUIRE` names it; each language that
//! ran prints `<lang> cluster conformance: N of N cases passed`. Cases that need what this
//! runner cannot provide yet ([`UNMET_NEEDS`]: the model cases, whose model names map to several
//! endpoints) are left out, and each trial prints `SKIPPED N <lang> cluster conformance cases: …`
//! on stderr. The tools cases run against the official MCP Python SDK's server the runner starts,
//! each case's servers declared as MCPServers of the namespace (`tools=SERVER:TOOLS` →
//! `capabilities.tools.servers`).
//!
//! **Delegation.** A case's `agents` (the Agents its task may delegate to, each this language's
//! own component with its own grants) become Agents of those names in the namespace, granted
//! the union of what the cases give each (only `timeAccess` today, which no case relies on
//! being absent); the `delegation` grant maps to `capabilities.delegation`.
//!
//! Run: `cargo build --bins && scripts/build-agents.sh && scripts/build-guests.sh &&
//! ARI_REGISTRY_BIN="$(scripts/registry.sh --print)" cargo test -p ari-e2e --test conformance`.
use ari_testkit::conformance as suite;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use ari_crds::{Agent, Task, TaskPhase};
use ari_e2e::registry::{self, Registry, registry_bin};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use ari_testkit::mcp_server::{McpServer, Mode};
use serde_json::{Value, json};
use suite::{Case, EchoServer, Ending, Placeholders, Suite};

fn main() -> std::process::ExitCode {
    trials::run_phases(
        ConformanceCtx::start,
        vec![vec![
            (
                "the_rust_agent_from_the_registry_passes_every_case_in_the_cluster",
                |c| run_language(c, "rust"),
            ),
            (
                "the_python_agent_from_the_registry_passes_every_case_in_the_cluster",
                |c| run_language(c, "python"),
            ),
            (
                "the_javascript_agent_from_the_registry_passes_every_case_in_the_cluster",
                |c| run_language(c, "javascript"),
            ),
            (
                "the_c_agent_from_the_registry_passes_every_case_in_the_cluster",
                |c| run_language(c, "c"),
            ),
        ]],
    )
}

/// The name of the Secret that backs the signing grant, in every namespace of this suite.
const SIGNING_SECRET: &str = "conformance-key";
/// An executor pod compiles a 12–18 MiB interpreter component before it is Ready: tens of
/// seconds alone, longer beside the other languages' pods on 2 shared cores.
const AGENT_READY: Duration = Duration::from_secs(900);
/// Per Task, counted from when all are created: they queue behind each Agent's slots.
const TASK_FINISHED: Duration = Duration::from_secs(300);
/// A finished Task's log lines may reach the pod's log file a moment after its status.
const LOGS_SETTLED: Duration = Duration::from_secs(20);

/// What cases may need (their `needs`) that this runner cannot provide yet; such cases are
/// left out of every language's run, and each trial says how many. `delegation-cluster` is
/// met: the executor creates child Tasks. `tools-cluster` is met when the official MCP SDK is
/// installed (`ARI_MCP_PYTHON`, which `scripts/test.sh` sets): the runner starts its server and
/// declares each case's servers as MCPServers. `models-cluster` is not yet: the model cases map
/// one model name to several endpoints (`{models}/ok`, `/429`, `/500`, a closed port), and a
/// namespace's ModelConfig has one endpoint per name. `approvals-cluster` is not either: its
/// cases' calls wait for a person, and this runner has no one to reject them (the approval
/// trials of e2e/tests/{tools,delegation,network}.rs decide with `kubectl ari`).
const UNMET_NEEDS: &[&str] = &["models-cluster", "approvals-cluster"];
/// Met only with the MCP SDK's server running.
const TOOLS_CLUSTER: &str = "tools-cluster";

/// The cluster, the operator allowed plain HTTP to the registry, the registry, the HTTP server
/// of the cases, and the table (without the cases of [`UNMET_NEEDS`]).
struct ConformanceCtx {
    ctx: Ctx,
    registry: Registry,
    server: EchoServer,
    closed: String,
    suite: Suite,
    /// How many cases were left out, and the needs that left them out.
    skipped: (usize, BTreeSet<String>),
    /// The official MCP SDK's server the tools cases call (`{mcp}`), when installed.
    mcp: Option<McpServer>,
}

impl trials::Shared for ConformanceCtx {
    fn failure_context(&self) -> String {
        self.ctx.operator_logs()
    }
}

impl ConformanceCtx {
    fn start() -> Result<ConformanceCtx> {
        let mut suite = suite::load(&repo()).map_err(|e| anyhow!(e))?;
        let mcp = McpServer::installed()
            .map(|python| McpServer::start(&python, Mode::Stateless, None))
            .ok();
        let before = suite.cases.len();
        let mut unmet = BTreeSet::new();
        suite.cases.retain(|case| {
            let missing: Vec<&String> = case
                .needs
                .iter()
                .filter(|n| {
                    UNMET_NEEDS.contains(&n.as_str()) || (mcp.is_none() && *n == TOOLS_CLUSTER)
                })
                .collect();
            unmet.extend(missing.iter().map(|n| (*n).clone()));
            missing.is_empty()
        });
        let skipped = (before - suite.cases.len(), unmet);
        let bin = registry_bin()?;
        let ctx = Ctx::start()?;
        let registry = Registry::start(&bin, None)?;
        registry::install_operator(&ctx, &registry.host())?;
        Ok(ConformanceCtx {
            ctx,
            registry,
            server: EchoServer::start().map_err(|e| anyhow!(e))?,
            closed: suite::closed_port_url()?,
            suite,
            skipped,
            mcp,
        })
    }
}

/// One Agent's grants: capability name → its values (empty for `randomness`, `timeAccess`).
type Grants = BTreeMap<String, BTreeSet<String>>;

fn grants_of(filled: &[String]) -> Grants {
    let mut grants = Grants::new();
    for grant in filled {
        let (name, value) = grant.split_once('=').unwrap_or((grant.as_str(), ""));
        let values = grants.entry(name.trim().to_owned()).or_default();
        if !value.is_empty() {
            values.insert(value.trim().to_owned());
        }
    }
    grants
}

/// Whether the case is about a capability being absent, and so must run on an Agent with
/// exactly its grants.
fn about_absence(case: &Case, grants: &Grants) -> bool {
    grants.is_empty()
        || case
            .message
            .as_deref()
            .is_some_and(|m| m.contains("not granted"))
        || case.require.iter().any(|r| !grants.contains_key(r))
}

/// The Agents of the module (index into the returned list per case): see the file's comment.
fn place(cases: &[(Grants, bool)]) -> (Vec<Grants>, Vec<usize>) {
    let mut agents: Vec<(Grants, bool)> = Vec::new();
    let mut placed = Vec::new();
    for (grants, exact) in cases {
        let fits = |(agent, agent_exact): &(Grants, bool)| {
            if *exact || *agent_exact {
                *exact && *agent_exact && agent == grants
            } else {
                grants
                    .iter()
                    .all(|(name, values)| agent.get(name).is_none_or(|v| v == values))
            }
        };
        let i = match agents.iter().position(fits) {
            Some(i) => i,
            None => {
                agents.push((Grants::new(), *exact));
                agents.len() - 1
            }
        };
        for (name, values) in grants {
            agents[i].0.insert(name.clone(), values.clone());
        }
        placed.push(i);
    }
    (agents.into_iter().map(|(g, _)| g).collect(), placed)
}

/// `1024`, `1KiB`, `2MiB`, `1Gi`: bytes.
fn size(text: &str) -> Result<u64> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &text[digits.len()..] {
        "" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        other => bail!("unknown size unit {other:?} in {text:?}"),
    };
    let n: u64 = digits.parse().with_context(|| format!("size {text:?}"))?;
    n.checked_mul(unit).context("size overflows")
}

/// `spec.capabilities` for one Agent's grants.
fn capabilities(grants: &Grants) -> Result<Value> {
    let mut caps = serde_json::Map::new();
    for (name, values) in grants {
        let one = || match values.iter().collect::<Vec<_>>().as_slice() {
            [v] => Ok((*v).clone()),
            other => Err(anyhow!("{name} granted with {other:?}, not one value")),
        };
        let cap = match name.as_str() {
            "storage" => json!({ "maxBytes": size(&one()?)? }),
            "network" => json!({ "allowedHosts": values }),
            "randomness" | "timeAccess" => json!({}),
            // `AGENT[,AGENT…][;maxDepth=N][;maxChildren=N]`, as `ari run --grant`.
            "delegation" => {
                let value = one()?;
                let mut parts = value.split(';');
                let agents: Vec<&str> = parts
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .collect();
                let mut grant = json!({ "agents": agents });
                for option in parts {
                    let (key, n) = option
                        .split_once('=')
                        .with_context(|| format!("delegation option {option:?}"))?;
                    let n: u32 = n.trim().parse().with_context(|| format!("{option:?}"))?;
                    grant[key.trim()] = json!(n);
                }
                grant
            }
            "signing" => json!({
                "keyId": "conformance",
                "secretRef": { "name": one()?, "key": "private-key" },
            }),
            // `SERVER:TOOL[,TOOL…]` per server, as `ari run --grant tools=`.
            "tools" => {
                let mut servers = Vec::new();
                for value in values {
                    let (server, tools) = value
                        .split_once(':')
                        .with_context(|| format!("tools grant {value:?}"))?;
                    let tools: Vec<&str> = tools.split(',').map(str::trim).collect();
                    servers.push(json!({ "name": server.trim(), "tools": tools }));
                }
                json!({ "servers": servers })
            }
            other => bail!("grant {other:?} has no Agent form in this suite"),
        };
        caps.insert(name.clone(), cap);
    }
    Ok(Value::Object(caps))
}

/// Runs every case of `lang` in a namespace of its own; the trial fails listing each case that
/// ended otherwise than the table says.
fn run_language(c: &ConformanceCtx, lang: &str) -> Result<()> {
    let suite = &c.suite;
    let language = suite
        .languages
        .get(lang)
        .with_context(|| format!("conformance/cases.json has no language {lang}"))?;
    let path = ari_e2e::target_dir()
        .join("agents")
        .join(&language.component);
    let Some(component) =
        suite::built_or_skipped(lang, language, path, "cluster conformance suite")
            .map_err(|e| anyhow!(e))?
    else {
        return Ok(());
    };
    let (skipped, needs) = &c.skipped;
    if *skipped > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {skipped} {lang} cluster conformance cases: they need {needs:?}, which this \
             runner does not provide yet (UNMET_NEEDS in e2e/tests/conformance.rs)"
        );
    }
    let ctx = &c.ctx;
    ctx.in_namespace(&format!("conformance-{lang}"), |client, ns| async move {
        // From the registry, by tag: the operator resolves it, executors pull the digest.
        let repo = format!("{}/conformance/{lang}", c.registry.host());
        let pinned = registry::ari_push(&component, &format!("{repo}:v1"), None)?;
        let manifest = registry::digest_of(&pinned)?;
        ctx.kubectl_ok([
            "create",
            "secret",
            "generic",
            SIGNING_SECRET,
            "-n",
            &ns,
            &format!("--from-literal=private-key={}", suite.signing_key),
        ])?;
        ctx.kubectl_ok([
            "label",
            "secret",
            SIGNING_SECRET,
            "-n",
            &ns,
            "ari.dev/signing-key=true",
        ])?;
        let places = Placeholders {
            server: c.server.base.clone(),
            closed: c.closed.clone(),
            key: SIGNING_SECRET.to_owned(),
            public_key: suite.public_key.clone(),
        };
        // The cases' MCP servers, declared once for the namespace (one URL per name).
        let mcp_url = c.mcp.as_ref().map(McpServer::url).unwrap_or_default();
        let mut servers: BTreeMap<String, String> = BTreeMap::new();
        for case in &suite.cases {
            for (name, url) in &case.mcp {
                let url = places.fill(url).replace("{mcp}", &mcp_url);
                if let Some(other) = servers.insert(name.clone(), url.clone())
                    && other != url
                {
                    bail!("MCP server {name} is {other} in one case and {url} in another");
                }
            }
        }
        for (name, url) in &servers {
            let server = json!({
                "apiVersion": "ari.dev/v1alpha1",
                "kind": "MCPServer",
                "metadata": { "name": name },
                "spec": { "url": url },
            });
            ctx.apply_ok(&ns, &server.to_string())?;
        }

        let per_case: Vec<(Grants, bool)> = suite
            .cases
            .iter()
            .map(|case| {
                let filled: Vec<String> = case.grants.iter().map(|g| places.fill(g)).collect();
                let grants = grants_of(&filled);
                let exact = about_absence(case, &grants);
                (grants, exact)
            })
            .collect();
        let (agents, placed) = place(&per_case);
        let mut limits = serde_json::Map::new();
        if let Some(fuel) = language.fuel {
            limits.insert("fuel".into(), json!(fuel));
        }
        if let Some(memory) = &language.memory {
            limits.insert("memoryBytes".into(), json!(size(memory)?));
        }
        for (i, grants) in agents.iter().enumerate() {
            let agent = json!({
                "apiVersion": "ari.dev/v1alpha1",
                "kind": "Agent",
                "metadata": { "name": format!("conformance-{i}") },
                "spec": {
                    "module": { "image": format!("{repo}:v1") },
                    "capabilities": capabilities(grants)?,
                    "limits": limits,
                    "executor": { "replicas": 1, "concurrency": 4 },
                },
            });
            ctx.apply_ok(&ns, &agent.to_string())?;
        }
        // The Agents the cases delegate to, by the names the cases use.
        let mut delegates: BTreeMap<String, Grants> = BTreeMap::new();
        for case in &suite.cases {
            for (name, grants) in &case.agents {
                let filled: Vec<String> = grants.iter().map(|g| places.fill(g)).collect();
                delegates
                    .entry(name.clone())
                    .or_default()
                    .extend(grants_of(&filled));
            }
        }
        for (name, grants) in &delegates {
            let agent = json!({
                "apiVersion": "ari.dev/v1alpha1",
                "kind": "Agent",
                "metadata": { "name": name },
                "spec": {
                    "module": { "image": format!("{repo}:v1") },
                    "capabilities": capabilities(grants)?,
                    "limits": limits,
                    "executor": { "replicas": 1, "concurrency": 4 },
                },
            });
            ctx.apply_ok(&ns, &agent.to_string())?;
        }
        for name in delegates.keys() {
            agent_ready_within(&client, &ns, name, AGENT_READY).await?;
        }
        let mut ready = BTreeMap::new();
        for i in 0..agents.len() {
            let name = format!("conformance-{i}");
            let agent = agent_ready_within(&client, &ns, &name, AGENT_READY).await?;
            let pinned_image = agent.status.as_ref().and_then(|s| s.module_image.clone());
            ensure!(
                pinned_image.as_deref() == Some(format!("{repo}@{manifest}").as_str()),
                "Agent {name} runs {pinned_image:?}, not the pushed {repo}@{manifest}"
            );
            ready.insert(i, agent);
        }

        // All Tasks first, then each awaited: they run side by side on the Agents' slots.
        for (n, case) in suite.cases.iter().enumerate() {
            let mut needs: BTreeSet<String> = per_case[n].0.keys().cloned().collect();
            needs.extend(case.require.iter().cloned());
            let task = json!({
                "apiVersion": "ari.dev/v1alpha1",
                "kind": "Task",
                "metadata": { "name": format!("case-{n:02}") },
                "spec": {
                    "agentRef": { "name": format!("conformance-{}", placed[n]) },
                    "input": places.fill(&case.input),
                    "seed": case.seed.as_deref().unwrap_or(&suite.default_seed),
                    "requirements": { "capabilities": needs },
                },
            });
            ctx.apply_ok(&ns, &task.to_string())?;
        }
        let mut failures = Vec::new();
        for (n, case) in suite.cases.iter().enumerate() {
            let name = format!("case-{n:02}");
            let task = task_finished(&client, &ns, &name, TASK_FINISHED).await?;
            let agent = &ready[&placed[n]];
            if let Err(why) = judge(ctx, &ns, case, &task, agent).await {
                failures.push(format!("  {name} {}: {why}", case.name));
            }
        }
        let passed = suite.cases.len() - failures.len();
        let _ = writeln!(
            std::io::stderr(),
            "{lang} cluster conformance: {passed} of {} cases passed ({} Agents, image {pinned})",
            suite.cases.len(),
            agents.len()
        );
        ensure!(
            failures.is_empty(),
            "{lang} cluster conformance: {} of {} cases failed:\n{}",
            failures.len(),
            suite.cases.len(),
            failures.join("\n")
        );
        Ok(())
    })
}

/// Checks a finished Task against its case (the log, which trails the status, is read again
/// until it matches or [`LOGS_SETTLED`] passes), and its attestation if it ran.
async fn judge(ctx: &Ctx, ns: &str, case: &Case, task: &Task, agent: &Agent) -> Result<()> {
    let status = task.status.clone().unwrap_or_default();
    let name = kube::ResourceExt::name_any(task);
    let base = Ending {
        end: match (status.phase, status.reason) {
            (Some(TaskPhase::Succeeded), _) => "Succeeded".to_owned(),
            (_, Some(reason)) => reason.as_str().to_owned(),
            (phase, None) => format!("{phase:?} without a reason"),
        },
        message: status.message.clone().unwrap_or_default(),
        // A Task that succeeded with no output has no `output` field at all (its digest is the
        // empty string's): as `ari run` prints it, that is the empty output.
        output: status.output.clone().or_else(|| {
            (status.phase == Some(TaskPhase::Succeeded)
                && status.output_base64.is_none()
                && status.output_ref.is_none())
            .then(String::new)
        }),
        other_output: status
            .output_base64
            .clone()
            .or_else(|| status.output_ref.as_ref().map(|r| format!("{r:?}"))),
        logs: Vec::new(),
        usage: serde_json::to_value(status.resources_used)?
            .as_object()
            .map(|u| {
                u.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let pod = status.executor.clone();
    wait::until(
        &format!("Task {name} as its case says"),
        LOGS_SETTLED,
        || {
            let logs = pod
                .as_deref()
                .map(|p| guest_logs(&ctx.node.logs(ns, p, "executor"), &name))
                .unwrap_or_default();
            let ending = Ending {
                logs,
                ..base.clone()
            };
            async move { suite::check(case, &ending) }
        },
    )
    .await
    .map_err(|e| anyhow!("{e}"))?;
    if status.attestation.is_some() {
        verify_attestation(task, agent)?;
    }
    Ok(())
}

/// The guest's log lines for Task `task` in an executor's JSON log, as `LEVEL message`.
fn guest_logs(log: &str, task: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|l| l["target"] == "ari::guest" && l["span"]["task"] == task)
        .map(|l| {
            format!(
                "{} {}",
                l["level"].as_str().unwrap_or("?"),
                l["fields"]["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}
