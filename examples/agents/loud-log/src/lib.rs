//! Hostile: floods the log — one huge line through the host `log` call, very many short lines,
//! and huge lines on stdout and stderr — then succeeds with what it sent.
//!
//! Input: `MIB LINES` (defaults `8 100000`): the size of each huge line in MiB and the number of
//! short lines. Output: `{"bytes":B,"lines":L}`, what it tried to log. The host keeps at most
//! its log budget and says how much it dropped.

use std::io::Write;

use ari_sdk::host::log;
use ari_sdk::{Agent, Output, Task};

struct LoudLog;

impl Agent for LoudLog {
    fn execute(task: Task) -> Result<Output, String> {
        let input = task.input_str()?;
        let mut words = input.split_whitespace();
        let mib: usize = words
            .next()
            .map_or(Ok(8), str::parse)
            .map_err(|e| format!("MIB: {e}"))?;
        let count: u64 = words
            .next()
            .map_or(Ok(100_000), str::parse)
            .map_err(|e| format!("LINES: {e}"))?;
        let huge = "A".repeat(mib << 20);
        let (mut bytes, mut lines) = (0u64, 0u64);

        log::error(&huge);
        bytes += huge.len() as u64;
        lines += 1;
        // Many lines in one call, then many calls.
        let batch = "line\n".repeat(count as usize);
        log::info(&batch);
        bytes += batch.len() as u64;
        lines += count;
        for i in 0..count {
            log::warn(&format!("line {i}"));
            lines += 1;
            bytes += 5 + i.to_string().len() as u64;
        }
        drop(batch);
        let mut out = std::io::stdout();
        let _ = out.write_all(huge.as_bytes());
        let _ = out.write_all(b"\n");
        let _ = std::io::stderr().write_all(huge.as_bytes());
        bytes += 2 * huge.len() as u64 + 1;
        lines += 2;
        Ok(Output::from(format!(
            r#"{{"bytes":{bytes},"lines":{lines}}}"#
        )))
    }
}

ari_sdk::export_agent!(LoudLog);
