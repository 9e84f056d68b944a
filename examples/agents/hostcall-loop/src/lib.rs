//! Hostile: calls one cheap host function in a tight loop, forever. Host calls are charged
//! fuel, so only fuel (or the deadline, for WASI calls) stops it.
//!
//! Input (trimmed) picks the call: `log` (default), `hash`, `verify`, `random`, `storage-get`,
//! `storage-set`, `now`, `wasi-clock`, `stdout`.

use std::hint::black_box;
use std::io::Write;

use ari_sdk::host::{clock, crypto, log, random, storage};
use ari_sdk::{Agent, Output, Task};

struct HostcallLoop;

impl Agent for HostcallLoop {
    fn execute(task: Task) -> Result<Output, String> {
        let mode = task.input_str()?.trim().to_owned();
        let call: fn(u64) = match mode.as_str() {
            "" | "log" => |_| log::debug("x"),
            "hash" => |i| {
                black_box(crypto::hash(&i.to_le_bytes()));
            },
            "verify" => |i| {
                black_box(crypto::verify(&i.to_le_bytes(), &[0; 64], &[0; 32]));
            },
            // Errors (capability not granted) are ignored on purpose: the loop goes on.
            "random" => |_| {
                let _ = black_box(random::bytes(1));
            },
            "storage-get" => |_| {
                let _ = black_box(storage::get("k"));
            },
            "storage-set" => |i| {
                let _ = black_box(storage::set("k", &i.to_le_bytes()));
            },
            "now" => |_| {
                let _ = black_box(clock::now());
            },
            "wasi-clock" => |_| {
                black_box(std::time::SystemTime::now());
            },
            "stdout" => |_| {
                let _ = writeln!(std::io::stdout(), "x");
            },
            other => return Err(format!("unknown mode `{other}`")),
        };
        let mut i = 0u64;
        loop {
            call(black_box(i));
            i = i.wrapping_add(1);
        }
    }
}

ari_sdk::export_agent!(HostcallLoop);
