//! A hostile registry against the pull path, played by scripted servers on 127.0.0.1
//! (`ari_testkit::scripted`): each test says what a real registry could not be made to do. The
//! real CNCF registry covers the honest protocol in `registry.rs`.

use std::time::Duration;

use ari_oci::layout::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use ari_oci::{
    Client, ClientOptions, Credentials, Error, MAX_MANIFEST_BYTES, ModuleCache, Reference,
    sha256_digest,
};
use ari_testkit::scripted::{Reply, Request, Scripted};
use tempfile::TempDir;

const SECRET_PAGE: &str = "<html>internal admin console: SECRET-7f3a</html>";
const SECRET: &str = "SECRET-7f3a";
const GIB: u64 = 1 << 30;

/// A client that speaks plain http to `insecure` (the admin's list), with its own cache.
fn client(insecure: &[&str]) -> (Client, ModuleCache, TempDir) {
    client_with(ClientOptions {
        insecure_registries: insecure.iter().map(|s| s.to_string()).collect(),
        ..ClientOptions::default()
    })
}

fn client_with(options: ClientOptions) -> (Client, ModuleCache, TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = ModuleCache::new(dir.path().join("modules")).expect("cache");
    (Client::new(options).expect("client"), cache, dir)
}

fn reference(host: &str, name: &str) -> Reference {
    Reference::parse(&format!("{host}/{name}")).expect("a valid test reference")
}

/// A Wasm artifact manifest whose one layer is `digest` of `size` bytes.
fn wasm_manifest(digest: &str, size: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": sha256_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": digest, "size": size}],
    }))
    .expect("manifest JSON")
}

/// The error, after checking it never quotes the internal service's page.
fn refused<T>(result: Result<T, Error>) -> Error {
    let Err(e) = result else {
        panic!("expected an error");
    };
    let text = e.to_string();
    assert!(!text.contains(SECRET), "the body leaked: {text}");
    e
}

/// An internal service on another loopback port that nothing may reach through a registry.
async fn internal_service() -> Scripted {
    Scripted::start(|_: &Request| Reply::new(500, SECRET_PAGE).header("Content-Type", "text/html"))
        .await
}

#[tokio::test]
async fn a_redirect_to_another_port_or_host_is_refused_and_never_followed() {
    // Scripted: a real registry does not redirect its manifests to arbitrary services.
    let internal = internal_service().await;
    let port = internal.port();
    let targets = [
        format!("http://127.0.0.1:{port}/admin"),
        format!("http://localhost:{port}/admin"),
        format!("http://[::1]:{port}/admin"),
        format!("https://127.0.0.1:{port}/admin"),
        "file:///etc/passwd".to_string(),
    ];
    for target in targets {
        let to = target.clone();
        let registry = Scripted::start(move |_: &Request| Reply::redirect(to.clone())).await;
        let (client, cache, _dir) = client(&[&registry.host()]);
        let r = reference(&registry.host(), "agents/echo:v1");
        let anon = Credentials::anonymous();
        let e = refused(client.resolve(&r, &anon).await);
        assert_eq!(e.reason(), "RegistryNotAllowed", "{target}: {e}");
        let e = refused(client.pull(&r, &anon, &cache).await);
        assert_eq!(e.reason(), "RegistryNotAllowed", "{target}: {e}");
    }
    assert_eq!(
        internal.hits(),
        Vec::<String>::new(),
        "the internal service was reached"
    );
}

#[tokio::test]
async fn a_redirect_on_the_registry_s_own_endpoint_is_followed() {
    // Scripted: the honest counterpart of the test above (a registry moving its own paths).
    let layer = b"\0asm\x0d\0\x01\0module".to_vec();
    let digest = sha256_digest(&layer);
    let manifest = wasm_manifest(&digest, layer.len() as u64);
    let registry = Scripted::start(move |req: &Request| {
        let target = req.target.as_str();
        if target.contains("/manifests/") {
            Reply::redirect("/moved/manifest")
        } else if target == "/moved/manifest" {
            Reply::new(200, manifest.clone())
        } else if target.contains("/blobs/") {
            Reply::new(200, layer.clone())
        } else {
            Reply::new(404, "")
        }
    })
    .await;
    let (client, cache, _dir) = client(&[&registry.host()]);
    let r = reference(&registry.host(), "agents/echo:v1");
    let pulled = client
        .pull(&r, &Credentials::anonymous(), &cache)
        .await
        .expect("pull through a redirect on the same endpoint");
    assert_eq!(pulled.layer_digest, digest);
    assert!(
        cache.get(&digest).is_some(),
        "the layer streamed to the cache"
    );
}

