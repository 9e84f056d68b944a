//! A namespace user turns on live-log writes (issue 26, item 8): every `status.liveLog` write
//! rewrites the whole Task object (input up to 1 MiB) a few times a second, so only a gateway
//! stream may ask for them. The chart's admission policy refuses the `ari.dev/live-log`
//! annotation from anyone but the gateway's ServiceAccount; with the policy gone, the executor
//! still ignores what an author can write (the old `"true"`, a lease far ahead).

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use ari_crds::names::ANNOTATION_LIVE_LOG;
use ari_crds::{Task, TaskPhase};
use ari_e2e::scenario::*;
use ari_e2e::wait;
use futures::TryStreamExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::delegation_attacks::{POLICIES, without_policy};
use crate::namespace_user;

/// The binding the chart installs (`deploy/operator.yaml`).
const BINDING: &str = "ari-operator-task-live-log";

pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![(
        "a_task_author_cannot_turn_on_live_log_writes",
        author_live_log,
    )]
}

/// A Task of `chatter` (logs a line every few ms until cancelled), annotated `lease` if any.
fn chatter(name: &str, lease: Option<&str>) -> Result<Task> {
    let mut t: Task = serde_yaml::from_str(&task_yaml(name, "chatter", "chatter", ""))?;
    if let Some(lease) = lease {
        t.metadata.annotations = Some([(ANNOTATION_LIVE_LOG.to_owned(), lease.to_owned())].into());
    }
    Ok(t)
}

fn lease_in(secs: i64) -> String {
    (Timestamp::now() + SignedDuration::from_secs(secs)).to_string()
}

async fn cancel(admin: &Client, ns: &str, name: &str) -> Result<()> {
    Api::<Task>::namespaced(admin.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"cancelled": true}})),
        )
        .await?;
    Ok(())
}

/// Every version of Task `name` the watch shows until it ends.
async fn versions_until_ended(admin: Client, ns: String, name: String) -> Result<Vec<Task>> {
    let api: Api<Task> = Api::namespaced(admin, &ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher::watcher(api, config));
    let mut seen = Vec::new();
    while let Some(ev) = stream.try_next().await? {
        if let watcher::Event::Apply(t) | watcher::Event::InitApply(t) = ev {
            let ended = t.phase().is_finished();
            seen.push(t);
            if ended {
                return Ok(seen);
            }
        }
    }
    anyhow::bail!("the watch of {name} ended")
}

/// Runs chatter Task `name` (already created) until it has heartbeated at least once more
/// after its claim, cancels it, and checks that no version while it ran or at its end carried
/// `status.liveLog` and that its writes while running were its heartbeats.
async fn no_live_log_writes(admin: &Client, ns: &str, name: &str) -> Result<()> {
    let watch = tokio::spawn(versions_until_ended(
        admin.clone(),
        ns.to_owned(),
        name.to_owned(),
    ));
    let api: Api<Task> = Api::namespaced(admin.clone(), ns);
    let claim = wait::until(&format!("{name} Running"), wait::DEFAULT, || async {
        let t = api.get(name).await.map_err(|e| e.to_string())?;
        let beat = t
            .status
            .as_ref()
            .and_then(|s| s.last_heartbeat_time.clone());
        match (t.phase(), beat) {
            (TaskPhase::Running, Some(b)) => Ok(b),
            (p, _) => Err(format!("phase {p:?}")),
        }
    })
    .await?;
    wait::until(&format!("{name} heartbeats"), wait::DEFAULT, || async {
        let t = api.get(name).await.map_err(|e| e.to_string())?;
        let beat = t
            .status
            .as_ref()
            .and_then(|s| s.last_heartbeat_time.clone());
        (beat.as_ref() != Some(&claim))
            .then_some(())
            .ok_or_else(|| "no heartbeat since the claim yet".to_owned())
    })
    .await?;
    cancel(admin, ns, name).await?;
    let versions = tokio::time::timeout(wait::DEFAULT, watch)
        .await
        .with_context(|| format!("{name} did not end after it was cancelled"))???;
    let logged: Vec<&Task> = versions
        .iter()
        .filter(|t| t.status.as_ref().is_some_and(|s| s.live_log.is_some()))
        .collect();
    ensure!(
        logged.is_empty(),
        "{name}: {} versions carry status.liveLog (the author turned live logs on)",
        logged.len()
    );
    let running: BTreeSet<String> = versions
        .iter()
        .filter(|t| t.phase() == TaskPhase::Running)
        .filter_map(|t| t.metadata.resource_version.clone())
        .collect();
    let beats: BTreeSet<String> = versions
        .iter()
        .filter(|t| t.phase() == TaskPhase::Running)
        .filter_map(|t| t.status.as_ref()?.last_heartbeat_time.as_ref())
        .map(|b| b.0.to_string())
        .collect();
    // The claim and each heartbeat, plus the cancel (a spec write) and one spare.
    ensure!(
        running.len() <= beats.len() + 2,
        "{name}: {} writes while running for {} heartbeats",
        running.len(),
        beats.len()
    );
    eprintln!(
        "{name}: {} versions while running, {} heartbeats, no liveLog",
        running.len(),
        beats.len()
    );
    Ok(())
}

