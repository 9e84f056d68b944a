//! Tests of the composed per-task capabilities: HTTP against real local
//! servers, replay of every recorded kind, denials and metering.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use super::http::{request_bytes, response_bytes};
use super::*;
use ari_model::grant::{EmptyGrant, GrantSet, NetworkGrant};

/// A tiny_http server on 127.0.0.1 with a few fixed routes; counts requests.
struct TestServer {
    server: Arc<tiny_http::Server>,
    port: u16,
    hits: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start() -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h) = (Arc::clone(&server), Arc::clone(&hits));
        let thread = std::thread::spawn(move || {
            for mut req in s.incoming_requests() {
                h.fetch_add(1, Ordering::SeqCst);
                let url = req.url().to_owned();
                let (path, query) = url.split_once('?').unwrap_or((&url, ""));
                let to = query.strip_prefix("to=").unwrap_or("").to_owned();
                let redirect = |code: u16| {
                    tiny_http::Response::from_string("")
                        .with_status_code(code)
                        .with_header(
                            tiny_http::Header::from_bytes("Location", to.as_bytes()).unwrap(),
                        )
                };
                let resp = match path {
                    "/ok" => tiny_http::Response::from_string("hello")
                        .with_header(tiny_http::Header::from_bytes("X-Test", "1").unwrap()),
                    "/redirect" => redirect(302),
                    "/see-other" => redirect(303),
                    "/loop" => tiny_http::Response::from_string("")
                        .with_status_code(302)
                        .with_header(tiny_http::Header::from_bytes("Location", "/loop").unwrap()),
                    "/big" => tiny_http::Response::from_string("x".repeat(5000)),
                    "/echo" => {
                        let mut body = String::new();
                        let _ = req.as_reader().read_to_string(&mut body);
                        let auth = req.headers().iter().any(|h| h.field.equiv("authorization"));
                        tiny_http::Response::from_string(format!(
                            "{} auth={auth} {body}",
                            req.method()
                        ))
                    }
                    _ => tiny_http::Response::from_string("nope").with_status_code(404),
                };
                let _ = req.respond(resp);
            }
        });
        Self {
            server,
            port,
            hits,
            thread: Some(thread),
        }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The host's calls, as the tests make them: through the same `call` and `get` the `link`
/// modules use.
impl TaskCapabilities {
    pub(crate) fn for_test(
        grants: &Grants,
        storage: Option<Box<dyn storage::StorageBackend>>,
        seed: [u8; 32],
        start_unix_nanos: u64,
        mode: Mode,
    ) -> Self {
        let mut task = TaskSetup::new(seed, start_unix_nanos);
        task.storage = storage;
        Self::new(grants, task, mode)
    }

    pub(crate) fn storage_get(&mut self, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        self.call(|s: &mut storage::TaskStorage, rec| s.get(key, rec))
    }

    pub(crate) fn storage_set(&mut self, key: &str, value: &[u8]) -> Result<(), CapError> {
        self.call(|s: &mut storage::TaskStorage, rec| s.set(key, value, rec))
    }

    pub(crate) fn storage_delete(&mut self, key: &str) -> Result<(), CapError> {
        self.call(|s: &mut storage::TaskStorage, rec| s.delete(key, rec))
    }

    pub(crate) fn commit(&mut self, receipt: Option<(String, Vec<u8>)>) -> Result<(), CapError> {
        self.call(|s: &mut storage::TaskStorage, rec| s.commit(rec.is_replay(), receipt))
    }

    fn random_bytes(&mut self, len: u32) -> Result<Vec<u8>, CapError> {
        self.call(|r: &mut random::RandomCapability, rec| r.random_bytes(len, rec))
    }

    fn fill_wasi_random(&mut self, buf: &mut [u8]) {
        self.get::<random::RandomCapability>().fill_wasi(buf);
    }

    fn http_request(&mut self, req: HttpRequest) -> Result<HttpResponse, CapError> {
        self.call(|h: &mut http::HttpCapability, rec| h.request(req, rec))
    }

    fn set_http_limits(&mut self, limits: HttpLimits) {
        self.get::<http::HttpCapability>().set_limits(limits);
    }

    fn now(&mut self) -> Result<u64, CapError> {
        self.call(|c: &mut clock::ClockCapability, rec| c.now(rec))
    }

    fn wasi_now_nanos(&mut self) -> u64 {
        self.with(|c: &mut clock::ClockCapability, rec| c.wasi_now(rec))
            .unwrap_or(0)
    }

    fn sign(&mut self, data: &[u8]) -> Result<Vec<u8>, CapError> {
        self.call(|c: &mut crypto::CryptoCapability, _| c.sign(data))
    }

