//! The A2A gateway on a real control plane, judged by a client no one here wrote: the official
//! A2A Python SDK (`a2a-sdk` from PyPI, installed by scripts/a2a-sdk.sh) resolves cards, sends
//! messages, streams them (status, log and delegation events of an Agent that delegates), gets,
//! lists and cancels tasks, and is refused with a bad or under-privileged token. The gateway is
//! the chart's Deployment from `deploy/operator.yaml`, run by the e2e node agent.
//! Run: `cargo build --bins && scripts/build-agents.sh && cargo test -p ari-e2e --test a2a`.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use ari_crds::{Agent, Task, TaskPhase};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run_phases(
        start,
        vec![vec![
            (
                "a2a_sdk_sends_streams_gets_lists_and_cancels",
                sdk_round_trip,
            ),
            ("a2a_refuses_bad_and_underprivileged_tokens", bad_tokens),
            ("a2a_bounds_body_rate_and_streams", bounds),
            ("a2a_card_is_served_only_for_exposed_agents", cards),
            ("readme_cluster_sections_work_as_written", readme_sections),
            ("mcp_sdk_lists_and_calls_exposed_agents", mcp_clients),
            (
                "a2a_conversation_takes_replies_on_the_same_task_and_only_its_callers",
                conversation,
            ),
            (
                "a2a_caller_decides_a_waiting_delegation_on_the_same_task_and_is_attested",
                delegation_decided,
            ),
        ]],
    )
}

/// The cluster with the operator and the gateway; the gateway's bounds lowered so a trial can
/// reach them (20 requests/s, a burst of 40, one stream per caller).
fn start() -> Result<Ctx> {
    let ctx = Ctx::start_with_operator()?;
    ctx.set_gateway_env(&[
        "ARI_GATEWAY_RATE_PER_SECOND=20",
        "ARI_GATEWAY_RATE_BURST=40",
        "ARI_GATEWAY_MAX_STREAMS_PER_CALLER=1",
        "ARI_LOG_LEVEL=info,ari_gateway=debug",
    ])?;
    Ok(ctx)
}

/// `waiter`: an exposed Agent (fixtures/agents/relay) whose `spin` tasks run until cancelled.
fn waiter_yaml() -> String {
    agent_yaml(
        "waiter",
        "relay-module",
        1,
        "  config: waiter
  limits:
    fuel: 1000000000000
    timeoutSeconds: 300
  a2a:
    exposed: true
",
    )
}

/// Service accounts with the RBAC each caller needs, and a token for each.
fn callers(ctx: &Ctx, ns: &str) -> Result<Vec<(&'static str, String)>> {
    ctx.apply_ok(
        ns,
        "apiVersion: v1
kind: ServiceAccount
metadata: {name: caller}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: streamer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-caller}
rules:
  - apiGroups: [ari.dev]
    resources: [tasks]
    verbs: [create, get, list, patch]
  - apiGroups: [ari.dev]
    resources: [agents]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-reader}
rules:
  # tasks/a2a-all: every caller's A2A tasks, not only its own (the streamer follows a Task the
  # trial created).
  - apiGroups: [ari.dev]
    resources: [tasks, tasks/a2a-all]
    verbs: [get, list]
  - apiGroups: [ari.dev]
    resources: [agents]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: caller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-caller}
subjects: [{kind: ServiceAccount, name: caller}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-reader}
subjects: [{kind: ServiceAccount, name: reader}, {kind: ServiceAccount, name: streamer}]
",
    )?;
    let mut tokens = Vec::new();
    for (var, sa) in [
        ("A2A_TOKEN", "caller"),
        ("A2A_READER_TOKEN", "reader"),
        ("A2A_NOBODY_TOKEN", "nobody"),
        ("A2A_STREAM_TOKEN", "streamer"),
    ] {
        tokens.push((var, ctx.gateway_token(ns, sa)?));
    }
    Ok(tokens)
}

