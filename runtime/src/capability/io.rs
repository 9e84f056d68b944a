//! What the capabilities that call out (models, tools) share: the one small Tokio runtime they
//! wait on, what a host loaded for them, how a call ends, and what the guest gets of that.
//! Host calls run on the guest's thread, which is not a Tokio thread; one runtime per process
//! drives the clients' connections, so connection pools outlive any one task.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use super::CapError;
use crate::cancel::CancelToken;
use crate::host::{Cx, check_trace};

/// What a host loaded for an agent's outside calls: each granted name resolved to what it
/// calls (with its credentials, if any) and limits, and the client that calls them. The
/// executor builds it from the namespace's declarations and their marked Secrets; `ari run`
/// from its flags; `ari verify` from the signed `limitsApplied`, with no client and no
/// credentials.
#[derive(Clone)]
pub struct Loaded<T, C> {
    by_name: BTreeMap<String, T>,
    client: Option<C>,
}

/// What a [`Loaded`] entry is granted as.
pub trait Named {
    fn name(&self) -> &str;
}

impl Named for ari_llm::Model {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for ari_mcp::ToolServer {
    fn name(&self) -> &str {
        &self.name
    }
}

impl<T, C> Default for Loaded<T, C> {
    fn default() -> Self {
        Self {
            by_name: BTreeMap::new(),
            client: None,
        }
    }
}

impl<T: std::fmt::Debug, C> std::fmt::Debug for Loaded<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Entries print without credentials (`ApiKey` and `Secret` redact themselves).
        f.debug_struct("Loaded")
            .field("by_name", &self.by_name)
            .field("live", &self.client.is_some())
            .finish()
    }
}

impl<T: Named, C> Loaded<T, C> {
    /// What a live run calls through `client`.
    pub fn live(client: C, entries: impl IntoIterator<Item = T>) -> Self {
        Self {
            by_name: Self::by_name(entries),
            client: Some(client),
        }
    }

    /// What a replay only names: no client, no credentials.
    pub fn replayed(entries: impl IntoIterator<Item = T>) -> Self {
        Self {
            by_name: Self::by_name(entries),
            client: None,
        }
    }

    fn by_name(entries: impl IntoIterator<Item = T>) -> BTreeMap<String, T> {
        entries
            .into_iter()
            .map(|e| (e.name().to_owned(), e))
            .collect()
    }
}

impl<T, C> Loaded<T, C> {
    /// The entry loaded under `name`.
    pub fn get(&self, name: &str) -> Option<&T> {
        self.by_name.get(name)
    }

    /// Every entry loaded, by name.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.by_name.values()
    }

    /// The client, in a live run.
    pub(crate) fn client(&self) -> Option<&C> {
        self.client.as_ref()
    }
}

/// What an outside call came to, for the host function.
pub(crate) enum Ending<T, E> {
    /// The guest's answer or typed error.
    Done(Result<T, E>),
    /// The task's deadline passed during the call: the task ends as the epoch would end it.
    Deadline,
}

/// What the guest gets of a call's ending: its answer or typed error (`to_wit`); a denial
/// (`denial` gives its message) is noted, so the task ends `CapabilityDenied`; a deadline or
/// cancellation ends the task there; a diverged replay fails it.
pub(crate) fn settle<T, E, W>(
    cx: &mut Cx<'_>,
    ending: Result<Ending<T, E>, CapError>,
    denial: fn(&E) -> Option<&String>,
    to_wit: fn(E) -> W,
) -> wasmtime::Result<Result<T, W>> {
    check_trace(cx)?;
    match ending {
        Ok(Ending::Done(Ok(answer))) => Ok(Ok(answer)),
        Ok(Ending::Done(Err(error))) => {
            if let Some(message) = denial(&error) {
                cx.data().caps().note_denial(message.clone());
            }
            Ok(Err(to_wit(error)))
        }
        Ok(Ending::Deadline) | Err(CapError::DeadlineExceeded) => {
            Err(wasmtime::Trap::Interrupt.into())
        }
        Err(CapError::Cancelled) => Err(crate::cancel::Cancelled.into()),
        Err(other) => Err(wasmtime::Error::msg(other.to_string())),
    }
}

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
