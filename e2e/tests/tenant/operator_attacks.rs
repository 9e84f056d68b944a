//! Attacks on the operator, the CRDs and the chart by a namespace user (issue 13, items 1,
//! 2, 3, 10, 11, 14). The user acts with a ServiceAccount token that holds only
//! create/get/list on Agents and Tasks of its namespace (plus create/update on Secrets where
//! a trial says so); the module ConfigMap is put in place by the admin, as an installer would.
//! Every trial ends by proving the operator still serves another namespace.

use anyhow::{Context, Result, bail, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::wait;

use crate::namespace_user;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::ApiResource;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The trials of this module, for `main.rs`.
pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![
        (
            "tenant_cannot_sign_with_the_attestation_key_or_an_unmarked_secret",
            signing_oracle,
        ),
        ("tenant_cannot_choose_the_executor_image", executor_image),
        (
            "an_undecodable_task_does_not_blind_a_restarted_operator_which_released_its_lease",
            undecodable_task,
        ),
        (
            "a_replaced_attestation_key_is_restored_and_never_published",
            planted_key,
        ),
        (
            "agents_the_api_server_refuses_to_deploy_say_why",
            undeployable_agents,
        ),
    ]
}

/// Creates an object of kind `K` from JSON as `client` (unknown fields reach the API server).
pub(crate) async fn create<K>(client: &Client, ns: &str, obj: Value) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>,
{
    let ar = ApiResource::erase::<K>(&());
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
    let obj: DynamicObject = serde_json::from_value(obj)?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("create {} in {ns}", ar.kind))?;
    Ok(())
}

pub(crate) fn agent_json(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"module": {"configMap": {"name": "echo-module", "key": "module.wasm"}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), spec_extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
           "metadata": {"name": name}, "spec": spec})
}

fn task_json(name: &str, agent: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"agentRef": {"name": agent}, "input": "hi"});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), spec_extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
           "metadata": {"name": name}, "spec": spec})
}

/// Waits until condition `ty` of Agent `name` has `status` and `reason`; returns its message.
pub(crate) async fn agent_condition(
    client: &Client,
    ns: &str,
    name: &str,
    ty: &str,
    status: &str,
    reason: &str,
) -> Result<String> {
    let agents = Api::<Agent>::namespaced(client.clone(), ns);
    let wanted = wait::Wanted {
        type_: ty,
        status,
        reason: Some(reason),
    };
    let (_, message) = wait::condition(&agents, name, wanted, |a: &Agent| {
        a.status.clone().map(|s| s.conditions).unwrap_or_default()
    })
    .await?;
    Ok(message)
}

/// The operator still serves: a fresh namespace's echo Task succeeds.
pub(crate) async fn serves_elsewhere(ctx: &Ctx, admin: &Client, prefix: &str) -> Result<()> {
    let ns = ctx.cluster.new_namespace(prefix).await?;
    ctx.module_configmap(&ns, "echo-module", "echo")?;
    ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
    ctx.apply_ok(&ns, &task_yaml("still", "echo", "still serving", ""))?;
    let t = task_finished(admin, &ns, "still", wait::DEFAULT).await?;
    expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)
}

async fn no_deployment(admin: &Client, ns: &str, agent: &str) -> Result<()> {
    let name = format!("{agent}-executor");
    let d = Api::<Deployment>::namespaced(admin.clone(), ns)
        .get_opt(&name)
        .await?;
    ensure!(d.is_none(), "Deployment {name} exists: {d:?}");
    Ok(())
}

const KEY_HEX: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";

/// Item 1: no Agent may sign with the attestation key, nor with a Secret not marked for
/// signing use; a missing or malformed key says so. None of them gets executors.
fn signing_oracle(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-signing", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "signer")?;
        let user = namespace_user::client(ctx, &admin, &ns, true).await?;
        let secret = |name: &str, labels: Value, value: &str| {
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "labels": labels},
                   "stringData": {"private-key": value}})
        };
        create::<Secret>(&user, &ns, secret("unmarked", json!({}), KEY_HEX)).await?;
        create::<Secret>(
            &user,
            &ns,
            secret("not-a-key", json!({"ari.dev/signing-key": "true"}), "hello"),
        )
        .await?;
        create::<Secret>(
            &user,
            &ns,
            secret("marked", json!({"ari.dev/signing-key": "true"}), KEY_HEX),
        )
        .await?;
        let signing = |secret: &str| {
            json!({"capabilities": {"signing": {"keyId": "k",
                   "secretRef": {"name": secret, "key": "private-key"}}}})
        };
        for (agent, secret, says) in [
            ("oracle", "ari-attestation-key", "attestation key"),
            ("unmarked", "unmarked", "ari.dev/signing-key=true"),
            ("not-a-key", "not-a-key", "not an Ed25519 key"),
            ("missing", "nowhere", "not found"),
        ] {
            create::<Agent>(&user, &ns, agent_json(agent, signing(secret))).await?;
            let msg = agent_condition(
                &admin,
                &ns,
                agent,
                "Valid",
                "False",
                "SigningSecretRejected",
            )
            .await?;
            ensure!(
                msg.contains(says),
                "{agent}: message {msg:?} lacks {says:?}"
            );
            event_with_reason(&admin, &ns, agent, "SigningSecretRejected").await?;
            no_deployment(&admin, &ns, agent).await?;
        }
        // The marked key works, so the refusals above are about the Secret, not the grant.
        create::<Agent>(&user, &ns, agent_json("signer", signing("marked"))).await?;
        agent_ready(&admin, &ns, "signer").await?;
        serves_elsewhere(ctx, &admin, "t-signing-other").await
    })
}

