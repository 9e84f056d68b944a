//! The one kubelet API the node agent serves: container logs, so `kubectl logs` works.
//!
//! `kubectl logs` asks the API server, which connects over TLS to the Node's InternalIP at
//! `status.daemonEndpoints.kubeletEndpoint.Port` and sends
//! `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`, `limitBytes`.
//! The agent listens on 127.0.0.1 only, serves a certificate of the cluster CA (the API server
//! verifies it: `--kubelet-certificate-authority`) and answers only the holder of the API
//! server's `--kubelet-client-certificate` (a real kubelet asks the API server to authorize
//! each caller; here the API server is the only caller there is). `timestamps`, `sinceSeconds`,
//! `sinceTime` and `previous` are refused with 400: the log files keep no per-line times and
//! append restarts to one file.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use super::Shared;
use crate::certs::KubeletPki;

/// How often a followed log is checked for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// A follow ends after this long even if the container still runs and the client stays.
const FOLLOW_MAX: Duration = Duration::from_secs(3600);
/// A TLS handshake that takes longer is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Read size while streaming a log file.
const CHUNK: usize = 64 * 1024;

type Body = BoxBody<Bytes, Infallible>;

/// The bound listener and its TLS setup; [`KubeletServer::serve`] runs it.
pub(crate) struct KubeletServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    apiserver: CertificateDer<'static>,
}

impl KubeletServer {
    /// Binds a free port on 127.0.0.1 (the Node's InternalIP) with the cluster's kubelet PKI.
    pub(crate) async fn bind(pki: &KubeletPki) -> Result<KubeletServer, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        fn pem_err(what: &'static str) -> impl Fn(rustls::pki_types::pem::Error) -> String {
            move |e| format!("{what}: {e}")
        }
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pki.ca_cert.as_bytes()).map_err(pem_err("CA"))?)
            .map_err(|e| format!("CA: {e}"))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| format!("client verifier: {e}"))?;
        let serving = CertificateDer::from_pem_slice(pki.serving_cert.as_bytes())
            .map_err(pem_err("serving certificate"))?;
        let key = PrivateKeyDer::from_pem_slice(pki.serving_key.as_bytes())
            .map_err(pem_err("serving key"))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![serving], key)
            .map_err(|e| format!("serving certificate: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let apiserver = CertificateDer::from_pem_slice(pki.apiserver_client_cert.as_bytes())
            .map_err(pem_err("API server client certificate"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("binding the kubelet port: {e}"))?;
        Ok(KubeletServer {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            apiserver,
        })
    }

    /// The port the Node advertises as its kubelet endpoint.
    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Accepts connections until the task is dropped; each is served on its own task.
    pub(crate) async fn serve(self, shared: Arc<Shared>) {
        let apiserver = Arc::new(self.apiserver);
        loop {
            let Ok((tcp, _)) = self.listener.accept().await else {
                continue;
            };
            let (acceptor, shared, apiserver) =
                (self.acceptor.clone(), shared.clone(), apiserver.clone());
            tokio::spawn(async move {
                let Ok(Ok(tls)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                else {
                    return;
                };
                // Authorization: the verified chain only says "signed by the cluster CA", which
                // the admin holds too; only the API server's own certificate may read logs.
                let allowed = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .is_some_and(|c| c.as_ref() == apiserver.as_ref().as_ref());
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(handle(req, shared, allowed).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    }
}

/// What a log request asks for.
#[derive(Debug, Default, PartialEq, Eq)]
struct LogQuery {
    follow: bool,
    tail_lines: Option<u64>,
    limit_bytes: Option<u64>,
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>, allowed: bool) -> Response<Body> {
    if !allowed {
        return text(
            StatusCode::FORBIDDEN,
            "only the API server may use this node's kubelet API\n",
        );
    }
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    let Some((ns, pod, container)) = parse_path(req.uri().path()) else {
        return text(
            StatusCode::NOT_FOUND,
            "the ari e2e node agent serves only /containerLogs/{namespace}/{pod}/{container}\n",
        );
    };
    let query = match parse_query(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
    };
    let key = (ns.to_string(), pod.to_string());
    let Some(dir) = shared.lock().get(&key).map(|e| e.dir.clone()) else {
        return text(
            StatusCode::NOT_FOUND,
            &format!("pod {ns}/{pod} is not on this node\n"),
        );
    };
    let path = dir.join("logs").join(format!("{container}.log"));
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(_) => {
            return text(
                StatusCode::NOT_FOUND,
                &format!(
                    "container {container} of pod {ns}/{pod} has no log on this node \
                     (no such container, or it has not started)\n"
                ),
            );
        }
    };
    let start = match query.tail_lines {
        None => 0,
        Some(n) => {
            let p = path.clone();
            match tokio::task::spawn_blocking(move || {
                std::fs::File::open(&p).and_then(|mut f| tail_offset(&mut f, n))
            })
            .await
            {
                Ok(Ok(off)) => off,
                Ok(Err(e)) => return text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
                Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
            }
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let follow = query.follow.then(|| Running {
        shared,
        key,
        container: container.to_string(),
    });
    tokio::spawn(stream_file(file, start, query.limit_bytes, follow, tx));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(body).boxed());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    resp
}

/// Whether a followed container still runs (the agent keeps the pids of running ones).
struct Running {
    shared: Arc<Shared>,
    key: (String, String),
    container: String,
}

impl Running {
    fn now(&self) -> bool {
        self.shared
            .lock()
            .get(&self.key)
            .is_some_and(|e| e.pids.contains_key(&self.container))
    }
}

/// Sends the file from `start`, at most `limit` bytes; with `follow`, keeps sending new output
/// until the container stops, the client goes away (the body is dropped) or [`FOLLOW_MAX`].
async fn stream_file(
    mut file: tokio::fs::File,
    start: u64,
    limit: Option<u64>,
    follow: Option<Running>,
    tx: mpsc::Sender<Bytes>,
) {
    if file.seek(SeekFrom::Start(start)).await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + FOLLOW_MAX;
    let mut left = limit.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Sampled before draining: output written before the container stopped is still sent.
        let running = follow.as_ref().is_some_and(Running::now);
        loop {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            if want == 0 {
                return;
            }
            let n = match file.read(&mut buf[..want]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            left -= n as u64;
            if tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                return;
            }
        }
        if !running || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = tx.closed() => return,
        }
    }
}

fn text(status: StatusCode, msg: &str) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(msg.to_string())).boxed());
    *resp.status_mut() = status;
    resp
}

/// `/containerLogs/{ns}/{pod}/{container}` → its three names, each a plain object name.
fn parse_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/containerLogs/")?;
    let mut parts = rest.split('/');
    let (ns, pod, container) = (parts.next()?, parts.next()?, parts.next()?);
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (parts.next().is_none() && plain(ns) && plain(pod) && plain(container))
        .then_some((ns, pod, container))
}

