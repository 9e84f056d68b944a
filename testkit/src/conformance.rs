//! The conformance table (`conformance/cases.json`) and how a run is judged against it, shared
//! by the two runners: under `ari run` (`executor/tests/conformance.rs`) and in the cluster
//! (`e2e/tests/conformance.rs`). One copy, so a case means the same in both places: each
//! runner turns what it observed into an [`Ending`] and calls [`check`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Suite {
    pub protocol: String,
    pub signing_key: String,
    pub public_key: String,
    pub default_seed: String,
    pub languages: BTreeMap<String, Language>,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Language {
    /// File name under `target/agents/`.
    pub component: String,
    /// The command that builds it, for the skip message.
    pub build: String,
    /// `--fuel` (in the cluster `spec.limits.fuel`) for every case of this language.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// `--memory` (in the cluster `spec.limits.memoryBytes`) for every case of this language.
    #[serde(default)]
    pub memory: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub input: String,
    #[serde(default)]
    pub grants: Vec<String>,
    #[serde(default)]
    pub require: Vec<String>,
    #[serde(default)]
    pub seed: Option<String>,
    /// The exact output; required when the case ends `Succeeded`.
    #[serde(default)]
    pub output: Option<String>,
    /// `Succeeded` (the default) or the failure kind (`ari run`'s `error.kind`, the Task's
    /// `status.reason`).
    #[serde(default = "succeeded")]
    pub end: String,
    /// A piece of the failure message.
    #[serde(default)]
    pub message: Option<String>,
    /// Pieces that some log line must contain, one each.
    #[serde(default)]
    pub logs: Vec<String>,
    /// Inclusive `[min, max]` bounds on fields of `resourcesUsed`.
    #[serde(default)]
    pub usage: BTreeMap<String, [u64; 2]>,
    /// Other Agents the task may delegate to, by name, each running this language's own
    /// conformance component with these grants (as `ari run --agent-grant`).
    #[serde(default)]
    pub agents: BTreeMap<String, Vec<String>>,
    /// What a runner must provide beyond `ari run` for this case (`delegation-cluster`: a
    /// cluster that runs delegated Tasks; `models-cluster`: ModelConfigs at the scripted model
    /// server; `tools-cluster`: MCPServers at the runner's MCP server); a runner that lacks one
    /// skips the case and says so.
    #[serde(default)]
    pub needs: Vec<String>,
    /// The models the task may reach, by ModelConfig name: an OpenAI-compatible API root each
    /// (`ari run --model NAME=URL`), where `{models}` is the runner's scripted model server and
    /// the path's first segment names its scripted answer (conformance/README.md).
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// The task's token budget (`ari run --tokens`).
    #[serde(default)]
    pub tokens: Option<u64>,
    /// The MCP servers the task may reach, by name: a streamable HTTP URL each (`ari run --mcp
    /// NAME=URL`), where `{mcp}` is the runner's MCP server (the official Python SDK's,
    /// `testkit/mcp/server.py`).
    #[serde(default)]
    pub mcp: BTreeMap<String, String>,
    /// Calls the task's grants mark for approval (as `ari run --require-approval`:
    /// `network=ORIGIN`, `delegation=AGENT`, `SERVER:TOOL`). No one approves them, so each is
    /// rejected and the guest gets its capability's `rejected` error.
    #[serde(default)]
    pub approvals: Vec<String>,
}

fn succeeded() -> String {
    "Succeeded".into()
}

/// `conformance/cases.json` under the repository root.
pub fn load(repo_root: &Path) -> Result<Suite, String> {
    let path = repo_root.join("conformance/cases.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} does not parse: {e}", path.display()))
}

/// Whether `ARI_CONFORMANCE_REQUIRE` (a comma-separated list, or `all`) names `lang`.
pub fn required(lang: &str) -> bool {
    std::env::var("ARI_CONFORMANCE_REQUIRE").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|l| l == lang || l == "all")
    })
}

