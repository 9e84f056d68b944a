//! Hostile: never returns. Only fuel or the deadline stops it.

use std::hint::black_box;

use ari_sdk::{Agent, Output, Task};

struct Spin;

impl Agent for Spin {
    fn execute(task: Task) -> Result<Output, String> {
        let mut x = task.input.len() as u64;
        loop {
            // black_box keeps the optimiser from proving the loop side-effect free.
            x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}

ari_sdk::export_agent!(Spin);