/// The query the API server forwards from `PodLogOptions` (it sets only non-default values).
fn parse_query(query: &str) -> Result<LogQuery, String> {
    let mut q = LogQuery::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{k}={v:?} is not a non-negative integer"))
        };
        match k {
            "follow" => q.follow = v == "true",
            "tailLines" => q.tail_lines = Some(number(v)?),
            "limitBytes" => q.limit_bytes = Some(number(v)?),
            "timestamps" | "previous" if v == "true" => {
                return Err(format!(
                    "{k} is not supported by the ari e2e node agent (its container logs keep \
                     no per-line times and append restarts to one file)"
                ));
            }
            "sinceSeconds" | "sinceTime" => {
                return Err(format!(
                    "{k} is not supported by the ari e2e node agent (its container logs keep \
                     no per-line times)"
                ));
            }
            _ => {}
        }
    }
    Ok(q)
}

/// The offset where the last `n` lines of `r` start (a last line without a newline counts).
fn tail_offset<R: Read + Seek>(r: &mut R, n: u64) -> std::io::Result<u64> {
    let len = r.seek(SeekFrom::End(0))?;
    if n == 0 {
        return Ok(len);
    }
    let (mut pos, mut seen) = (len, 0u64);
    let mut buf = vec![0u8; 8192];
    while pos > 0 {
        let start = pos.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(pos - start) as usize];
        r.seek(SeekFrom::Start(start))?;
        r.read_exact(chunk)?;
        for (i, b) in chunk.iter().enumerate().rev() {
            let at = start + i as u64;
            // The newline that ends the file ends the last line; it starts none.
            if *b == b'\n' && at + 1 != len {
                seen += 1;
                if seen == n {
                    return Ok(at + 1);
                }
            }
        }
        pos = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_offset_finds_the_start_of_the_last_lines() {
        let data = b"one\ntwo\nthree\n";
        let off = |n| tail_offset(&mut std::io::Cursor::new(&data[..]), n).unwrap_or(99);
        assert_eq!(off(0), 14);
        assert_eq!(off(1), 8);
        assert_eq!(off(2), 4);
        assert_eq!(off(3), 0);
        assert_eq!(off(10), 0);
        let open_end = b"one\ntwo";
        assert_eq!(
            tail_offset(&mut std::io::Cursor::new(&open_end[..]), 1).ok(),
            Some(4)
        );
    }

    #[test]
    fn tail_offset_crosses_read_blocks() {
        let mut data = vec![b'x'; 20_000];
        data.extend_from_slice(b"\nlast\n");
        let off = tail_offset(&mut std::io::Cursor::new(&data[..]), 1).ok();
        assert_eq!(off, Some(20_001));
        assert_eq!(
            tail_offset(&mut std::io::Cursor::new(&data[..]), 2).ok(),
            Some(0)
        );
    }

    #[test]
    fn query_keeps_what_is_served_and_refuses_times() {
        assert_eq!(
            parse_query("follow=true&tailLines=3&limitBytes=10&stream=All"),
            Ok(LogQuery {
                follow: true,
                tail_lines: Some(3),
                limit_bytes: Some(10)
            })
        );
        assert!(parse_query("tailLines=-1").is_err());
        assert!(parse_query("timestamps=true").is_err());
        assert!(parse_query("sinceSeconds=5").is_err());
        assert_eq!(parse_query("previous=false"), Ok(LogQuery::default()));
    }

    #[test]
    fn path_must_name_namespace_pod_and_container_plainly() {
        assert_eq!(
            parse_path("/containerLogs/ns/pod-1/executor"),
            Some(("ns", "pod-1", "executor"))
        );
        assert_eq!(parse_path("/containerLogs/ns/pod/../x"), None);
        assert_eq!(parse_path("/containerLogs/ns/pod/.."), None);
        assert_eq!(parse_path("/containerLogs/ns/pod"), None);
        assert_eq!(parse_path("/pods"), None);
    }
}
