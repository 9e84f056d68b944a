//! N-way verification on a real control plane (`spec.verification.replicas`,
//! docs/verification.md): replicas of one Task on distinct executor pods that agree end
//! `Verified`; replicas that disagree end `VerificationMismatch` naming both executors. The
//! disagreement is real, not a fault flag: the guest fetches a URL from a server the test
//! starts on 127.0.0.1 that answers every request differently — the kind of nondeterminism
//! (a changing outside world) verification exists to catch.
//! Run: `scripts/build-agents.sh && cargo build --bins && cargo test -p ari-e2e --test verification`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, ensure};
use ari_crds::conditions::{self, VERIFIED};
use ari_crds::{Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use kube::ResourceExt;

fn main() -> std::process::ExitCode {
    trials::run(vec![
        (
            "two_replicas_on_two_executors_agree_and_the_task_is_verified",
            agreeing,
        ),
        (
            "replicas_fetching_different_answers_fail_verification_mismatch_naming_both_executors",
            mismatch,
        ),
        (
            "one_executor_runs_every_replica_and_seed_and_clock_are_shared",
            one_executor,
        ),
    ])
}

const VERIFY_TWICE: &str = "  verification:\n    replicas: 2\n";

/// The executor pods of `agent`, once both of its two are Ready.
async fn two_executors(client: &kube::Client, ns: &str, agent: &str) -> Result<BTreeSet<String>> {
    agent_ready(client, ns, agent).await?;
    let selector = format!("ari.dev/agent={agent}");
    let pods = wait::until("two executors Ready", wait::DEFAULT, || {
        ready_pods(client, ns, &selector, 2)
    })
    .await?;
    Ok(pods.iter().map(|p| p.name_any()).collect())
}

fn executors_of(t: &Task) -> Vec<String> {
    t.status
        .iter()
        .flat_map(|s| s.replicas.iter().map(|r| r.executor.clone()))
        .collect()
}

fn agreeing(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("verified", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 2, ""))?;
        let pods = two_executors(&client, &ns, "echo").await?;
        let agent = agent_ready(&client, &ns, "echo").await?;

        // Bounded and validated by the schema.
        let refused = ctx.apply(
            &ns,
            &task_yaml("six", "echo", "x", "  verification:\n    replicas: 6\n"),
        )?;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        ensure!(
            !refused.status.success() && stderr.contains("spec.verification.replicas"),
            "replicas: 6 accepted or refused for another reason: {stderr}"
        );

        ctx.apply_ok(
            &ns,
            &task_yaml("twice", "echo", "same every time", VERIFY_TWICE),
        )?;
        let t = task_finished(&client, &ns, "twice", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.output.as_deref() == Some("same every time"),
            "output {:?}",
            s.output
        );
        let ran: BTreeSet<String> = executors_of(&t).into_iter().collect();
        ensure!(
            s.replicas.len() == 2 && ran == pods,
            "replicas ran on {:?}, the Agent's executors are {pods:?}",
            executors_of(&t)
        );
        let first = &s.replicas[0];
        ensure!(
            s.replicas
                .iter()
                .all(|r| r.output_sha256 == first.output_sha256
                    && r.trace_sha256 == first.trace_sha256
                    && r.reason == TaskReason::Completed),
            "replicas {:?}",
            s.replicas
        );
        ensure!(
            s.output_sha256.as_ref() == Some(&first.output_sha256),
            "the Task's output digest is a replica's"
        );
        // Two runs, two signers' evidence: the attestations differ (executor, timings).
        ensure!(
            s.replicas[0].attestation_sha256 != s.replicas[1].attestation_sha256,
            "two runs with one attestation"
        );
        let verified = conditions::find(&s.conditions, VERIFIED).context("no Verified")?;
        ensure!(
            verified.status == "True" && pods.iter().all(|p| verified.message.contains(p)),
            "Verified {verified:?}"
        );
        ensure!(s.attempts == Some(2), "attempts {:?}", s.attempts);
        verify_attestation(&t, &agent)?;
        Ok(())
    })
}

