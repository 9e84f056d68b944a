//! `kubectl ari verify task/NAME | plan/NAME` (also `ari verify task/NAME`): checks what the
//! cluster keeps of a run, whole, against the key the namespace's Agents publish.
//!
//! A Task is checked with every Task under it: each one's attestation must be signed by its
//! Agent's key and name that Task, its output, ending, module and config; each child's must be
//! the very envelope its parent's attestation signs (by digest), so no Task made later under a
//! child's name passes for it; and each Task that kept its trace is replayed locally, its
//! module fetched by the attested digest (from the Agent's ConfigMap, URL or image, or a file
//! given with `--agent`). A Plan is checked as `ari plan verify` checks one offline (each step's
//! Task is the one the Plan recorded, its input what its dependencies' outputs make), and each
//! step's Task then as a tree. Exit 0 when everything holds, 3 at the first thing that does not.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use anyhow::Context as _;
use ari_crds::plan_view::LABEL_PLAN_UID;
use ari_crds::{Agent, ModuleSource, Plan, Task};
use ari_runtime::attestation::sha256_hex;
use ari_runtime::model::attestation::ChildAttestation;
use base64::Engine as _;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use super::{Format, print};
use crate::cli::EXIT_VERIFY_FAILED;

/// Most bytes of trace JSON a kept trace may expand to.
const MAX_TRACE_JSON: u64 = 256 << 20;
/// Most Tasks one verification visits: a delegation tree is bounded by its grants (64
/// children a Task), but a verifier must not follow an unbounded walk either.
const MAX_TASKS: usize = 4096;

#[derive(Args)]
pub(super) struct VerifyArgs {
    /// `task/NAME` (or NAME) or `plan/NAME`.
    target: String,
    /// The root Task's component, for an Agent whose module the cluster cannot hand over
    /// (its digest must be the attested one).
    #[arg(long)]
    module: Option<PathBuf>,
    /// The component of an Agent of the tree or Plan: NAME=FILE (repeatable). Without it an
    /// Agent's module is read from its ConfigMap, downloaded from its URL or pulled by the
    /// digest its status pins, and checked against the attested digest.
    #[arg(long = "agent", value_name = "NAME=FILE")]
    agents: Vec<String>,
    /// A docker config holding credentials for pulling `module.image` components.
    #[arg(long, env = "ARI_DOCKER_CONFIG")]
    docker_config: Option<PathBuf>,
    #[arg(short = 'o', long)]
    output: Option<Format>,
}

/// What `target` names.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    Task(&'a str),
    Plan(&'a str),
}

fn target(arg: &str) -> anyhow::Result<Target<'_>> {
    let t = match arg.split_once('/') {
        Some(("plan" | "plans" | "plan.ari.dev" | "plans.ari.dev", name)) => Target::Plan(name),
        _ => Target::Task(super::task_name(arg)?),
    };
    if matches!(t, Target::Plan("")) {
        anyhow::bail!("{arg:?}: no Plan name");
    }
    Ok(t)
}

/// How a replay from the cluster came out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Replay {
    /// Same output, same trace consumed, same ending.
    Matched,
    /// Nothing to replay from, and why.
    Skipped(String),
    /// The replay, or what it needs, differs from what was attested: the first difference.
    Differs(String),
}

/// What checking one Task found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Checked {
    task: String,
    agent: String,
    /// 0 for the root (or a Plan's step), 1 for its children, ...
    depth: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    attestation_sha256: Option<String>,
    verified: bool,
    /// How it was replayed, or why it was not.
    #[serde(skip_serializing_if = "String::is_empty")]
    replay: String,
    /// Why it is not verified.
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
}

impl Checked {
    fn line(&self) -> String {
        let indent = "  ".repeat(self.depth);
        match (self.verified, &self.attestation_sha256) {
            (true, Some(d)) => format!(
                "{indent}task/{} ({}): attestation {d} verified; {}",
                self.task, self.agent, self.replay
            ),
            // A Task of items: each line's own envelope was checked (docs/items.md).
            (true, None) => format!(
                "{indent}task/{} ({}): verified: {}",
                self.task, self.agent, self.replay
            ),
            _ => format!(
                "{indent}task/{} ({}): NOT verified: {}",
                self.task, self.agent, self.reason
            ),
        }
    }
}

