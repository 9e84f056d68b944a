//! A real OCI registry for the e2e suites: the CNCF distribution registry (built from its Go
//! module by `scripts/registry.sh`, found through `ARI_REGISTRY_BIN`) on a loopback port,
//! `ari push` as a user runs it, and the operator installed to speak plain HTTP to such
//! registries only. Used by `tests/oci.rs` and `tests/conformance.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::scenario::{Ctx, repo};

/// Installs the operator from `deploy/operator.yaml` (short heartbeat timeout, as
/// [`Ctx::install_operator_manifest`]) allowed plain HTTP to `insecure` (`host:port`,
/// comma-separated) only, and waits until it is the one Ready operator pod.
pub fn install_operator(ctx: &Ctx, insecure: &str) -> Result<()> {
    install_operator_with(ctx, "ARI_INSECURE_REGISTRIES", insecure)
}

/// Installs the operator from `deploy/operator.yaml` (short heartbeat timeout) with the
/// environment variable `name` set to `value`, and waits until it is the one Ready operator
/// pod and runs with it.
pub fn install_operator_with(ctx: &Ctx, name: &str, value: &str) -> Result<()> {
    ctx.kubectl_ok([
        "apply",
        "-f",
        &repo().join("deploy/operator.yaml").display().to_string(),
    ])?;
    ctx.set_operator_env(&[("ARI_HEARTBEAT_TIMEOUT_SECONDS", "4"), (name, value)])
}

pub fn registry_bin() -> Result<PathBuf> {
    let bin = std::env::var_os("ARI_REGISTRY_BIN")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .context(
            "ARI_REGISTRY_BIN is not set: run with ARI_REGISTRY_BIN=\"$(scripts/registry.sh --print)\"",
        )?;
    ensure!(
        bin.is_file(),
        "ARI_REGISTRY_BIN={} is not a file",
        bin.display()
    );
    Ok(bin)
}

pub use crate::process::free_port;

/// A CNCF distribution registry on a loopback port, killed on drop (and, through
/// `PR_SET_PDEATHSIG`, when the test process dies).
pub struct Registry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Registry {
    pub fn start(bin: &Path, login: Option<(&str, &str)>) -> Result<Registry> {
        let mut last = String::new();
        // A free port can be taken between choosing it and the registry binding it.
        for _ in 0..3 {
            match Registry::spawn(bin, login) {
                Ok(r) => return Ok(r),
                Err(e) => last = format!("{e:#}"),
            }
        }
        bail!("the registry did not start: {last}")
    }

    fn spawn(bin: &Path, login: Option<(&str, &str)>) -> Result<Registry> {
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("storage").display()
        );
        if let Some((user, password)) = login {
            let hash =
                bcrypt::hash_with_result(password, 4)?.format_for_version(bcrypt::Version::TwoY);
            let htpasswd = dir.path().join("htpasswd");
            fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: ari-e2e\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        fs::write(&config_path, config)?;
        let log = fs::File::create(dir.path().join("registry.log"))?;
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: only the async-signal-safe prctl runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let mut registry = Registry { child, port, dir };
        registry.wait_ready()?;
        Ok(registry)
    }

    /// `GET /v2/` answers (200, or 401 when it wants a login).
    fn wait_ready(&mut self) -> Result<()> {
        let url = format!("http://{}/v2/", self.host());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("registry exited with {status}: {}", self.log());
            }
            if let Some(code) = http_status(&url) {
                ensure!(code == 200 || code == 401, "GET /v2/ answered {code}");
                return Ok(());
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "no answer on /v2/: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code of a plain `GET`, or `None` when nothing answers.
pub fn http_status(url: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/')?;
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// `ari push FILE REF [--docker-config CONFIG]` as a user runs it (the `ari` of
/// `target/debug`); returns the pinned reference it prints.
pub fn ari_push(component: &Path, reference: &str, docker_config: Option<&Path>) -> Result<String> {
    let ari = crate::target_dir().join("debug/ari");
    let mut command = Command::new(&ari);
    command.arg("push").arg(component).arg(reference);
    if let Some(config) = docker_config {
        command.arg("--docker-config").arg(config);
    }
    let out = command
        .output()
        .with_context(|| format!("running {}", ari.display()))?;
    ensure!(
        out.status.success(),
        "ari push {} {reference}: {}",
        component.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(
        pinned.starts_with(&format!("{reference}@sha256:")),
        "ari push printed {pinned:?}, not {reference}@sha256:..."
    );
    Ok(pinned)
}

/// The manifest digest of a pinned reference.
pub fn digest_of(pinned: &str) -> Result<&str> {
    pinned
        .rsplit_once('@')
        .map(|(_, d)| d)
        .context("no digest in the pinned reference")
}
