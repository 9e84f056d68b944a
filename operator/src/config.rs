//! Operator settings from flags and environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ari_crds::pool::GuestPriorities;
use ari_oci::ClientOptions;

use clap::{Parser, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Log filter when neither `--log-level` nor `RUST_LOG` is set.
pub const DEFAULT_LOG_FILTER: &str = "info,kube=warn";

/// How log lines are written.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, for log pipelines.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

/// The ari operator: Agent and Task controllers.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
pub struct Config {
    /// Image of every executor pod (Agents cannot choose one: the executor holds the
    /// namespace's attestation key).
    #[arg(long, env = "ARI_EXECUTOR_IMAGE", default_value = concat!("ari-executor:", env!("CARGO_PKG_VERSION")))]
    pub executor_image: String,
    /// Redis URL for agent storage; without it storage is embedded and an Agent with storage
    /// runs one replica.
    #[arg(long, env = "ARI_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, env = "ARI_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "ARI_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Namespace of the leader-election Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, env = "ARI_LEASE_NAME", default_value = "ari-operator")]
    pub lease_name: String,
    /// Identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// A Running Task whose heartbeat is older than this is treated as lost.
    #[arg(long, env = "ARI_HEARTBEAT_TIMEOUT_SECONDS", default_value_t = 30)]
    pub heartbeat_timeout_seconds: u64,
    /// How long a Task may wait for its Agent to appear before it is rejected.
    #[arg(long, env = "ARI_AGENT_GRACE_SECONDS", default_value_t = 5)]
    pub agent_grace_seconds: u64,
    /// Registries (`host[:port]`) reached over plain HTTP for `module.image`, comma-separated:
    /// local and in-cluster registries without TLS. Every other registry is HTTPS only. Also
    /// passed to the executors of image Agents.
    #[arg(
        long = "insecure-registry",
        env = "ARI_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// Hosts (`host[:port]`) a registry may redirect to or name as its token realm, over https:
    /// blob CDNs and token services of public registries (Docker Hub needs `auth.docker.io`
    /// and `production.cloudflare.docker.com`). Every other redirect and realm must stay on the
    /// registry's own host and port. Also passed to executors.
    #[arg(
        long = "registry-delegate-host",
        env = "ARI_REGISTRY_DELEGATE_HOSTS",
        value_delimiter = ','
    )]
    pub registry_delegate_hosts: Vec<String>,
    /// Registries (`host[:port]`) that may be at internal addresses (in-cluster registries with
    /// TLS); insecure registries may be too. Also passed to executors.
    #[arg(
        long = "private-registry",
        env = "ARI_PRIVATE_REGISTRIES",
        value_delimiter = ','
    )]
    pub private_registries: Vec<String>,
    /// Let registries be at loopback, private, link-local and other internal addresses without
    /// being listed. Off by default: a namespace user's image must not make the operator (or
    /// executors) reach cluster services or cloud metadata endpoints.
    #[arg(
        long,
        env = "ARI_REGISTRY_ALLOW_INTERNAL_ADDRESSES",
        default_value_t = false
    )]
    pub registry_allow_internal_addresses: bool,
    /// Model endpoints (`host:port`) the ModelConfig probe may reach at internal addresses
    /// (in-cluster servers such as `vllm.models.svc:8000`), comma-separated. Any other endpoint
    /// at a loopback, private, link-local or other internal address is not probed
    /// (`Ready=Unknown`): a namespace user must not make the operator scan the cluster.
    #[arg(
        long = "model-probe-internal-endpoint",
        env = "ARI_MODEL_PROBE_INTERNAL_ENDPOINTS",
        value_delimiter = ','
    )]
    pub model_probe_internal_endpoints: Vec<String>,
    /// MCP servers (`host:port`) the MCPServer controller may list tools of at internal
    /// addresses (in-cluster servers such as `tools.mcp.svc:8000`), comma-separated. Any other
    /// server at an internal address is not contacted (`Ready=Unknown`).
    #[arg(
        long = "tool-probe-internal-endpoint",
        env = "ARI_TOOL_PROBE_INTERNAL_ENDPOINTS",
        value_delimiter = ','
    )]
    pub tool_probe_internal_endpoints: Vec<String>,
    /// Most module pulls at once; each holds one module (up to 64 MiB) in memory while it is
    /// checked.
    #[arg(long, env = "ARI_MAX_CONCURRENT_PULLS", default_value_t = ari_oci::DEFAULT_MAX_CONCURRENT_PULLS)]
    pub max_concurrent_pulls: usize,
    /// Where pulled modules stream to while they are checked (removed after): a writable
    /// directory (the chart mounts an emptyDir). Default: the system temp directory.
    #[arg(long, env = "ARI_MODULE_CACHE_DIR")]
    pub module_cache_dir: Option<PathBuf>,
    /// Longest one registry call (resolve a tag, pull a module) may take in an image lookup
    /// (run in the background, never inside a reconcile: `agent::lookup`).
    #[arg(long, env = "ARI_REGISTRY_TIMEOUT_SECONDS", default_value_t = 30)]
    pub registry_timeout_seconds: u64,
    /// The A2A gateway's public base URL, exactly as the gateway is given it (the chart sets
    /// both from `gateway.publicUrl`): it is part of each card the operator signs, so a
    /// different value here leaves the gateway's cards unsigned.
    #[arg(long, env = "ARI_GATEWAY_PUBLIC_URL", default_value = "")]
    pub gateway_public_url: String,
    /// Log format.
    #[arg(long, env = "ARI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Log filter in `RUST_LOG` syntax (`info`, `debug,kube=info`); when unset, `RUST_LOG`
    /// applies, else `info,kube=warn`.
    #[arg(long, env = "ARI_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// The stock agent component that runs declarative Agents, as the operator image carries
    /// it (the executor image carries the same bytes at the same path). Its digest is read once
    /// at start and pinned in every declarative Agent's executors.
    #[arg(long, env = "ARI_STOCK_AGENT", default_value = STOCK_AGENT_PATH)]
    pub stock_agent: PathBuf,
    /// How executors prioritise their guests' threads: `shares` (a CPU-bound guest gives way
    /// to short Tasks) or `flat` (the design before shares, kept to measure one beside the
    /// other). Passed to every executor; changing it rolls them.
    #[arg(long, env = "ARI_GUEST_PRIORITIES", default_value_t = GuestPriorities::Shares)]
    pub guest_priorities: GuestPriorities,
}