pub(super) async fn verify(client: Client, ns: &str, args: &VerifyArgs) -> anyhow::Result<u8> {
    let mut verifier = Verifier::new(client, ns, args)?;
    let (checked, plan_lines) = match target(&args.target)? {
        Target::Task(name) => (verifier.tree(name, None, 0).await?, Vec::new()),
        Target::Plan(name) => verifier.plan(name).await?,
    };
    let ok = !checked.is_empty()
        && checked.iter().all(|c| c.verified)
        && plan_lines.iter().all(|(ok, _)| *ok);
    if let Some(format) = args.output {
        let plan: Vec<_> = plan_lines
            .iter()
            .map(|(ok, l)| serde_json::json!({"verified": ok, "check": l}))
            .collect();
        // For a Task, its own attestation's digest, as for a single run.
        let root = checked.first().filter(|_| plan_lines.is_empty());
        let digest = root.and_then(|c| c.attestation_sha256.clone());
        let report = serde_json::json!({"target": args.target, "verified": ok,
            "attestationSha256": digest, "tasks": checked, "plan": plan});
        print(&report, format)?;
    }
    for (_, line) in &plan_lines {
        eprintln!("{line}");
    }
    for c in &checked {
        eprintln!("{}", c.line());
    }
    let failed = checked.iter().filter(|c| !c.verified).count();
    if ok {
        eprintln!(
            "{}: verified: {} Task(s), every one signed by the key its Agent publishes",
            args.target,
            checked.len()
        );
        Ok(0)
    } else {
        eprintln!(
            "{}: NOT verified: {failed} of {} Task(s) failed",
            args.target,
            checked.len()
        );
        Ok(EXIT_VERIFY_FAILED)
    }
}

/// Walks Tasks, fetching each Agent and module once.
struct Verifier {
    client: Client,
    tasks: Api<Task>,
    cms: Api<ConfigMap>,
    agents: BTreeMap<String, Option<Agent>>,
    /// Components by attested digest: fetched or read once each.
    modules: BTreeMap<String, Vec<u8>>,
    /// `--agent NAME=FILE`, and `--module` for the root Task's Agent (under "").
    files: BTreeMap<String, PathBuf>,
    docker_config: Option<PathBuf>,
    runtime: Option<ari_runtime::Runtime>,
}

impl Verifier {
    fn new(client: Client, ns: &str, args: &VerifyArgs) -> anyhow::Result<Self> {
        let mut files: BTreeMap<String, PathBuf> =
            crate::cli::flags::pairs("--agent", &args.agents)?
                .into_iter()
                .map(|(name, path)| (name, PathBuf::from(path)))
                .collect();
        if let Some(m) = &args.module {
            files.insert(String::new(), m.clone());
        }
        Ok(Self {
            tasks: Api::namespaced(client.clone(), ns),
            cms: Api::namespaced(client.clone(), ns),
            client,
            agents: BTreeMap::new(),
            modules: BTreeMap::new(),
            files,
            docker_config: args.docker_config.clone(),
            runtime: None,
        })
    }

    /// The Task `root` and every Task under it, breadth first; `want` is the digest its
    /// parent (or Plan) recorded for its attestation.
    async fn tree(
        &mut self,
        root: &str,
        want: Option<String>,
        depth: usize,
    ) -> anyhow::Result<Vec<Checked>> {
        let mut queue = VecDeque::from([(root.to_owned(), want, depth)]);
        let mut out = Vec::new();
        while let Some((name, want, depth)) = queue.pop_front() {
            if out.len() == MAX_TASKS {
                out.push(failed(
                    &name,
                    "-",
                    depth,
                    format!("more than {MAX_TASKS} Tasks: not followed"),
                ));
                break;
            }
            let (checked, children) = self.one(&name, want.as_deref(), depth, depth == 0).await?;
            out.push(checked);
            queue.extend(
                children
                    .into_iter()
                    .map(|c| (c.task, Some(c.attestation_sha256), depth + 1)),
            );
        }
        Ok(out)
    }

