//! The network caller of the A2A gateway as attacker (issue 26, items 6, 7 and 16): someone who
//! can reach the gateway's port, with a token of their own namespace or none, sending whatever
//! bytes they like with plain HTTP (no SDK, so nothing is tidied up on the way). Each trial
//! asserts the attack failed and the gateway still serves a well-behaved caller. The gateway is
//! the chart's pod (`deploy/operator.yaml`) with its default bounds; pod IPs are loopback
//! addresses, so a trial can pick its source address (the per-source review budget).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ari_e2e::scenario::*;
use ari_e2e::wait;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The audience the gateway reviews tokens for: the chart's default, `ari-gateway`.
/// `ARI_E2E_GATEWAY_AUDIENCE=` (empty) asks for API-server tokens instead: how these trials were
/// run against the gateway from before audience binding, to see each fail on the old code.
fn audience() -> Option<String> {
    match std::env::var("ARI_E2E_GATEWAY_AUDIENCE") {
        Ok(a) if a.is_empty() => None,
        Ok(a) => Some(a),
        Err(_) => Some("ari-gateway".to_owned()),
    }
}

pub fn trials() -> Vec<(&'static str, ari_e2e::trials::TrialFn)> {
    vec![
        (
            "gateway_made_up_task_ids_do_not_grow_its_memory",
            made_up_ids,
        ),
        ("gateway_closes_a_stream_nobody_reads", unread_stream),
        (
            "gateway_bad_token_flood_does_not_lock_out_a_known_caller",
            token_flood,
        ),
        (
            "gateway_reads_no_body_before_the_token_and_times_out_slow_clients",
            slow_clients,
        ),
        ("gateway_answers_a_multibyte_message_id", multibyte_id),
        (
            "gateway_keeps_each_callers_conversations_to_them",
            conversations,
        ),
        ("gateway_card_url_ignores_the_host_header", card_host),
    ]
}

/// The gateway pod's A2A (`ip:8080`) and probe (`ip:8081`) addresses.
struct Gw {
    a2a: String,
    probes: String,
}

async fn gateway(admin: &Client) -> Result<Gw> {
    let pods = wait::until("a gateway pod Ready", wait::DEFAULT, || {
        ready_pods(admin, OPERATOR_NS, "app.kubernetes.io/name=ari-gateway", 1)
    })
    .await?;
    let ip = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("the gateway pod has no IP")?;
    Ok(Gw {
        a2a: format!("{ip}:8080"),
        probes: format!("{ip}:8081"),
    })
}

/// A connection to `addr` from `source` (any loopback address), with a small receive buffer
/// when `rcvbuf` is set (a client that will not read).
async fn connect(addr: &str, source: Option<IpAddr>, rcvbuf: Option<u32>) -> Result<TcpStream> {
    let addr: SocketAddr = addr.parse()?;
    let socket = TcpSocket::new_v4()?;
    if let Some(n) = rcvbuf {
        socket.set_recv_buffer_size(n)?;
    }
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    Ok(socket.connect(addr).await?)
}

/// One HTTP/1.1 request (`Connection: close`): the status and the body.
async fn request(
    addr: &str,
    source: Option<IpAddr>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String)> {
    let mut stream = connect(addr, source, None).await?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut buf))
        .await
        .with_context(|| format!("{method} {}: no answer in 60 s", cut(path)))??;
    parse_response(&buf).with_context(|| format!("{method} {}", cut(path)))
}

fn cut(s: &str) -> &str {
    &s[..s.len().min(80)]
}

fn parse_response(buf: &[u8]) -> Result<(u16, String)> {
    let text = String::from_utf8_lossy(buf);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status line in {:?}", cut(&text)))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// A JSON-RPC call as `token`; a 429 (another trial sharing the gateway) is retried, as a
/// client should.
async fn rpc(
    gw: &Gw,
    token: &str,
    path: &str,
    method: &str,
    params: Value,
) -> Result<(u16, Value)> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    for _ in 0..50 {
        let (code, body) = request(&gw.a2a, None, "POST", path, &headers, body.as_bytes()).await?;
        if code == 429 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        return Ok((code, value));
    }
    bail!("{method}: 429 fifty times")
}

