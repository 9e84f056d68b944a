//! Agents shipped from an OCI registry, on a real control plane: the CNCF distribution registry
//! (built from its Go module, `ARI_REGISTRY_BIN`) on loopback, components pushed with
//! `ari push`, the operator from `deploy/operator.yaml` told to speak plain HTTP to those
//! registries only, executors as pods of the node agent.
//! Run: `cargo build --bins && ARI_REGISTRY_BIN="$(scripts/registry.sh --print)" cargo test -p
//! ari-e2e --test oci`.

use std::fs;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Result, ensure};
use ari_crds::{Agent, TaskPhase, TaskReason};
use ari_e2e::namespace_user;
use ari_e2e::registry::{self, Registry, digest_of, free_port, registry_bin};
use ari_e2e::scenario::*;
use ari_e2e::{stress, trials, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run_phases(
        OciCtx::start,
        vec![vec![
            ("an_agent_by_tag_runs_the_digest_it_resolved", by_tag),
            ("an_agent_by_digest_runs_its_tasks", by_digest),
            (
                "a_wrong_digest_ends_in_digest_mismatch_without_executors",
                wrong_digest,
            ),
            (
                "a_missing_image_ends_in_image_not_found_without_executors",
                missing_image,
            ),
            (
                "a_registry_that_is_down_ends_in_registry_unavailable_without_executors",
                registry_down,
            ),
            (
                "a_private_registry_is_reached_only_through_a_marked_pull_secret",
                private_registry,
            ),
            (
                "a_namespace_user_cannot_make_executors_pull_with_an_unmarked_or_foreign_pull_secret",
                tenant_pull_secrets,
            ),
            (
                "a_pull_secret_name_that_reaches_into_another_namespace_is_refused_as_such",
                malformed_pull_secret_names,
            ),
            (
                "an_outage_after_resolution_leaves_restarted_executors_on_the_cache_and_new_ones_waiting",
                outage_after_resolution,
            ),
            (
                "a_namespace_on_a_silent_registry_does_not_delay_another_namespaces_agents",
                silent_registry,
            ),
        ]],
    )
}

/// The cluster plus the registries the trials use, all started before the operator so its
/// plain-HTTP list can name them.
struct OciCtx {
    ctx: Ctx,
    /// Open; shared by the trials that only read from it.
    shared: Registry,
    /// Wants `bot`/[`PRIVATE_PASSWORD`].
    private: Registry,
    /// Stopped by the outage trial.
    outage: Mutex<Option<Registry>>,
    outage_host: String,
    /// A loopback port nothing listens on.
    down_host: String,
    /// A loopback port that accepts connections and never answers.
    silent_host: String,
}

const PRIVATE_USER: &str = "bot";
const PRIVATE_PASSWORD: &str = "s3cret-e2e";

impl trials::Shared for OciCtx {
    fn failure_context(&self) -> String {
        self.ctx.operator_logs()
    }
}

impl OciCtx {
    fn start() -> Result<OciCtx> {
        let bin = registry_bin()?;
        let ctx = Ctx::start()?;
        let shared = Registry::start(&bin, None)?;
        let private = Registry::start(&bin, Some((PRIVATE_USER, PRIVATE_PASSWORD)))?;
        let outage = Registry::start(&bin, None)?;
        let down_host = format!("127.0.0.1:{}", free_port()?);
        let silent_host = silent()?;
        let insecure = [
            shared.host(),
            private.host(),
            outage.host(),
            down_host.clone(),
            silent_host.clone(),
        ]
        .join(",");
        registry::install_operator(&ctx, &insecure)?;
        // Far longer than a trial: a lookup of the silent registry ends only when the
        // transport gives up on reading (60 s), as long as any registry may take.
        ctx.set_operator_env(&[("ARI_REGISTRY_TIMEOUT_SECONDS", "600")])?;
        Ok(OciCtx {
            ctx,
            shared,
            private,
            outage_host: outage.host(),
            outage: Mutex::new(Some(outage)),
            down_host,
            silent_host,
        })
    }
}

/// A loopback `host:port` that accepts every connection and never reads or writes on it, for
/// as long as the test runs: a registry that hangs.
fn silent() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let host = listener.local_addr()?.to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    Ok(host)
}

/// `ari push` of the example agent `agent` (`target/agents/<agent>.wasm`).
fn ari_push(agent: &str, reference: &str, docker_config: Option<&Path>) -> Result<String> {
    registry::ari_push(&agent_wasm(agent), reference, docker_config)
}

