//! The one small Tokio runtime the capabilities whose clients are async (models, tools) wait
//! on. Host calls run on the guest's thread, which is not a Tokio thread; one runtime per
//! process drives the clients' connections, so connection pools outlive any one task.

use std::sync::OnceLock;

use super::CapError;
use crate::cancel::CancelToken;

/// The process's I/O runtime, started on first use.
pub(crate) fn io_runtime() -> Result<&'static tokio::runtime::Runtime, CapError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ari-host-io")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| CapError::Failed(format!("no I/O runtime: {e}")))
}

/// Runs `call` to its end on the I/O runtime, or until the task is cancelled (then the call
/// is dropped, which closes its connection). `cancelled` is woken by the task's cancel token.
pub(crate) fn wait<T>(
    cancel: &CancelToken,
    cancelled: &tokio::sync::Notify,
    call: impl std::future::Future<Output = T>,
) -> Result<T, CapError> {
    if cancel.is_cancelled() {
        return Err(CapError::Cancelled);
    }
    io_runtime()?
        .block_on(async {
            tokio::select! {
                result = call => Some(result),
                () = cancelled.notified() => None,
            }
        })
        .ok_or(CapError::Cancelled)
}
