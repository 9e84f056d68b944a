//! A namespace user points `module.image` at a hostile registry (issue 26, items 1 and 2).
//! The registry is scripted (`ari_testkit::scripted`): a real one cannot be made to redirect to an
//! internal service, name a token realm there, stream a manifest forever or serve junk layers.
//! The admin lists it as an insecure registry, as the e2e suite does for its local registry;
//! the internal service beside it (another loopback port) is on no list. This trial
//! reconfigures the operator, so it runs in its own phase, after the others.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use ari_crds::Agent;
use ari_e2e::registry::install_operator;
use ari_e2e::scenario::*;
use ari_e2e::{stress, wait};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::namespace_user;
use crate::operator_attacks::{agent_condition, agent_json, create, serves_elsewhere};
use ari_testkit::scripted::{Reply, Request, Scripted};

pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![(
        "a_hostile_registry_reads_no_internal_service_and_cannot_exhaust_the_operator",
        hostile_registry,
    )]
}

const SECRET: &str = "SECRET-internal-7f3a";
/// The chart's memory limit of the operator (`resources.limits.memory`).
const OPERATOR_LIMIT: u64 = 256 << 20;
const MIB: u64 = 1 << 20;
/// Junk layers: `JUNK` of `JUNK_MIB` MiB each, all with true digests (so they download whole
/// and are only refused as no component once in memory).
const JUNK: u8 = 6;
const JUNK_MIB: u64 = 60;
const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", ari_model::attestation::sha256_hex(bytes))
}

fn wasm_manifest(layer: &str, size: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": WASM_CONFIG, "digest": digest(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer, "size": size}],
    }))
    .unwrap_or_default()
}

/// The hostile registry's script: a repository per attack.
fn script(internal: u16, junk: Vec<String>) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |req: &Request| {
        let t = req.target.as_str();
        let internal_url = format!("http://127.0.0.1:{internal}/admin");
        if t.starts_with("/v2/peek/") {
            Reply::redirect(internal_url)
        } else if t.starts_with("/v2/realm/") {
            Reply::new(401, "").header(
                "WWW-Authenticate",
                format!(r#"Bearer realm="{internal_url}",service="r""#),
            )
        } else if t.starts_with("/v2/huge/") {
            Reply::repeat(b'{', 1 << 30, false)
        } else if let Some(i) = t
            .strip_prefix("/v2/junk-")
            .and_then(|r| r.split('/').next())
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < junk.len())
        {
            if t.contains("/manifests/") {
                Reply::new(200, wasm_manifest(&junk[i], JUNK_MIB * MIB))
            } else {
                Reply::repeat(i as u8, JUNK_MIB * MIB, true)
            }
        } else {
            Reply::new(404, "")
        }
    }
}

fn hostile_registry(ctx: &Ctx) -> Result<()> {
    let junk: Vec<String> = (0..JUNK)
        .map(|i| digest(&vec![i; (JUNK_MIB * MIB) as usize]))
        .collect();
    let (internal, registry) = ctx.rt.block_on(async {
        let internal = Scripted::start(|_: &Request| {
            Reply::new(500, format!("<html>admin console {SECRET}</html>"))
        })
        .await;
        let registry = Scripted::start(script(internal.port(), junk)).await;
        (internal, registry)
    });
    // The admin lists the hostile registry (as the suite lists its local one), not the
    // internal service: the operator restarts with it, so its peak memory starts here.
    install_operator(ctx, &registry.host())?;
    let operator_pid = operator_pid(ctx)?;
    let before = stress::peak_rss_bytes(operator_pid).unwrap_or(0);

    ctx.in_namespace("t-registry", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        let host = registry.host();
        let image = |repo: &str| json!({"module": {"image": format!("{host}/{repo}:v1")}});
        let mut expected = vec![
            ("peek".to_string(), "RegistryNotAllowed"),
            ("realm".to_string(), "RegistryNotAllowed"),
            ("huge".to_string(), "PullFailed"),
        ];
        expected.extend((0..JUNK).map(|i| (format!("junk-{i}"), "InvalidModule")));
        for (repo, _) in &expected {
            // `image` replaces the ConfigMap module of `agent_json`.
            create::<Agent>(&user, &ns, agent_json(repo, image(repo))).await?;
        }
        let mut peak = before;
        for (repo, reason) in &expected {
            let message =
                agent_condition(&admin, &ns, repo, "ModuleResolved", "False", reason).await?;
            ensure!(
                !message.contains(SECRET),
                "{repo}: the page leaked: {message}"
            );
            peak = peak.max(stress::peak_rss_bytes(operator_pid).unwrap_or(0));
        }
        // Nothing of the internal service anywhere the user can read: status, Events.
        let agents = Api::<Agent>::namespaced(user.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let events = Api::<Event>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let seen = format!("{:?}{:?}", agents.items, events.items);
        ensure!(
            !seen.contains(SECRET),
            "the internal page reached the namespace"
        );
        ensure!(
            internal.hits().is_empty(),
            "the internal service was reached: {:?}",
            internal.hits()
        );
        // The operator still serves another namespace, and never grew past its limit.
        serves_elsewhere(ctx, &admin, "t-registry-other").await?;
        let pid_now = operator_pid_async(ctx, &admin).await?;
        ensure!(pid_now == operator_pid, "the operator restarted");
        peak = peak.max(stress::peak_rss_bytes(operator_pid).unwrap_or(0));
        eprintln!(
            "operator peak RSS: {} MiB before the attack, {} MiB through it \
             (1 GiB manifest, {JUNK} junk layers of {JUNK_MIB} MiB, redirect, realm)",
            before / MIB,
            peak / MIB
        );
        ensure!(
            peak < OPERATOR_LIMIT,
            "the operator's peak RSS {} MiB is over its {} MiB limit",
            peak / MIB,
            OPERATOR_LIMIT / MIB
        );
        Ok(())
    })
}

/// The pid of the one operator pod's process on the node agent.
fn operator_pid(ctx: &Ctx) -> Result<u32> {
    // The client is made inside the runtime (it spawns its buffer task).
    ctx.rt
        .block_on(async { operator_pid_async(ctx, &ctx.cluster.client()).await })
}

async fn operator_pid_async(ctx: &Ctx, admin: &Client) -> Result<u32> {
    let pods = Api::<Pod>::namespaced(admin.clone(), OPERATOR_NS);
    let name = wait::until("one running operator pod", wait::DEFAULT, || async {
        let list = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=ari-operator"))
            .await
            .map_err(|e| e.to_string())?;
        match list.items.as_slice() {
            [only] => Ok(only.name_any()),
            other => Err(format!("{} operator pods", other.len())),
        }
    })
    .await?;
    let pid = wait::until(
        "the operator's process",
        Duration::from_secs(30),
        || async {
            ctx.node
                .pod_pids(OPERATOR_NS, &name)
                .get("operator")
                .copied()
                .ok_or_else(|| format!("no process for {name}"))
        },
    )
    .await
    .context("operator pid")?;
    Ok(pid)
}
