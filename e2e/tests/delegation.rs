//! Delegation on a real control plane: guests whose children are Task objects created by their
//! executors, with the grant, depth, children, mode and budget rules, cancellation of a tree,
//! no deadlock at `concurrency: 1`, an executor lost while a parent waits, and the children of
//! a parent that ended with its executor.
//! (The forged-parent attack is a tenant trial: `cargo test -p ari-e2e --test tenant`.)
//! Run: `scripts/build-agents.sh && cargo build --bins && cargo test -p ari-e2e --test delegation`.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ari_crds::{Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run(vec![
        (
            "a_primary_agent_fans_out_to_subagents_and_merges_their_results",
            fan_out,
        ),
        (
            "a_delegation_outside_the_grant_fails_before_any_task_is_created",
            denied,
        ),
        (
            "a_concurrency_one_chain_reaches_the_depth_limit_without_deadlock",
            chain,
        ),
        (
            "two_agents_delegating_to_each_other_stop_at_the_depth_limit",
            mutual_recursion,
        ),
        ("a_delegation_bomb_is_stopped_at_the_children_limit", bomb),
        (
            "cancelling_a_parent_cancels_its_running_child_and_frees_the_slots",
            cancel_tree,
        ),
        (
            "an_executor_lost_while_a_parent_waits_leaves_one_child_and_the_tree_finishes",
            lost_parent,
        ),
        (
            "the_child_of_a_parent_whose_executor_died_is_cancelled",
            orphaned_child,
        ),
        (
            "a_child_asking_more_fuel_than_its_parent_can_spare_gets_budget_exhausted",
            fuel_reserve,
        ),
        (
            "cancelling_a_parent_interrupts_its_childs_http_call",
            cancel_http,
        ),
        (
            "kubectl_ari_verify_replays_a_whole_tree_and_names_the_child_that_fails",
            verify_tree,
        ),
        (
            "a_delegation_to_a_marked_agent_waits_for_kubectl_ari_approve_and_is_attested",
            approved_child,
        ),
    ])
}

/// An Agent with one executor of `concurrency` slots; `extra` is appended to `spec`.
fn agent(name: &str, module: &str, concurrency: u32, extra: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  module:
    configMap:
      name: {module}
      key: module.wasm
  executor:
    replicas: 1
    concurrency: {concurrency}
{extra}"
    )
}

/// A relay Agent (fixtures/agents/relay) that calls `next` and may delegate as `grant` says.
fn relay(name: &str, next: &str, concurrency: u32, grant: &str) -> String {
    agent(
        name,
        "relay-module",
        concurrency,
        &format!(
            "  config: {next}
  limits:
    fuel: 1000000000000
    timeoutSeconds: 120
  capabilities:
    delegation:
{grant}"
        ),
    )
}

/// The Tasks a parent created (label `ari.dev/parent`).
async fn children_of(client: &Client, ns: &str, parent: &str) -> Result<Vec<Task>> {
    Ok(Api::<Task>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("ari.dev/parent={parent}")))
        .await?
        .items)
}

fn output(t: &Task) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.output.clone())
        .unwrap_or_default()
}

