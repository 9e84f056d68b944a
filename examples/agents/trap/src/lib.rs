//! Hostile: executes the `unreachable` instruction, the plainest guest trap.

use ari_sdk::{Agent, Output, Task};

struct Trap;

impl Agent for Trap {
    fn execute(_task: Task) -> Result<Output, String> {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        std::process::abort();
    }
}

ari_sdk::export_agent!(Trap);