/// A token of `sa` in `ns` for `audience` (`None`: the API server's own).
async fn token(admin: &Client, ns: &str, sa: &str, audience: Option<String>) -> Result<String> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a]).unwrap_or_default(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    Ok(Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &req)
        .await?
        .status
        .context("empty TokenRequest")?
        .token)
}

/// ServiceAccounts `alice`, `bob` (A2A callers: create/get/list/patch tasks, get agents) and
/// `auditor` (get/list tasks, and `get` on `tasks/a2a-all`: every caller's conversations), and a
/// gateway token for each.
async fn callers(ctx: &Ctx, admin: &Client, ns: &str) -> Result<[String; 3]> {
    ctx.apply_ok(
        ns,
        "apiVersion: v1
kind: ServiceAccount
metadata: {name: alice}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: bob}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: auditor}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-caller}
rules:
  - apiGroups: [ari.dev]
    resources: [tasks]
    verbs: [create, get, list, patch]
  - apiGroups: [ari.dev]
    resources: [agents]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a2a-auditor}
rules:
  - apiGroups: [ari.dev]
    resources: [tasks, tasks/a2a-all]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: a2a-caller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-caller}
subjects: [{kind: ServiceAccount, name: alice}, {kind: ServiceAccount, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: a2a-auditor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a2a-auditor}
subjects: [{kind: ServiceAccount, name: auditor}]
",
    )?;
    Ok([
        token(admin, ns, "alice", audience()).await?,
        token(admin, ns, "bob", audience()).await?,
        token(admin, ns, "auditor", audience()).await?,
    ])
}

/// An exposed Agent `idle` with no executor: its Tasks stay pending, so only the trial writes
/// their status.
fn idle_agent(ctx: &Ctx, ns: &str) -> Result<()> {
    ctx.module_configmap(ns, "echo-module", "echo")?;
    ctx.apply_ok(
        ns,
        &agent_yaml(
            "idle",
            "echo-module",
            0,
            "  a2a:\n    exposed: true\n    publicCard: true\n",
        ),
    )
}