    fn crypto(&mut self) -> &mut crypto::CryptoCapability {
        self.get()
    }

    fn log(&mut self) -> &mut log::LogCapability {
        self.get()
    }
}

#[test]
fn every_grant_has_one_capability_in_the_list() {
    for name in CapabilityName::ALL {
        let holders = GRANTS.iter().filter(|g| **g == Some(name)).count();
        assert_eq!(
            holders, 1,
            "{name}: {holders} capabilities in `capabilities!`"
        );
    }
    assert_eq!(GRANTS.len(), HOSTS.len());
}

fn net(hosts: &[String]) -> Grants {
    Grants::load(
        GrantSet {
            network: Some(NetworkGrant {
                allowed_hosts: hosts.to_vec(),
                approval: None,
            }),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap()
}

fn live(grants: &Grants) -> TaskCapabilities {
    TaskCapabilities::for_test(grants, None, [7; 32], 1_700_000_000_000_000_000, Mode::Live)
}

fn get(url: String) -> HttpRequest {
    HttpRequest {
        method: "GET".into(),
        url,
        headers: vec![],
        body: vec![],
    }
}

#[test]
fn http_denied_without_grant() {
    let mut t = live(&Grants::default());
    let err = t
        .http_request(get("http://127.0.0.1:1/".into()))
        .unwrap_err();
    assert!(
        matches!(&err, CapError::Denied(m) if m.contains("network")),
        "{err:?}"
    );
    assert_eq!(t.denials().len(), 1);
    assert!(t.take_trace().events.is_empty());
}

#[test]
fn http_allowed_request_is_metered_and_recorded() {
    let a = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    let req = HttpRequest {
        method: "get".into(),
        url: format!("{}/ok", a.origin()),
        headers: vec![("X-Req".into(), "abc".into())],
        body: vec![],
    };
    let resp = t.http_request(req).unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"hello");
    assert!(
        resp.headers.iter().any(|(n, v)| n == "x-test" && v == "1"),
        "{:?}",
        resp.headers
    );
    let out = request_bytes(
        "GET",
        &format!("{}/ok", a.origin()),
        &[("x-req".into(), "abc".into())],
        &[],
    );
    let inn = response_bytes(&resp);
    assert!(inn > 5 + 14 && out > 3 + 26);
    assert_eq!(t.usage().network_bytes, out + inn);
    let trace = t.take_trace();
    assert_eq!(trace.events.len(), 1);
    assert!(
        matches!(&trace.events[0], crate::trace::TraceEvent::Http(crate::capability::http::HttpEvent::Exchange { status: 200, body, .. }) if body == b"hello")
    );
    assert_eq!(a.hits(), 1);
}

#[test]
fn http_host_not_allowed_is_denied_without_traffic() {
    let a = TestServer::start();
    let b = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    let err = t
        .http_request(get(format!("{}/ok", b.origin())))
        .unwrap_err();
    assert!(
        matches!(&err, CapError::Denied(m) if m.contains("host not allowed")),
        "{err:?}"
    );
    assert_eq!(b.hits(), 0);
    assert_eq!(t.usage().network_bytes, 0);
}

#[test]
fn http_redirect_to_non_allowed_host_is_denied() {
    let a = TestServer::start();
    let b = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    let url = format!("{}/redirect?to={}/ok", a.origin(), b.origin());
    let err = t.http_request(get(url)).unwrap_err();
    assert!(
        matches!(&err, CapError::Denied(m) if m.contains("redirect hop 1") && m.contains(&b.origin())),
        "{err:?}"
    );
    assert_eq!(a.hits(), 1);
    assert_eq!(b.hits(), 0, "the non-allowed host must never be contacted");
    assert_eq!(t.denials().len(), 1);
    assert!(
        t.usage().network_bytes > 0,
        "the allowed first hop is metered"
    );
}

#[test]
fn http_redirects_within_allow_list_are_followed_and_metered_per_hop() {
    let a = TestServer::start();
    let b = TestServer::start();
    let mut t = live(&net(&[a.origin(), b.origin()]));
    let url = format!("{}/redirect?to={}/ok", a.origin(), b.origin());
    let resp = t.http_request(get(url)).unwrap();
    assert_eq!((resp.status, resp.body.as_slice()), (200, &b"hello"[..]));
    assert_eq!((a.hits(), b.hits()), (1, 1));
    let trace = t.take_trace();
    assert_eq!(trace.events.len(), 2);
    let mut one = live(&net(&[b.origin()]));
    one.http_request(get(format!("{}/ok", b.origin()))).unwrap();
    assert!(t.usage().network_bytes > one.usage().network_bytes);
}

#[test]
fn http_redirect_303_turns_post_into_get_and_cross_origin_drops_credentials() {
    let a = TestServer::start();
    let b = TestServer::start();
    let mut t = live(&net(&[a.origin(), b.origin()]));
    let req = HttpRequest {
        method: "POST".into(),
        url: format!("{}/see-other?to={}/echo", a.origin(), b.origin()),
        headers: vec![("Authorization".into(), "Bearer s3cret".into())],
        body: b"data".to_vec(),
    };
    let resp = t.http_request(req).unwrap();
    assert_eq!(String::from_utf8_lossy(&resp.body), "GET auth=false ");
    // Same origin keeps credentials and the body for POST.
    let req = HttpRequest {
        method: "POST".into(),
        url: format!("{}/echo", a.origin()),
        headers: vec![("Authorization".into(), "Bearer s3cret".into())],
        body: b"data".to_vec(),
    };
    let resp = t.http_request(req).unwrap();
    assert_eq!(String::from_utf8_lossy(&resp.body), "POST auth=true data");
}

#[test]
fn http_redirect_loop_stops_after_limit() {
    let a = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    let err = t
        .http_request(get(format!("{}/loop", a.origin())))
        .unwrap_err();
    assert!(
        matches!(&err, CapError::Failed(m) if m.contains("too many redirects")),
        "{err:?}"
    );
    assert_eq!(a.hits(), 6, "the first request plus 5 redirects");
}

#[test]
fn http_response_body_is_capped() {
    let a = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    t.set_http_limits(HttpLimits {
        max_response_bytes: 1000,
        ..HttpLimits::default()
    });
    let err = t
        .http_request(get(format!("{}/big", a.origin())))
        .unwrap_err();
    assert!(
        matches!(&err, CapError::Failed(m) if m.contains("exceeds 1000")),
        "{err:?}"
    );
    t.set_http_limits(HttpLimits::default());
    assert_eq!(
        t.http_request(get(format!("{}/big", a.origin())))
            .unwrap()
            .body
            .len(),
        5000
    );
}

#[test]
fn http_invalid_requests_fail_cleanly() {
    let a = TestServer::start();
    let mut t = live(&net(&[a.origin()]));
    let mut bad = get(format!("{}/ok", a.origin()));
    bad.method = "GE T".into();
    assert!(matches!(t.http_request(bad), Err(CapError::Invalid(_))));
    let mut bad = get(format!("{}/ok", a.origin()));
    bad.headers.push(("bad name".into(), "v".into()));
    assert!(matches!(t.http_request(bad), Err(CapError::Invalid(_))));
    let mut bad = get(format!("{}/ok", a.origin()));
    bad.headers.push(("x".into(), "line\nbreak".into()));
    assert!(matches!(t.http_request(bad), Err(CapError::Invalid(_))));
    assert!(matches!(
        t.http_request(get("not a url".into())),
        Err(CapError::Denied(_))
    ));
    assert_eq!(a.hits(), 0);
}

#[test]
fn replay_http_returns_recorded_responses_without_network() {
    let a = TestServer::start();
    let b = TestServer::start();
    // An allowed origin where nothing listens: a transport error, recorded too.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead_origin = format!("http://127.0.0.1:{dead}");
    let grants = net(&[a.origin(), b.origin(), dead_origin.clone()]);
    let mut t2 = live(&grants);
    let first = format!("{}/redirect?to={}/ok", a.origin(), b.origin());
    let ok2 = t2.http_request(get(first.clone())).unwrap();
    assert_eq!(ok2.body, b"hello");
    let refused = t2
        .http_request(get(format!("{dead_origin}/x")))
        .unwrap_err();
    let usage = t2.usage();
    let trace = t2.take_trace();
    drop((a, b));

    let mut r = TaskCapabilities::for_test(&grants, None, [7; 32], 0, Mode::Replay(trace.clone()));
    let replayed = r.http_request(get(first)).unwrap();
    assert_eq!(replayed, ok2);
    assert_eq!(
        r.http_request(get(format!("{dead_origin}/x"))).unwrap_err(),
        refused
    );
    assert_eq!(r.usage(), usage);
    assert_eq!(r.replay_remaining(), 0);
    assert_eq!(r.take_trace().sha256(), trace.sha256());

    // Asking for another URL than recorded diverges.
    let mut r = TaskCapabilities::for_test(&grants, None, [7; 32], 0, Mode::Replay(trace.clone()));
    let err = r.http_request(get(format!("{dead_origin}/y"))).unwrap_err();
    assert!(
        matches!(&err, CapError::Failed(m) if m.starts_with("replay diverged")),
        "{err:?}"
    );
}

#[test]
fn replay_random_and_time_return_recorded_values() {
    let grants = Grants::load(
        GrantSet {
            randomness: Some(EmptyGrant {}),
            time_access: Some(EmptyGrant {}),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap();
    let mut t = TaskCapabilities::for_test(&grants, None, [1; 32], 5_000, Mode::Live);
    let r1 = t.random_bytes(16).unwrap();
    let n1 = t.now().unwrap();
    let w1 = t.wasi_now_nanos();
    assert_eq!((n1, w1), (6_000, 7_000));
    let trace = t.take_trace();
    assert_eq!(trace.events.len(), 3);

    // Another seed and start time: the replay still yields the recorded values.
    let mut r = TaskCapabilities::for_test(&grants, None, [2; 32], 0, Mode::Replay(trace.clone()));
    assert_eq!(r.random_bytes(16).unwrap(), r1);
    assert_eq!(r.now().unwrap(), n1);
    assert_eq!(r.wasi_now_nanos(), w1);
    assert_eq!(r.replay_remaining(), 0);
    assert_eq!(r.take_trace().sha256(), trace.sha256());

    // Out of order: diverged.
    let mut r =
        TaskCapabilities::for_test(&grants, None, [1; 32], 5_000, Mode::Replay(trace.clone()));
    let err = r.now().unwrap_err();
    assert!(
        matches!(&err, CapError::Failed(m) if m.starts_with("replay diverged")),
        "{err:?}"
    );
    let mut r = TaskCapabilities::for_test(&grants, None, [1; 32], 5_000, Mode::Replay(trace));
    assert!(
        matches!(r.random_bytes(8), Err(CapError::Failed(m)) if m.starts_with("replay diverged"))
    );
}

#[test]
fn same_seed_gives_same_trace_digest_and_other_seed_differs() {
    let grants = Grants::load(
        GrantSet {
            randomness: Some(EmptyGrant {}),
            time_access: Some(EmptyGrant {}),
            ..GrantSet::default()
        },
        None,
    )
    .unwrap();
    let run = |seed: [u8; 32]| {
        let mut t = TaskCapabilities::for_test(&grants, None, seed, 42, Mode::Live);
        t.random_bytes(32).unwrap();
        t.now().unwrap();
        let mut wasi = [0u8; 8];
        t.fill_wasi_random(&mut wasi);
        (t.take_trace().sha256(), wasi)
    };
    assert_eq!(run([3; 32]), run([3; 32]));
    assert_ne!(run([3; 32]).0, run([4; 32]).0);
    assert_ne!(run([3; 32]).1, run([4; 32]).1);
}

#[test]
fn denials_and_usage_are_collected() {
    let mut t = live(&Grants::default());
    assert!(matches!(t.random_bytes(4), Err(CapError::Denied(_))));
    assert!(matches!(t.now(), Err(CapError::Denied(_))));
    assert!(matches!(t.sign(b"x"), Err(CapError::Denied(_))));
    assert_eq!(t.wasi_now_nanos(), 0);
    let mut buf = [0u8; 8];
    t.fill_wasi_random(&mut buf);
    assert_ne!(buf, [0u8; 8]);
    assert_eq!(t.crypto().hash(HashAlgorithm::Sha256, b"").len(), 32);
    t.log().log(LogLevel::Info, "hello");
    assert_eq!(t.log().lines(), ["INFO hello"]);
    assert_eq!(
        t.denials(),
        [
            "capability `randomness` not granted",
            "capability `timeAccess` not granted",
            "capability `signing` not granted"
        ]
    );
    assert_eq!(
        t.usage(),
        CapUsage {
            storage_bytes_written: 0,
            network_bytes: 0,
            log_bytes: 5,
            children_fuel: 0,
            children_tokens: 0,
            delegations_refused: 0,
            tool_calls: 0,
        }
    );
    assert!(t.take_trace().events.is_empty());
}

#[test]
fn signing_with_grant_verifies() {
    let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let grants = Grants::load(
        GrantSet {
            ..GrantSet::default()
        },
        Some(LoadedSigningKey::from_key(key.clone())),
    )
    .unwrap();
    let mut t = live(&grants);
    let sig = t.sign(b"msg").unwrap();
    assert!(
        t.crypto()
            .verify(key.verifying_key().as_bytes(), b"msg", &sig)
    );
    assert_eq!(
        t.crypto().public_key(),
        Some(key.verifying_key().to_bytes())
    );
}