/// The research example (exposed, delegating to three subagents) and `waiter`, an exposed
/// Agent whose `spin` tasks run until cancelled.
async fn research_and_waiter(ctx: &Ctx, client: &kube::Client, ns: &str) -> Result<()> {
    for a in ["research", "wordcount", "keywords", "summarize"] {
        ctx.module_configmap(ns, &format!("{a}-module"), a)?;
    }
    ctx.module_configmap(ns, "relay-module", "relay")?;
    let example = repo().join("examples/delegation/agents.yaml");
    ctx.kubectl_ok(["apply", "-n", ns, "-f", &example.display().to_string()])?;
    ctx.apply_ok(ns, &waiter_yaml())?;
    for a in ["wordcount", "keywords", "summarize", "research", "waiter"] {
        agent_ready(client, ns, a).await?;
    }
    Ok(())
}

fn env(base: &str, ns: &str, tokens: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![("A2A_BASE", base.to_owned()), ("A2A_NS", ns.to_owned())];
    env.extend(tokens.iter().cloned());
    env
}

fn sdk_round_trip(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a", |client, ns| async move {
        research_and_waiter(ctx, &client, &ns).await?;
        let tokens = callers(ctx, &ns)?;
        let base = gateway_url(&client).await?;
        drive_a2a("main", &env(&base, &ns, &tokens))?;
        // What the SDK saw is what the cluster holds: Tasks labelled with their context, the
        // research tasks' children owned by them.
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let all = tasks.list(&Default::default()).await?.items;
        let from_a2a = all
            .iter()
            .filter(|t| {
                t.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("ari.dev/a2a-context"))
            })
            .count();
        ensure!(from_a2a >= 4, "{from_a2a} Tasks carry an A2A context");
        ensure!(
            all.iter().all(|t| t.phase() != TaskPhase::Running),
            "nothing is left running"
        );
        Ok(())
    })
}

/// The official MCP SDK's python (scripts/mcp-server.sh installs it).
fn mcp_python() -> Result<String> {
    if let Ok(p) = std::env::var("ARI_MCP_PYTHON") {
        return Ok(p);
    }
    let out = Command::new(repo().join("scripts/mcp-server.sh"))
        .output()
        .context("scripts/mcp-server.sh")?;
    ensure!(
        out.status.success(),
        "installing the MCP SDK failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
}

/// The gateway's MCP endpoint, judged by the official MCP Python SDK's client
/// (e2e/mcp/drive.py): the exposed Agents are its tools, a call runs a Task and answers with
/// its output and attestation digest, and a missing, bad, under-privileged or other
/// namespace's token is refused. The digest is the cluster Task's.
fn mcp_clients(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("mcp-gw", |client, ns| async move {
        research_and_waiter(ctx, &client, &ns).await?;
        let tokens = callers(ctx, &ns)?;
        let other = ctx.cluster.new_namespace("mcp-other").await?;
        let outsider = callers(ctx, &other)?;
        let token = |list: &[(&str, String)], var: &str| {
            list.iter()
                .find(|(v, _)| *v == var)
                .map(|(_, t)| t.clone())
                .context("a caller token")
        };
        let base = gateway_url(&client).await?;
        let out = Command::new(mcp_python()?)
            .arg(repo().join("e2e/mcp/drive.py"))
            .env("MCP_URL", format!("{base}/mcp/{ns}"))
            .env("MCP_TOKEN", token(&tokens, "A2A_TOKEN")?)
            .env("MCP_NOBODY_TOKEN", token(&tokens, "A2A_NOBODY_TOKEN")?)
            .env("MCP_OUTSIDER_TOKEN", token(&outsider, "A2A_TOKEN")?)
            .output()
            .context("running e2e/mcp/drive.py")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{stdout}");
        ensure!(
            out.status.success(),
            "drive.py failed:\n{stdout}\n{}",
            tail(&String::from_utf8_lossy(&out.stderr), 40)
        );
        let answer: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default())
                .context("drive.py's last line is the call's structured result")?;
        let name = answer["task"]
            .as_str()
            .context("the answer names its Task")?;
        let task = Api::<Task>::namespaced(client.clone(), &ns)
            .get(name)
            .await?;
        let status = task.status.clone().unwrap_or_default();
        let att = status.attestation.context("the Task has no attestation")?;
        ensure!(
            answer["attestationSha256"].as_str() == Some(att.sha256().as_str()),
            "the answer's digest {} is not the Task's {}",
            answer["attestationSha256"],
            att.sha256()
        );
        let caller = task
            .metadata
            .annotations
            .unwrap_or_default()
            .get("ari.dev/a2a-caller")
            .cloned()
            .unwrap_or_default();
        ensure!(
            caller == format!("system:serviceaccount:{ns}:caller"),
            "the Task is the caller's: {caller:?}"
        );
        Ok(())
    })
}

