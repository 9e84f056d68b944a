//! Polling with a deadline: the only synchronisation tests use (never fixed sleeps).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Default deadline for cluster-side effects on a loaded machine.
pub const DEFAULT: Duration = Duration::from_secs(90);

/// Calls `check` every 200 ms until it returns `Ok`, or fails after `timeout` with the last
/// `Err` it returned (which should describe what was observed instead).
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                secs: timeout.as_secs(),
                detail: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
