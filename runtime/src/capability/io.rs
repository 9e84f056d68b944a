//! The one small Tokio runtime the capabilities whose clients are async (models, tools) wait
//! on. Host calls run on the guest's thread, which is not a Tokio thread; one runtime per
//! process drives the clients' connections, so connection pools outlive any one task.

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

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

/// A task's cancel token as an external call waits on it: the wake-up is registered with the
/// token at the first call, not when the task starts, since most tasks of most Agents make no
/// such call (and a registration per capability per task showed in the per-task overhead).
pub(crate) struct CallCancel {
    cancel: CancelToken,
    woken: OnceLock<Arc<Notify>>,
}

impl CallCancel {
    pub(crate) fn new(cancel: CancelToken) -> CallCancel {
        CallCancel {
            cancel,
            woken: OnceLock::new(),
        }
    }

    /// The notification the task's cancellation wakes, registered on first use.
    fn woken(&self) -> &Notify {
        self.woken.get_or_init(|| {
            let notify = Arc::new(Notify::new());
            let on_cancel = notify.clone();
            self.cancel.on_cancel(move || on_cancel.notify_one());
            notify
        })
    }

    /// Runs `call` to its end on the I/O runtime, or until the task is cancelled (then the
    /// call is dropped, which closes its connection).
    pub(crate) fn wait<T>(
        &self,
        call: impl std::future::Future<Output = T>,
    ) -> Result<T, CapError> {
        if self.cancel.is_cancelled() {
            return Err(CapError::Cancelled);
        }
        let woken = self.woken();
        io_runtime()?
            .block_on(async {
                tokio::select! {
                    result = call => Some(result),
                    () = woken.notified() => None,
                }
            })
            .ok_or(CapError::Cancelled)
    }
}
