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

/// Why one Task's handling stopped short (logged; the Task's fate is in its status, which the
/// operator settles), as opposed to [`WorkerError`], which stops the worker.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The blocking thread that ran the component panicked or was cancelled.
    #[error("the thread running the task failed: {0}")]
    RunThread(#[from] tokio::task::JoinError),
}