fn image_agent_yaml(name: &str, image: &str, extra_module: &str) -> String {
    format!(
        "apiVersion: ari.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  module:
    image: {image:?}
{extra_module}  executor:
    replicas: 1
    concurrency: 2
"
    )
}

/// Waits for the Agent's `ModuleResolved` condition to have `status` and `reason`.
async fn module_resolved(
    client: &Client,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<Agent> {
    let api: Api<Agent> = Api::namespaced(client.clone(), ns);
    let wanted = wait::Wanted {
        type_: "ModuleResolved",
        status,
        reason: Some(reason),
    };
    let (agent, _) = wait::condition(&api, name, wanted, |a: &Agent| {
        a.status.clone().map(|s| s.conditions).unwrap_or_default()
    })
    .await?;
    Ok(agent)
}

/// An image Agent that cannot be resolved: `reason` on `ModuleResolved`, a Warning Event with
/// it, `Ready=False`, and no executor Deployment or pod at all (so nothing can crash-loop).
async fn unresolvable(client: &Client, ns: &str, name: &str, reason: &str) -> Result<String> {
    let agent = module_resolved(client, ns, name, "False", reason).await?;
    let event = event_with_reason(client, ns, name, reason).await?;
    ensure!(
        event.type_.as_deref() == Some("Warning"),
        "Event {reason} is {:?}",
        event.type_
    );
    let status = agent.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    ensure!(
        ready.is_some_and(|c| c.status == "False" && c.reason == "ModuleNotResolved"),
        "Ready: {ready:?}"
    );
    ensure!(
        status.module_image.is_none(),
        "moduleImage {:?} recorded for an unresolvable image",
        status.module_image
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(&format!("{name}-executor"))
        .await?;
    ensure!(deployment.is_none(), "an executor Deployment was created");
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("ari.dev/agent={name}")))
        .await?;
    ensure!(pods.items.is_empty(), "executor pods exist");
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == "ModuleResolved")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    Ok(message)
}

/// Runs a Task on `agent` and checks its output and attestation against the Agent.
async fn echo_task(client: &Client, ctx: &Ctx, ns: &str, agent: &str, task: &str) -> Result<()> {
    let input = format!("hello from {task}");
    ctx.apply_ok(ns, &task_yaml(task, agent, &input, ""))?;
    let t = task_finished(client, ns, task, wait::DEFAULT).await?;
    expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
    let out = t.status.as_ref().and_then(|s| s.output.clone());
    ensure!(out.as_deref() == Some(input.as_str()), "output {out:?}");
    let agent = Api::<Agent>::namespaced(client.clone(), ns)
        .get(agent)
        .await?;
    verify_attestation(&t, &agent)
}

/// `moduleImage` is `repo@<manifest digest>` and `moduleDigest` the echo component's sha256.
fn check_pins(agent: &Agent, repo: &str, manifest_digest: &str) -> Result<()> {
    let status = agent.status.clone().unwrap_or_default();
    let want = format!("{repo}@{manifest_digest}");
    ensure!(
        status.module_image.as_deref() == Some(want.as_str()),
        "moduleImage {:?}, want {want}",
        status.module_image
    );
    let echo = format!("sha256:{}", sha256_file(&agent_wasm("echo"))?);
    ensure!(
        status.module_digest.as_deref() == Some(echo.as_str()),
        "moduleDigest {:?}, want {echo}",
        status.module_digest
    );
    Ok(())
}

fn by_tag(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-tag", |client, ns| async move {
        let repo = format!("{}/agents/echo", oci.shared.host());
        let pinned = ari_push("echo", &format!("{repo}:v1"), None)?;
        ctx.apply_ok(&ns, &image_agent_yaml("echo", &format!("{repo}:v1"), ""))?;
        let agent = agent_ready(&client, &ns, "echo").await?;
        check_pins(&agent, &repo, digest_of(&pinned)?)?;
        let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get("echo-executor")
            .await?;
        let env = deployment
            .spec
            .and_then(|s| s.template.spec)
            .map(|p| p.containers[0].env.clone().unwrap_or_default())
            .unwrap_or_default();
        let image = env.iter().find(|e| e.name == "ARI_MODULE_IMAGE");
        ensure!(
            image.and_then(|e| e.value.as_deref())
                == Some(format!("{repo}@{}", digest_of(&pinned)?).as_str()),
            "executors are given {image:?}, not the pinned digest"
        );
        echo_task(&client, ctx, &ns, "echo", "by-tag").await?;
        // `kubectl ari verify` replays it from the cluster with the component pulled by the
        // digest the Agent's status pins: nothing comes from the executor.
        ctx.apply_ok(&ns, &task_yaml("kept", "echo", "kept", "  trace: Keep\n"))?;
        task_finished(&client, &ns, "kept", wait::DEFAULT).await?;
        let out = ctx.kubectl_ari(&["verify", "task/kept", "-n", &ns])?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(0) && err.contains("replayed: same output, trace and ending"),
            "kubectl ari verify of an image Agent's Task: {err}"
        );
        Ok(())
    })
}

