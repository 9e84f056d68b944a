//! What a running guest is checked for at epoch ticks: its deadline, a cancel, and a CPU watch.
//!
//! Wasmtime calls the store's epoch callback on the guest's own thread when the deadline it set
//! is reached; the callback decides whether the call ends (the deadline passed, the task was
//! cancelled) and when the next check is. The CPU watch lets an executor lower the priority of
//! a CPU-bound guest's thread from that thread itself. Without a cancel token or a watch, one
//! deadline suffices and no callback runs.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Store, UpdateDeadline};

use crate::cancel::{CancelToken, Cancelled, check_ticks};
use crate::engine::EPOCH_TICK;
use crate::metering::thread_cpu_nanos;
use crate::state::TaskState;

/// Called once, on the guest's thread, when the task has used `after` of CPU time on it
/// (checked at epoch ticks, so up to one tick late). Cloned into a storage re-run, where it
/// may be called again.
#[derive(Clone)]
pub struct CpuWatch {
    pub after: Duration,
    pub reached: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for CpuWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuWatch")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

/// The checks still to make, owned by the epoch callback.
struct Checks {
    /// Ticks to the deadline after the current step.
    left: u64,
    cancel: Option<CancelToken>,
    /// The watch not yet reached, and the thread's CPU reading when the task started.
    watch: Option<(CpuWatch, u64)>,
}

impl Checks {
    /// Ticks to the next check: never past the deadline, at most [`check_ticks`] with a cancel
    /// token, and no later than the watch could first be reached (a thread's CPU time cannot
    /// run ahead of the wall clock).
    fn step(&self) -> u64 {
        let mut step = self.left;
        if self.cancel.is_some() {
            step = step.min(check_ticks());
        }
        if let Some((watch, start)) = &self.watch {
            let used = Duration::from_nanos(thread_cpu_nanos().saturating_sub(*start));
            step = step.min(ticks_for(watch.after.saturating_sub(used)));
        }
        step.max(1)
    }

    /// One epoch check: ends the call, or says how many ticks until the next.
    fn check(&mut self) -> wasmtime::Result<UpdateDeadline> {
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Err(Cancelled.into());
        }
        if self.left == 0 {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        if let Some((watch, start)) = &self.watch {
            let used = Duration::from_nanos(thread_cpu_nanos().saturating_sub(*start));
            if used >= watch.after {
                (watch.reached)();
                self.watch = None;
            }
        }
        let next = self.step().min(self.left);
        self.left -= next;
        Ok(UpdateDeadline::Continue(next))
    }
}

/// Whole ticks covering `d`, at least one.
fn ticks_for(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(EPOCH_TICK.as_nanos().max(1)))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Arms the store's epoch deadline: `ticks` from now the call ends `DeadlineExceeded`; a
/// cancelled token ends it with [`Cancelled`] within [`crate::cancel::CHECK_INTERVAL`]; the
/// watch is called once the thread used its CPU since `cpu_start`.
pub(crate) fn arm(
    store: &mut Store<TaskState>,
    ticks: u64,
    cancel: Option<CancelToken>,
    watch: Option<CpuWatch>,
    cpu_start: u64,
) {
    if cancel.is_none() && watch.is_none() {
        store.set_epoch_deadline(ticks);
        return;
    }
    let mut checks = Checks {
        left: ticks,
        cancel,
        watch: watch.map(|w| (w, cpu_start)),
    };
    let first = checks.step().min(ticks);
    checks.left -= first;
    store.set_epoch_deadline(first);
    store.epoch_deadline_callback(move |_| checks.check());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting_watch(after: Duration) -> (CpuWatch, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let reached = Arc::new(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        (CpuWatch { after, reached }, calls)
    }

    #[test]
    fn ticks_cover_a_duration_rounding_up_and_never_zero() {
        assert_eq!(ticks_for(Duration::ZERO), 1);
        assert_eq!(ticks_for(EPOCH_TICK), 1);
        assert_eq!(ticks_for(EPOCH_TICK + Duration::from_nanos(1)), 2);
        assert_eq!(ticks_for(EPOCH_TICK * 7), 7);
    }

    #[test]
    fn a_watch_far_off_waits_for_its_cpu_time_and_a_cancel_checks_every_interval() {
        let (watch, _) = counting_watch(EPOCH_TICK * 50);
        let start = thread_cpu_nanos();
        let watched = Checks {
            left: 1000,
            cancel: None,
            watch: Some((watch.clone(), start)),
        };
        // Less than a tick of CPU has been used, so the first check is 50 ticks off at most.
        assert!((49..=50).contains(&watched.step()), "{}", watched.step());
        let both = Checks {
            left: 1000,
            cancel: Some(CancelToken::new()),
            watch: Some((watch, start)),
        };
        assert_eq!(both.step(), check_ticks().min(50));
        let near_deadline = Checks {
            left: 3,
            cancel: Some(CancelToken::new()),
            watch: None,
        };
        assert_eq!(near_deadline.step(), 3);
    }

    #[test]
    fn the_watch_is_called_once_when_its_cpu_time_is_used_and_the_deadline_still_ends_the_call() {
        let (watch, calls) = counting_watch(Duration::from_millis(2));
        let mut checks = Checks {
            left: 2,
            cancel: None,
            watch: Some((watch, thread_cpu_nanos())),
        };
        // Under 2 ms of CPU: not yet.
        assert!(checks.check().is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        let start = thread_cpu_nanos();
        let mut x = 0u64;
        while thread_cpu_nanos().saturating_sub(start) < 3_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(checks.check().is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(
            checks.watch.is_none(),
            "a reached watch is not called again"
        );
        // The deadline was 2 ticks: two steps of one tick each were taken, the third check ends it.
        while checks.left > 0 {
            assert!(checks.check().is_ok());
        }
        let ended = checks
            .check()
            .err()
            .map(|e| e.downcast::<wasmtime::Trap>().ok());
        assert_eq!(ended, Some(Some(wasmtime::Trap::Interrupt)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_cancelled_token_ends_the_call_before_anything_else_is_checked() {
        let (watch, calls) = counting_watch(Duration::ZERO);
        let cancel = CancelToken::new();
        cancel.cancel();
        let mut checks = Checks {
            left: 5,
            cancel: Some(cancel),
            watch: Some((watch, 0)),
        };
        let err = checks.check().err().expect("cancelled");
        assert!(err.downcast_ref::<Cancelled>().is_some());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}
