//! The operator and its executors on a real control plane: CRDs installed with kubectl, the
//! operator deployed from `deploy/operator.yaml` and run (like the executors) as a pod by the
//! node agent, real example components. One cluster per binary; one namespace per trial.
//! Run: `cargo build --bins && cargo test -p ari-e2e --test operator`.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run(vec![
        (
            "agent_ready_task_succeeds_with_verified_attestation",
            task_succeeds,
        ),
        ("example_manifests_apply_as_they_are", example_manifests),
        (
            "failures_end_with_their_reason_while_others_succeed",
            failure_reasons,
        ),
        ("schema_rejects_invalid_agent_and_task", schema_rejects),
        ("large_output_goes_to_an_owned_configmap", large_output),
        (
            "killed_executor_task_reruns_and_completes_once",
            killed_executor,
        ),
        ("executor_sigterm_finishes_its_running_task", executor_drain),
        (
            "a_task_of_items_runs_each_item_and_every_item_verifies",
            items_task,
        ),
        (
            "an_executor_killed_during_a_task_of_items_reruns_them_all_once",
            items_killed_executor,
        ),
        (
            "a_cancelled_task_stops_ends_cancelled_and_frees_its_slot",
            cancellation,
        ),
        ("operator_restart_loses_nothing", operator_restart),
        (
            "module_change_rolls_executors_and_new_tasks_use_it",
            module_change,
        ),
        ("finished_tasks_disappear_after_ttl", ttl_expiry),
        (
            "signing_grant_reaches_the_executor_without_secret_access",
            signing_grant,
        ),
        ("deleting_agent_collects_its_deployment", agent_deletion_gc),
        (
            "kubectl_ari_runs_follows_verifies_and_cancels",
            kubectl_plugin,
        ),
    ])
}

/// The Task's attestation as anyone checks it: securesystemslib verifies the envelope with the
/// key the Agent publishes and in-toto-attestation validates the Statement; its subjects are
/// the status's output and the Agent's module, its digest is the one `kubectl ari verify`
/// names; an envelope whose payload was edited fails there too.
async fn standard_verifiers_check(ctx: &Ctx, client: &Client, ns: &str, name: &str) -> Result<()> {
    use ari_e2e::intoto::{Verdict, check};
    let task: Task = Api::namespaced(client.clone(), ns).get(name).await?;
    let agent: Agent = Api::namespaced(client.clone(), ns).get("talker").await?;
    let status = task.status.clone().context("status")?;
    let envelope = status.attestation.clone().context("no attestation")?;
    let key = agent
        .status
        .and_then(|s| s.attestation_public_key)
        .context("the Agent publishes no key")?;
    let Verdict::Verified(said) = check(&envelope, &key)? else {
        anyhow::bail!("securesystemslib refused a genuine envelope");
    };
    ensure!(
        said["predicateType"] == "https://ari.dev/attestation/run/v1",
        "{said}"
    );
    ensure!(
        said["subjects"]["output"].as_str() == status.output_sha256.as_deref(),
        "output subject: {said}"
    );
    let (out, err, code) = plugin(
        ctx,
        &["verify", &format!("task/{name}"), "-n", ns, "-o", "json"],
    )?;
    let shown: serde_json::Value = serde_json::from_str(&out).with_context(|| err.clone())?;
    ensure!(
        code == Some(0)
            && said["digest"].as_str() == Some(envelope.sha256().as_str())
            && shown["attestationSha256"] == said["digest"],
        "digests: python {said}, ari {}, kubectl ari {shown}",
        envelope.sha256()
    );

    let mut statement = envelope.statement()?;
    statement.predicate.output_sha256 = "00".repeat(32);
    statement.subject[0].digest.sha256 = "00".repeat(32);
    let tampered = ari_model::Attestation {
        payload: base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            serde_json::to_vec(&statement)?,
        ),
        ..envelope
    };
    match check(&tampered, &key)? {
        Verdict::Refused(why) => ensure!(why.contains("threshold"), "refused for {why}"),
        Verdict::Verified(said) => anyhow::bail!("a tampered envelope verified: {said}"),
    }
    Ok(())
}

/// `kubectl ari ...` as a user types it: stdout, stderr and the exit code.
fn plugin(ctx: &Ctx, args: &[&str]) -> Result<(String, String, Option<i32>)> {
    let out = ctx.kubectl_ari(args)?;
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    ))
}

/// The Task `kubectl ari run` said it created (`task/NAME created` on stderr).
fn created(stderr: &str) -> Result<String> {
    stderr
        .lines()
        .find_map(|l| l.strip_suffix(" created")?.strip_prefix("task/"))
        .map(str::to_owned)
        .context("run names the Task it created")
}

