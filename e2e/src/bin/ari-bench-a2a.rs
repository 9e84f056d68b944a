//! `ari-bench-a2a`: what the A2A gateway adds to a Task, in one run on a real control plane
//! (BENCHMARKS.md, "A2A gateway").
//!
//! 1. Round trip: a blocking `SendMessage` to `echo` through the gateway against a Task
//!    created directly and watched to its end, alternating, one at a time.
//! 2. Sustained rate: messages/s of `SendMessage` with `returnImmediately` against Task
//!    creates/s straight to the API server, each with the same number of requests in flight,
//!    on an Agent with no executors (so only the front door is measured).
//! 3. Memory: the gateway's resident set (its own `/metrics`) before and with N open streams,
//!    one per Task of step 2.
//!
//! Run: `scripts/bench-a2a.sh` (release builds), or `cargo build --bins && cargo run -p ari-e2e
//! --bin ari-bench-a2a -- --round-trips 100 --messages 1000 --streams 1000`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ari_crds::Task;
use ari_e2e::bench::{percentiles, task_round_trip};
use ari_e2e::scenario::{Ctx, OPERATOR_NS, agent_ready, agent_yaml, ready_pods, task_yaml};
use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Round trips of each kind (after 10 warm-up pairs, not counted).
    #[arg(long, default_value_t = 100)]
    round_trips: usize,
    /// Messages (and Task creates) for the sustained rate.
    #[arg(long, default_value_t = 1000)]
    messages: usize,
    /// Requests in flight during the sustained rate.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// Streams held open for the memory figure (at most `messages`).
    #[arg(long, default_value_t = 1000)]
    streams: usize,
}

/// Message ids: unique within the run.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

type Http = HttpClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

struct Gateway {
    http: Http,
    base: String,
    probes: String,
    token: String,
}

