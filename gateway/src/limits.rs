//! What one caller, and all callers together, may hold of the gateway: requests per second
//! per caller (a token bucket each) and open streams, in total and per caller.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::error::{Error, Result};

pub struct Limits {
    rate: DefaultKeyedRateLimiter<String>,
    streams: Arc<Streams>,
}

struct Streams {
    max: usize,
    max_per_caller: usize,
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// One open stream; dropping it (the client went away, the stream ended) frees the place.
pub struct StreamPermit {
    streams: Arc<Streams>,
    caller: String,
}

impl Limits {
    pub fn new(per_second: u32, burst: u32, max_streams: usize, max_per_caller: usize) -> Self {
        let per_second = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Self {
            rate: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
            streams: Arc::new(Streams {
                max: max_streams,
                max_per_caller,
                open: Mutex::new((0, HashMap::new())),
            }),
        }
    }

    /// One request by `caller`, or `RateLimited`.
    pub fn request(&self, caller: &str) -> Result<()> {
        self.rate
            .check_key(&caller.to_owned())
            .map_err(|_| Error::RateLimited)?;
        // Forget callers whose buckets are full again, so the map does not grow with them.
        if self.rate.len() > 10_000 {
            self.rate.retain_recent();
        }
        Ok(())
    }

    /// A place for one more stream of `caller`, or `TooManyStreams`.
    pub fn stream(&self, caller: &str) -> Result<StreamPermit> {
        let mut open = self.streams.lock();
        let mine = open.1.get(caller).copied().unwrap_or(0);
        if open.0 >= self.streams.max || mine >= self.streams.max_per_caller {
            return Err(Error::TooManyStreams);
        }
        open.0 += 1;
        open.1.insert(caller.to_owned(), mine + 1);
        Ok(StreamPermit {
            streams: self.streams.clone(),
            caller: caller.to_owned(),
        })
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.lock().0
    }
}

/// TokenReviews for tokens the cache does not know, over all callers. Before a caller is known
/// it has no bucket of its own, so without this a flood of made-up tokens would become a flood
/// of TokenReviews at the API server; with it, the flood gets 429.
pub struct ReviewBudget(DefaultDirectRateLimiter);

impl ReviewBudget {
    pub fn new(per_second: u32, burst: u32) -> Self {
        let per_second = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Self(RateLimiter::direct(
            Quota::per_second(per_second).allow_burst(burst),
        ))
    }

    /// One review, or `RateLimited`.
    pub fn take(&self) -> Result<()> {
        self.0.check().map_err(|_| Error::RateLimited)
    }
}

/// TokenReviews for tokens never accepted, per source address: one address flooding made-up
/// tokens spends its own budget first.
pub struct SourceBudget(DefaultKeyedRateLimiter<IpAddr>);

impl SourceBudget {
    pub fn new(per_second: u32, burst: u32) -> Self {
        let per_second = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Self(RateLimiter::keyed(
            Quota::per_second(per_second).allow_burst(burst),
        ))
    }

    /// One review from `source`, or `RateLimited`.
    pub fn take(&self, source: IpAddr) -> Result<()> {
        self.0.check_key(&source).map_err(|_| Error::RateLimited)?;
        // Forget sources whose buckets are full again, so the map does not grow with them.
        if self.0.len() > 10_000 {
            self.0.retain_recent();
        }
        Ok(())
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<String, usize>)> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_past_its_burst_is_refused_and_others_are_not() {
        let limits = Limits::new(1, 3, 10, 10);
        for _ in 0..3 {
            limits.request("alice").expect("within the burst");
        }
        assert!(matches!(limits.request("alice"), Err(Error::RateLimited)));
        limits.request("bob").expect("bob has his own bucket");
    }

    #[test]
    fn reviews_of_unknown_tokens_share_one_bounded_budget() {
        let budget = ReviewBudget::new(1, 5);
        for _ in 0..5 {
            budget.take().expect("within the burst");
        }
        assert!(matches!(budget.take(), Err(Error::RateLimited)));
    }

    #[test]
    fn streams_are_bounded_per_caller_and_in_total_and_freed_on_drop() {
        let limits = Limits::new(100, 100, 3, 2);
        let a1 = limits.stream("alice").expect("first");
        let _a2 = limits.stream("alice").expect("second");
        assert!(matches!(limits.stream("alice"), Err(Error::TooManyStreams)));
        let _b1 = limits.stream("bob").expect("bob's first");
        assert!(matches!(limits.stream("carol"), Err(Error::TooManyStreams)));
        drop(a1);
        assert_eq!(limits.open_streams(), 2);
        limits.stream("carol").expect("a place was freed");
    }
}
