//! Network requests on a real control plane: a request to a host the grant marks for approval
//! waits for a person, and reaches the host only once approved (issue 30, item 2).
//! Run: `scripts/build-agents.sh && cargo build --bins && cargo test -p ari-e2e --test network`.

use anyhow::{Context, Result, ensure};
use ari_crds::{CallKind, CallSubject, Decision, PendingApproval, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use ari_testkit::http::Server;
use kube::{Api, Client};

fn main() -> std::process::ExitCode {
    trials::run(vec![(
        "a_request_to_a_marked_host_waits_reaches_it_only_once_approved_and_a_rejection_is_typed",
        marked_host,
    )])
}

/// The conformance agent (`http METHOD URL BODY` prints `status:N body:BODY`, or `err:KIND`
/// when the host refuses: `err:rejected` is the WIT's `http-error.rejected`), granted `base`
/// with every request to it marked for approval.
fn fetcher(base: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: fetcher
spec:
  module:
    configMap:
      name: conformance-module
      key: module.wasm
  executor:
    replicas: 1
    concurrency: 1
  limits:
    timeoutSeconds: 600
  capabilities:
    network:
      allowedHosts: [{base:?}]
      approval:
        hosts: [{base:?}]
"
    )
}

/// Waits until Task `name` shows the call it waits on (and its `AwaitingApproval` condition).
async fn pending(client: &Client, ns: &str, name: &str) -> Result<PendingApproval> {
    let tasks: Api<Task> = Api::namespaced(client.clone(), ns);
    Ok(wait::until(
        &format!("Task {name} waits showing its request"),
        wait::DEFAULT,
        || async {
            let t = tasks.get(name).await.map_err(|e| e.to_string())?;
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
    .await?)
}

/// Issue 30, item 2, for requests: a request to a host the grant marks waits. The Task shows a
/// Network call with its method, URL and body, and the server has received nothing; `kubectl
/// ari reject` gives the guest `http-error.rejected` and still nothing is sent; a second Task,
/// approved with `kubectl ari approve`, makes exactly one request, and each Task's signed
/// attestation names who decided.
fn marked_host(ctx: &Ctx) -> Result<()> {
    let server = Server::start();
    ctx.in_namespace("network-approval", |client, ns| async move {
        ctx.module_configmap(&ns, "conformance-module", "conformance")?;
        ctx.apply_ok(&ns, &fetcher(&server.base))?;
        let agent = agent_ready(&client, &ns, "fetcher").await?;
        let input = format!("http POST {}/orders one order", server.base);
        let url = format!("{}/orders", server.base);
        let wait_long = "  deadlineSeconds: 600\n";
        let finished = std::time::Duration::from_secs(120);

        ctx.apply_ok(&ns, &task_yaml("refused", "fetcher", &input, wait_long))?;
        let waiting = pending(&client, &ns, "refused").await?;
        ensure!(
            waiting.kind == CallKind::Network
                && waiting.method.as_deref() == Some("POST")
                && waiting.url.as_deref() == Some(url.as_str())
                && waiting.arguments == "one order"
                && waiting.server.is_empty()
                && waiting.agent.is_none(),
            "pendingApproval: {waiting:?}"
        );
        ensure!(
            server.hits() == 0,
            "{} requests reached the host before a decision",
            server.hits()
        );
        let out = ctx.kubectl_ari(&[
            "reject",
            "task/refused",
            "--reason",
            "not this one",
            "-n",
            &ns,
        ])?;
        ensure!(
            out.status.success(),
            "kubectl ari reject: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let refused = task_finished(&client, &ns, "refused", finished).await?;
        // Not a denial: a person said no, and the guest carried on with the typed error.
        expect_reason(&refused, TaskPhase::Succeeded, TaskReason::Completed)?;
        let status = refused.status.clone().unwrap_or_default();
        ensure!(
            status.output.as_deref() == Some("err:rejected") && status.pending_approval.is_none(),
            "the guest's view of a rejection: {status:?}"
        );
        ensure!(
            server.hits() == 0,
            "a rejected request reached the host ({} requests)",
            server.hits()
        );
        let rejecter = decided_by(&refused)?;
        let rejected = (Decision::Rejected, Some("not this one"));
        attested(&refused, &agent, &waiting, rejected, &rejecter, &url)?;

        ctx.apply_ok(&ns, &task_yaml("approved", "fetcher", &input, wait_long))?;
        let waiting = pending(&client, &ns, "approved").await?;
        ensure!(
            waiting.kind == CallKind::Network && server.hits() == 0,
            "pendingApproval {waiting:?}, {} requests before a decision",
            server.hits()
        );
        let out = ctx.kubectl_ari(&["approve", "task/approved", "-n", &ns])?;
        ensure!(
            out.status.success(),
            "kubectl ari approve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let approved = task_finished(&client, &ns, "approved", finished).await?;
        expect_reason(&approved, TaskPhase::Succeeded, TaskReason::Completed)?;
        let output = approved
            .status
            .as_ref()
            .and_then(|s| s.output.clone())
            .unwrap_or_default();
        ensure!(output == "status:200 body:got it", "output {output:?}");
        ensure!(
            server.hits() == 1,
            "the approved request reached the host {} times",
            server.hits()
        );
        let approver = decided_by(&approved)?;
        attested(
            &approved,
            &agent,
            &waiting,
            (Decision::Approved, None),
            &approver,
            &url,
        )?;
        Ok(())
    })
}

/// Who decided the Task's one call, as `kubectl ari` wrote it (the API server's name for the
/// caller).
fn decided_by(task: &Task) -> Result<String> {
    let approvals = task.spec.approvals.clone().unwrap_or_default();
    ensure!(approvals.len() == 1, "spec.approvals: {approvals:?}");
    Ok(approvals[0].approver.clone())
}

/// The Task's attestation verifies and signs one decision: `decision` (and its reason) of the
/// call that waited, a POST to `url`, by `approver`.
fn attested(
    task: &Task,
    agent: &ari_crds::Agent,
    waiting: &PendingApproval,
    (decision, reason): (Decision, Option<&str>),
    approver: &str,
    url: &str,
) -> Result<()> {
    verify_attestation(task, agent)?;
    let attested = task
        .status
        .as_ref()
        .and_then(|s| s.attestation.clone())
        .context("no attestation")?
        .predicate()?;
    ensure!(
        attested.approvals.len() == 1
            && attested.approvals[0].approver == approver
            && attested.approvals[0].call == waiting.call
            && attested.approvals[0].decision == decision
            && attested.approvals[0].reason.as_deref() == reason
            && attested.approvals[0].subject
                == CallSubject::Network {
                    method: "POST".into(),
                    url: url.into(),
                },
        "the attestation's approvals: {:?} (approver {approver})",
        attested.approvals
    );
    Ok(())
}
