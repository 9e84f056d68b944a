//! The task's logical clock (capability `timeAccess`). It starts at the task's recorded start time
//! and advances one microsecond per read, so a replay sees the same values.

use std::time::{Duration, SystemTime};

use super::wit;
use crate::Error;

/// Nanoseconds since the Unix epoch.
pub fn now() -> Result<u64, Error> {
    wit::now().map_err(Error::from)
}

/// [`now`] as a [`SystemTime`].
pub fn now_system_time() -> Result<SystemTime, Error> {
    Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(now()?))
}
