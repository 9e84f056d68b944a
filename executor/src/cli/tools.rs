//! `ari run`'s MCP servers: `--mcp NAME=URL` declares one (as a namespace's server declaration
//! does in a cluster), `--grant tools=NAME:TOOL[,TOOL...]` grants its tools, and its
//! credentials come from a file or the environment, never from the command line (where `ps`
//! and shell history would show them).

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use clap::Args;

use super::flags::{CredentialFlags, credential, pairs};
use ari_mcp::{Client, Credentials, Limits, Protocol, Secret, ToolServer};
use std::sync::Arc;

use ari_runtime::cancel::CancelToken;
use ari_runtime::capability::{ApprovalRequest, Approver, Decided, Grants, LoadedTools, Waited};
use ari_runtime::model::Decision;

#[derive(Args, Debug, Default)]
pub struct ToolArgs {
    /// An MCP server the task may be granted tools of (--grant tools=NAME:TOOL): NAME=URL, its
    /// streamable HTTP endpoint such as http://127.0.0.1:8000/mcp (repeatable).
    #[arg(long = "mcp", value_name = "NAME=URL")]
    servers: Vec<String>,
    /// The protocol revision NAME speaks: auto (default: 2026-07-28, else 2025-11-25),
    /// stateless (2026-07-28 only) or session (2025-11-25 only).
    #[arg(long = "mcp-protocol", value_name = "NAME=PROTOCOL")]
    protocols: Vec<String>,
    /// NAME's bearer token, read from this file.
    #[arg(long = "mcp-token-file", value_name = "NAME=PATH")]
    token_files: Vec<String>,
    /// NAME's bearer token, read from this environment variable.
    #[arg(long = "mcp-token-env", value_name = "NAME=VAR")]
    token_envs: Vec<String>,
    /// A header NAME is sent, its value read from an environment variable (repeatable).
    #[arg(long = "mcp-header-env", value_name = "NAME=HEADER:VAR")]
    header_envs: Vec<String>,
    /// Longest one tool call may take, in seconds (less when the task's deadline is sooner).
    #[arg(long = "mcp-call-timeout", default_value_t = Limits::default().call_timeout.as_secs_f64())]
    call_timeout: f64,
    /// Calls that wait for approval (repeatable): NAME:TOOL[,TOOL...], tools of MCP server NAME
    /// (`*`: all), besides those the server marks destructive; delegation=AGENT[,AGENT...],
    /// delegations to granted Agents (`*`: all); network=ORIGIN[,ORIGIN...], requests to
    /// granted hosts (entries of --grant network=, written the same way).
    #[arg(long = "require-approval", value_name = "NAME:TOOL[,TOOL...]")]
    require_approval: Vec<String>,
    /// Approve, in your name, every call that waits for approval; without it they are
    /// rejected (the guest gets a `rejected` error).
    #[arg(long = "approve-calls")]
    approve_calls: bool,
}

/// `ari run`'s person at the keyboard: decides every call as `--approve-calls` says.
struct CommandLine {
    approve: bool,
}

impl Approver for CommandLine {
    fn decide(&self, _: &ApprovalRequest, _: std::time::Instant, _: &CancelToken) -> Waited {
        let who = std::env::var("USER").unwrap_or_else(|_| "someone".into());
        Waited::Decided(Decided {
            decision: if self.approve {
                Decision::Approved
            } else {
                Decision::Rejected
            },
            approver: format!("{who} (ari run)"),
            reason: (!self.approve).then(|| "ari run was not given --approve-calls".to_owned()),
        })
    }
}

impl ToolArgs {
    /// Who decides calls that wait for approval.
    pub fn approver(&self) -> Arc<dyn Approver> {
        Arc::new(CommandLine {
            approve: self.approve_calls,
        })
    }

    /// `grants` with the tools, delegations and hosts `--require-approval` names marked.
    pub fn with_approvals(&self, grants: Grants) -> anyhow::Result<Grants> {
        if self.require_approval.is_empty() {
            return Ok(grants);
        }
        let mut spec = grants.spec().clone();
        let list = |items: &str| -> Vec<String> {
            items
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        };
        for value in &self.require_approval {
            match value.split_once('=') {
                Some(("delegation", agents)) => {
                    let grant = spec.delegation.as_mut().with_context(|| {
                        format!("--require-approval {value}: no --grant delegation=... to mark")
                    })?;
                    let agents = list(agents);
                    if let Some(agent) = agents.iter().find(|a| *a != "*" && !grant.allows(a)) {
                        bail!("--require-approval {value}: Agent {agent} is not granted");
                    }
                    let rule = grant.approval.get_or_insert_with(Default::default);
                    rule.agents.extend(agents);
                }
                Some(("network", hosts)) => {
                    let grant = spec.network.as_mut().with_context(|| {
                        format!("--require-approval {value}: no --grant network=... to mark")
                    })?;
                    let hosts = list(hosts);
                    if let Some(host) = hosts.iter().find(|h| !grant.allowed_hosts.contains(h)) {
                        bail!(
                            "--require-approval {value}: {host} is not an entry of --grant network="
                        );
                    }
                    let rule = grant.approval.get_or_insert_with(Default::default);
                    rule.hosts.extend(hosts);
                }
                _ => {
                    let (server, tools) = value.split_once(':').with_context(|| {
                        format!(
                            "--require-approval expects NAME:TOOL[,TOOL...], \
                             delegation=AGENT[,AGENT...] or network=ORIGIN[,ORIGIN...], \
                             got {value:?}"
                        )
                    })?;
                    let entry = spec
                        .tools
                        .as_mut()
                        .and_then(|t| t.servers.iter_mut().find(|s| s.name == server.trim()))
                        .with_context(|| {
                            format!(
                                "--require-approval {value}: no --grant tools={server}:... to mark"
                            )
                        })?;
                    let rule = entry.approval.get_or_insert_with(Default::default);
                    rule.tools.extend(list(tools));
                }
            }
        }
        Ok(Grants::load(spec, grants.key().cloned())?
            .with_models(grants.models().clone())
            .with_tools(grants.tools().clone()))
    }

