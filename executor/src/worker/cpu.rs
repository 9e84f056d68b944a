//! CPU shares between the Agents of one executor: the priority each Task's guest thread runs at.
//!
//! A pool pod's Agents share its cores, so a guest that spins must not make a neighbour's
//! short Task wait behind it. Every Task's guest runs on a thread of its own, started for it
//! and ended with it. The executor's own threads (claims, heartbeats, status writes) and a Task
//! of an Agent within its allowance run at the process's priority (*foreground*). A Task runs
//! in the *background* once it has used [`TASK_ALLOWANCE`] of CPU, or from its start when its
//! Agent used more than [`AGENT_ALLOWANCE`] lately: its thread's nice value is raised to
//! [`background_nice`] of how many background Tasks its Agent runs, so each Agent's background
//! work weighs about one thread whatever its count, and a foreground thread takes the CPU from
//! any of them at once (nice 0 weighs 1024 against at most 110).
//!
//! Linux lets a process lower its threads' priority but not raise it back without
//! `CAP_SYS_NICE`, which pods drop: that is why a thread lives for one Task. With no
//! contention, nice values change nothing: a background Task alone gets every idle core.
//!
//! Not `SCHED_IDLE`, though it gave the quiet Agent a better tail (BENCHMARKS.md): a guest
//! thread takes locks the executor's own threads need too (stdout for its log lines, the
//! allocator's, the API client's while it waits on a child or an approval), and an idle-class
//! thread holding one can be starved by any other work on the node. The e2e conformance suite
//! saw a pod's heartbeats stop for 4 s that way (`ExecutorLost`). A nice value keeps such a
//! thread a small weight (at least 15 against 1024), so what it holds is let go soon.
//!
//! Only pool pods share the CPU this way: a dedicated pod runs one Agent, with no neighbour
//! to protect, and keeps every guest at the process's priority (see [`for_pod`]).

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

/// The nice value of an Agent's one background thread; more share its weight.
const BACKGROUND_NICE: i32 = 10;
/// The lowest priority Linux has.
const MAX_NICE: i32 = 19;

/// The priorities a worker's guests run at: its pod's setting in a pool pod, flat in a
/// dedicated one (no neighbours).
pub fn for_pod(pooled: bool, setting: Priorities) -> Priorities {
    if pooled { setting } else { Priorities::Flat }
}

/// The nice value for each of an Agent's `running` background threads: weights fall by
/// about 1.25 per nice step, so n threads at 10 + log₁.₂₅ n weigh about one at 10.
pub fn background_nice(running: usize) -> i32 {
    let n = running.max(1) as f64;
    let steps = (n.ln() / 1.25f64.ln()).round();
    (BACKGROUND_NICE + steps as i32).min(MAX_NICE)
}

/// Whether an Agent whose finished Tasks used `recent` lately starts its next in the
/// background.
pub fn starts_in_background(recent: Duration) -> bool {
    recent > AGENT_ALLOWANCE
}

/// `value` after `elapsed` of halving every [`HALF_LIFE`].
fn decayed(value: Duration, elapsed: Duration) -> Duration {
    value.mul_f64(0.5f64.powf(elapsed.as_secs_f64() / HALF_LIFE.as_secs_f64()))
}

/// A thread's kernel id.
type Tid = libc::pid_t;

/// The calling thread's kernel id.
fn gettid() -> Tid {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::gettid() }
}