fn by_digest(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-digest", |client, ns| async move {
        let repo = format!("{}/agents/echo-pinned", oci.shared.host());
        let pinned = ari_push("echo", &format!("{repo}:v1"), None)?;
        let by_digest = format!("{repo}@{}", digest_of(&pinned)?);
        ctx.apply_ok(&ns, &image_agent_yaml("echo", &by_digest, ""))?;
        let agent = agent_ready(&client, &ns, "echo").await?;
        check_pins(&agent, &repo, digest_of(&pinned)?)?;
        echo_task(&client, ctx, &ns, "echo", "by-digest").await
    })
}

fn wrong_digest(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-wrong", |client, ns| async move {
        let repo = format!("{}/agents/echo-moved", oci.shared.host());
        let pinned = ari_push("echo", &format!("{repo}:v1"), None)?;
        // The tag exists, but names other bytes than the pin: someone moved it, or the pin is
        // wrong. Either way these are not the bytes the Agent asked for.
        let other = format!("sha256:{}", "0".repeat(64));
        ensure!(digest_of(&pinned)? != other, "the push hashed to zeros");
        let image = format!("{repo}:v1@{other}");
        ctx.apply_ok(&ns, &image_agent_yaml("echo", &image, ""))?;
        let message = unresolvable(&client, &ns, "echo", "DigestMismatch").await?;
        ensure!(
            message.contains(&other) && message.contains(digest_of(&pinned)?),
            "the message names neither digest: {message}"
        );
        Ok(())
    })
}

fn missing_image(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-missing", |client, ns| async move {
        let image = format!("{}/agents/never-pushed:v1", oci.shared.host());
        ctx.apply_ok(&ns, &image_agent_yaml("ghost", &image, ""))?;
        let message = unresolvable(&client, &ns, "ghost", "ImageNotFound").await?;
        ensure!(message.contains("never-pushed"), "message: {message}");
        Ok(())
    })
}

fn registry_down(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-down", |client, ns| async move {
        let image = format!("{}/agents/echo:v1", oci.down_host);
        ctx.apply_ok(&ns, &image_agent_yaml("echo", &image, ""))?;
        let message = unresolvable(&client, &ns, "echo", "RegistryUnavailable").await?;
        ensure!(message.contains(&oci.down_host), "message: {message}");
        Ok(())
    })
}

fn private_registry(oci: &OciCtx) -> Result<()> {
    use base64::Engine as _;
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-private", |client, ns| async move {
        let host = oci.private.host();
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{PRIVATE_USER}:{PRIVATE_PASSWORD}"));
        let mut auths = serde_json::Map::new();
        auths.insert(host.clone(), serde_json::json!({ "auth": auth }));
        let config = serde_json::json!({ "auths": auths }).to_string();
        let config_path = ctx.work.path().join(format!("{ns}-docker-config.json"));
        fs::write(&config_path, &config)?;
        let repo = format!("{host}/agents/echo");
        ensure!(
            ari_push("echo", &format!("{repo}:v1"), None).is_err(),
            "an anonymous push to the private registry succeeded"
        );
        let pinned = ari_push("echo", &format!("{repo}:v1"), Some(&config_path))?;

        // Without credentials the registry says no.
        ctx.apply_ok(&ns, &image_agent_yaml("anon", &format!("{repo}:v1"), ""))?;
        unresolvable(&client, &ns, "anon", "Unauthorized").await?;

        // The secret exists with the right credentials but is not marked for Agents.
        let from = format!("--from-file=.dockerconfigjson={}", config_path.display());
        ctx.kubectl_ok([
            "create",
            "secret",
            "generic",
            "registry",
            "-n",
            &ns,
            "--type=kubernetes.io/dockerconfigjson",
            &from,
        ])?;
        let secrets = "    imagePullSecrets:\n    - name: registry\n";
        ctx.apply_ok(
            &ns,
            &image_agent_yaml("echo", &format!("{repo}:v1"), secrets),
        )?;
        let message = unresolvable(&client, &ns, "echo", "PullSecretRejected").await?;
        ensure!(
            message.contains("ari.dev/pull-secret=true") && !message.contains(PRIVATE_PASSWORD),
            "message: {message}"
        );

        // Marked: resolved, pulled by the executor with the same secret, Tasks run.
        ctx.kubectl_ok([
            "label",
            "secret",
            "registry",
            "-n",
            &ns,
            "ari.dev/pull-secret=true",
        ])?;
        let agent = agent_ready(&client, &ns, "echo").await?;
        check_pins(&agent, &repo, digest_of(&pinned)?)?;
        echo_task(&client, ctx, &ns, "echo", "private").await?;
        let agent_yaml = ctx.kubectl_ok(["get", "agent", "echo", "-n", &ns, "-o", "yaml"])?;
        let deployment_yaml = ctx.kubectl_ok([
            "get",
            "deployment",
            "echo-executor",
            "-n",
            &ns,
            "-o",
            "yaml",
        ])?;
        ensure!(
            !agent_yaml.contains(PRIVATE_PASSWORD)
                && !deployment_yaml.contains(PRIVATE_PASSWORD)
                && !deployment_yaml.contains(&auth),
            "credentials were copied out of the Secret"
        );
        Ok(())
    })
}

