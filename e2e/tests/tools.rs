//! MCPServers and tool-using Agents on a real control plane, with the operator from
//! `deploy/operator.yaml`: a real MCP server built with the official Python SDK
//! (`testkit/mcp/server.py`, `scripts/mcp-server.sh`, found through `ARI_MCP_PYTHON`) on
//! loopback, which the operator's admin lists for tool listing, requiring a bearer token from a
//! marked Secret. The operator lists its tools into status; the `toolbox` example Agent, granted
//! some of them, calls them from the cluster; a tool not granted is denied; an unmarked Secret,
//! another namespace's server and an unlisted internal server get nowhere; and the token is in
//! no status, Event or log. The operator and executors run as host processes of the node agent,
//! so 127.0.0.1 is the test's own loopback.
//! Run: `cargo build --bins && scripts/build-agents.sh && ARI_MCP_PYTHON="$(scripts/mcp-server.sh
//! | tail -n 1)" cargo test -p ari-e2e --test tools`.

use anyhow::{Context as _, Result, ensure};
use ari_crds::{Agent, MCPServer, Task, TaskPhase, TaskReason};
use ari_e2e::registry;
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use ari_testkit::mcp_server::{McpServer, Mode};
use ari_testkit::scripted::{Reply, Scripted};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::{Api, Client};

/// The MCP server's bearer token, in a marked Secret: in no status, Event or log.
const TOKEN: &str = "mcp-e2e-token-6c1f0a";
/// A value in an unmarked Secret an MCPServer names: never read, never handed over.
const UNMARKED: &str = "mcp-e2e-unmarked-93d2be";

fn main() -> std::process::ExitCode {
    trials::run_phases(
        ToolsCtx::start,
        vec![vec![
            ("mcp_server_trials", mcp_server_trials),
            ("tool_using_agent_trials", tool_using_agent_trials),
            (
                "a2a_followers_see_each_tool_call_and_its_result",
                a2a_followers_see_tool_calls,
            ),
            (
                "a_destructive_call_waits_for_a_person_without_its_slot",
                approvals_trial,
            ),
        ]],
    )
}

struct ToolsCtx {
    ctx: Ctx,
    server: McpServer,
    /// A loopback server the admin did not list: it must never be contacted.
    unlisted: Scripted,
    /// A loopback port nothing listens on (listed).
    closed_port: u16,
}

impl trials::Shared for ToolsCtx {
    fn failure_context(&self) -> String {
        self.ctx.operator_logs()
    }
}

impl ToolsCtx {
    fn start() -> Result<ToolsCtx> {
        let python = McpServer::installed().map_err(anyhow::Error::msg)?;
        let server = McpServer::start(&python, Mode::Sessions, Some(TOKEN));
        let ctx = Ctx::start()?;
        ctx.kubectl_ok([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/mcpservers.ari.dev",
        ])?;
        let unlisted = ctx.rt.block_on(Scripted::start(|_| Reply::new(200, "{}")));
        let closed_port = registry::free_port()?;
        let listed = format!("127.0.0.1:{},127.0.0.1:{closed_port}", server.port());
        registry::install_operator_with(&ctx, "ARI_TOOL_PROBE_INTERNAL_ENDPOINTS", &listed)?;
        Ok(ToolsCtx {
            ctx,
            server,
            unlisted,
            closed_port,
        })
    }
}

fn secret_yaml(name: &str, value: &str, marked: bool) -> String {
    let labels = if marked {
        "  labels:\n    ari.dev/tool-credentials: \"true\"\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n{labels}stringData:\n  token: {value}\n"
    )
}

