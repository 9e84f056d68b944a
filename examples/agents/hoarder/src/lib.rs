//! Hostile: writes values into storage until the host refuses, then reports
//! `{"writes":N,"bytes":B,"error":"..."}` (error `null` if it hit its own cap first).
//! Input: value size in bytes (default 1024).

use ari_sdk::host::storage;
use ari_sdk::{Agent, Output, Task};

struct Hoarder;

/// Stops a hoarder on a host without a quota from looping forever.
const MAX_WRITES: u64 = 1_000_000;

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Agent for Hoarder {
    fn execute(task: Task) -> Result<Output, String> {
        let size: usize = match task.input_str()?.trim() {
            "" => 1024,
            s => s
                .parse()
                .map_err(|e| format!("input must be a value size: {e}"))?,
        };
        let value = vec![b'h'; size];
        let mut writes = 0u64;
        let mut error = None;
        while writes < MAX_WRITES {
            match storage::set(&format!("hoard/{writes}"), &value) {
                Ok(()) => writes += 1,
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        let error = error.as_deref().map_or("null".to_string(), json_string);
        let bytes = writes * size as u64;
        Ok(Output::from(format!(
            r#"{{"writes":{writes},"bytes":{bytes},"error":{error}}}"#
        )))
    }
}

ari_sdk::export_agent!(Hoarder);

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_json() {
        assert_eq!(super::json_string("a\"b\\\n"), r#""a\"b\\\u000a""#);
    }
}
