//! `kubectl logs` on the e2e cluster, as an agent author uses it: the real kubectl asks the real
//! API server, which reads the node agent's kubelet log endpoint over TLS. Executor and operator
//! pods, `--tail`, `--limit-bytes` with `--follow`, a missing container, and a Task's guest log
//! lines found by the Task's name.
//! Run: `cargo build --bins && cargo test -p ari-e2e --test logs`.

use anyhow::{Result, ensure};
use ari_crds::{TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};

fn main() -> std::process::ExitCode {
    trials::run(vec![
        (
            "kubectl_logs_of_an_executor_shows_its_tasks_and_their_guest_lines",
            executor_logs,
        ),
        ("kubectl_logs_of_the_operator_pod_works", operator_logs),
        (
            "kubectl_logs_of_a_missing_container_fails_with_an_error",
            missing_container,
        ),
    ])
}

/// `kubectl logs` that must succeed; returns its stdout.
fn logs(ctx: &Ctx, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let out = ctx.kubectl(&all).map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {} failed: {}",
            all.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn executor_logs(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("logs", |client, ns| async move {
        ctx.module_configmap(&ns, "talker-module", "conformance")?;
        ctx.apply_ok(&ns, &agent_yaml("talker", "talker-module", 1, ""))?;
        agent_ready(&client, &ns, "talker").await?;
        let pod = wait::until("one executor pod Ready", wait::DEFAULT, || {
            ready_pods(&client, &ns, "ari.dev/agent=talker", 1)
        })
        .await?
        .into_iter()
        .next()
        .map(|p| kube::ResourceExt::name_any(&p))
        .unwrap_or_default();

        let marker = format!("guest-says-{}", unique());
        ctx.apply_ok(
            &ns,
            &task_yaml("say-hi", "talker", &format!("log info {marker}"), ""),
        )?;
        let task = task_finished(&client, &ns, "say-hi", wait::DEFAULT).await?;
        expect_reason(&task, TaskPhase::Succeeded, TaskReason::Completed)?;

        // What docs/agents.md tells an author to run: all executors of the agent, grep the Task.
        let selector = "ari.dev/agent=talker";
        let all = wait::until(
            "the Task's lines in kubectl logs",
            wait::DEFAULT,
            || async {
                let out = logs(ctx, &["-n", &ns, "-l", selector, "--tail=-1"])?;
                let task_lines: Vec<&str> = out
                    .lines()
                    .filter(|l| l.contains("\"task\":\"say-hi\""))
                    .collect();
                let has = |what: &str| task_lines.iter().any(|l| l.contains(what));
                if has("\"claimed\"") && has("\"finished\"") && has(&marker) {
                    Ok(out)
                } else {
                    Err(format!("not yet all of claimed/finished/{marker}:\n{out}"))
                }
            },
        )
        .await?;
        let guest = all.lines().find(|l| l.contains(&marker)).unwrap_or("");
        ensure!(
            guest.contains("ari::guest") && guest.contains(&format!("\"namespace\":\"{ns}\"")),
            "the guest line is not tagged as the guest's with the Task's namespace: {guest}"
        );

        let one = logs(ctx, &["-n", &ns, &pod, "--tail=1"]).map_err(anyhow::Error::msg)?;
        ensure!(
            one.lines().count() == 1,
            "--tail=1 gave {} lines:\n{one}",
            one.lines().count()
        );
        // A follow that ends: the limit is reached although the executor keeps running.
        let some = logs(ctx, &["-n", &ns, &pod, "--follow", "--limit-bytes=40"])
            .map_err(anyhow::Error::msg)?;
        ensure!(
            some.len() == 40,
            "--follow --limit-bytes=40 gave {} bytes",
            some.len()
        );
        Ok(())
    })
}

fn operator_logs(ctx: &Ctx) -> Result<()> {
    let pod = ctx.rt.block_on(async {
        let client = ctx.cluster.client();
        wait::until("operator pod Ready", wait::DEFAULT, || {
            ready_pods(
                &client,
                OPERATOR_NS,
                "app.kubernetes.io/name=ari-operator",
                1,
            )
        })
        .await
    })?;
    let pod = pod
        .first()
        .map(kube::ResourceExt::name_any)
        .unwrap_or_default();
    // A freshly started operator may not have written a line yet: wait (with a deadline) for
    // its first one, then kubectl must show it.
    let out = ctx.rt.block_on(wait::until(
        "the operator's first log line through kubectl logs",
        wait::DEFAULT,
        || async {
            let out = logs(ctx, &["-n", OPERATOR_NS, &pod])?;
            if out.trim().is_empty() {
                Err("kubectl logs printed nothing yet".to_string())
            } else {
                Ok(out)
            }
        },
    ))?;
    // The same lines as the node agent's file for that container.
    let file = ctx.node.logs(OPERATOR_NS, &pod, "operator");
    ensure!(
        out.lines().next() == file.lines().next(),
        "kubectl logs does not start like the node's log file:\n{}\nvs\n{}",
        tail(&out, 3),
        tail(&file, 3)
    );
    Ok(())
}

fn missing_container(ctx: &Ctx) -> Result<()> {
    let out = ctx.kubectl(&[
        "logs",
        "-n",
        OPERATOR_NS,
        "deploy/ari-operator",
        "-c",
        "nosuch",
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "kubectl logs -c nosuch succeeded");
    ensure!(
        stderr.contains("nosuch"),
        "the error does not name the container: {stderr}"
    );
    Ok(())
}
