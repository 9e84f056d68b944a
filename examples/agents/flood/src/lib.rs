//! Hostile: returns a huge output. Input: size in MiB (default 64).

use ari_sdk::{Agent, Output, Task};

struct Flood;

impl Agent for Flood {
    fn execute(task: Task) -> Result<Output, String> {
        let mib: usize = match task.input_str()?.trim() {
            "" => 64,
            s => s
                .parse()
                .map_err(|e| format!("input must be a size in MiB: {e}"))?,
        };
        let len = mib.checked_mul(1 << 20).ok_or("size overflows")?;
        Ok(Output::from(vec![b'x'; len]))
    }
}

ari_sdk::export_agent!(Flood);
