//! Fetching the Agent's component and checking it against the digest the Agent declares.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ari_crds::{Agent, ModuleSource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use super::{ModuleError, WorkerConfig, WorkerError};
use ari_runtime::attestation::sha256_hex;

/// Largest component the worker accepts (a ConfigMap tops out at 1 MiB; URLs may be larger).
pub const MAX_MODULE_BYTES: u64 = 256 << 20;

/// Longest wait to connect to a module URL.
pub const MODULE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a whole module download (every hop, the body included) may take.
pub const MODULE_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Most redirects followed for a module URL (each hop must be https).
pub const MODULE_MAX_REDIRECTS: u32 = 5;

/// The component bytes of `agent`, verified against `spec.module.sha256` when one is declared
/// and against `ARI_MODULE_DIGEST` (the digest the operator validated and put in the pod)
/// when given: a module edited after validation never runs.
pub async fn fetch(
    client: &Client,
    agent: &Agent,
    config: &WorkerConfig,
) -> Result<Vec<u8>, WorkerError> {
    let pinned = config.module_digest.as_deref();
    let ns = agent
        .metadata
        .namespace
        .as_deref()
        .ok_or(ModuleError::AgentWithoutNamespace)?;
    let source = &agent.spec.module;
    if agent.spec.declarative.is_some() {
        // The stock agent component this image carries, pinned by the operator like any module.
        let path = &config.stock_agent;
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|error| ModuleError::StockAgent {
                path: path.clone(),
                error,
            })?;
        check_pinned(pinned, &bytes)?;
        return Ok(bytes);
    }
    let bytes = match (&source.config_map, &source.url) {
        _ if source.source_count() != 1 => {
            return Err(ModuleError::SourceCount.into());
        }
        (None, None) => super::oci::fetch(config).await?,
        (Some(cm), None) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let map = api.get(&cm.name).await?;
            map.binary_data
                .and_then(|mut d| d.remove(&cm.key))
                .map(|b| b.0)
                .ok_or_else(|| ModuleError::ConfigMapKey {
                    namespace: ns.to_owned(),
                    name: cm.name.clone(),
                    key: cm.key.clone(),
                })?
        }
        (None, Some(url)) => fetch_url(url.clone(), Scheme::HttpsOnly).await?,
        _ => {
            return Err(ModuleError::SourceCount.into());
        }
    };
    check_digest(source, &bytes)?;
    check_pinned(pinned, &bytes)?;
    Ok(bytes)
}

fn normalise(digest: &str) -> String {
    digest
        .trim()
        .strip_prefix("sha256:")
        .unwrap_or(digest.trim())
        .to_ascii_lowercase()
}

/// Compares the bytes with the declared digest (`<hex>` or `sha256:<hex>`).
pub fn check_digest(source: &ModuleSource, bytes: &[u8]) -> Result<(), WorkerError> {
    let Some(declared) = source.sha256.as_deref() else {
        return Ok(());
    };
    let want = normalise(declared);
    let got = sha256_hex(bytes);
    if want != got {
        return Err(ModuleError::DeclaredDigest { want, got }.into());
    }
    Ok(())
}

/// Compares the bytes with the digest the operator validated (`ARI_MODULE_DIGEST`).
pub fn check_pinned(pinned: Option<&str>, bytes: &[u8]) -> Result<(), WorkerError> {
    let Some(pinned) = pinned else {
        return Ok(());
    };
    let want = normalise(pinned);
    let got = sha256_hex(bytes);
    if want != got {
        return Err(ModuleError::PinnedDigest { want, got }.into());
    }
    Ok(())
}

/// Which URL schemes a download may use on any hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    HttpsOnly,
    /// Tests only: plain http to a literal loopback address as well.
    #[cfg_attr(not(test), allow(dead_code))]
    HttpsOrLoopbackHttp,
}

impl Scheme {
    fn check(self, url: &url::Url) -> Result<(), ModuleError> {
        let loopback = matches!(url.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback());
        match (url.scheme(), self) {
            ("https", _) => Ok(()),
            ("http", Scheme::HttpsOrLoopbackHttp) if loopback => Ok(()),
            _ => Err(ModuleError::NotHttps(url.to_string())),
        }
    }
}

/// Downloads on a plain thread (not `spawn_blocking`): dropping this future — on SIGTERM —
/// abandons the download at once, and a stuck download cannot hold up the runtime's shutdown.
pub(crate) async fn fetch_url(url: String, scheme: Scheme) -> Result<Vec<u8>, WorkerError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancel.clone());
    std::thread::Builder::new()
        .name("module-download".into())
        .spawn(move || {
            let _ = tx.send(download(&url, scheme, &cancel, MAX_MODULE_BYTES));
        })
        .map_err(ModuleError::DownloadThread)?;
    let result = rx.await.map_err(|_| ModuleError::DownloadThreadFailed)?;
    drop(guard);
    result
}

