//! The cancel tokens of the Tasks this executor runs, by Task uid: the Task watch cancels one
//! when its Task gets `spec.cancelled` or is deleted, and the runtime stops that guest within
//! its check interval.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use ari_runtime::CancelToken;

#[derive(Default)]
pub struct Cancels {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    running: HashMap<String, CancelToken>,
    /// Tasks the watch saw cancelled while not running here: a run registered after its claim
    /// raced the cancel is born cancelled. Forgotten when the Task is deleted.
    cancelled: HashSet<String>,
}

impl Cancels {
    /// The token of a run of Task `uid` starting now (already cancelled when `cancelled`, or
    /// when the watch saw the Task cancelled before).
    pub fn register(&self, uid: &str, cancelled: bool) -> CancelToken {
        let token = CancelToken::new();
        let mut inner = self.lock();
        if cancelled || inner.cancelled.contains(uid) {
            token.cancel();
        }
        inner.running.insert(uid.to_owned(), token.clone());
        token
    }

    /// The run of Task `uid` ended.
    pub fn unregister(&self, uid: &str) {
        self.lock().running.remove(uid);
    }

    /// Task `uid` is cancelled: stops its run if this executor runs it (returns whether it
    /// did), and remembers it for a run registered later.
    pub fn cancel(&self, uid: &str) -> bool {
        let mut inner = self.lock();
        inner.cancelled.insert(uid.to_owned());
        match inner.running.get(uid) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Task `uid` is gone: stops its run, if any, and forgets it.
    pub fn deleted(&self, uid: &str) {
        let mut inner = self.lock();
        inner.cancelled.remove(uid);
        if let Some(token) = inner.running.get(uid) {
            token.cancel();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_registered_run_is_cancelled_and_only_until_it_ends() {
        let cancels = Cancels::default();
        let token = cancels.register("uid-1", false);
        assert!(!cancels.cancel("uid-2"));
        assert!(cancels.cancel("uid-1"));
        assert!(token.is_cancelled());
        cancels.unregister("uid-1");
        assert!(!cancels.cancel("uid-1"));
        assert!(
            cancels.register("uid-3", true).is_cancelled(),
            "born cancelled"
        );
    }

    #[test]
    fn a_cancel_seen_before_the_run_registered_still_cancels_it_until_the_task_is_deleted() {
        let cancels = Cancels::default();
        assert!(!cancels.cancel("uid-1"), "not running yet");
        assert!(cancels.register("uid-1", false).is_cancelled());
        cancels.unregister("uid-1");
        cancels.deleted("uid-1");
        assert!(
            !cancels.register("uid-1", false).is_cancelled(),
            "forgotten with the Task"
        );
    }
}