/// A `kubernetes.io/dockerconfigjson` Secret holding `config`, with `labels`.
fn pull_secret(name: &str, config: &str, labels: &[(&str, &str)]) -> Result<Secret> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": labels.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
        },
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": { ".dockerconfigjson": config },
    }))?)
}

/// Docker config JSON with the private registry's credentials, `tenant-echo` pushed there with
/// them, and another tenant's namespace holding them in a Secret marked for its Agents:
/// `(config, image, victim namespace)`.
async fn victim_with_a_marked_secret(
    oci: &OciCtx,
    admin: &Client,
    ns: &str,
) -> Result<(String, String, String)> {
    use base64::Engine as _;
    let host = oci.private.host();
    let auth = base64::engine::general_purpose::STANDARD
        .encode(format!("{PRIVATE_USER}:{PRIVATE_PASSWORD}"));
    let mut auths = serde_json::Map::new();
    auths.insert(host.clone(), serde_json::json!({ "auth": auth }));
    let config = serde_json::json!({ "auths": auths }).to_string();
    let config_path = oci.ctx.work.path().join(format!("{ns}-docker-config.json"));
    fs::write(&config_path, &config)?;
    let image = format!("{host}/agents/tenant-echo:v1");
    ari_push("echo", &image, Some(&config_path))?;
    let victim = oci.ctx.cluster.new_namespace("oci-victim").await?;
    Api::<Secret>::namespaced(admin.clone(), &victim)
        .create(
            &PostParams::default(),
            &pull_secret("registry", &config, &[("ari.dev/pull-secret", "true")])?,
        )
        .await?;
    Ok((config, image, victim))
}

/// An image Agent pulling with the one Secret `secret`.
fn pulling_agent(name: &str, image: &str, secret: &str) -> Result<Agent> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1",
        "kind": "Agent",
        "metadata": { "name": name },
        "spec": {
            "module": { "image": image, "imagePullSecrets": [{ "name": secret }] },
            "executor": { "replicas": 1, "concurrency": 2 },
        },
    }))?)
}

