//! What a task used, measured by the host (never taken from the guest's own claims).

use std::time::Duration;

pub use ari_model::ResourcesUsed;

/// CPU time consumed so far by the calling thread, in nanoseconds.
///
/// Tasks run synchronously on one thread, so the difference of two readings is exactly the
/// CPU the task cost, unaffected by other tasks on other threads.
pub fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always supported
    // on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Whole milliseconds of CPU the calling thread used since `start` (a [`thread_cpu_nanos`]
/// reading taken after the wall clock began `wall` ago).
///
/// A thread cannot use more CPU than the wall time that passed, so under a millisecond of wall
/// time the answer is 0 without a second reading: the vDSO does not serve thread CPU clocks,
/// and that syscall was a few per cent of a short task.
pub fn cpu_millis_since(start: u64, wall: Duration) -> u64 {
    if wall < Duration::from_millis(1) {
        return 0;
    }
    thread_cpu_nanos().saturating_sub(start) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_millis_counts_whole_milliseconds_and_none_under_one_of_wall_time() {
        let wall = std::time::Instant::now();
        let start = thread_cpu_nanos();
        assert_eq!(cpu_millis_since(start, Duration::ZERO), 0);
        // Spin until the thread has used 2 ms of CPU: at least as much wall time has passed.
        let mut x = 0u64;
        while thread_cpu_nanos().saturating_sub(start) < 2_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_millis_since(start, wall.elapsed()) >= 2);
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let before = thread_cpu_nanos();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_nanos() > before);
    }

    #[test]
    fn serializes_camel_case() {
        let json = serde_json::to_value(ResourcesUsed::default()).expect("json");
        for key in [
            "fuel",
            "cpuMillis",
            "memoryBytes",
            "storageBytes",
            "networkBytes",
            "wallMillis",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }
}