impl Gateway {
    fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<Value>,
    ) -> Result<http::Request<Full<Bytes>>> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        Ok(http::Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(Bytes::from(body)))?)
    }

    /// One JSON-RPC call; the `result`.
    async fn call(&self, url: &str, method: &str, params: Value) -> Result<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let resp = self
            .http
            .request(self.request("POST", url, Some(body))?)
            .await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let v: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{status}: {}", String::from_utf8_lossy(&bytes)))?;
        match v.get("result") {
            Some(r) => Ok(r.clone()),
            None => bail!("{status}: {v}"),
        }
    }

    async fn send(&self, agent_url: &str, text: &str, immediately: bool) -> Result<Value> {
        let params = json!({
            "message": {"messageId": format!("bench-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)), "role": "ROLE_USER", "parts": [{"text": text}]},
            "configuration": {"returnImmediately": immediately},
        });
        self.call(agent_url, "SendMessage", params).await
    }

    /// The gateway's resident set, from its own process metrics.
    async fn rss(&self) -> Result<f64> {
        let resp = self
            .http
            .request(self.request("GET", &format!("{}/metrics", self.probes), None)?)
            .await?;
        let text =
            String::from_utf8_lossy(&resp.into_body().collect().await?.to_bytes()).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.trim().parse().ok())
            .context("process_resident_memory_bytes is not in /metrics")
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ctx = Ctx::start_with_operator()?;
    // Bounds out of the way: this measures the path, not the limits.
    let streams = (args.streams + 100).to_string();
    ctx.set_gateway_env(&[
        "ARI_GATEWAY_RATE_PER_SECOND=1000000",
        "ARI_GATEWAY_RATE_BURST=1000000",
        &format!("ARI_GATEWAY_MAX_STREAMS={streams}"),
        &format!("ARI_GATEWAY_MAX_STREAMS_PER_CALLER={streams}"),
    ])?;
    let _runtime = ctx.rt.enter();
    let client = ctx.cluster.client();
    let ns = ctx.rt.block_on(ctx.cluster.new_namespace("bench-a2a"))?;
    ctx.module_configmap(&ns, "echo-module", "echo")?;
    ctx.apply_ok(
        &ns,
        &agent_yaml("echo", "echo-module", 1, "  a2a:\n    exposed: true\n"),
    )?;
    ctx.apply_ok(
        &ns,
        &agent_yaml("parked", "echo-module", 0, "  a2a:\n    exposed: true\n"),
    )?;
    ctx.apply_ok(
        &ns,
        "apiVersion: v1
kind: ServiceAccount
metadata: {name: bench}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bench}
rules: [{apiGroups: [ari.dev], resources: [tasks, agents], verbs: [create, get, list, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bench}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: bench}
subjects: [{kind: ServiceAccount, name: bench}]
",
    )?;
    let token = ctx.kubectl_ok(["create", "token", "bench", "-n", &ns, "--duration=2h"])?;
    let gw = ctx.rt.block_on(async {
        agent_ready(&client, &ns, "echo").await?;
        let pods = ari_e2e::wait::until("a gateway pod Ready", ari_e2e::wait::DEFAULT, || {
            ready_pods(
                &client,
                OPERATOR_NS,
                "app.kubernetes.io/name=ari-gateway",
                1,
            )
        })
        .await?;
        let ip = pods[0]
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("pod IP")?;
        anyhow::Ok(Gateway {
            http: HttpClient::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{ip}:8080/a2a/{ns}"),
            probes: format!("http://{ip}:8081"),
            token: token.trim().to_owned(),
        })
    })?;
    let gw = Arc::new(gw);
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);

    // 1. Round trips.
    let echo = format!("{}/echo", gw.base);
    let (mut plain, mut a2a) = (Vec::new(), Vec::new());
    for i in 0..args.round_trips + 10 {
        let p = ctx.rt.block_on(task_round_trip(
            &tasks,
            &format!("plain-{i}"),
            "echo",
            "hello",
        ))?;
        let started = Instant::now();
        let result = ctx.rt.block_on(gw.send(&echo, "hello", false))?;
        let a = started.elapsed();
        ensure!(
            result["task"]["status"]["state"] == "TASK_STATE_COMPLETED",
            "SendMessage ended {}",
            result["task"]["status"]
        );
        if i >= 10 {
            plain.push(p);
            a2a.push(a);
        }
    }
    let (p, a) = (percentiles(&mut plain), percentiles(&mut a2a));

    // 2. Sustained rate, front door only (the `parked` Agent has no executors).
    let parked = format!("{}/parked", gw.base);
    let started = Instant::now();
    let ids: Vec<String> = ctx.rt.block_on(async {
        futures::stream::iter(0..args.messages)
            .map(|i| {
                let gw = gw.clone();
                let parked = parked.clone();
                async move {
                    let r = gw.send(&parked, &format!("m{i}"), true).await?;
                    r["task"]["id"]
                        .as_str()
                        .map(str::to_owned)
                        .context("no task id")
                }
            })
            .buffer_unordered(args.in_flight)
            .collect::<Vec<Result<String>>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()
    })?;
    let a2a_rate = args.messages as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    ctx.rt.block_on(async {
        futures::stream::iter(0..args.messages)
            .map(|i| {
                let tasks = tasks.clone();
                async move {
                    let t: Task = serde_yaml::from_str(&task_yaml(
                        &format!("direct-{i}"),
                        "parked",
                        "m",
                        "",
                    ))?;
                    tasks.create(&PostParams::default(), &t).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(args.in_flight)
            .collect::<Vec<Result<()>>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()
    })?;
    let create_rate = args.messages as f64 / started.elapsed().as_secs_f64();

    // 3. Memory with open streams.
    let n = args.streams.min(ids.len());
    let (before, with, opened) = ctx.rt.block_on(async {
        let before = gw.rss().await?;
        let mut open = Vec::with_capacity(n);
        for id in &ids[..n] {
            let req = gw.request("GET", &format!("{parked}/tasks/{id}/events"), None)?;
            let resp = gw.http.request(req).await?;
            ensure!(resp.status() == 200, "stream {id}: {}", resp.status());
            let mut body = resp.into_body();
            // The first event (the task's status) has arrived: the stream is live.
            let first = tokio::time::timeout(Duration::from_secs(30), body.frame()).await;
            ensure!(matches!(first, Ok(Some(Ok(_)))), "stream {id} sent nothing");
            open.push(body);
        }
        tokio::time::sleep(Duration::from_secs(2)).await; // let the allocator settle (not a sync)
        let with = gw.rss().await?;
        let opened = open.len();
        drop(open);
        anyhow::Ok((before, with, opened))
    })?;

    println!("| Path | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| Task created and watched to its end (`echo`) | {:.1} ms | {:.1} ms |",
        p.0, p.1
    );
    println!(
        "| A2A `SendMessage`, blocking (`echo`) | {:.1} ms | {:.1} ms |",
        a.0, a.1
    );
    println!(
        "\nA2A/direct p50 ratio {:.2}, p99 ratio {:.2} ({} of each)",
        a.0 / p.0,
        a.1 / p.1,
        args.round_trips
    );
    println!(
        "\nsustained, {} in flight, {} each: A2A SendMessage (returnImmediately) {:.0} msgs/s; Task create {:.0} creates/s; ratio {:.2}",
        args.in_flight,
        args.messages,
        a2a_rate,
        create_rate,
        a2a_rate / create_rate
    );
    println!(
        "\ngateway resident memory: {:.1} MiB idle (after the runs above), {:.1} MiB with {opened} open streams: {:.1} KiB per stream",
        before / 1048576.0,
        with / 1048576.0,
        (with - before).max(0.0) / 1024.0 / opened.max(1) as f64
    );
    Ok(())
}
