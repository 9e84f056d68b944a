//! The cancel tokens of the Tasks this executor runs, by Task uid: the Task watch cancels one
//! when its Task gets `spec.cancelled` or is deleted, and the runtime stops that guest within
//! its check interval.

use std::collections::HashMap;
use std::sync::Mutex;

use ari_runtime::CancelToken;

#[derive(Default)]
pub struct Cancels {
    running: Mutex<HashMap<String, CancelToken>>,
}

impl Cancels {
    /// The token of a run of Task `uid` starting now (already cancelled when `cancelled`).
    pub fn register(&self, uid: &str, cancelled: bool) -> CancelToken {
        let token = CancelToken::new();
        if cancelled {
            token.cancel();
        }
        self.lock().insert(uid.to_owned(), token.clone());
        token
    }

    /// The run of Task `uid` ended.
    pub fn unregister(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Stops the run of Task `uid`, if this executor runs it; whether it did.
    pub fn cancel(&self, uid: &str) -> bool {
        match self.lock().get(uid) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancelToken>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
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
}