fn fan_out(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("research", |client, ns| async move {
        // The example as a user runs it (examples/delegation/README.md).
        for a in ["research", "wordcount", "keywords", "summarize"] {
            ctx.module_configmap(&ns, &format!("{a}-module"), a)?;
        }
        let example = repo().join("examples/delegation");
        ctx.kubectl_ok([
            "apply",
            "-n",
            &ns,
            "-f",
            &example.join("agents.yaml").display().to_string(),
        ])?;
        for a in ["wordcount", "keywords", "summarize"] {
            agent_ready(&client, &ns, a).await?;
        }
        let parent_agent = agent_ready(&client, &ns, "research").await?;
        ctx.kubectl_ok([
            "apply",
            "-n",
            &ns,
            "-f",
            &example.join("task.yaml").display().to_string(),
        ])?;
        let parent = task_finished(&client, &ns, "research-ari", wait::DEFAULT).await?;
        expect_reason(&parent, TaskPhase::Succeeded, TaskReason::Completed)?;
        let merged: serde_json::Value = serde_json::from_str(&output(&parent))
            .with_context(|| format!("output {:?}", output(&parent)))?;
        ensure!(
            merged["wordcount"]["words"] == 42
                && merged["keywords"]
                    == serde_json::json!(["agents", "answer", "budget", "comes", "controls"])
                && merged["summarize"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("Agents delegate work to subagents.")),
            "merged {merged}"
        );
        verify_attestation(&parent, &parent_agent)?;
        let status = parent.status.clone().unwrap_or_default();
        let agents: Vec<&str> = status.children.iter().map(|c| c.agent.as_str()).collect();
        ensure!(
            agents == ["wordcount", "keywords", "summarize"],
            "children {:?}",
            status.children
        );
        let used = status.resources_used.context("no resourcesUsed")?;
        let listed: u64 = status.children.iter().map(|c| c.fuel).sum();
        ensure!(
            used.children_fuel == listed && listed > 0 && used.fuel > used.children_fuel,
            "fuel {} childrenFuel {} listed {listed}",
            used.fuel,
            used.children_fuel
        );
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        for listed in &status.children {
            ensure!(listed.phase == TaskPhase::Succeeded, "{listed:?}");
            let name = listed.name.clone().context("a started child has a name")?;
            let child = tasks.get(&name).await?;
            expect_reason(&child, TaskPhase::Succeeded, TaskReason::Completed)?;
            let cs = child.status.clone().unwrap_or_default();
            ensure!(
                cs.parent.as_deref() == Some("research-ari"),
                "status.parent {:?}",
                cs.parent
            );
            let spec_parent = child.spec.parent.clone().context("spec.parent")?;
            ensure!(
                spec_parent.depth == 1 && spec_parent.agent == "research",
                "{spec_parent:?}"
            );
            ensure!(
                child
                    .owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == parent.metadata.uid.as_ref()),
                "the child is owned by its parent"
            );
            // The parent's attestation covers exactly this child's attestation.
            let digest = cs.attestation.as_ref().map(|a| a.sha256());
            ensure!(
                digest == listed.attestation_sha256,
                "child {name}: attestation {digest:?}, parent lists {:?}",
                listed.attestation_sha256
            );
            ensure!(
                cs.resources_used.map(|u| u.fuel) == Some(listed.fuel),
                "child {name} fuel"
            );
        }

        // Modes: a subagent takes no user Task, and says so in status and an Event.
        ctx.apply_ok(&ns, &task_yaml("direct", "keywords", "a b c", ""))?;
        let direct = task_finished(&client, &ns, "direct", wait::DEFAULT).await?;
        expect_reason(&direct, TaskPhase::Failed, TaskReason::ModeRefused)?;
        event_with_reason(&client, &ns, "direct", "ModeRefused").await?;
        Ok(())
    })
}

fn denied(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("denied", |client, ns| async move {
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent("echo", "echo-module", 1, ""))?;
        // It calls `echo`, but only `wordcount` is granted.
        ctx.apply_ok(
            &ns,
            &agent(
                "research",
                "fanout-module",
                1,
                "  config: echo
  capabilities:
    delegation:
      agents: [wordcount]
",
            ),
        )?;
        agent_ready(&client, &ns, "research").await?;
        ctx.apply_ok(&ns, &task_yaml("doc", "research", "one two", ""))?;
        let t = task_finished(&client, &ns, "doc", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let message = t
            .status
            .clone()
            .unwrap_or_default()
            .message
            .unwrap_or_default();
        ensure!(message.contains("echo"), "message {message:?}");
        let created = children_of(&client, &ns, "doc").await?;
        ensure!(
            created.is_empty(),
            "a refused delegation created {} Tasks",
            created.len()
        );
        Ok(())
    })
}

/// Output of `chain` after `levels` delegations ended by the depth limit.
fn chained(levels: usize) -> String {
    format!("{}bottom{}", "up(".repeat(levels), ")".repeat(levels))
}

