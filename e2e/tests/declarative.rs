//! Declarative Agents (issue 31) on a real control plane, with the operator from
//! `deploy/operator.yaml`: the two examples a user copies, `examples/manifests/declarative/`
//! (`research.yaml`, `triage.yaml`), applied as written, with the ModelConfig and MCPServers
//! they need pointed at the test's servers. The node agent hands the operator and the executors
//! the built stock component (`ARI_STOCK_AGENT`, as the images carry it), so the Agents run it.
//!
//! The MCP server is the official Python SDK's (`testkit/mcp/server.py`, its `search`, `fetch`
//! and `close` tools serving as the examples' `docs` and `tracker`). The examples' model
//! (`small`) is a scripted OpenAI-compatible server: the trials need the model to choose given
//! tool calls (search, then fetch, then both Agents; close a duplicate), which a real tiny
//! model cannot be made to do reliably (it writes random words). Where the words do not matter,
//! the triage example's `escalation` subagent is itself a declarative Agent answering from
//! llama.cpp's real server (`ARI_MODEL_SERVER`). The operator and executors run as host
//! processes of the node agent, so 127.0.0.1 is the test's own loopback.
//! Run: `cargo build --bins && scripts/build-agents.sh && cargo test -p ari-e2e --test
//! declarative` with ARI_MCP_PYTHON, ARI_A2A_PYTHON and ARI_MODEL_SERVER set (scripts/test.sh
//! sets them).

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use ari_testkit::mcp_server::{McpServer, Mode};
use ari_testkit::model_server::{CHAT_MODEL, ModelServer};
use ari_testkit::scripted::{Reply, Request, Scripted};
use kube::{Api, Client};
use serde_json::{Value, json};

fn main() -> std::process::ExitCode {
    trials::run_phases(
        DeclCtx::start,
        vec![
            vec![
                (
                    "the_triage_agents_risky_tool_waits_for_approval_and_the_attestation_names_the_approver",
                    triage_trial,
                ),
                (
                    "both_examples_stream_their_tool_calls_over_a2a_and_answer_as_mcp_tools",
                    exposed_trial,
                ),
            ],
            // Last: it stops the model and tool servers to replay without them.
            vec![(
                "the_research_assistant_answers_with_an_mcp_tool_and_two_agents_and_replays_from_the_cluster",
                research_trial,
            )],
        ],
    )
}

/// The model id the scripted server answers as.
const SCRIPTED_MODEL: &str = "scripted-1";
/// How long a Task of these trials may take (each model call is answered at once).
const TASK_TIMEOUT: Duration = Duration::from_secs(120);

struct DeclCtx {
    ctx: Ctx,
    /// The examples' `small` model; taken and dropped by the research trial's replay.
    model: Mutex<Option<Scripted>>,
    /// The examples' `docs` and `tracker` servers; stopped by the research trial's replay.
    mcp: Mutex<Option<McpServer>>,
    model_port: u16,
    mcp_url: String,
    /// The escalation subagent's model.
    llama: ModelServer,
}

impl trials::Shared for DeclCtx {
    fn failure_context(&self) -> String {
        format!(
            "{}\n--- llama.cpp server:\n{}",
            self.ctx.operator_logs(),
            tail(&self.llama.log(), 20)
        )
    }
}

impl DeclCtx {
    fn start() -> Result<DeclCtx> {
        let python = McpServer::installed().map_err(anyhow::Error::msg)?;
        let mcp = McpServer::start(&python, Mode::Sessions, None);
        let llama = ModelServer::start(&ModelServer::installed().map_err(anyhow::Error::msg)?);
        let ctx = Ctx::start()?;
        ctx.kubectl_ok([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/modelconfigs.ari.dev",
            "crd/mcpservers.ari.dev",
        ])?;
        let model = ctx.rt.block_on(Scripted::start(scripted_model));
        ctx.kubectl_ok([
            "apply",
            "-f",
            &repo().join("deploy/operator.yaml").display().to_string(),
        ])?;
        // The admin lists the loopback servers the operator may probe.
        let tools = format!("127.0.0.1:{}", mcp.port());
        ctx.kubectl_ok([
            "set",
            "env",
            "-n",
            OPERATOR_NS,
            "deployment/ari-operator",
            "ARI_HEARTBEAT_TIMEOUT_SECONDS=4",
            &format!(
                "ARI_MODEL_PROBE_INTERNAL_ENDPOINTS={},127.0.0.1:{}",
                model.host(),
                llama.port()
            ),
            &format!("ARI_TOOL_PROBE_INTERNAL_ENDPOINTS={tools}"),
        ])?;
        ctx.wait_operator_env("ARI_TOOL_PROBE_INTERNAL_ENDPOINTS", &tools)?;
        Ok(DeclCtx {
            ctx,
            model_port: model.port(),
            model: Mutex::new(Some(model)),
            mcp_url: mcp.url(),
            mcp: Mutex::new(Some(mcp)),
            llama,
        })
    }