/// The kubectl plugin (`ari` linked as `kubectl-ari`): `run` prints the output and exits by
/// how the Task ended, `logs` gives that Task's guest lines, `verify` checks the attestation
/// against the Agent's key (and refuses a Task of an Agent whose key is not the signer's),
/// `top` adds up use by Agent, and `cancel` stops a running Task.
fn kubectl_plugin(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("plugin", |client, ns| async move {
        ctx.module_configmap(&ns, "talker-module", "conformance")?;
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        let spinner =
            "  config: waiter\n  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 300\n";
        let yaml = [
            agent_yaml("talker", "talker-module", 1, ""),
            agent_yaml("spinner", "relay-module", 1, spinner),
        ]
        .join("---\n");
        ctx.apply_ok(&ns, &yaml)?;
        agent_ready(&client, &ns, "talker").await?;
        agent_ready(&client, &ns, "spinner").await?;

        let (out, err, code) = plugin(
            ctx,
            &["run", "talker", "--input", "echo hello plugin", "-n", &ns],
        )?;
        ensure!(
            code == Some(0) && out == "hello plugin\n",
            "run: {code:?} {out:?} {err}"
        );
        ensure!(
            err.contains("Succeeded/Completed: fuel"),
            "run's summary: {err}"
        );
        let name = created(&err)?;

        let (_, err, code) = plugin(ctx, &["verify", &format!("task/{name}"), "-n", &ns])?;
        ensure!(
            code == Some(0) && err.contains("verified"),
            "verify: {code:?} {err}"
        );
        standard_verifiers_check(ctx, &client, &ns, &name).await?;
        let cms = ctx.kubectl_ok(["get", "configmaps", "-n", &ns, "-o", "name"])?;
        ensure!(
            !cms.contains(&format!("{name}-trace")),
            "a trace kept unasked: {cms}"
        );

        let marker = format!("plugin-says-{}", unique());
        let (_, err, code) = plugin(
            ctx,
            &[
                "run",
                "talker",
                "--input",
                &format!("log warn {marker}"),
                "-n",
                &ns,
            ],
        )?;
        ensure!(code == Some(0), "run: {code:?} {err}");
        let logged = created(&err)?;
        let lines = wait::until(
            "the Task's guest line in kubectl ari logs",
            wait::DEFAULT,
            || async {
                let (out, err, code) = plugin(ctx, &["logs", &format!("task/{logged}"), "-n", &ns])
                    .map_err(|e| e.to_string())?;
                if code == Some(0) && out.contains(&marker) {
                    Ok(out)
                } else {
                    Err(format!("{code:?} {out:?} {err}"))
                }
            },
        )
        .await?;
        ensure!(lines.trim() == format!("WARN {marker}"), "logs: {lines:?}");
        let (out, _, _) = plugin(ctx, &["logs", &format!("task/{name}"), "-n", &ns])?;
        ensure!(!out.contains(&marker), "another Task's lines: {out}");

        let (_, err, code) = plugin(
            ctx,
            &[
                "run",
                "talker",
                "--input",
                "fail failed on purpose",
                "-n",
                &ns,
            ],
        )?;
        ensure!(
            code == Some(4) && err.contains("on purpose"),
            "a failing run: {code:?} {err}"
        );

        let (out, err, code) = plugin(
            ctx,
            &["run", "spinner", "--input", "spin", "--no-wait", "-n", &ns],
        )?;
        ensure!(code == Some(0), "run --no-wait: {code:?} {err}");
        let spin = out
            .trim()
            .strip_prefix("task/")
            .context("--no-wait prints task/NAME")?
            .to_owned();
        let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
        wait::until("the spin Task running", wait::DEFAULT, || async {
            let t = tasks.get(&spin).await.map_err(|e| e.to_string())?;
            (t.phase() == TaskPhase::Running)
                .then_some(())
                .ok_or(format!("{:?}", t.phase()))
        })
        .await?;
        let (out, err, code) = plugin(ctx, &["cancel", &format!("task/{spin}"), "-n", &ns])?;
        ensure!(
            code == Some(0) && out.contains("cancelled"),
            "cancel: {code:?} {out} {err}"
        );
        let cancelled = task_finished(&client, &ns, &spin, Duration::from_secs(60)).await?;
        ensure!(
            cancelled.phase() == TaskPhase::Cancelled,
            "after cancel: {:?}",
            cancelled.phase()
        );

        let (out, err, code) = plugin(ctx, &["top", "-o", "json", "-n", &ns])?;
        ensure!(code == Some(0), "top: {code:?} {err}");
        let top: serde_json::Value = serde_json::from_str(&out).context("top -o json")?;
        ensure!(
            top["talker"]["tasks"]["Succeeded"] == 2
                && top["talker"]["tasks"]["Failed"] == 1
                && top["spinner"]["tasks"]["Cancelled"] == 1
                && top["talker"]["fuel"].as_u64().is_some_and(|f| f > 0)
                && top["talker"]["memoryBytes"].as_u64().is_some_and(|m| m > 0)
                && top["talker"]["cpuMillis"].is_u64(),
            "top: {top}"
        );

        // A kept trace replays from the cluster; one someone replaced does not.
        let (_, err, code) = plugin(
            ctx,
            &[
                "run",
                "talker",
                "--input",
                "echo kept",
                "--keep-trace",
                "-n",
                &ns,
            ],
        )?;
        ensure!(code == Some(0), "run --keep-trace: {code:?} {err}");
        let kept = created(&err)?;
        let (_, err, code) = plugin(ctx, &["verify", &format!("task/{kept}"), "-n", &ns])?;
        ensure!(
            code == Some(0) && err.contains("replayed: same output, trace and ending"),
            "verify of a kept trace: {code:?} {err}"
        );
        let (_, err, _) = plugin(ctx, &["verify", &format!("task/{name}"), "-n", &ns])?;
        ensure!(
            err.contains("not replayed: the Task kept no trace"),
            "verify without a trace: {err}"
        );
        let traced: Task = Api::namespaced(client.clone(), &ns).get(&kept).await?;
        let trace_cm = traced
            .status
            .and_then(|s| s.trace_ref)
            .and_then(|r| r.config_map)
            .context("status.traceRef names the trace's ConfigMap")?;
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
        let (_, err, code) = plugin(ctx, &["verify", &format!("task/{kept}"), "-n", &ns])?;
        ensure!(
            code == Some(3) && err.contains("the kept trace cannot be read"),
            "verify of a replaced trace: {code:?} {err}"
        );

        // A status someone rewrote is not what the attestation vouches for.
        ctx.kubectl_ok([
            "patch",
            "task",
            &name,
            "-n",
            &ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"outputSha256":"{}"}}}}"#, "0".repeat(64)),
        ])?;
        let (out, err, code) = plugin(
            ctx,
            &["verify", &format!("task/{name}"), "-n", &ns, "-o", "json"],
        )?;
        let report: serde_json::Value = serde_json::from_str(&out).context("verify -o json")?;
        ensure!(
            code == Some(3)
                && report["verified"] == false
                && err.contains("differs from status.outputSha256"),
            "verify of a rewritten status: {code:?} {report} {err}"
        );
        let (_, err, code) = plugin(ctx, &["verify", "pod/x", "-n", &ns])?;
        ensure!(
            code == Some(1) && err.contains("task/NAME"),
            "verify pod/x: {code:?} {err}"
        );
        Ok(())
    })
}

