//! A real `redis-server` on a loopback port for the e2e suites (the one of the host,
//! `/usr/bin/redis-server` or `ARI_REDIS_SERVER`), in memory only, killed on drop and, through
//! `PR_SET_PDEATHSIG`, when the test process dies (so a long-lived caller thread should start it). Used by `tests/pools.rs`.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Result<RedisServer> {
        let bin = std::env::var_os("ARI_REDIS_SERVER")
            .filter(|b| !b.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
        ensure!(
            bin.is_file(),
            "{} is not a file: install redis-server or set ARI_REDIS_SERVER",
            bin.display()
        );
        let mut last = String::new();
        // A free port can be taken between choosing it and the server binding it.
        for _ in 0..3 {
            match RedisServer::spawn(&bin) {
                Ok(r) => return Ok(r),
                Err(e) => last = format!("{e:#}"),
            }
        }
        bail!("redis-server did not start: {last}")
    }

    fn spawn(bin: &std::path::Path) -> Result<RedisServer> {
        let dir = tempfile::tempdir()?;
        let port = crate::process::free_port()?;
        let log = std::fs::File::create(dir.path().join("redis.log"))?;
        let mut command = Command::new(bin);
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        crate::process::die_with_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let mut server = RedisServer { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    /// `PING` answers `+PONG`.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("redis-server exited with {status}: {}", self.log());
            }
            if self.ping() {
                return Ok(());
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "redis-server does not answer PING: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