/// A server on 127.0.0.1 answering request N with `answer N`; stops when the test process
/// ends. Returns its port and the count of requests answered.
fn changing_server() -> Result<(u16, Arc<AtomicUsize>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let body = format!("answer {n}");
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok((port, answered))
}

fn mismatch(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("mismatch", |client, ns| async move {
        let (port, answered) = changing_server()?;
        ctx.module_configmap(&ns, "fetch-module", "fetch")?;
        let grant = format!(
            "  capabilities:\n    network:\n      allowedHosts: [\"http://127.0.0.1:{port}\"]\n"
        );
        ctx.apply_ok(&ns, &agent_yaml("fetch", "fetch-module", 2, &grant))?;
        let pods = two_executors(&client, &ns, "fetch").await?;
        let url = format!("http://127.0.0.1:{port}/now");
        ctx.apply_ok(&ns, &task_yaml("world", "fetch", &url, VERIFY_TWICE))?;
        let t = task_finished(&client, &ns, "world", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::VerificationMismatch)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            answered.load(Ordering::SeqCst) == 2,
            "the server answered {} requests, want one per replica",
            answered.load(Ordering::SeqCst)
        );
        let ran: BTreeSet<String> = executors_of(&t).into_iter().collect();
        ensure!(ran == pods, "replicas ran on {:?}", executors_of(&t));
        ensure!(
            s.replicas[0].output_sha256 != s.replicas[1].output_sha256
                && s.replicas[0].trace_sha256 != s.replicas[1].trace_sha256,
            "replicas {:?}",
            s.replicas
        );
        let message = s.message.clone().unwrap_or_default();
        ensure!(
            message.starts_with("replicas disagree") && pods.iter().all(|p| message.contains(p)),
            "message {message:?} does not name both executors {pods:?}"
        );
        ensure!(
            s.output.is_none() && s.output_base64.is_none(),
            "a disagreeing Task shows an output: {:?}",
            s.output
        );
        let verified = conditions::find(&s.conditions, VERIFIED).context("no Verified")?;
        ensure!(verified.status == "False", "Verified {verified:?}");
        Ok(())
    })
}

/// With one executor it runs every replica. Dice without `spec.seed` and the logical clock agree
/// only because every replica gets the same seed and start time; an Agent granted storage
/// refuses replicas (each run would commit its writes).
fn one_executor(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("alone", |client, ns| async move {
        let grants = [
            ("dice", "  capabilities:\n    randomness: {}\n"),
            ("clock", "  capabilities:\n    timeAccess: {}\n"),
            (
                "counter",
                "  capabilities:\n    storage:\n      maxBytes: 4096\n",
            ),
        ];
        for (name, grant) in grants {
            ctx.module_configmap(&ns, &format!("{name}-module"), name)?;
            ctx.apply_ok(&ns, &agent_yaml(name, &format!("{name}-module"), 1, grant))?;
        }
        for (name, _) in grants {
            agent_ready(&client, &ns, name).await?;
        }
        let thrice = "  verification:\n    replicas: 3\n";
        ctx.apply_ok(&ns, &task_yaml("roll", "dice", "20", thrice))?;
        ctx.apply_ok(&ns, &task_yaml("now", "clock", "", thrice))?;
        ctx.apply_ok(&ns, &task_yaml("count", "counter", "", VERIFY_TWICE))?;
        for name in ["roll", "now"] {
            let t = task_finished(&client, &ns, name, wait::DEFAULT).await?;
            expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
            let s = t.status.clone().unwrap_or_default();
            let ran = executors_of(&t);
            ensure!(
                ran.len() == 3 && ran.iter().all(|e| *e == ran[0]),
                "{name}: replicas ran on {ran:?}, want one executor three times"
            );
            ensure!(
                conditions::is_true(&s.conditions, VERIFIED),
                "{name}: {:?}",
                s.conditions
            );
            ensure!(s.attempts == Some(3), "{name}: attempts {:?}", s.attempts);
        }
        let t = task_finished(&client, &ns, "count", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let message = t.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            message.contains("spec.verification.replicas") && message.contains("storage"),
            "message {message:?}"
        );
        Ok(())
    })
}