/// `Ok(Some(path))` when the component is built; `Ok(None)` after printing the `SKIPPED` line
/// straight to stderr (past a test harness's capture, so a skip is never silent) when it is not;
/// `Err` when it is not built but `ARI_CONFORMANCE_REQUIRE` names the language. `suite` names
/// the runner in the skip line (`conformance suite`, `cluster conformance suite`).
pub fn built_or_skipped(
    lang: &str,
    language: &Language,
    path: PathBuf,
    suite: &str,
) -> Result<Option<PathBuf>, String> {
    if path.is_file() {
        return Ok(Some(path));
    }
    let why = format!(
        "{} is not built; run {} (it installs the toolchain on first use)",
        path.display(),
        language.build
    );
    if required(lang) {
        return Err(format!("{lang} {suite}: {why}"));
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {lang} {suite}: {why}");
    Ok(None)
}

/// What a run of one case came to, however it was observed.
#[derive(Clone, Debug, Default)]
pub struct Ending {
    /// `Succeeded`, or the failure kind / Task reason.
    pub end: String,
    pub message: String,
    /// The output as UTF-8, if it is.
    pub output: Option<String>,
    /// How to show an output that is not UTF-8 (e.g. its base64).
    pub other_output: Option<String>,
    /// The task's log, as `LEVEL message` lines.
    pub logs: Vec<String>,
    /// Fields of `resourcesUsed` that were reported.
    pub usage: BTreeMap<String, u64>,
}

/// Fields of `resourcesUsed` that a report leaves out when they are 0 (a task that delegated
/// nothing has no `childrenFuel`); every other field must be there.
const OMITTED_WHEN_ZERO: &[&str] = &["childrenFuel"];

/// Checks one run against its case; `Err` says what differed.
pub fn check(case: &Case, ending: &Ending) -> Result<(), String> {
    let Ending {
        end,
        message,
        output,
        other_output,
        logs,
        usage,
    } = ending;
    if *end != case.end {
        return Err(format!(
            "ended {end} ({message}), expected {}; output {:?}",
            case.end,
            output.as_ref().or(other_output.as_ref())
        ));
    }
    if let Some(piece) = &case.message
        && !message.contains(piece.as_str())
    {
        return Err(format!("message {message:?} lacks {piece:?}"));
    }
    if let Some(expected) = &case.output
        && output.as_deref() != Some(expected.as_str())
    {
        return Err(format!(
            "output {:?}, expected {expected:?}",
            output.as_ref().or(other_output.as_ref())
        ));
    }
    for piece in &case.logs {
        if !logs.iter().any(|line| line.contains(piece.as_str())) {
            return Err(format!("no log line contains {piece:?}: {logs:?}"));
        }
    }
    for (field, [min, max]) in &case.usage {
        let used = usage
            .get(field)
            .copied()
            .or_else(|| OMITTED_WHEN_ZERO.contains(&field.as_str()).then_some(0));
        if !used.is_some_and(|u| (*min..=*max).contains(&u)) {
            return Err(format!(
                "resourcesUsed.{field} = {used:?}, expected {min}..={max}"
            ));
        }
    }
    Ok(())
}

/// The values of the table's placeholders in one run.
pub struct Placeholders {
    /// `{server}`: base URL of the [`EchoServer`].
    pub server: String,
    /// `{closed}`: a URL where nothing listens.
    pub closed: String,
    /// `{key}`: how the runner refers to the signing key.
    pub key: String,
    /// `{publicKey}`.
    pub public_key: String,
}

impl Placeholders {
    pub fn fill(&self, text: &str) -> String {
        text.replace("{server}", &self.server)
            .replace("{closed}", &self.closed)
            .replace("{key}", &self.key)
            .replace("{publicKey}", &self.public_key)
    }
}

/// `http://127.0.0.1:PORT` where nothing listens: a port bound and released again.
pub fn closed_port_url() -> std::io::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    drop(listener);
    Ok(format!("http://127.0.0.1:{port}"))
}

/// A real HTTP server on 127.0.0.1: `GET /hello` → 200 `hello conformance`; `POST /echo` → 200
/// with the request body; anything else → 404 `not found`. Stops on drop.
pub struct EchoServer {
    pub base: String,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoServer {
    pub fn start() -> Result<Self, String> {
        let server =
            Arc::new(tiny_http::Server::http("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?);
        let port = server
            .server_addr()
            .to_ip()
            .ok_or("the echo server has no IP address")?
            .port();
        let s = server.clone();
        let thread = std::thread::spawn(move || {
            for mut req in s.incoming_requests() {
                let resp = match (req.method(), req.url()) {
                    (tiny_http::Method::Get, "/hello") => {
                        tiny_http::Response::from_string("hello conformance")
                    }
                    (tiny_http::Method::Post, "/echo") => {
                        let mut body = Vec::new();
                        // A body cut short is echoed as far as it came.
                        let _ = req.as_reader().take(64 * 1024).read_to_end(&mut body);
                        tiny_http::Response::from_data(body)
                    }
                    _ => tiny_http::Response::from_string("not found").with_status_code(404),
                };
                let _ = req.respond(resp);
            }
        });
        Ok(Self {
            base: format!("http://127.0.0.1:{port}"),
            server,
            thread: Some(thread),
        })
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