/// Issue 18 (OCI): a namespace user — create on Agents, Tasks and Secrets of one namespace, no
/// read of Secrets — names pull Secrets it may not use: one in its namespace that is not
/// labelled `ari.dev/pull-secret=true` (the admin's, for something else), and a marked one
/// that lives in another tenant's namespace. Each such Agent is refused `PullSecretRejected`
/// without the credentials in the message, and no executor Deployment or pod is made, so no
/// executor ever pulls with them; the user's own marked Secret then works for the same image.
fn tenant_pull_secrets(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-tenant", |admin, ns| async move {
        let (config, image, victim) = victim_with_a_marked_secret(oci, &admin, &ns).await?;
        let pp = PostParams::default();
        let marked = [("ari.dev/pull-secret", "true")];
        // This namespace's admin keeps working credentials for something else, unmarked.
        Api::<Secret>::namespaced(admin.clone(), &ns)
            .create(&pp, &pull_secret("admin-registry", &config, &[])?)
            .await?;

        let user = namespace_user::client(ctx, &admin, &ns, true).await?;
        let agents: Api<Agent> = Api::namespaced(user.clone(), &ns);
        let attempts = [
            ("unmarked", "admin-registry", "ari.dev/pull-secret=true"),
            ("foreign", "registry", "not found in the Agent's namespace"),
        ];
        for (name, secret, says) in attempts {
            agents
                .create(&pp, &pulling_agent(name, &image, secret)?)
                .await?;
            let message = unresolvable(&admin, &ns, name, "PullSecretRejected").await?;
            ensure!(
                message.contains(says) && !message.contains(PRIVATE_PASSWORD),
                "Agent {name} naming pull secret {secret:?}: message {message:?} lacks {says:?}"
            );
        }
        // Nothing in the namespace hands those Secrets to a pod, under any Agent.
        let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let text = serde_json::to_string(&deployments.items)?;
        ensure!(
            !text.contains("admin-registry") && !text.contains(&victim),
            "a Deployment refers to a refused pull secret: {text}"
        );

        // The user's own marked Secret, same credentials, same image: served. So the refusals
        // above are about the Secrets, not the registry or the image.
        Api::<Secret>::namespaced(user.clone(), &ns)
            .create(&pp, &pull_secret("mine", &config, &marked)?)
            .await?;
        agents
            .create(&pp, &pulling_agent("own", &image, "mine")?)
            .await?;
        agent_ready(&admin, &ns, "own").await?;
        echo_task(&admin, ctx, &ns, "own", "tenant-own").await
    })
}

/// The same attack with names that are no Secret name but reach the other tenant's Secret if
/// pasted into an API path (`VICTIM/registry`, `../../VICTIM/secrets/registry`). The CRD takes
/// any string there, so the operator must refuse them itself: `PullSecretRejected`, no
/// executors. Every name is tried and all results are reported.
///
/// Fails as of this commit: the operator pastes the name into the URL (kube-rs does not encode
/// it), the API server reads `GET …/namespaces/TENANT/secrets/VICTIM/registry` as subresource
/// `registry` of a Secret `VICTIM` in the tenant's namespace and refuses it 403, so nothing of
/// the other namespace is read — but the reconcile fails with `ApiError` every 10 s forever
/// and the Agent never gets a condition saying why. The fix belongs in the operator (refuse a
/// name that is not a DNS-1123 subdomain before any API call) or the CRD (a pattern on
/// `imagePullSecrets[].name`).
fn malformed_pull_secret_names(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-names", |admin, ns| async move {
        let (_, image, victim) = victim_with_a_marked_secret(oci, &admin, &ns).await?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        let agents: Api<Agent> = Api::namespaced(user.clone(), &ns);
        let names = [
            ("qualified", format!("{victim}/registry")),
            ("traversal", format!("../../{victim}/secrets/registry")),
        ];
        for (name, secret) in &names {
            agents
                .create(
                    &PostParams::default(),
                    &pulling_agent(name, &image, secret)?,
                )
                .await?;
        }
        let mut failures = Vec::new();
        for (name, secret) in &names {
            match unresolvable(&admin, &ns, name, "PullSecretRejected").await {
                Ok(message) if !message.contains(PRIVATE_PASSWORD) => {}
                Ok(message) => failures.push(format!("{name} ({secret:?}): message {message:?}")),
                Err(e) => failures.push(format!("{name} ({secret:?}): {e}")),
            }
        }
        ensure!(failures.is_empty(), "{}", failures.join("\n"));
        Ok(())
    })
}