    /// The declared servers, with their credentials, and a client to call them.
    pub fn load(&self) -> anyhow::Result<LoadedTools> {
        let protocols = pairs("--mcp-protocol", &self.protocols)?;
        let token_files = pairs("--mcp-token-file", &self.token_files)?;
        let token_envs = pairs("--mcp-token-env", &self.token_envs)?;
        let mut headers: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for value in &self.header_envs {
            let (name, rest) = value
                .split_once('=')
                .and_then(|(n, r)| Some((n, r.split_once(':')?)))
                .with_context(|| {
                    format!("--mcp-header-env expects NAME=HEADER:VAR, got {value:?}")
                })?;
            headers
                .entry(name.trim().to_owned())
                .or_default()
                .push((rest.0.trim().to_owned(), rest.1.trim().to_owned()));
        }
        let mut servers = Vec::new();
        for (name, url) in pairs("--mcp", &self.servers)? {
            let url = url::Url::parse(&url).with_context(|| format!("--mcp {name}: bad URL"))?;
            let protocol = match protocols.get(&name).map(String::as_str) {
                None | Some("auto") => Protocol::Auto,
                Some("stateless") => Protocol::Stateless,
                Some("session") => Protocol::Session,
                Some(other) => bail!("--mcp-protocol {name}: unknown protocol {other:?}"),
            };
            let mut credentials = Credentials::default();
            if let Some(token) = credential(
                &TOKEN_FLAGS,
                &name,
                token_files.get(&name),
                token_envs.get(&name),
            )? {
                credentials = credentials.with_bearer(token);
            }
            for (header, var) in headers.get(&name).into_iter().flatten() {
                let value = std::env::var(var)
                    .with_context(|| format!("--mcp-header-env {name}: ${var} is not set"))?;
                credentials = credentials
                    .with_header(header, Secret::new(value))
                    .map_err(|e| anyhow::anyhow!("--mcp-header-env {name}: {e}"))?;
            }
            servers.push(
                ToolServer::new(name, url)?
                    .with_protocol(protocol)
                    .with_credentials(credentials),
            );
        }
        let declared: Vec<&String> = protocols
            .keys()
            .chain(token_files.keys())
            .chain(token_envs.keys())
            .chain(headers.keys())
            .collect();
        if let Some(name) = declared
            .into_iter()
            .find(|n| !servers.iter().any(|s| &&s.name == n))
        {
            bail!("MCP server {name:?} is not declared with --mcp {name}=URL");
        }
        let limits = Limits {
            call_timeout: std::time::Duration::try_from_secs_f64(self.call_timeout)
                .context("--mcp-call-timeout must be a positive number of seconds")?,
            ..Limits::default()
        };
        let client =
            Client::new(limits).map_err(|e| anyhow::anyhow!("cannot build the MCP client: {e}"))?;
        Ok(LoadedTools::live(client, servers))
    }
}

/// How `--mcp-token-file` and `--mcp-token-env` name a server's token.
const TOKEN_FLAGS: CredentialFlags<'static> = CredentialFlags {
    owner: "MCP server",
    noun: "token",
    flag: "--mcp-token",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_for_an_undeclared_server_is_refused() {
        let args = ToolArgs {
            protocols: vec!["docs=session".into()],
            call_timeout: 1.0,
            ..Default::default()
        };
        let err = args.load().expect_err("undeclared");
        assert!(err.to_string().contains("not declared"), "{err}");
    }

    #[test]
    fn a_token_comes_from_its_variable_and_never_prints() {
        // SAFETY: this test alone reads these variables.
        unsafe {
            std::env::set_var("ARI_TEST_MCP_TOKEN", "mcp-secret-value\n");
            std::env::set_var("ARI_TEST_MCP_KEY", "header-secret-value");
        }
        let args = ToolArgs {
            servers: vec!["docs=http://127.0.0.1:9/mcp".into()],
            token_envs: vec!["docs=ARI_TEST_MCP_TOKEN".into()],
            header_envs: vec!["docs=x-api-key:ARI_TEST_MCP_KEY".into()],
            call_timeout: 1.0,
            ..Default::default()
        };
        let tools = args.load().expect("loads");
        assert!(tools.get("docs").is_some());
        let shown = format!("{tools:?}");
        for secret in ["mcp-secret-value", "header-secret-value"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
