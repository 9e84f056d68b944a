//! ModelConfigs on a real control plane, probed by the operator from `deploy/operator.yaml`:
//! one at llama.cpp's OpenAI-compatible server (llama-cpp-python with a generated tiny model,
//! `scripts/model-server.sh`, found through `ARI_MODEL_SERVER`) on loopback, which the
//! operator's admin lists for probing; the error paths a real server cannot be made to play
//! (an error page with a secret in it) against the scripted server; a closed port; an internal
//! endpoint nobody listed; an unmarked credentials Secret. The operator runs as a host process
//! of the node agent, so 127.0.0.1 is the test's own loopback.
//! Run: `cargo build --bins && ARI_MODEL_SERVER="$(scripts/model-server.sh | tail -n 1)" cargo
//! test -p ari-e2e --test models`.

use anyhow::{Context as _, Result, ensure};
use ari_crds::{Agent, ModelConfig, Task, TaskPhase, TaskReason};
use ari_e2e::registry::{self, free_port};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use ari_testkit::model_server::{CHAT_MODEL, ModelServer};
use ari_testkit::scripted::{Reply, Scripted};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::{Api, Client};

/// In the scripted server's error page: must appear in no status, Event or log.
const PAGE_SECRET: &str = "internal-admin-token-5b9e1c";
/// The value of the unmarked credentials Secret: the operator never reads it.
const KEY_SECRET: &str = "sk-e2e-unmarked-7d41aa";
/// The key in the marked Secret an executor sends to the model server: in no status,
/// attestation, Event or log.
const MARKED_KEY: &str = "sk-e2e-marked-3f09c2";
/// The key in an unmarked Secret an Agent's ModelConfig names: never handed to an executor.
const UNMARKED_KEY: &str = "sk-e2e-unmarked-agent-81be4d";

fn main() -> std::process::ExitCode {
    trials::run_phases(
        ModelsCtx::start,
        vec![vec![
            ("model_config_trials", model_config_trials),
            ("model_backed_agent_trials", model_backed_agent_trials),
            (
                "a_models_limit_is_shared_by_every_agent_granted_it",
                a_models_limit_is_shared_by_every_agent_granted_it,
            ),
        ]],
    )
}

struct ModelsCtx {
    ctx: Ctx,
    server: ModelServer,
    /// Answers every request 500 with [`PAGE_SECRET`] in its body.
    leaky: Scripted,
    /// A loopback server the admin did not list: it must never be contacted.
    unlisted: Scripted,
    /// A loopback port nothing listens on (listed).
    closed_port: u16,
}

impl trials::Shared for ModelsCtx {
    fn failure_context(&self) -> String {
        format!(
            "{}\n--- model server:\n{}",
            self.ctx.operator_logs(),
            tail(&self.server.log(), 20)
        )
    }
}

