//! The harness's error type: one enum so tests can print a readable cause.

use std::path::PathBuf;

/// Result alias for the harness.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the harness could not do what a test asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control-plane binaries are missing or could not be located.
    #[error("control plane binaries: {0}")]
    Binaries(String),
    /// Certificate or key generation failed.
    #[error("certificates: {0}")]
    Certs(#[from] rcgen::Error),
    /// A file-system or process operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or program involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A request to the API server failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The generated kubeconfig could not be loaded.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A component did not become ready before its deadline.
    #[error("{what} not ready after {secs}s: {detail}")]
    Timeout {
        /// The component or condition waited for.
        what: String,
        /// The deadline in seconds.
        secs: u64,
        /// The last observation, to tell why.
        detail: String,
    },
    /// A control-plane process exited while it should be running.
    #[error("{name} exited ({status}); last log lines from {}:\n{tail}", log.display())]
    Exited {
        /// Component name.
        name: String,
        /// Exit status as printed by the OS.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

/// Adds the path to an I/O error, because a bare "No such file" helps nobody.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