fn bad_tokens(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a-auth", |client, ns| async move {
        research_and_waiter(ctx, &client, &ns).await?;
        let tokens = callers(ctx, &ns)?;
        // A caller with every A2A right, but in another namespace.
        let other = ctx.cluster.new_namespace("a2a-other").await?;
        let outsider = callers(ctx, &other)?
            .into_iter()
            .find(|(var, _)| *var == "A2A_TOKEN")
            .map(|(_, token)| token)
            .context("the other namespace's caller token")?;
        let base = gateway_url(&client).await?;
        let mut env = env(&base, &ns, &tokens);
        env.push(("A2A_OUTSIDER_TOKEN", outsider));
        drive_a2a("auth", &env)
    })
}

fn bounds(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a-bounds", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.apply_ok(&ns, &waiter_yaml())?;
        agent_ready(&client, &ns, "waiter").await?;
        let tokens = callers(ctx, &ns)?;
        let base = gateway_url(&client).await?;
        // A Task the streams follow; it is A2A's because it carries a context label.
        ctx.apply_ok(
            &ns,
            &task_yaml("spinner", "waiter", "spin", "").replace(
                "metadata:\n  name: spinner",
                "metadata:\n  name: spinner\n  labels: {ari.dev/a2a-context: bounds}",
            ),
        )?;
        let mut env = env(&base, &ns, &tokens);
        env.push(("A2A_WAIT_TASK", "spinner".into()));
        let result = drive_a2a("bounds", &env);
        ctx.kubectl_ok([
            "-n",
            &ns,
            "patch",
            "task",
            "spinner",
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":true}}"#,
        ])?;
        result?;
        // The gateway still serves after all that.
        let still = curl_status(&format!(
            "{base}/a2a/{ns}/waiter/.well-known/agent-card.json"
        ))?;
        ensure!(still == 401, "the gateway still answers ({still})");
        Ok(())
    })
}

fn cards(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a-cards", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.module_configmap(&ns, "research-module", "research")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "public",
                "echo-module",
                1,
                "  description: Echoes its input.
  a2a:
    exposed: true
    publicCard: true
    skills: [{id: echo, name: Echo, description: Says it back}]
",
            ),
        )?;
        ctx.apply_ok(&ns, &agent_yaml("hidden", "echo-module", 1, ""))?;
        // Exposed, but without the network grant its guest needs: its tasks are refused.
        ctx.module_configmap(&ns, "fetch-module", "fetch")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml("fetcher", "fetch-module", 1, "  a2a:\n    exposed: true\n"),
        )?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "research",
                "research-module",
                1,
                "  a2a:\n    exposed: true\n",
            ),
        )?;
        // A subagent cannot be exposed: the API server refuses it.
        let refused = ctx.apply(
            &ns,
            &agent_yaml(
                "sub",
                "echo-module",
                1,
                "  mode: subagent\n  a2a:\n    exposed: true\n",
            ),
        )?;
        ensure!(
            !refused.status.success()
                && String::from_utf8_lossy(&refused.stderr).contains("cannot be exposed"),
            "a subagent-mode Agent is refused exposure: {}",
            String::from_utf8_lossy(&refused.stderr)
        );
        let tokens = callers(ctx, &ns)?;
        let base = gateway_url(&client).await?;
        // The gateway's Agent cache sees the new Agents within a watch event.
        let card = format!("{base}/a2a/{ns}/public/.well-known/agent-card.json");
        wait::until("the public card is served", wait::DEFAULT, || async {
            match curl_status(&card) {
                Ok(200) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await?;
        agent_ready(&client, &ns, "fetcher").await?;
        let key = signed_card_served(&client, &ns, &card).await?;
        let mut env = env(&base, &ns, &tokens);
        env.push(("A2A_CARD_KEY", key.clone()));
        drive_a2a("card", &env)?;
        // A changed card is signed again: the new one is served signed, and verifies.
        ctx.kubectl_ok([
            "patch",
            "agent",
            "public",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"description":"Echoes its input back."}}"#,
        ])?;
        let public_key = ari_model::attestation::parse_public_key(&key)?;
        wait::until(
            "the changed card is served signed",
            wait::DEFAULT,
            || async {
                let served = curl_json(&card).map_err(|e| e.to_string())?;
                if served["description"] != "Echoes its input back." {
                    return Err(format!("still the old card: {}", served["description"]));
                }
                ari_model::card::verify(&served, &public_key).map_err(|e| e.to_string())
            },
        )
        .await?;
        // An Agent that is not exposed has no card, and the operator signs none.
        let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
        let hidden = wait::until("the hidden Agent reconciled", wait::DEFAULT, || async {
            let status = agents
                .get("hidden")
                .await
                .map_err(|e| e.to_string())?
                .status;
            status
                .filter(|s| s.attestation_public_key.is_some())
                .ok_or_else(|| "no attestation key in its status yet".to_owned())
        })
        .await?;
        ensure!(
            hidden.a2a_card.is_none(),
            "the hidden Agent's card is signed: {hidden:?}"
        );
        Ok(())
    })
}