impl ModelsCtx {
    fn start() -> Result<ModelsCtx> {
        let dir = ModelServer::installed().map_err(anyhow::Error::msg)?;
        let server = ModelServer::start(&dir);
        let ctx = Ctx::start()?;
        ctx.kubectl_ok([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/modelconfigs.ari.dev",
        ])?;
        // A real server cannot be made to put a secret in an error page.
        let leaky = ctx.rt.block_on(Scripted::start(|_| {
            Reply::new(500, format!("<html>{PAGE_SECRET}</html>"))
        }));
        let unlisted = ctx.rt.block_on(Scripted::start(|_| {
            Reply::new(200, r#"{"data":[{"id":"x"}]}"#)
        }));
        let closed_port = free_port()?;
        let listed = [
            format!("127.0.0.1:{}", server.port()),
            leaky.host(),
            format!("127.0.0.1:{closed_port}"),
        ]
        .join(",");
        registry::install_operator_with(&ctx, "ARI_MODEL_PROBE_INTERNAL_ENDPOINTS", &listed)?;
        Ok(ModelsCtx {
            ctx,
            server,
            leaky,
            unlisted,
            closed_port,
        })
    }
}

fn model_config_yaml(name: &str, endpoint: &str, credentials: Option<&str>) -> String {
    let credentials = credentials
        .map(|s| format!("  credentials:\n    name: {s}\n    key: apiKey\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: {name}
spec:
  provider: OpenAI
  endpoint: {endpoint:?}
  model: {CHAT_MODEL}
{credentials}"
    )
}

/// Waits for the ModelConfig's `Ready` condition to have `status` and `reason`.
async fn ready(
    client: &Client,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<ModelConfig> {
    let api: Api<ModelConfig> = Api::namespaced(client.clone(), ns);
    Ok(
        wait::ready(&api, name, (status, reason), |mc: &ModelConfig| {
            mc.status.clone().map(|s| s.conditions).unwrap_or_default()
        })
        .await?,
    )
}

fn message(mc: &ModelConfig) -> String {
    mc.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn model_config_trials(m: &ModelsCtx) -> Result<()> {
    let ctx = &m.ctx;
    let local = |port: u16| format!("http://127.0.0.1:{port}/v1");
    ctx.in_namespace("models", |client, ns| async move {
        let secret = format!(
            "apiVersion: v1
kind: Secret
metadata:
  name: unmarked-key
stringData:
  apiKey: {KEY_SECRET}
"
        );
        let yaml = [
            model_config_yaml("llama", &m.server.base_url(), None),
            model_config_yaml("closed", &local(m.closed_port), None),
            model_config_yaml("leaky", &format!("http://{}/v1", m.leaky.host()), None),
            model_config_yaml("unlisted", &local(m.unlisted.port()), None),
            model_config_yaml("unmarked", &m.server.base_url(), Some("unmarked-key")),
            secret,
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;

        let llama = ready(&client, &ns, "llama", "True", "EndpointAnswered").await?;
        let models = llama.status.clone().unwrap_or_default().models;
        ensure!(
            models.iter().any(|id| id == CHAT_MODEL),
            "status.models of the real server: {models:?}"
        );

        let closed = ready(&client, &ns, "closed", "False", "Unreachable").await?;
        ensure!(
            message(&closed) == "the endpoint could not be reached or gave no HTTP answer",
            "closed port: {}",
            message(&closed)
        );

        let leaky = ready(&client, &ns, "leaky", "False", "EndpointError").await?;
        ensure!(
            message(&leaky).contains("answered HTTP 500"),
            "error page: {}",
            message(&leaky)
        );
        let requests = m.leaky.requests();
        ensure!(!requests.is_empty(), "the leaky server was never probed");
        ensure!(
            requests
                .iter()
                .all(|r| r.header("authorization").is_none() && r.header("x-api-key").is_none()),
            "the probe carried a key"
        );

        ready(&client, &ns, "unlisted", "Unknown", "ProbeNotAllowed").await?;
        ready(&client, &ns, "unmarked", "False", "CredentialsNotMarked").await?;
        event_with_reason(&client, &ns, "leaky", "EndpointError").await?;
        event_with_reason(&client, &ns, "unmarked", "CredentialsNotMarked").await?;
        // Checked after the others settled: the probes had every chance to reach it.
        ensure!(
            m.unlisted.hits().is_empty(),
            "the operator contacted an unlisted internal endpoint: {:?}",
            m.unlisted.hits()
        );

        // Neither the error page's secret nor the unread key is anywhere a user or admin reads.
        let statuses = list_json::<ModelConfig>(&client, &ns).await?;
        let events = list_json::<Event>(&client, &ns).await?;
        let logs = operator_log(ctx, &client).await?;
        for (what, text) in [
            ("ModelConfigs", &statuses),
            ("Events", &events),
            ("operator logs", &logs),
        ] {
            for secret in [PAGE_SECRET, KEY_SECRET] {
                ensure!(!text.contains(secret), "{what} hold {secret}");
            }
        }
        ensure!(
            logs.contains("model config status updated"),
            "the operator logs say nothing of the probes (wrong pod?)"
        );
        Ok(())
    })
}

/// A model-backed Agent (`examples/agents/ask`) running Tasks in the cluster against the real
/// llama.cpp server, with its key from a marked Secret: the answer, the tokens in
/// `resourcesUsed` and `status.models`, the attestation; a Task asking more tokens than the
/// Agent's ceiling is refused; a budget too small for the prompt is refused before the call; a
/// ModelConfig whose Secret is not marked never reaches the executor (its calls are
/// `unavailable`, the Agent says why); and neither key is in any status, Event or log.
fn model_backed_agent_trials(m: &ModelsCtx) -> Result<()> {
    let ctx = &m.ctx;
    ctx.in_namespace("model-agents", |client, ns| async move {
        let secret = |name: &str, value: &str, marked: bool| {
            let labels = if marked {
                "  labels:\n    ari.dev/model-credentials: \"true\"\n"
            } else {
                ""
            };
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n{labels}stringData:\n  apiKey: {value}\n"
            )
        };
        // The example a user copies is accepted as written (schemas and CEL rules).
        let example = repo().join("examples/manifests/models/ask.yaml");
        ctx.kubectl_ok([
            "apply",
            "--dry-run=server",
            "-n",
            &ns,
            "-f",
            &example.display().to_string(),
        ])?;
        ctx.module_configmap(&ns, "ask-module", "ask")?;
        let grant = |model: &str| {
            format!(
                "  capabilities:\n    models:\n      allowed: [{model}]\n  limits:\n    tokens: 2000\n"
            )
        };
        let yaml = [
            secret("llama-key", MARKED_KEY, true),
            secret("plain-key", UNMARKED_KEY, false),
            model_config_yaml("llama", &m.server.base_url(), Some("llama-key")),
            model_config_yaml("plain", &m.server.base_url(), Some("plain-key")),
            agent_yaml("ask", "ask-module", 1, &grant("llama")),
            agent_yaml("ask-plain", "ask-module", 1, &grant("plain")),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        let agent = agent_ready(&client, &ns, "ask").await?;
        agent_ready(&client, &ns, "ask-plain").await?;
        let plain = agent_condition(&client, &ns, "ask-plain", "ModelsAvailable", "False").await?;
        ensure!(
            plain.contains("model plain: its credentials Secret is not labelled"),
            "ModelsAvailable of ask-plain: {plain}"
        );

        let tasks = [
            task_yaml("question", "ask", "What is ari?", "  tokens: 1500\n"),
            task_yaml("greedy", "ask", "What is ari?", "  tokens: 2001\n"),
            task_yaml("frugal", "ask", "What is ari?", "  tokens: 10\n"),
            task_yaml("unmarked", "ask-plain", "What is ari?", ""),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &tasks)?;
        let timeout = std::time::Duration::from_secs(180);

        let question = task_finished(&client, &ns, "question", timeout).await?;
        expect_reason(&question, TaskPhase::Succeeded, TaskReason::Completed)?;
        verify_attestation(&question, &agent)?;
        let status = question.status.clone().unwrap_or_default();
        let used = status.resources_used.unwrap_or_default();
        ensure!(
            used.input_tokens > 0 && used.output_tokens > 0 && used.model_calls == 1,
            "resourcesUsed of a model call: {used:?}"
        );
        ensure!(
            used.input_tokens + used.output_tokens <= 1500,
            "the Task's budget of 1500 tokens was overspent: {used:?}"
        );
        eprintln!(
            "question: {} in, {} out, {} call(s); answer {:?}",
            used.input_tokens,
            used.output_tokens,
            used.model_calls,
            status.output
        );
        let first = status.models.first().context("status.models is empty")?;
        ensure!(
            first.model == CHAT_MODEL && first.name == "llama" && first.usage.calls == 1,
            "status.models: {:?}",
            status.models
        );
        let applied = status.limits_applied.clone().unwrap_or_default();
        ensure!(
            applied.tokens == Some(1500),
            "limitsApplied.tokens: {:?}",
            applied.tokens
        );
        let att = status.attestation.clone().context("no attestation")?.predicate()?;
        ensure!(
            att.resources_used.input_tokens == used.input_tokens,
            "the attestation's tokens differ from status"
        );

        let greedy = task_finished(&client, &ns, "greedy", timeout).await?;
        expect_reason(&greedy, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let why = greedy.status.clone().unwrap_or_default().message.unwrap_or_default();
        ensure!(
            why.contains("2001") && why.contains("2000"),
            "refusal of a budget over the ceiling: {why}"
        );

        let frugal = task_finished(&client, &ns, "frugal", timeout).await?;
        let fs = frugal.status.clone().unwrap_or_default();
        ensure!(
            fs.phase == Some(TaskPhase::Failed)
                && fs.message.as_deref().is_some_and(|m| m.contains("token budget exhausted")),
            "a 10-token budget: {:?} {:?}",
            fs.phase,
            fs.message
        );
        ensure!(
            fs.resources_used.unwrap_or_default().input_tokens == 0,
            "the provider was called on a budget that could not fit the prompt"
        );

        let unmarked = task_finished(&client, &ns, "unmarked", timeout).await?;
        let us = unmarked.status.clone().unwrap_or_default();
        ensure!(
            us.phase == Some(TaskPhase::Failed)
                && us.message.as_deref().is_some_and(|m| m.contains("unavailable")),
            "a model whose Secret is unmarked: {:?} {:?}",
            us.phase,
            us.message
        );

        // The keys are in no object or log a user or admin reads.
        let tasks_json = list_json::<Task>(&client, &ns).await?;
        let agents_json = list_json::<Agent>(&client, &ns).await?;
        let events = list_json::<Event>(&client, &ns).await?;
        let operator = operator_log(ctx, &client).await?;
        let executors = executor_log(ctx, &client, &ns).await?;
        ensure!(
            executors.contains("finished"),
            "the executors' logs say nothing of the tasks (wrong pods?)"
        );
        for (what, text) in [
            ("Tasks (status and attestations)", &tasks_json),
            ("Agents", &agents_json),
            ("Events", &events),
            ("operator logs", &operator),
            ("executor logs", &executors),
        ] {
            for key in [MARKED_KEY, UNMARKED_KEY] {
                ensure!(!text.contains(key), "{what} hold {key}");
            }
        }
        // The unmarked key is not even in the executor pods' specs.
        let pods = list_json::<Pod>(&client, &ns).await?;
        ensure!(!pods.contains("plain-key"), "an executor pod names the unmarked Secret");

        // The executor counts the tokens by namespace, Agent and model; its page holds no key.
        let page = pod_metrics(&client, &ns, "ari.dev/agent=ask").await?;
        let counter = |token_type: &str| {
            let head = format!(
                "ari_gen_ai_client_token_usage_total{{agent=\"ask\",model=\"llama\",namespace=\"{ns}\",token_type=\"{token_type}\"}} "
            );
            page.lines()
                .find_map(|l| l.strip_prefix(&head))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        ensure!(
            counter("input") == Some(used.input_tokens)
                && counter("output") == Some(used.output_tokens),
            "token counters {:?}/{:?}, the Task used {used:?}:\n{page}",
            counter("input"),
            counter("output")
        );
        ensure!(
            !page.contains(MARKED_KEY) && !page.contains(UNMARKED_KEY),
            "the metrics page holds a key"
        );
        Ok(())
    })
}

/// A ModelConfig's rate limit is the namespace's: two Agents of one pod each, granted a model
/// of 2 requests a minute, get one each. Against the whole limit per Agent (as before), the
/// second call of one would go through; shared, it would wait a minute, past its Task's
/// deadline, so it is refused `rate-limited` and the server is not asked.
fn a_models_limit_is_shared_by_every_agent_granted_it(m: &ModelsCtx) -> Result<()> {
    let ctx = &m.ctx;
    ctx.in_namespace("model-shares", |client, ns| async move {
        ctx.module_configmap(&ns, "ask-module", "ask")?;
        let grant =
            "  capabilities:\n    models:\n      allowed: [shared]\n  limits:\n    tokens: 2000\n";
        let yaml = [
            format!(
                "{}  limits:\n    requestsPerMinute: 2\n",
                model_config_yaml("shared", &m.server.base_url(), None)
            ),
            agent_yaml("ask-a", "ask-module", 1, grant),
            agent_yaml("ask-b", "ask-module", 1, grant),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        agent_ready(&client, &ns, "ask-a").await?;
        agent_ready(&client, &ns, "ask-b").await?;
        // Each executor has seen both Agents: two pods share the limit.
        wait::until(
            "both executors share the limit among 2 pods",
            wait::DEFAULT,
            || {
                let client = client.clone();
                let ns = ns.clone();
                async move {
                    let log = executor_log(ctx, &client, &ns)
                        .await
                        .map_err(|e| e.to_string())?;
                    let shared = log
                        .lines()
                        .filter(|l| {
                            l.contains("model rate limits shared out") && l.contains("\"pods\":2")
                        })
                        .count();
                    if shared >= 2 {
                        Ok(())
                    } else {
                        Err(format!("{shared} of 2 executors"))
                    }
                }
            },
        )
        .await?;
        let timeout = std::time::Duration::from_secs(180);
        ctx.apply_ok(&ns, &task_yaml("first", "ask-a", "What is ari?", ""))?;
        let first = task_finished(&client, &ns, "first", timeout).await?;
        expect_reason(&first, TaskPhase::Succeeded, TaskReason::Completed)?;
        let tasks = [
            task_yaml("second", "ask-a", "What is ari?", "  deadlineSeconds: 20\n"),
            task_yaml("other", "ask-b", "What is ari?", ""),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &tasks)?;
        let second = task_finished(&client, &ns, "second", timeout).await?;
        let st = second.status.clone().unwrap_or_default();
        ensure!(
            st.phase == Some(TaskPhase::Failed)
                && st.message.as_deref().is_some_and(|m| m.contains("rate")),
            "ask-a's second call in a minute, with a share of 1: {:?} {:?}",
            st.phase,
            st.message
        );
        ensure!(
            st.resources_used.unwrap_or_default().input_tokens == 0,
            "the refused call reached the server"
        );
        let other = task_finished(&client, &ns, "other", timeout).await?;
        expect_reason(&other, TaskPhase::Succeeded, TaskReason::Completed)?;
        Ok(())
    })
}
