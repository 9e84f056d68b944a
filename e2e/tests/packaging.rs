//! The Dockerfile, read as data (there is no Docker engine here): its targets, binaries,
//! paths, user and ports must match the workspace (`cargo metadata`), the chart's values and
//! templates (operator and A2A gateway), the operator's executor Deployment and the e2e image
//! mapping. No cluster.
//! Run: `cargo test -p ari-e2e --test packaging`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use ari_e2e::repo_root as repo;

/// One build stage: `FROM <base> AS <name>` and its instructions (keyword upper-cased).
#[derive(Debug)]
struct Stage {
    name: String,
    base: String,
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(k, _)| k == keyword)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The one instruction `keyword` of this stage (Docker uses the last; we want exactly one).
    fn one(&self, keyword: &str) -> Result<&str> {
        match self.all(keyword)[..] {
            [v] => Ok(v),
            ref vs => bail!("stage {} has {} {keyword} lines", self.name, vs.len()),
        }
    }
}

/// Logical lines of a Dockerfile: comments dropped, `\` continuations joined.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head.trim());
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out
}

/// `${NAME}` and `$NAME` from the global ARG defaults.
fn substitute(s: &str, args: &BTreeMap<String, String>) -> String {
    let mut s = s.to_owned();
    for (k, v) in args {
        s = s
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    s
}

struct Dockerfile {
    args: BTreeMap<String, String>,
    stages: Vec<Stage>,
}

impl Dockerfile {
    fn parse(text: &str) -> Result<Dockerfile> {
        let mut args = BTreeMap::new();
        let mut stages: Vec<Stage> = Vec::new();
        for line in logical_lines(text) {
            let (kw, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            let kw = kw.to_ascii_uppercase();
            let rest = rest.trim().to_owned();
            if kw == "FROM" {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let (base, name) = match words[..] {
                    [base, as_, name] if as_.eq_ignore_ascii_case("as") => (base, name),
                    _ => bail!("FROM without a stage name: {line}"),
                };
                stages.push(Stage {
                    name: name.to_owned(),
                    base: substitute(base, &args),
                    instructions: Vec::new(),
                });
            } else if let Some(stage) = stages.last_mut() {
                stage.instructions.push((kw, rest));
            } else if kw == "ARG" {
                let (k, v) = rest.split_once('=').context("global ARG without default")?;
                args.insert(k.to_owned(), v.to_owned());
            } else {
                bail!("{kw} before the first FROM");
            }
        }
        Ok(Dockerfile { args, stages })
    }

    fn stage(&self, name: &str) -> Result<&Stage> {
        self.stages
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no stage named {name}"))
    }
}

fn read(rel: &str) -> Result<String> {
    std::fs::read_to_string(repo().join(rel)).with_context(|| format!("read {rel}"))
}

fn dockerfile() -> Result<Dockerfile> {
    Dockerfile::parse(&read("Dockerfile")?)
}

fn values() -> Result<serde_yaml::Value> {
    Ok(serde_yaml::from_str(&read("charts/ari/values.yaml")?)?)
}

fn value_at<'a>(v: &'a serde_yaml::Value, path: &[&str]) -> Result<&'a serde_yaml::Value> {
    path.iter().try_fold(v, |v, k| {
        v.get(k)
            .with_context(|| format!("values.yaml has no {}", path.join(".")))
    })
}

/// Binary targets of each workspace package, from `cargo metadata`.
fn workspace_bins() -> Result<BTreeMap<String, Vec<String>>> {
    let meta = workspace_metadata()?;
    let mut bins = BTreeMap::new();
    for p in meta["packages"].as_array().context("packages")? {
        let names = p["targets"]
            .as_array()
            .context("targets")?
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        bins.insert(p["name"].as_str().context("name")?.to_owned(), names);
    }
    Ok(bins)
}