    /// Checks one Task; the children its attestation signs, to check next.
    async fn one(
        &mut self,
        name: &str,
        want: Option<&str>,
        depth: usize,
        root: bool,
    ) -> anyhow::Result<(Checked, Vec<ChildAttestation>)> {
        let Some(task) = self.tasks.get_opt(name).await? else {
            return Ok((failed(name, "-", depth, "no such Task".into()), Vec::new()));
        };
        let agent_name = task.spec.agent_ref.name.clone();
        let Some(agent) = self.agent(&agent_name).await? else {
            let why = format!("its Agent {agent_name} is gone: no key to check against");
            return Ok((failed(name, &agent_name, depth, why), Vec::new()));
        };
        if task.spec.items.is_some() {
            let checked = match self.items(&task, &agent).await? {
                Ok(replay) => Checked {
                    task: name.to_owned(),
                    agent: agent_name,
                    depth,
                    attestation_sha256: None,
                    verified: true,
                    replay,
                    reason: String::new(),
                },
                Err(why) => failed(name, &agent_name, depth, why),
            };
            return Ok((checked, Vec::new()));
        }
        let verified = match ari_crds::verify::attestation(&task, &agent) {
            Ok(v) => v,
            Err(why) => {
                return Ok((
                    failed(name, &agent_name, depth, why.to_string()),
                    Vec::new(),
                ));
            }
        };
        let digest = verified.envelope.sha256();
        if let Some(want) = want.filter(|w| *w != digest) {
            let why = format!(
                "its attestation {digest} is not the {want} its parent's attestation signs"
            );
            return Ok((failed(name, &agent_name, depth, why), Vec::new()));
        }
        let children = verified.run.children.clone();
        let replay = match self.replay(&task, &agent, &verified, root).await? {
            Replay::Matched => "replayed: same output, trace and ending".to_owned(),
            Replay::Skipped(why) => format!("not replayed: {why}"),
            Replay::Differs(why) => {
                let why = format!("replay differs: {why}");
                return Ok((failed(name, &agent_name, depth, why), Vec::new()));
            }
        };
        let checked = Checked {
            task: name.to_owned(),
            agent: agent_name,
            depth,
            attestation_sha256: Some(digest),
            verified: true,
            replay,
            reason: String::new(),
        };
        Ok((checked, children))
    }

    /// A Task of items (docs/items.md): its results document is the one `outputSha256` names,
    /// has a line per item, and every line's own attestation verifies. `Ok(Err(why))` when it
    /// does not; `Err` only when the cluster cannot be asked.
    async fn items(&self, task: &Task, agent: &Agent) -> anyhow::Result<Result<String, String>> {
        let status = task.status.clone().unwrap_or_default();
        if !task.is_finished() {
            return Ok(Err("the Task has not ended".into()));
        }
        let doc = task_output(&self.cms, &status).await?;
        let digest = ari_crds::items::sha256_hex(&doc);
        if status.output_sha256.as_deref() != Some(digest.as_str()) {
            return Ok(Err(format!(
                "its results document's digest {digest} is not status.outputSha256 {:?}",
                status.output_sha256
            )));
        }
        let lines = match ari_crds::items::parse_results(&doc) {
            Ok(lines) => lines,
            Err(e) => return Ok(Err(format!("its results document does not parse: {e}"))),
        };
        let want = task.spec.items.as_ref().map_or(0, Vec::len);
        if lines.len() != want {
            return Ok(Err(format!(
                "{} result lines for {want} items",
                lines.len()
            )));
        }
        for line in &lines {
            if let Err(why) = ari_crds::verify::item(task, agent, line) {
                return Ok(Err(format!("item {}: {why}", line.index)));
            }
        }
        Ok(Ok(format!(
            "{want} items, each line signed by the key its Agent publishes; not replayed: \
             items keep no trace"
        )))
    }

    async fn agent(&mut self, name: &str) -> anyhow::Result<Option<Agent>> {
        if !self.agents.contains_key(name) {
            let api: Api<Agent> = Api::namespaced(self.client.clone(), self.tasks_namespace());
            let agent = api.get_opt(name).await?;
            self.agents.insert(name.to_owned(), agent);
        }
        Ok(self.agents.get(name).cloned().flatten())
    }

    fn tasks_namespace(&self) -> &str {
        self.tasks.namespace().unwrap_or("default")
    }

