//! `ari-bench-livelog`: what live logs cost the API server (BENCHMARKS.md, "Live-log writes").
//!
//! N Tasks of `chatter` (fixtures/agents/relay: a log line every few million instructions,
//! until cancelled) run at once on a few executor pods, three times:
//! 1. `unfollowed`: no annotation (a Task no stream follows);
//! 2. `annotated "true"`: what the gateway used to set on every Task it created (and any Task
//!    author could set);
//! 3. `followed`: a live-log lease on every Task, renewed every 10 s as a gateway stream does.
//!
//! Tasks are created and leases renewed with the gateway's ServiceAccount token (the chart's
//! admission policy admits the annotation from it only). Once all N run, Task writes are
//! counted for `--seconds`: by the API server (`apiserver_request_total` of `tasks`, verbs
//! PATCH/UPDATE/APPLY, every code) and by a watch of the namespace's Tasks (MODIFIED events).
//! Run against the executor of another build with `ARI_EXECUTOR_BIN=/path/to/ari`.
//! Run: `scripts/bench-livelog.sh`, or `cargo build --bins && cargo run -p ari-e2e --bin
//! ari-bench-livelog -- --tasks 64`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ari_crds::names::ANNOTATION_LIVE_LOG;
use ari_crds::{Task, TaskPhase};
use ari_e2e::scenario::{Ctx, OPERATOR_NS, agent_ready, agent_yaml, task_yaml};
use ari_e2e::wait;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};

#[derive(Parser)]
struct Args {
    /// Logging Tasks running at once.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Executor pods (the Tasks spread over them; each runs tasks/executors at once).
    #[arg(long, default_value_t = 4)]
    executors: usize,
    /// Seconds of counting per mode.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unfollowed,
    AnnotatedTrue,
    Followed,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Unfollowed => "unfollowed (no annotation)",
            Mode::AnnotatedTrue => "annotated `ari.dev/live-log: \"true\"`",
            Mode::Followed => "followed (a lease renewed every 10 s)",
        }
    }
}

fn lease() -> String {
    (Timestamp::now() + SignedDuration::from_secs(30)).to_string()
}

/// Task writes the API server has answered so far (`apiserver_request_total`).
async fn task_writes(admin: &Client) -> Result<u64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(req).await?;
    let mut sum = 0f64;
    for line in text.lines() {
        if line.starts_with("apiserver_request_total{")
            && line.contains("resource=\"tasks\"")
            && ["verb=\"PATCH\"", "verb=\"UPDATE\"", "verb=\"APPLY\""]
                .iter()
                .any(|v| line.contains(v))
        {
            sum += line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    Ok(sum as u64)
}

async fn gateway_client(ctx: &Ctx, admin: &Client) -> Result<Client> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), OPERATOR_NS)
        .create_token_request("ari-gateway", &PostParams::default(), &req)
        .await?
        .status
        .context("empty TokenRequest")?
        .token;
    let mut cfg = ctx.cluster.config().clone();
    cfg.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Ok(Client::try_from(cfg)?)
}