fn workspace_metadata() -> Result<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .context("cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The argv of an exec-form (JSON array) ENTRYPOINT or CMD.
fn exec_form(s: &str) -> Result<Vec<String>> {
    serde_json::from_str(s).with_context(|| format!("not an exec-form (JSON) array: {s}"))
}

/// `(target, package, binary)`: what each image runs.
const IMAGES: [(&str, &str, &str); 3] = [
    ("operator", "ari-operator", "ari-operator"),
    ("executor", "ari-executor", "ari"),
    ("gateway", "ari-gateway", "ari-gateway"),
];

#[test]
fn targets_operator_executor_and_gateway_run_on_distroless_nonroot() -> Result<()> {
    let df = dockerfile()?;
    for (target, _, _) in IMAGES {
        let stage = df.stage(target)?;
        ensure!(
            stage.base.starts_with("gcr.io/distroless/") && stage.base.ends_with(":nonroot"),
            "target {target} is based on {}, not a distroless nonroot image",
            stage.base
        );
        ensure!(
            stage.all("RUN").is_empty(),
            "target {target} runs commands: a distroless image has no shell"
        );
    }
    let names: Vec<&str> = df.stages.iter().map(|s| s.name.as_str()).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    ensure!(
        unique.len() == names.len(),
        "duplicate stage names: {names:?}"
    );
    Ok(())
}

#[test]
fn the_operator_and_executor_carry_one_stock_agent_component_where_they_look_for_it() -> Result<()>
{
    let df = dockerfile()?;
    let built = df.stage("stock-agent")?.one("RUN")?;
    ensure!(
        built.contains("--target wasm32-wasip2") && built.contains("-p declarative"),
        "the stock-agent stage does not build examples/agents/declarative: {built}"
    );
    for target in ["operator", "executor"] {
        let copies = df.stage(target)?.all("COPY");
        ensure!(
            copies.contains(
                &"--from=stock-agent /out/declarative.wasm /usr/share/ari/declarative.wasm"
            ),
            "target {target} does not carry the stock agent component at /usr/share/ari/declarative.wasm: {copies:?}"
        );
    }
    Ok(())
}

#[test]
fn build_stage_compiles_the_workspace_binaries_in_release_mode() -> Result<()> {
    let df = dockerfile()?;
    let bins = workspace_bins()?;
    let build = df.stage("build")?;
    let run = build.one("RUN")?;
    for flag in ["cargo build", "--release", "--locked"] {
        ensure!(run.contains(flag), "build RUN lacks {flag:?}: {run}");
    }
    for (target, package, bin) in IMAGES {
        ensure!(
            bins.get(package)
                .is_some_and(|b| b.iter().any(|b| b == bin)),
            "package {package} has no binary {bin}: {bins:?}"
        );
        ensure!(
            run.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w == ["--bin", bin]),
            "build RUN does not build --bin {bin} (target {target}): {run}"
        );
        ensure!(
            run.contains(&format!("target/release/{bin}")),
            "build RUN does not take {bin} from target/release: {run}"
        );
    }
    Ok(())
}

