//! Live logs (`status.liveLog`): whether a running Task's newest guest lines are written now,
//! and how many such writes this pod makes.
//!
//! Every live-log write rewrites the whole Task object (with its input, up to 1 MiB), so they
//! happen only while a gateway stream follows the Task and within a write budget shared by all
//! Tasks of the pod. A stream's gateway marks the Task with the annotation
//! [`ANNOTATION_LIVE_LOG`], whose value is a lease: the RFC 3339 time until which someone
//! follows, renewed while the stream lasts. The chart's admission policy admits that annotation
//! only from the gateway's ServiceAccount, so a Task's author cannot ask for it; a lease that
//! ends further ahead than [`MAX_LEASE`] is not one the gateway wrote and is ignored. The Task
//! watch keeps each run's lease current ([`LiveLogs::seen`]).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use ari_crds::Task;
use ari_crds::names::{ANNOTATION_LIVE_LOG, LIVE_LOG_LEASE};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

/// The longest lease honoured: the gateway renews [`LIVE_LOG_LEASE`] ahead, so anything much
/// further is someone else's annotation (e.g. with the admission policy turned off).
pub const MAX_LEASE: Duration = Duration::from_secs(LIVE_LOG_LEASE.as_secs() * 2);

/// Whether a Task whose live-log annotation is `lease` is followed at `now`: only a lease
/// (an RFC 3339 time) not yet over and at most [`MAX_LEASE`] ahead. The old `"true"`, a
/// malformed value and no annotation all mean no.
pub fn followed(lease: Option<&str>, now: Timestamp) -> bool {
    let Some(until) = lease.and_then(|v| v.parse::<Timestamp>().ok()) else {
        return false;
    };
    let max = SignedDuration::try_from(MAX_LEASE).unwrap_or(SignedDuration::ZERO);
    let ahead = until.duration_since(now);
    ahead > SignedDuration::ZERO && ahead <= max
}

/// The lease annotation of `task`, if any.
fn lease_of(task: &Task) -> Option<String> {
    task.annotations().get(ANNOTATION_LIVE_LOG).cloned()
}

/// Live-log writes per second for the whole pod, and the burst it may save up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRate {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Default for WriteRate {
    fn default() -> Self {
        Self {
            per_second: NonZeroU32::new(4).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// A token bucket over every live-log write of the pod. A write that finds it empty waits for
/// the next publish tick; its lines stay buffered (and go out with the final status at the
/// latest).
pub struct WriteBudget<C: Clock = DefaultClock> {
    bucket: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
}

impl WriteBudget {
    pub fn new(rate: WriteRate) -> Self {
        Self::with_clock(rate, DefaultClock::default())
    }
}

impl<C: Clock> WriteBudget<C> {
    pub fn with_clock(rate: WriteRate, clock: C) -> Self {
        let quota = Quota::per_second(rate.per_second).allow_burst(rate.burst);
        Self {
            bucket: RateLimiter::direct_with_clock(quota, clock),
        }
    }

    /// Takes one write from the budget; `false` when the pod wrote its share already.
    pub fn take(&self) -> bool {
        self.bucket.check().is_ok()
    }
}

/// The pod's live-log state: the lease of each running Task (by uid) and the write budget.
pub struct LiveLogs {
    leases: Mutex<HashMap<String, Option<String>>>,
    pub budget: WriteBudget,
}

impl LiveLogs {
    pub fn new(rate: WriteRate) -> Self {
        Self {
            leases: Mutex::default(),
            budget: WriteBudget::new(rate),
        }
    }

    /// A run of `task` (uid `uid`) starts: its lease is watched until [`Self::unregister`].
    pub fn register(&self, uid: &str, task: &Task) {
        self.lock().insert(uid.to_owned(), lease_of(task));
    }

    pub fn unregister(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// The watch saw `task`: its lease, if it runs here.
    pub fn seen(&self, task: &Task) {
        let Some(uid) = task.uid() else { return };
        if let Some(lease) = self.lock().get_mut(&uid) {
            *lease = lease_of(task);
        }
    }

    /// Whether the run of `uid` is followed now.
    pub fn followed(&self, uid: &str) -> bool {
        let lock = self.lock();
        followed(lock.get(uid).and_then(|l| l.as_deref()), Timestamp::now())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<String>>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn only_a_current_lease_no_further_than_max_lease_means_followed() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let at = |secs: i64| (now + SignedDuration::from_secs(secs)).to_string();
        let max = MAX_LEASE.as_secs() as i64;
        let cases: [(&str, Option<String>, bool); 9] = [
            ("no annotation", None, false),
            (
                "the old \"true\" an author could set",
                Some("true".into()),
                false,
            ),
            ("not a time", Some("soon".into()), false),
            ("a lease still running", Some(at(20)), true),
            ("a lease at the longest", Some(at(max)), true),
            ("a lease too far ahead", Some(at(max + 1)), false),
            (
                "a far-future lease",
                Some("2999-01-01T00:00:00Z".into()),
                false,
            ),
            ("a lease ending now", Some(at(0)), false),
            ("a lease over", Some(at(-5)), false),
        ];
        for (case, lease, want) in cases {
            assert_eq!(followed(lease.as_deref(), now), want, "{case}");
        }
    }

    #[test]
    fn the_budget_caps_writes_across_the_pod_and_refills_at_its_rate() {
        let clock = FakeRelativeClock::default();
        let rate = WriteRate {
            per_second: NonZeroU32::new(4).expect("4"),
            burst: NonZeroU32::new(2).expect("2"),
        };
        let budget = WriteBudget::with_clock(rate, clock.clone());
        assert!(budget.take() && budget.take(), "the burst");
        assert!(!budget.take(), "a third write at once is refused");
        clock.advance(Duration::from_millis(100));
        assert!(
            !budget.take(),
            "not refilled after 100 ms (one write per 250 ms)"
        );
        clock.advance(Duration::from_millis(150));
        assert!(budget.take(), "one write back after 250 ms");
        assert!(!budget.take());
        clock.advance(Duration::from_secs(10));
        assert!(
            budget.take() && budget.take() && !budget.take(),
            "never more than the burst"
        );
    }

    #[test]
    fn the_watch_updates_only_runs_of_this_pod() {
        let logs = LiveLogs::new(WriteRate::default());
        let mut task = Task::new("t", ari_crds::TaskSpec::for_agent("a"));
        task.metadata.uid = Some("uid-1".into());
        logs.seen(&task);
        assert!(logs.lock().is_empty(), "not running here: not tracked");
        logs.register("uid-1", &task);
        assert!(!logs.followed("uid-1"));
        let lease = (Timestamp::now() + SignedDuration::from_secs(20)).to_string();
        task.metadata.annotations = Some([(ANNOTATION_LIVE_LOG.to_owned(), lease)].into());
        logs.seen(&task);
        assert!(logs.followed("uid-1"), "a stream started following");
        logs.unregister("uid-1");
        assert!(!logs.followed("uid-1"));
    }
}