/// Waits until the gateway serves the public card with the operator's signature, checks it in
/// Rust too, and returns the Agent's public key (hex) it verifies with.
async fn signed_card_served(client: &kube::Client, ns: &str, card: &str) -> Result<String> {
    let agents: Api<Agent> = Api::namespaced(client.clone(), ns);
    wait::until(
        "the public card is served signed",
        wait::DEFAULT,
        || async {
            let status = agents
                .get("public")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let (Some(key), Some(signed)) = (status.attestation_public_key, status.a2a_card) else {
                return Err("the Agent's status has no key or card signature yet".into());
            };
            let served = curl_json(card).map_err(|e| e.to_string())?;
            let public_key =
                ari_model::attestation::parse_public_key(&key).map_err(|e| e.to_string())?;
            ari_model::card::verify(&served, &public_key).map_err(|e| e.to_string())?;
            let digest = ari_model::card::sha256(&served).map_err(|e| e.to_string())?;
            if digest != signed.sha256 {
                return Err(format!("served card {digest}, signed {}", signed.sha256));
            }
            Ok(key)
        },
    )
    .await
    .map_err(Into::into)
}

/// The JSON body of a plain GET (curl, as a user would).
fn curl_json(url: &str) -> Result<serde_json::Value> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "10", url])
        .output()
        .context("curl")?;
    ensure!(out.status.success(), "GET {url}: curl {}", out.status);
    serde_json::from_slice(&out.stdout).context("the card's JSON")
}

/// The status code of a plain GET (curl, as a user would).
fn curl_status(url: &str) -> Result<u16> {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            url,
        ])
        .output()
        .context("curl")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("curl's status code")
}

/// The first ```sh block after `heading` in the README.
fn readme_block<'a>(readme: &'a str, heading: &str) -> Result<&'a str> {
    let section = readme
        .split_once(&format!("\n{heading}\n"))
        .with_context(|| format!("README has no {heading:?}"))?
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .with_context(|| format!("no sh block under {heading:?}"))?
        .0;
    Ok(block)
}

