//! Hostile: allocates 1 MiB chunks forever, touching every page, until the memory limit stops
//! it (allocation failure aborts, which is a trap).

use std::hint::black_box;

use ari_sdk::{Agent, Output, Task};

struct Balloon;

const CHUNK: usize = 1 << 20;
const PAGE: usize = 4096;

impl Agent for Balloon {
    fn execute(_task: Task) -> Result<Output, String> {
        let mut held: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; CHUNK];
            for (i, page) in chunk.chunks_mut(PAGE).enumerate() {
                page[0] = i as u8;
            }
            held.push(black_box(chunk));
        }
    }
}

ari_sdk::export_agent!(Balloon);