fn author_live_log(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("livelog", |admin, ns| async move {
        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "relay-module", "relay")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "chatter",
                "relay-module",
                1,
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 300\n",
            ),
        )?;
        agent_ready(&admin, &ns, "chatter").await?;
        let tasks: Api<Task> = Api::namespaced(user.clone(), &ns);
        let pp = PostParams::default();

        // 1. The API server refuses the annotation from the author, whatever its value.
        let bound = POLICIES.read().await;
        for (name, lease) in [
            ("asks-true", "true".to_owned()),
            ("asks-lease", lease_in(20)),
        ] {
            let err = tasks
                .create(&pp, &chatter(name, Some(&lease))?)
                .await
                .err()
                .with_context(|| format!("the API server accepted {name} ({lease})"))?;
            ensure!(
                err.to_string().contains("set only by the ari A2A gateway"),
                "{name} refused for another reason: {err}"
            );
        }

        drop(bound);

        // 2. A gateway stream's lease (the gateway's ServiceAccount) turns live lines on.
        tasks.create(&pp, &chatter("followed", None)?).await?;
        let gateway = namespace_user::token_client(ctx, &admin, OPERATOR_NS, "ari-gateway").await?;
        wait::until("followed Running", wait::DEFAULT, || async {
            let t = tasks.get("followed").await.map_err(|e| e.to_string())?;
            (t.phase() == TaskPhase::Running)
                .then_some(())
                .ok_or_else(|| format!("phase {:?}", t.phase()))
        })
        .await?;
        let patch =
            serde_json::json!({"metadata": {"annotations": {ANNOTATION_LIVE_LOG: lease_in(30)}}});
        Api::<Task>::namespaced(gateway, &ns)
            .patch("followed", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context("the gateway's ServiceAccount sets the lease")?;
        wait::until("live lines of followed", wait::DEFAULT, || async {
            let t = tasks.get("followed").await.map_err(|e| e.to_string())?;
            t.status
                .and_then(|s| s.live_log)
                .filter(|l| l.lines.iter().any(|l| l.contains("tick")))
                .map(|_| ())
                .ok_or_else(|| "no status.liveLog yet".to_owned())
        })
        .await?;
        cancel(&admin, &ns, "followed").await?;

        // 3. Without the policy, what an author can write still writes no live log.
        let probe = chatter("probe", Some("true"))?;
        without_policy(&admin, BINDING, &tasks, &probe, || async {
            let far = "2999-01-01T00:00:00Z";
            for (name, lease) in [("author-true", "true"), ("author-far-lease", far)] {
                tasks.create(&pp, &chatter(name, Some(lease))?).await?;
            }
            for name in ["author-true", "author-far-lease"] {
                no_live_log_writes(&admin, &ns, name).await?;
            }
            Ok(())
        })
        .await
    })
}
