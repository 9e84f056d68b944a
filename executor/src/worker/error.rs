//! Why the worker could not start or keep serving. Each variant says what to fix: the pod's
//! environment (set by the operator's executor Deployment), the Agent, or the module source.

use std::net::AddrParseError;

/// Errors that stop the worker (task-level failures become Task status, never this).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("module: {0}")]
    Module(#[from] ModuleError),
    #[error("runtime: {0}")]
    Runtime(#[from] ari_runtime::RuntimeError),
    #[error("serving metrics: {0}")]
    Serve(#[from] std::io::Error),
}

/// The two sides of an attestation key the operator did not publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMismatch {
    /// The public key of `ARI_ATTESTATION_KEY`.
    pub have: String,
    /// The namespace's public key the operator published (`ARI_ATTESTATION_PUBLIC_KEY`).
    pub want: String,
}

/// The executor's configuration is wrong: its environment or the Agent it serves.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A variable the executor Deployment always sets is missing.
    #[error("{0} is not set")]
    Missing(&'static str),
    /// A variable holds a value outside what it accepts.
    #[error("{var}={value}: want {want}")]
    Invalid {
        var: &'static str,
        value: String,
        want: &'static str,
    },
    #[error("ARI_METRICS_ADDR: {0}")]
    MetricsAddr(#[from] AddrParseError),
    /// A pool pod's watch of its Agents ended before it listed them.
    #[error("the watch of the pool's Agents ended before it listed them")]
    AgentWatchEnded,
    #[error("ARI_ATTESTATION_KEY is not an Ed25519 key (64 hex digits or PKCS#8 PEM)")]
    AttestationKey,
    #[error(
        "ARI_ATTESTATION_KEY has public key {}, not the namespace's {} that the operator published: the Secret was replaced; refusing to sign",
        .0.have, .0.want
    )]
    AttestationKeyReplaced(KeyMismatch),
    #[error(
        "the Agent grants signing with Secret {secret} key {key:?}, but {var} is not set (does the Secret hold the key? is the executor Deployment current?)"
    )]
    SigningKeyMissing {
        secret: String,
        key: String,
        /// The variable the key should be in.
        var: String,
    },
    #[error(
        "signing Secret {secret} key {key:?} is not an Ed25519 key (64 hex digits or PKCS#8 PEM)"
    )]
    SigningKeyInvalid { secret: String, key: String },
    #[error(
        "the Agent pulls its image with pull secret {secret}, but {var} is not set (does the Secret hold .dockerconfigjson? is the pool's Deployment current?)"
    )]
    PullSecretMissing {
        secret: String,
        /// The variable the docker config should be in.
        var: String,
    },
    /// The Agent's capabilities do not make grants (e.g. a network allow-list entry).
    #[error("{0}")]
    Grants(#[from] ari_runtime::capability::GrantError),
    #[error("the Agent has no uid")]
    AgentWithoutUid,
    #[error("agent storage: {0}")]
    Storage(#[from] ari_runtime::capability::storage::StorageError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The model client could not be built (its TLS setup).
    #[error("model client: {0}")]
    ModelClient(String),
    /// The MCP client could not be built (its TLS setup).
    #[error("tool client: {0}")]
    ToolClient(String),
}

/// The Agent's module could not be fetched, or is not the one the operator validated.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("Agent has no namespace")]
    AgentWithoutNamespace,
    #[error("exactly one of module.configMap, module.url and module.image must be set")]
    SourceCount,
    #[error("the stock agent component {path} cannot be read: {error}")]
    StockAgent {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Declaration(String),
    #[error("ConfigMap {namespace}/{name} has no binaryData key {key:?}")]
    ConfigMapKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error(
        "module digest mismatch: spec.module.sha256 is {want}, the fetched bytes hash to {got}"
    )]
    DeclaredDigest { want: String, got: String },
    #[error(
        "module digest mismatch: the operator validated {want} (ARI_MODULE_DIGEST), the module now hashes to {got}; refusing to run it (was the module source edited?)"
    )]
    PinnedDigest { want: String, got: String },
    #[error("module url must be https: {0}")]
    NotHttps(String),
    #[error("{url}: {error}")]
    BadUrl { url: String, error: url::ParseError },
    #[error("GET {url}: download timed out")]
    DownloadTimedOut { url: String },
    #[error("GET {url}: {error}")]
    Get {
        url: String,
        error: Box<ureq::Error>,
    },
    #[error("GET {url}: {status} without Location")]
    RedirectWithoutLocation { url: String, status: u16 },
    #[error("GET {url}: bad redirect: {error}")]
    BadRedirect { url: String, error: url::ParseError },
    #[error("GET {url}: HTTP {status}")]
    Http { url: String, status: u16 },
    #[error("GET {url}: more than {max} redirects")]
    TooManyRedirects { url: String, max: u32 },
    #[error("reading {url}: module is larger than {max} bytes (after decoding)")]
    TooLarge { url: String, max: u64 },
    #[error("GET {url}: cancelled")]
    Cancelled { url: String },
    #[error("reading {url}: {error}")]
    Read { url: String, error: std::io::Error },
    #[error("cannot start the module download: {0}")]
    DownloadThread(std::io::Error),
    #[error("module download thread failed")]
    DownloadThreadFailed,
    #[error("module cache thread failed: {0}")]
    CacheThread(tokio::task::JoinError),
    #[error("shutdown while loading the module")]
    Shutdown,
    #[error("loading task failed: {0}")]
    LoadTask(tokio::task::JoinError),
    #[error(
        "module.image is set but ARI_MODULE_IMAGE is not (is the executor Deployment current?)"
    )]
    ImageNotSet,
    #[error("ARI_MODULE_IMAGE {0} is not pinned by digest; refusing to pull a tag")]
    ImageNotPinned(String),
    #[error("ARI_MODULE_DIGEST is not set for module.image")]
    DigestNotSet,
    /// A pull secret (`ARI_MODULE_PULL_SECRET`, or a pooled Agent's by its Secret's name) is
    /// no docker config.
    #[error("{from}: {error}")]
    PullSecret { from: String, error: ari_oci::Error },
    #[error(
        "DigestMismatch: {image} holds a component with digest {got}, not the {want} the operator validated (ARI_MODULE_DIGEST); refusing to run it"
    )]
    PulledDigest {
        image: String,
        got: String,
        want: String,
    },
    /// Pulling from the registry failed; the message starts with its condition reason.
    #[error("{}: {}", .0.reason(), .0)]
    Registry(ari_oci::Error),
}

/// Why one Task's handling stopped short (logged; the Task's fate is in its status, which the
/// operator settles), as opposed to [`WorkerError`], which stops the worker.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// No thread could be started to run the guest.
    #[error("cannot start the thread to run the task: {0}")]
    RunThread(#[from] std::io::Error),
    /// The thread that ran the guest panicked.
    #[error("the thread running the task panicked")]
    RunPanicked(#[from] tokio::sync::oneshot::error::RecvError),
}