/// Item 2: an Agent that sets `executor.image` still runs the operator's image.
fn executor_image(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-image", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        // Without strict field validation the API server drops the unknown field (with a
        // warning); `kubectl apply` refuses it (bad_input.rs).
        create::<Agent>(
            &user,
            &ns,
            agent_json("echo", json!({"executor": {"image": "busybox"}})),
        )
        .await?;
        agent_ready(&admin, &ns, "echo").await?;
        let op = Api::<Deployment>::namespaced(admin.clone(), OPERATOR_NS)
            .get("ari-operator")
            .await?;
        let want = op
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers[0].env.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|e| e.name == "ARI_EXECUTOR_IMAGE")
            .and_then(|e| e.value)
            .context("operator has no ARI_EXECUTOR_IMAGE")?;
        let dep = Api::<Deployment>::namespaced(admin.clone(), &ns)
            .get("echo-executor")
            .await?;
        let image = dep
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers[0].image.clone());
        ensure!(
            image.as_deref() == Some(want.as_str()),
            "executor image {image:?}, want the operator's {want}"
        );
        serves_elsewhere(ctx, &admin, "t-image-other").await
    })
}

/// Item 3: with a Task the Rust types cannot decode stored (planted while the admin had the
/// schema loosened, as a CRD upgrade gap would), a restarted operator still handles Tasks
/// of other namespaces.
fn undecodable_task(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-poison", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        let path = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/ttlSecondsAfterFinished/maximum";
        ctx.kubectl_ok([
            "patch",
            "crd",
            "tasks.ari.dev",
            "--type=json",
            &format!(r#"-p=[{{"op":"remove","path":"{path}"}}]"#),
        ])?;
        let planted = wait::until("the loosened schema accepts the poison Task", wait::DEFAULT, || {
            let user = user.clone();
            let ns = ns.clone();
            async move {
                create::<Task>(
                    &user,
                    &ns,
                    task_json("poison", "nobody", json!({"ttlSecondsAfterFinished": 4_294_967_296u64})),
                )
                .await
                .map_err(|e| format!("{e:#}"))
            }
        })
        .await;
        // Restore the schema whatever happened.
        ctx.kubectl_ok([
            "patch",
            "crd",
            "tasks.ari.dev",
            "--type=json",
            &format!(r#"-p=[{{"op":"add","path":"{path}","value":4294967295}}]"#),
        ])?;
        planted?;

        // Restart the operator (its first list now contains the poison), following the
        // Lease's history from before the restart (item 14).
        let leases = Api::<Lease>::namespaced(admin.clone(), OPERATOR_NS);
        // A freshly started operator may not lead yet: wait for a holder.
        let (holder, lease) = wait::until("a Lease holder", wait::DEFAULT, || async {
            let lease = leases.get("ari-operator").await.map_err(|e| e.to_string())?;
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
            holder
                .map(|h| (h, lease))
                .ok_or_else(|| "no Lease holder yet".to_owned())
        })
        .await?;
        let rv = lease.resource_version().context("no resourceVersion")?;
        let wp = WatchParams::default().fields("metadata.name=ari-operator");
        let mut history = leases.watch(&wp, &rv).await?.boxed();
        let pods = Api::<Pod>::namespaced(admin.clone(), OPERATOR_NS);
        let lp = ListParams::default().labels("app.kubernetes.io/name=ari-operator");
        let before: Vec<String> = pods.list(&lp).await?.iter().map(|p| p.name_any()).collect();
        for p in &before {
            pods.delete(p, &DeleteParams::default()).await?;
        }
        // Every change after `rv`, in order: the holder must go to none before anyone else
        // holds it (the terminated leader released it; no expiry was waited for).
        let released = tokio::time::timeout(wait::DEFAULT, async {
            while let Some(ev) = history.try_next().await? {
                let WatchEvent::Modified(l) = ev else { continue };
                match l.spec.and_then(|s| s.holder_identity) {
                    None => return Ok(()),
                    Some(h) if h.is_empty() => return Ok(()),
                    Some(h) if h == holder => continue,
                    Some(h) => bail!("Lease went from {holder} to {h} without a release"),
                }
            }
            bail!("Lease watch ended")
        })
        .await
        .context("no change of the Lease")?;
        released?;
        wait::until("a new operator pod Ready", wait::DEFAULT, || async {
            let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
            let fresh = list.iter().any(|p| {
                !before.contains(&p.name_any())
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            if fresh { Ok(()) } else { Err(format!("pods: {:?}", list.iter().map(|p| p.name_any()).collect::<Vec<_>>())) }
        })
        .await?;

        // A Task only the operator acts on (its Agent does not exist) in another namespace.
        let other = ctx.cluster.new_namespace("t-poison-other").await?;
        ctx.apply_ok(&other, &task_yaml("orphan", "nobody", "x", "  deadlineSeconds: 5\n"))?;
        let t = task_finished(&admin, &other, "orphan", wait::DEFAULT).await?;
        ensure!(
            phase_reason(&t).0 == Some(TaskPhase::Failed),
            "orphan Task: {:?}",
            t.status
        );
        // The poison is still there (so the operator really listed past it).
        let raw = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &ApiResource::erase::<Task>(&()))
            .get("poison")
            .await?;
        ensure!(raw.data["spec"]["ttlSecondsAfterFinished"] == json!(4_294_967_296u64));
        serves_elsewhere(ctx, &admin, "t-poison-serve").await
    })
}

/// Item 10: a namespace user who may write Secrets replaces the attestation key copy; the
/// operator restores it, keeps publishing the key from its own namespace, and new Tasks are
/// attested with the real key.
fn planted_key(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-key", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let user = namespace_user::client(ctx, &admin, &ns, true).await?;
        create::<Agent>(&user, &ns, agent_json("echo", json!({}))).await?;
        let agent = agent_ready(&admin, &ns, "echo").await?;
        let published = agent
            .status
            .as_ref()
            .and_then(|s| s.attestation_public_key.clone())
            .context("no attestationPublicKey")?;

        // The attacker's key, as the tenant (update without reading: PUT is unconditional).
        let planted: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ari-attestation-key", "namespace": ns},
            "stringData": {"private-key": KEY_HEX, "public-key": "attacker"}
        }))?;
        Api::<Secret>::namespaced(user.clone(), &ns)
            .replace("ari-attestation-key", &PostParams::default(), &planted)
            .await
            .context("tenant replaces the attestation key copy")?;
        event_with_reason(&admin, &ns, "echo", "AttestationKeyRestored").await?;
        let secrets = Api::<Secret>::namespaced(admin.clone(), &ns);
        wait::until(
            "the copy holds the real key again",
            wait::DEFAULT,
            || async {
                let s = secrets
                    .get("ari-attestation-key")
                    .await
                    .map_err(|e| e.to_string())?;
                let pk = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get("public-key"))
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned());
                if pk.as_deref() == Some(published.as_str()) {
                    Ok(())
                } else {
                    Err(format!("public-key {pk:?}"))
                }
            },
        )
        .await?;
        let agent = Api::<Agent>::namespaced(admin.clone(), &ns)
            .get("echo")
            .await?;
        let now = agent
            .status
            .as_ref()
            .and_then(|s| s.attestation_public_key.clone());
        ensure!(
            now.as_deref() == Some(published.as_str()),
            "published key changed to {now:?}"
        );

        create::<Task>(&user, &ns, task_json("after", "echo", json!({}))).await?;
        let t = task_finished(&admin, &ns, "after", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        verify_attestation(&t, &agent)?;
        serves_elsewhere(ctx, &admin, "t-key-other").await
    })
}

