//! CPU shares between the Agents of one executor: the priority each Task's guest thread runs at.
//!
//! A pool pod's Agents share its cores, so a guest that spins must not make a neighbour's
//! short Task wait behind it. Every Task's guest runs on a thread of its own, started for it
//! and ended with it. The executor's own threads (claims, heartbeats, status writes) and a Task
//! of an Agent within its allowance run at the process's priority (*foreground*). A Task runs
//! in the *background* once it has used [`TASK_ALLOWANCE`] of CPU, or from its start when its
//! Agent used more than [`AGENT_ALLOWANCE`] lately: its thread's policy becomes `SCHED_IDLE`,
//! which Linux preempts at once for any foreground thread that wakes (a nice value only lowers
//! a thread's weight, and a woken thread could still wait out the running one's slice: the
//! quiet Agent's p99 beside the neighbours was 2.4× alone with nice 10 to 19, 1.5× with this,
//! BENCHMARKS.md). Background threads share what foreground ones leave by thread, so each
//! Agent's part of it is bounded by its concurrency, as before.
//!
//! Linux lets a thread move to `SCHED_IDLE` but not back without `CAP_SYS_NICE` (or an
//! `RLIMIT_NICE` pods do not get): that is why a thread lives for one Task. With no
//! contention nothing changes: a background Task alone gets every idle core.

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ari_crds::pool::GuestPriorities as Priorities;
use prometheus::IntCounter;
use tracing::debug;

/// CPU a Task uses in the foreground before its thread goes to the background.
pub const TASK_ALLOWANCE: Duration = Duration::from_millis(10);

/// CPU an Agent's finished Tasks may have used lately (summed, halving every [`HALF_LIFE`])
/// for its next Task to start in the foreground: sustained, about a sixth of a core.
pub const AGENT_ALLOWANCE: Duration = Duration::from_millis(250);

/// How fast an Agent's past CPU use is forgotten.
pub const HALF_LIFE: Duration = Duration::from_secs(1);

/// Whether an Agent whose finished Tasks used `recent` lately starts its next in the
/// background.
pub fn starts_in_background(recent: Duration) -> bool {
    recent > AGENT_ALLOWANCE
}

/// `value` after `elapsed` of halving every [`HALF_LIFE`].
fn decayed(value: Duration, elapsed: Duration) -> Duration {
    value.mul_f64(0.5f64.powf(elapsed.as_secs_f64() / HALF_LIFE.as_secs_f64()))
}