#[tokio::test]
async fn a_token_realm_on_another_endpoint_is_never_fetched() {
    // Scripted: the realm is the registry's choice; a real one names its own token service.
    let internal = internal_service().await;
    let realm = format!("http://127.0.0.1:{}/token", internal.port());
    let registry = Scripted::start(move |_: &Request| {
        Reply::new(401, "").header(
            "WWW-Authenticate",
            format!(r#"Bearer realm="{realm}",service="registry""#),
        )
    })
    .await;
    // Even with the internal service on the insecure list: a realm must be on the registry's
    // own endpoint (or a delegate host), whatever else the admin allows.
    let (client, _cache, _dir) = client(&[&registry.host(), &internal.host()]);
    let r = reference(&registry.host(), "agents/echo:v1");
    let secret = Credentials::basic("bot", "hunter2");
    let e = refused(client.resolve(&r, &secret).await);
    assert_eq!(e.reason(), "RegistryNotAllowed", "{e}");
    assert_eq!(
        internal.hits(),
        Vec::<String>::new(),
        "the realm was fetched"
    );
}

#[tokio::test]
async fn a_token_from_the_registry_s_own_realm_is_used() {
    // Scripted: the CNCF registry of registry.rs runs with htpasswd; this plays a token
    // service on the registry's own endpoint, the way ghcr.io does it.
    let registry = Scripted::start(|req: &Request| {
        if req.target.starts_with("/token?") {
            let basic = req.header("authorization").unwrap_or_default();
            return match basic.starts_with("Basic ") {
                true => Reply::new(200, r#"{"token":"t0k"}"#),
                false => Reply::new(401, ""),
            };
        }
        match req.header("authorization") {
            Some("Bearer t0k") => Reply::new(200, wasm_manifest(&sha256_digest(b"x"), 1)),
            _ => Reply::new(401, "").header(
                "WWW-Authenticate",
                format!(r#"Bearer realm="{}/token",service="reg""#, req.origin()),
            ),
        }
    })
    .await;
    let (client, _cache, _dir) = client(&[&registry.host()]);
    let r = reference(&registry.host(), "agents/echo:v1");
    let digest = client
        .resolve(&r, &Credentials::basic("bot", "hunter2"))
        .await
        .expect("resolve with a token");
    assert_eq!(
        digest,
        sha256_digest(&wasm_manifest(&sha256_digest(b"x"), 1))
    );
    let token = registry
        .hits()
        .into_iter()
        .find(|h| h.starts_with("/token?"))
        .expect("the realm was asked");
    assert!(token.contains("service=reg"), "{token}");
    assert!(
        token.contains("scope=repository%3Aagents%2Fecho%3Apull"),
        "{token}"
    );
    // Without credentials the token service refuses: Unauthorized, no body quoted.
    let e = refused(client.resolve(&r, &Credentials::anonymous()).await);
    assert_eq!(e.reason(), "Unauthorized", "{e}");
}

#[tokio::test]
async fn an_error_page_never_reaches_the_message() {
    // Scripted: an internal service answering with its error page, reached as a registry.
    for status in [500, 502, 404, 403, 418] {
        let registry = Scripted::start(move |_: &Request| {
            Reply::new(status, SECRET_PAGE).header("Content-Type", "text/html")
        })
        .await;
        let (client, cache, _dir) = client(&[&registry.host()]);
        let r = reference(&registry.host(), "agents/echo:v1");
        let anon = Credentials::anonymous();
        for e in [
            refused(client.resolve(&r, &anon).await),
            refused(client.pull(&r, &anon, &cache).await),
        ] {
            let text = e.to_string();
            assert!(text.contains(&format!("HTTP {status}")), "{text}");
        }
    }
}

#[tokio::test]
async fn open_and_closed_ports_read_the_same() {
    // Scripted: a service that is no registry (it speaks another protocol) beside a closed port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let open = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let open_port = open.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = open.accept().await {
            use tokio::io::AsyncWriteExt as _;
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        }
    });
    let mut messages = Vec::new();
    for port in [closed, open_port] {
        let host = format!("127.0.0.1:{port}");
        let (client, _cache, _dir) = client(&[&host]);
        let r = reference(&host, "agents/echo:v1");
        let e = refused(client.resolve(&r, &Credentials::anonymous()).await);
        assert_eq!(e.reason(), "RegistryUnavailable", "{e}");
        messages.push(e.to_string().replace(&port.to_string(), "PORT"));
    }
    assert_eq!(messages[0], messages[1]);
}

#[tokio::test]
async fn internal_addresses_are_refused_unless_listed() {
    // Scripted: any listener does, since the request must never reach it.
    let registry = Scripted::start(|_: &Request| Reply::new(200, "{}")).await;
    let port = registry.port();
    let anon = Credentials::anonymous();
    // Not on any list: refused by address, literal or resolved (localhost), before connecting.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let (client, _cache, _dir) = client(&[]);
        let e = refused(client.resolve(&reference(&host, "a:v1"), &anon).await);
        assert_eq!(e.reason(), "RegistryNotAllowed", "{host}: {e}");
        assert!(e.to_string().contains("internal address"), "{e}");
    }
    assert_eq!(registry.hits(), Vec::<String>::new());
    // Listed as a private registry (https): allowed to connect (and fails TLS, as this one
    // speaks plain http), which proves the address check let it through.
    let (client, _cache, _dir) = client_with(ClientOptions {
        private_registries: vec![format!("localhost:{port}")],
        ..ClientOptions::default()
    });
    let e = refused(
        client
            .resolve(&reference(&format!("localhost:{port}"), "a:v1"), &anon)
            .await,
    );
    assert_eq!(e.reason(), "RegistryUnavailable", "{e}");
}

