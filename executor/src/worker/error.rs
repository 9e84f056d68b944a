//! Why the worker could not start or keep serving.

/// Errors that stop the worker (task-level failures become Task status, never this).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("module: {0}")]
    Module(String),
    #[error("runtime: {0}")]
    Runtime(#[from] ari_runtime::RuntimeError),
    #[error("serving metrics: {0}")]
    Serve(#[from] std::io::Error),
}