fn task_succeeds(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("succeeds", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 2, ""))?;
        let agent = agent_ready(&client, &ns, "echo").await?;
        wait::until("two executor pods Ready", wait::DEFAULT, || {
            ready_pods(&client, &ns, "ari.dev/agent=echo", 2)
        })
        .await?;
        let status = agent.status.clone().unwrap_or_default();
        let echo_sha = sha256_file(&agent_wasm("echo"))?;
        ensure!(
            status
                .module_digest
                .as_deref()
                .is_some_and(|d| d.contains(&echo_sha)),
            "moduleDigest {:?} is not the echo component's sha256",
            status.module_digest
        );

        ctx.apply_ok(&ns, &task_yaml("hello", "echo", "hello, cluster", ""))?;
        let task = task_finished(&client, &ns, "hello", wait::DEFAULT).await?;
        expect_reason(&task, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = task.status.clone().unwrap_or_default();
        ensure!(
            s.output.as_deref() == Some("hello, cluster"),
            "output {:?}",
            s.output
        );
        let used = s.resources_used.context("no resourcesUsed")?;
        ensure!(used.fuel > 0, "no fuel recorded: {used:?}");
        let limits = s.limits_applied.clone().context("no limitsApplied")?;
        ensure!(
            limits.fuel == ari_crds::agent::DEFAULT_FUEL,
            "limitsApplied.fuel {}",
            limits.fuel
        );
        ensure!(
            s.executor
                .as_deref()
                .is_some_and(|e| e.starts_with("echo-executor-")),
            "executor {:?}",
            s.executor
        );
        verify_attestation(&task, &agent)
    })
}

