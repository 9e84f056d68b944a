//! Pulls and pushes against a real registry: the CNCF distribution registry, started per test
//! on a free loopback port with its own storage directory.
//!
//! The binary comes from `ARI_REGISTRY_BIN`; without it the tests that need it say so and pass:
//!
//!     ARI_REGISTRY_BIN="$(scripts/registry.sh --print)" cargo test -p ari-oci

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ari_oci::layout::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, WasmConfig};
use ari_oci::{
    Client, ClientOptions, Credentials, Error, ModuleCache, PulledModule, Reference, sha256_digest,
};
use base64::Engine as _;
use tempfile::TempDir;

/// How long a registry may take to answer `GET /v2/` after starting.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running registry; killed (and its storage removed) on drop.
struct Registry {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Registry {
    /// An open registry, or `None` (after saying why) when `ARI_REGISTRY_BIN` is unset.
    fn start(test: &str) -> Option<Registry> {
        Registry::start_with(test, None)
    }

    /// A registry that wants `user`/`password` (htpasswd, bcrypt) for every request.
    fn start_private(test: &str, user: &str, password: &str) -> Option<Registry> {
        Registry::start_with(test, Some((user, password)))
    }

    fn start_with(test: &str, login: Option<(&str, &str)>) -> Option<Registry> {
        let Some(bin) = std::env::var_os("ARI_REGISTRY_BIN").filter(|b| !b.is_empty()) else {
            // Straight to stderr, past the test harness's capture, so a skip is never silent.
            let _ = writeln!(
                std::io::stderr(),
                "skipping {test}: ARI_REGISTRY_BIN is not set; run \
                 ARI_REGISTRY_BIN=\"$(scripts/registry.sh --print)\" cargo test -p ari-oci"
            );
            return None;
        };
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "ARI_REGISTRY_BIN={} is not a file",
            bin.display()
        );
        // A free port can be taken between choosing it and the registry binding it: try again.
        let mut last_failure = String::new();
        for _ in 0..3 {
            match Registry::spawn(&bin, login) {
                Ok(registry) => return Some(registry),
                Err(failure) => last_failure = failure,
            }
        }
        panic!("the registry did not start: {last_failure}");
    }

    fn spawn(bin: &Path, login: Option<(&str, &str)>) -> Result<Registry, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let storage = dir.path().join("storage");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if let Some((user, password)) = login {
            let hash = bcrypt::hash_with_result(password, 4)
                .map_err(|e| e.to_string())?
                .format_for_version(bcrypt::Version::TwoY);
            let htpasswd = dir.path().join("htpasswd");
            fs::write(&htpasswd, format!("{user}:{hash}\n")).map_err(|e| e.to_string())?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: ari-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let log = fs::File::create(dir.path().join("registry.log")).map_err(|e| e.to_string())?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let mut registry = Registry { child, port, dir };
        registry.wait_ready()?;
        Ok(registry)
    }