/// Every workspace member (and `wit/`, which the executor's bindgen reads) is copied into
/// the build stage and not excluded by `.dockerignore`; the Rust image is new enough.
#[test]
fn build_context_holds_every_workspace_member() -> Result<()> {
    let df = dockerfile()?;
    let build = df.stage("build")?;
    let copied: Vec<String> = build
        .all("COPY")
        .iter()
        .flat_map(|c| {
            let words: Vec<&str> = c.split_whitespace().collect();
            words[..words.len().saturating_sub(1)]
                .iter()
                .map(|w| w.trim_end_matches('/').to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    let ignored: Vec<String> = read(".dockerignore")?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let meta = workspace_metadata()?;
    let root = meta["workspace_root"].as_str().context("workspace_root")?;
    let mut needed = vec![
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "wit".to_owned(),
    ];
    for p in meta["packages"].as_array().context("packages")? {
        let manifest = Path::new(p["manifest_path"].as_str().context("manifest_path")?);
        let dir = manifest
            .parent()
            .context("manifest dir")?
            .strip_prefix(root)?
            .to_string_lossy()
            .into_owned();
        needed.push(dir);
    }
    for path in &needed {
        let top = path.split('/').next().unwrap_or(path);
        ensure!(
            copied.iter().any(|c| c == path || c == top),
            "the build stage does not COPY {path} (copies {copied:?})"
        );
        ensure!(
            !ignored.iter().any(|i| i == path || i == top),
            ".dockerignore excludes {path}, which the build needs"
        );
    }
    for must in ["target", ".git"] {
        ensure!(
            ignored.iter().any(|i| i == must),
            ".dockerignore must exclude {must}"
        );
    }
    let rust = df.args.get("RUST_VERSION").context("ARG RUST_VERSION")?;
    let want = read("Cargo.toml")?
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .context("workspace rust-version")?;
    let parse = |v: &str| -> Vec<u32> { v.split('.').filter_map(|x| x.parse().ok()).collect() };
    ensure!(
        parse(rust) >= parse(&want),
        "RUST_VERSION {rust} is older than the workspace rust-version {want}"
    );
    Ok(())
}

/// The uid the pods of an image's target ask for: the chart's operator and gateway
/// Deployments (every `runAsUser` in the template), the operator's executor pods.
fn pod_uid(target: &str) -> Result<u32> {
    let template = match target {
        "operator" => "charts/ari/templates/deployment.yaml",
        "gateway" => "charts/ari/templates/gateway-deployment.yaml",
        "executor" => {
            let src = read("operator/src/agent/deployment.rs")?;
            return Ok(src
                .lines()
                .find_map(|l| l.trim().strip_prefix("pub const EXECUTOR_UID: i64 = "))
                .context("operator/src/agent/deployment.rs has no EXECUTOR_UID")?
                .trim_end_matches(';')
                .parse()?);
        }
        other => bail!("no pods known for target {other}"),
    };
    let uids: Vec<u32> = read(template)?
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runAsUser: "))
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{template}: runAsUser is not a number"))?;
    match uids[..] {
        [uid, ..] if uids.iter().all(|u| *u == uid) => Ok(uid),
        _ => bail!("{template}: runAsUser {uids:?}, want one uid"),
    }
}

#[test]
fn each_image_runs_its_binary_as_the_uid_the_pods_ask_for() -> Result<()> {
    let df = dockerfile()?;
    for (target, _, bin) in IMAGES {
        let stage = df.stage(target)?;
        // The binary's COPY; the operator and executor also copy the stock agent component.
        let binaries: Vec<&str> = stage
            .all("COPY")
            .into_iter()
            .filter(|c| c.starts_with("--from=build "))
            .collect();
        let [copy] = binaries[..] else {
            bail!("target {target}: want one COPY --from=build, got {binaries:?}");
        };
        let words: Vec<&str> = copy.split_whitespace().collect();
        let (src, dst) = match words[..] {
            ["--from=build", src, dst] => (src, dst),
            _ => bail!("target {target}: COPY is not `--from=build SRC DST`: {copy}"),
        };
        ensure!(
            src.rsplit('/').next() == Some(bin),
            "target {target} copies {src}, not the {bin} binary"
        );
        let entry = exec_form(stage.one("ENTRYPOINT")?)?;
        ensure!(
            entry == [dst],
            "target {target}: ENTRYPOINT {entry:?} is not the copied binary {dst}"
        );
        let user = stage.one("USER")?;
        let uid: u32 = user
            .split(':')
            .next()
            .unwrap_or_default()
            .parse()
            .with_context(|| {
                format!("target {target}: USER {user} is not numeric (runAsNonRoot needs a uid)")
            })?;
        ensure!(uid != 0, "target {target} runs as root");
        let want = pod_uid(target)?;
        ensure!(
            uid == want,
            "target {target} runs as {uid}, its pods ask for runAsUser {want}"
        );
    }
    let cmd = exec_form(df.stage("executor")?.one("CMD")?)?;
    ensure!(
        cmd == ["worker"],
        "executor CMD {cmd:?}; pods run `ari worker`"
    );
    for target in ["operator", "gateway"] {
        ensure!(
            df.stage(target)?.all("CMD").is_empty(),
            "the {target} takes its settings from the environment, not a CMD"
        );
    }
    Ok(())
}

#[test]
fn exposed_ports_are_the_chart_ports_and_the_executor_port() -> Result<()> {
    let df = dockerfile()?;
    let v = values()?;
    let port = |path: &[&str]| -> Result<u64> {
        value_at(&v, path)?
            .as_u64()
            .with_context(|| format!("{} is not a port", path.join(".")))
    };
    let metrics = port(&["metrics", "port"])?;
    let gateway = vec![
        port(&["gateway", "port"])?,
        port(&["gateway", "probePort"])?,
    ];
    let src = read("operator/src/agent/deployment.rs")?;
    let executor: u64 = src
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("pub const EXECUTOR_HTTP_PORT: i32 = ")
        })
        .context("no EXECUTOR_HTTP_PORT")?
        .trim_end_matches(';')
        .parse()?;
    for (target, want) in [
        ("operator", vec![metrics]),
        ("executor", vec![executor]),
        ("gateway", gateway),
    ] {
        let exposed: Vec<u64> = df
            .stage(target)?
            .all("EXPOSE")
            .iter()
            .flat_map(|e| e.split_whitespace())
            .map(|p| p.trim_end_matches("/tcp").parse())
            .collect::<Result<_, _>>()?;
        ensure!(
            exposed == want,
            "target {target} exposes {exposed:?}, its pods listen on {want:?}"
        );
    }
    Ok(())
}

/// `docker build --target T -t NAME:VERSION` in the Dockerfile's header names the images the
/// chart deploys and the e2e node agent maps to our binaries, at the chart's appVersion.
#[test]
fn image_names_match_the_chart_values_and_the_e2e_mapping() -> Result<()> {
    let text = read("Dockerfile")?;
    let v = values()?;
    let chart: serde_yaml::Value = serde_yaml::from_str(&read("charts/ari/Chart.yaml")?)?;
    let app_version = chart["appVersion"].as_str().context("appVersion")?;
    let workspace_version = read("Cargo.toml")?
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|s| s.trim_matches('"').to_owned())
        .context("workspace version")?;
    ensure!(
        app_version == workspace_version,
        "Chart appVersion {app_version} is not the workspace version {workspace_version}"
    );
    for (target, path, e2e) in [
        (
            "operator",
            &["image", "repository"][..],
            ari_e2e::OPERATOR_IMAGE,
        ),
        (
            "executor",
            &["executor", "image", "repository"][..],
            ari_e2e::EXECUTOR_IMAGE,
        ),
        (
            "gateway",
            &["gateway", "image", "repository"][..],
            ari_e2e::GATEWAY_IMAGE,
        ),
    ] {
        let repo_name = value_at(&v, path)?.as_str().context("repository")?;
        ensure!(
            repo_name == e2e,
            "values {} = {repo_name}, the e2e node agent maps {e2e}",
            path.join(".")
        );
        let line = format!("docker build --target {target} -t {repo_name}:{app_version} .");
        ensure!(
            text.contains(&line),
            "Dockerfile does not document `{line}`"
        );
    }
    Ok(())
}

