//! Cancelling a running task from another thread.
//!
//! The guest cannot be reached from outside its `Store`, so a cancelled task is stopped the way
//! a deadline stops it: at the next epoch check (every [`CHECK_INTERVAL`] at most) the store's
//! epoch callback sees the token and ends the call with [`Cancelled`]. Host calls that block
//! (a child task being awaited) wait on the token too, so they return at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::engine::EPOCH_TICK;

/// Longest a cancelled guest keeps running: the epoch callback runs at least this often.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The epoch ticks between two checks of the token.
pub(crate) fn check_ticks() -> u64 {
    let ticks = CHECK_INTERVAL.as_nanos() / EPOCH_TICK.as_nanos().max(1);
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// Set once, seen by every clone; cheap to check.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// Tokens cancelled with this one (a task's children).
    children: Mutex<Vec<CancelToken>>,
    /// Run once when cancelled (see [`CancelToken::on_cancel`]).
    callbacks: Callbacks,
}

#[derive(Default)]
struct Callbacks(Mutex<Vec<Box<dyn FnOnce() + Send>>>);

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Callbacks")
    }
}

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the task, whatever waits on this token and every [`CancelToken::child`].
    /// Idempotent.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        {
            let _guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.wake.notify_all();
        }
        let children = std::mem::take(
            &mut *self
                .inner
                .children
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for child in children {
            child.cancel();
        }
        let callbacks = std::mem::take(
            &mut *self
                .inner
                .callbacks
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for callback in callbacks {
            callback();
        }
    }

    /// Runs `f` once when this token is cancelled (at once if it already is), on the thread
    /// that cancels it: for a host that must act outside this process, such as marking a
    /// child Task cancelled. `f` should only hand the work off, not block.
    pub fn on_cancel(&self, f: impl FnOnce() + Send + 'static) {
        {
            let mut callbacks = self
                .inner
                .callbacks
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !self.is_cancelled() {
                callbacks.push(Box::new(f));
                return;
            }
        }
        f();
    }

    /// A new token cancelled whenever this one is (already cancelled if this one is); it can
    /// also be cancelled alone.
    pub fn child(&self) -> CancelToken {
        let child = CancelToken::new();
        self.inner
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child.clone());
        if self.is_cancelled() {
            child.cancel();
        }
        child
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Sleeps up to `timeout`, waking early when cancelled; returns whether it was.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cancelled() {
            return true;
        }
        let _ = self
            .inner
            .wake
            .wait_timeout_while(guard, timeout, |_| !self.is_cancelled());
        self.is_cancelled()
    }
}

/// Runs `work` on a thread of its own and returns its result, or `Interrupted::Cancelled`
/// within [`CHECK_INTERVAL`] of `token` being cancelled, whichever comes first. For a host call
/// that blocks on the outside world (an HTTP exchange today; model and tool calls next): the
/// guest's thread cannot be interrupted there by the epoch, so without this a cancelled task
/// would sit in the call until the call's own timeout. A call given up on is left to end on its
/// thread (every such call carries its own timeout, at most the task's deadline) and its
/// result is dropped.
pub fn run_cancellable<T: Send + 'static>(
    token: &CancelToken,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Interrupted> {
    if token.is_cancelled() {
        return Err(Interrupted::Cancelled);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("ari-host-call".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| Interrupted::Failed(format!("no thread for the host call: {e}")))?;
    loop {
        match rx.recv_timeout(CHECK_INTERVAL) {
            Ok(done) => return Ok(done),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !token.is_cancelled() => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return Err(Interrupted::Cancelled),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Interrupted::Failed(
                    "the host call's thread panicked".into(),
                ));
            }
        }
    }
}

/// Why [`run_cancellable`] returned without the call's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Interrupted {
    #[error("the task was cancelled")]
    Cancelled,
    #[error("{0}")]
    Failed(String),
}

/// The error a cancelled call ends with (classified `Cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task was cancelled")]
pub struct Cancelled;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_is_seen_by_every_clone_and_wakes_a_waiter() {
        let token = CancelToken::new();
        let waiter = token.clone();
        let handle = std::thread::spawn(move || waiter.wait_timeout(Duration::from_secs(60)));
        token.cancel();
        assert!(handle.join().expect("waiter thread"), "the waiter saw it");
        assert!(token.clone().is_cancelled());
    }

    #[test]
    fn a_cancel_runs_each_callback_once_and_a_late_callback_at_once() {
        use std::sync::atomic::AtomicUsize;
        let token = CancelToken::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        token.child().on_cancel(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        token.cancel();
        token.cancel();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let counter = runs.clone();
        token.on_cancel(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_child_token_is_cancelled_with_its_parent_but_not_the_other_way() {
        let parent = CancelToken::new();
        let child = parent.child();
        let grandchild = child.child();
        let sibling = parent.child();
        sibling.cancel();
        assert!(!parent.is_cancelled(), "a child does not cancel its parent");
        parent.cancel();
        assert!(child.is_cancelled() && grandchild.is_cancelled());
        assert!(parent.child().is_cancelled(), "born cancelled");
    }

    #[test]
    fn an_uncancelled_wait_times_out_false() {
        assert!(!CancelToken::new().wait_timeout(Duration::from_millis(1)));
    }

    #[test]
    fn a_blocked_host_call_returns_when_its_task_is_cancelled() {
        let token = CancelToken::new();
        assert_eq!(run_cancellable(&token, || 7), Ok(7));
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let canceller = token.clone();
        let cancel = std::thread::spawn(move || canceller.cancel());
        // The call blocks until released, which never happens before the cancel is seen.
        let result = run_cancellable(&token, move || blocked.recv().is_ok());
        cancel.join().expect("cancel thread");
        assert_eq!(result, Err(Interrupted::Cancelled));
        drop(release);
        assert_eq!(
            run_cancellable(&token, || 1),
            Err(Interrupted::Cancelled),
            "a cancelled task starts no call"
        );
    }
}