/// Item 11: schema-valid Agents that cannot be deployed get a condition and an Event.
fn undeployable_agents(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-undeployable", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        let long = "a".repeat(64);
        let cases = [
            (long.as_str(), json!({}), "Valid", "Invalid", "at most 63"),
            (
                "bad-selector",
                json!({"executor": {"nodeSelector": {"no spaces/allowed here": "x"}}}),
                "Valid",
                "Invalid",
                "nodeSelector",
            ),
            (
                "bad-toleration",
                json!({"executor": {"tolerations": [{"key": "k", "operator": "Sometimes"}]}}),
                "Valid",
                "Invalid",
                "tolerations",
            ),
            // Only the API server knows this one: requests above limits.
            (
                "greedy",
                json!({"executor": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}}),
                "Ready",
                "DeploymentRejected",
                "cpu",
            ),
        ];
        for (name, spec, ty, reason, says) in cases {
            create::<Agent>(&user, &ns, agent_json(name, spec)).await?;
            let msg = agent_condition(&admin, &ns, name, ty, "False", reason).await?;
            ensure!(msg.contains(says), "{name}: message {msg:?} lacks {says:?}");
            event_with_reason(&admin, &ns, name, reason).await?;
            no_deployment(&admin, &ns, name).await?;
        }
        serves_elsewhere(ctx, &admin, "t-undeployable-other").await
    })
}