    /// Replays `task` locally from its kept trace. `Err` only when the cluster cannot be asked.
    async fn replay(
        &mut self,
        task: &Task,
        agent: &Agent,
        verified: &ari_crds::verify::Verified<'_>,
        root: bool,
    ) -> anyhow::Result<Replay> {
        let status = task.status.clone().unwrap_or_default();
        let (cm, key) = match &status.trace_ref {
            None => {
                return Ok(Replay::Skipped(
                    "the Task kept no trace (spec.trace: Keep)".into(),
                ));
            }
            Some(r) => match (&r.config_map, &r.key) {
                (Some(cm), Some(key)) => (cm.clone(), key.clone()),
                _ => {
                    let why = r
                        .not_kept
                        .clone()
                        .unwrap_or_else(|| "no ConfigMap named".into());
                    return Ok(Replay::Skipped(format!("the trace was not kept: {why}")));
                }
            },
        };
        let Some(gz) = configmap_bytes_opt(&self.cms, &cm, &key).await? else {
            let why = format!("the kept trace (ConfigMap {cm}) is gone");
            return Ok(Replay::Differs(why));
        };
        let trace = match ari_runtime::Trace::from_gzip(&gz, MAX_TRACE_JSON) {
            Ok(t) => t,
            Err(e) => {
                let why = format!("the kept trace cannot be read: {e}");
                return Ok(Replay::Differs(why));
            }
        };
        let module = match self
            .module(agent, &verified.run.module_sha256, root)
            .await?
        {
            Ok(Some(m)) => m,
            Ok(None) => {
                let name = agent.name_any();
                let why =
                    format!("no component for Agent {name}: give it with --agent {name}=FILE");
                return Ok(Replay::Skipped(why));
            }
            Err(why) => return Ok(Replay::Differs(why)),
        };
        let report = self.report(task, verified, trace).await?;
        let key = agent
            .status
            .as_ref()
            .and_then(|s| s.attestation_public_key.clone())
            .unwrap_or_default();
        let opts = ari_runtime::VerifyOptions {
            trusted_key: Some(ari_runtime::model::attestation::parse_public_key(&key)?),
            accept_embedded_key: false,
            signing: None,
            config: self.agent_config(agent).await?,
        };
        let runtime = match &self.runtime {
            Some(r) => r.clone(),
            None => {
                // Compiled components are cached on disk by digest, as `ari run` caches them:
                // a tree of one Agent's children compiles its module once.
                let config = ari_runtime::RuntimeConfig {
                    cache_dir: ari_runtime::cache::ArtifactCache::default_dir(),
                    ..Default::default()
                };
                let r = ari_runtime::Runtime::new(config)?;
                self.runtime = Some(r.clone());
                r
            }
        };
        Ok(tokio::task::spawn_blocking(move || {
            match ari_runtime::verify_report(&runtime, &report, &module, &opts) {
                Ok(_) => Replay::Matched,
                Err(e) => Replay::Differs(e.to_string()),
            }
        })
        .await?)
    }

    /// The report a local run would have written, from what the cluster keeps.
    async fn report(
        &self,
        task: &Task,
        verified: &ari_crds::verify::Verified<'_>,
        trace: ari_runtime::Trace,
    ) -> anyhow::Result<ari_runtime::RunReport> {
        let att = &verified.run;
        let status = task.status.clone().unwrap_or_default();
        let input = task_input(&self.client, self.tasks_namespace(), task).await?;
        let output = task_output(&self.cms, &status).await?;
        let error = att
            .ending
            .failure_kind()
            .map_err(anyhow::Error::msg)?
            .map(|kind| {
                ari_runtime::model::Failure::new(kind, status.message.clone().unwrap_or_default())
            });
        let (input, input_base64) = text_or_base64(input);
        let (output, output_base64) = text_or_base64(output);
        Ok(ari_runtime::RunReport {
            task_id: att.task.name.clone(),
            input,
            input_base64,
            requirements: att.requirements.clone(),
            output,
            output_base64,
            output_sha256: att.output_sha256.clone(),
            resources_used: att.resources_used,
            limits_applied: att.limits_applied.clone(),
            models: att.models.clone(),
            attestation: verified.envelope.clone(),
            trace,
            error,
            logs: Vec::new(),
            agent: None,
            children: Vec::new(),
        })
    }

    /// The component with hex digest `sha256`, for `agent`: a file given for it, else from
    /// wherever the Agent takes it. `None` when the cluster cannot hand it over; `Err` inside
    /// when what it hands over is another component.
    async fn module(
        &mut self,
        agent: &Agent,
        sha256: &str,
        root: bool,
    ) -> anyhow::Result<Result<Option<Vec<u8>>, String>> {
        if let Some(m) = self.modules.get(sha256) {
            return Ok(Ok(Some(m.clone())));
        }
        let name = agent.name_any();
        let file = self
            .files
            .get(&name)
            .or_else(|| root.then(|| self.files.get("")).flatten());
        let bytes = match file {
            Some(path) => Some(crate::cli::read_module(path)?),
            None => self.fetch(agent).await?,
        };
        let Some(bytes) = bytes else {
            return Ok(Ok(None));
        };
        let got = sha256_hex(&bytes);
        if got != sha256 {
            return Ok(Err(format!(
                "the component for Agent {name} has digest {got}, not the attested {sha256}"
            )));
        }
        self.modules.insert(sha256.to_owned(), bytes.clone());
        Ok(Ok(Some(bytes)))
    }

