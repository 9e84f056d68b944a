//! The MCP servers this executor's Agent is granted, as the operator handed them over: their
//! MCPServer specs in `ARI_TOOL_SERVERS` and each token and header value in the variable the
//! kubelet filled from the marked Secret (see docs/tools.md, "In the cluster"). The executor
//! reads no MCPServer and no Secret through the API.

use std::collections::BTreeMap;
use std::time::Duration;

use ari_crds::GrantSet;
use ari_crds::mcp_server::{ExecutorToolServer, TOOL_SERVERS_ENV};
use ari_mcp::{Client, Credentials, Limits, Secret, ToolServer};
use ari_runtime::capability::LoadedTools;

use super::ConfigError;

/// The granted servers with their credentials, read once at start. `Debug` shows names only.
#[derive(Clone, Default)]
pub struct GrantedTools {
    pub servers: Vec<ToolServer>,
    /// Servers handed over a credential variable of which was empty or absent (the Secret
    /// lacks the key): not loaded, so their calls are `unavailable` rather than sent without
    /// the credential.
    pub without_credentials: Vec<String>,
    /// Each loaded server's declared call timeout, by name: the longest is the client's bound
    /// (a call is still held to its task's deadline).
    pub call_timeouts: BTreeMap<String, Duration>,
}

impl std::fmt::Debug for GrantedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.servers.iter().map(|s| &s.name))
            .finish()
    }
}

impl GrantedTools {
    /// Reads `ARI_TOOL_SERVERS` and the credential variables it names through `get`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let Some(list) = get(TOOL_SERVERS_ENV) else {
            return Ok(Self::default());
        };
        let declared: Vec<ExecutorToolServer> =
            serde_json::from_str(&list).map_err(|e| ConfigError::Invalid {
                var: TOOL_SERVERS_ENV,
                // The list holds no credential; the parser's message says where it went wrong.
                value: e.to_string(),
                want: "a JSON list of MCP servers, as the operator writes it",
            })?;
        let mut out = Self::default();
        for s in declared {
            match server(&s, get)? {
                Some(server) => {
                    if let Some(t) = s.spec.call_timeout_seconds {
                        out.call_timeouts
                            .insert(s.name.clone(), Duration::from_secs(t.into()));
                    }
                    out.servers.push(server);
                }
                None => out.without_credentials.push(s.name.clone()),
            }
        }
        Ok(out)
    }

    /// Those of these servers `grants` names: what a pool pod, which holds its Agents' servers
    /// together, hands one hosted Agent. A server only another Agent of the pool is granted is
    /// not in it, so no call of this Agent's can reach it (the runtime checks the grant too).
    pub fn granted_to(&self, grants: &GrantSet) -> Self {
        let allows = |name: &str| {
            grants
                .tools
                .as_ref()
                .is_some_and(|g| g.server(name).is_some())
        };
        Self {
            servers: self
                .servers
                .iter()
                .filter(|s| allows(&s.name))
                .cloned()
                .collect(),
            without_credentials: self
                .without_credentials
                .iter()
                .filter(|n| allows(n))
                .cloned()
                .collect(),
            call_timeouts: self
                .call_timeouts
                .iter()
                .filter(|(n, _)| allows(n))
                .map(|(n, t)| (n.clone(), *t))
                .collect(),
        }
    }

    /// The longest call timeout of these servers, if any declares one.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.call_timeouts.values().max().copied()
    }

    /// The servers behind one MCP client for the process.
    pub fn loaded(&self) -> Result<LoadedTools, ConfigError> {
        let limits = Limits {
            call_timeout: self
                .call_timeout()
                .unwrap_or(Limits::default().call_timeout),
            ..Limits::default()
        };
        let client = Client::new(limits).map_err(|e| ConfigError::ToolClient(e.to_string()))?;
        Ok(LoadedTools::live(client, self.servers.clone()))
    }
}