/// Sets thread `tid`'s nice value (a thread of this process: lowering it is always allowed).
fn set_nice(tid: Tid, nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority reads only its integer arguments; `PRIO_PROCESS` with a thread id
    // sets that one thread's nice value on Linux.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One Agent's share of the executor's CPU: its recent use and its background threads.
pub struct AgentShare {
    priorities: Priorities,
    state: Mutex<ShareState>,
    /// Tasks that ran (in part) in the background.
    background_tasks: IntCounter,
}

struct ShareState {
    /// CPU used by finished Tasks, decayed to `at`.
    recent: Duration,
    at: Instant,
    /// Thread ids of the Agent's background Tasks now running.
    background: Vec<Tid>,
    /// Their nice value: it only rises while any runs (it cannot be lowered).
    nice: i32,
}

impl AgentShare {
    pub fn new(priorities: Priorities, background_tasks: IntCounter) -> Arc<Self> {
        Arc::new(Self {
            priorities,
            state: Mutex::new(ShareState {
                recent: Duration::ZERO,
                at: Instant::now(),
                background: Vec::new(),
                nice: BACKGROUND_NICE,
            }),
            background_tasks,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ShareState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CPU this Agent's finished Tasks used lately.
    pub fn recent(&self) -> Duration {
        let s = self.state();
        decayed(s.recent, s.at.elapsed())
    }

    /// Runs `task` on a new thread named `ari-guest`, in the foreground or background as this
    /// share says; `task` gets the watch that moves it to the background (`None` when it
    /// starts there or priorities are flat). Resolves with its result, or `None` if it panicked.
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
                share.end(Duration::from_nanos(used));
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

    /// Lowers the calling thread to the background, and the Agent's other background threads
    /// with it if there are now more of them.
    fn to_background(&self) {
        let me = gettid();
        let mut s = self.state();
        if s.background.contains(&me) {
            return;
        }
        s.background.push(me);
        s.nice = s.nice.max(background_nice(s.background.len()));
        let nice = s.nice;
        for tid in &s.background {
            // A thread of this process may always be lowered; should it fail, it only keeps
            // a higher priority.
            if let Err(e) = set_nice(*tid, nice) {
                debug!(error = %e, nice, "guest thread priority not lowered");
            }
        }
        self.background_tasks.inc();
    }

    /// On the thread, as its Task ends: counts its CPU and forgets it as a background thread
    /// (before it exits, so no other thread's priority is set through a reused id).
    fn end(&self, used: Duration) {
        let me = gettid();
        let mut s = self.state();
        let now = Instant::now();
        s.recent = decayed(s.recent, now.saturating_duration_since(s.at)) + used;
        s.at = now;
        s.background.retain(|tid| *tid != me);
        if s.background.is_empty() {
            s.nice = BACKGROUND_NICE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agents_background_threads_together_weigh_about_one() {
        // (threads running, nice of each)
        let table = [
            (0, 10),
            (1, 10),
            (2, 13),
            (3, 15),
            (4, 16),
            (6, 18),
            (8, 19),
            (64, 19),
        ];
        for (running, nice) in table {
            assert_eq!(background_nice(running), nice, "{running} threads");
        }
    }

    #[test]
    fn only_pool_pods_share_the_cpu_between_agents() {
        // (pooled, the pod's setting, what its guests get)
        let table = [
            (true, Priorities::Shares, Priorities::Shares),
            (true, Priorities::Flat, Priorities::Flat),
            (false, Priorities::Shares, Priorities::Flat),
            (false, Priorities::Flat, Priorities::Flat),
        ];
        for (pooled, setting, want) in table {
            assert_eq!(
                for_pod(pooled, setting),
                want,
                "pooled={pooled} {setting:?}"
            );
        }
    }

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

    fn own_nice() -> i32 {
        // SAFETY: getpriority reads only its integer arguments. (-1 is also a nice value, but
        // these tests never run at -1.)
        unsafe { libc::getpriority(libc::PRIO_PROCESS, gettid() as libc::id_t) }
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
        let base = own_nice();
        let share = share(Priorities::Shares);
        let ran = share
            .spawn(move |watch| {
                let before = own_nice();
                let watch = watch.expect("a fresh Agent starts in the foreground");
                spin(TASK_ALLOWANCE);
                (watch.reached)();
                (before, own_nice())
            })
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(ran, (base, base.max(background_nice(1))));
        assert_eq!(share.background_tasks.get(), 1);
        assert_eq!(own_nice(), base, "the caller's thread is untouched");
        // 10 ms used is within the Agent's allowance: the next Task starts in the foreground.
        let next = share
            .spawn(|watch| (watch.is_some(), own_nice()))
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(next, (true, base));
    }

    #[tokio::test]
    async fn an_agent_past_its_allowance_starts_its_tasks_in_the_background() {
        let base = own_nice();
        let share = share(Priorities::Shares);
        let heavy = share
            .spawn(|_| spin(AGENT_ALLOWANCE + Duration::from_millis(20)))
            .expect("thread");
        heavy.await.expect("ran");
        assert!(share.recent() > AGENT_ALLOWANCE);
        let next = share
            .spawn(|watch| (watch.is_none(), own_nice()))
            .expect("thread")
            .await
            .expect("ran");
        assert_eq!(next, (true, base.max(background_nice(1))));
        // Another Agent's share is its own: its Task starts in the foreground.
        let other = self::share(Priorities::Shares);
        let theirs = other
            .spawn(|watch| (watch.is_some(), own_nice()))
            .expect("thread");
        assert_eq!(theirs.await.expect("ran"), (true, base));
    }

    #[tokio::test]
    async fn flat_priorities_never_lower_a_task() {
        let base = own_nice();
        let share = share(Priorities::Flat);
        let ran = share
            .spawn(|watch| {
                spin(AGENT_ALLOWANCE + Duration::from_millis(20));
                (watch.is_none(), own_nice())
            })
            .expect("thread");
        assert_eq!(ran.await.expect("ran"), (true, base));
        let next = share.spawn(|_| own_nice()).expect("thread");
        assert_eq!(next.await.expect("ran"), base);
        assert_eq!(share.background_tasks.get(), 0);
    }

    #[tokio::test]
    async fn a_task_that_panics_in_the_background_resolves_to_nothing_and_leaves_no_thread_behind()
    {
        let share = share(Priorities::Shares);
        let ran = share
            .spawn(|watch| -> () {
                if let Some(watch) = watch {
                    (watch.reached)();
                }
                panic!("guest thread panics")
            })
            .expect("thread");
        assert!(ran.await.is_err());
        assert_eq!(share.background_tasks.get(), 1);
        let s = share.state();
        assert!(s.background.is_empty(), "{:?}", s.background);
        assert_eq!(s.nice, BACKGROUND_NICE);
    }
}
