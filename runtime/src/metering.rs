//! What a task used, measured by the host (never taken from the guest's own claims).

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

#[cfg(test)]
mod tests {
    use super::*;

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