#[tokio::test]
async fn a_manifest_streamed_forever_is_cut_at_the_cap() {
    // Scripted: a real registry serves the manifest it stored; this one streams 1 GiB, with
    // and without announcing its length.
    for declared in [false, true] {
        let registry = Scripted::start(move |_: &Request| Reply::repeat(b'{', GIB, declared)).await;
        let (client, cache, _dir) = client(&[&registry.host()]);
        let r = reference(&registry.host(), "agents/echo:v1");
        let anon = Credentials::anonymous();
        let e = refused(client.pull(&r, &anon, &cache).await);
        assert_eq!(e.reason(), "PullFailed", "{e}");
        assert!(e.to_string().contains("manifest is over"), "{e}");
        // The client hung up after the cap: what the server got to write is the cap plus the
        // socket buffers, far from the gibibyte.
        let sent = registry.bytes_sent();
        assert!(
            sent < (MAX_MANIFEST_BYTES as u64) * 8,
            "{sent} bytes sent (declared: {declared})"
        );
    }
}

#[tokio::test]
async fn a_token_reply_streamed_forever_is_cut_at_the_cap() {
    // Scripted: a token service that never stops answering.
    let registry = Scripted::start(|req: &Request| {
        if req.target.starts_with("/token") {
            Reply::repeat(b'a', GIB, false)
        } else {
            let realm = format!(r#"Bearer realm="{}/token""#, req.origin());
            Reply::new(401, "").header("WWW-Authenticate", realm)
        }
    })
    .await;
    let (client, _cache, _dir) = client(&[&registry.host()]);
    let r = reference(&registry.host(), "agents/echo:v1");
    let e = refused(client.resolve(&r, &Credentials::anonymous()).await);
    assert!(e.to_string().contains("token reply is over"), "{e}");
    assert!(
        registry.bytes_sent() < GIB / 16,
        "{}",
        registry.bytes_sent()
    );
}

/// A registry whose every repository `agents/junk-<i>` has one 1 MiB junk layer that does not
/// hash to the digest its manifest names.
async fn junk_registry() -> Scripted {
    Scripted::start(|req: &Request| {
        let target = req.target.as_str();
        if target.contains("/manifests/") {
            let seed = target.len() as u8;
            Reply::new(200, wasm_manifest(&sha256_digest(&[seed]), 1 << 20))
        } else if target.contains("/blobs/") {
            Reply {
                pace: Duration::from_millis(2),
                ..Reply::repeat(b'j', 1 << 20, true)
            }
        } else {
            Reply::new(404, "")
        }
    })
    .await
}

#[tokio::test]
async fn a_failed_layer_is_not_downloaded_again_within_its_backoff() {
    // Scripted: junk behind a manifest (a real registry verifies what it is given).
    let registry = junk_registry().await;
    let (client, cache, _dir) = client(&[&registry.host()]);
    let r = reference(&registry.host(), "agents/junk-1:v1");
    let anon = Credentials::anonymous();
    for _ in 0..3 {
        let e = refused(client.pull(&r, &anon, &cache).await);
        assert_eq!(e.reason(), "DigestMismatch", "{e}");
    }
    assert_eq!(registry.hits_on("/blobs/"), 1, "{:?}", registry.hits());
    assert_eq!(registry.hits_on("/manifests/"), 1, "{:?}", registry.hits());
    // Nothing of the junk stays on disk.
    let left = std::fs::read_dir(cache.dir()).expect("read_dir").count();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn pulls_are_bounded_in_number() {
    // Scripted: slow junk layers, so that unbounded pulls would overlap.
    let registry = junk_registry().await;
    let (client, cache, _dir) = client_with(ClientOptions {
        insecure_registries: vec![registry.host()],
        max_concurrent_pulls: 2,
        ..ClientOptions::default()
    });
    let anon = Credentials::anonymous();
    let pulls = (0..8).map(|i| {
        let r = reference(&registry.host(), &format!("agents/junk-{i}:v1"));
        let (client, cache, anon) = (client.clone(), cache.clone(), anon.clone());
        async move { client.pull(&r, &anon, &cache).await.map(|_| ()) }
    });
    for result in futures::future::join_all(pulls).await {
        assert_eq!(refused(result).reason(), "DigestMismatch");
    }
    assert_eq!(registry.hits_on("/blobs/"), 8);
    assert!(
        registry.max_in_flight() <= 2,
        "{} requests at once",
        registry.max_in_flight()
    );
}