fn chain(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("chain", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        // One slot: every level waits on the next one, which must run in that same executor.
        ctx.apply_ok(
            &ns,
            &relay(
                "relay",
                "relay",
                1,
                "      agents: [relay]\n      maxDepth: 3\n",
            ),
        )?;
        let relay_agent = agent_ready(&client, &ns, "relay").await?;
        ctx.apply_ok(&ns, &task_yaml("root", "relay", "chain", ""))?;
        let t = task_finished(&client, &ns, "root", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(output(&t) == chained(3), "output {:?}", output(&t));
        // Every level ran with the Agent's `config: relay`, and its attestation signs that.
        verify_attestation(&t, &relay_agent)?;
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        for (name, depth) in [("root-0", 1), ("root-0-0", 2), ("root-0-0-0", 3)] {
            let child = tasks.get(name).await?;
            expect_reason(&child, TaskPhase::Succeeded, TaskReason::Completed)?;
            verify_attestation(&child, &relay_agent)?;
            ensure!(
                child.spec.parent.as_ref().map(|p| p.depth) == Some(depth),
                "{name}: {:?}",
                child.spec.parent
            );
        }
        Ok(())
    })
}

fn mutual_recursion(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("mutual", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.apply_ok(
            &ns,
            &relay(
                "ping",
                "pong",
                1,
                "      agents: [pong]\n      maxDepth: 4\n",
            ),
        )?;
        ctx.apply_ok(
            &ns,
            &relay(
                "pong",
                "ping",
                1,
                "      agents: [ping]\n      maxDepth: 4\n",
            ),
        )?;
        agent_ready(&client, &ns, "ping").await?;
        agent_ready(&client, &ns, "pong").await?;
        ctx.apply_ok(&ns, &task_yaml("serve", "ping", "chain", ""))?;
        let t = task_finished(&client, &ns, "serve", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        // ping(0) → pong(1) → ping(2) → pong(3) → ping(4), which may go no deeper.
        ensure!(output(&t) == chained(4), "output {:?}", output(&t));
        Ok(())
    })
}

fn bomb(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("bomb", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.apply_ok(
            &ns,
            &relay(
                "relay",
                "relay",
                2,
                "      agents: [relay]\n      maxChildren: 5\n",
            ),
        )?;
        agent_ready(&client, &ns, "relay").await?;
        ctx.apply_ok(&ns, &task_yaml("boom", "relay", "bomb", ""))?;
        let t = task_finished(&client, &ns, "boom", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            output(&t).starts_with("started=5 then") && output(&t).contains("children limit"),
            "output {:?}",
            output(&t)
        );
        let status = t.status.clone().unwrap_or_default();
        let listed = status.children;
        ensure!(listed.len() == 5, "children {listed:?}");
        // The sixth start was refused, and counted.
        ensure!(
            status.delegations_refused == Some(1),
            "delegationsRefused {:?}",
            status.delegations_refused
        );
        // Never awaited, so cancelled with the parent's end; none is left running.
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        wait::until("every child of the bomb ended", wait::DEFAULT, || async {
            let children = children_of(&client, &ns, "boom")
                .await
                .map_err(|e| e.to_string())?;
            let running: Vec<String> = children
                .iter()
                .filter(|c| !c.is_finished())
                .map(|c| c.name_any())
                .collect();
            if children.len() == 5 && running.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} children, still running: {running:?}",
                    children.len()
                ))
            }
        })
        .await?;
        let first = api.get("boom-0").await?;
        ensure!(
            first.spec.cancelled == Some(true) || first.is_finished(),
            "boom-0 {:?}",
            first.status
        );
        Ok(())
    })
}