/// `target/release/<bin>`, else `target/debug/<bin>`.
fn built(bin: &str) -> Result<std::path::PathBuf> {
    ["release", "debug"]
        .iter()
        .map(|p| ari_e2e::target_dir().join(p).join(bin))
        .find(|p| p.is_file())
        .with_context(|| format!("{bin} is not built: run `cargo build --bins` first"))
}

/// Every `ARI_*` variable the chart's gateway Deployment sets is one the `ari-gateway` binary
/// reads (its `--help` names each flag's variable), so a renamed flag cannot leave the chart
/// setting a variable nobody reads; and each of the gateway's settings has its variable there.
#[test]
fn the_chart_sets_only_variables_the_gateway_reads() -> Result<()> {
    let tpl = read("charts/ari/templates/gateway-deployment.yaml")?;
    let set: Vec<&str> = tpl
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .filter(|n| n.starts_with("ARI_"))
        .collect();
    for must in [
        "ARI_GATEWAY_LISTEN",
        "ARI_GATEWAY_PROBE_LISTEN",
        "ARI_GATEWAY_MAX_BODY_BYTES",
        "ARI_GATEWAY_MAX_STREAMS",
        "ARI_GATEWAY_MAX_STREAMS_PER_CALLER",
        "ARI_GATEWAY_RATE_PER_SECOND",
        "ARI_GATEWAY_RATE_BURST",
        "ARI_GATEWAY_PUBLIC_URL",
        "ARI_WATCH_NAMESPACE",
        "ARI_LOG_LEVEL",
        "ARI_LOG_FORMAT",
    ] {
        ensure!(
            set.contains(&must),
            "the chart's gateway Deployment does not set {must}: {set:?}"
        );
    }
    let out = std::process::Command::new(built("ari-gateway")?)
        .arg("--help")
        .env_clear()
        .output()
        .context("ari-gateway --help")?;
    ensure!(out.status.success(), "ari-gateway --help failed");
    let help = String::from_utf8_lossy(&out.stdout);
    let unread: Vec<&&str> = set
        .iter()
        .filter(|n| !help.contains(&format!("[env: {n}=")))
        .collect();
    ensure!(
        unread.is_empty(),
        "the chart sets {unread:?}, which ari-gateway does not read:\n{help}"
    );
    Ok(())
}