    /// The chat requests the scripted model was sent whose body contains `needle`.
    fn model_requests(&self, needle: &str) -> Vec<String> {
        let model = self.model.lock().unwrap_or_else(|e| e.into_inner());
        model
            .as_ref()
            .map(|m| m.requests())
            .unwrap_or_default()
            .iter()
            .filter(|r| r.target.ends_with("/chat/completions"))
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .filter(|b| b.contains(needle))
            .collect()
    }
}

// ---- the scripted model: plays the two examples' model -----------------------------------

/// What the scripted model says in one turn.
enum Turn {
    /// Calls these functions (name, arguments).
    Calls(Vec<(&'static str, Value)>),
    Answer(String),
}

fn calls(calls: &[(&'static str, Value)]) -> Turn {
    Turn::Calls(calls.to_vec())
}

fn answer(text: &str) -> Turn {
    Turn::Answer(text.to_owned())
}

/// `turn` as an OpenAI chat completion: whole, or as server-sent chunks when the request asks
/// to stream (the host streams while an A2A follower watches, so followers see the tokens).
fn completion(turn: Turn, n: usize, stream: bool) -> Reply {
    let usage = json!({"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60});
    let (message, finish, deltas) = match turn {
        Turn::Calls(list) => {
            let wire: Vec<Value> = list
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"index": i, "id": format!("call-{n}-{i}"), "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            let deltas = vec![json!({"role": "assistant", "tool_calls": wire})];
            let message = json!({"role": "assistant", "content": null, "tool_calls": wire});
            (message, "tool_calls", deltas)
        }
        Turn::Answer(text) => {
            let deltas = text
                .split_inclusive(' ')
                .map(|word| json!({"content": word}))
                .collect();
            (
                json!({"role": "assistant", "content": text}),
                "stop",
                deltas,
            )
        }
    };
    if !stream {
        let body = json!({"id": "c", "model": SCRIPTED_MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage});
        return Reply::new(200, body.to_string()).header("content-type", "application/json");
    }
    let mut events: Vec<Value> = deltas
        .into_iter()
        .map(|delta| json!({"model": SCRIPTED_MODEL, "choices": [{"index": 0, "delta": delta}]}))
        .collect();
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    events.push(json!({"choices": [], "usage": usage}));
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    Reply::new(200, body).header("content-type", "text/event-stream")
}

/// The text of a chat message (a string, or text parts).
fn content(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// What the model decides, from the conversation so far: the research assistant searches,
/// fetches what it found, hands the text to both Agents and answers with what they said; the
/// triage agent hands data loss to `escalation`, else searches and closes a duplicate it found
/// or routes the ticket. Also answers the operator's probe (`GET /v1/models`).
fn scripted_model(request: &Request) -> Reply {
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return probe_or_refuse(request);
    };
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let n = messages.len();
    completion(decide(&messages), n, body["stream"] == true)
}

/// The model list the operator's probe asks for (`GET /v1/models`); any other request without
/// a JSON body is refused.
fn probe_or_refuse(request: &Request) -> Reply {
    if request.target.ends_with("/models") {
        let models = json!({"object": "list", "data": [{"id": SCRIPTED_MODEL, "object": "model"}]});
        return Reply::new(200, models.to_string()).header("content-type", "application/json");
    }
    Reply::new(400, "not JSON")
}

/// The turn the model takes after `messages`.
fn decide(messages: &[Value]) -> Turn {
    let of = |role: &str| -> Vec<String> {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .map(content)
            .collect()
    };
    let system = of("system").concat();
    let user = of("user").concat();
    let results = of("tool");
    if system.contains("research assistant") {
        match results.as_slice() {
            [] => calls(&[("search", json!({"query": "sandbox grants"}))]),
            [found] => {
                let id = found.lines().next().unwrap_or_default().trim();
                calls(&[("fetch", json!({"id": id}))])
            }
            [_, text] => calls(&[
                ("summarize", json!({"input": text})),
                ("keywords", json!({"input": text})),
            ]),
            [_, _, summary, keywords, ..] => {
                answer(&format!("{summary} Keywords: {keywords}. Source: sandbox."))
            }
            // Both Agents are called in one turn: their results come together.
            [_, _, _] => answer("only one Agent answered"),
        }
    } else if system.contains("You triage support tickets") {
        let ticket = user.split(':').next().unwrap_or_default().trim();
        if user.contains("data loss") {
            return calls(&[("transfer_to_escalation", json!({"input": user}))]);
        }
        match results.as_slice() {
            [] => {
                let query = if user.contains("disk") {
                    "disk full"
                } else {
                    "printer jams"
                };
                calls(&[("search", json!({"query": query}))])
            }
            [found] if found.contains("no matches") => {
                answer("No duplicate: the facilities team should take it.")
            }
            [found] => {
                let duplicate = found.lines().next().unwrap_or_default().trim();
                let args = json!({"ticket": ticket, "duplicate_of": duplicate});
                calls(&[("close", args)])
            }
            [_, closed, ..] => answer(&format!("Done: {closed}.")),
        }
    } else {
        answer("This scripted model plays only the two declarative examples.")
    }
}

// ---- the examples, as a user applies them --------------------------------------------------

/// The example manifest `examples/manifests/declarative/NAME.yaml`, applied as written.
fn apply_example(ctx: &Ctx, ns: &str, name: &str) -> Result<()> {
    let path = repo().join(format!("examples/manifests/declarative/{name}.yaml"));
    ctx.kubectl_ok(["apply", "-n", ns, "-f", &path.display().to_string()])?;
    Ok(())
}

fn model_config(name: &str, endpoint: &str, model: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: {name}
spec:
  provider: OpenAI
  endpoint: {endpoint:?}
  model: {model}
"
    )
}

fn mcp_server(name: &str, url: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  url: {url:?}\n"
    )
}

/// What the research example needs beside itself: the model `small`, the MCPServer `docs`
/// and the Agents `summarize` and `keywords` (the example agents, their traces kept so the
/// whole tree replays).
fn research_needs(t: &DeclCtx, ns: &str) -> Result<()> {
    let ctx = &t.ctx;
    ctx.module_configmap(ns, "summarize-module", "summarize")?;
    ctx.module_configmap(ns, "keywords-module", "keywords")?;
    let keep = "  trace: Keep\n";
    let endpoint = format!("http://127.0.0.1:{}/v1", t.model_port);
    let yaml = [
        model_config("small", &endpoint, SCRIPTED_MODEL),
        mcp_server("docs", &t.mcp_url),
        agent_yaml("summarize", "summarize-module", 1, keep),
        agent_yaml("keywords", "keywords-module", 1, keep),
    ]
    .join("---\n");
    ctx.apply_ok(ns, &yaml)
}

/// What the triage example needs beside itself: the model `small`, the MCPServer `tracker`,
/// and (with `escalation`) its subagent, a declarative Agent answering from llama.cpp.
fn triage_needs(t: &DeclCtx, ns: &str, escalation: bool) -> Result<()> {
    let endpoint = format!("http://127.0.0.1:{}/v1", t.model_port);
    let mut yaml = vec![
        model_config("small", &endpoint, SCRIPTED_MODEL),
        mcp_server("tracker", &t.mcp_url),
    ];
    if escalation {
        yaml.push(model_config("llama", &t.llama.base_url(), CHAT_MODEL));
        yaml.push(
            "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: escalation
spec:
  declarative:
    instructions: You page the on-call person about the ticket, in one short sentence.
    model: llama
    maxTokensPerTurn: 16
  capabilities:
    models: {allowed: [llama]}
  limits:
    tokens: 4000
"
            .to_owned(),
        );
    }
    t.ctx.apply_ok(ns, &yaml.join("---\n"))
}

/// `sha256:<hex>` of the stock component the node agent hands the operator and executors.
fn stock_digest() -> Result<String> {
    Ok(format!("sha256:{}", sha256_file(&ari_e2e::stock_agent())?))
}

/// Waits for the declarative Agent to be Ready, running the stock component: its module digest
/// is the built component's and its declaration digest is set. Returns it.
async fn declarative_ready(client: &Client, ns: &str, name: &str) -> Result<Agent> {
    let agent = agent_ready(client, ns, name).await?;
    let status = agent.status.clone().unwrap_or_default();
    let stock = stock_digest()?;
    ensure!(
        status.module_digest.as_deref() == Some(stock.as_str()),
        "{name}'s moduleDigest {:?} is not the stock component's {stock}",
        status.module_digest
    );
    ensure!(
        status
            .declaration_digest
            .as_deref()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{name} has no declarationDigest: {status:?}"
    );
    Ok(agent)
}

/// Fails unless the Task's attestation verifies against the Agent's key and names the stock
/// component as its module and the declaration's digest as its config.
fn attests_stock_and_declaration(task: &Task, agent: &Agent) -> Result<()> {
    verify_attestation(task, agent)?;
    let signed = task
        .status
        .as_ref()
        .and_then(|s| s.attestation.clone())
        .context("no attestation")?
        .predicate()?;
    let status = agent.status.clone().unwrap_or_default();
    let declared = status.declaration_digest.unwrap_or_default();
    let stock = stock_digest()?;
    ensure!(
        format!("sha256:{}", signed.module_sha256) == stock,
        "the attestation's moduleSha256 {} is not the stock component's {stock}",
        signed.module_sha256
    );
    ensure!(
        format!("sha256:{}", signed.config_sha256) == declared,
        "the attestation's configSha256 {} is not status.declarationDigest {declared}",
        signed.config_sha256
    );
    Ok(())
}

fn output(task: &Task) -> String {
    task.status
        .as_ref()
        .and_then(|s| s.output.clone())
        .unwrap_or_default()
}

// ---- the trials ------------------------------------------------------------------------------

/// (i) The research assistant answers a question with the `docs` server's search and fetch and
/// both Agents; the attestation names the stock component and the declaration; then, with the
/// model and the MCP server stopped, `kubectl ari verify` replays the whole tree from the
/// cluster (the Task keeps its trace, as a user asks with `spec.trace: Keep`).
fn research_trial(t: &DeclCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("research", |client, ns| async move {
        research_needs(t, &ns)?;
        apply_example(ctx, &ns, "research")?;
        agent_ready(&client, &ns, "summarize").await?;
        agent_ready(&client, &ns, "keywords").await?;
        let agent = declarative_ready(&client, &ns, "research-assistant").await?;
        // Not the question the A2A trial asks: the model's requests are told apart by it.
        let question = "What does the sandbox grant by default? Cite your source.";
        ctx.apply_ok(
            &ns,
            &task_yaml(
                "question",
                "research-assistant",
                question,
                "  trace: Keep\n",
            ),
        )?;
        let done = task_finished(&client, &ns, "question", TASK_TIMEOUT).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;

        // The prompt came from the example's ConfigMap; the tools offered are the declared
        // ones, with the real server's schemas.
        let requests = t.model_requests(question);
        ensure!(
            requests.len() == 4,
            "{} model calls, want 4",
            requests.len()
        );
        let first = &requests[0];
        ensure!(
            first.contains("You are a research assistant. Search the documents"),
            "the ConfigMap's prompt: {first}"
        );
        for tool in ["search", "fetch", "summarize", "keywords"] {
            ensure!(
                first.contains(&format!(r#""name":"{tool}""#)),
                "{tool} not offered: {first}"
            );
        }
        ensure!(
            !first.contains("delete_everything"),
            "an undeclared tool was offered"
        );

        // The document the server fetched went to both Agents; their answers make the output.
        let status = done.status.clone().unwrap_or_default();
        let children: Vec<(String, String)> = status
            .children
            .iter()
            .map(|c| (c.agent.clone(), c.name.clone().unwrap_or_default()))
            .collect();
        ensure!(children.len() == 2, "children: {children:?}");
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let mut outputs = Vec::new();
        for (agent, name) in &children {
            let child = tasks.get(name).await?;
            ensure!(
                child
                    .spec
                    .input
                    .as_deref()
                    .is_some_and(|i| i.contains("grants nothing by default")),
                "{agent} was handed {:?}",
                child.spec.input
            );
            outputs.push(output(&child));
        }
        let out = output(&done);
        for part in &outputs {
            ensure!(
                out.contains(part.as_str()),
                "the answer lacks {part:?}: {out}"
            );
        }
        ensure!(out.ends_with("Source: sandbox."), "the answer: {out}");
        let used = status.resources_used.unwrap_or_default();
        ensure!(
            used.tool_calls == 2 && used.model_calls == 4,
            "resourcesUsed: {used:?}"
        );
        attests_stock_and_declaration(&done, &agent)?;

        // The model and the tools are gone: the replay needs neither.
        drop(t.model.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(mcp) = t.mcp.lock().unwrap_or_else(|e| e.into_inner()).take() {
            mcp.stop();
        }
        let port = t.model_port;
        wait::until("the model server stopped", wait::DEFAULT, || async move {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(_) => Err("still accepting".to_owned()),
                Err(_) => Ok(()),
            }
        })
        .await?;
        let stock = format!("research-assistant={}", ari_e2e::stock_agent().display());
        let out = ctx.kubectl_ari(&["verify", "task/question", "-n", &ns, "--agent", &stock])?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(0)
                && err
                    .matches("replayed: same output, trace and ending")
                    .count()
                    == 3
                && err.contains("verified: 3 Task(s)"),
            "kubectl ari verify: {:?} {err}",
            out.status.code()
        );
        Ok(())
    })
}

/// (ii) The triage agent searches the tracker, finds a duplicate and calls `close`, which the
/// declaration (not the server: `close` is not marked destructive) makes wait: the Task shows
/// the call in `status.pendingApproval`; `kubectl ari approve` lets it run, and the signed
/// attestation names the approver and the approval rule the declaration added.
fn triage_trial(t: &DeclCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("triage", |client, ns| async move {
        triage_needs(t, &ns, false)?;
        apply_example(ctx, &ns, "triage")?;
        let agent = declarative_ready(&client, &ns, "triage").await?;
        let ticket = "TICKET-9: the disk on the build server is full again";
        ctx.apply_ok(
            &ns,
            &task_yaml("ticket-9", "triage", ticket, "  deadlineSeconds: 600\n"),
        )?;
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let waiting = wait::until("ticket-9 waiting for approval", wait::DEFAULT, || async {
            let status = tasks
                .get("ticket-9")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let shown = status
                .conditions
                .iter()
                .any(|c| c.type_ == "AwaitingApproval" && c.status == "True");
            match status.pending_approval {
                Some(p) if shown => Ok(p),
                _ => Err(format!(
                    "phase {:?}, conditions {:?}",
                    status.phase, status.conditions
                )),
            }
        })
        .await?;
        ensure!(
            waiting.server == "tracker"
                && waiting.tool == "close"
                && waiting.arguments.contains("TICKET-7")
                && waiting.arguments.contains("TICKET-9"),
            "pendingApproval: {waiting:?}"
        );
        let out = ctx.kubectl_ari(&["approve", "task/ticket-9", "-n", &ns])?;
        ensure!(
            out.status.success(),
            "kubectl ari approve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let done = task_finished(&client, &ns, "ticket-9", TASK_TIMEOUT).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            output(&done) == "Done: closed TICKET-9 as a duplicate of TICKET-7.",
            "the answer after the approved call: {:?}",
            output(&done)
        );
        let requests = t.model_requests(ticket);
        ensure!(
            requests
                .last()
                .is_some_and(|r| r.contains("closed TICKET-9 as a duplicate of TICKET-7")),
            "the approved call's result reached the model: {requests:?}"
        );
        attests_stock_and_declaration(&done, &agent)?;
        let status = done.status.clone().unwrap_or_default();
        let signed = status
            .attestation
            .clone()
            .context("no attestation")?
            .predicate()?;
        let approver = done.spec.approvals.clone().unwrap_or_default()[0]
            .approver
            .clone();
        ensure!(
            !approver.is_empty()
                && signed.approvals.len() == 1
                && signed.approvals[0].approver == approver
                && signed.approvals[0].call == waiting.call
                && signed.approvals[0].decision == ari_crds::Decision::Approved,
            "the attestation's approvals: {:?} (approver {approver})",
            signed.approvals
        );
        let rule = serde_json::to_value(&signed.limits_applied.tools)?;
        ensure!(
            rule[0]["approval"]["tools"] == json!(["close"]),
            "the approval rule the declaration added, signed: {rule}"
        );
        Ok(())
    })
}

/// A ServiceAccount `caller` that may create and read Tasks through the gateway; its token.
fn caller(ctx: &Ctx, ns: &str) -> Result<String> {
    ctx.gateway_caller(ns, "caller", &[(&["tasks"], &["create", "get", "list"])])
}

/// (iii) Both examples are exposed (`a2a.exposed`, as written): the official a2a-sdk client
/// streams a research question and sees each MCP tool call before its result, both delegations
/// and the usage, and a triage ticket's search (e2e/a2a/drive.py `declarative`); the official
/// MCP SDK client finds both as tools at the gateway's MCP endpoint and calls them
/// (e2e/mcp/declarative.py), the triage call handing a data-loss ticket to its subagent.
fn exposed_trial(t: &DeclCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("exposed", |client, ns| async move {
        research_needs(t, &ns)?;
        triage_needs(t, &ns, true)?;
        apply_example(ctx, &ns, "research")?;
        apply_example(ctx, &ns, "triage")?;
        for name in ["summarize", "keywords"] {
            agent_ready(&client, &ns, name).await?;
        }
        declarative_ready(&client, &ns, "escalation").await?;
        declarative_ready(&client, &ns, "research-assistant").await?;
        declarative_ready(&client, &ns, "triage").await?;
        let token = caller(ctx, &ns)?;
        let base = gateway_url(&client).await?;
        drive_a2a(
            "declarative",
            &[
                ("A2A_BASE", base.clone()),
                ("A2A_NS", ns.clone()),
                ("A2A_TOKEN", token.clone()),
            ],
        )?;

        let out = std::process::Command::new(installed_python("ARI_MCP_PYTHON", "mcp-server.sh")?)
            .arg(repo().join("e2e/mcp/declarative.py"))
            .env("MCP_URL", format!("{base}/mcp/{ns}"))
            .env("MCP_TOKEN", &token)
            .output()
            .context("running e2e/mcp/declarative.py")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{stdout}");
        ensure!(
            out.status.success(),
            "e2e/mcp/declarative.py failed:\n{stdout}\n{}",
            tail(&String::from_utf8_lossy(&out.stderr), 40)
        );
        let answer: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .context("the last line is the triage call's structured result")?;
        let name = answer["task"]
            .as_str()
            .context("the answer names its Task")?;
        let task = Api::<Task>::namespaced(client.clone(), &ns)
            .get(name)
            .await?;
        expect_reason(&task, TaskPhase::Succeeded, TaskReason::Completed)?;
        let status = task.status.clone().unwrap_or_default();
        let child = status
            .children
            .first()
            .context("the triage Task has no child")?;
        ensure!(
            child.agent == "escalation" && status.children.len() == 1,
            "the data-loss ticket went to escalation: {:?}",
            status.children
        );
        let escalated = Api::<Task>::namespaced(client.clone(), &ns)
            .get(child.name.as_deref().unwrap_or_default())
            .await?;
        let used = escalated
            .status
            .clone()
            .unwrap_or_default()
            .resources_used
            .unwrap_or_default();
        ensure!(
            used.model_calls == 1 && output(&task) == output(&escalated),
            "the subagent's answer (from llama.cpp) is the answer: {:?} vs {:?}, {used:?}",
            output(&task),
            output(&escalated)
        );
        let agent: Agent = Api::namespaced(client.clone(), &ns).get("triage").await?;
        attests_stock_and_declaration(&task, &agent)?;
        Ok(())
    })
}