/// The user's walk-through from the README: module ConfigMaps by the script, then
/// `kubectl apply -f examples/manifests/` unchanged.
fn example_manifests(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("examples", |client, ns| async move {
        let path = format!(
            "{}:{}",
            ctx.cluster.bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for agent in ["echo", "wordcount", "counter", "dice"] {
            let out = std::process::Command::new("/bin/bash")
                .arg(repo().join("scripts/make-agent-configmap.sh"))
                .args([agent, &ns])
                .current_dir(repo())
                .env("PATH", &path)
                .env("KUBECONFIG", ctx.cluster.kubeconfig_path())
                .output()
                .context("running scripts/make-agent-configmap.sh")?;
            ensure!(
                out.status.success(),
                "make-agent-configmap.sh {agent}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let manifests = repo().join("examples/manifests").display().to_string();
        ctx.kubectl_ok(["apply", "-n", &ns, "-f", &manifests])?;
        let expect = [
            (
                "echo-hello",
                TaskPhase::Succeeded,
                TaskReason::Completed,
                Some("hello from a Task"),
            ),
            (
                "wordcount-poem",
                TaskPhase::Succeeded,
                TaskReason::Completed,
                None,
            ),
            (
                "counter-visits",
                TaskPhase::Succeeded,
                TaskReason::Completed,
                Some("1"),
            ),
            (
                "dice-seeded",
                TaskPhase::Succeeded,
                TaskReason::Completed,
                None,
            ),
            (
                "dice-wants-network",
                TaskPhase::Failed,
                TaskReason::CapabilityDenied,
                None,
            ),
        ];
        for (name, phase, reason, output) in expect {
            let t = task_finished(&client, &ns, name, wait::DEFAULT).await?;
            expect_reason(&t, phase, reason)?;
            if let Some(want) = output {
                let got = t.status.and_then(|s| s.output);
                ensure!(
                    got.as_deref() == Some(want),
                    "{name}: output {got:?}, want {want:?}"
                );
            }
        }
        let t = task_finished(&client, &ns, "wordcount-poem", wait::DEFAULT).await?;
        let out = t.status.and_then(|s| s.output).unwrap_or_default();
        ensure!(out.contains("\"words\":8"), "wordcount output {out}");
        Ok(())
    })
}

fn failure_reasons(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("reasons", |client, ns| async move {
        ctx.module_configmap(&ns, "spin-module", "spin")?;
        ctx.module_configmap(&ns, "trap-module", "trap")?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "spin",
                "spin-module",
                1,
                "  limits:\n    fuel: 100000000000\n    timeoutSeconds: 60\n",
            ),
        )?;
        ctx.apply_ok(&ns, &agent_yaml("trap", "trap-module", 1, ""))?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        ctx.apply_ok(
            &ns,
            &agent_yaml("helper", "echo-module", 1, "  mode: subagent\n"),
        )?;
        for a in ["spin", "trap", "echo", "helper"] {
            agent_ready(&client, &ns, a).await?;
        }
        ctx.apply_ok(
            &ns,
            &task_yaml("out-of-fuel", "spin", "", "  fuel: 1000000\n"),
        )?;
        ctx.apply_ok(
            &ns,
            &task_yaml("too-slow", "spin", "", "  deadlineSeconds: 2\n"),
        )?;
        ctx.apply_ok(&ns, &task_yaml("crash", "trap", "", ""))?;
        ctx.apply_ok(
            &ns,
            &task_yaml(
                "wants-network",
                "echo",
                "x",
                "  requirements:\n    capabilities: [network]\n",
            ),
        )?;
        ctx.apply_ok(&ns, &task_yaml("fine", "echo", "still fine", ""))?;
        ctx.apply_ok(&ns, &task_yaml("not-for-users", "helper", "x", ""))?;

        let t = task_finished(&client, &ns, "out-of-fuel", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::FuelExhausted)?;
        let used = t
            .status
            .clone()
            .unwrap_or_default()
            .resources_used
            .context("no resourcesUsed")?;
        ensure!(
            used.fuel >= 1_000_000,
            "FuelExhausted with {} fuel used",
            used.fuel
        );
        let t = task_finished(&client, &ns, "too-slow", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::DeadlineExceeded)?;
        let t = task_finished(&client, &ns, "crash", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::Trap)?;
        let t = task_finished(&client, &ns, "wants-network", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        ensure!(
            t.status
                .as_ref()
                .and_then(|s| s.resources_used.as_ref())
                .is_none_or(|u| u.fuel == 0),
            "a denied task must not run"
        );
        let t = task_finished(&client, &ns, "fine", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        // A subagent-mode Agent takes only delegated Tasks: a user's is refused, unrun.
        let t = task_finished(&client, &ns, "not-for-users", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::ModeRefused)?;
        ensure!(
            t.status
                .as_ref()
                .and_then(|s| s.attestation.as_ref())
                .is_none(),
            "a refused task must not run"
        );
        // Failures the executor decided get a Warning Event too, like the operator's own.
        for (task, reason) in [
            ("out-of-fuel", "FuelExhausted"),
            ("crash", "Trap"),
            ("wants-network", "CapabilityDenied"),
            ("not-for-users", "ModeRefused"),
        ] {
            let e = event_with_reason(&client, &ns, task, reason).await?;
            ensure!(
                e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref().is_some_and(|m| !m.is_empty()),
                "Event for {task}: {e:?}"
            );
        }
        Ok(())
    })
}

fn schema_rejects(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("schema", |_client, ns| async move {
        let both = "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: both-sources
spec:
  module:
    configMap: {name: m, key: module.wasm}
    url: https://example.invalid/agent.wasm
    sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"
";
        let out = ctx.apply(&ns, both)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success(),
            "an Agent with two module sources was accepted"
        );
        ensure!(
            err.contains("exactly one of module.configMap, module.url or module.image"),
            "unclear message: {err}"
        );

        let no_sha = "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: no-sha
spec:
  module:
    url: https://example.invalid/agent.wasm
";
        let out = ctx.apply(&ns, no_sha)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success(),
            "an url module without sha256 was accepted"
        );
        ensure!(err.contains("sha256"), "unclear message: {err}");

        let out = ctx.apply(&ns, &task_yaml("zero-fuel", "echo", "x", "  fuel: 0\n"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "a Task with fuel 0 was accepted");
        ensure!(err.contains("fuel"), "unclear message: {err}");

        let no_input = "apiVersion: ari.dev/v1alpha1
kind: Task
metadata:
  name: two-inputs
spec:
  agentRef: {name: echo}
  input: a
  inputBase64: YQ==
";
        let out = ctx.apply(&ns, no_input)?;
        ensure!(!out.status.success(), "a Task with two inputs was accepted");
        Ok(())
    })
}

fn large_output(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("large", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        agent_ready(&client, &ns, "echo").await?;
        let big = "x".repeat(64 * 1024);
        ctx.apply_ok(&ns, &task_yaml("big", "echo", &big, ""))?;
        let t = task_finished(&client, &ns, "big", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.output.is_none() && s.output_base64.is_none(),
            "large output was inlined"
        );
        let r = s.output_ref.context("no outputRef")?;
        let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
            .get(&r.config_map)
            .await?;
        let data = cm
            .binary_data
            .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
            .context("no data")?;
        ensure!(data == big.as_bytes(), "outputRef content differs");
        ensure!(
            cm.metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| o.kind == "Task" && o.name == "big"),
            "output ConfigMap is not owned by its Task"
        );
        Ok(())
    })
}