fn server_yaml(name: &str, url: &str, secret: Option<&str>) -> String {
    let token = secret
        .map(|s| format!("  token:\n    name: {s}\n    key: token\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: ari.dev/v1alpha1\nkind: MCPServer\nmetadata:\n  name: {name}\nspec:\n  url: {url:?}\n{token}"
    )
}

/// Waits for the MCPServer's `Ready` condition to have `status` and `reason`.
async fn ready(
    client: &Client,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<MCPServer> {
    let api: Api<MCPServer> = Api::namespaced(client.clone(), ns);
    Ok(wait::ready(&api, name, (status, reason), |s: &MCPServer| {
        s.status.clone().map(|s| s.conditions).unwrap_or_default()
    })
    .await?)
}

/// Every object and log a namespace user or an admin reads, as text.
async fn readable(ctx: &Ctx, client: &Client, ns: &str) -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("MCPServers", list_json::<MCPServer>(client, ns).await?),
        ("Tasks", list_json::<Task>(client, ns).await?),
        ("Agents", list_json::<Agent>(client, ns).await?),
        ("Events", list_json::<Event>(client, ns).await?),
        ("operator logs", operator_log(ctx, client).await?),
        ("executor logs", executor_log(ctx, client, ns).await?),
    ])
}

/// The operator lists the real server's tools with the marked token (annotations included);
/// an unmarked Secret, a closed port and an unlisted internal server get fixed reasons, the
/// last never contacted.
fn mcp_server_trials(t: &ToolsCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("mcp", |client, ns| async move {
        let closed = format!("http://127.0.0.1:{}/mcp", t.closed_port);
        let yaml = [
            secret_yaml("demo-token", TOKEN, true),
            secret_yaml("plain-token", UNMARKED, false),
            server_yaml("demo", &t.server.url(), Some("demo-token")),
            server_yaml("anonymous", &t.server.url(), None),
            server_yaml("plain", &t.server.url(), Some("plain-token")),
            server_yaml("closed", &closed, None),
            server_yaml(
                "unlisted",
                &format!("http://127.0.0.1:{}/mcp", t.unlisted.port()),
                None,
            ),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;

        let demo = ready(&client, &ns, "demo", "True", "ToolsListed").await?;
        let status = demo.status.clone().unwrap_or_default();
        let names: Vec<&str> = status.tools.iter().map(|t| t.name.as_str()).collect();
        ensure!(
            names.contains(&"echo") && names.contains(&"delete_everything"),
            "status.tools of the real server: {names:?}"
        );
        ensure!(
            status.tool_count == Some(u32::try_from(names.len())?),
            "toolCount {:?} for {} tools",
            status.tool_count,
            names.len()
        );
        let destructive = status
            .tools
            .iter()
            .find(|t| t.name == "delete_everything")
            .and_then(|t| t.destructive);
        ensure!(
            destructive == Some(true),
            "delete_everything's hint: {destructive:?}"
        );
        let read_only = status
            .tools
            .iter()
            .find(|t| t.name == "echo")
            .and_then(|t| t.read_only);
        ensure!(read_only == Some(true), "echo's hint: {read_only:?}");

        // Without the token the real server refuses the listing (401).
        ready(&client, &ns, "anonymous", "False", "Unreachable").await?;
        ready(&client, &ns, "plain", "False", "CredentialsNotMarked").await?;
        ready(&client, &ns, "closed", "False", "Unreachable").await?;
        ready(&client, &ns, "unlisted", "Unknown", "ProbeNotAllowed").await?;
        event_with_reason(&client, &ns, "plain", "CredentialsNotMarked").await?;
        ensure!(
            t.unlisted.hits().is_empty(),
            "the operator contacted an unlisted internal server: {:?}",
            t.unlisted.hits()
        );
        for (what, text) in readable(ctx, &client, &ns).await? {
            for secret in [TOKEN, UNMARKED] {
                ensure!(!text.contains(secret), "{what} hold {secret}");
            }
            // The SDK's own logs carry what servers send (a 401's body): silenced.
            ensure!(
                !text.contains("\"target\":\"rmcp"),
                "{what} hold rmcp's logs"
            );
        }
        let kubectl = ctx.kubectl_ok(["get", "mcpservers", "-n", &ns])?;
        ensure!(
            kubectl.contains("TOOLS") && kubectl.contains("demo"),
            "kubectl get mcpservers:\n{kubectl}"
        );
        Ok(())
    })
}

/// The `toolbox` example Agent, granted `echo` and `add` of the namespace's server, calls them
/// from the cluster with the token the kubelet handed its executor; a tool not granted ends
/// the Task `CapabilityDenied` without reaching the server; an Agent of another namespace
/// naming the same server gets nothing (no such MCPServer there: its calls are unavailable);
/// the token is in no status, attestation, Event, log or pod spec.
/// Every `ari.dev/event` an A2A SSE stream carried, in order.
fn stream_events(sse: &str) -> Vec<serde_json::Value> {
    fn find(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(e) = m.get("ari.dev/event") {
                    out.push(e.clone());
                }
                m.values().for_each(|v| find(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| find(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for line in sse.lines() {
        if let Some(data) = line.strip_prefix("data:")
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim())
        {
            find(&v, &mut out);
        }
    }
    out
}

/// An A2A caller streaming a `toolbox` message sees the tool call before its result, each with
/// its preview, through the cluster's gateway; the server's token is not in the stream. A
/// message whose call waits for approval comes back `input-required`, naming the call.
fn a2a_followers_see_tool_calls(t: &ToolsCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("tools-a2a", |client, ns| async move {
        ctx.module_configmap(&ns, "toolbox-module", "toolbox")?;
        let grant = "  capabilities:\n    tools:\n      servers:\n        - name: demo\n          tools: [echo, delete_everything]\n  a2a:\n    exposed: true\n";
        let caller = "apiVersion: v1
kind: ServiceAccount
metadata: {name: caller}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-caller}
rules:
  - apiGroups: [ari.dev]
    resources: [tasks]
    verbs: [create, get]
  - apiGroups: [ari.dev]
    resources: [agents]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: caller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-caller}
subjects: [{kind: ServiceAccount, name: caller}]
";
        let yaml = [
            secret_yaml("demo-token", TOKEN, true),
            server_yaml("demo", &t.server.url(), Some("demo-token")),
            agent_yaml("toolbox", "toolbox-module", 1, grant),
            caller.to_owned(),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        ready(&client, &ns, "demo", "True", "ToolsListed").await?;
        agent_ready(&client, &ns, "toolbox").await?;
        let token = ctx.gateway_token(&ns, "caller")?;
        let base = gateway_url(&client).await?;
        let send = |method: &str, text: &str| -> Result<String> {
            let body = serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": method,
                "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                    "parts": [{"text": text}]}}
            });
            let out = std::process::Command::new("curl")
                .args(["-sN", "--max-time", "120", "-H"])
                .arg(format!("Authorization: Bearer {}", token.trim()))
                .args(["-H", "Content-Type: application/json", "-d"])
                .arg(body.to_string())
                .arg(format!("{base}/a2a/{ns}/toolbox"))
                .output()
                .context("curl")?;
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        // A call waiting for approval pauses the task: a blocking SendMessage returns it
        // input-required, naming the call.
        let answer = send("SendMessage", "call demo delete_everything {\"confirm\":true}")?;
        let answer: serde_json::Value = serde_json::from_str(&answer)
            .with_context(|| format!("SendMessage answered {answer}"))?;
        let task = &answer["result"]["task"];
        ensure!(
            task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
                && task["metadata"]["ari.dev/pendingApproval"]["tool"] == "delete_everything",
            "a task waiting for approval over A2A: {answer}"
        );
        let sse = send(
            "SendStreamingMessage",
            "call demo echo {\"text\":\"streamed to a follower\"}",
        )?;
        let events = stream_events(&sse);
        let of = |kind: &str| events.iter().position(|e| e["type"] == kind);
        let (Some(call), Some(result)) = (of("toolCall"), of("toolResult")) else {
            anyhow::bail!("no toolCall and toolResult events in the stream:\n{sse}");
        };
        ensure!(call < result, "the result came before the call: {events:?}");
        let (call, result) = (&events[call], &events[result]);
        ensure!(
            call["server"] == "demo"
                && call["tool"] == "echo"
                && call["arguments"].as_str().is_some_and(|a| a.contains("streamed to a follower")),
            "toolCall: {call}"
        );
        ensure!(
            result["outcome"] == "answered" && result["text"] == "streamed to a follower",
            "toolResult: {result}"
        );
        ensure!(!sse.contains(TOKEN), "the stream holds the server's token");
        approve_over_a2a(ctx, &client, &ns, &base, token.trim()).await
    })
}

/// The official a2a-sdk decides waiting calls on the same task (e2e/a2a/drive.py `approve`):
/// `caller` may not (no update on Tasks); `approver` may, and sees every caller's tasks. The
/// decision is recorded in the approver's name, and the attestation signs it.
async fn approve_over_a2a(
    ctx: &Ctx,
    client: &Client,
    ns: &str,
    base: &str,
    caller: &str,
) -> Result<()> {
    let approver = ctx.gateway_caller(
        ns,
        "approver",
        &[
            (&["tasks"], &["create", "get", "update"]),
            (&["tasks/a2a-all"], &["get"]),
        ],
    )?;
    drive_a2a(
        "approve",
        &[
            ("A2A_BASE", base.to_owned()),
            ("A2A_NS", ns.to_owned()),
            ("A2A_TOKEN", caller.to_owned()),
            ("A2A_APPROVER_TOKEN", approver.trim().to_owned()),
        ],
    )?;
    let who = format!("system:serviceaccount:{ns}:approver");
    let agent: Agent = Api::namespaced(client.clone(), ns).get("toolbox").await?;
    let tasks: Vec<Task> = Api::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?
        .items;
    let decided: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.spec.approvals.is_some())
        .collect();
    ensure!(
        decided.len() == 2,
        "two tasks decided over A2A, found {}",
        decided.len()
    );
    for task in decided {
        verify_attestation(task, &agent)?;
        let signed = task
            .status
            .as_ref()
            .and_then(|s| s.attestation.clone())
            .context("no attestation")?
            .predicate()?;
        ensure!(
            signed.approvals.len() == 1 && signed.approvals[0].approver == who,
            "the attestation signs the A2A approver: {:?}",
            signed.approvals
        );
    }
    Ok(())
}

fn tool_using_agent_trials(t: &ToolsCtx) -> Result<()> {
    let ctx = &t.ctx;
    let owner = ctx.in_namespace("tools", |client, ns| async move {
        // The example a user copies is accepted as written.
        let example = repo().join("examples/manifests/tools/toolbox.yaml");
        ctx.kubectl_ok([
            "apply",
            "--dry-run=server",
            "-n",
            &ns,
            "-f",
            &example.display().to_string(),
        ])?;
        ctx.module_configmap(&ns, "toolbox-module", "toolbox")?;
        let grant = "  capabilities:\n    tools:\n      servers:\n        - name: demo\n          tools: [echo, add]\n";
        let yaml = [
            secret_yaml("demo-token", TOKEN, true),
            server_yaml("demo", &t.server.url(), Some("demo-token")),
            agent_yaml("toolbox", "toolbox-module", 1, grant),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        ready(&client, &ns, "demo", "True", "ToolsListed").await?;
        let agent = agent_ready(&client, &ns, "toolbox").await?;
        agent_condition(&client, &ns, "toolbox", "ToolsAvailable", "True").await?;

        let calls = "servers\nlist demo\ncall demo echo {\"text\":\"hello from the cluster\"}\ncall demo add {\"a\":2,\"b\":40}";
        let tasks = [
            task_yaml("calls", "toolbox", calls, ""),
            task_yaml("destroy", "toolbox", "call demo delete_everything {\"confirm\":true}", ""),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &tasks)?;
        let timeout = std::time::Duration::from_secs(180);
        let done = task_finished(&client, &ns, "calls", timeout).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        verify_attestation(&done, &agent)?;
        let status = done.status.clone().unwrap_or_default();
        let output = status.output.clone().unwrap_or_default();
        for want in ["demo", "echo [read-only]", "hello from the cluster", "42"] {
            ensure!(output.contains(want), "toolbox output lacks {want:?}:\n{output}");
        }
        ensure!(
            !output.contains("delete_everything"),
            "a tool not granted was listed to the guest:\n{output}"
        );
        let used = status.resources_used.unwrap_or_default();
        ensure!(used.tool_calls == 2, "resourcesUsed.toolCalls: {used:?}");
        let attested = status
            .attestation
            .as_ref()
            .and_then(|a| a.predicate().ok())
            .map(|a| a.resources_used.tool_calls);
        ensure!(attested == Some(2), "the attestation's toolCalls: {attested:?}");
        let applied = status.limits_applied.clone().unwrap_or_default();
        let url = applied.tools.first().and_then(|s| s.url.clone());
        ensure!(
            url.as_deref() == Some(t.server.url().as_str()),
            "limitsApplied.tools: {:?}",
            applied.tools
        );

        let destroy = task_finished(&client, &ns, "destroy", timeout).await?;
        expect_reason(&destroy, TaskPhase::Failed, TaskReason::CapabilityDenied)?;

        for (what, text) in readable(ctx, &client, &ns).await? {
            ensure!(!text.contains(TOKEN), "{what} hold the token");
        }
        // The executor pod carries the token by reference only.
        let pods = list_json::<Pod>(&client, &ns).await?;
        ensure!(
            pods.contains("ARI_TOOL_TOKEN_0") && !pods.contains(TOKEN),
            "the executor pod's token variable"
        );
        Ok(())
    });
    owner?;
    // Another namespace names `demo`: there is none there, so nothing is handed over.
    ctx.in_namespace("tools-other", |client, ns| async move {
        ctx.module_configmap(&ns, "toolbox-module", "toolbox")?;
        let grant = "  capabilities:\n    tools:\n      servers:\n        - name: demo\n          tools: [\"*\"]\n";
        ctx.apply_ok(&ns, &agent_yaml("thief", "toolbox-module", 1, grant))?;
        agent_ready(&client, &ns, "thief").await?;
        let why = agent_condition(&client, &ns, "thief", "ToolsAvailable", "False").await?;
        ensure!(
            why.contains("tool server demo: no MCPServer of that name"),
            "ToolsAvailable of the other namespace's Agent: {why}"
        );
        ctx.apply_ok(
            &ns,
            &task_yaml("steal", "thief", "call demo echo {\"text\":\"x\"}", ""),
        )?;
        let done =
            task_finished(&client, &ns, "steal", std::time::Duration::from_secs(180)).await?;
        let output = done.status.clone().unwrap_or_default().output.unwrap_or_default();
        ensure!(
            output.starts_with("error unavailable"),
            "a call to another namespace's server: {:?} {output:?}",
            done.status.and_then(|s| s.phase)
        );
        let pods = list_json::<Pod>(&client, &ns).await?;
        ensure!(
            !pods.contains("ARI_TOOL_SERVERS"),
            "an executor pod got another namespace's server"
        );
        Ok(())
    })
}

/// `kubectl patch task NAME --type=merge -p PATCH`, as the admin.
fn merge_patch(ctx: &Ctx, ns: &str, task: &str, patch: &str) -> Result<std::process::Output> {
    ctx.kubectl(&["patch", "task", task, "-n", ns, "--type=merge", "-p", patch])
}

/// The call a Task waits on, once its status shows it.
async fn pending(client: &Client, ns: &str, task: &str) -> Result<ari_crds::PendingApproval> {
    let tasks: Api<Task> = Api::namespaced(client.clone(), ns);
    let pending = wait::until(
        &format!("Task {task} waiting for approval"),
        wait::DEFAULT,
        || async {
            let t = tasks.get(task).await.map_err(|e| e.to_string())?;
            let status = t.status.unwrap_or_default();
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
        },
    )
    .await?;
    Ok(pending)
}

/// Issue 30, item 2, in a cluster: a call of a tool the server marks destructive waits; the
/// Task shows it and lends its only slot (another Task of the same one-slot Agent runs
/// meanwhile); nobody may decide in someone else's name, nor take a decision back;
/// `kubectl ari approve` lets it run and the attestation names who approved; `kubectl ari
/// reject` gives the guest a `rejected` error with the reason.
fn approvals_trial(t: &ToolsCtx) -> Result<()> {
    let ctx = &t.ctx;
    ctx.in_namespace("approvals", |client, ns| async move {
        ctx.module_configmap(&ns, "toolbox-module", "toolbox")?;
        let agent = "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: toolbox
spec:
  module:
    configMap:
      name: toolbox-module
      key: module.wasm
  executor:
    replicas: 1
    concurrency: 1
  limits:
    timeoutSeconds: 600
  capabilities:
    tools:
      servers:
        - name: demo
          tools: [\"*\"]
";
        let yaml = [
            secret_yaml("demo-token", TOKEN, true),
            server_yaml("demo", &t.server.url(), Some("demo-token")),
            agent.to_owned(),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        ready(&client, &ns, "demo", "True", "ToolsListed").await?;
        let agent = agent_ready(&client, &ns, "toolbox").await?;
        let wait_long = "  deadlineSeconds: 600\n";
        let destroy = "call demo delete_everything {\"confirm\":true}";
        ctx.apply_ok(&ns, &task_yaml("destroy", "toolbox", destroy, wait_long))?;
        let waiting = pending(&client, &ns, "destroy").await?;
        ensure!(
            waiting.server == "demo"
                && waiting.tool == "delete_everything"
                && waiting.arguments == "{\"confirm\":true}",
            "pendingApproval: {waiting:?}"
        );

        // Its only slot is lent while it waits.
        let echo = "call demo echo {\"text\":\"while it waits\"}";
        ctx.apply_ok(&ns, &task_yaml("meanwhile", "toolbox", echo, ""))?;
        let timeout = std::time::Duration::from_secs(120);
        let meanwhile = task_finished(&client, &ns, "meanwhile", timeout).await?;
        expect_reason(&meanwhile, TaskPhase::Succeeded, TaskReason::Completed)?;

        // Nobody decides in someone else's name.
        let forged = serde_json::json!({"spec": {"approvals": [{
            "call": waiting.call, "decision": "Approved", "approver": "someone-else"}]}});
        let out = merge_patch(ctx, &ns, "destroy", &forged.to_string())?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && stderr.contains("must name its approver"),
            "a decision in another's name was admitted: {stderr}"
        );

        let out = ctx.kubectl_ari(&["approve", "task/destroy", "-n", &ns])?;
        ensure!(
            out.status.success(),
            "kubectl ari approve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let done = task_finished(&client, &ns, "destroy", timeout).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(
            status.output.as_deref() == Some("deleted nothing")
                && status.pending_approval.is_none(),
            "after approval: {status:?}"
        );
        verify_attestation(&done, &agent)?;
        let attested = status
            .attestation
            .clone()
            .context("no attestation")?
            .predicate()?;
        let approver = done.spec.approvals.clone().unwrap_or_default()[0]
            .approver
            .clone();
        ensure!(
            attested.approvals.len() == 1
                && attested.approvals[0].approver == approver
                && attested.approvals[0].call == waiting.call
                && attested.approvals[0].decision == ari_crds::Decision::Approved,
            "the attestation's approvals: {:?} (approver {approver})",
            attested.approvals
        );
        // A decision cannot be taken back.
        let out = merge_patch(ctx, &ns, "destroy", r#"{"spec":{"approvals":null}}"#)?;
        ensure!(!out.status.success(), "a decision was removed");

        ctx.apply_ok(&ns, &task_yaml("refused", "toolbox", destroy, wait_long))?;
        pending(&client, &ns, "refused").await?;
        let out =
            ctx.kubectl_ari(&["reject", "task/refused", "--reason", "not today", "-n", &ns])?;
        ensure!(
            out.status.success(),
            "kubectl ari reject: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let done = task_finished(&client, &ns, "refused", timeout).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        let output = done.status.and_then(|s| s.output).unwrap_or_default();
        ensure!(
            output.starts_with("error rejected:") && output.ends_with("not today"),
            "the guest's view of a rejection: {output}"
        );
        Ok(())
    })
}