    /// Polls `GET /v2/` until the registry answers (200, or 401 when it wants a login).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("registry exited with {status}: {}", self.log()));
            }
            if let Some(code) = http_status(self.port, "/v2/") {
                if code == 200 || code == 401 {
                    return Ok(());
                }
                return Err(format!("GET /v2/ answered {code}: {}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no answer on /v2/ within {START_DEADLINE:?}: {}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn reference(&self, name: &str) -> Reference {
        Reference::parse(&format!("{}/{name}", self.host())).expect("a valid test reference")
    }

    /// A client that speaks plain http to this registry.
    fn client(&self, max_module_bytes: u64) -> TestClient {
        TestClient::new(ClientOptions {
            insecure_registries: vec![self.host()],
            max_module_bytes,
            ..ClientOptions::default()
        })
    }

    /// Where the filesystem driver keeps a blob's bytes.
    fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    fn blob(&self, digest: &str) -> Vec<u8> {
        fs::read(self.blob_path(digest)).expect("the blob is stored")
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

/// A client with a module cache of its own, as the operator and each executor have.
struct TestClient {
    client: Client,
    cache: ModuleCache,
    dir: TempDir,
}

impl TestClient {
    fn new(options: ClientOptions) -> TestClient {
        let dir = tempfile::tempdir().expect("tempdir");
        TestClient {
            client: Client::new(options).expect("client"),
            cache: ModuleCache::new(dir.path().join("modules")).expect("cache"),
            dir,
        }
    }

    async fn pull(&self, r: &Reference, c: &Credentials) -> Result<PulledModule, Error> {
        self.client.pull(r, c, &self.cache).await
    }

    async fn resolve(&self, r: &Reference, c: &Credentials) -> Result<String, Error> {
        self.client.resolve(r, c).await
    }

    async fn push(&self, r: &Reference, bytes: Vec<u8>, c: &Credentials) -> Result<String, Error> {
        self.client.push(r, bytes, c).await
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The status code of `GET path`, or `None` while nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Bytes that look like a component (magic, component version) and differ by `seed`; the crate
/// does not validate Wasm, so nothing more is needed.
fn module(seed: &str, len: usize) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend(seed.bytes().cycle().take(len.saturating_sub(bytes.len())));
    bytes
}

fn reason<T: std::fmt::Debug>(result: Result<T, Error>) -> &'static str {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => {
            eprintln!("error as expected: {e}");
            e.reason()
        }
    }
}

const LIMIT: u64 = 1024 * 1024;

#[tokio::test]
async fn a_pushed_module_pulls_back_byte_for_byte_by_tag_and_by_digest() {
    let Some(registry) =
        Registry::start("a_pushed_module_pulls_back_byte_for_byte_by_tag_and_by_digest")
    else {
        return;
    };
    let client = registry.client(LIMIT);
    let tagged = registry.reference("agents/clock:v1");
    let bytes = module("clock", 3000);

    let digest = client
        .push(&tagged, bytes.clone(), &Credentials::anonymous())
        .await
        .expect("push");
    assert_eq!(
        client
            .resolve(&tagged, &Credentials::anonymous())
            .await
            .expect("resolve"),
        digest
    );

    let by_tag = client
        .pull(&tagged, &Credentials::anonymous())
        .await
        .expect("pull by tag");
    assert_eq!(by_tag.bytes, bytes);
    assert_eq!(by_tag.manifest_digest, digest);
    assert_eq!(by_tag.layer_digest, sha256_digest(&bytes));

    let pinned = tagged.pinned_to(&digest).expect("pin");
    assert!(pinned.is_pinned());
    let by_digest = client
        .pull(&pinned, &Credentials::anonymous())
        .await
        .expect("pull by digest");
    assert_eq!(by_digest, by_tag);
    // A pulled module holds one of the client's two pull permits until dropped (it bounds the
    // modules in memory): a caller keeping two would wait for ever on a third pull.
    drop((by_tag, by_digest));
    let tag_and_digest = Reference::parse(&format!("{tagged}@{digest}")).expect("parses");
    let both = client
        .pull(&tag_and_digest, &Credentials::anonymous())
        .await
        .expect("tag@digest");
    assert_eq!(both.bytes, bytes);

    // The same bytes push to the same manifest: pushes are reproducible.
    let again = registry.reference("agents/clock:v1-again");
    assert_eq!(
        client
            .push(&again, bytes.clone(), &Credentials::anonymous())
            .await
            .ok(),
        Some(digest.clone())
    );

    // On the wire it is the Wasm OCI layout that other Wasm tools read.
    let manifest: serde_json::Value =
        serde_json::from_slice(&registry.blob(&digest)).expect("manifest JSON");
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    assert_eq!(manifest["layers"][0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
    assert_eq!(manifest["layers"][0]["size"], bytes.len());
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .expect("config digest");
    let config: WasmConfig =
        serde_json::from_slice(&registry.blob(config_digest)).expect("config JSON");
    assert_eq!(config.architecture, "wasm");
    assert_eq!(config.os, "wasip2");
    assert_eq!(config.layer_digests, vec![sha256_digest(&bytes)]);
}

#[tokio::test]
async fn a_pinned_reference_keeps_its_bytes_when_the_tag_moves() {
    let Some(registry) = Registry::start("a_pinned_reference_keeps_its_bytes_when_the_tag_moves")
    else {
        return;
    };
    let client = registry.client(LIMIT);
    let tagged = registry.reference("agents/clock:stable");
    let anon = Credentials::anonymous();
    let first = client
        .push(&tagged, module("one", 100), &anon)
        .await
        .expect("push one");
    let second = client
        .push(&tagged, module("two", 100), &anon)
        .await
        .expect("push two");
    assert_ne!(first, second);
    assert_eq!(client.resolve(&tagged, &anon).await.ok(), Some(second));
    let pinned = client
        .pull(&tagged.pinned_to(&first).expect("pin"), &anon)
        .await
        .expect("pull");
    assert_eq!(pinned.bytes, module("one", 100));
}

#[tokio::test]
async fn a_wrong_pinned_digest_is_a_digest_mismatch() {
    let Some(registry) = Registry::start("a_wrong_pinned_digest_is_a_digest_mismatch") else {
        return;
    };
    let client = registry.client(LIMIT);
    let anon = Credentials::anonymous();
    let tagged = registry.reference("agents/clock:v1");
    let actual = client
        .push(&tagged, module("clock", 200), &anon)
        .await
        .expect("push");
    let wrong = sha256_digest(b"some other manifest");

    // The tag exists but points elsewhere: the pin is wrong (or the tag moved).
    let pinned = Reference::parse(&format!("{tagged}@{wrong}")).expect("parses");
    for result in [
        client.pull(&pinned, &anon).await.map(|m| m.manifest_digest),
        client.resolve(&pinned, &anon).await,
    ] {
        match result {
            Err(Error::DigestMismatch {
                expected,
                actual: got,
            }) => {
                assert_eq!(expected, wrong);
                assert_eq!(got, actual);
            }
            other => panic!("expected a digest mismatch, got {other:?}"),
        }
    }
    assert_eq!(
        Error::DigestMismatch {
            expected: wrong.clone(),
            actual: actual.clone()
        }
        .reason(),
        "DigestMismatch"
    );

    // With no tag to compare against, a digest the registry lacks is simply not there.
    let digest_only = tagged.pinned_to(&wrong).expect("pin");
    assert_eq!(
        reason(client.pull(&digest_only, &anon).await),
        "ImageNotFound"
    );
}

#[tokio::test]
async fn a_tampered_layer_is_a_digest_mismatch() {
    let Some(registry) = Registry::start("a_tampered_layer_is_a_digest_mismatch") else {
        return;
    };
    let client = registry.client(LIMIT);
    let anon = Credentials::anonymous();
    let tagged = registry.reference("agents/clock:v1");
    let bytes = module("clock", 500);
    client
        .push(&tagged, bytes.clone(), &anon)
        .await
        .expect("push");

    // Flip one byte of the stored layer, keeping its length: the registry serves it as is.
    let layer_digest = sha256_digest(&bytes);
    let mut stored = registry.blob(&layer_digest);
    stored[10] ^= 0xff;
    fs::write(registry.blob_path(&layer_digest), &stored).expect("tamper");

    match client.pull(&tagged, &anon).await {
        Err(Error::DigestMismatch { expected, actual }) => {
            assert_eq!(expected, layer_digest);
            assert_eq!(actual, sha256_digest(&stored));
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_tag_is_image_not_found() {
    let Some(registry) = Registry::start("a_missing_tag_is_image_not_found") else {
        return;
    };
    let client = registry.client(LIMIT);
    let anon = Credentials::anonymous();
    client
        .push(
            &registry.reference("agents/clock:v1"),
            module("c", 64),
            &anon,
        )
        .await
        .expect("push");

    let missing_tag = registry.reference("agents/clock:v2");
    assert_eq!(
        reason(client.pull(&missing_tag, &anon).await),
        "ImageNotFound"
    );
    assert_eq!(
        reason(client.resolve(&missing_tag, &anon).await),
        "ImageNotFound"
    );
    let missing_repo = registry.reference("agents/nothing-here:v1");
    assert_eq!(
        reason(client.pull(&missing_repo, &anon).await),
        "ImageNotFound"
    );
}

#[tokio::test]
async fn a_registry_that_is_down_is_registry_unavailable() {
    // Nothing listens on a port just freed: connections are refused. No registry binary needed.
    let host = format!("127.0.0.1:{}", free_port());
    let client = TestClient::new(ClientOptions {
        insecure_registries: vec![host.clone()],
        max_module_bytes: LIMIT,
        ..ClientOptions::default()
    });
    let reference = Reference::parse(&format!("{host}/agents/clock:v1")).expect("parses");
    let anon = Credentials::anonymous();
    assert_eq!(
        reason(client.pull(&reference, &anon).await),
        "RegistryUnavailable"
    );
    assert_eq!(
        reason(client.resolve(&reference, &anon).await),
        "RegistryUnavailable"
    );
    assert_eq!(
        reason(client.push(&reference, module("m", 16), &anon).await),
        "RegistryUnavailable"
    );
    assert!(Error::RegistryUnavailable(String::new()).is_transient());
}

#[tokio::test]
async fn a_non_wasm_artifact_is_refused() {
    use oci_client::client::{Config, ImageLayer};
    use oci_client::manifest::{
        IMAGE_LAYER_GZIP_MEDIA_TYPE, ImageIndexEntry, OciImageIndex, OciManifest,
    };
    use oci_client::secrets::RegistryAuth;

    let Some(registry) = Registry::start("a_non_wasm_artifact_is_refused") else {
        return;
    };
    let client = registry.client(LIMIT);
    let anon = Credentials::anonymous();
    let raw = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let oci_ref = |name: &str| -> oci_client::Reference {
        format!("{}/{name}", registry.host())
            .parse()
            .expect("reference")
    };
    let wasm_layer = || ImageLayer::new(module("w", 64), WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let wasm_config = || Config::new(b"{}".to_vec(), WASM_CONFIG_MEDIA_TYPE.to_string(), None);

    // A container image: image config, a tar+gzip layer.
    let image = [ImageLayer::new(
        b"not a tarball".to_vec(),
        IMAGE_LAYER_GZIP_MEDIA_TYPE.to_string(),
        None,
    )];
    raw.push(
        &oci_ref("images/app:v1"),
        &image,
        Config::oci_v1(b"{}".to_vec(), None),
        &RegistryAuth::Anonymous,
        None,
    )
    .await
    .expect("push an image");
    // The Wasm layer under an image config.
    raw.push(
        &oci_ref("images/mixed:v1"),
        &[wasm_layer()],
        Config::oci_v1(b"{}".to_vec(), None),
        &RegistryAuth::Anonymous,
        None,
    )
    .await
    .expect("push mixed");
    // Two Wasm layers: which one would run?
    let two = [
        wasm_layer(),
        ImageLayer::new(module("x", 64), WASM_LAYER_MEDIA_TYPE.to_string(), None),
    ];
    raw.push(
        &oci_ref("images/two:v1"),
        &two,
        wasm_config(),
        &RegistryAuth::Anonymous,
        None,
    )
    .await
    .expect("push two layers");
    // A multi-platform index over a Wasm artifact.
    let inner = client
        .push(
            &registry.reference("images/inner:v1"),
            module("i", 64),
            &anon,
        )
        .await
        .expect("push inner");
    let index = OciImageIndex {
        schema_version: 2,
        media_type: Some(oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE.to_string()),
        artifact_type: None,
        annotations: None,
        manifests: vec![ImageIndexEntry {
            media_type: oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string(),
            size: registry.blob(&inner).len() as i64,
            digest: inner,
            platform: None,
            annotations: None,
            artifact_type: None,
        }],
    };
    raw.push_manifest(
        &oci_ref("images/inner:index"),
        &OciManifest::ImageIndex(index),
    )
    .await
    .expect("push index");

    for name in [
        "images/app:v1",
        "images/mixed:v1",
        "images/two:v1",
        "images/inner:index",
    ] {
        let result = client.pull(&registry.reference(name), &anon).await;
        assert_eq!(reason(result), "NotAWasmArtifact", "{name}");
    }
}

#[tokio::test]
async fn a_layer_over_the_limit_is_refused_before_download() {
    let Some(registry) = Registry::start("a_layer_over_the_limit_is_refused_before_download")
    else {
        return;
    };
    let anon = Credentials::anonymous();
    let roomy = registry.client(LIMIT);
    let tagged = registry.reference("agents/big:v1");
    let bytes = module("big", 4096);
    roomy
        .push(&tagged, bytes.clone(), &anon)
        .await
        .expect("push");

    // Remove the layer's bytes from the registry: a client that downloaded it would now fail to
    // find it, so a size error proves the size was judged from the manifest alone.
    fs::remove_file(registry.blob_path(&sha256_digest(&bytes))).expect("remove the layer");
    assert_eq!(reason(roomy.pull(&tagged, &anon).await), "ImageNotFound");

    let strict = registry.client(1024);
    match strict.pull(&tagged, &anon).await {
        Err(Error::TooLarge { size, limit }) => {
            assert_eq!(size, 4096);
            assert_eq!(limit, 1024);
        }
        other => panic!("expected too large, got {other:?}"),
    }
    // What would be refused on pull is refused on push too.
    let pushed = strict
        .push(&registry.reference("agents/big:v2"), bytes, &anon)
        .await;
    assert_eq!(reason(pushed), "ModuleTooLarge");
}

#[tokio::test]
async fn private_registry_needs_the_pull_secret() {
    let Some(registry) =
        Registry::start_private("private_registry_needs_the_pull_secret", "bot", "s3cret")
    else {
        return;
    };
    let client = registry.client(LIMIT);
    let tagged = registry.reference("private/clock:v1");
    let secret = |user: &str, password: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!(
            r#"{{"auths":{{"http://{}":{{"auth":"{auth}"}},"ghcr.io":{{"auth":"eDp5"}}}}}}"#,
            registry.host()
        )
    };
    let right =
        Credentials::from_docker_config_json(secret("bot", "s3cret").as_bytes(), tagged.registry())
            .expect("secret parses");
    assert_eq!(right, Credentials::basic("bot", "s3cret"));
    let wrong =
        Credentials::from_docker_config_json(secret("bot", "guess").as_bytes(), tagged.registry())
            .expect("secret parses");
    let elsewhere = br#"{"auths":{"ghcr.io":{"username":"u","password":"p"}}}"#;
    let none = Credentials::from_docker_config_json(elsewhere, tagged.registry()).expect("parses");
    assert_eq!(none, Credentials::Anonymous);

    let bytes = module("private", 300);
    assert_eq!(
        reason(client.push(&tagged, bytes.clone(), &none).await),
        "Unauthorized"
    );
    let digest = client
        .push(&tagged, bytes.clone(), &right)
        .await
        .expect("push with the secret");

    // One client, three credentials: each is judged on its own.
    assert_eq!(reason(client.pull(&tagged, &none).await), "Unauthorized");
    assert_eq!(reason(client.pull(&tagged, &wrong).await), "Unauthorized");
    assert_eq!(
        reason(client.resolve(&tagged, &wrong).await),
        "Unauthorized"
    );
    let pulled = client
        .pull(&tagged, &right)
        .await
        .expect("pull with the secret");
    assert_eq!(pulled.bytes, bytes);
    assert_eq!(pulled.manifest_digest, digest);
    assert_eq!(reason(client.pull(&tagged, &wrong).await), "Unauthorized");
}

#[tokio::test]
async fn the_cache_survives_a_restart_and_drops_corrupt_entries() {
    let Some(registry) = Registry::start("the_cache_survives_a_restart_and_drops_corrupt_entries")
    else {
        return;
    };
    let anon = Credentials::anonymous();
    let client = registry.client(LIMIT);
    let tagged = registry.reference("agents/cached:v1");
    let bytes = module("cached", 700);
    client
        .push(&tagged, bytes.clone(), &anon)
        .await
        .expect("push");
    // The pull streams the module into the client's cache.
    let pulled = client.pull(&tagged, &anon).await.expect("pull");
    let cache_dir = client.dir.path().join("modules");

    // The registry goes away and the process restarts: the module is still there, verified.
    drop(registry);
    assert_eq!(
        reason(client.pull(&tagged, &anon).await),
        "RegistryUnavailable"
    );
    let restarted = ModuleCache::new(&cache_dir).expect("cache after restart");
    assert_eq!(restarted.get(&pulled.layer_digest), Some(bytes.clone()));

    // A corrupt entry is removed and is a miss, never returned.
    let file = cache_dir.join(pulled.layer_digest.trim_start_matches("sha256:"));
    let mut corrupt = bytes.clone();
    corrupt[20] ^= 1;
    fs::write(&file, &corrupt).expect("corrupt");
    assert_eq!(restarted.get(&pulled.layer_digest), None);
    assert!(!file.exists(), "the corrupt entry is removed");
    // A truncated one too.
    fs::write(&file, &bytes[..10]).expect("truncate");
    assert_eq!(restarted.get(&pulled.layer_digest), None);
    assert!(!file.exists());
}