/// Input of a `sha256-loop` Task that runs for seconds (about 0.3 µs a round): long enough to
/// be seen Running, and killed or drained, before it finishes.
const LONG_INPUT: &str = "20000000 abc";

/// A `sha256-loop` Agent with room for a task that runs for seconds.
async fn long_task_agent(ctx: &Ctx, client: &Client, ns: &str, replicas: u32) -> Result<()> {
    ctx.module_configmap(ns, "loop-module", "sha256-loop")?;
    ctx.apply_ok(
        ns,
        &agent_yaml(
            "loop",
            "loop-module",
            replicas,
            "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 120\n",
        ),
    )?;
    agent_ready(client, ns, "loop").await?;
    Ok(())
}

/// The executor pod that is running Task `name`, once it runs.
async fn running_on(client: &Client, ns: &str, name: &str) -> Result<String> {
    let api: Api<Task> = Api::namespaced(client.clone(), ns);
    Ok(wait::until("task Running", wait::DEFAULT, || async {
        let t = api.get(name).await.map_err(|e| e.to_string())?;
        let s = t.status.clone().unwrap_or_default();
        match (s.phase, s.executor) {
            (Some(TaskPhase::Running), Some(pod)) => Ok(pod),
            _ => Err(format!("status {:?}", t.status)),
        }
    })
    .await?)
}

fn killed_executor(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("killed", |client, ns| async move {
        long_task_agent(ctx, &client, &ns, 2).await?;
        wait::until("two executors Ready", wait::DEFAULT, || {
            ready_pods(&client, &ns, "ari.dev/agent=loop", 2)
        })
        .await?;
        // Long enough (seconds) that the kill lands mid-run.
        ctx.apply_ok(
            &ns,
            &task_yaml("long", "loop", LONG_INPUT, "  retries: 2\n"),
        )?;
        let running = running_on(&client, &ns, "long").await?;
        ctx.node.kill_pod_process(&ns, &running)?;
        let t = task_finished(&client, &ns, "long", Duration::from_secs(240)).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.attempts == Some(2),
            "attempts {:?}, want 2 (one lost, one completed)",
            s.attempts
        );
        // Exactly once: the executors' logs show one completion of this task.
        let finished = finished_lines(ctx, &client, &ns, "long").await?;
        ensure!(finished == 1, "task finished {finished} times");
        Ok(())
    })
}

/// The executors' log lines that say `task` finished, over every pod of `ns`.
async fn finished_lines(ctx: &Ctx, client: &Client, ns: &str, task: &str) -> Result<usize> {
    let mut finished = 0;
    for pod in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
    {
        let logs = ctx.node.logs(ns, &pod.name_any(), "executor");
        finished += logs
            .lines()
            .filter(|l| l.contains("\"finished\"") && l.contains(&format!("\"{task}\"")))
            .count();
    }
    Ok(finished)
}

/// Every line of a finished Task of items verifies against its Agent, and says what `want`
/// says each item's output is.
fn check_items(task: &Task, agent: &Agent, doc: &[u8], want: &[String]) -> Result<()> {
    let lines = ari_crds::items::parse_results(doc)?;
    ensure!(
        lines.len() == want.len(),
        "{} lines, want {}",
        lines.len(),
        want.len()
    );
    for (i, line) in lines.iter().enumerate() {
        ensure!(line.index as usize == i, "line {i} is item {}", line.index);
        ensure!(
            line.output.as_deref() == Some(want[i].as_str()),
            "item {i} output {:?}",
            line.output
        );
        ari_crds::verify::item(task, agent, line)
            .map_err(|e| anyhow::anyhow!("item {i} does not verify: {e}"))?;
    }
    Ok(())
}