fn outage_after_resolution(oci: &OciCtx) -> Result<()> {
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-outage", |client, ns| async move {
        let repo = format!("{}/agents/echo", oci.outage_host);
        let pinned = ari_push("echo", &format!("{repo}:v1"), None)?;
        let by_digest = format!("{repo}@{}", digest_of(&pinned)?);
        ctx.apply_ok(&ns, &image_agent_yaml("echo", &by_digest, ""))?;
        agent_ready(&client, &ns, "echo").await?;
        echo_task(&client, ctx, &ns, "echo", "before-outage").await?;
        let pods = ready_pods(&client, &ns, "ari.dev/agent=echo", 1)
            .await
            .map_err(anyhow::Error::msg)?;
        let first = pods[0].name_any();

        // The registry goes away for good.
        drop(
            oci.outage
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .take(),
        );

        // A crashed executor comes back on the module in its cache volume, pulling nothing.
        ctx.node.kill_pod_process(&ns, &first)?;
        wait::until(
            "the executor restarted and Ready again",
            wait::DEFAULT,
            || async {
                let pods = ready_pods(&client, &ns, "ari.dev/agent=echo", 1).await?;
                match pods.iter().find(|p| p.name_any() == first) {
                    Some(p) if stress::restart_count(p) >= 1 => Ok(()),
                    _ => Err("not restarted yet".to_owned()),
                }
            },
        )
        .await?;
        let log = ctx.node.logs(&ns, &first, "executor");
        ensure!(
            log.contains("module from the local cache"),
            "the restarted executor did not use its cache:\n{}",
            tail(&log, 20)
        );
        echo_task(&client, ctx, &ns, "echo", "during-outage").await?;

        // A new pod has an empty cache: it cannot pull, says why, and waits not Ready.
        ctx.kubectl_ok(["delete", "pod", &first, "-n", &ns, "--wait=false"])?;
        let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let second = wait::until(
            "a replacement executor pod running",
            wait::DEFAULT,
            || async {
                let list = pod_api
                    .list(&ListParams::default().labels("ari.dev/agent=echo"))
                    .await
                    .map_err(|e| e.to_string())?;
                list.items
                    .iter()
                    .find(|p| p.name_any() != first && p.metadata.deletion_timestamp.is_none())
                    .map(|p| p.name_any())
                    .ok_or_else(|| "no replacement yet".to_owned())
            },
        )
        .await?;
        wait::until(
            "the replacement logs why it cannot load",
            wait::DEFAULT,
            || async {
                let log = ctx.node.logs(&ns, &second, "executor");
                if log.contains("cannot load the Agent's module; not ready")
                    && log.contains("RegistryUnavailable")
                {
                    Ok(())
                } else {
                    Err(tail(&log, 5))
                }
            },
        )
        .await?;
        let pod = pod_api.get(&second).await?;
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ensure!(!ready, "an executor without its module is Ready");
        ensure!(
            stress::restart_count(&pod) == 0,
            "the executor without its module restarted (crash loop)"
        );
        // The operator, on its next look, says the registry is gone.
        module_resolved(&client, &ns, "echo", "False", "RegistryUnavailable").await?;
        Ok(())
    })
}

/// A namespace's Agents on many references of a registry that accepts connections and never
/// answers hold no reconcile: another namespace's image and ConfigMap Agents are resolved
/// meanwhile (the wait bound is far below the 60 s each silent lookup takes), and the silent
/// registry's Agents say they are being resolved.
fn silent_registry(oci: &OciCtx) -> Result<()> {
    const STUCK: usize = 40;
    let ctx = &oci.ctx;
    ctx.in_namespace("oci-silent", |client, ns| async move {
        let stuck: Vec<String> = (0..STUCK)
            .map(|i| {
                let image = format!("{}/agents/a{i}:v1", oci.silent_host);
                image_agent_yaml(&format!("stuck-{i}"), &image, "")
            })
            .collect();
        ctx.apply_ok(&ns, &stuck.join("---\n"))?;

        let other = ctx.cluster.new_namespace("oci-silent-other").await?;
        let repo = format!("{}/agents/echo-beside-silent", oci.shared.host());
        ari_push("echo", &format!("{repo}:v1"), None)?;
        ctx.module_configmap(&other, "echo-module", "echo")?;
        ctx.apply_ok(
            &other,
            &image_agent_yaml("by-image", &format!("{repo}:v1"), ""),
        )?;
        ctx.apply_ok(&other, &agent_yaml("by-configmap", "echo-module", 1, ""))?;
        for name in ["by-image", "by-configmap"] {
            let resolved = module_resolved(&client, &other, name, "True", "Resolved");
            tokio::time::timeout(std::time::Duration::from_secs(30), resolved)
                .await
                .map_err(|_| anyhow::anyhow!("{other}/{name} not resolved within 30 s"))??;
        }
        let last = format!("stuck-{}", STUCK - 1);
        let agent = module_resolved(&client, &ns, &last, "Unknown", "ResolvingImage").await?;
        let ready = agent
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready").cloned());
        ensure!(
            ready.as_ref().is_some_and(|c| c.reason == "ResolvingImage"),
            "Ready of {last}: {ready:?}"
        );
        agent_ready(&client, &other, "by-image").await?;
        echo_task(&client, ctx, &other, "by-image", "beside-silent").await
    })
}
