//! `ari verify`: check a run report offline and replay it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use ari_runtime::capability::LoadedSigningKey;
use ari_runtime::{RunReport, Runtime, RuntimeConfig, VerifyOptions, verify_tree};

/// Verify a report of `ari run --json`: the Ed25519 signature, the module, config, input, output
/// and trace digests, then re-execute from the recorded trace to the same output and trace
/// digests. Exits 0 when every check passes, 3 when one fails (the message names it).
///
/// `ari verify task/NAME` or `plan/NAME` (with `-n`, `--context`, `--kubeconfig`) checks a run
/// the cluster keeps instead, exactly as `kubectl ari verify` does.
#[derive(Args)]
pub struct VerifyArgs {
    /// The JSON report written by `ari run --json`.
    report: PathBuf,
    /// The component the report claims to be about.
    #[arg(long)]
    module: PathBuf,
    /// Require the attestation to be signed by this public key (64 hex digits), e.g. the
    /// Agent's `status.attestationPublicKey`. Without it (or --accept-embedded-key) verify refuses.
    #[arg(long, required_unless_present = "accept_embedded_key")]
    public_key: Option<String>,
    /// Trust whatever key the attestation embeds (it only proves the report is unchanged since
    /// that key signed it; you must judge the printed key yourself).
    #[arg(long, conflicts_with = "public_key")]
    accept_embedded_key: bool,
    /// The agent's signing key, to replay a task that used `signing`.
    #[arg(long)]
    signing_key: Option<PathBuf>,
    /// The module of an Agent that ran a child task in the report: NAME=FILE (repeatable).
    /// Every child of the tree is verified too.
    #[arg(long = "agent", value_name = "NAME=FILE")]
    agents: Vec<String>,
    /// The config the task's agent was given (`ari run --config`, an Agent's `spec.config`):
    /// its digest is signed, and the replay hands it to `initialize`.
    #[arg(long, conflicts_with = "config_file")]
    config: Option<String>,
    /// The config, read from a file byte for byte (e.g. `kubectl get agent NAME -o
    /// jsonpath='{.spec.config}' > FILE`).
    #[arg(long, conflicts_with = "declaration")]
    config_file: Option<PathBuf>,
    /// The declaration a declarative Agent's run was given (`ari run --declaration FILE`):
    /// its canonical bytes are the config.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    declaration: Option<PathBuf>,
    /// The config of one of the --agent Agents: NAME=TEXT (repeatable), as `ari run` took it.
    #[arg(long = "agent-config", value_name = "NAME=TEXT")]
    agent_configs: Vec<String>,
}

pub fn verify(args: VerifyArgs, config: RuntimeConfig) -> anyhow::Result<u8> {
    let text = std::fs::read_to_string(&args.report)
        .with_context(|| format!("cannot read report {}", args.report.display()))?;
    let report: RunReport = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ari verify: FAILED: report is malformed: {e}");
            return Ok(super::EXIT_VERIFY_FAILED);
        }
    };
    let module = super::read_module(&args.module)?;
    let opts = VerifyOptions {
        trusted_key: args
            .public_key
            .as_deref()
            .map(ari_runtime::attestation::parse_public_key)
            .transpose()?,
        accept_embedded_key: args.accept_embedded_key,
        signing: args
            .signing_key
            .as_deref()
            .map(LoadedSigningKey::from_file)
            .transpose()?,
        config: match (&args.config, &args.config_file, &args.declaration) {
            (Some(text), _, _) => text.clone().into_bytes(),
            (None, Some(path), _) => std::fs::read(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?,
            (None, None, Some(path)) => super::declaration::load(path)?.canonical_bytes(),
            (None, None, None) => Vec::new(),
        },
    };
    let mut modules = std::collections::BTreeMap::new();
    for a in &args.agents {
        let (name, path) = a
            .split_once('=')
            .with_context(|| format!("--agent `{a}`: expected NAME=FILE"))?;
        modules.insert(
            name.to_owned(),
            super::read_module(std::path::Path::new(path))?,
        );
    }
    let mut configs = std::collections::BTreeMap::new();
    for a in &args.agent_configs {
        let (name, text) = a
            .split_once('=')
            .with_context(|| format!("--agent-config `{a}`: expected NAME=TEXT"))?;
        configs.insert(name.to_owned(), text.as_bytes().to_vec());
    }
    let agent_of = |agent: &str| {
        let config = configs.get(agent).cloned().unwrap_or_default();
        modules.get(agent).cloned().map(|m| (m, config))
    };
    let runtime = Runtime::new(config)?;
    match verify_tree(&runtime, &report, &module, &agent_of, &opts) {
        Ok(tasks) => {
            if tasks > 1 {
                println!("ari verify: OK: {tasks} tasks of the delegation tree verified");
            }
            let trust = if args.accept_embedded_key {
                "the EMBEDDED (unpinned) key"
            } else {
                "the pinned key"
            };
            // verify_tree checked the signature: the predicate decodes.
            let run = report.attestation.predicate()?;
            println!(
                "ari verify: OK: signature by {trust} {}, module {}, replay reproduced output {} and trace {}",
                run.public_key, run.module_sha256, run.output_sha256, run.trace_sha256
            );
            Ok(0)
        }
        Err(err) => {
            eprintln!("ari verify: FAILED: {err}");
            Ok(super::EXIT_VERIFY_FAILED)
        }
    }
}
