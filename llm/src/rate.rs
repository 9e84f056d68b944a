//! A ModelConfig's `requestsPerMinute` and `tokensPerMinute`, enforced before each call by
//! one limiter per model per process (shared by every task of the process).
//!
//! Each limit is a token bucket holding a minute's worth (GCRA form: one "theoretical arrival
//! time" per bucket, in integers). A call reserves one request and its prompt's estimate of
//! tokens before it is sent, waiting for them if the bucket is short; once the provider has
//! reported what the call really used, the difference is charged or given back
//! ([`RateLimiter::settle`]), so a bucket can go into debt and the next calls wait it off.
//! Neither the `governor` crate the executor uses for its status writes nor any other bucket
//! crate here charges after the fact; the arithmetic is a few lines.
//!
//! All arithmetic is in integers: a bucket's clock runs in nanoseconds × its rate, so one unit
//! costs exactly 60·10⁹ of its ticks whatever the rate.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The window each limit is counted over.
const WINDOW: Duration = Duration::from_secs(60);

/// A model's limits, as its ModelConfig declares them (already shared out among the
/// processes that enforce them; see docs/models.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
}

/// One bucket: `rate` units per [`WINDOW`], at most a window's worth saved up.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    rate: u128,
    /// The theoretical arrival time, in ticks since the limiter's origin (ns × rate): the
    /// bucket is full at any time at or after it.
    tat: u128,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        Bucket {
            rate: u128::from(rate.max(1)),
            tat: 0,
        }
    }

    /// Ticks one unit costs.
    fn unit() -> u128 {
        WINDOW.as_nanos()
    }

    /// Ticks a full bucket holds.
    fn capacity(&self) -> u128 {
        self.rate * Self::unit()
    }

    fn ticks(&self, since_origin: Duration) -> u128 {
        since_origin.as_nanos() * self.rate
    }

    /// The `tat` after taking `n` units at `now` (ticks), and the ticks to wait before they
    /// may be used. More than a bucket's worth is counted as a bucket's worth: such a call
    /// goes once the bucket is full, instead of never.
    fn reserve(&self, now: u128, n: u64) -> (u128, u128) {
        let n = u128::from(n).min(self.rate);
        let tat = self.tat.max(now) + n * Self::unit();
        let wait = tat.saturating_sub(self.capacity()).saturating_sub(now);
        (tat, wait)
    }

    /// The same bucket at another rate: its theoretical arrival time stays at the same instant,
    /// so it keeps the fraction of a window it has spent (or owes).
    fn rescale(&mut self, rate: u64) {
        let new = u128::from(rate.max(1));
        // Split to stay in range: ticks × a trillion-per-minute rate would overflow.
        self.tat = self.tat / self.rate * new + self.tat % self.rate * new / self.rate;
        self.rate = new;
    }

    /// Ticks as a duration, rounded up (never wait too little).
    fn duration(&self, ticks: u128) -> Duration {
        let nanos = ticks.div_ceil(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[derive(Debug)]
struct State {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// The limiter of one model in one process.
#[derive(Debug)]
pub struct RateLimiter {
    origin: Instant,
    state: Mutex<State>,
}

impl RateLimiter {
    /// A limiter, or none when no limit is set.
    pub fn new(limits: RateLimits) -> Option<RateLimiter> {
        Self::at(limits, Instant::now())
    }

    /// A limiter whose buckets are full at `origin` (tests give their own clock).
    pub fn at(limits: RateLimits, origin: Instant) -> Option<RateLimiter> {
        if limits == RateLimits::default() {
            return None;
        }
        Some(RateLimiter {
            origin,
            state: Mutex::new(State {
                requests: limits.requests_per_minute.map(Bucket::new),
                tokens: limits.tokens_per_minute.map(Bucket::new),
            }),
        })
    }

    /// Reserves one request and `tokens` (the prompt's estimate) at `now`: `Ok(wait)`, the
    /// time to wait before sending, when it is less than `max_wait`; otherwise nothing is
    /// reserved and `Err(wait)` says how long the call would have had to wait.
    pub fn reserve(
        &self,
        now: Instant,
        tokens: u64,
        max_wait: Duration,
    ) -> Result<Duration, Duration> {
        let since = now.saturating_duration_since(self.origin);
        let mut state = self.lock();
        let mut wait = Duration::ZERO;
        let mut taken = [None, None];
        for (slot, (bucket, n)) in [(state.requests, 1), (state.tokens, tokens)]
            .into_iter()
            .enumerate()
        {
            if let Some(b) = bucket {
                let (tat, ticks) = b.reserve(b.ticks(since), n);
                wait = wait.max(b.duration(ticks));
                taken[slot] = Some(tat);
            }
        }
        if wait >= max_wait && !wait.is_zero() {
            return Err(wait);
        }
        if let (Some(b), Some(tat)) = (state.requests.as_mut(), taken[0]) {
            b.tat = tat;
        }
        if let (Some(b), Some(tat)) = (state.tokens.as_mut(), taken[1]) {
            b.tat = tat;
        }
        Ok(wait)
    }

    /// After the call: charges the tokens it used beyond the `reserved` estimate, or gives
    /// back what it did not use.
    pub fn settle(&self, reserved: u64, used: u64) {
        let mut state = self.lock();
        if let Some(b) = state.tokens.as_mut() {
            // What `reserve` really took: at most a bucket's worth.
            let reserved = reserved.min(u64::try_from(b.rate).unwrap_or(u64::MAX));
            let unit = Bucket::unit();
            if used >= reserved {
                b.tat = b.tat.saturating_add(u128::from(used - reserved) * unit);
            } else {
                b.tat = b.tat.saturating_sub(u128::from(reserved - used) * unit);
            }
        }
    }

    /// Takes a new share of the declared limits, when the number of executor pods they are
    /// shared among changes: each bucket keeps the fraction of a window it has spent. Only
    /// the rates change; a limit not set at the start stays unset.
    pub fn reshare(&self, limits: RateLimits) {
        let mut state = self.lock();
        let State { requests, tokens } = &mut *state;
        for (bucket, rate) in [
            (requests, limits.requests_per_minute),
            (tokens, limits.tokens_per_minute),
        ] {
            if let (Some(b), Some(rate)) = (bucket.as_mut(), rate) {
                b.rescale(rate);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    fn limiter(rpm: Option<u64>, tpm: Option<u64>) -> (RateLimiter, Instant) {
        let origin = Instant::now();
        let limits = RateLimits {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
        };
        (RateLimiter::at(limits, origin).expect("limited"), origin)
    }

    #[test]
    fn no_limit_no_limiter() {
        assert!(RateLimiter::new(RateLimits::default()).is_none());
    }

    #[test]
    fn a_minutes_requests_go_at_once_then_one_per_interval() {
        let (r, t0) = limiter(Some(60), None);
        for i in 0..60 {
            assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::ZERO), "request {i}");
        }
        // The 61st waits one interval (60 s / 60), the 62nd two.
        assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::from_secs(1)));
        assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::from_secs(2)));
        // Five seconds on, two intervals were waited off by the reserved calls: the next
        // waits until t0 + 3 s, which has passed.
        assert_eq!(
            r.reserve(t0 + Duration::from_secs(5), 0, LONG),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn a_wait_longer_than_allowed_reserves_nothing_and_says_how_long() {
        let (r, t0) = limiter(Some(1), None);
        assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::ZERO));
        let short = Duration::from_secs(5);
        assert_eq!(r.reserve(t0, 0, short), Err(Duration::from_secs(60)));
        assert_eq!(
            r.reserve(t0, 0, short),
            Err(Duration::from_secs(60)),
            "the refusal took nothing"
        );
        let later = t0 + Duration::from_secs(58);
        assert_eq!(r.reserve(later, 0, short), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn tokens_are_reserved_by_estimate_and_settled_by_use() {
        let (r, t0) = limiter(None, Some(600));
        assert_eq!(r.reserve(t0, 500, LONG), Ok(Duration::ZERO));
        // The call used 700: 200 more than reserved, so the bucket is 100 in debt.
        r.settle(500, 700);
        // 10 tokens per second come back: 100 of debt plus 50 asked is 15 s.
        assert_eq!(r.reserve(t0, 50, LONG), Ok(Duration::from_secs(15)));
        // A call that used less than reserved gives the rest back.
        let (r, t0) = limiter(None, Some(600));
        assert_eq!(r.reserve(t0, 600, LONG), Ok(Duration::ZERO));
        r.settle(600, 100);
        assert_eq!(r.reserve(t0, 500, LONG), Ok(Duration::ZERO));
        assert_eq!(r.reserve(t0, 10, LONG), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn a_smaller_share_keeps_what_was_spent_and_slows_what_follows() {
        let (r, t0) = limiter(Some(4), Some(600));
        for _ in 0..4 {
            assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::ZERO));
        }
        // Four a minute: the fifth would wait 15 s. Halved, the bucket is still spent, and
        // one request costs 30 s.
        r.reshare(RateLimits {
            requests_per_minute: Some(2),
            tokens_per_minute: Some(300),
        });
        assert_eq!(r.reserve(t0, 0, LONG), Ok(Duration::from_secs(30)));
        // A larger share speeds the next ones up without giving back a window.
        r.reshare(RateLimits {
            requests_per_minute: Some(6),
            tokens_per_minute: None,
        });
        let waited = t0 + Duration::from_secs(30);
        assert_eq!(r.reserve(waited, 0, LONG), Ok(Duration::from_secs(10)));
        // A limit unset at the start stays unset.
        let (r, t0) = limiter(Some(1), None);
        r.reshare(RateLimits {
            requests_per_minute: Some(1),
            tokens_per_minute: Some(1),
        });
        assert_eq!(r.reserve(t0, 1_000, LONG), Ok(Duration::ZERO));
    }

    #[test]
    fn a_prompt_larger_than_a_minute_waits_for_a_full_bucket_not_forever() {
        let (r, t0) = limiter(None, Some(100));
        assert_eq!(r.reserve(t0, 1_000_000, LONG), Ok(Duration::ZERO));
        assert_eq!(r.reserve(t0, 1_000_000, LONG), Ok(Duration::from_secs(60)));
    }

    #[test]
    fn both_limits_wait_for_the_slower_and_rates_beyond_nanoseconds_stay_exact() {
        let (r, t0) = limiter(Some(120), Some(60));
        assert_eq!(r.reserve(t0, 60, LONG), Ok(Duration::ZERO));
        // Requests would allow the next at once; tokens need 30 s for 30.
        assert_eq!(r.reserve(t0, 30, LONG), Ok(Duration::from_secs(30)));
        // A trillion tokens a minute: a unit is 0.06 ns, and still counted exactly.
        let (r, t0) = limiter(None, Some(1_000_000_000_000));
        assert_eq!(r.reserve(t0, 1_000_000_000_000, LONG), Ok(Duration::ZERO));
        assert_eq!(r.reserve(t0, 1_000, LONG), Ok(Duration::from_nanos(60)));
    }
}
