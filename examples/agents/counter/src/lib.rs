//! Storage: increments a counter and returns its new value. The input names the key
//! (empty input means `counter`).

use ari_sdk::host::storage;
use ari_sdk::{Agent, Error, Output, Task};

struct Counter;

impl Agent for Counter {
    fn execute(task: Task) -> Result<Output, Error> {
        let key = match task.input_str()?.trim() {
            "" => "counter",
            key => key,
        };
        let next = storage::get_u64(key)?
            .unwrap_or(0)
            .checked_add(1)
            .ok_or("counter overflow")?;
        storage::set_u64(key, next)?;
        Ok(Output::from(next.to_string()))
    }
}

ari_sdk::export_agent!(Counter);