/// Where the operator and executor images carry the stock agent component.
pub const STOCK_AGENT_PATH: &str = "/usr/share/ari/declarative.wasm";

/// What the controllers need from the configuration (cheap to build in tests).
#[derive(Debug, Clone)]
pub struct Settings {
    pub executor_image: String,
    pub redis_url: Option<String>,
    pub heartbeat_timeout: Duration,
    pub agent_grace: Duration,
    /// The operator's own namespace: holds each namespace's attestation key source.
    pub operator_namespace: String,
    /// How the registry client reaches registries (insecure, delegate and private lists, the
    /// internal-address rule, pulls at once); executors get the network part.
    pub registry: ClientOptions,
    /// See [`Config::module_cache_dir`].
    pub module_cache_dir: PathBuf,
    /// Bound on each registry call of an image lookup.
    pub registry_timeout: Duration,
    /// See [`Config::gateway_public_url`].
    pub gateway_public_url: String,
    /// `sha256:<hex>` of the stock agent component (see [`Config::stock_agent`]), or why there
    /// is none: declarative Agents then stay `ModuleResolved=False`.
    pub stock_agent: Result<String, String>,
    /// See [`Config::guest_priorities`].
    pub guest_priorities: GuestPriorities,
}

impl Config {
    /// The log filter: `--log-level`/`ARI_LOG_LEVEL`, else `rust_log`, else the default.
    pub fn log_filter(&self, rust_log: Option<String>) -> String {
        self.log_level
            .clone()
            .or(rust_log)
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_LOG_FILTER.to_owned())
    }

    /// [`Config::log_filter`] as a filter, with the MCP SDK silenced whatever it says
    /// ([`ari_mcp::SILENCE_SDK_LOGS`]).
    pub fn filter(
        &self,
        rust_log: Option<String>,
    ) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
        Ok(EnvFilter::try_new(self.log_filter(rust_log))?
            .add_directive(ari_mcp::SILENCE_SDK_LOGS.parse()?))
    }

    /// Installs the global subscriber; a filter that does not parse is an error, so a typo
    /// in the chart's log level fails the pod visibly instead of silently logging nothing.
    pub fn init_tracing(&self) -> Result<(), tracing_subscriber::filter::ParseError> {
        let filter = self.filter(std::env::var("RUST_LOG").ok())?;
        let fmt = tracing_subscriber::fmt().with_env_filter(filter);
        match self.log_format {
            LogFormat::Json => fmt.json().init(),
            LogFormat::Text => fmt.init(),
        }
        Ok(())
    }

    pub fn settings(&self) -> Settings {
        Settings {
            executor_image: self.executor_image.clone(),
            redis_url: self.redis_url.clone(),
            heartbeat_timeout: Duration::from_secs(self.heartbeat_timeout_seconds),
            agent_grace: Duration::from_secs(self.agent_grace_seconds),
            operator_namespace: self.lease_namespace.clone(),
            registry: ClientOptions {
                insecure_registries: trimmed(&self.insecure_registries),
                delegate_hosts: trimmed(&self.registry_delegate_hosts),
                private_registries: trimmed(&self.private_registries),
                refuse_internal_addresses: !self.registry_allow_internal_addresses,
                max_concurrent_pulls: self.max_concurrent_pulls.max(1),
                ..ClientOptions::default()
            },
            module_cache_dir: self
                .module_cache_dir
                .clone()
                .unwrap_or_else(default_module_cache_dir),
            registry_timeout: Duration::from_secs(self.registry_timeout_seconds.max(1)),
            gateway_public_url: self.gateway_public_url.clone(),
            stock_agent: stock_agent_digest(&self.stock_agent),
            guest_priorities: self.guest_priorities,
        }
    }
}