async fn set_leases(tasks: &Api<Task>, names: &[String]) -> Result<()> {
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_LIVE_LOG: lease()}}});
    for name in names {
        tasks
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// One mode: N Tasks running, writes counted for `seconds`, then all cancelled and deleted.
/// Returns (API-server Task writes/s, watch events/s, lease renewals/s).
async fn measure(
    admin: &Client,
    gateway: &Client,
    ns: &str,
    mode: Mode,
    args: &Args,
    round: usize,
) -> Result<(f64, f64, f64)> {
    let as_gateway: Api<Task> = Api::namespaced(gateway.clone(), ns);
    let tasks: Api<Task> = Api::namespaced(admin.clone(), ns);
    let mut names = Vec::new();
    for i in 0..args.tasks {
        let name = format!("chatter-{round}-{i}");
        let mut t: Task = serde_yaml::from_str(&task_yaml(&name, "chatter", "chatter", ""))?;
        let value = match mode {
            Mode::Unfollowed => None,
            Mode::AnnotatedTrue => Some("true".to_owned()),
            Mode::Followed => Some(lease()),
        };
        if let Some(v) = value {
            t.metadata.annotations = Some([(ANNOTATION_LIVE_LOG.to_owned(), v)].into());
        }
        as_gateway.create(&PostParams::default(), &t).await?;
        names.push(name);
    }
    let n = args.tasks;
    wait::until("every Task Running", wait::DEFAULT * 2, || async {
        let running = tasks
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|t| t.name_any().starts_with(&format!("chatter-{round}-")))
            .filter(|t| t.phase() == TaskPhase::Running)
            .count();
        (running == n)
            .then_some(())
            .ok_or_else(|| format!("{running} of {n} Running"))
    })
    .await?;
    if mode == Mode::Followed {
        set_leases(&as_gateway, &names).await?;
    }
    let from = tasks.list(&ListParams::default()).await?.metadata;
    let rv = from.resource_version.unwrap_or_default();
    let events = Arc::new(AtomicU64::new(0));
    let counter = {
        let events = events.clone();
        let tasks = tasks.clone();
        tokio::spawn(async move {
            let Ok(stream) = tasks.watch(&WatchParams::default(), &rv).await else {
                return;
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(ev)) = stream.next().await {
                if matches!(ev, WatchEvent::Modified(_)) {
                    events.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let before = task_writes(admin).await?;
    let started = Instant::now();
    let mut renewals = 0u64;
    let window = Duration::from_secs(args.seconds);
    while started.elapsed() < window {
        let step = Duration::from_secs(10).min(window.saturating_sub(started.elapsed()));
        tokio::time::sleep(step).await;
        if mode == Mode::Followed && started.elapsed() < window {
            set_leases(&as_gateway, &names).await?;
            renewals += names.len() as u64;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let writes = task_writes(admin).await? - before;
    let watched = events.load(Ordering::Relaxed);
    counter.abort();
    for name in &names {
        tasks
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"cancelled": true}})),
            )
            .await?;
    }
    wait::until("every Task ended", wait::DEFAULT * 2, || async {
        let left = tasks
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|t| !t.is_finished())
            .count();
        (left == 0)
            .then_some(())
            .ok_or_else(|| format!("{left} not ended"))
    })
    .await?;
    tasks
        .delete_collection(&Default::default(), &ListParams::default())
        .await?;
    Ok((
        writes as f64 / secs,
        watched as f64 / secs,
        renewals as f64 / secs,
    ))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ctx = Ctx::start_with_operator()?;
    let _runtime = ctx.rt.enter();
    let admin = ctx.cluster.client();
    let ns = ctx
        .rt
        .block_on(ctx.cluster.new_namespace("bench-livelog"))?;
    ctx.module_configmap(&ns, "relay-module", "relay")?;
    let concurrency = args.tasks.div_ceil(args.executors);
    ctx.apply_ok(
        &ns,
        &agent_yaml(
            "chatter",
            "relay-module",
            args.executors as u32,
            &format!(
                "  limits:\n    fuel: 1000000000000\n    timeoutSeconds: 600\n  executor:\n    replicas: {}\n    concurrency: {concurrency}\n",
                args.executors
            ),
        ),
    )?;
    let rows = ctx.rt.block_on(async {
        agent_ready(&admin, &ns, "chatter").await?;
        let gateway = gateway_client(&ctx, &admin).await?;
        let mut rows = Vec::new();
        for (round, mode) in [Mode::Unfollowed, Mode::AnnotatedTrue, Mode::Followed]
            .into_iter()
            .enumerate()
        {
            let r = measure(&admin, &gateway, &ns, mode, &args, round).await?;
            eprintln!("{}: {r:?}", mode.label());
            rows.push((mode, r));
        }
        anyhow::Ok(rows)
    })?;
    println!(
        "{} logging Tasks on {} executor pods, {} s per mode; executor {}",
        args.tasks,
        args.executors,
        args.seconds,
        ari_e2e::ari_images()
            .get(ari_e2e::EXECUTOR_IMAGE)
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    println!("| Tasks | Task writes/s (API server) | watch events/s | of which lease renewals/s |");
    println!("|---|---:|---:|---:|");
    for (mode, (writes, events, renewals)) in rows {
        println!(
            "| {} | {writes:.1} | {events:.1} | {renewals:.1} |",
            mode.label()
        );
    }
    Ok(())
}
