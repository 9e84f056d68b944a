//! Hostile: asks for a 4 GiB linear memory. The memory limit must refuse it before the host
//! commits anything.
//!
//! Input (trimmed): `grow` (default) is one `memory.grow` of 65,536 pages (4 GiB); `steps`
//! grows 1 GiB at a time, four times; `vec` asks the allocator for two 2 GiB vectors.
//! If the memory was granted it returns `granted N bytes` (a sandbox failure); a refused
//! `memory.grow` that returns -1 instead of trapping makes it fail with that message.

use std::hint::black_box;

use ari_sdk::{Agent, Output, Task};

struct MegaMemory;

/// 64 KiB Wasm pages in 4 GiB and in 1 GiB.
const PAGES_4GIB: usize = 65_536;
const PAGES_1GIB: usize = 16_384;

/// `memory.grow` on memory 0; `None` when the engine returned -1.
#[cfg(target_arch = "wasm32")]
fn grow(pages: usize) -> Option<usize> {
    let old = core::arch::wasm32::memory_grow(0, pages);
    (old != usize::MAX).then_some(old)
}

/// Native builds (unit tests) have no linear memory to grow.
#[cfg(not(target_arch = "wasm32"))]
fn grow(_pages: usize) -> Option<usize> {
    None
}

impl Agent for MegaMemory {
    fn execute(task: Task) -> Result<Output, String> {
        let mode = task.input_str()?.trim().to_owned();
        let granted: u64 = match mode.as_str() {
            "" | "grow" => {
                grow(PAGES_4GIB).ok_or("memory.grow(65536 pages) returned -1")?;
                (PAGES_4GIB as u64) << 16
            }
            "steps" => {
                let mut total = 0u64;
                for step in 1..=4 {
                    grow(PAGES_1GIB)
                        .ok_or(format!("memory.grow step {step} (1 GiB) returned -1"))?;
                    total += (PAGES_1GIB as u64) << 16;
                }
                total
            }
            "vec" => {
                let mut held = Vec::new();
                for _ in 0..2 {
                    let mut v: Vec<u8> = Vec::new();
                    v.try_reserve_exact(0x7fff_0000)
                        .map_err(|e| format!("allocation refused: {e}"))?;
                    held.push(black_box(v));
                }
                held.iter().map(|v| v.capacity() as u64).sum()
            }
            other => return Err(format!("unknown mode `{other}`")),
        };
        Ok(Output::from(format!("granted {granted} bytes")))
    }
}

ari_sdk::export_agent!(MegaMemory);