    /// What the Agent's tasks hand `initialize`: `spec.config`, or a declarative Agent's
    /// declaration with its system prompt read as the executor reads it.
    async fn agent_config(&self, agent: &Agent) -> anyhow::Result<Vec<u8>> {
        let Some(d) = &agent.spec.declarative else {
            return Ok(agent.spec.config.clone().unwrap_or_default().into_bytes());
        };
        let text = match &d.instructions_from {
            Some(r) => Some(
                String::from_utf8(configmap_bytes(&self.cms, &r.name, &r.key).await?)
                    .with_context(|| format!("ConfigMap {} key {}: not UTF-8", r.name, r.key))?,
            ),
            None => None,
        };
        Ok(d.resolved(text)?.canonical_bytes())
    }

    /// The Agent's component from its source: ConfigMap, URL (https) or its pinned image (a
    /// declarative Agent's, the stock component, comes from `--agent NAME=FILE`).
    async fn fetch(&self, agent: &Agent) -> anyhow::Result<Option<Vec<u8>>> {
        let ModuleSource {
            config_map, url, ..
        } = &agent.spec.module;
        if let Some(m) = config_map {
            return Ok(Some(configmap_bytes(&self.cms, &m.name, &m.key).await?));
        }
        if let Some(url) = url {
            let bytes = crate::worker::module::fetch_url(
                url.clone(),
                crate::worker::module::Scheme::HttpsOnly,
            )
            .await?;
            return Ok(Some(bytes));
        }
        let pinned = agent.status.as_ref().and_then(|s| s.module_image.clone());
        match pinned {
            Some(image) => Ok(Some(pull(&image, self.docker_config.as_deref()).await?)),
            None => Ok(None),
        }
    }

    /// The Plan's own checks (as `ari plan verify` makes them), then each step's Task as a tree.
    async fn plan(&mut self, name: &str) -> anyhow::Result<(Vec<Checked>, Vec<(bool, String)>)> {
        let plans: Api<Plan> = Api::namespaced(self.client.clone(), self.tasks_namespace());
        let plan = plans.get(name).await?;
        let uid = plan.uid().unwrap_or_default();
        let listed = self
            .tasks
            .list(&ListParams::default().labels(&format!("{LABEL_PLAN_UID}={uid}")))
            .await?;
        let tasks: BTreeMap<String, Task> = listed.into_iter().map(|t| (t.name_any(), t)).collect();
        let mut digests = BTreeMap::new();
        let mut key = None;
        for t in tasks.values() {
            if let Some(a) = self.agent(&t.spec.agent_ref.name).await? {
                let status = a.status.clone().unwrap_or_default();
                if let Some(d) = status.module_digest {
                    digests.insert(a.name_any(), d);
                }
                key = key.or(status.attestation_public_key);
            }
        }
        let Some(key) = key else {
            return Ok((
                Vec::new(),
                vec![(
                    false,
                    format!("plan/{name}: no Agent of its Tasks publishes a key"),
                )],
            ));
        };
        let key = ari_runtime::model::attestation::parse_public_key(&key)?;
        let verdict = crate::cli::plan::verify::check_plan(&plan, &tasks, &key, Some(&digests));
        let mut lines: Vec<(bool, String)> = verdict
            .checked
            .into_iter()
            .map(|l| (true, format!("plan/{name}: {l}")))
            .collect();
        lines.extend(
            verdict
                .failures
                .into_iter()
                .map(|l| (false, format!("plan/{name}: {l}"))),
        );
        let mut checked = Vec::new();
        let steps = plan.status.clone().unwrap_or_default().steps;
        for st in steps.iter().filter(|s| s.attestation_sha256.is_some()) {
            if let Some(task) = &st.task {
                checked.extend(self.tree(task, st.attestation_sha256.clone(), 0).await?);
            }
        }
        if checked.is_empty() && lines.is_empty() {
            lines.push((false, format!("plan/{name}: no step has run")));
        }
        Ok((checked, lines))
    }
}

fn failed(task: &str, agent: &str, depth: usize, reason: String) -> Checked {
    Checked {
        task: task.to_owned(),
        agent: agent.to_owned(),
        depth,
        attestation_sha256: None,
        verified: false,
        replay: String::new(),
        reason,
    }
}