/// Tells the download thread to stop reading when the waiting future goes away.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Why [`read_capped`] stopped.
#[derive(Debug)]
pub(crate) enum CappedError {
    TooLarge,
    Cancelled,
    Io(std::io::Error),
}

/// Reads at most `max` + 1 bytes of `reader` (decoded bytes when it decodes), in 64 KiB
/// chunks, checking `cancel` between them: memory stays bounded whatever the source claims.
pub(crate) fn read_capped(
    reader: impl Read,
    max: u64,
    cancel: &AtomicBool,
) -> Result<Vec<u8>, CappedError> {
    let mut reader = reader.take(max.saturating_add(1));
    let mut body = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if cancel.load(Ordering::Acquire) {
            return Err(CappedError::Cancelled);
        }
        let n = reader.read(&mut chunk).map_err(CappedError::Io)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if body.len() as u64 > max {
        return Err(CappedError::TooLarge);
    }
    Ok(body)
}

/// Follows up to [`MODULE_MAX_REDIRECTS`] redirects itself (each hop's scheme checked), within
/// [`MODULE_DOWNLOAD_TIMEOUT`] overall, and reads at most `max` *decoded* bytes.
fn download(
    url: &str,
    scheme: Scheme,
    cancel: &AtomicBool,
    max: u64,
) -> Result<Vec<u8>, WorkerError> {
    let started = Instant::now();
    let mut url = url::Url::parse(url).map_err(|error| ModuleError::BadUrl {
        url: url.to_owned(),
        error,
    })?;
    for _hop in 0..=MODULE_MAX_REDIRECTS {
        scheme.check(&url)?;
        let left = MODULE_DOWNLOAD_TIMEOUT.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(ModuleError::DownloadTimedOut {
                url: url.to_string(),
            }
            .into());
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(MODULE_CONNECT_TIMEOUT))
            .timeout_global(Some(left))
            .build()
            .into();
        let response = agent
            .get(url.as_str())
            .call()
            .map_err(|error| ModuleError::Get {
                url: url.to_string(),
                error: Box::new(error),
            })?;
        let status = response.status().as_u16();
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| ModuleError::RedirectWithoutLocation {
                    url: url.to_string(),
                    status,
                })?;
            url = url
                .join(location)
                .map_err(|error| ModuleError::BadRedirect {
                    url: url.to_string(),
                    error,
                })?;
            continue;
        }
        if !(200..300).contains(&status) {
            return Err(ModuleError::Http {
                url: url.to_string(),
                status,
            }
            .into());
        }
        let reader = response.into_body().into_reader();
        let url = url.to_string();
        return read_capped(reader, max, cancel).map_err(|e| {
            match e {
                CappedError::TooLarge => ModuleError::TooLarge { url, max },
                CappedError::Cancelled => ModuleError::Cancelled { url },
                CappedError::Io(error) => ModuleError::Read { url, error },
            }
            .into()
        });
    }
    Err(ModuleError::TooManyRedirects {
        url: url.to_string(),
        max: MODULE_MAX_REDIRECTS,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(sha: Option<&str>) -> ModuleSource {
        ModuleSource {
            sha256: sha.map(str::to_string),
            ..ModuleSource::default()
        }
    }

    #[test]
    fn digest_check_accepts_both_spellings_and_rejects_others() {
        let hex = sha256_hex(b"abc");
        assert!(check_digest(&source(None), b"abc").is_ok());
        assert!(check_digest(&source(Some(&hex)), b"abc").is_ok());
        assert!(check_digest(&source(Some(&format!("sha256:{hex}"))), b"abc").is_ok());
        let err = check_digest(&source(Some(&hex)), b"abd").expect_err("mismatch");
        assert!(err.to_string().contains("digest mismatch"), "{err}");
    }

    #[test]
    fn a_module_that_differs_from_the_pinned_digest_is_refused() {
        let hex = sha256_hex(b"abc");
        assert!(check_pinned(None, b"edited").is_ok());
        assert!(check_pinned(Some(&format!("sha256:{hex}")), b"abc").is_ok());
        let err = check_pinned(Some(&format!("sha256:{hex}")), b"edited").expect_err("edited");
        assert!(err.to_string().contains("ARI_MODULE_DIGEST"), "{err}");
    }

    /// A loopback server: `/bomb` serves 64 MiB of zeros gzip-encoded (≈64 KiB on the wire),
    /// `/small` 3 bytes, `/to-http` redirects to plain http on a non-loopback name, `/stall`
    /// accepts and never answers (until the server is dropped).
    struct Loopback {
        base: String,
        server: Arc<tiny_http::Server>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Loopback {
        fn start() -> Self {
            let bomb = ari_testkit::http::gzip_bomb().to_vec();
            let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
            let port = server.server_addr().to_ip().expect("ip").port();
            let s = server.clone();
            let thread = std::thread::spawn(move || {
                let mut stalled = Vec::new();
                for req in s.incoming_requests() {
                    let url = req.url().to_string();
                    let resp = match url.as_str() {
                        "/bomb" => tiny_http::Response::from_data(bomb.clone()).with_header(
                            tiny_http::Header::from_bytes("Content-Encoding", "gzip")
                                .expect("header"),
                        ),
                        "/small" => tiny_http::Response::from_data(b"abc".to_vec()),
                        "/to-http" => tiny_http::Response::from_data(Vec::new())
                            .with_status_code(302)
                            .with_header(
                                tiny_http::Header::from_bytes(
                                    "Location",
                                    format!("http://localhost:{port}/small"),
                                )
                                .expect("header"),
                            ),
                        _ => {
                            stalled.push(req);
                            continue;
                        }
                    };
                    let _ = req.respond(resp);
                }
            });
            Self {
                base: format!("http://127.0.0.1:{port}"),
                server,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Loopback {
        fn drop(&mut self) {
            self.server.unblock();
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn a_gzip_bomb_module_is_refused_after_at_most_the_cap_of_decoded_bytes() {
        let server = Loopback::start();
        let never = AtomicBool::new(false);
        let url = format!("{}/bomb", server.base);
        let cap = 4 << 20;
        let err = download(&url, Scheme::HttpsOrLoopbackHttp, &never, cap).expect_err("bomb");
        assert!(
            err.to_string().contains("larger than 4194304 bytes"),
            "{err}"
        );
        let small = format!("{}/small", server.base);
        let ok = download(&small, Scheme::HttpsOrLoopbackHttp, &never, cap).expect("small");
        assert_eq!(ok, b"abc");
    }

    #[test]
    fn an_endless_decoded_stream_is_read_only_to_the_cap() {
        /// Counts the bytes pulled from an endless source.
        struct Counting(u64);
        impl Read for Counting {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                buf.fill(0);
                self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut source = Counting(0);
        let never = AtomicBool::new(false);
        let cap = 4 << 20;
        let err = read_capped(&mut source, cap, &never).expect_err("endless");
        assert!(matches!(err, CappedError::TooLarge), "{err:?}");
        assert_eq!(source.0, cap + 1, "bytes seen");
        let cancelled = AtomicBool::new(true);
        let err = read_capped(Counting(0), cap, &cancelled).expect_err("cancelled");
        assert!(matches!(err, CappedError::Cancelled), "{err:?}");
    }

    #[test]
    fn module_urls_must_be_https_on_every_hop() {
        let server = Loopback::start();
        let never = AtomicBool::new(false);
        let err = download(
            &format!("{}/small", server.base),
            Scheme::HttpsOnly,
            &never,
            1 << 20,
        )
        .expect_err("plain http");
        assert!(err.to_string().contains("must be https"), "{err}");
        let err = download(
            &format!("{}/to-http", server.base),
            Scheme::HttpsOrLoopbackHttp,
            &never,
            1 << 20,
        )
        .expect_err("redirect to http");
        assert!(
            err.to_string().contains("must be https: http://localhost"),
            "{err}"
        );
    }

    #[test]
    fn a_stalled_module_download_does_not_hold_up_shutdown() {
        // The worker's shutdown drops the pending download future and then the runtime. Were the
        // download on a `spawn_blocking` thread, dropping the runtime would wait for it, i.e.
        // for as long as the server stalls. A rescue thread ends the stall after a long while so
        // a regression fails instead of hanging; the check is *who* ended it, not how fast.
        let server = Arc::new(std::sync::Mutex::new(Some(Loopback::start())));
        let url = format!("{}/stall", server.lock().unwrap().as_ref().unwrap().base);
        let rescued = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        {
            let (server, rescued) = (server.clone(), rescued.clone());
            std::thread::spawn(move || {
                if done_rx.recv_timeout(Duration::from_secs(120)).is_err() {
                    rescued.store(true, Ordering::SeqCst);
                    server.lock().unwrap().take();
                }
            });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let _ = started_tx.send(());
            let _ = fetch_url(url, Scheme::HttpsOrLoopbackHttp).await;
        });
        started_rx.recv().expect("spawned");
        drop(rt);
        let _ = done_tx.send(());
        assert!(
            !rescued.load(Ordering::SeqCst),
            "shutdown waited for the stalled download"
        );
    }
}