/// A Task of 40 items on `echo`: one claim, each item its own run, the results document in
/// the Task's output ConfigMap with a line per item whose attestation verifies — with ari's
/// checks and with securesystemslib — while a line that lies about its output does not; an
/// Agent granted storage refuses items at admission.
fn items_task(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("items", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        let agent = agent_ready(&client, &ns, "echo").await?;
        let inputs: Vec<String> = (0..40).map(|i| format!("item number {i}")).collect();
        ctx.apply_ok(&ns, &items_task_yaml("many", "echo", &inputs, ""))?;
        let t = task_finished(&client, &ns, "many", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.items
                == Some(ari_crds::items::ItemsStatus {
                    count: 40,
                    succeeded: 40,
                    failed: 0
                }),
            "items {:?}",
            s.items
        );
        ensure!(s.attempts == Some(1), "attempts {:?}", s.attempts);
        ensure!(
            s.output_ref.is_some(),
            "40 signed lines should not fit inline"
        );
        let doc = items_results(&client, &t).await?;
        ensure!(
            s.output_sha256 == Some(ari_model::sha256_hex(&doc)),
            "outputSha256 is not the results document's digest"
        );
        check_items(&t, &agent, &doc, &inputs)?;
        let mut lines = ari_crds::items::parse_results(&doc)?;
        let key = agent
            .status
            .as_ref()
            .and_then(|s| s.attestation_public_key.clone())
            .context("no key")?;
        match ari_e2e::intoto::check(&lines[0].attestation, &key)? {
            ari_e2e::intoto::Verdict::Verified(_) => {}
            ari_e2e::intoto::Verdict::Refused(why) => {
                anyhow::bail!("securesystemslib refused item 0's envelope: {why}")
            }
        }
        lines[1].output_sha256 = lines[0].output_sha256.clone();
        ensure!(
            ari_crds::verify::item(&t, &agent, &lines[1]).is_err(),
            "a line claiming another item's output verified"
        );
        ensure!(finished_lines(ctx, &client, &ns, "many").await? == 1);
        let (_, err, code) = plugin(ctx, &["verify", "task/many", "-n", &ns])?;
        ensure!(
            code == Some(0) && err.contains("40 items, each line signed"),
            "kubectl ari verify task/many: {code:?} {err}"
        );

        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "keeper",
                "echo-module",
                1,
                "  capabilities:\n    storage: {maxBytes: 1000}\n",
            ),
        )?;
        ctx.apply_ok(&ns, &items_task_yaml("kept", "keeper", &inputs[..2], ""))?;
        let t = task_finished(&client, &ns, "kept", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
        let message = t.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(message.contains("spec.items"), "message {message:?}");
        Ok(())
    })
}

/// A Task of two long items whose executor is killed mid-run: the retry runs both items
/// again on the other executor, and the Task finishes once with one line per item.
fn items_killed_executor(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("items-killed", |client, ns| async move {
        long_task_agent(ctx, &client, &ns, 2).await?;
        wait::until("two executors Ready", wait::DEFAULT, || {
            ready_pods(&client, &ns, "ari.dev/agent=loop", 2)
        })
        .await?;
        let inputs = vec![LONG_INPUT.to_owned(), LONG_INPUT.to_owned()];
        ctx.apply_ok(
            &ns,
            &items_task_yaml("longs", "loop", &inputs, "  retries: 2\n"),
        )?;
        let running = running_on(&client, &ns, "longs").await?;
        ctx.node.kill_pod_process(&ns, &running)?;
        let t = task_finished(&client, &ns, "longs", Duration::from_secs(300)).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(s.attempts == Some(2), "attempts {:?}, want 2", s.attempts);
        ensure!(
            s.items.as_ref().map(|i| (i.count, i.succeeded)) == Some((2, 2)),
            "items {:?}",
            s.items
        );
        let agent: Agent = Api::namespaced(client.clone(), &ns).get("loop").await?;
        let doc = items_results(&client, &t).await?;
        let lines = ari_crds::items::parse_results(&doc)?;
        ensure!(lines.len() == 2, "{} lines", lines.len());
        for line in &lines {
            ari_crds::verify::item(&t, &agent, line)?;
        }
        ensure!(
            lines[0].output == lines[1].output,
            "one input, two outputs: {:?}",
            lines.iter().map(|l| &l.output).collect::<Vec<_>>()
        );
        ensure!(finished_lines(ctx, &client, &ns, "longs").await? == 1);
        Ok(())
    })
}

