//! A real MCP server on 127.0.0.1: `testkit/mcp/server.py`, built with the official Python SDK
//! (`mcp` from PyPI, which `scripts/mcp-server.sh` installs), served over streamable HTTP and
//! stopped when dropped.
//!
//! The Python is found through `ARI_MCP_PYTHON` (the path the script prints last); a test
//! without it is skipped with that reason printed, as `scripts/test.sh` always sets it. The
//! server binds its own free port and prints it, so nothing here guesses a port or sleeps.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The environment variable naming the Python with `mcp` installed.
pub const ENV: &str = "ARI_MCP_PYTHON";
/// How long the server may take to start before the start is a failure.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How the server keeps its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Sessions (`Mcp-Session-Id`) and SSE answers: what a 2025-11-25 client meets.
    Sessions,
    /// No sessions, JSON answers.
    Stateless,
}

/// A running server; killed when dropped.
pub struct McpServer {
    child: Child,
    port: u16,
}

impl McpServer {
    /// The Python `ARI_MCP_PYTHON` names, or why there is none.
    pub fn installed() -> Result<PathBuf, String> {
        let python = std::env::var_os(ENV).map(PathBuf::from).ok_or_else(|| {
            format!("{ENV} is not set: run `export {ENV}=$(scripts/mcp-server.sh | tail -n 1)`")
        })?;
        if !python.is_file() {
            return Err(format!(
                "{ENV}={} is no file: run scripts/mcp-server.sh",
                python.display()
            ));
        }
        Ok(python)
    }

    /// The server started, or `None` after printing why the SDK is not installed.
    pub fn start_or_skip(test: &str, mode: Mode, token: Option<&str>) -> Option<McpServer> {
        match McpServer::installed() {
            Ok(python) => Some(McpServer::start(&python, mode, token)),
            Err(why) => {
                eprintln!("skipping {test}: {why}");
                None
            }
        }
    }

    /// Starts the server with `python`; with `token`, it refuses requests without
    /// `Authorization: Bearer <token>`. Panics (with its output) if it does not report its
    /// port in time.
    pub fn start(python: &std::path::Path, mode: Mode, token: Option<&str>) -> McpServer {
        let script = crate::agents::repo_root().join("testkit/mcp/server.py");
        let mut command = Command::new(python);
        command
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if mode == Mode::Stateless {
            command.arg("--stateless");
        }
        match token {
            Some(token) => command.env("ARI_MCP_TOKEN", token),
            None => command.env_remove("ARI_MCP_TOKEN"),
        };
        let mut child = command.spawn().expect("start the MCP server");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || report_port(stdout, tx));
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(port)) => McpServer { child, port },
            other => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = stderr.read_to_string(&mut err);
                }
                let _ = child.wait();
                panic!("the MCP server did not start ({other:?}): {err}");
            }
        }
    }

    /// The streamable HTTP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server and waits until it has exited (its port then refuses connections).
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends the port of the server's `listening PORT` line (or `None` when it ends first), then
/// drains its output so the server never blocks on a full pipe.
fn report_port(stdout: ChildStdout, tx: mpsc::Sender<Option<u16>>) {
    let mut lines = BufReader::new(stdout).lines();
    let mut sent = false;
    for line in lines.by_ref().map_while(Result::ok) {
        if !sent && let Some(port) = line.strip_prefix("listening ") {
            let _ = tx.send(port.trim().parse().ok());
            sent = true;
        }
    }
    if !sent {
        let _ = tx.send(None);
    }
}
