//! `kubectl logs` on the e2e cluster, as an agent author uses it: the real kubectl asks the real
//! API server, which reads the node agent's kubelet log endpoint over TLS. Executor and operator
//! pods, `--tail`, `--limit-bytes` with `--follow`, a missing container, and a Task's guest log
//! lines found by the Task's name. And the node agent's kubelet endpoint itself answers no one
//! but the API server: not a caller without a certificate, not the cluster admin's certificate,
//! not a self-signed one that claims the API server's name.
//! Run: `cargo build --bins && cargo test -p ari-e2e --test logs`.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use ari_crds::{TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
        (
            "the_kubelet_log_endpoint_refuses_every_caller_but_the_api_server",
            kubelet_refuses_others,
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
    // A freshly started operator may not have written a line yet, and a rollout may replace
    // the pod picked: each attempt takes a Ready pod as listed now and waits (with a
    // deadline) for its first line through kubectl.
    let (pod, out) = ctx.rt.block_on(async {
        let client = ctx.cluster.client();
        wait::until(
            "the operator's first log line through kubectl logs",
            wait::DEFAULT,
            || async {
                let pods = ready_pods(
                    &client,
                    OPERATOR_NS,
                    "app.kubernetes.io/name=ari-operator",
                    1,
                )
                .await?;
                let pod = pods
                    .first()
                    .map(kube::ResourceExt::name_any)
                    .unwrap_or_default();
                let out = logs(ctx, &["-n", OPERATOR_NS, &pod])?;
                if out.trim().is_empty() {
                    Err(format!("kubectl logs {pod} printed nothing yet"))
                } else {
                    Ok((pod, out))
                }
            },
        )
        .await
    })?;
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

/// A client certificate and its key, PEM.
struct Identity {
    cert: String,
    key: String,
}

/// How the kubelet endpoint answered one `GET`: a status and body, or no HTTP answer at all
/// (the TLS handshake or the connection was refused; the error says how).
type Answer = std::result::Result<(u16, String), String>;

/// `GET path` on the node agent's kubelet endpoint at 127.0.0.1:`port`, over TLS verified
/// against the cluster CA, presenting `identity` (or no certificate).
async fn kubelet_get(
    ctx: &Ctx,
    port: u16,
    identity: Option<&Identity>,
    path: &str,
) -> Result<Answer> {
    let pki = ctx.cluster.kubelet_pki();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(pki.ca_cert.as_bytes())?)?;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder.with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(id.cert.as_bytes())?],
            PrivateKeyDer::from_pem_slice(id.key.as_bytes())?,
        )?,
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("connect to the kubelet endpoint on port {port}"))?;
    let server = ServerName::try_from("127.0.0.1")?;
    // Under TLS 1.3 a refused client certificate may surface only at the first read: every
    // step of the exchange counts as the handshake's answer.
    let exchange = async {
        let mut tls = connector.connect(server, tcp).await?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        tls.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = match exchange.await {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP response: {}", tail(&text, 5)))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok(Ok((status, body)))
}

/// The only caller a kubelet endpoint may serve is the API server (`kubectl logs` goes through
/// it, which authorizes the user): anyone who reaches the node's port directly — with no
/// certificate, with the admin's (signed by the same CA), or with a self-signed certificate
/// claiming the API server's name — gets no log, while the API server's own certificate does,
/// for the same path.
fn kubelet_refuses_others(ctx: &Ctx) -> Result<()> {
    ctx.rt.block_on(async {
        let client = ctx.cluster.client();
        let nodes = Api::<Node>::all(client.clone())
            .list(&Default::default())
            .await?;
        let port = nodes
            .items
            .first()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.daemon_endpoints.as_ref())
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|e| e.port)
            .context("the Node advertises no kubelet endpoint")?;
        let port = u16::try_from(port).context("kubelet port out of range")?;
        let pod = wait::until("operator pod Ready", wait::DEFAULT, || {
            ready_pods(
                &client,
                OPERATOR_NS,
                "app.kubernetes.io/name=ari-operator",
                1,
            )
        })
        .await?
        .first()
        .map(kube::ResourceExt::name_any)
        .context("no operator pod")?;
        let path = format!("/containerLogs/{OPERATOR_NS}/{pod}/operator?tailLines=1");

        // The API server's identity is served: the refusals below are about who asks.
        let pki = ctx.cluster.kubelet_pki();
        let apiserver = Identity {
            cert: pki.apiserver_client_cert.clone(),
            key: pki.apiserver_client_key.clone(),
        };
        let served = kubelet_get(ctx, port, Some(&apiserver), &path).await?;
        ensure!(
            matches!(&served, Ok((200, _))),
            "the API server's own certificate was not served: {served:?}"
        );

        // The admin's client certificate, as its kubeconfig holds it.
        let kubeconfig: serde_json::Value =
            serde_yaml::from_str(&std::fs::read_to_string(ctx.cluster.kubeconfig_path())?)?;
        let decode = |field: &str| -> Result<String> {
            let b64 = kubeconfig["users"][0]["user"][field]
                .as_str()
                .with_context(|| format!("the admin kubeconfig has no {field}"))?;
            let pem = base64::engine::general_purpose::STANDARD.decode(b64.trim())?;
            Ok(String::from_utf8(pem)?)
        };
        let admin = Identity {
            cert: decode("client-certificate-data")?,
            key: decode("client-key-data")?,
        };
        let impostor_key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        let impostor = Identity {
            cert: params.self_signed(&impostor_key)?.pem(),
            key: impostor_key.serialize_pem(),
        };

        for (who, identity) in [
            ("a caller without a certificate", None),
            ("a self-signed API server certificate", Some(&impostor)),
        ] {
            let answer = kubelet_get(ctx, port, identity, &path).await?;
            let refused = match &answer {
                // Refused in the handshake (the certificate is missing or not the CA's) or, if
                // it got that far, by the endpoint.
                Err(_) => true,
                Ok((status, _)) => *status == 401 || *status == 403,
            };
            ensure!(refused, "{who} was answered {answer:?}");
        }
        // The admin's certificate is the cluster CA's, so TLS lets it through: the refusal must
        // be the endpoint's own 403 (whoever holds a CA-signed certificate is not thereby the
        // API server).
        let admin_answer = kubelet_get(ctx, port, Some(&admin), &path).await?;
        ensure!(
            matches!(&admin_answer, Ok((403, body)) if body.contains("only the API server")),
            "the admin's certificate got {admin_answer:?}, not 403"
        );
        Ok(())
    })
}