/// Deleting an executor pod sends SIGTERM: it stops claiming but finishes what it runs, so the
/// task completes on its first attempt.
fn executor_drain(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("drain", |client, ns| async move {
        long_task_agent(ctx, &client, &ns, 1).await?;
        ctx.apply_ok(&ns, &task_yaml("long", "loop", LONG_INPUT, ""))?;
        let pod = running_on(&client, &ns, "long").await?;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&pod, &DeleteParams::default())
            .await?;
        let t = task_finished(&client, &ns, "long", Duration::from_secs(240)).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.attempts == Some(1),
            "attempts {:?}: the draining executor should finish it",
            s.attempts
        );
        ensure!(
            s.executor.as_deref() == Some(pod.as_str()),
            "finished by {:?}, not the draining {pod}",
            s.executor
        );
        Ok(())
    })
}

/// A user cancels the way Tekton users do (a spec field set once, with kubectl): a running
/// Task is stopped and ends Cancelled with no output, and its executor's only slot is free
/// for the next Task; a pending one never runs; the field cannot be unset.
fn cancellation(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("cancel", |client, ns| async move {
        ctx.module_configmap(&ns, "loop-module", "sha256-loop")?;
        // One executor with one slot: a Task still holding it would block the next.
        ctx.apply_ok(
            &ns,
            "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: loop
spec:
  module:
    configMap:
      name: loop-module
      key: module.wasm
  executor:
    replicas: 1
    concurrency: 1
  limits:
    fuel: 1000000000000
    timeoutSeconds: 600
",
        )?;
        agent_ready(&client, &ns, "loop").await?;
        // Runs for minutes unless stopped: only a cancel ends it in time.
        ctx.apply_ok(&ns, &task_yaml("forever", "loop", "2000000000 abc", ""))?;
        running_on(&client, &ns, "forever").await?;
        ctx.kubectl_ok([
            "-n",
            &ns,
            "patch",
            "task",
            "forever",
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":true}}"#,
        ])?;
        let t = task_finished(&client, &ns, "forever", Duration::from_secs(60)).await?;
        expect_reason(&t, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.output.is_none() && s.output_sha256.as_deref().is_none_or(|o| o == EMPTY_SHA256),
            "a cancelled Task keeps no output: {s:?}"
        );
        // The one slot is free again: the next Task runs to completion.
        ctx.apply_ok(&ns, &task_yaml("after", "loop", "3 abc", ""))?;
        let t = task_finished(&client, &ns, "after", Duration::from_secs(60)).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;

        // Unsetting is refused by the API server; other spec fields stay immutable.
        let unset = ctx.kubectl(&[
            "-n",
            &ns,
            "patch",
            "task",
            "forever",
            "--type=merge",
            "-p",
            r#"{"spec":{"cancelled":false}}"#,
        ])?;
        ensure!(!unset.status.success(), "cancelled was unset");
        let changed = ctx.kubectl(&[
            "-n",
            &ns,
            "patch",
            "task",
            "after",
            "--type=merge",
            "-p",
            r#"{"spec":{"input":"other","cancelled":true}}"#,
        ])?;
        ensure!(
            !changed.status.success(),
            "the input changed along with cancelled"
        );

        // Cancelled before any executor could claim it (its Agent has no executor yet).
        ctx.apply_ok(
            &ns,
            &task_yaml("never", "nobody", "x", "  cancelled: true\n"),
        )?;
        let t = task_finished(&client, &ns, "never", Duration::from_secs(60)).await?;
        expect_reason(&t, TaskPhase::Cancelled, TaskReason::Cancelled)?;
        ensure!(
            t.status.as_ref().and_then(|s| s.attempts).unwrap_or(0) == 0,
            "a Task cancelled while Pending never ran"
        );
        Ok(())
    })
}

/// SHA-256 of no bytes.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn operator_restart(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("restart", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        agent_ready(&client, &ns, "echo").await?;
        let op = ready_pods(
            &client,
            OPERATOR_NS,
            "app.kubernetes.io/name=ari-operator",
            1,
        )
        .await
        .map_err(anyhow::Error::msg)?;
        ctx.node.kill_pod_process(OPERATOR_NS, &op[0].name_any())?;
        // While the operator is down or restarting: new Tasks still run, a new Agent waits.
        ctx.apply_ok(&ns, &task_yaml("during", "echo", "during restart", ""))?;
        ctx.module_configmap(&ns, "echo2-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo2", "echo2-module", 1, ""))?;
        let t = task_finished(&client, &ns, "during", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        agent_ready(&client, &ns, "echo2").await?;
        ctx.apply_ok(&ns, &task_yaml("after", "echo2", "after restart", ""))?;
        let t = task_finished(&client, &ns, "after", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        Ok(())
    })
}