thread_local! {
    /// Whether this guest thread was moved to the background (it stays there).
    static IN_BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Moves the calling thread to `SCHED_IDLE`; `false` if it already was.
fn lower_this_thread() -> bool {
    if IN_BACKGROUND.with(|b| b.replace(true)) {
        return false;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread. Moving to
    // SCHED_IDLE needs no privilege.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        // The thread keeps its priority; the Task runs on as before.
        debug!(error = %std::io::Error::last_os_error(), "guest thread not moved to the background");
    }
    true
}

/// One Agent's share of the executor's CPU: its recent use.
pub struct AgentShare {
    priorities: Priorities,
    /// CPU used by finished Tasks, decayed to the instant beside it.
    recent: Mutex<(Duration, Instant)>,
    /// Tasks that ran (in part) in the background.
    background_tasks: IntCounter,
}

impl AgentShare {
    pub fn new(priorities: Priorities, background_tasks: IntCounter) -> Arc<Self> {
        Arc::new(Self {
            priorities,
            recent: Mutex::new((Duration::ZERO, Instant::now())),
            background_tasks,
        })
    }

    /// The CPU this Agent's finished Tasks used lately.
    pub fn recent(&self) -> Duration {
        let (used, at) = *self.recent.lock().unwrap_or_else(|e| e.into_inner());
        decayed(used, at.elapsed())
    }

    /// Runs `task` on a new thread named `ari-guest`, in the foreground or background as this
    /// share says; `task` gets the watch that moves it to the background (`None` when it
    /// starts there or priorities are flat). Resolves with its result (an error if it
    /// panicked).
    pub fn spawn<T: Send + 'static>(
        self: &Arc<Self>,
        task: impl FnOnce(Option<ari_runtime::CpuWatch>) -> T + Send + 'static,
    ) -> std::io::Result<tokio::sync::oneshot::Receiver<T>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let share = self.clone();
        std::thread::Builder::new()
            .name("ari-guest".into())
            .spawn(move || {
                let start = ari_runtime::metering::thread_cpu_nanos();
                let watch = share.begin();
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(watch)));
                let used = ari_runtime::metering::thread_cpu_nanos().saturating_sub(start);
                share.count(Duration::from_nanos(used));
                if let Ok(out) = done {
                    let _ = tx.send(out);
                }
            })?;
        Ok(rx)
    }

    /// On the new thread: goes to the background now, or returns the watch that will.
    fn begin(self: &Arc<Self>) -> Option<ari_runtime::CpuWatch> {
        if self.priorities == Priorities::Flat {
            return None;
        }
        if starts_in_background(self.recent()) {
            self.to_background();
            return None;
        }
        let share = self.clone();
        Some(ari_runtime::CpuWatch {
            after: TASK_ALLOWANCE,
            reached: Arc::new(move || share.to_background()),
        })
    }

    /// Moves the calling (guest) thread to the background, counting its Task once.
    fn to_background(&self) {
        if lower_this_thread() {
            self.background_tasks.inc();
        }
    }

    /// Adds a finished Task's CPU to the Agent's recent use.
    fn count(&self, used: Duration) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        *recent = (
            decayed(recent.0, now.saturating_duration_since(recent.1)) + used,
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_starts_in_the_background_only_past_its_allowance() {
        // (recent CPU, starts in the background)
        let table = [
            (Duration::ZERO, false),
            (AGENT_ALLOWANCE, false),
            (AGENT_ALLOWANCE + Duration::from_millis(1), true),
            (Duration::from_secs(5), true),
        ];
        for (recent, background) in table {
            assert_eq!(starts_in_background(recent), background, "{recent:?}");
        }
    }

    #[test]
    fn past_use_halves_every_half_life() {
        let used = Duration::from_millis(800);
        assert_eq!(decayed(used, Duration::ZERO), used);
        assert_eq!(decayed(used, HALF_LIFE), Duration::from_millis(400));
        assert_eq!(decayed(used, HALF_LIFE * 3), Duration::from_millis(100));
    }

    /// The calling thread's scheduling policy.
    fn own_policy() -> i32 {
        // SAFETY: pid 0 is the calling thread; no pointer is passed.
        unsafe { libc::sched_getscheduler(0) }
    }

    fn share(priorities: Priorities) -> Arc<AgentShare> {
        let counter = IntCounter::new("t", "t").expect("counter");
        AgentShare::new(priorities, counter)
    }

    /// Spins on the calling thread until it used `cpu`.
    fn spin(cpu: Duration) {
        let start = ari_runtime::metering::thread_cpu_nanos();
        let mut x = 0u64;
        while ari_runtime::metering::thread_cpu_nanos().saturating_sub(start)
            < cpu.as_nanos() as u64
        {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[tokio::test]
    async fn a_task_past_its_allowance_is_lowered_on_its_own_thread_and_the_next_starts_fresh() {
        let base = own_policy();
        assert_eq!(base, libc::SCHED_OTHER);
        let share = share(Priorities::Shares);
        let ran = share
            .spawn(move |watch| {
                let before = own_policy();
                let watch = watch.expect("a fresh Agent starts in the foreground");
                spin(TASK_ALLOWANCE);
                (watch.reached)();
                (watch.reached)();
                (before, own_policy())
            })
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(ran, (base, libc::SCHED_IDLE));
        assert_eq!(share.background_tasks.get(), 1, "counted once per Task");
        assert_eq!(own_policy(), base, "the caller's thread is untouched");
        // 10 ms used is within the Agent's allowance: the next Task starts in the foreground.
        let next = share
            .spawn(|watch| (watch.is_some(), own_policy()))
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(next, (true, base));
    }

    #[tokio::test]
    async fn an_agent_past_its_allowance_starts_its_tasks_in_the_background() {
        let share = share(Priorities::Shares);
        let heavy = share
            .spawn(|_| spin(AGENT_ALLOWANCE + Duration::from_millis(20)))
            .expect("thread");
        heavy.await.expect("ran");
        assert!(share.recent() > AGENT_ALLOWANCE);
        let next = share
            .spawn(|watch| (watch.is_none(), own_policy()))
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(next, (true, libc::SCHED_IDLE));
        // Another Agent's share is its own: its Task starts in the foreground.
        let other = self::share(Priorities::Shares);
        let theirs = other
            .spawn(|watch| (watch.is_some(), own_policy()))
            .expect("thread");
        assert_eq!(theirs.await.expect("ran"), (true, libc::SCHED_OTHER));
    }

    #[tokio::test]
    async fn flat_priorities_never_lower_a_task() {
        let share = share(Priorities::Flat);
        let ran = share
            .spawn(|watch| {
                spin(AGENT_ALLOWANCE + Duration::from_millis(20));
                (watch.is_none(), own_policy())
            })
            .expect("thread");
        assert_eq!(ran.await.expect("ran"), (true, libc::SCHED_OTHER));
        let next = share.spawn(|_| own_policy()).expect("thread");
        assert_eq!(next.await.expect("ran"), libc::SCHED_OTHER);
        assert_eq!(share.background_tasks.get(), 0);
    }

    #[tokio::test]
    async fn a_task_that_panics_resolves_to_an_error_and_its_cpu_still_counts() {
        let share = share(Priorities::Shares);
        let ran = share
            .spawn(|_| -> () {
                spin(Duration::from_millis(5));
                panic!("guest thread panics")
            })
            .expect("thread");
        assert!(ran.await.is_err());
        assert!(
            share.recent() >= Duration::from_millis(4),
            "{:?}",
            share.recent()
        );
    }
}