/// The stock agent component's digest, once it is read and checked to be an agent component.
pub fn stock_agent_digest(path: &std::path::Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "the stock agent component {} cannot be read: {e}",
            path.display()
        )
    })?;
    crate::agent::module::check_component(&bytes)
        .map_err(|e| format!("the stock agent component {}: {e}", path.display()))?;
    crate::agent::module::digest_of(&bytes, None).map_err(|e| e.to_string())
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            executor_image: concat!("ari-executor:", env!("CARGO_PKG_VERSION")).to_owned(),
            redis_url: None,
            heartbeat_timeout: Duration::from_secs(30),
            agent_grace: Duration::from_secs(5),
            operator_namespace: "ari-system".to_owned(),
            registry: ClientOptions::default(),
            module_cache_dir: default_module_cache_dir(),
            registry_timeout: Duration::from_secs(30),
            gateway_public_url: String::new(),
            stock_agent: Err("no stock agent component configured".to_owned()),
            guest_priorities: GuestPriorities::default(),
        }
    }
}

fn trimmed(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .collect()
}

fn default_module_cache_dir() -> PathBuf {
    std::env::temp_dir().join("ari-operator-modules")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        let argv = std::iter::once("ari-operator").chain(args.iter().copied());
        Config::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_stock_agent_is_pinned_only_when_it_is_an_agent_component() {
        let dir = std::env::temp_dir().join(format!("ari-stock-agent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let missing = stock_agent_digest(&dir.join("declarative.wasm"));
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.contains("cannot be read")),
            "{missing:?}"
        );
        let garbage = dir.join("garbage.wasm");
        std::fs::write(&garbage, b"not wasm").unwrap_or_else(|e| panic!("{e}"));
        let refused = stock_agent_digest(&garbage);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("not a WebAssembly component")),
            "{refused:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            parse(&[]).stock_agent,
            std::path::Path::new(STOCK_AGENT_PATH),
            "the images carry it there"
        );
    }

    #[test]
    fn log_level_flag_beats_rust_log_which_beats_the_default() {
        let c = parse(&["--log-level", "debug"]);
        assert_eq!(c.log_filter(Some("warn".into())), "debug");
        let c = parse(&[]);
        assert_eq!(c.log_filter(Some("warn".into())), "warn");
        assert_eq!(c.log_filter(None), DEFAULT_LOG_FILTER);
        assert_eq!(c.log_filter(Some(" ".into())), DEFAULT_LOG_FILTER);
    }

    /// A server's 401 body reached the operator's log through rmcp's own error log before.
    #[test]
    fn the_mcp_sdk_never_logs_whatever_the_admin_sets() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        for level in [None, Some("trace"), Some("rmcp=trace,info")] {
            let c = parse(&[]);
            let captured = Captured::default();
            let out = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(
                    c.filter(level.map(String::from))
                        .unwrap_or_else(|e| panic!("{e}")),
                )
                .with_writer(move || out.clone())
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!(target: "rmcp::transport::worker", "HTTP 401: server-sent-secret");
                tracing::error!(target: "ari_operator::mcp_server", "ours");
            });
            let text =
                String::from_utf8_lossy(&captured.0.lock().unwrap_or_else(|e| e.into_inner()))
                    .into_owned();
            assert!(!text.contains("server-sent-secret"), "{level:?}: {text}");
            assert!(text.contains("ours"), "{level:?}: {text}");
        }
    }

    #[test]
    fn insecure_registries_are_a_comma_list_and_empty_by_default() {
        assert!(
            parse(&[])
                .settings()
                .registry
                .insecure_registries
                .is_empty()
        );
        let c = parse(&["--insecure-registry", "127.0.0.1:5000, registry.local:80"]);
        assert_eq!(
            c.settings().registry.insecure_registries,
            ["127.0.0.1:5000", "registry.local:80"]
        );
    }

    #[test]
    fn internal_addresses_are_refused_unless_the_admin_allows_or_lists_them() {
        let default = parse(&[]).settings().registry;
        assert!(default.refuse_internal_addresses);
        assert!(default.delegate_hosts.is_empty() && default.private_registries.is_empty());
        let c = parse(&[
            "--registry-allow-internal-addresses",
            "--registry-delegate-host",
            "auth.docker.io,production.cloudflare.docker.com",
            "--private-registry",
            "harbor.svc:443",
        ])
        .settings()
        .registry;
        assert!(!c.refuse_internal_addresses);
        assert_eq!(
            c.delegate_hosts,
            ["auth.docker.io", "production.cloudflare.docker.com"]
        );
        assert_eq!(c.private_registries, ["harbor.svc:443"]);
    }

    #[test]
    fn log_format_is_json_or_text_only() {
        assert_eq!(parse(&["--log-format", "text"]).log_format, LogFormat::Text);
        assert_eq!(parse(&["--log-format", "json"]).log_format, LogFormat::Json);
        let argv = ["ari-operator", "--log-format", "xml"];
        assert!(Config::try_parse_from(argv).is_err());
    }
}