/// Pulls the pinned `image` as `ari push` talks to registries.
async fn pull(image: &str, docker_config: Option<&std::path::Path>) -> anyhow::Result<Vec<u8>> {
    let reference = ari_oci::Reference::parse(image)?;
    let (client, credentials) = crate::cli::push::registry_client(&reference, docker_config)?;
    let dir = tempfile::tempdir()?;
    let cache = ari_oci::ModuleCache::new(dir.path())?;
    Ok(client.pull(&reference, &credentials, &cache).await?.bytes)
}

/// [`configmap_bytes`], or `None` when the ConfigMap is gone (one read either way).
async fn configmap_bytes_opt(
    cms: &Api<ConfigMap>,
    name: &str,
    key: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    cms.get_opt(name)
        .await
        .with_context(|| format!("ConfigMap {name}"))?
        .map(|cm| key_bytes(cm, name, key))
        .transpose()
}

/// `binaryData[key]` (or `data[key]`) of the ConfigMap `name`.
async fn configmap_bytes(cms: &Api<ConfigMap>, name: &str, key: &str) -> anyhow::Result<Vec<u8>> {
    let cm = cms
        .get(name)
        .await
        .with_context(|| format!("ConfigMap {name}"))?;
    key_bytes(cm, name, key)
}

/// `binaryData[key]` (or `data[key]`) of `cm`, named `name`.
fn key_bytes(cm: ConfigMap, name: &str, key: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(b) = cm.binary_data.and_then(|mut d| d.remove(key)) {
        return Ok(b.0);
    }
    cm.data
        .and_then(|mut d| d.remove(key))
        .map(String::into_bytes)
        .with_context(|| format!("ConfigMap {name} has no key {key}"))
}

/// The Task's input bytes, from wherever its spec takes them.
async fn task_input(client: &Client, ns: &str, task: &Task) -> anyhow::Result<Vec<u8>> {
    use ari_crds::InputSource;
    Ok(match task.input_source()? {
        InputSource::Inline(text) => text.as_bytes().to_vec(),
        InputSource::Base64(b64) => base64::engine::general_purpose::STANDARD.decode(b64)?,
        InputSource::Items(_) => {
            anyhow::bail!("a Task of items has one input per item; see docs/items.md")
        }
        InputSource::ConfigMap(r) => {
            configmap_bytes(&Api::namespaced(client.clone(), ns), &r.name, &r.key).await?
        }
        InputSource::Secret(r) => {
            let secret: k8s_openapi::api::core::v1::Secret =
                Api::namespaced(client.clone(), ns).get(&r.name).await?;
            secret
                .data
                .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
                .with_context(|| format!("Secret {} has no key {}", r.name, r.key))?
        }
    })
}

/// The Task's output bytes: inline, or from its output ConfigMap.
async fn task_output(
    cms: &Api<ConfigMap>,
    status: &ari_crds::TaskStatus,
) -> anyhow::Result<Vec<u8>> {
    if let Some(text) = &status.output {
        return Ok(text.as_bytes().to_vec());
    }
    if let Some(b64) = &status.output_base64 {
        return Ok(base64::engine::general_purpose::STANDARD.decode(b64)?);
    }
    match &status.output_ref {
        Some(r) => configmap_bytes(cms, &r.config_map, &r.key).await,
        None => Ok(Vec::new()),
    }
}

/// UTF-8 text as text, anything else as base64 (as reports carry bytes).
fn text_or_base64(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(e) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_named_plan_slash_name_and_anything_else_is_a_task() {
        assert_eq!(target("plan/p").ok(), Some(Target::Plan("p")));
        assert_eq!(target("plans.ari.dev/p").ok(), Some(Target::Plan("p")));
        assert_eq!(target("task/t").ok(), Some(Target::Task("t")));
        assert_eq!(target("t").ok(), Some(Target::Task("t")));
        assert!(target("plan/").is_err());
        assert!(target("pod/x").is_err());
    }

    #[test]
    fn a_failed_task_says_why_and_a_verified_one_says_how_it_replayed() {
        let bad = failed(
            "child-1",
            "wordcount",
            1,
            "its attestation x is not the y".into(),
        );
        assert_eq!(
            bad.line(),
            "  task/child-1 (wordcount): NOT verified: its attestation x is not the y"
        );
        let good = Checked {
            attestation_sha256: Some("abc".into()),
            verified: true,
            replay: "replayed: same output, trace and ending".into(),
            reason: String::new(),
            ..failed("root", "fanout", 0, String::new())
        };
        assert_eq!(
            good.line(),
            "task/root (fanout): attestation abc verified; replayed: same output, trace and ending"
        );
    }
}