#[test]
fn parser_reads_continuations_comments_and_stage_names() -> Result<()> {
    let df = Dockerfile::parse(
        "ARG B=img:1\n# c\nFROM ${B} AS one\nRUN a \\\n  b\n\nfrom x as two\nUSER 1\n",
    )?;
    ensure!(df.stages.len() == 2);
    ensure!(df.stage("one")?.base == "img:1");
    ensure!(df.stage("one")?.one("RUN")? == "a b");
    ensure!(df.stage("two")?.one("USER")? == "1");
    ensure!(
        Dockerfile::parse("FROM x\n").is_err(),
        "unnamed stages are refused"
    );
    Ok(())
}

/// The runtime base is distroless `cc`: glibc and libgcc, nothing else (no OpenSSL: TLS is
/// rustls). The binaries must need no other shared library, or the images would not start.
#[test]
fn binaries_need_only_what_distroless_cc_ships() -> Result<()> {
    const SHIPPED: [&str; 8] = [
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    ];
    for (_, _, bin) in IMAGES {
        let path = built(bin)?;
        let out = std::process::Command::new("readelf")
            .arg("-d")
            .arg(&path)
            .output()
            .context("readelf (binutils)")?;
        ensure!(out.status.success(), "readelf -d {}", path.display());
        let text = String::from_utf8_lossy(&out.stdout);
        let needed: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| l.split('[').nth(1)?.split(']').next())
            .collect();
        ensure!(
            needed.contains(&"libc.so.6"),
            "{bin}: no libc in {needed:?}"
        );
        let extra: Vec<&&str> = needed.iter().filter(|n| !SHIPPED.contains(n)).collect();
        ensure!(
            extra.is_empty(),
            "{bin} needs {extra:?}, which gcr.io/distroless/cc-debian12 does not ship"
        );
    }
    Ok(())
}
