//! Time: returns the task's logical time in nanoseconds since the Unix epoch, read through
//! the host's `now` (default) or, with input `wasi`, through Rust std's WASI wall clock — both
//! must be the same virtualised clock.

use std::time::{SystemTime, UNIX_EPOCH};

use ari_sdk::host::clock;
use ari_sdk::{Agent, Error, Output, Task};

struct Clock;

impl Agent for Clock {
    fn execute(task: Task) -> Result<Output, Error> {
        let nanos = match task.input_str()?.trim() {
            "" | "host" => clock::now()?,
            "wasi" => {
                let since = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_err(|e| format!("wall clock before the epoch: {e}"))?;
                u64::try_from(since.as_nanos()).map_err(|e| e.to_string())?
            }
            other => {
                return Err(Error::Invalid(format!(
                    "input must be empty, `host` or `wasi`, got {other:?}"
                )));
            }
        };
        Ok(Output::from(nanos.to_string()))
    }
}

ari_sdk::export_agent!(Clock);
