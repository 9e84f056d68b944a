//! Failures remembered per reference and credentials, so a retry within the backoff gets the
//! same answer without asking the registry again: a junk layer is downloaded once per backoff
//! period, not once per reconcile.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::{Credentials, Error};

/// The first wait after a failure; each further failure doubles it up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_secs(5);
/// The longest wait: a fixed registry is tried again within this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Most entries kept; past it expired ones are dropped, then the oldest.
const MAX_ENTRIES: usize = 1024;

/// How long to wait before the attempt after `failures` failures in a row (at least one).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_MIN
        .saturating_mul(1u32 << doublings)
        .min(BACKOFF_MAX)
}

/// What an operation is asked about: the operation and reference, and whose credentials.
pub type Key = (&'static str, String, Credentials);

struct Failure {
    error: Error,
    failures: u32,
    retry_at: Instant,
}

/// Recent failures. Not a cache of successes: content that pulled once is cached by digest on
/// disk, and tags must be asked again.
#[derive(Default)]
pub struct Failures {
    entries: HashMap<Key, Failure>,
}

impl Failures {
    /// The remembered error for `key` while its backoff lasts.
    pub fn current(&self, key: &Key, now: Instant) -> Option<Error> {
        self.entries
            .get(key)
            .filter(|f| now < f.retry_at)
            .map(|f| f.error.clone())
    }

    /// Records the outcome of an attempt: a failure extends the backoff, a success forgets.
    pub fn record(&mut self, key: Key, outcome: Result<(), &Error>, now: Instant) {
        let error = match outcome {
            Ok(()) => {
                self.entries.remove(&key);
                return;
            }
            Err(e) => e.clone(),
        };
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries.retain(|_, f| now < f.retry_at);
            if self.entries.len() >= MAX_ENTRIES
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, f)| f.retry_at)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        let failures = self.entries.get(&key).map_or(0, |f| f.failures) + 1;
        self.entries.insert(
            key,
            Failure {
                error,
                failures,
                retry_at: now + backoff(failures),
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_five_seconds_to_five_minutes() {
        let cases = [
            (0, 5),
            (1, 5),
            (2, 10),
            (3, 20),
            (6, 160),
            (7, 300),
            (40, 300),
            (u32::MAX, 300),
        ];
        for (failures, secs) in cases {
            assert_eq!(backoff(failures), Duration::from_secs(secs), "{failures}");
        }
    }

    fn key(r: &str) -> Key {
        ("pull", r.to_string(), Credentials::Anonymous)
    }

    #[test]
    fn a_failure_is_answered_until_its_backoff_ends_and_a_success_forgets_it() {
        let mut f = Failures::default();
        let t0 = Instant::now();
        let err = Error::NotFound("r".into());
        f.record(key("r"), Err(&err), t0);
        assert!(f.current(&key("r"), t0 + Duration::from_secs(4)).is_some());
        assert!(f.current(&key("r"), t0 + Duration::from_secs(5)).is_none());
        // Other credentials are another question.
        let other = ("pull", "r".to_string(), Credentials::basic("u", "p"));
        assert!(f.current(&other, t0).is_none());
        // A second failure doubles the wait.
        let t1 = t0 + Duration::from_secs(5);
        f.record(key("r"), Err(&err), t1);
        assert!(f.current(&key("r"), t1 + Duration::from_secs(9)).is_some());
        f.record(key("r"), Ok(()), t1);
        assert!(f.current(&key("r"), t1).is_none());
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut f = Failures::default();
        let now = Instant::now();
        let err = Error::NotFound("r".into());
        for i in 0..(MAX_ENTRIES + 10) {
            f.record(key(&i.to_string()), Err(&err), now);
        }
        assert_eq!(f.len(), MAX_ENTRIES);
    }
}