fn module_change(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("rollout", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.module_configmap(&ns, "wc-module", "wordcount")?;
        ctx.apply_ok(&ns, &agent_yaml("words", "echo-module", 1, ""))?;
        let before = agent_ready(&client, &ns, "words").await?;
        let old_digest = before
            .status
            .and_then(|s| s.module_digest)
            .unwrap_or_default();
        ctx.apply_ok(&ns, &agent_yaml("words", "wc-module", 1, ""))?;
        let wc_sha = sha256_file(&agent_wasm("wordcount"))?;
        let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
        wait::until("Agent reports the new digest", wait::DEFAULT, || async {
            let a = agents.get("words").await.map_err(|e| e.to_string())?;
            let d = a.status.and_then(|s| s.module_digest).unwrap_or_default();
            if d.contains(&wc_sha) {
                Ok(())
            } else {
                Err(format!("digest {d} (old {old_digest})"))
            }
        })
        .await?;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        wait::until(
            "executors rolled to the new module",
            wait::DEFAULT,
            || async {
                let d = deployments
                    .get("words-executor")
                    .await
                    .map_err(|e| e.to_string())?;
                let s = d.status.clone().unwrap_or_default();
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let rolled = s.observed_generation == d.metadata.generation
                    && s.updated_replicas.unwrap_or(0) == want
                    && s.available_replicas.unwrap_or(0) == want
                    && s.replicas.unwrap_or(0) == want;
                if rolled {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await?;
        ctx.apply_ok(&ns, &task_yaml("count", "words", "one two three", ""))?;
        let t = task_finished(&client, &ns, "count", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let s = t.status.clone().unwrap_or_default();
        ensure!(
            s.output
                .as_deref()
                .is_some_and(|o| o.contains("\"words\":3")),
            "output {:?}",
            s.output
        );
        let att = s.attestation.context("no attestation")?.predicate()?;
        ensure!(
            att.module_sha256 == wc_sha,
            "task ran module {}, want {wc_sha}",
            att.module_sha256
        );
        Ok(())
    })
}

fn ttl_expiry(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("ttl", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        agent_ready(&client, &ns, "echo").await?;
        ctx.apply_ok(
            &ns,
            &task_yaml("brief", "echo", "x", "  ttlSecondsAfterFinished: 1\n"),
        )?;
        ctx.apply_ok(&ns, &task_yaml("kept", "echo", "y", ""))?;
        task_finished(&client, &ns, "kept", wait::DEFAULT).await?;
        let api: Api<Task> = Api::namespaced(client.clone(), &ns);
        wait::until(
            "finished Task deleted after its TTL",
            wait::DEFAULT,
            || async {
                match api.get_opt("brief").await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(t) => Err(format!("still there: {:?}", phase_reason(&t))),
                }
            },
        )
        .await?;
        ensure!(
            api.get_opt("kept").await?.is_some(),
            "a Task without TTL was deleted"
        );
        Ok(())
    })
}

fn agent_deletion_gc(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gc", |client, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        agent_ready(&client, &ns, "echo").await?;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        ensure!(
            deployments.get_opt("echo-executor").await?.is_some(),
            "no executor Deployment"
        );
        Api::<Agent>::namespaced(client.clone(), &ns)
            .delete("echo", &DeleteParams::default())
            .await?;
        wait::until("Deployment garbage-collected", wait::DEFAULT, || async {
            match deployments
                .get_opt("echo-executor")
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err("still present".to_string()),
            }
        })
        .await?;
        let pods = Api::<Pod>::namespaced(client.clone(), &ns);
        wait::until("executor pods gone", wait::DEFAULT, || async {
            let n = pods
                .list(&ListParams::default().labels("ari.dev/agent=echo"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} pods left"))
            }
        })
        .await?;
        Ok(())
    })
}

/// The signing grant's Secret reaches the executor through its Deployment (the executor's
/// ServiceAccount cannot read Secrets), and the guest signs with exactly that key.
fn signing_grant(ctx: &Ctx) -> Result<()> {
    use ed25519_dalek::Signer as _;
    const KEY_HEX: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    ctx.in_namespace("signing", |client, ns| async move {
        ctx.module_configmap(&ns, "signer-module", "signer")?;
        ctx.kubectl_ok([
            "create",
            "secret",
            "generic",
            "signer-key",
            "-n",
            &ns,
            &format!("--from-literal=private-key={KEY_HEX}"),
        ])?;
        // Only a Secret marked for signing use may back the grant.
        ctx.kubectl_ok([
            "label",
            "secret",
            "signer-key",
            "-n",
            &ns,
            "ari.dev/signing-key=true",
        ])?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "signer",
                "signer-module",
                1,
                "  capabilities:\n    signing:\n      keyId: k1\n      secretRef: {name: signer-key, key: private-key}\n",
            ),
        )?;
        agent_ready(&client, &ns, "signer").await?;
        ctx.apply_ok(
            &ns,
            &task_yaml(
                "sign",
                "signer",
                "sign me",
                "  requirements:\n    capabilities: [signing]\n",
            ),
        )?;
        let t = task_finished(&client, &ns, "sign", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        let seed: [u8; 32] = hex::decode(KEY_HEX)?
            .try_into()
            .map_err(|_| anyhow::anyhow!("key length"))?;
        let want = hex::encode(
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .sign(&ari_model::attestation::guest_signed_message(b"sign me"))
                .to_bytes(),
        );
        let got = t.status.and_then(|s| s.output).unwrap_or_default();
        ensure!(got == want, "signature {got:?}, want {want:?}");
        Ok(())
    })
}