/// One granted server as the client takes it; `None` when a credential variable is unset.
fn server(
    s: &ExecutorToolServer,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<ToolServer>, ConfigError> {
    let invalid = |what: &str| ConfigError::Invalid {
        var: TOOL_SERVERS_ENV,
        value: format!("server {}: {what}", s.name),
        want: "an http(s) URL and header names the transport does not own",
    };
    let url = url::Url::parse(&s.spec.url).map_err(|_| invalid("its url"))?;
    let mut credentials = Credentials::default();
    if let Some(var) = &s.token_env {
        let Some(token) = get(var).filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        credentials = credentials.with_bearer(Secret::new(token));
    }
    for (header, var) in s.spec.headers.iter().zip(&s.header_envs) {
        let Some(value) = get(var).filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        credentials = credentials
            .with_header(&header.name, Secret::new(value))
            .map_err(|_| invalid("a header name"))?;
    }
    let server = ToolServer::new(s.name.clone(), url)
        .map_err(|e| invalid(&e.to_string()))?
        .with_protocol(s.spec.protocol.unwrap_or_default())
        .with_credentials(credentials);
    Ok(Some(server))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const LIST: &str = r#"[
        {"name": "docs", "spec": {"url": "http://127.0.0.1:9/mcp", "protocol": "session",
          "token": {"name": "t", "key": "token"},
          "headers": [{"name": "X-Tenant", "valueFrom": {"name": "t", "key": "tenant"}}],
          "callTimeoutSeconds": 90},
         "tokenEnv": "ARI_TOOL_TOKEN_0", "headerEnvs": ["ARI_TOOL_HEADER_0_0"]},
        {"name": "open", "spec": {"url": "http://127.0.0.1:9/open"}},
        {"name": "keyless", "spec": {"url": "http://127.0.0.1:9/k",
          "token": {"name": "t", "key": "missing"}}, "tokenEnv": "ARI_TOOL_TOKEN_2"}
    ]"#;

    #[test]
    fn servers_load_with_their_credentials_which_never_print() {
        let got = GrantedTools::from_lookup(&env(&[
            (TOOL_SERVERS_ENV, LIST),
            ("ARI_TOOL_TOKEN_0", "tool-token-secret\n"),
            ("ARI_TOOL_HEADER_0_0", "tenant-secret"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = got.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["docs", "open"]);
        assert_eq!(got.without_credentials, ["keyless"]);
        assert_eq!(got.call_timeout(), Some(Duration::from_secs(90)));
        assert_eq!(got.servers[0].protocol, ari_mcp::Protocol::Session);
        let shown = format!("{got:?} {:?}", got.servers);
        for secret in ["tool-token-secret", "tenant-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(got.loaded().is_ok());
    }

    #[test]
    fn a_pooled_agent_is_handed_only_the_servers_its_own_spec_grants() {
        let pod = GrantedTools::from_lookup(&env(&[
            (TOOL_SERVERS_ENV, LIST),
            ("ARI_TOOL_TOKEN_0", "tool-token-secret"),
            ("ARI_TOOL_HEADER_0_0", "tenant-secret"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let grants = |servers: &[&str]| -> GrantSet {
            let servers: Vec<_> = servers
                .iter()
                .map(|s| serde_json::json!({"name": s, "tools": ["*"]}))
                .collect();
            serde_json::from_value(serde_json::json!({"tools": {"servers": servers}}))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let open = pod.granted_to(&grants(&["open"]));
        let names: Vec<&str> = open.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["open"],
            "the docs server and its token stay with its own Agent"
        );
        assert!(open.without_credentials.is_empty());
        assert_eq!(
            open.call_timeout(),
            None,
            "docs' timeout is not this Agent's"
        );
        let docs = pod.granted_to(&grants(&["docs", "keyless"]));
        let names: Vec<&str> = docs.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["docs"]);
        assert_eq!(docs.without_credentials, ["keyless"]);
        assert_eq!(docs.call_timeout(), Some(Duration::from_secs(90)));
        let none = pod.granted_to(&GrantSet::default());
        assert!(none.servers.is_empty() && none.without_credentials.is_empty());
    }

    #[test]
    fn no_list_loads_nothing_and_a_bad_list_is_refused() {
        let none = GrantedTools::from_lookup(&env(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert!(none.servers.is_empty());
        let err = GrantedTools::from_lookup(&env(&[(TOOL_SERVERS_ENV, "{not json")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(TOOL_SERVERS_ENV), "{err}");
    }
}