/// The README's sections for a cluster — the walk-through ("On a cluster"), delegation, A2A
/// and Plans — run in order as written by bash in the `default` namespace, with the variables
/// `scripts/cluster.sh` prints (`KUBECONFIG`, `PATH`, `ARI_GATEWAY`) in place of the
/// `export NAME=...   # as printed` lines.
fn readme_sections(ctx: &Ctx) -> Result<()> {
    let readme = std::fs::read_to_string(repo().join("README.md"))?;
    let gateway = ctx
        .rt
        .block_on(async { gateway_url(&ctx.cluster.client()).await })?;
    let printed = [
        (
            "KUBECONFIG",
            ctx.cluster.kubeconfig_path().display().to_string(),
        ),
        (
            "PATH",
            format!(
                "{}:{}:{}",
                ctx.cluster.bin_dir().display(),
                ari_e2e::built_binary("ari")
                    .and_then(|p| p.parent().map(|d| d.display().to_string()))
                    .unwrap_or_default(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ),
        ("ARI_GATEWAY", gateway),
    ];
    let headings = [
        "## On a cluster",
        "## Agents that delegate",
        "## A2A",
        "## Plans",
    ];
    let mut outputs = Vec::new();
    for heading in headings {
        let mut script = String::from("set -euo pipefail\n");
        for line in readme_block(&readme, heading)?.lines() {
            let placeholder = printed
                .iter()
                .any(|(k, _)| line.starts_with(&format!("export {k}=...")));
            if !placeholder {
                script.push_str(line);
                script.push('\n');
            }
        }
        let out = Command::new("/bin/bash")
            .arg("-c")
            .arg(&script)
            .current_dir(repo())
            .envs(printed.iter().map(|(k, v)| (*k, v.as_str())))
            .env("ARI_TARGET_DIR", ari_e2e::target_dir())
            .output()
            .context("running the README's commands")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        ensure!(
            out.status.success(),
            "README {heading:?} failed ({}):\n{stdout}\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 20)
        );
        outputs.push(stdout);
    }
    let a2a = &outputs[2];
    ensure!(
        a2a.contains(r#""name":"echo""#),
        "no agent card of echo in:\n{a2a}"
    );
    ensure!(
        a2a.contains("TASK_STATE_COMPLETED") && a2a.contains(r#""text":"hi""#),
        "SendMessage did not answer with echo's completed task:\n{a2a}"
    );
    Ok(())
}

/// A conversation (issue 30, item 3) driven by the official SDK (`drive.py conversation`):
/// three turns of `intake` on one A2A task, another caller refused. Then what the cluster
/// holds: the turns are Tasks `kubectl get -l ari.dev/conversation=` lists, each reply's
/// attestation signs the turn before it; a namespace user cannot join the caller's
/// conversation with kubectl (a reply without the caller's name ends `ConversationRefused`,
/// one claiming it is refused by the admission policy).
fn conversation(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a-chat", |client, ns| async move {
        ctx.module_configmap(&ns, "intake-module", "intake")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml("intake", "intake-module", 1, "  a2a:\n    exposed: true\n"),
        )?;
        agent_ready(&client, &ns, "intake").await?;
        let mut tokens = callers(ctx, &ns)?;
        ctx.apply_ok(
            &ns,
            "apiVersion: v1
kind: ServiceAccount
metadata: {name: other}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-caller}
subjects: [{kind: ServiceAccount, name: other}]
",
        )?;
        tokens.push(("A2A_OTHER_TOKEN", ctx.gateway_token(&ns, "other")?));
        let base = gateway_url(&client).await?;
        drive_a2a("conversation", &env(&base, &ns, &tokens))?;

        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let all = tasks.list(&Default::default()).await?.items;
        let first = all
            .iter()
            .find(|t| t.spec.continues.is_none())
            .context("the conversation's first Task")?
            .name_any();
        let selector = format!("ari.dev/conversation={first}");
        let turns = wait::until("the conversation's three turns labelled", wait::DEFAULT, || {
            let tasks = tasks.clone();
            let selector = selector.clone();
            async move {
                let listed = tasks
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?
                    .items;
                if listed.len() == 3 {
                    Ok(listed)
                } else {
                    Err(format!("{} Tasks labelled", listed.len()))
                }
            }
        })
        .await?;
        for reply in turns.iter().filter(|t| t.spec.continues.is_some()) {
            let previous = reply.spec.continues.clone().unwrap_or_default();
            let before = tasks.get(&previous).await?;
            let link = reply
                .status
                .as_ref()
                .and_then(|s| s.attestation.as_ref())
                .context("a reply's attestation")?
                .predicate()?
                .conversation
                .context("a reply's attestation names its place")?;
            let signed = before
                .status
                .and_then(|s| s.attestation)
                .context("the previous turn's attestation")?
                .sha256();
            ensure!(
                link.previous == previous
                    && link.previous_attestation_sha256 == signed
                    && link.conversation == first,
                "{} signs {link:?}, not {previous} ({signed}) of {first}",
                reply.name_any()
            );
        }

        // A namespace user replies to the caller's question with kubectl: refused when it
        // runs (no caller on it), and refused at once when it claims to be the caller.
        let last = turns
            .iter()
            .max_by_key(|t| t.labels().get("ari.dev/turn").cloned())
            .map(ResourceExt::name_any)
            .context("the last turn")?;
        let asked = tasks
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .find(|t| {
                t.status.as_ref().and_then(|s| s.reason) == Some(ari_crds::TaskReason::InputRequired)
            })
            .map(|t| t.name_any())
            .context("a turn that asked")?;
        ensure!(asked != last, "the last turn completed");
        ctx.apply_ok(
            &ns,
            &task_yaml("join", "intake", "I am the caller", &format!("  continues: {asked}\n")),
        )?;
        let joined = task_finished(&client, &ns, "join", wait::DEFAULT).await?;
        let status = joined.status.unwrap_or_default();
        ensure!(
            status.reason == Some(ari_crds::TaskReason::ConversationRefused)
                && status.message.as_deref().is_some_and(|m| m.contains("another caller")),
            "a kubectl reply to the caller's question: {:?} {:?}",
            status.reason,
            status.message
        );
        let forged = ctx.apply(
            &ns,
            &task_yaml("forged", "intake", "I am the caller", &format!("  continues: {asked}\n"))
                .replace(
                    "metadata:\n  name: forged",
                    &format!(
                        "metadata:\n  name: forged\n  annotations: {{ari.dev/a2a-caller: \"system:serviceaccount:{ns}:caller\"}}"
                    ),
                ),
        )?;
        let err = String::from_utf8_lossy(&forged.stderr);
        ensure!(
            !forged.status.success() && err.contains("written only by"),
            "a Task claiming the caller's name is refused: {err}"
        );
        Ok(())
    })
}