fn cancel_tree(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("canceltree", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.apply_ok(
            &ns,
            &relay(
                "relay",
                "relay",
                1,
                "      agents: [relay]\n      maxDepth: 3\n",
            ),
        )?;
        agent_ready(&client, &ns, "relay").await?;
        // The parent waits on a child that spins until stopped.
        ctx.apply_ok(&ns, &task_yaml("waiter", "relay", "wait", ""))?;
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        wait::until("the child runs", wait::DEFAULT, || async {
            let child = api.get("waiter-0").await.map_err(|e| e.to_string())?;
            match child.phase() {
                TaskPhase::Running => Ok(()),
                p => Err(format!("child {p:?}")),
            }
        })
        .await?;
        ctx.kubectl_ok([
            "-n",
            &ns,
            "patch",
            "task",
            "waiter",
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":true}}"#,
        ])?;
        let parent = task_finished(&client, &ns, "waiter", Duration::from_secs(60)).await?;
        expect_reason(&parent, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        ensure!(
            output(&parent).is_empty(),
            "a cancelled parent keeps no output"
        );
        let child = task_finished(&client, &ns, "waiter-0", Duration::from_secs(60)).await?;
        expect_reason(&child, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        // The one slot is free again: a chain that needs it end to end succeeds.
        ctx.apply_ok(&ns, &task_yaml("after", "relay", "chain", ""))?;
        let t = task_finished(&client, &ns, "after", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(output(&t) == chained(3), "output {:?}", output(&t));
        Ok(())
    })
}

fn lost_parent(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("lostparent", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.module_configmap(&ns, "loop-module", "sha256-loop")?;
        ctx.apply_ok(
            &ns,
            &agent(
                "loop",
                "loop-module",
                1,
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 120\n",
            ),
        )?;
        ctx.apply_ok(&ns, &relay("relay", "loop", 1, "      agents: [loop]\n"))?;
        agent_ready(&client, &ns, "loop").await?;
        agent_ready(&client, &ns, "relay").await?;
        // The child works for seconds, long enough to lose the parent's executor meanwhile.
        ctx.apply_ok(
            &ns,
            &task_yaml("parent", "relay", "pass:20000000 abc", "  retries: 2\n"),
        )?;
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        let parent_pod = wait::until("the child runs", wait::DEFAULT, || async {
            let child = api.get("parent-0").await.map_err(|e| e.to_string())?;
            let parent = api.get("parent").await.map_err(|e| e.to_string())?;
            match (child.phase(), parent.status.and_then(|s| s.executor)) {
                (TaskPhase::Running, Some(pod)) => Ok(pod),
                (p, _) => Err(format!("child {p:?}")),
            }
        })
        .await?;
        ctx.node.kill_pod_process(&ns, &parent_pod)?;
        let parent = task_finished(&client, &ns, "parent", Duration::from_secs(240)).await?;
        expect_reason(&parent, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            output(&parent).starts_with("got("),
            "output {:?}",
            output(&parent)
        );
        let children = children_of(&client, &ns, "parent").await?;
        ensure!(
            children.len() == 1,
            "{} children, want exactly 1",
            children.len()
        );
        let child = &children[0];
        expect_reason(child, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            child.attempts() == 1,
            "the child ran {} times",
            child.attempts()
        );
        ensure!(
            output(&parent) == format!("got({})", output(child)),
            "parent {:?}, child {:?}",
            output(&parent),
            output(child)
        );
        Ok(())
    })
}

/// Issue 26, item 13: a parent without retries loses its executor while its child spins; the
/// operator fails the parent `ExecutorLost`, and nobody was left to cancel the child, which
/// spun on to its deadline. Now the operator cancels it.
fn orphaned_child(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("orphan", |client, ns| async move {
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        // The child runs on another Agent's executor, which lives on.
        ctx.apply_ok(
            &ns,
            &agent(
                "spinner",
                "relay-module",
                1,
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 300\n",
            ),
        )?;
        ctx.apply_ok(
            &ns,
            &relay("waiter", "spinner", 1, "      agents: [spinner]\n"),
        )?;
        agent_ready(&client, &ns, "spinner").await?;
        agent_ready(&client, &ns, "waiter").await?;
        ctx.apply_ok(
            &ns,
            &task_yaml("parent", "waiter", "wait", "  retries: 0\n"),
        )?;
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        let parent_pod = wait::until("the child spins", wait::DEFAULT, || async {
            let child = api.get("parent-0").await.map_err(|e| e.to_string())?;
            let parent = api.get("parent").await.map_err(|e| e.to_string())?;
            match (child.phase(), parent.status.and_then(|s| s.executor)) {
                (TaskPhase::Running, Some(pod)) => Ok(pod),
                (p, _) => Err(format!("child {p:?}")),
            }
        })
        .await?;
        ctx.node.kill_pod_process(&ns, &parent_pod)?;
        let parent = task_finished(&client, &ns, "parent", wait::DEFAULT).await?;
        expect_reason(&parent, TaskPhase::Failed, TaskReason::ExecutorLost)?;
        // Well before the child's own deadline (the parent's 120 s).
        let child = task_finished(&client, &ns, "parent-0", Duration::from_secs(60)).await?;
        expect_reason(&child, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        ensure!(
            child.spec.cancelled == Some(true),
            "the operator marks the child cancelled"
        );
        event_with_reason(&client, &ns, "parent-0", "ParentEnded").await?;
        Ok(())
    })
}

/// Issue 26 item 19: the shipped fan-out asks 50 M fuel per child. Under a 50 M budget the
/// first child used to take all of it: the parent died `FuelExhausted` at its next instruction.
/// The ask is now refused `budget-exhausted`, which the guest reports; with room for its
/// children and the parent's reserve, the same fan-out completes.
fn fuel_reserve(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("reserve", |client, ns| async move {
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(&ns, &agent("wordcount", "wordcount-module", 2, ""))?;
        ctx.apply_ok(
            &ns,
            &agent(
                "fanout",
                "fanout-module",
                2,
                "  capabilities:\n    delegation:\n      agents: [wordcount]\n",
            ),
        )?;
        agent_ready(&client, &ns, "wordcount").await?;
        agent_ready(&client, &ns, "fanout").await?;
        let lines = "one two\nthree\nfour five six";
        ctx.apply_ok(
            &ns,
            &task_yaml("tight", "fanout", lines, "  fuel: 50000000\n"),
        )?;
        ctx.apply_ok(
            &ns,
            &task_yaml("roomy", "fanout", lines, "  fuel: 200000000\n"),
        )?;
        let tight = task_finished(&client, &ns, "tight", wait::DEFAULT).await?;
        expect_reason(&tight, TaskPhase::Failed, TaskReason::AgentError)?;
        let message = tight
            .status
            .clone()
            .unwrap_or_default()
            .message
            .unwrap_or_default();
        ensure!(
            message.contains("not enough fuel for this child")
                && message.contains("to await its children"),
            "tight: message {message:?}"
        );
        let created = children_of(&client, &ns, "tight").await?;
        ensure!(
            created.is_empty(),
            "tight started {} children",
            created.len()
        );
        let roomy = task_finished(&client, &ns, "roomy", wait::DEFAULT).await?;
        expect_reason(&roomy, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            output(&roomy) == r#"{"parts":3,"words":6}"#,
            "roomy: output {:?}",
            output(&roomy)
        );
        Ok(())
    })
}

/// A TCP server on 127.0.0.1 that accepts connections and never answers (what a stuck or
/// hostile server does; a real HTTP server answers, so this one is scripted). Counts the
/// connections it holds; they are closed when the test process ends.
fn silent_server() -> Result<(u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    Ok((port, accepted))
}

/// Issue 26 item 20: a child blocked in an HTTP call stayed Running long after its parent was
/// cancelled (until the call's 30 s timeout). Cancellation now interrupts the call in flight:
/// the child ends `Cancelled` well before that timeout.
fn cancel_http(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("cancelhttp", |client, ns| async move {
        use std::sync::atomic::Ordering;
        let (port, accepted) = silent_server()?;
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.module_configmap(&ns, "fetch-module", "fetch")?;
        ctx.apply_ok(
            &ns,
            &agent(
                "fetcher",
                "fetch-module",
                1,
                &format!(
                    "  limits:\n    timeoutSeconds: 120\n  capabilities:\n    network:\n      allowedHosts: [\"http://127.0.0.1:{port}\"]\n"
                ),
            ),
        )?;
        ctx.apply_ok(&ns, &relay("relay", "fetcher", 1, "      agents: [fetcher]\n"))?;
        agent_ready(&client, &ns, "fetcher").await?;
        agent_ready(&client, &ns, "relay").await?;
        let url = format!("pass:http://127.0.0.1:{port}/hang");
        ctx.apply_ok(&ns, &task_yaml("waiter", "relay", &url, ""))?;
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        wait::until("the child is blocked in its HTTP call", wait::DEFAULT, || async {
            let child = api.get("waiter-0").await.map_err(|e| e.to_string())?;
            match (child.phase(), accepted.load(Ordering::SeqCst)) {
                (TaskPhase::Running, n) if n > 0 => Ok(()),
                (p, n) => Err(format!("child {p:?}, {n} connections")),
            }
        })
        .await?;
        ctx.kubectl_ok([
            "-n",
            &ns,
            "patch",
            "task",
            "waiter",
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":true}}"#,
        ])?;
        let parent = task_finished(&client, &ns, "waiter", Duration::from_secs(60)).await?;
        expect_reason(&parent, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        // Half the call's own 30 s timeout: only a cancel that reaches the call ends it here.
        let child = task_finished(&client, &ns, "waiter-0", Duration::from_secs(15)).await?;
        expect_reason(&child, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        Ok(())
    })
}

/// `kubectl ari verify` of a parent checks and replays every Task of its tree from what the
/// cluster keeps; a child whose kept trace was replaced, or a Task made later under a child's
/// name (a valid run of its own, but not the one the parent's attestation signs), fails by name.
fn verify_tree(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("verify-tree", |client, ns| async move {
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        let keep = "  trace: Keep\n";
        ctx.apply_ok(&ns, &agent("wordcount", "wordcount-module", 4, keep))?;
        let grant = "  capabilities:\n    delegation:\n      agents: [wordcount]\n";
        ctx.apply_ok(
            &ns,
            &agent("fanout", "fanout-module", 2, &format!("{keep}{grant}")),
        )?;
        agent_ready(&client, &ns, "wordcount").await?;
        agent_ready(&client, &ns, "fanout").await?;
        ctx.apply_ok(
            &ns,
            &task_yaml("doc", "fanout", "one two\nthree\nfour five six", ""),
        )?;
        let parent = task_finished(&client, &ns, "doc", wait::DEFAULT).await?;
        expect_reason(&parent, TaskPhase::Succeeded, TaskReason::Completed)?;
        let children: Vec<String> = parent
            .status
            .clone()
            .unwrap_or_default()
            .children
            .iter()
            .filter_map(|c| c.name.clone())
            .collect();
        ensure!(children.len() == 3, "children {children:?}");

        let verify = |args: &[&str]| -> Result<(String, String, Option<i32>)> {
            let mut all = vec!["verify"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["-n", &ns]);
            let out = ctx.kubectl_ari(&all)?;
            Ok((
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
                out.status.code(),
            ))
        };
        let (_, err, code) = verify(&["task/doc"])?;
        ensure!(
            code == Some(0)
                && err
                    .matches("replayed: same output, trace and ending")
                    .count()
                    == 4
                && err.contains("verified: 4 Task(s)"),
            "verify of the tree: {code:?} {err}"
        );
        // `ari verify task/NAME` is the same check, for scripts without kubectl.
        let out = std::process::Command::new(ari_e2e::target_dir().join("debug/ari"))
            .args(["verify", "task/doc", "-n", &ns, "-o", "json"])
            .env("KUBECONFIG", ctx.cluster.kubeconfig_path())
            .output()?;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
        let digest = parent
            .status
            .as_ref()
            .and_then(|s| s.attestation.as_ref())
            .map(|a| a.sha256());
        ensure!(
            out.status.code() == Some(0)
                && report["tasks"].as_array().map(Vec::len) == Some(4)
                && report["attestationSha256"].as_str() == digest.as_deref(),
            "ari verify -o json: {report}"
        );

        // A child's kept trace replaced: that child, by name, fails; the tree does.
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let first = tasks.get(&children[0]).await?;
        let trace_cm = first
            .status
            .and_then(|s| s.trace_ref)
            .and_then(|r| r.config_map)
            .context("the child kept its trace")?;
        ctx.kubectl_ok([
            "patch",
            "configmap",
            &trace_cm,
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"binaryData":{"trace.json.gz":"bm90IGEgdHJhY2U="}}"#,
        ])?;
        let (_, err, code) = verify(&["task/doc"])?;
        let named = format!(
            "task/{} (wordcount): NOT verified: replay differs: the kept trace cannot be read",
            children[0]
        );
        ensure!(
            code == Some(3) && err.contains(&named),
            "verify with a replaced child trace: {code:?} {err}"
        );

        // Another Task under a child's name: signed, but not the run the parent's attestation signs.
        let second = &children[1];
        ctx.kubectl_ok(["delete", "task", second, "-n", &ns, "--wait=true"])?;
        ctx.apply_ok(&ns, &task_yaml(second, "wordcount", "three", ""))?;
        task_finished(&client, &ns, second, wait::DEFAULT).await?;
        let (_, err, code) = verify(&["task/doc"])?;
        ensure!(
            code == Some(3)
                && err.contains(&format!(
                    "task/{second} (wordcount): NOT verified: its attestation"
                ))
                && err.contains("its parent's attestation signs"),
            "verify with a replaced child: {code:?} {err}"
        );
        Ok(())
    })
}

/// Issue 30, item 2, beyond tools: a delegation to an Agent the grant marks waits. The Task
/// shows what kind of call waits and for which Agent, no child Task exists meanwhile;
/// `kubectl ari approve` (unchanged: it names the call the status shows) lets the child run,
/// and the parent's signed attestation names the approver.
fn approved_child(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("approve-child", |client, ns| async move {
        ctx.module_configmap(&ns, "fanout-module", "fanout")?;
        ctx.module_configmap(&ns, "wordcount-module", "wordcount")?;
        ctx.apply_ok(&ns, &agent("wordcount", "wordcount-module", 1, ""))?;
        ctx.apply_ok(
            &ns,
            &agent(
                "fanout",
                "fanout-module",
                1,
                "  limits:
    timeoutSeconds: 600
  capabilities:
    delegation:
      agents: [wordcount]
      approval:
        agents: [wordcount]
",
            ),
        )?;
        agent_ready(&client, &ns, "wordcount").await?;
        let parent_agent = agent_ready(&client, &ns, "fanout").await?;
        ctx.apply_ok(
            &ns,
            &task_yaml(
                "waits",
                "fanout",
                "alpha beta gamma",
                "  deadlineSeconds: 600\n",
            ),
        )?;
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        let waiting = wait::until(
            "Task waits showing its delegation",
            wait::DEFAULT,
            || async {
                let t = tasks.get("waits").await.map_err(|e| e.to_string())?;
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
        ensure!(
            waiting.kind == ari_crds::CallKind::Delegation
                && waiting.agent.as_deref() == Some("wordcount")
                && waiting.arguments == "alpha beta gamma"
                && waiting.server.is_empty(),
            "pendingApproval: {waiting:?}"
        );
        let created = children_of(&client, &ns, "waits").await?;
        ensure!(
            created.is_empty(),
            "{} child Tasks before a decision",
            created.len()
        );

        let out = ctx.kubectl_ari(&["approve", "task/waits", "-n", &ns])?;
        ensure!(
            out.status.success(),
            "kubectl ari approve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let parent = task_finished(&client, &ns, "waits", wait::DEFAULT).await?;
        expect_reason(&parent, TaskPhase::Succeeded, TaskReason::Completed)?;
        ensure!(
            output(&parent) == r#"{"parts":1,"words":3}"#,
            "output {:?}",
            output(&parent)
        );
        ensure!(
            children_of(&client, &ns, "waits").await?.len() == 1,
            "the approved child ran once"
        );
        verify_attestation(&parent, &parent_agent)?;
        let status = parent.status.clone().unwrap_or_default();
        let attested = status
            .attestation
            .clone()
            .context("no attestation")?
            .predicate()?;
        let approver = parent.spec.approvals.clone().unwrap_or_default()[0]
            .approver
            .clone();
        ensure!(
            attested.approvals.len() == 1
                && attested.approvals[0].approver == approver
                && attested.approvals[0].call == waiting.call
                && attested.approvals[0].decision == ari_crds::Decision::Approved
                && attested.approvals[0].subject
                    == ari_crds::CallSubject::Delegation {
                        agent: "wordcount".into()
                    },
            "the attestation's approvals: {:?} (approver {approver})",
            attested.approvals
        );
        Ok(())
    })
}
