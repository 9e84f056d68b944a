//! Pod IPs: every pod gets its own loopback address so two pods can bind the same port.
//! Linux routes all of 127.0.0.0/8 to `lo`, so no interface set-up is needed.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The next unused pod IP of this process: `127.<B>.<n/250>.<n%250+1>`, where B derives from
/// the process id so two test processes on one machine rarely collide.
pub(crate) fn allocate() -> Ipv4Addr {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let b = 10 + (std::process::id() % 240) as u8;
    let c = ((n / 250) % 256) as u8;
    let d = (n % 250) as u8 + 1;
    Ipv4Addr::new(127, b, c, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn addresses_are_distinct_loopback() {
        let a = super::allocate();
        let b = super::allocate();
        assert_ne!(a, b);
        assert!(a.is_loopback() && b.is_loopback());
    }
}