/// Waits until the gateway serves `ns/idle` (its Agent cache has seen it).
async fn served(gw: &Gw, ns: &str) -> Result<()> {
    let path = format!("/a2a/{ns}/idle/.well-known/agent-card.json");
    wait::until(
        "the gateway serves the idle Agent",
        wait::DEFAULT,
        || async {
            match request(&gw.a2a, None, "GET", &path, &[], b"").await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// Sends `text` to `ns/idle` as `token`, returning at once: the new task's id.
async fn send(gw: &Gw, ns: &str, token: &str, message_id: &str) -> Result<String> {
    let (code, v) = rpc(
        gw,
        token,
        &format!("/a2a/{ns}/idle"),
        "SendMessage",
        json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
               "configuration": {"returnImmediately": true}}),
    )
    .await?;
    v["result"]["task"]["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("SendMessage: {code} {v}"))
}

/// The gateway's resident memory, from its own /metrics.
async fn rss(gw: &Gw) -> Result<u64> {
    let (code, body) = request(&gw.probes, None, "GET", "/metrics", &[], b"").await?;
    ensure!(code == 200, "GET /metrics: {code}");
    let value = body
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .context("no process_resident_memory_bytes")?;
    Ok(value.trim().parse::<f64>()? as u64)
}

const MIB: u64 = 1 << 20;

/// 1,500 requests for the events of made-up 30 KB task ids (the reproduction: 25 MB
/// grew to 71 MB, never freed) leave the gateway's memory within a few MiB of where it was.
fn made_up_ids(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-ids", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        // Six callers, each with its own rate bucket, share the 1,500 requests.
        ctx.apply_ok(
            &ns,
            "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader}
rules: [{apiGroups: [ari.dev], resources: [tasks], verbs: [get]}]
",
        )?;
        let mut tokens = Vec::new();
        for i in 0..6 {
            let sa = format!("prober-{i}");
            ctx.kubectl_ok(["create", "serviceaccount", &sa, "-n", &ns])?;
            ctx.kubectl_ok([
                "create",
                "rolebinding",
                &sa,
                "-n",
                &ns,
                "--role=reader",
                &format!("--serviceaccount={ns}:{sa}"),
            ])?;
            tokens.push(token(&admin, &ns, &sa, audience()).await?);
        }
        let before = rss(&gw).await?;
        let done = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for (w, token) in tokens.into_iter().enumerate() {
            let (a2a, ns, done) = (gw.a2a.clone(), ns.clone(), done.clone());
            workers.push(tokio::spawn(async move {
                let auth = format!("Bearer {token}");
                for i in 0..250 {
                    let id = format!("{w}-{i}-{}", "x".repeat(30_000));
                    let path = format!("/a2a/{ns}/idle/tasks/{id}/events");
                    loop {
                        let (code, _) =
                            request(&a2a, None, "GET", &path, &[("Authorization", &auth)], b"")
                                .await?;
                        match code {
                            404 => break,
                            429 => tokio::time::sleep(Duration::from_millis(100)).await,
                            other => bail!("a made-up id: {other}, want 404"),
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        for w in workers {
            w.await??;
        }
        ensure!(done.load(Ordering::Relaxed) == 1_500, "1,500 answered");
        let after = rss(&gw).await?;
        let grown = after.saturating_sub(before);
        eprintln!(
            "gateway RSS: {} MiB before, {} MiB after 1,500 made-up 30 KB ids",
            before / MIB,
            after / MIB
        );
        ensure!(
            grown < 16 * MIB,
            "the gateway grew {} MiB ({} → {} MiB) on 1,500 made-up ids",
            grown / MIB,
            before / MIB,
            after / MIB
        );
        Ok(())
    })
}

/// A stream whose client never reads, while its Task keeps changing (live log lines written to
/// the Task's status, as an executor would), is closed by the gateway once its writes stall
/// for the write timeout: the gateway's end of the connection goes away.
fn unread_stream(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-unread", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let [alice, ..] = callers(ctx, &admin, &ns).await?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        let id = send(&gw, &ns, &alice, "m-unread").await?;
        // Open the plain event stream with a 4 KiB receive buffer, read its head, then stop.
        let mut stream = connect(&gw.a2a, None, Some(4096)).await?;
        let local = stream.local_addr()?;
        let head = format!(
            "GET /a2a/{ns}/idle/tasks/{id}/events HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {alice}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        let mut first = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut first))
            .await
            .context("no stream head in 30 s")??;
        let text = String::from_utf8_lossy(&first[..n]).into_owned();
        ensure!(text.starts_with("HTTP/1.1 200"), "the stream opens: {text:?}");
        // The Task's status changes four times a second with 16 new 250-byte lines.
        let tasks: Api<ari_crds::Task> = Api::namespaced(admin.clone(), &ns);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (tasks, id, stop) = (tasks.clone(), id.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 16;
                    let lines: Vec<String> =
                        (0..16).map(|i| format!("INFO {seq}-{i} {}", "y".repeat(240))).collect();
                    let patch = json!({"status": {"liveLog": {"seq": seq, "lines": lines}}});
                    let _ = tasks
                        .patch_status(&id, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let gateway_end = gw.a2a.clone();
        let closed = wait::until(
            "the gateway closed the unread stream",
            Duration::from_secs(180),
            || {
                let gateway_end = gateway_end.clone();
                async move {
                    match established(&gateway_end, local) {
                        Ok(false) => Ok(()),
                        Ok(true) => Err("the gateway's end is still established".to_owned()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        writer.await?;
        closed?;
        // Draining what was buffered ends in the close, and not because the task ended.
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest))
            .await
            .context("the closed stream still delivers after 30 s")?
            .ok();
        let rest = String::from_utf8_lossy(&rest);
        ensure!(
            rest.contains("event: log") && !rest.contains("event: done"),
            "the stream carried log events and no end: {:.300}",
            rest
        );
        // Its caller is still served.
        let (code, v) = rpc(&gw, &alice, &format!("/a2a/{ns}/idle"), "GetTask", json!({"id": id})).await?;
        ensure!(code == 200 && v["result"]["id"] == id.as_str(), "GetTask after: {code} {v}");
        Ok(())
    })
}

/// Whether the TCP connection from `server` (`ip:port`) to `client` is still established on
/// the server's side (`/proc/net/tcp`: the gateway runs on this host, pod IPs are loopback).
fn established(server: &str, client: SocketAddr) -> Result<bool> {
    let server: SocketAddr = server.parse()?;
    let hex = |a: SocketAddr| -> Result<String> {
        let IpAddr::V4(ip) = a.ip() else {
            bail!("IPv4 only")
        };
        Ok(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(ip.octets()),
            a.port()
        ))
    };
    let (local, remote) = (hex(server)?, hex(client)?);
    let table = std::fs::read_to_string("/proc/net/tcp")?;
    Ok(table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1] == local && f[2] == remote && f[3] == "01"
    }))
}

/// Made-up tokens from a few source addresses, far past the review budget, for longer than the
/// gateway caches an answer: a caller whose token was accepted before is never refused.
fn token_flood(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-flood", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let [alice, ..] = callers(ctx, &admin, &ns).await?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        let path = format!("/a2a/{ns}/idle");
        let (code, _) = rpc(&gw, &alice, &path, "ListTasks", json!({})).await?;
        ensure!(code == 200, "alice is known good: {code}");
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let mut flood = Vec::new();
        for w in 0..32u8 {
            let (a2a, path, stop, refused) =
                (gw.a2a.clone(), path.clone(), stop.clone(), refused.clone());
            let source = IpAddr::V4(Ipv4Addr::new(127, 201, 0, 1 + w % 4));
            flood.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let auth = format!("Bearer made-up-{w}-{i}");
                    if let Ok((429, _)) = request(
                        &a2a,
                        Some(source),
                        "POST",
                        &path,
                        &[("Authorization", &auth)],
                        b"{}",
                    )
                    .await
                    {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        // Alice keeps calling for three times the gateway's 10 s answer cache, so her token
        // must be reviewed again during the flood.
        let started = Instant::now();
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).to_string();
        let auth = format!("Bearer {alice}");
        let mut codes = Vec::new();
        while started.elapsed() < Duration::from_secs(30) {
            let (code, _) = request(
                &gw.a2a,
                None,
                "POST",
                &path,
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                body.as_bytes(),
            )
            .await?;
            codes.push(code);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for f in flood {
            f.await?;
        }
        let refused = refused.load(Ordering::Relaxed);
        eprintln!(
            "flood: {refused} made-up tokens refused with 429; alice: {} calls",
            codes.len()
        );
        ensure!(
            refused > 100,
            "the flood was past the budget ({refused} refused)"
        );
        ensure!(
            codes.iter().all(|c| *c == 200),
            "a known-good caller was refused during the flood: {codes:?}"
        );
        Ok(())
    })
}

/// Reads until the peer closes (`Ok(bytes)`) or `limit` passes (`Err`).
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    tokio::time::timeout(limit, stream.read_to_end(&mut buf))
        .await
        .context("the gateway kept the connection open")?
        .ok();
    Ok(buf)
}

/// A body is not read before the token is accepted; headers and bodies that never arrive do
/// not hold a connection: the slowloris client is cut by the header and body timeouts (10 s).
fn slow_clients(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-slow", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let [alice, ..] = callers(ctx, &admin, &ns).await?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        // No token, a 1 MiB body announced and never sent: 401 at once, from the headers.
        let mut s = connect(&gw.a2a, None, None).await?;
        let head = format!(
            "POST /a2a/{ns}/idle HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{{"
        );
        s.write_all(head.as_bytes()).await?;
        let answer = until_closed(&mut s, Duration::from_secs(30)).await?;
        let (code, _) = parse_response(&answer)?;
        ensure!(code == 401, "no token, body still to come: {code}, want 401");
        // A request line and then nothing: closed by the header timeout.
        let mut s = connect(&gw.a2a, None, None).await?;
        s.write_all(format!("POST /a2a/{ns}/idle HTTP/1.1\r\nHost: gw\r\n").as_bytes())
            .await?;
        until_closed(&mut s, Duration::from_secs(60)).await?;
        // A connection that sends nothing at all: closed too.
        let mut s = connect(&gw.a2a, None, None).await?;
        until_closed(&mut s, Duration::from_secs(60)).await?;
        // A known caller whose body stalls: 408 after the body timeout.
        let mut s = connect(&gw.a2a, None, None).await?;
        let head = format!(
            "POST /a2a/{ns}/idle HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {alice}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\""
        );
        s.write_all(head.as_bytes()).await?;
        let answer = until_closed(&mut s, Duration::from_secs(60)).await?;
        let (code, _) = parse_response(&answer)?;
        ensure!(code == 408, "a stalled body: {code}, want 408");
        // Still serving.
        let (code, _) = rpc(&gw, &alice, &format!("/a2a/{ns}/idle"), "ListTasks", json!({})).await?;
        ensure!(code == 200, "ListTasks after: {code}");
        Ok(())
    })
}

/// A `messageId` of multibyte characters longer than the kept 253 bytes is answered (it
/// panicked the request: `truncate` inside a character).
fn multibyte_id(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-utf8", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let [alice, ..] = callers(ctx, &admin, &ns).await?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        let id = send(&gw, &ns, &alice, &"é".repeat(200)).await?;
        let (code, v) = rpc(
            &gw,
            &alice,
            &format!("/a2a/{ns}/idle"),
            "GetTask",
            json!({"id": id}),
        )
        .await?;
        let kept = v["result"]["history"][0]["messageId"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            code == 200 && !kept.is_empty() && kept.chars().all(|c| c == 'é'),
            "GetTask: {code} {v}"
        );
        Ok(())
    })
}

/// Bob, with the same RBAC as Alice in the same namespace, cannot see, follow, cancel or list
/// Alice's conversation, and gets exactly the answers a task that does not exist gets; the
/// auditor, with `get` on `tasks/a2a-all`, sees it. A token for the API server's audience is
/// refused; a message naming a `taskId` says nothing about whether that task exists.
fn conversations(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-mine", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let [alice, bob, auditor] = callers(ctx, &admin, &ns).await?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        let path = format!("/a2a/{ns}/idle");
        let id = send(&gw, &ns, &alice, "m-alice").await?;
        let get = |token: String, id: String| {
            let (gw, path) = (&gw, path.clone());
            async move { rpc(gw, &token, &path, "GetTask", json!({"id": id})).await }
        };
        let (code, v) = get(alice.clone(), id.clone()).await?;
        ensure!(code == 200 && v["result"]["id"] == id.as_str(), "alice gets hers: {v}");
        let (_, theirs) = get(bob.clone(), id.clone()).await?;
        let (_, none) = get(bob.clone(), "idle-a2a-nosuch".into()).await?;
        ensure!(
            theirs["error"]["code"] == -32001 && none["error"]["code"] == -32001,
            "bob's GetTask of alice's task: {theirs}, of none: {none}"
        );
        let (_, v) = rpc(&gw, &bob, &path, "ListTasks", json!({})).await?;
        ensure!(
            v["result"]["tasks"].as_array().is_some_and(|t| t.is_empty()),
            "bob's ListTasks: {v}"
        );
        let (_, v) = rpc(&gw, &alice, &path, "ListTasks", json!({})).await?;
        ensure!(
            v["result"]["tasks"][0]["id"] == id.as_str(),
            "alice's ListTasks: {v}"
        );
        let (_, v) = rpc(&gw, &bob, &path, "CancelTask", json!({"id": id})).await?;
        ensure!(v["error"]["code"] == -32001, "bob's CancelTask: {v}");
        let tasks: Api<ari_crds::Task> = Api::namespaced(admin.clone(), &ns);
        ensure!(
            tasks.get(&id).await?.spec.cancelled != Some(true),
            "bob cancelled alice's task"
        );
        let (code, body) = request(
            &gw.a2a,
            None,
            "POST",
            &path,
            &[
                ("Authorization", &format!("Bearer {bob}")),
                ("Content-Type", "application/json"),
            ],
            json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": id}})
                .to_string()
                .as_bytes(),
        )
        .await?;
        ensure!(
            code == 200 && body.contains("-32001"),
            "bob's SubscribeToTask: {code} {body:.300}"
        );
        let (code, _) = request(
            &gw.a2a,
            None,
            "GET",
            &format!("{path}/tasks/{id}/events"),
            &[("Authorization", &format!("Bearer {bob}"))],
            b"",
        )
        .await?;
        ensure!(code == 404, "bob's event stream of alice's task: {code}");
        // Joining by taskId: the same answer whether the task exists or not.
        let join = |task: &str| {
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "taskId": task, "parts": [{"text": "x"}]}})
        };
        let (_, exists) = rpc(&gw, &bob, &path, "SendMessage", join(&id)).await?;
        let (_, missing) = rpc(&gw, &bob, &path, "SendMessage", join("idle-a2a-nosuch")).await?;
        // (A reply needs only `create`, which bob has: both are "task not found", each naming
        // the id bob sent, which tells him nothing he did not know.)
        let said = |answer: &serde_json::Value, task: &str| {
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            (answer["error"]["code"].clone(), message.replace(task, "ID"))
        };
        ensure!(
            said(&exists, &id) == said(&missing, "idle-a2a-nosuch")
                && exists["error"]["code"] == -32001,
            "a taskId is an existence oracle: {exists} vs {missing}"
        );
        // The auditor may see every caller's conversations.
        let (code, v) = get(auditor.clone(), id.clone()).await?;
        ensure!(code == 200 && v["result"]["id"] == id.as_str(), "the auditor: {v}");
        // A token for the API server, not the gateway: refused.
        let api_token = token(&admin, &ns, "alice", None).await?;
        let (code, _) = rpc(&gw, &api_token, &path, "ListTasks", json!({})).await?;
        ensure!(code == 401, "a token without the gateway's audience: {code}, want 401");
        Ok(())
    })
}

/// The card names the gateway by its configured URL (or a relative one), never by the Host
/// header a caller sends.
fn card_host(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gw-host", |admin, ns| async move {
        idle_agent(ctx, &ns)?;
        let gw = gateway(&admin).await?;
        served(&gw, &ns).await?;
        let mut s = connect(&gw.a2a, None, None).await?;
        let req = format!(
            "GET /a2a/{ns}/idle/.well-known/agent-card.json HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await?;
        let answer = until_closed(&mut s, Duration::from_secs(30)).await?;
        let (code, body) = parse_response(&answer)?;
        ensure!(code == 200, "the public card: {code}");
        let card: Value = serde_json::from_str(&body)?;
        let url = card["supportedInterfaces"][0]["url"].as_str().unwrap_or_default();
        ensure!(
            !body.contains("evil.example") && url.ends_with(&format!("/a2a/{ns}/idle")),
            "the card follows the Host header: {url}"
        );
        Ok(())
    })
}
