//! Hostile: recurses without bound until the stack overflows.

use std::hint::black_box;

use ari_sdk::{Agent, Output, Task};

struct Deep;

/// Work after the recursive call and a frame-local array whose address escapes keep this from
/// becoming a loop (no tail call, no frame elision).
#[inline(never)]
#[allow(unconditional_recursion, reason = "unbounded recursion is the point")]
fn descend(depth: u64) -> u64 {
    let mut frame = [depth; 16];
    black_box(&mut frame);
    let below = descend(black_box(depth + 1));
    below.wrapping_add(frame[depth as usize % 16])
}

impl Agent for Deep {
    fn execute(_task: Task) -> Result<Output, String> {
        Ok(Output::from(descend(0).to_string()))
    }
}

ari_sdk::export_agent!(Deep);