/// Issue 30, item 2, over A2A for a delegation: a SendMessage to `fanout`, whose grant marks
/// its delegations to `wordcount`, comes back input-required naming the call, its kind
/// (Delegation) and the Agent; the caller, who may update Tasks (what deciding needs, as for
/// `kubectl ari approve`), answers on the same task with a decision (e2e/a2a/drive.py
/// `approve-delegation`), and the task completes. The gateway writes the decision in the
/// caller's name, and the signed attestation names them; a rejected delegation's guest gives
/// up with the rejection, which carries the reason.
fn delegation_decided(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("a2a-decide", |client, ns| async move {
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(&ns, &agent_yaml("wordcount", "wordcount-module", 1, ""))?;
        let grant = "  limits:
    timeoutSeconds: 600
  capabilities:
    delegation:
      agents: [wordcount]
      approval:
        agents: [wordcount]
  a2a:
    exposed: true
";
        ctx.apply_ok(&ns, &agent_yaml("fanout", "fanout-module", 1, grant))?;
        agent_ready(&client, &ns, "wordcount").await?;
        let agent = agent_ready(&client, &ns, "fanout").await?;
        let token = ctx.gateway_caller(
            &ns,
            "decider",
            &[(&["tasks"], &["create", "get", "update"])],
        )?;
        let base = gateway_url(&client).await?;
        drive_a2a(
            "approve-delegation",
            &[
                ("A2A_BASE", base),
                ("A2A_NS", ns.clone()),
                ("A2A_TOKEN", token.trim().to_owned()),
            ],
        )?;

        let who = format!("system:serviceaccount:{ns}:decider");
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let decided: Vec<Task> = tasks
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|t| t.spec.approvals.is_some())
            .collect();
        ensure!(
            decided.len() == 2,
            "two Tasks decided over A2A, found {}",
            decided.len()
        );
        for task in &decided {
            let approvals = task.spec.approvals.clone().unwrap_or_default();
            ensure!(
                approvals.len() == 1 && approvals[0].approver == who,
                "{}: the decision is written in the caller's name: {approvals:?}",
                task.name_any()
            );
            verify_attestation(task, &agent)?;
            let signed = task
                .status
                .as_ref()
                .and_then(|s| s.attestation.clone())
                .context("no attestation")?
                .predicate()?;
            ensure!(
                signed.approvals.len() == 1
                    && signed.approvals[0].approver == who
                    && signed.approvals[0].call == approvals[0].call
                    && signed.approvals[0].decision == approvals[0].decision
                    && signed.approvals[0].subject
                        == ari_crds::CallSubject::Delegation {
                            agent: "wordcount".into()
                        },
                "{}: the attestation signs the A2A decider: {:?}",
                task.name_any(),
                signed.approvals
            );
        }
        ensure!(
            decided
                .iter()
                .filter(|t| t.phase() == TaskPhase::Succeeded)
                .count()
                == 1,
            "one approved Task succeeded: {:?}",
            decided.iter().map(|t| t.phase()).collect::<Vec<_>>()
        );
        Ok(())
    })
}
