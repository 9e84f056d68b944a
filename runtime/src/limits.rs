//! Per-task ceilings and the `ResourceLimiter` that enforces the memory one.

use std::time::Duration;

pub use ari_model::LimitsApplied;
use serde::{Deserialize, Serialize};

/// What a task may use. Each value is a ceiling; the runtime may clamp it (see [`LimitsApplied`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Fuel budget: about one unit per Wasm instruction, plus the host-call table in `fuel_costs`.
    pub fuel: u64,
    /// Total bytes of all linear memories of the instance.
    pub memory_bytes: u64,
    /// Wall-clock deadline, enforced by epoch interruption.
    pub timeout: Duration,
    pub max_output_bytes: u64,
    pub max_input_bytes: u64,
    /// Token budget of the task's model calls (input and output together), when `models` is
    /// granted.
    pub tokens: u64,
}

pub use ari_model::limits::DEFAULT_TOKENS;

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 1_000_000_000,
            memory_bytes: 64 << 20,
            timeout: Duration::from_secs(30),
            max_output_bytes: 1 << 20,
            max_input_bytes: 1 << 20,
            tokens: DEFAULT_TOKENS,
        }
    }
}

/// Enforces the memory ceiling across all memories of one instance and records the peak.
///
/// Refusing growth returns an error, which traps the guest at the `memory.grow` (or fails
/// instantiation); [`MemoryLimiter::limit_hit`] lets the runtime say that this was the cause.
#[derive(Debug)]
pub struct MemoryLimiter {
    limit: u64,
    total: u64,
    peak: u64,
    hit: Option<String>,
}

/// Table elements one instance may hold; guards host memory against `table.grow` floods.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

impl MemoryLimiter {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            total: 0,
            peak: 0,
            hit: None,
        }
    }

    /// Highest total linear memory the instance reached, in bytes.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Why growth was refused, if it was.
    pub fn limit_hit(&self) -> Option<&str> {
        self.hit.as_deref()
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let delta = desired.saturating_sub(current) as u64;
        let wanted = self.total.saturating_add(delta);
        if wanted > self.limit {
            let msg = format!(
                "memory limit hit: growing linear memory to {wanted} bytes in total exceeds the \
                 limit of {} bytes",
                self.limit
            );
            self.hit = Some(msg.clone());
            return Err(wasmtime::format_err!(msg));
        }
        self.total = wanted;
        self.peak = self.peak.max(wanted);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    // Counts per store (one task): the same ceilings the pool applies per component, so the
    // on-demand allocator bounds them too.
    fn instances(&self) -> usize {
        crate::engine::MAX_CORE_INSTANCES_PER_COMPONENT as usize
    }

    fn tables(&self) -> usize {
        crate::engine::MAX_TABLES_PER_COMPONENT as usize
    }

    fn memories(&self) -> usize {
        crate::engine::MAX_MEMORIES_PER_COMPONENT as usize
    }
}

/// WASI resources (streams, pollables, …) one task may hold at once; a guest leaking handles
/// gets an error from WASI instead of growing host memory.
pub const MAX_WASI_HANDLES: usize = 4096;

/// The task's WASI resource table, bounded by [`MAX_WASI_HANDLES`].
pub fn resource_table() -> wasmtime::component::ResourceTable {
    let mut table = wasmtime::component::ResourceTable::new();
    table.set_max_capacity(MAX_WASI_HANDLES);
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn a_task_cannot_hold_more_wasi_handles_than_the_bound() {
        let mut table = resource_table();
        for i in 0..MAX_WASI_HANDLES {
            table.push(i).expect("under the bound");
        }
        assert!(table.push(0usize).is_err());
    }

    #[test]
    fn limiter_counts_all_memories_and_records_peak() {
        let mut l = MemoryLimiter::new(100);
        assert!(l.memory_growing(0, 60, None).expect("first"));
        assert!(l.memory_growing(0, 40, None).expect("second memory"));
        assert_eq!(l.peak(), 100);
        assert!(l.memory_growing(40, 41, None).is_err());
        assert!(l.limit_hit().is_some_and(|m| m.contains("memory limit")));
        assert_eq!(l.peak(), 100);
    }
}
